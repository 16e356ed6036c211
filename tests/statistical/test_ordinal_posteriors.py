"""TunaMH and FlyMC on ordinal regressions (pm.OrderedLogistic and pm.OrderedProbit, free
ordered cutpoints) reproduce grid-integrated posteriors (``slow``).

``TunaMH()`` and ``FlyMC()`` with no arguments must match the posterior means and sds of a grid in
``(b, kappa_1, kappa_2)`` (the slope and the ordered transform's coordinates:
``c_1 = kappa_1``, ``c_2 = c_1 + exp(kappa_2)``) within 4 Monte Carlo standard errors, with
rows of extreme covariates in the end categories and against them. Negative control:
each step at ``temperature=1.5`` (sds about 22 % too large) must fail the same check.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import FlyMC, TunaMH

from .agreement import grid_moments_of, grid_z_failures

N_ROWS, SLOPE_SD, CUT_MU, CUT_SD = 300, 2.0, np.array([-1.0, 1.0]), 3.0
Z_TOL = 4.0
LINKS = {"logistic": pm.OrderedLogistic, "probit": pm.OrderedProbit}


def _data(link: str):
    rng = np.random.default_rng(2034)
    x = rng.normal(size=N_ROWS)
    noise = rng.logistic(size=N_ROWS) if link == "logistic" else rng.normal(size=N_ROWS)
    y = np.searchsorted(np.array([-0.6, 0.8]), 1.1 * x + noise)
    x[:4] = [6.0, -6.0, 6.0, -6.0]
    y[:4] = [2, 0, 0, 2]  # two rows where their covariate predicts them, two against
    return x, y


def _loglik(b, c1, c2, x, y, link: str):
    """Summed over rows; parameters broadcast against a trailing row axis."""
    log_cdf = special.log_expit if link == "logistic" else special.log_ndtr
    eta = b * x
    low = log_cdf(c1 - eta)  # P(y = 0) = F(c1 - eta)
    high = log_cdf(eta - c2)  # P(y = 2) = 1 - F(c2 - eta) = F(eta - c2)
    # P(y = 1) = F(c2 - eta) - F(c1 - eta) = F(c2 - eta) (1 - exp(log F(c1 - eta) - ...)).
    upper = log_cdf(c2 - eta)
    middle = upper + np.log1p(-np.exp(low - upper))
    return np.where(y == 0, low, np.where(y == 2, high, middle)).sum(-1)


def _model(link: str) -> pm.Model:
    x, y = _data(link)
    with pm.Model() as model:
        b = pm.Normal("b", 0, SLOPE_SD)
        cut = pm.Normal(
            "cut", CUT_MU, CUT_SD, shape=2, transform=pm.distributions.transforms.ordered
        )
        LINKS[link]("y", eta=b * x, cutpoints=cut, observed=y)
    return model


@pytest.fixture(scope="module", params=list(LINKS))
def grid(request):
    link = request.param
    x, y = _data(link)
    model = _model(link)
    with model:
        map_point = pm.find_MAP(progressbar=False)
    c_map = np.asarray(map_point["cut"])
    width = 1.0 if link == "probit" else 1.8  # the logistic's posterior is wider
    gb = map_point["b"] + width * np.linspace(-0.5, 0.5, 81)
    g1 = c_map[0] + width * np.linspace(-0.8, 0.8, 81)
    g2 = np.log(c_map[1] - c_map[0]) + width * np.linspace(-0.8, 0.8, 81)
    qb, q1, q2 = np.meshgrid(gb, g1, g2, indexing="ij")
    c2 = q1 + np.exp(q2)
    logp = np.empty(qb.shape)
    for i in range(gb.size):
        logp[i] = _loglik(qb[i][..., None], q1[i][..., None], c2[i][..., None], x, y, link)
    # Priors on b and on the cutpoints, and the ordered transform's Jacobian exp(kappa_2).
    logp += -0.5 * (qb / SLOPE_SD) ** 2
    logp += -0.5 * (((q1 - CUT_MU[0]) / CUT_SD) ** 2 + ((c2 - CUT_MU[1]) / CUT_SD) ** 2) + q2
    mean, sd = grid_moments_of({"b": qb, "cut[0]": q1, "cut[1]": c2}, logp)
    return {"model": model, "mean": mean, "sd": sd, "label": link}


def _z_failures(case, step) -> dict:
    return grid_z_failures(case, step, draws=6000, seed=82, z_tol=Z_TOL)


STEPS = {"TunaMH": TunaMH, "FlyMC": FlyMC}


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_step_matches_the_grid_posterior(grid, step_name):
    with grid["model"]:
        step = STEPS[step_name]()
    assert not _z_failures(grid, step)


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_negative_control_tempered_step_fails(grid, step_name):
    with grid["model"]:
        step = STEPS[step_name](temperature=1.5)
    assert _z_failures(grid, step)
