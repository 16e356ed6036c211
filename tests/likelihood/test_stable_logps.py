"""The negative binomial's log-density with finite second derivatives: the same values as
PyMC's, Hessians finite (and right) where a category's mean underflows against the
dispersion, and the Taylor sums of a model with such a category finite."""

from functools import cache

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pymc.logprob.abstract import _logprob
from pymc.pytensorf import make_shared_replacements
from pytensor.compile.mode import Mode
from pytensor.graph.replace import clone_replace

from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.stable_logps import observed_logp_terms
from pymc_minibatch_mh.likelihood.taylor import compile_chunk_derivatives

ALPHA_LOG, PSI_LOGIT = 0.85, 1.15
ETA, LOG_ALPHA, PSI = pt.dvector("eta"), pt.dscalar("log_alpha"), pt.dscalar("psi_logit")
#: Graph rewrites as compiled by the package, evaluated in Python (no C or numba build).
PYTHON = Mode(linker="py", optimizer="fast_run")
Y = pt.tensor("y", dtype="int64", shape=(3,))  # the observed constant's type

#: The ways a user writes a negative binomial likelihood (mean through exp or softplus,
#: or n and p), alone or inside PyMC's zero-inflated and hurdle mixtures.
DISTRIBUTIONS = {
    "mu_alpha": lambda: pm.NegativeBinomial.dist(mu=pt.exp(ETA), alpha=pt.exp(LOG_ALPHA)),
    "softplus_mean": lambda: pm.NegativeBinomial.dist(mu=pt.softplus(ETA), alpha=pt.exp(LOG_ALPHA)),
    "n_p": lambda: pm.NegativeBinomial.dist(n=pt.exp(LOG_ALPHA), p=pm.math.sigmoid(ETA)),
    "zero_inflated": lambda: pm.ZeroInflatedNegativeBinomial.dist(
        psi=pm.math.sigmoid(PSI), mu=pt.exp(ETA), alpha=pt.exp(LOG_ALPHA)
    ),
    "hurdle": lambda: pm.HurdleNegativeBinomial.dist(
        psi=pm.math.sigmoid(PSI), mu=pt.exp(ETA), alpha=pt.exp(LOG_ALPHA)
    ),
}


@cache
def _derivatives(name: str, stable: bool):
    """``f(eta, y) -> (sum logp, d/deta, d2/deta2)`` of the named likelihood, PyMC's graph
    or the package's."""
    with pm.Model() as model:
        rv = model.register_rv(DISTRIBUTIONS[name](), "y", observed=np.zeros(3))
    if stable:
        (term,) = observed_logp_terms(model, [rv])
    else:
        (term,) = model.logp(vars=[rv], sum=False)
    value_var = model.rvs_to_values[rv]
    term = clone_replace(term, {value_var: Y})
    total = term.sum()
    grad = pt.grad(total, ETA)
    hess = pt.grad(grad.sum(), ETA)  # elementwise in eta: the diagonal is the Hessian
    fn = pytensor.function(
        [ETA, LOG_ALPHA, PSI, Y], [total, grad, hess], on_unused_input="ignore", mode=PYTHON
    )
    return lambda eta, y: fn(
        np.asarray(eta, float), ALPHA_LOG, PSI_LOGIT, np.full(3, int(y), dtype=np.int64)
    )


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_values_are_pymcs(name):
    """Where PyMC's form is precise (means from e^-5 to e^3) the two agree: values and
    gradients to rounding, Hessians to 1e-7 relative (PyMC's own zero-inflated Hessian is
    5e-9 off the closed form here; see the next test)."""
    eta = np.array([3.0, 0.5, -5.0])
    for y in [0, 1, 4]:
        ours, theirs = _derivatives(name, True)(eta, y), _derivatives(name, False)(eta, y)
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-7, atol=1e-14)


