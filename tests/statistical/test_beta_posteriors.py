"""TunaMH and FlyMC on Beta regressions (logit-link mean, free or fixed precision)
reproduce grid-integrated posteriors (``slow``).

``TunaMH()`` and ``FlyMC()`` with no arguments must match the posterior means and sds of a grid in
``(a, b, log nu)`` (free precision) or ``(a, b)`` (fixed) within 4 Monte Carlo standard
errors, with observations near 0 and 1 among the rows. Negative control: each step at
``temperature=1.5`` (sds about 22 % too large) must fail the same check.
"""

import math

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import FlyMC, TunaMH

from .agreement import grid_moments, grid_moments_of, grid_z_failures

N_ROWS, PRIOR_SD, NU_PRIOR_SD, FIXED_NU = 300, 3.0, 20.0, 6.0
Z_TOL = 4.0


def _data():
    rng = np.random.default_rng(2032)
    x = rng.normal(size=N_ROWS)
    mean = special.expit(0.4 - 0.8 * x)
    y = rng.beta(FIXED_NU * mean, FIXED_NU * (1.0 - mean))
    y[:3] = [1e-5, 1.0 - 1e-5, 1e-3]  # observations near the ends of the interval
    return x, np.clip(y, 1e-9, 1.0 - 1e-9)


def _loglik(a, b, nu, x, y):
    """Summed over rows; ``a``, ``b``, ``nu`` broadcast against a trailing row axis."""
    eta = a + b * x
    alpha, beta = nu * special.expit(eta), nu * special.expit(-eta)
    return (
        special.gammaln(nu)
        - special.gammaln(alpha)
        - special.gammaln(beta)
        + (alpha - 1.0) * np.log(y)
        + (beta - 1.0) * np.log1p(-y)
    ).sum(-1)


def _model(precision: str) -> pm.Model:
    x, y = _data()
    with pm.Model() as model:
        a = pm.Normal("a", 0, PRIOR_SD)
        b = pm.Normal("b", 0, PRIOR_SD)
        nu = pm.HalfNormal("nu", NU_PRIOR_SD) if precision == "free" else FIXED_NU
        pm.Beta("y", mu=pm.math.invlogit(a + b * x), nu=nu, observed=y)
    return model


@pytest.fixture(scope="module")
def free_precision_grid():
    x, y = _data()
    model = _model("free")
    with model:
        map_point = pm.find_MAP(progressbar=False)
    ga = map_point["a"] + np.linspace(-0.6, 0.6, 101)
    gb = map_point["b"] + np.linspace(-0.6, 0.6, 101)
    gt = math.log(map_point["nu"]) + np.linspace(-0.8, 0.8, 101)
    logp = np.empty((ga.size, gb.size, gt.size))
    nus = np.exp(gt)[None, :, None]
    for i, a_value in enumerate(ga):
        logp[i] = _loglik(a_value, gb[:, None, None], nus, x, y)
    qa, qb, qt = np.meshgrid(ga, gb, gt, indexing="ij")
    # Priors; the HalfNormal density of nu = e^t times the Jacobian e^t.
    logp += -0.5 * (qa**2 + qb**2) / PRIOR_SD**2 - 0.5 * np.exp(2 * qt) / NU_PRIOR_SD**2 + qt
    mean, sd = grid_moments_of({"a": qa, "b": qb, "nu": np.exp(qt)}, logp)
    return {"model": model, "mean": mean, "sd": sd}


@pytest.fixture(scope="module")
def fixed_precision_grid():
    x, y = _data()
    model = _model("fixed")
    with model:
        map_point = pm.find_MAP(progressbar=False)
    ga = map_point["a"] + np.linspace(-0.6, 0.6, 401)
    gb = map_point["b"] + np.linspace(-0.6, 0.6, 401)
    logp = np.empty((ga.size, gb.size))
    for i, a_value in enumerate(ga):
        logp[i] = _loglik(a_value, gb[:, None], FIXED_NU, x, y)
    qa, qb = np.meshgrid(ga, gb, indexing="ij")
    logp -= 0.5 * (qa**2 + qb**2) / PRIOR_SD**2
    mean, sd = grid_moments({"a": ga, "b": gb}, logp)
    return {"model": model, "mean": mean, "sd": sd}


def _z_failures(case, step) -> dict:
    return grid_z_failures(case, step, draws=8000, seed=80, z_tol=Z_TOL)


STEPS = {"TunaMH": TunaMH, "FlyMC": FlyMC}


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_step_matches_the_grid_posterior_with_a_free_precision(free_precision_grid, step_name):
    with free_precision_grid["model"]:
        step = STEPS[step_name]()
    assert not _z_failures(free_precision_grid, step)


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_step_matches_the_grid_posterior_with_a_fixed_precision(fixed_precision_grid, step_name):
    with fixed_precision_grid["model"]:
        step = STEPS[step_name]()
    assert not _z_failures(fixed_precision_grid, step)


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_negative_control_tempered_step_fails(free_precision_grid, step_name):
    with free_precision_grid["model"]:
        step = STEPS[step_name](temperature=1.5)
    assert _z_failures(free_precision_grid, step)
