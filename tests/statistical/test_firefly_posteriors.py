"""FlyMC in pm.sample reproduces reference posteriors (it is an exact method).

* 2-D logistic regression with a grid-integrated posterior (``slow``; the same
  check runs fast on the pure kernel in ``tests/kernels/test_firefly_kernel.py``):
  untuned and MAP-tuned bounds must match within Monte Carlo error (|error| < 4
  MCSE for means and sds); a deliberately invalid bound (negative control) must
  fail the same check.
* Logistic regression at N = 10^5 against NUTS (``slow``): means within 0.2 sd,
  sds within 20%, with an ESS power check; MAP-tuned FlyMC must query fewer than
  5% of the likelihoods per draw.
* Robust (Student-t) regression and softmax classification against NUTS (``slow``).
"""

import math

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import special

from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound
from pymc_minibatch_mh.bounds.jaakkola_jordan import map_tuned_jaakkola_jordan
from pymc_minibatch_mh.diagnostics import sample_stats as _stats
from pymc_minibatch_mh.step_methods.firefly import FlyMC

from .agreement import failures_against, grid_moments, moments_of, posterior_of

MEAN_TOL, SD_TOL = 0.2, 0.2
Z_TOL = 4.0
SAMPLE = {"progressbar": False, "compute_convergence_checks": False}


# ---------------------------------------------------------------- 2-D grid posterior
N_GRID, PRIOR_SD = 300, 3.0


@pytest.fixture(scope="module")
def grid_case():
    rng = np.random.default_rng(2024)
    x = rng.normal(size=N_GRID)
    y = (rng.random(N_GRID) < special.expit(0.5 - 1.2 * x)).astype(int)
    with pm.Model() as model:
        a = pm.Normal("a", 0, PRIOR_SD)
        b = pm.Normal("b", 0, PRIOR_SD)
        pm.Bernoulli("y", logit_p=a + b * x, observed=y)
        map_point = pm.find_MAP(progressbar=False)
    # posterior moments by quadrature on a fine grid around the MAP
    t = 2 * y - 1
    h = 0.004
    ga = map_point["a"] + h * np.arange(-350, 351)
    gb = map_point["b"] + h * np.arange(-400, 401)
    qa, qb = np.meshgrid(ga, gb, indexing="ij")
    logp = np.empty(qa.shape)
    for i, a in enumerate(ga):  # row by row: O(len(gb) * N) memory
        logp[i] = special.log_expit(t * (a + gb[:, None] * x)).sum(-1)
    logp -= 0.5 * (qa**2 + qb**2) / PRIOR_SD**2
    mean, sd = grid_moments({"a": ga, "b": gb}, logp)
    return {"model": model, "x": x, "y": y, "map": map_point, "mean": mean, "sd": sd}


def _mc_z_scores(idata, case):
    """(mean error, sd error) / Monte Carlo standard error, per parameter."""
    post = posterior_of(idata)
    out = {}
    for name in ("a", "b"):
        draws = np.asarray(post[name])
        ess_mean = float(az.ess(draws, method="mean"))
        ess_sd = float(az.ess(draws, method="sd"))
        sd = draws.std()
        mcse_mean = sd / math.sqrt(ess_mean)
        # s.e. of the sample sd is about sd / sqrt(2 ESS) for near-Gaussian posteriors
        mcse_sd = sd / math.sqrt(2.0 * ess_sd)
        out[name] = (
            (draws.mean() - case["mean"][name]) / mcse_mean,
            (sd - case["sd"][name]) / mcse_sd,
        )
    return out


def _sample_grid_case(case, step):
    with case["model"]:
        return pm.sample(
            step=step, draws=12_000, tune=1000, chains=2, cores=2, random_seed=77, **SAMPLE
        )


@pytest.mark.slow
@pytest.mark.parametrize("bound", ["untuned", "map"])
def test_grid_posterior_untuned_and_map_tuned(grid_case, bound):
    with grid_case["model"]:
        step = FlyMC(bound=bound, map_point=grid_case["map"])
    z = _mc_z_scores(_sample_grid_case(grid_case, step), grid_case)
    print("z-scores (mean, sd):", z)
    bad = {k: v for k, v in z.items() if max(abs(v[0]), abs(v[1])) >= Z_TOL}
    assert not bad, z


@pytest.mark.slow
def test_grid_posterior_negative_control_invalid_bound(grid_case):
    """A bound above the likelihood near its anchors (for the y = 1 data) biases FlyMC."""
    x1 = np.column_stack([np.ones(N_GRID), grid_case["x"]])
    y = grid_case["y"]
    q_map = np.array([grid_case["map"]["a"], grid_case["map"]["b"]])
    good = map_tuned_jaakkola_jordan(x1, 0.0, y, q_map)
    bad = LinearQuadraticBound.from_coefficients(
        x1,
        0.0,
        good.anchor,
        good.value + 0.1 * (y == 1),
        good.slope,
        good.curvature,
        centre=q_map,
    )
    with grid_case["model"]:
        step = FlyMC(bound=bad, check_bound=False)
    z = _mc_z_scores(_sample_grid_case(grid_case, step), grid_case)
    print("z-scores (mean, sd):", z)
    assert any(max(abs(v[0]), abs(v[1])) >= Z_TOL for v in z.values()), z


