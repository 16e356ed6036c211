"""Austere inside pm.sample."""

import numpy as np
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
    # The default test is designed for N (worst-case error 0.02 per decision).
    assert (step.settings.batch_size, step.settings.epsilon) == (500, 0.002)
    assert step.design.error <= 0.02
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
    assert np.asarray(stats["accepted"]).dtype == np.float64


def test_epsilon_zero_reads_all_data(gaussian_model):
    stats = _stats(_sample(gaussian_model, {"epsilon": 0.0}, random_seed=1, draws=30, tune=0))
    assert np.all(np.asarray(stats["batch_size"]) == N)


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


def test_default_design_accounts_for_the_dimension():
    """Above 20 coordinates the default tolerance shrinks as sqrt(20 / D) and three MH
    steps make a draw (one with the exact flow of a Normal prior's Gaussian surrogate,
    whose moves cross the posterior); an explicit tolerance or steps_per_draw is kept."""
    import pymc as pm

    from pymc_minibatch_mh.step_methods.austere import default_tolerance

    assert default_tolerance(5) == default_tolerance(20) == 0.02
    assert default_tolerance(80) == pytest.approx(0.01)
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 400, 4_000)
    y = rng.normal(size=4_000)
    with pm.Model():
        a = pm.StudentT("a", nu=5, mu=0, sigma=1, shape=400)
        pm.Normal("y", a[groups], 1.0, observed=y)
        wide = Austere(progressbar=False)
        chosen = Austere(tolerance=0.02, steps_per_draw=1, progressbar=False)
    with pm.Model():
        a = pm.Normal("a", 0, 1, shape=400)
        pm.Normal("y", a[groups], 1.0, observed=y)
        flow = Austere(progressbar=False)
    assert wide.steps_per_draw == 3 and not wide.uses_gaussian_flow
    assert flow.steps_per_draw == 1 and flow.uses_gaussian_flow
    assert flow.design.error <= default_tolerance(400)
    assert wide.design.error <= default_tolerance(400) < 0.02
    assert chosen.steps_per_draw == 1 and chosen.design.error <= 0.02
    assert chosen.design.error > default_tolerance(400)  # negative control: not shrunk