@pytest.mark.parametrize("name", ["mu_alpha", "zero_inflated"])
@pytest.mark.parametrize("y", [1, 4])
def test_hessian_of_positive_counts_is_the_closed_form(name, y):
    """A positive count reads the negative binomial alone (the inflation only adds log psi):
    d2/deta2 = -(y + alpha) alpha mu / (mu + alpha)^2, matched to 1e-12 relative."""
    eta = np.array([3.0, 0.5, -5.0])
    alpha, mu = np.exp(ALPHA_LOG), np.exp(eta)
    _, _, hess = _derivatives(name, True)(eta, y)
    np.testing.assert_allclose(hess, -(y + alpha) * alpha * mu / (mu + alpha) ** 2, rtol=1e-12)


@pytest.mark.parametrize("name", ["mu_alpha", "zero_inflated"])
def test_hessian_is_finite_and_right_where_the_mean_underflows(name):
    """A zero outcome at linear predictors from -50 to -700 (mean below 1e-16 alpha):
    PyMC's Hessian is NaN there (negative control); the package's is finite and equals the
    closed form ``-alpha mu / (mu + alpha)`` times the zero-inflated posterior weight."""
    eta = np.array([-50.0, -300.0, -700.0])
    _, _, pymc_hess = _derivatives(name, False)(eta, 0)
    assert not np.all(np.isfinite(pymc_hess))
    value, grad, hess = _derivatives(name, True)(eta, 0)
    assert np.isfinite(value) and np.all(np.isfinite(grad)) and np.all(np.isfinite(hess))
    alpha, mu = np.exp(ALPHA_LOG), np.exp(eta)
    # d/deta log NB(0) = -alpha mu / (mu + alpha); the zero-inflated mixture weighs it by
    # the share of the zero explained by the count component, psi NB(0) / P(0) -> psi.
    weight = 1.0 / (1.0 + np.exp(-PSI_LOGIT)) if name == "zero_inflated" else 1.0
    expected = -weight * alpha * mu / (mu + alpha)
    np.testing.assert_allclose(grad, expected, rtol=1e-6)
    np.testing.assert_allclose(hess, expected, rtol=1e-6)  # to first order in mu


def test_positive_counts_far_below_their_mean_stay_finite():
    """A count of 2 at a linear predictor of -700: the density is e^-1400-ish and its
    Hessian is the tiny closed form, not NaN."""
    value, grad, hess = _derivatives("mu_alpha", True)([-700.0, -700.0, -700.0], 2)
    assert np.all(np.isfinite([value, *grad, *hess]))
    np.testing.assert_allclose(grad, 2.0, rtol=1e-12)


def test_pymcs_dispatch_is_restored():
    rv_type = type(pm.NegativeBinomial.rv_op)
    before = _logprob.dispatch(rv_type)
    with pm.Model() as model:
        pm.NegativeBinomial("y", mu=2.0, alpha=1.0, observed=[0, 1])
    observed_logp_terms(model)
    assert _logprob.dispatch(rv_type) is before


def test_taylor_sums_of_an_all_zero_category_are_finite_far_out():
    """A zero-inflated negative binomial regression whose last category has only zeros:
    the full-data Hessian at that category's coefficient of -50 (well inside its
    posterior) is finite. It was NaN, which kept the control variates at the MAP."""
    rng = np.random.default_rng(3)
    category = rng.integers(0, 2, 400)
    y = np.where(category == 1, 0, rng.negative_binomial(2.0, 0.5, 400))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 10)
        g = pm.Normal("g", 0, 100)
        psi = pm.Beta("psi", 2, 2)
        alpha = pm.HalfNormal("alpha", 5.0)
        mu = pm.math.exp(a + g * (category == 1))
        pm.ZeroInflatedNegativeBinomial("y", psi=psi, mu=mu, alpha=alpha, observed=y)
    point = model.initial_point()
    shared = make_shared_replacements(point, model.value_vars, model)
    data = build_tall_data(model, model.value_vars, shared=shared, initial_point=point)
    derivatives = compile_chunk_derivatives(data)
    q = np.array([0.5, -50.0, 0.0, 0.5])  # a, g, psi's logit, alpha's log
    value, grad, hess = derivatives(q, np.arange(400, dtype=np.int64))
    assert np.isfinite(value) and np.all(np.isfinite(grad)) and np.all(np.isfinite(hess))
    assert abs(hess[1, 1]) < 1e-15  # the category's curvature vanishes with its mean
