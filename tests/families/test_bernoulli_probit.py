"""The probit-link Bernoulli family: derivatives, certified constants, recognition.

Checks: the closed-form derivatives of ``log Phi`` against finite differences; the
third-derivative supremum holds on a grid four times wider and 20 times finer than the
one it was found on and at random points, while 1 % less is exceeded (negative control);
FlyMC's quadratic lies below every row's log-likelihood at random predictors and anchors,
touches it at the anchor, and a flatter one (curvature 0.9) crosses it (negative control);
``pm.math.invprobit`` is recognised as this family while a logistic link stays logistic
and ``0.3 * erfc(...)`` is refused; both exact steps accept such a model with no arguments.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from link_models import link_model, logp_rows, recognised
from scipy.special import log_ndtr

from pymc_minibatch_mh import FlyMC, TunaMH
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.families import bernoulli_probit as probit
from pymc_minibatch_mh.likelihood.linear_predictor import UnsupportedLikelihood


def test_derivatives_match_finite_differences():
    s = np.array([-8.0, -3.0, -0.6, 0.0, 0.5, 2.0, 6.0])
    h = 1e-4
    d1, d2, d3 = probit.derivatives(s)
    assert np.allclose(d1, (log_ndtr(s + h) - log_ndtr(s - h)) / (2 * h), atol=1e-7)
    assert np.allclose(d2, (d1_at(s + h) - d1_at(s - h)) / (2 * h), atol=1e-6)
    assert np.allclose(d3, (d2_at(s + h) - d2_at(s - h)) / (2 * h), atol=1e-6)


def d1_at(s):
    return probit.derivatives(s)[0]


def d2_at(s):
    return probit.derivatives(s)[1]


def test_the_third_derivative_supremum_is_certified_with_a_negative_control():
    bound = probit.third_derivative_supremum()
    fine = np.linspace(-120.0, 120.0, 4_800_001)
    random = np.random.default_rng(4).uniform(-10.0, 10.0, 200_000)
    largest = max(np.abs(probit.derivatives(x)[2]).max() for x in (fine, random))
    assert largest <= bound
    assert largest > 0.99 * bound  # the margin is small: 1 % less is exceeded


def test_flymc_bound_lies_below_every_row_and_touches_at_its_anchor():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 50_000)
    anchor = rng.normal(0.0, 4.0, y.size)
    eta = anchor + rng.normal(0.0, 5.0, y.size)
    value, slope, curvature = probit.bound_coefficients(anchor, y)
    gap = eta - anchor
    bound = value + slope * gap + curvature * gap**2
    assert np.all(bound <= probit.loglik(eta, y) + 1e-12)
    assert np.allclose(value, probit.loglik(anchor, y))
    flatter = value + slope * gap + 0.9 * curvature * gap**2
    assert np.any(flatter > probit.loglik(eta, y) + 1e-9)


def test_invprobit_is_recognised_and_other_shapes_are_not_mistaken_for_it():
    probit_model = link_model(pm.math.invprobit)
    lp = recognised(probit_model)
    assert lp.family == "bernoulli_probit"
    q = np.array([0.3, -0.7])
    x = np.asarray(lp.design) @ q + lp.offset
    point = {"a": 0.3, "b": -0.7}
    logp = logp_rows(probit_model, point)
    assert np.allclose(probit.loglik(x, lp.observed), logp)
    assert recognised(link_model(pm.math.invlogit)).family == "bernoulli_logit"
    with pytest.raises(
        UnsupportedLikelihood, match="not a logistic, probit or complementary log-log link"
    ):
        recognised(link_model(lambda eta: 0.3 * pm.math.erfc(-eta)))


@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_exact_steps_take_a_probit_model_with_no_arguments(step_class):
    with link_model(pm.math.invprobit):
        step = step_class(progressbar=False)
    assert step._lp.family == "bernoulli_probit"


def test_tuna_without_control_variates_names_the_link_it_cannot_bound():
    """The probit density has no Lipschitz bound on the whole space; the refusal names the
    link, since "Bernoulli" alone would also describe the logistic family it does bound."""
    with link_model(pm.math.invprobit):
        with pytest.raises(UnsupportedBound, match=r"Bernoulli \(probit link\) likelihood"):
            TunaMH(control_variates=False, progressbar=False)
