"""MinibatchBarker at temperature 1 reproduces reference posteriors.

Tolerances (issue 2): means within 0.2 reference sd, sds within 20%. Each test
also checks that its Monte Carlo error is small enough (3 MCSE < 0.2 sd) for the
tolerance to be meaningful, and a negative control (wrong temperature) must fail.
The closed-form Gaussian checks run by default; the NUTS and posteriordb
comparisons are marked ``slow`` (``python -m pytest -m slow``).
"""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.diagnostics.groups import group

from .agreement import agreement, coordinate_draws, posterior_of, reference_moments
from .posteriordb import _posteriordb, _stan_to_pymc_names

MEAN_TOL, SD_TOL = 0.2, 0.2
SAMPLE = {"chains": 2, "cores": 2, "progressbar": False, "compute_convergence_checks": False}


def _check(idata, names, ref_mean, ref_sd, *, negative_control=False):
    result = agreement(coordinate_draws(posterior_of(idata), names), ref_mean, ref_sd)
    if not negative_control:
        assert not result.underpowered(MEAN_TOL), result.underpowered(MEAN_TOL)
    return result.failures(MEAN_TOL, SD_TOL)


# ---------------------------------------------------------------- conjugate Gaussian mean
N_GAUSS, PRIOR_SD, NOISE_SD = 10_000, 10.0, 1.0


@pytest.fixture(scope="module")
def gaussian_case():
    y = np.random.default_rng(101).normal(0.7, NOISE_SD, size=N_GAUSS)
    precision = 1 / PRIOR_SD**2 + N_GAUSS / NOISE_SD**2
    exact_mean = (y.sum() / NOISE_SD**2) / precision
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, PRIOR_SD)
        pm.Normal("y", mu, NOISE_SD, observed=y)
    return model, {"mu": exact_mean}, {"mu": precision**-0.5}


@pytest.mark.parametrize(("temperature", "should_pass"), [(1.0, True), (3.0, False)])
def test_gaussian_mean_matches_closed_form(gaussian_case, temperature, should_pass):
    model, ref_mean, ref_sd = gaussian_case
    with model:
        idata = pm.sample(
            step=MinibatchBarker(temperature=temperature),
            draws=1500,
            tune=500,
            random_seed=202,
            **SAMPLE,
        )
    failures = _check(idata, ["mu"], ref_mean, ref_sd, negative_control=not should_pass)
    if should_pass:
        assert not failures, failures
    else:  # negative control: a tempered posterior is too wide
        assert failures, "the wrong-temperature control was not detected"


# ---------------------------------------------------------------- logistic regression vs NUTS
N_LOGIT = 10_000


@pytest.fixture(scope="module")
def logistic_case():
    rng = np.random.default_rng(303)
    x = rng.normal(size=(N_LOGIT, 2))
    logits = -0.5 + x @ np.array([1.0, -0.7])
    y = rng.random(N_LOGIT) < 1 / (1 + np.exp(-logits))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y.astype(int))
        nuts = pm.sample(draws=2000, tune=1000, random_seed=404, **SAMPLE)
    names = ["alpha", "beta"]
    ref_mean, ref_sd = reference_moments(
        {k: v.ravel() for k, v in coordinate_draws(posterior_of(nuts), names).items()}
    )
    return model, names, ref_mean, ref_sd


@pytest.mark.slow
def test_logistic_regression_matches_nuts(logistic_case):
    model, names, ref_mean, ref_sd = logistic_case
    with model:
        idata = pm.sample(step=MinibatchBarker(), draws=2500, tune=1500, random_seed=505, **SAMPLE)
    failures = _check(idata, names, ref_mean, ref_sd)
    assert not failures, failures
    stats = group(idata, "sample_stats")
    assert 0 < float(stats["batch_size"].mean()) <= N_LOGIT


@pytest.mark.slow
def test_logistic_negative_control_wrong_temperature_fails(logistic_case):
    model, names, ref_mean, ref_sd = logistic_case
    with model:
        idata = pm.sample(
            step=MinibatchBarker(temperature=3.0), draws=2500, tune=1500, random_seed=505, **SAMPLE
        )
    assert _check(idata, names, ref_mean, ref_sd, negative_control=True)


# ---------------------------------------------------------------- posteriordb references
@pytest.mark.slow
def test_posteriordb_kidiq():
    data, ref = _posteriordb("kidiq", "kidiq-kidscore_momhsiq")
    ref_mean, ref_sd = reference_moments(_stan_to_pymc_names(ref))
    X = np.column_stack([np.ones(data["N"]), data["mom_hs"], data["mom_iq"]])
    with pm.Model():
        beta = pm.Flat("beta", shape=3)
        sigma = pm.HalfCauchy("sigma", 2.5)
        pm.Normal("kid_score", X @ beta, sigma, observed=np.asarray(data["kid_score"], float))
        idata = pm.sample(
            step=MinibatchBarker(),
            draws=10000,
            tune=5000,
            random_seed=606,
            initvals={"beta": np.array([26.0, 6.0, 0.56]), "sigma": 18.0},
            **SAMPLE,
        )
    failures = _check(idata, ["beta", "sigma"], ref_mean, ref_sd)
    assert not failures, failures


@pytest.mark.slow
def test_posteriordb_sblrc():
    data, ref = _posteriordb("sblrc", "sblrc-blr")
    ref_mean, ref_sd = reference_moments(_stan_to_pymc_names(ref))
    X = np.asarray(data["X"], dtype=float)
    with pm.Model():
        beta = pm.Normal("beta", 0, 10, shape=data["D"])
        sigma = pm.HalfNormal("sigma", 10)
        pm.Normal("y", X @ beta, sigma, observed=np.asarray(data["y"], float))
        # Random-walk burn-in from beta = 0 is long, but N = 100 makes steps cheap.
        idata = pm.sample(
            step=MinibatchBarker(), draws=10000, tune=10000, random_seed=707, **SAMPLE
        )
    failures = _check(idata, ["beta", "sigma"], ref_mean, ref_sd)
    assert not failures, failures
