"""The reference point (MAP) of the control variates, on PyMC 5 and PyMC 6."""

import time

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.step_methods.construction import _unravel
from pymc_minibatch_mh.step_methods.reference import find_map, free_rv_values


def _lkj_model(n_data: int) -> pm.Model:
    """MvNormal rows with an LKJCholeskyCov prior (its packed-Cholesky transform cannot
    take a numpy start value in PyMC's find_MAP)."""
    rng = np.random.default_rng(1)
    y = rng.multivariate_normal([0, 1], [[1, 0.5], [0.5, 2]], size=n_data)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True
        )
        mu = pm.Normal("mu", 0, 5, shape=2)
        pm.MvNormal("y", mu=mu, chol=chol, observed=y)
    return model


@pytest.fixture(scope="module")
def lkj_model():
    return _lkj_model(2000)


def _assert_same_map(ours: dict, theirs: dict, value_names) -> None:
    for name in value_names:
        assert np.all(np.isfinite(ours[name])), name
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_find_map_with_lkj_cholesky_prior(lkj_model):
    ours = find_map(lkj_model, lkj_model.initial_point(), progressbar=False)
    with lkj_model:
        theirs = pm.find_MAP(progressbar=False)
    _assert_same_map(ours, theirs, ["chol_cholesky-cov-packed__", "mu", "chol", "chol_stds"])
    # The MAP is near the data's mean and standard deviations (N = 2000).
    np.testing.assert_allclose(ours["mu"], [0.0, 1.0], atol=0.1)
    np.testing.assert_allclose(ours["chol_stds"], [1.0, np.sqrt(2.0)], atol=0.1)


def test_find_map_with_bounds_that_are_random_variables(rng):
    # The interval transform of `mu` depends on `low`: PyMC rejects a start value under
    # the transformed name ("depends on other random variables").
    y = rng.normal(1.5, 1.0, size=500)
    with pm.Model() as model:
        low = pm.Normal("low", 0.0, 1.0)
        pm.Uniform("mu", low, low + 3.0)
        pm.Normal("y", model["mu"], 1.0, observed=y)
    ours = find_map(model, model.initial_point(), progressbar=False)
    with model:
        theirs = pm.find_MAP(progressbar=False)
    _assert_same_map(ours, theirs, ["low", "mu_interval__", "mu"])


def test_find_map_starts_from_the_given_point(rng):
    # y ~ N(mu^2, 1) has modes at mu = +-2: the start decides which one is found.
    y = rng.normal(4.0, 1.0, size=1000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu**2, 1.0, observed=y)
    for start, mode in [(-1.0, -2.0), (1.0, 2.0)]:
        found = find_map(model, {"mu": np.array(start)}, progressbar=False)
        assert float(found["mu"]) == pytest.approx(mode, abs=0.05)


def test_free_rv_values_apply_the_backward_transforms(lkj_model):
    point = {"chol_cholesky-cov-packed__": np.array([np.log(2.0), 0.5, 0.0]), "mu": np.ones(2)}
    values = free_rv_values(lkj_model, point)
    assert set(values) == {"chol", "mu"}
    np.testing.assert_allclose(values["chol"], [2.0, 0.5, 1.0])
    np.testing.assert_allclose(values["mu"], [1.0, 1.0])


def test_free_rv_values_needs_every_value_variable(lkj_model):
    with pytest.raises(ValueError, match=r"The start point lacks values for \['mu'\]"):
        free_rv_values(lkj_model, {"chol_cholesky-cov-packed__": np.zeros(3)})


@pytest.mark.slow
def test_control_variates_on_the_lkj_model(lkj_model):
    # Slow: compiling the control-variate residual graph of this model takes about a
    # minute on the C backend (PyTensor's graph rewrites, independent of N).
    started = time.perf_counter()
    with lkj_model:
        step = MinibatchBarker(control_variates=True, progressbar=False)
        theirs = pm.find_MAP(progressbar=False)
    print(f"MinibatchBarker(control_variates=True) built in {time.perf_counter() - started:.0f}s")
    assert step.control_variates
    # The reference comes from the package's Newton search, not from find_MAP: both stop
    # at a tolerance. The search stops at a Newton decrement of 1e-2 (log-density units),
    # so its point is at most ~0.02 below the mode's log density and within ~0.15
    # posterior sd of it.
    names = [v.name for v in lkj_model.value_vars]
    theirs = {name: theirs[name] for name in names}
    ours = {**theirs, **_unravel(step.reference.reference, step.vars, theirs)}
    logp = lkj_model.compile_logp()
    assert logp(ours) >= logp(theirs) - 0.02
    expected = np.concatenate([np.ravel(theirs[v.name]) for v in step.vars])
    sds = np.sqrt(np.diag(step._laplace_chol @ step._laplace_chol.T))
    np.testing.assert_array_less(np.abs(step.reference.reference - expected), 0.15 * sds)
