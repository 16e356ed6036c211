"""The complementary log-log Bernoulli family: derivatives, certified constants, bounds,
recognition.

Checks: the closed-form derivatives of ``f_1 = log(1 - exp(-exp(eta)))`` against finite
differences; both suprema (curvature and third derivative) hold on a grid wider and finer
than the one they were found on and at random points, while 1 % less is exceeded
(negative controls); FlyMC's quadratic lies below every row's log-likelihood wherever the
predictor stays below the region's ``eta_hi``, touches it at the anchor, and the Lagrange
form with ``exp(m)`` instead of ``exp(eta_hi)`` crosses it on ``y = 0`` rows (negative
control); ``1 - exp(-exp(eta))`` is recognised as this family and near misses are not;
both exact steps accept such a model with no arguments.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from link_models import link_model, logp_rows, recognised

from pymc_minibatch_mh import FlyMC, TunaMH
from pymc_minibatch_mh.families import bernoulli_cloglog as cloglog
from pymc_minibatch_mh.likelihood.linear_predictor import UnsupportedLikelihood


def _f1(eta):
    return np.log(-np.expm1(-np.exp(eta)))


def test_derivatives_match_finite_differences():
    eta = np.array([-6.0, -2.0, 0.0, 0.62, 1.43, 2.5])
    h = 1e-4
    d1, d2, d3 = cloglog.positive_row_derivatives(eta)
    assert np.allclose(d1, (_f1(eta + h) - _f1(eta - h)) / (2 * h), atol=1e-7)
    first = cloglog.positive_row_derivatives
    assert np.allclose(d2, (first(eta + h)[0] - first(eta - h)[0]) / (2 * h), atol=1e-6)
    assert np.allclose(d3, (first(eta + h)[1] - first(eta - h)[1]) / (2 * h), atol=1e-6)
    assert np.allclose(cloglog.loglik(eta, np.ones(6)), _f1(eta))
    assert np.allclose(cloglog.loglik(eta, np.zeros(6)), -np.exp(eta))
    assert np.isfinite(cloglog.loglik(np.array([-800.0]), np.ones(1))).all()


@pytest.mark.parametrize(
    ("supremum", "column", "sign"),
    [(cloglog.curvature_supremum, 1, -1.0), (cloglog.third_derivative_supremum, 2, None)],
)
def test_the_suprema_are_certified_with_a_negative_control(supremum, column, sign):
    bound = supremum()
    fine = np.linspace(-80.0, 40.0, 2_400_001)
    random = np.random.default_rng(4).uniform(-5.0, 5.0, 200_000)

    def values(eta):
        d = cloglog.positive_row_derivatives(eta)[column]
        return np.abs(d) if sign is None else sign * d

    largest = max(values(x).max() for x in (fine, random))
    assert largest <= bound
    assert largest > 0.99 * bound


def test_flymc_bound_lies_below_every_row_on_the_region():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 50_000)
    anchor = rng.normal(0.0, 2.0, y.size)
    eta_high = anchor + rng.uniform(0.0, 3.0, y.size)
    eta = eta_high - rng.exponential(2.0, y.size)  # anywhere below eta_high
    value, slope, curvature = cloglog.bound_coefficients(anchor, eta_high, y)
    gap = eta - anchor
    bound = value + slope * gap + curvature * gap**2
    assert np.all(bound <= cloglog.loglik(eta, y) + 1e-10)
    assert np.allclose(value, cloglog.loglik(anchor, y))
    zero = y == 0
    lagrange_at_anchor = value - np.exp(anchor) * gap**2 / 2  # curvature too small
    crosses = lagrange_at_anchor + slope * gap > cloglog.loglik(eta, y) + 1e-9
    assert np.any(crosses & zero & (eta > anchor))


def _cloglog(eta):
    return 1 - pm.math.exp(-pm.math.exp(eta))


def test_the_link_is_recognised_and_near_misses_are_not():
    model = link_model(_cloglog)
    lp = recognised(model)
    assert lp.family == "bernoulli_cloglog"
    eta = np.asarray(lp.design) @ np.array([0.3, -0.7]) + lp.offset
    logp = logp_rows(model, {"a": 0.3, "b": -0.7})
    assert np.allclose(cloglog.loglik(eta, lp.observed), logp)
    for near_miss in (
        lambda e: 1 - pm.math.exp(-pm.math.exp(e) / 2) * 0.9,
        lambda e: 0.9 - pm.math.exp(-pm.math.exp(e)) * 0.8,
    ):
        with pytest.raises(UnsupportedLikelihood, match="complementary log-log"):
            recognised(link_model(near_miss))


@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_exact_steps_take_a_cloglog_model_with_no_arguments(step_class):
    with link_model(_cloglog):
        step = step_class(progressbar=False)
    assert step._lp.family == "bernoulli_cloglog"
