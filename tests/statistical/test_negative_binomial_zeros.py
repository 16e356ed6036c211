"""TunaMH and FlyMC on zero-inflated and hurdle negative binomial regressions with a free
dispersion and a free psi reproduce grid-integrated posteriors (``slow``).

``TunaMH()`` and ``FlyMC()`` with no arguments must match the posterior means and sds of a
grid in ``(a, log alpha, logit psi)`` (``mu = exp(a + 0.5 x)``; ``pm.Exponential(0.25)``
on alpha, ``pm.Beta(2, 2)`` on psi) within 4 Monte Carlo standard errors, with a large
count and zeros where the mean is large among the rows. Negative control: each step at
``temperature=1.5`` (sds about 22 % too large) must fail the same check.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import FlyMC, TunaMH
from pymc_minibatch_mh.likelihood.glm_likelihoods import family_loglik

from .agreement import grid_moments_of, grid_z_failures

N_ROWS, SLOPE, ALPHA_RATE = 400, 0.5, 0.25
Z_TOL = 4.0
#: Draws per chain.
DRAWS = 8000
FAMILY = {"zinb": "zinb_log", "hurdle": "hurdle_nb_log"}


def _data():
    rng = np.random.default_rng(2041)
    x = rng.normal(size=N_ROWS)
    # Counts large enough that the zeros come mostly from the inflation: with a smaller
    # mean a zero is as well explained by a small dispersion, psi's posterior has a long
    # tail towards 1 and every sampler whose moves follow a Gaussian fit sticks there.
    mu = np.exp(2.0 + SLOPE * x)
    y = np.where(rng.uniform(size=N_ROWS) < 0.7, rng.negative_binomial(3.0, 3.0 / (3.0 + mu)), 0)
    x[:2] = [3.5, 3.0]
    y[:3] = [0, 0, 60]  # zeros where the mean is large, and a large count
    return x, y


def _model(kind: str) -> pm.Model:
    x, y = _data()
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        alpha = pm.Exponential("alpha", ALPHA_RATE)
        psi = pm.Beta("psi", 2.0, 2.0)
        dist = pm.ZeroInflatedNegativeBinomial if kind == "zinb" else pm.HurdleNegativeBinomial
        dist("y", psi=psi, mu=pm.math.exp(a + SLOPE * x), alpha=alpha, observed=y)
    return model


@pytest.fixture(scope="module", params=list(FAMILY))
def grid(request):
    kind = request.param
    x, y = _data()
    model = _model(kind)
    with model:
        map_point = pm.find_MAP(progressbar=False)
    # About 8 posterior sds each way (sds of a, log alpha, logit psi: 0.05, 0.14, 0.10-0.12
    # from a NUTS run).
    ga = map_point["a"] + np.linspace(-0.45, 0.45, 61)
    gl = np.log(map_point["alpha"]) + np.linspace(-1.2, 1.2, 61)
    gt = special.logit(map_point["psi"]) + np.linspace(-1.0, 1.3, 67)
    logp = np.empty((ga.size, gl.size, gt.size))
    for i, a_value in enumerate(ga):
        eta = a_value + SLOPE * x
        for j, log_alpha in enumerate(gl):
            params = {"alpha": np.exp(log_alpha), "odds": np.exp(gt)[:, None]}
            logp[i, j] = family_loglik(FAMILY[kind], eta, y, params).sum(-1)
    qa, ql, qt = np.meshgrid(ga, gl, gt, indexing="ij")
    # Priors on the sampled scale: Exponential on alpha = e^l with its Jacobian e^l; Beta(2, 2)
    # on psi = sigmoid(t) with its Jacobian psi (1 - psi).
    logp += -0.5 * qa**2 / 9.0 + (ql - ALPHA_RATE * np.exp(ql))
    logp += 2.0 * (special.log_expit(qt) + special.log_expit(-qt))
    values = {"a": qa, "alpha": np.exp(ql), "psi": special.expit(qt)}
    mean, sd = grid_moments_of(values, logp)
    return {"model": model, "mean": mean, "sd": sd, "label": kind}


def _z_failures(case, step) -> dict:
    return grid_z_failures(case, step, draws=DRAWS, seed=83, z_tol=Z_TOL)


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
