"""Control variates, Laplace proposals and recentring through the step base class."""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.diagnostics import posterior as _posterior
from pymc_minibatch_mh.diagnostics import sample_stats as _stats

N = 5_000
SAMPLE = {"chains": 1, "cores": 1, "progressbar": False, "compute_convergence_checks": False}


@pytest.fixture(scope="module")
def logistic():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(N, 2))
    y = rng.random(N) < 1 / (1 + np.exp(-(0.3 + x @ np.array([0.8, -0.4]))))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=a + x @ b, observed=y.astype(int))
    with model:
        map_point = pm.find_MAP(progressbar=False)
    return model, map_point


@pytest.mark.parametrize("proposal", ["laplace", "independent"])
def test_control_variates_keep_batches_small_at_temperature_one(logistic, proposal):
    model, map_point = logistic
    with model:
        step = MinibatchBarker(
            control_variates=True,
            proposal=proposal,
            reference_point=map_point,
            steps_per_draw=1,
            progressbar=False,
        )
        idata = pm.sample(step=step, draws=300, tune=200, random_seed=3, **SAMPLE)
    stats = _stats(idata)
    # The first batch of 100 rows decides (the residual variance is far below 1).
    assert float(np.max(stats["batch_size"])) <= 100
    assert float(np.max(stats["delta_var"])) < 0.5
    assert 0.1 < float(np.mean(stats["accepted"])) < 0.9
    a = np.asarray(_posterior(idata)["a"])
    assert abs(a.mean() - map_point["a"]) < 0.2  # sits on the posterior
    if proposal == "independent":
        assert np.allclose(np.asarray(stats["scaling"]), 1.0)  # not adapted


def test_plain_step_at_temperature_one_needs_far_larger_batches(logistic):
    model, map_point = logistic
    with model:
        step = MinibatchBarker(
            proposal="laplace",
            control_variates=False,
            reference_point=map_point,
            progressbar=False,
        )
        idata = pm.sample(step=step, draws=100, tune=100, random_seed=3, **SAMPLE)
    assert float(np.mean(_stats(idata)["batch_size"])) > 1_000


def test_reference_point_defaults_to_the_map(logistic):
    model, map_point = logistic
    with model:
        step = MinibatchBarker(control_variates=True, progressbar=False)
    expected = np.concatenate([np.ravel(map_point[v.name]) for v in step.vars])
    np.testing.assert_allclose(step.reference.reference, expected, atol=1e-3)


def test_recentring_moves_the_reference_to_the_chain_mean(logistic):
    model, map_point = logistic
    shifted = {**map_point, "a": map_point["a"] + 0.3}
    with model:
        step = MinibatchBarker(
            control_variates=True,
            proposal="laplace",
            reference_point=shifted,
            recentre=True,
            progressbar=False,
        )
        pm.sample(step=step, draws=50, tune=400, random_seed=4, **SAMPLE)
    moved = step.reference.reference
    assert abs(moved[0] - map_point["a"]) < 0.1 < abs(shifted["a"] - map_point["a"])
    step.reset_tuning()
    assert step.reference.reference[0] == pytest.approx(shifted["a"])


def test_sampling_state_roundtrip_with_control_variates(logistic):
    model, map_point = logistic
    with model:
        step = MinibatchBarker(control_variates=True, reference_point=map_point, progressbar=False)
    state = step.sampling_state
    first, _ = step.step(map_point)
    step.sampling_state = state
    again, _ = step.step(map_point)
    np.testing.assert_array_equal(first["b"], again["b"])


def test_laplace_needs_a_concave_reference(rng):
    with pm.Model():
        mu = pm.Normal("mu", 0, 100)
        pm.StudentT("y", nu=1, mu=mu, sigma=1, observed=rng.normal(size=50))
        with pytest.raises(ValueError, match="not concave"):
            MinibatchBarker(proposal="laplace", reference_point={"mu": 50.0}, progressbar=False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"proposal": "hmc"}, "proposal must be one of"),
        ({"proposal": "laplace", "proposal_cov": np.eye(3)}, "proposal_cov"),
        ({"recentre": True, "control_variates": False}, "control_variates=False"),
        ({"control_variates": True, "reference_point": {"a": 0.0}}, "lacks"),
    ],
)
def test_bad_arguments(logistic, kwargs, match):
    model, _ = logistic
    with model, pytest.raises(ValueError, match=match):
        MinibatchBarker(progressbar=False, **kwargs)


def test_control_variates_need_the_whole_likelihood_in_the_block(rng):
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu, sigma, observed=rng.normal(size=100))
        with pytest.raises(ValueError, match="sigma"):
            MinibatchBarker(
                [mu], control_variates=True, reference_point={"mu": 0.0}, progressbar=False
            )


def test_random_walk_with_control_variates_accepts_a_non_concave_reference(rng):
    with pm.Model():
        mu = pm.Normal("mu", 0, 100)
        pm.StudentT("y", nu=1, mu=mu, sigma=1, observed=rng.normal(size=50))
        with pytest.warns(UserWarning, match="falls back to an adaptive random walk"):
            step = MinibatchBarker(
                control_variates=True, reference_point={"mu": 50.0}, progressbar=False
            )
    assert step.proposal_kind == "rw"
    assert step.start_at_reference and step._start_chol is None


def test_control_variates_default_on_and_off_with_the_reason(rng):
    y = rng.normal(size=200)
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu, sigma, observed=y)
        assert MinibatchBarker(progressbar=False).control_variates
        with pytest.warns(UserWarning, match=r"control variates are off because .*sigma"):
            step = MinibatchBarker([mu], progressbar=False)
    assert not step.control_variates