# ---------------------------------------------------------------- NUTS references
def _check(idata, names, ref_mean, ref_sd):
    return failures_against(idata, names, ref_mean, ref_sd, mean_tol=MEAN_TOL, sd_tol=SD_TOL)


def _nuts_reference(model, names, seed):
    with model:
        nuts = pm.sample(draws=2000, tune=1000, chains=2, cores=2, random_seed=seed, **SAMPLE)
    return moments_of(nuts, names)


N_LOGIT = 100_000


@pytest.fixture(scope="module")
def big_logistic():
    rng = np.random.default_rng(909)
    x = rng.normal(size=(N_LOGIT, 3))
    y = (rng.random(N_LOGIT) < special.expit(-0.3 + x @ np.array([1.0, -0.7, 0.4]))).astype(int)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    names = ["alpha", "beta"]
    ref_mean, ref_sd = _nuts_reference(model, names, seed=404)
    return model, names, ref_mean, ref_sd


@pytest.mark.slow
def test_logistic_1e5_map_tuned_matches_nuts_with_few_queries(big_logistic):
    model, names, ref_mean, ref_sd = big_logistic
    with model:
        idata = pm.sample(
            step=FlyMC(progressbar=False),
            draws=4000,
            tune=2000,
            chains=2,
            cores=2,
            random_seed=505,
            **SAMPLE,
        )
    failures = _check(idata, names, ref_mean, ref_sd)
    assert not failures, failures
    queries = float(np.asarray(_stats(idata)["batch_size"]).mean())
    assert queries < 0.05 * N_LOGIT, queries


@pytest.mark.slow
def test_logistic_1e5_untuned_matches_nuts(big_logistic):
    model, names, ref_mean, ref_sd = big_logistic
    with model:
        idata = pm.sample(
            step=FlyMC(bound="untuned"),
            draws=8000,
            tune=2000,
            chains=2,
            cores=2,
            random_seed=506,
            **SAMPLE,
        )
    failures = _check(idata, names, ref_mean, ref_sd)
    assert not failures, failures


@pytest.mark.slow
def test_robust_regression_matches_nuts():
    rng = np.random.default_rng(77)
    n = 20_000
    x = rng.normal(size=(n, 2))
    y = 1.0 + x @ np.array([2.0, -1.0]) + 0.8 * rng.standard_t(4, size=n)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 10)
        beta = pm.Normal("beta", 0, 10, shape=2)
        pm.StudentT("y", nu=4, mu=alpha + x @ beta, sigma=0.8, observed=y)
    names = ["alpha", "beta"]
    ref_mean, ref_sd = _nuts_reference(model, names, seed=11)
    with model:
        idata = pm.sample(
            step=FlyMC(progressbar=False),
            draws=4000,
            tune=2000,
            chains=2,
            cores=2,
            random_seed=12,
            **SAMPLE,
        )
    failures = _check(idata, names, ref_mean, ref_sd)
    assert not failures, failures
    assert float(np.asarray(_stats(idata)["batch_size"]).mean()) < 0.05 * n


@pytest.mark.slow
def test_softmax_classification_matches_nuts():
    """Three classes, class 0 as reference (identified), MALA updates as in the paper."""
    rng = np.random.default_rng(78)
    n, k = 10_000, 3
    x = np.column_stack([np.ones(n), rng.normal(size=(n, 2))])
    w = np.array([[0.2, -0.3, 0.1], [1.0, -0.5, 0.0], [0.0, 0.8, -1.0]])
    probs = special.softmax(x @ w, axis=1)
    cls = (rng.random(n)[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
    with pm.Model() as model:
        coef = pm.Normal("coef", 0, 3, shape=(3, k - 1))
        pm.Categorical(
            "c", logit_p=x @ pt.concatenate([pt.zeros((3, 1)), coef], axis=1), observed=cls
        )
    names = ["coef"]
    ref_mean, ref_sd = _nuts_reference(model, names, seed=13)
    with model:
        step = FlyMC(progressbar=False, theta_update="mala")
        idata = pm.sample(
            step=step, draws=12_000, tune=3000, chains=2, cores=2, random_seed=14, **SAMPLE
        )
    failures = _check(idata, names, ref_mean, ref_sd)
    assert not failures, failures
    assert float(np.asarray(_stats(idata)["batch_size"]).mean()) < 0.05 * n
