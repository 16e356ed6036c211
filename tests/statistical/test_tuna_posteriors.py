"""TunaMH reproduces reference posteriors (NUTS) on logistic and softmax regression.

Tolerances (issue 4): means within 0.2 reference sd, sds within 20%, with a check
that the Monte Carlo error is small enough (3 MCSE < 0.2 sd) for the tolerance to
mean something, and a negative control (wrong temperature) that must fail.

Two regimes:

* a tempered posterior (N = 10^4, temperature 100), where TunaMH's Poisson
  minibatches are small (tens of points) and every step uses them; the reference
  is NUTS on the same tempered likelihood (a ``pm.Potential``);
* temperature 1 at N = 10^5 (slow). There, ``C M`` at a useful step size is in the
  thousands, so the ratio noise forces either tiny steps (the automatic ``chi``:
  the chain hardly moves) or a large ``chi`` whose expected batch is close to N
  (many steps fall back to full-data MH). The test uses ``chi = 0.03`` and reports
  the mean batch and the share of full-data steps.

A third, with the defaults: ``TunaMH()`` on a three-class softmax regression
(N = 20,000, temperature 1; control variates with the softmax remainder bound), means
within 0.15 NUTS sd, sds within 15 %, under 1 % of N per draw; negative control at
temperature 4.
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import special

from pymc_minibatch_mh.diagnostics import sample_stats as _stats
from pymc_minibatch_mh.step_methods.tuna import TunaMH

from .agreement import failures_against, moments_of
from .cases import SAMPLE, logistic_data, logistic_model

MEAN_TOL, SD_TOL = 0.2, 0.2
NAMES = ["alpha", "beta"]


def _check(idata, ref_mean, ref_sd, *, negative_control=False):
    return failures_against(
        idata,
        NAMES,
        ref_mean,
        ref_sd,
        mean_tol=MEAN_TOL,
        sd_tol=SD_TOL,
        check_power=not negative_control,
    )


def _nuts_reference(x, y, temperature, seed):
    """NUTS on the likelihood raised to 1/temperature (prior untempered)."""
    with pm.Model():
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=2)
        loglik = pm.logp(pm.Bernoulli.dist(logit_p=alpha + x @ beta), y).sum()
        pm.Potential("tempered_likelihood", loglik / temperature)
        nuts = pm.sample(draws=2000, tune=1000, random_seed=seed, **SAMPLE)
    return moments_of(nuts, NAMES)


def _report(idata, label, n_data):
    """Mean batch per draw and the share of draws with a full-data step (printed)."""
    stats = _stats(idata)
    batch = np.asarray(stats["batch_size"])
    full = float(((np.asarray(stats["poisson_draws"]) == 0) & (batch >= n_data)).mean())
    batch = float(batch.mean())
    chi = float(np.asarray(stats["chi"]).ravel()[-1])
    print(f"{label}: mean batch {batch:.1f}, full-data steps {full:.1%}, chi {chi:.3g}")
    return batch, full


# ---------------------------------------------------------------- tempered, small batches
N_TEMPERED, K_TEMPERED = 10_000, 100.0
STEPS_PER_DRAW = 10


@pytest.fixture(scope="module")
def tempered_case():
    x, y = logistic_data(N_TEMPERED, 303)
    ref_mean, ref_sd = _nuts_reference(x, y, K_TEMPERED, 404)
    return logistic_model(x, y), ref_mean, ref_sd


@pytest.mark.slow
@pytest.mark.parametrize(("temperature", "should_pass"), [(K_TEMPERED, True), (300.0, False)])
def test_tempered_logistic_matches_nuts(tempered_case, temperature, should_pass):
    model, ref_mean, ref_sd = tempered_case
    with model:
        idata = pm.sample(
            step=TunaMH(
                temperature=temperature,
                steps_per_draw=STEPS_PER_DRAW,
                proposal="rw",
                control_variates=False,
            ),
            draws=2000,
            tune=500,
            random_seed=505,
            **SAMPLE,
        )
    failures = _check(idata, ref_mean, ref_sd, negative_control=not should_pass)
    batch, full = _report(idata, f"tempered K={temperature}", N_TEMPERED)
    if should_pass:
        assert not failures, failures
        assert 0 < batch < 0.01 * N_TEMPERED * STEPS_PER_DRAW  # small Poisson batches
        assert full < 0.01
    else:
        assert failures, "the wrong-temperature control was not detected"


# ---------------------------------------------------------------- temperature 1, N = 10^5
N_TALL = 100_000
CHI_TALL = 0.03


@pytest.fixture(scope="module")
def tall_case():
    x, y = logistic_data(N_TALL, 606)
    ref_mean, ref_sd = _nuts_reference(x, y, 1.0, 707)
    return logistic_model(x, y), ref_mean, ref_sd


def _sample_tall(model, ref_mean, temperature):
    initvals = {
        "alpha": ref_mean["alpha"],
        "beta": np.array([ref_mean["beta[0]"], ref_mean["beta[1]"]]),
    }
    with model:
        return pm.sample(
            step=TunaMH(
                temperature=temperature,
                chi=CHI_TALL,
                proposal="rw",
                control_variates=False,
                steps_per_draw=1,  # the batch check below is per MH step
            ),
            draws=2500,
            tune=1000,
            random_seed=808,
            initvals=initvals,
            **SAMPLE,
        )


@pytest.mark.slow
def test_logistic_n1e5_temperature_1_matches_nuts(tall_case):
    model, ref_mean, ref_sd = tall_case
    idata = _sample_tall(model, ref_mean, 1.0)
    failures = _check(idata, ref_mean, ref_sd)
    batch, full = _report(idata, "N=1e5, K=1", N_TALL)
    assert not failures, failures
    assert 0 < batch <= N_TALL
    assert full < 1.0  # some steps used Poisson minibatches


@pytest.mark.slow
def test_logistic_n1e5_negative_control_wrong_temperature_fails(tall_case):
    model, ref_mean, ref_sd = tall_case
    idata = _sample_tall(model, ref_mean, 3.0)
    assert _check(idata, ref_mean, ref_sd, negative_control=True)


# ---------------------------------------------------------------- softmax, defaults
N_SOFTMAX = 20_000


@pytest.fixture(scope="module")
def softmax_case():
    """Three classes (class 0 the reference, so the model is identified), intercepts and
    two covariates, N = 20,000; NUTS reference (2 chains x 2000 draws)."""
    rng = np.random.default_rng(79)
    x = np.column_stack([np.ones(N_SOFTMAX), rng.normal(size=(N_SOFTMAX, 2))])
    w = np.array([[0.0, 0.3, -0.2], [0.0, -0.5, 0.4], [0.0, 0.8, -0.6]])
    probs = special.softmax(x @ w, axis=1)
    cls = (rng.random(N_SOFTMAX)[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
    with pm.Model() as model:
        coef = pm.Normal("coef", 0, 3, shape=(3, 2))
        logits = x @ pt.concatenate([pt.zeros((3, 1)), coef], axis=1)
        pm.Categorical("c", logit_p=logits, observed=cls)
        nuts = pm.sample(draws=2000, tune=1000, random_seed=15, **SAMPLE)
    return model, *moments_of(nuts, ["coef"])


@pytest.mark.slow
@pytest.mark.parametrize(("temperature", "should_pass"), [(1.0, True), (4.0, False)])
def test_default_tuna_on_softmax_regression_matches_nuts(softmax_case, temperature, should_pass):
    """TunaMH() (control variates, softmax remainder bound) within 0.15 sd and 15 % of
    NUTS, reading under 1 % of N per draw; at temperature 4 (negative control) the sd
    check must fail."""
    model, ref_mean, ref_sd = softmax_case
    with model:
        step = TunaMH(temperature=temperature, progressbar=False)
        idata = pm.sample(step=step, draws=1000, tune=1000, random_seed=16, **SAMPLE)
    failures = failures_against(
        idata,
        ["coef"],
        ref_mean,
        ref_sd,
        mean_tol=0.15,
        sd_tol=0.15,
        check_power=should_pass,
    )
    batch = float(np.asarray(_stats(idata)["batch_size"]).mean())
    print(f"softmax, K={temperature}: mean batch per draw {batch:.1f} of {N_SOFTMAX}")
    if should_pass:
        assert step.control_variates
        assert not failures, failures
        assert batch <= 0.01 * N_SOFTMAX
    else:
        assert any("sd / ref sd" in failure for failure in failures), failures
