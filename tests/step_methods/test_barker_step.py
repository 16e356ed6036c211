"""MinibatchBarker inside pm.sample."""

import numpy as np
import pymc as pm
import pytest
from step_sampling import N_DATA, sample_step

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.diagnostics import posterior as _posterior
from pymc_minibatch_mh.diagnostics import sample_stats as _stats

N = N_DATA
STATS = {"accepted", "accept", "batch_size", "n_lik_evals", "scaling", "delta_var", "clt_error"}


def _sample(model, step_kwargs=None, **kwargs):
    return sample_step(model, MinibatchBarker, step_kwargs, **kwargs)


def test_defaults_run_and_report_stats(gaussian_model):
    idata = _sample(gaussian_model, random_seed=1)
    stats = _stats(idata)
    assert STATS <= set(stats.data_vars)
    assert np.asarray(_posterior(idata)["mu"]).shape == (1, 100)
    batch = np.asarray(stats["batch_size"])
    assert np.all((batch >= 0) & (batch <= N))
    assert np.all(np.asarray(stats["n_lik_evals"]) >= batch)
    accepted = np.asarray(stats["accepted"])
    assert accepted.dtype == np.float64  # as pm.Metropolis reports it
    assert set(np.unique(accepted)) <= {0.0, 1.0}


def test_default_block_takes_every_continuous_variable(rng):
    y = rng.normal(1.0, 1.0, size=N)
    with pm.Model():
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("z", 0, 1)  # not in the likelihood: its prior is cheap, so it is sampled too
        pm.Normal("y", mu, 1.0, observed=y)
        step = MinibatchBarker(progressbar=False)
    assert [v.name for v in step.vars] == ["mu", "z"]
    assert step.control_variates


def test_variables_outside_a_given_block_get_nuts(rng):
    y = rng.normal(1.0, 1.0, size=N)
    with pm.Model():
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("z", 0, 1)  # not in the likelihood
        pm.Normal("y", mu, 1.0, observed=y)
        step = MinibatchBarker(vars=[mu], progressbar=False)
        assert [v.name for v in step.vars] == ["mu"]
        idata = pm.sample(
            step=step,
            draws=300,
            tune=300,
            chains=1,
            random_seed=2,
            progressbar=False,
            compute_convergence_checks=False,
        )
    stats = _stats(idata)
    assert "batch_size" in stats and "diverging" in stats  # both samplers ran
    z = np.asarray(_posterior(idata)["z"]).ravel()
    assert abs(z.mean()) < 0.3 and 0.7 < z.std() < 1.3


def test_steps_per_draw_accumulates_work(gaussian_model):
    one = _stats(_sample(gaussian_model, {"steps_per_draw": 1}, random_seed=1))
    five = _stats(_sample(gaussian_model, {"steps_per_draw": 5}, random_seed=1))
    assert np.mean(five["n_lik_evals"]) > 3 * np.mean(one["n_lik_evals"])
    assert 0 <= float(np.min(five["accept"])) and float(np.max(five["accept"])) <= 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": 0}, "temperature"),
        ({"batch_size": 1}, "batch_size"),
        ({"delta": -1.0}, "delta"),
        ({"steps_per_draw": 0}, "steps_per_draw"),
        ({"target_accept": 1.5}, "target_accept"),
        ({"scaling": -1.0}, "scaling"),
        ({"proposal_cov": np.eye(3)}, "proposal_cov"),
    ],
)
def test_bad_arguments(gaussian_model, kwargs, match):
    with gaussian_model, pytest.raises(ValueError, match=match):
        MinibatchBarker(**kwargs)


def test_temperature_widens_posterior(gaussian_model):
    cold = _sample(gaussian_model, random_seed=1, draws=600, tune=300)
    hot = _sample(gaussian_model, {"temperature": 16.0}, random_seed=1, draws=600, tune=300)
    ratio = float(np.std(_posterior(hot)["mu"]) / np.std(_posterior(cold)["mu"]))
    assert 2.0 < ratio < 8.0  # sqrt(16) = 4
