"""The exact steps on a Gamma likelihood with a log-link mean reproduce grid-integrated
posteriors (``slow``): a free shape (3-D grid in ``(a, b, log shape)``) and a fixed shape
(2-D grid), with tiny and outlying observations among the rows.

``TunaMH()`` and ``FlyMC()`` with no arguments must match the posterior means and sds
computed by quadrature within 4 Monte Carlo standard errors. Negative controls: both steps
on a tempered target (``temperature=1.5``: sds about 22 % too large) must fail the same
check.
"""

import math

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import FlyMC, TunaMH

from .agreement import grid_moments, grid_z_failures

N_ROWS, PRIOR_SD, SHAPE_RATE = 300, 3.0, 0.5
Z_TOL = 4.0


def _data():
    rng = np.random.default_rng(2026)
    x = rng.normal(size=N_ROWS)
    y = rng.gamma(3.0, np.exp(0.4 - 0.6 * x) / 3.0)
    y[:3] = [1e-4, 25.0, 1e-2]  # a tiny, an outlying and a small observation
    return x, y


def _gamma_loglik(a, b, shape, x, y):
    """Summed over rows; ``a``, ``b``, ``shape`` broadcast against a trailing row axis."""
    eta = a + b * x
    return (
        shape * (np.log(shape) - eta - y * np.exp(-eta))
        + (shape - 1.0) * np.log(y)
        - special.gammaln(shape)
    ).sum(-1)


@pytest.fixture(scope="module")
def free_shape_grid():
    x, y = _data()
    with pm.Model() as model:
        a = pm.Normal("a", 0, PRIOR_SD)
        b = pm.Normal("b", 0, PRIOR_SD)
        shape = pm.Exponential("shape", SHAPE_RATE)
        pm.Gamma("y", alpha=shape, beta=shape / pm.math.exp(a + b * x), observed=y)
        map_point = pm.find_MAP(progressbar=False)
    # Grid in (a, b, t = log shape), wide enough that its faces hold no mass (checked).
    ga = map_point["a"] + np.linspace(-0.5, 0.5, 101)
    gb = map_point["b"] + np.linspace(-0.5, 0.5, 101)
    gt = math.log(map_point["shape"]) + np.linspace(-0.7, 0.7, 101)
    logp = np.empty((ga.size, gb.size, gt.size))
    shapes = np.exp(gt)[None, :, None]
    for i, a_value in enumerate(ga):
        logp[i] = _gamma_loglik(a_value, gb[:, None, None], shapes, x, y)
    qa, qb, qt = np.meshgrid(ga, gb, gt, indexing="ij")
    # Priors; the Exponential density of shape = e^t times the Jacobian e^t.
    logp += -0.5 * (qa**2 + qb**2) / PRIOR_SD**2 - SHAPE_RATE * np.exp(qt) + qt
    w = np.exp(logp - logp.max())
    w /= w.sum()
    faces = sum(np.take(w, k, axis=axis).sum() for axis in range(3) for k in (0, -1))
    assert faces < 1e-10, faces
    values = {"a": qa, "b": qb, "shape": np.exp(qt)}
    mean = {k: float(np.sum(w * v)) for k, v in values.items()}
    sd = {k: float(np.sqrt(np.sum(w * (v - mean[k]) ** 2))) for k, v in values.items()}
    return {"model": model, "mean": mean, "sd": sd}


@pytest.fixture(scope="module")
def fixed_shape_grid():
    x, y = _data()
    with pm.Model() as model:
        a = pm.Normal("a", 0, PRIOR_SD)
        b = pm.Normal("b", 0, PRIOR_SD)
        pm.Gamma("y", alpha=3.0, beta=3.0 / pm.math.exp(a + b * x), observed=y)
        map_point = pm.find_MAP(progressbar=False)
    ga = map_point["a"] + np.linspace(-0.5, 0.5, 401)
    gb = map_point["b"] + np.linspace(-0.5, 0.5, 401)
    logp = np.empty((ga.size, gb.size))
    for i, a_value in enumerate(ga):
        logp[i] = _gamma_loglik(a_value, gb[:, None], 3.0, x, y)
    qa, qb = np.meshgrid(ga, gb, indexing="ij")
    logp -= 0.5 * (qa**2 + qb**2) / PRIOR_SD**2
    mean, sd = grid_moments({"a": ga, "b": gb}, logp)
    return {"model": model, "mean": mean, "sd": sd}


def _z_failures(case, step) -> dict:
    return grid_z_failures(case, step, draws=12000, seed=78, z_tol=Z_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_exact_steps_match_the_grid_posterior_with_a_free_shape(free_shape_grid, step_class):
    with free_shape_grid["model"]:
        step = step_class()
    assert not _z_failures(free_shape_grid, step)


@pytest.mark.slow
@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_exact_steps_match_the_grid_posterior_with_a_fixed_shape(fixed_shape_grid, step_class):
    with fixed_shape_grid["model"]:
        step = step_class()
    assert not _z_failures(fixed_shape_grid, step)


@pytest.mark.slow
@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_negative_control_tempered_steps_fail(free_shape_grid, step_class):
    with free_shape_grid["model"]:
        step = step_class(temperature=1.5)
    assert _z_failures(free_shape_grid, step)
