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

from .agreement import failures_against, reference_moments
from .cases import SAMPLE, gaussian_mean_case, logistic_nuts_case
from .posteriordb import _posteriordb, _stan_to_pymc_names

#: The paper's plain test (these tests check the Barker test itself, as in issue 2):
#: random-walk proposals, no control variates, one MH step per draw.
PLAIN = {"proposal": "rw", "control_variates": False, "steps_per_draw": 1}

MEAN_TOL, SD_TOL = 0.2, 0.2


def _check(idata, names, ref_mean, ref_sd, *, negative_control=False):
    return failures_against(
        idata,
        names,
        ref_mean,
        ref_sd,
        mean_tol=MEAN_TOL,
        sd_tol=SD_TOL,
        check_power=not negative_control,
    )


# ---------------------------------------------------------------- conjugate Gaussian mean
N_GAUSS = 10_000


@pytest.fixture(scope="module")
def gaussian_case():
    return gaussian_mean_case(N_GAUSS)


@pytest.mark.parametrize(("temperature", "should_pass"), [(1.0, True), (3.0, False)])
def test_gaussian_mean_matches_closed_form(gaussian_case, temperature, should_pass):
    model, ref_mean, ref_sd = gaussian_case
    with model:
        idata = pm.sample(
            step=MinibatchBarker(temperature=temperature, **PLAIN),
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
    return logistic_nuts_case(N_LOGIT)


@pytest.mark.slow
def test_logistic_regression_matches_nuts(logistic_case):
    model, names, ref_mean, ref_sd = logistic_case
    with model:
        idata = pm.sample(
            step=MinibatchBarker(**PLAIN), draws=2500, tune=1500, random_seed=505, **SAMPLE
        )
    failures = _check(idata, names, ref_mean, ref_sd)
    assert not failures, failures
    stats = group(idata, "sample_stats")
    assert 0 < float(stats["batch_size"].mean()) <= N_LOGIT


@pytest.mark.slow
def test_logistic_negative_control_wrong_temperature_fails(logistic_case):
    model, names, ref_mean, ref_sd = logistic_case
    with model:
        idata = pm.sample(
            step=MinibatchBarker(temperature=3.0, **PLAIN),
            draws=2500,
            tune=1500,
            random_seed=505,
            **SAMPLE,
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
            step=MinibatchBarker(**PLAIN),
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
            step=MinibatchBarker(**PLAIN), draws=10000, tune=10000, random_seed=707, **SAMPLE
        )
    failures = _check(idata, ["beta", "sigma"], ref_mean, ref_sd)
    assert not failures, failures
