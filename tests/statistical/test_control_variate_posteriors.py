"""Control-variate minibatch sampling at temperature 1 reproduces NUTS on tall data.

MinibatchBarker and Austere (approximate) and TunaMH (exact) with control variates. Issue 6
tolerance: means within 0.1 reference sd and sds within 10% on a logistic regression
with N = 10^5, checked only when the Monte Carlo error is small enough (3 MCSE < 0.1 sd).
A negative control removes the exactly-summed Taylor part of the estimator (a plausible
implementation bug) and must be caught by the same check.
"""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import Austere, MinibatchBarker, TunaMH
from pymc_minibatch_mh.diagnostics import sample_stats as _stats
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget

from .agreement import failures_against, moments_of
from .cases import SAMPLE

MEAN_TOL, SD_TOL = 0.1, 0.1
N, D = 100_000, 4
NAMES = ["alpha", "beta"]


@pytest.fixture(scope="module")
def tall_logistic():
    rng = np.random.default_rng(2026)
    x = rng.normal(size=(N, D))
    logits = 0.2 + x @ np.array([0.8, -0.5, 0.3, 0.0])
    y = rng.random(N) < 1 / (1 + np.exp(-logits))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=D)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y.astype(np.int8))
        nuts = pm.sample(draws=2000, tune=1000, random_seed=31, **SAMPLE)
        map_point = pm.find_MAP(progressbar=False)
    ref_mean, ref_sd = moments_of(nuts, NAMES)
    return model, map_point, ref_mean, ref_sd


def _failures(idata, ref_mean, ref_sd, *, check_power=True):
    return failures_against(
        idata,
        NAMES,
        ref_mean,
        ref_sd,
        mean_tol=MEAN_TOL,
        sd_tol=SD_TOL,
        check_power=check_power,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("step_class", "proposal", "steps_per_draw", "draws", "extra"),
    [
        (MinibatchBarker, "independent", 3, 3000, {}),
        (MinibatchBarker, "laplace", 5, 6000, {}),
        (Austere, "independent", 2, 3000, {"batch_size": 100}),
        (TunaMH, "independent", 2, 3000, {}),
    ],
)
def test_control_variate_steps_match_nuts(
    tall_logistic, step_class, proposal, steps_per_draw, draws, extra
):
    model, map_point, ref_mean, ref_sd = tall_logistic
    with model:
        step = step_class(
            **extra,
            control_variates=True,
            proposal=proposal,
            steps_per_draw=steps_per_draw,
            reference_point=map_point,
            progressbar=False,
        )
        idata = pm.sample(step=step, draws=draws, tune=1000, random_seed=32, **SAMPLE)
    failures = _failures(idata, ref_mean, ref_sd)
    assert not failures, failures
    mean_batch = float(np.mean(_stats(idata)["batch_size"])) / steps_per_draw
    print(f"\n{step_class.__name__} {proposal}: mean data per MH step {mean_batch:.1f} of N = {N}")
    assert mean_batch <= 200


@pytest.mark.slow
def test_negative_control_without_the_exact_proxy_part_fails(tall_logistic, monkeypatch):
    model, map_point, ref_mean, ref_sd = tall_logistic
    monkeypatch.setattr(ControlVariateTarget, "diff_offset", lambda self, q_new, q_old: 0.0)
    with model:
        step = MinibatchBarker(
            control_variates=True,
            proposal="independent",
            steps_per_draw=3,
            reference_point=map_point,
            progressbar=False,
        )
        idata = pm.sample(step=step, draws=1000, tune=500, random_seed=32, **SAMPLE)
    assert _failures(idata, ref_mean, ref_sd, check_power=False)
