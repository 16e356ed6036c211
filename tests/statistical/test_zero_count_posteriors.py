"""TunaMH and FlyMC on zero-inflated Poisson (free or fixed psi) and hurdle Poisson (free
psi) regressions reproduce grid-integrated posteriors (``slow``).

``TunaMH()`` and ``FlyMC()`` with no arguments must match the posterior means and sds of a grid in
``(a, b, logit psi)`` (free psi, ``pm.Beta(2, 2)`` prior) or ``(a, b)`` (fixed) within 4
Monte Carlo standard errors, with a large count and zeros where the Poisson mean is large
among the rows. Negative control: each step at ``temperature=1.5`` (sds about 22 % too
large) must fail the same check.
"""

import math

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import FlyMC, TunaMH

from .agreement import grid_moments, grid_moments_of, grid_z_failures

N_ROWS, PRIOR_SD, FIXED_PSI = 400, 3.0, 0.7
Z_TOL = 4.0


def _data():
    rng = np.random.default_rng(2033)
    x = rng.normal(size=N_ROWS)
    y = np.where(rng.uniform(size=N_ROWS) < FIXED_PSI, rng.poisson(np.exp(0.5 + 0.6 * x)), 0)
    x[:2] = [3.5, 3.0]
    y[:3] = [0, 0, 40]  # zeros where the mean is large, and a large count
    return x, y


def _loglik(a, b, log_odds, x, y, kind="zip"):
    """Summed over rows; parameters broadcast against a trailing row axis."""
    eta = a + b * x
    mu = np.exp(eta)
    log_norm = np.logaddexp(0.0, log_odds)
    positive = log_odds - log_norm + y * eta - mu - special.gammaln(y + 1.0)
    if kind == "zip":
        zero = np.logaddexp(0.0, log_odds - mu) - log_norm
    else:  # hurdle: a zero has probability 1 - psi, the counts a zero-truncated Poisson
        zero = -log_norm + 0.0 * eta
        positive = positive - np.log(-np.expm1(-mu))
    return np.where(y == 0, zero, positive).sum(-1)


def _model(psi: str, kind: str = "zip") -> pm.Model:
    x, y = _data()
    with pm.Model() as model:
        a = pm.Normal("a", 0, PRIOR_SD)
        b = pm.Normal("b", 0, PRIOR_SD)
        p = pm.Beta("psi", 2.0, 2.0) if psi == "free" else FIXED_PSI
        dist = pm.ZeroInflatedPoisson if kind == "zip" else pm.HurdlePoisson
        dist("y", psi=p, mu=pm.math.exp(a + b * x), observed=y)
    return model


@pytest.fixture(scope="module", params=["zip", "hurdle"])
def free_psi_grid(request):
    kind = request.param
    x, y = _data()
    model = _model("free", kind)
    with model:
        map_point = pm.find_MAP(progressbar=False)
    ga = map_point["a"] + np.linspace(-0.6, 0.6, 101)
    gb = map_point["b"] + np.linspace(-0.5, 0.5, 101)
    gt = special.logit(map_point["psi"]) + np.linspace(-1.6, 1.6, 101)
    logp = np.empty((ga.size, gb.size, gt.size))
    for i, a_value in enumerate(ga):
        logp[i] = _loglik(a_value, gb[:, None, None], gt[None, :, None], x, y, kind)
    qa, qb, qt = np.meshgrid(ga, gb, gt, indexing="ij")
    # Priors; Beta(2, 2) on psi = sigmoid(t) times the Jacobian psi (1 - psi).
    logp += -0.5 * (qa**2 + qb**2) / PRIOR_SD**2 + 2.0 * (
        special.log_expit(qt) + special.log_expit(-qt)
    )
    mean, sd = grid_moments_of({"a": qa, "b": qb, "psi": special.expit(qt)}, logp)
    return {"model": model, "mean": mean, "sd": sd, "label": kind}


@pytest.fixture(scope="module")
def fixed_psi_grid():
    x, y = _data()
    model = _model("fixed")
    with model:
        map_point = pm.find_MAP(progressbar=False)
    ga = map_point["a"] + np.linspace(-0.6, 0.6, 401)
    gb = map_point["b"] + np.linspace(-0.5, 0.5, 401)
    logp = np.empty((ga.size, gb.size))
    log_odds = math.log(FIXED_PSI / (1.0 - FIXED_PSI))
    for i, a_value in enumerate(ga):
        logp[i] = _loglik(a_value, gb[:, None], log_odds, x, y)
    qa, qb = np.meshgrid(ga, gb, indexing="ij")
    logp -= 0.5 * (qa**2 + qb**2) / PRIOR_SD**2
    mean, sd = grid_moments({"a": ga, "b": gb}, logp)
    return {"model": model, "mean": mean, "sd": sd}


def _z_failures(case, step) -> dict:
    return grid_z_failures(case, step, draws=8000, seed=81, z_tol=Z_TOL)


STEPS = {"TunaMH": TunaMH, "FlyMC": FlyMC}


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_step_matches_the_grid_posterior_with_a_free_psi(free_psi_grid, step_name):
    with free_psi_grid["model"]:
        step = STEPS[step_name]()
    assert not _z_failures(free_psi_grid, step)


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_step_matches_the_grid_posterior_with_a_fixed_psi(fixed_psi_grid, step_name):
    with fixed_psi_grid["model"]:
        step = STEPS[step_name]()
    assert not _z_failures(fixed_psi_grid, step)


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_negative_control_tempered_step_fails(free_psi_grid, step_name):
    with free_psi_grid["model"]:
        step = STEPS[step_name](temperature=1.5)
    assert _z_failures(free_psi_grid, step)
