"""Austere inside pm.sample."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from step_sampling import N_DATA, sample_step

from pymc_minibatch_mh import Austere
from pymc_minibatch_mh.diagnostics import posterior as _posterior
from pymc_minibatch_mh.diagnostics import sample_stats as _stats

N = N_DATA
STATS = {"accepted", "accept", "batch_size", "n_lik_evals", "scaling", "t_stat"}


def _sample(model, step_kwargs=None, **kwargs):
    return sample_step(model, Austere, step_kwargs, **kwargs)


def test_defaults_run_and_report_stats(gaussian_model):
    with gaussian_model:
        step = Austere()
    assert (step.settings.batch_size, step.settings.epsilon) == (500, 0.01)
    assert step.settings.temperature == 1.0 and step.target_accept == 0.234
    idata = _sample(gaussian_model, random_seed=1)
    stats = _stats(idata)
    assert STATS <= set(stats.data_vars)
    assert np.asarray(_posterior(idata)["mu"]).shape == (1, 100)
    batch = np.asarray(stats["batch_size"])
    assert np.all(np.isin(batch, [0, 500, 1000, 1500, 2000]))  # grows by 500, capped at N
    np.testing.assert_array_equal(np.asarray(stats["n_lik_evals"]), 2 * batch)
    assert np.all(np.isnan(np.asarray(stats["accept"])))
    t_stat = np.asarray(stats["t_stat"])
    assert np.all(np.isinf(t_stat[batch == N]))  # s = 0 on the full data
    assert np.all(np.isfinite(t_stat[(batch > 0) & (batch < N)]))
    assert np.asarray(stats["accepted"]).dtype == bool


def test_epsilon_zero_reads_all_data(gaussian_model):
    stats = _stats(_sample(gaussian_model, {"epsilon": 0.0}, random_seed=1, draws=30, tune=0))
    assert np.all(np.asarray(stats["batch_size"]) == N)


def test_compound_step_with_nuts_on_other_variables(rng):
    y = rng.normal(1.0, 2.0, size=N)
    with pm.Model():
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", mu, sigma, observed=y)
        idata = pm.sample(
            step=[Austere([mu])],
            draws=200,
            tune=200,
            chains=1,
            random_seed=4,
            progressbar=False,
            compute_convergence_checks=False,
        )
    stats = _stats(idata)
    assert "t_stat" in stats and "diverging" in stats  # both samplers ran
    sigma_draws = np.asarray(_posterior(idata)["sigma"]).ravel()
    assert abs(sigma_draws[100:].mean() - y.std()) < 0.2


def test_invalid_proposals_are_rejected_without_crashing(rng):
    y = rng.normal(0.5, 1.0, size=N)
    with pm.Model():
        mu = pm.Normal("mu", 0, 10)
        # Below 0.48 the prior potential is -inf; above 0.52 the likelihood scale is
        # negative, so every datum's log-density is -inf (NaN ratios).
        pm.Potential("wall", pt.switch(mu < 0.48, -np.inf, 0.0))
        pm.Normal("y", mu, pt.switch(mu > 0.52, -1.0, 1.0), observed=y)
        idata = pm.sample(
            step=Austere(scaling=0.03, tune=False),
            draws=200,
            tune=0,
            chains=1,
            random_seed=5,
            progressbar=False,
            initvals={"mu": 0.5},
            compute_convergence_checks=False,
        )
    mu_draws = np.asarray(_posterior(idata)["mu"])
    assert np.all((mu_draws >= 0.48) & (mu_draws <= 0.52))
    stats = _stats(idata)
    batch = np.asarray(stats["batch_size"])
    t_stat = np.asarray(stats["t_stat"])
    accepted = np.asarray(stats["accepted"])
    assert np.any(batch == 0)  # the prior wall: no data touched
    assert np.any((batch > 0) & np.isnan(t_stat) & ~accepted)  # the likelihood wall
    assert np.any(accepted)  # the chain still moves


def test_steps_per_draw_accumulates_work(gaussian_model):
    one = _stats(_sample(gaussian_model, random_seed=1))
    five = _stats(_sample(gaussian_model, {"steps_per_draw": 5}, random_seed=1))
    assert np.mean(five["n_lik_evals"]) > 3 * np.mean(one["n_lik_evals"])
    assert np.all(np.asarray(five["batch_size"]) >= 5 * 500)
    assert np.all(~np.isnan(np.asarray(five["t_stat"])))  # the last inner test's statistic


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": 0}, "temperature"),
        ({"batch_size": 1}, "batch_size"),
        ({"batch_size": 10.5}, "batch_size"),
        ({"epsilon": 0.5}, "epsilon"),
        ({"epsilon": -0.01}, "epsilon"),
        ({"steps_per_draw": 0}, "steps_per_draw"),
        ({"target_accept": 1.5}, "target_accept"),
        ({"scaling": -1.0}, "scaling"),
        ({"proposal_cov": np.eye(3)}, "proposal_cov"),
    ],
)
def test_bad_arguments(gaussian_model, kwargs, match):
    with gaussian_model, pytest.raises(ValueError, match=match):
        Austere(**kwargs)
