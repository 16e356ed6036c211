"""Bounds on Taylor-remainder differences (TunaMH with control variates)."""

import numpy as np
import pymc as pm
import pytest
from pymc.pytensorf import make_shared_replacements
from scipy import special

from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.bounds.taylor_remainder import (
    LOGISTIC_THIRD_DERIVATIVE,
    RemainderMetric,
    taylor_remainder_bound,
    third_derivative_bound,
)
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget
from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.linear_predictor import recognise_linear_predictor
from pymc_minibatch_mh.likelihood.taylor import compile_residual_diff, full_data_taylor

N = 400


def _third_derivative(f, eta, h=1e-3):
    return (f(eta + 2 * h) - 2 * f(eta + h) + 2 * f(eta - h) - f(eta - 2 * h)) / (2 * h**3)


def test_logistic_constant_is_the_supremum_of_the_third_derivative():
    eta = np.linspace(-8, 8, 20_001)
    sig = special.expit(eta)
    assert np.max(np.abs(sig * (1 - sig) * (1 - 2 * sig))) == pytest.approx(
        LOGISTIC_THIRD_DERIVATIVE, rel=1e-6
    )


def _setup(model):
    point = model.initial_point()
    value_vars = model.value_vars
    shared = make_shared_replacements(point, value_vars, model)
    data = build_tall_data(model, value_vars, shared=shared, initial_point=point)
    lp = recognise_linear_predictor(
        model, value_vars, shared=shared, initial_point=point, check_against=data.loglik
    )
    return data, lp


def test_student_t_constant_is_the_supremum_of_the_third_derivative(rng):
    nu, sigma = 4.0, 0.7
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.StudentT("y", nu=nu, mu=b * np.ones(5), sigma=sigma, observed=np.zeros(5))
    _, lp = _setup(model)
    r = np.linspace(-20, 20, 400_001)

    def logdens(res):
        return -(nu + 1) / 2 * np.log1p(res**2 / (nu * sigma**2))

    numeric = np.max(np.abs(_third_derivative(logdens, r)))
    np.testing.assert_allclose(third_derivative_bound(lp), numeric, rtol=1e-4)


def _moves(rng, centre, scales, n_pairs=40):
    for scale in scales:
        for _ in range(n_pairs):
            q = centre + scale * rng.standard_normal(centre.size)
            yield q, q + scale * rng.standard_normal(centre.size)


@pytest.fixture(scope="module")
def logistic_case():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(N, 2))
    y = rng.random(N) < special.expit(0.5 + x @ np.array([1.0, -1.5]))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3, shape=2)
        pm.Bernoulli("y", logit_p=a + x @ b, observed=y.astype(int))
    data, lp = _setup(model)
    reference = np.array([0.45, 0.9, -1.4])
    proxy = full_data_taylor(data, reference)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    chol = np.linalg.cholesky(np.linalg.inv(-proxy.hessian))
    return target, lp, reference, chol


@pytest.mark.parametrize("whitened", [False, True])
def test_remainder_differences_are_bounded_for_every_datum(logistic_case, rng, whitened):
    target, lp, reference, chol = logistic_case
    bound = taylor_remainder_bound(lp, reference, chol=chol if whitened else None)
    everything = np.arange(N)
    worst = 0.0
    for q, q_new in _moves(rng, reference, scales=[0.01, 0.1, 0.5, 2.0]):
        residual = np.abs(target.loglik_diff(q_new, q, everything))
        allowed = bound.c * bound.metric(q, q_new)
        assert np.all(residual <= allowed * (1 + 1e-9) + 1e-12)
        worst = max(worst, float(np.max(residual / allowed)))
    assert worst > 0.01  # the bound is not vacuous


def test_negative_control_a_too_small_constant_is_violated(logistic_case, rng):
    target, lp, reference, _ = logistic_case
    bound = taylor_remainder_bound(lp, reference)
    everything = np.arange(N)
    violated = any(
        np.any(
            np.abs(target.loglik_diff(q_new, q, everything))
            > 0.05 * bound.c * bound.metric(q, q_new)
        )
        for q, q_new in _moves(rng, reference, scales=[0.5, 2.0])
    )
    assert violated


def test_metric_is_symmetric_and_centred(rng):
    metric = RemainderMetric(np.array([1.0, 2.0]), np.array([[2.0, 0.0], [0.5, 1.0]]))
    q, q_new = rng.normal(size=2), rng.normal(size=2)
    assert metric(q, q_new) == pytest.approx(metric(q_new, q))
    assert metric(q, q) == 0.0


def test_normal_likelihood_has_an_exact_proxy(rng):
    x = rng.normal(size=(N, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 3, shape=2)
        pm.Normal("y", x @ b, 1.5, observed=x @ np.array([1.0, 2.0]) + rng.normal(size=N))
    data, lp = _setup(model)
    bound = taylor_remainder_bound(lp, np.zeros(2))
    assert bound.C == 0.0
    target = ControlVariateTarget(
        data, full_data_taylor(data, np.zeros(2)), compile_residual_diff(data)
    )
    residual = target.loglik_diff(np.array([3.0, -1.0]), np.array([0.5, 0.2]), np.arange(N))
    np.testing.assert_allclose(residual, 0.0, atol=1e-9)


def test_poisson_has_no_third_derivative_bound(rng):
    x = rng.normal(size=N)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.Poisson("y", mu=pm.math.exp(b * x), observed=rng.poisson(1.0, size=N))
    _, lp = _setup(model)
    with pytest.raises(UnsupportedBound, match="third derivative"):
        taylor_remainder_bound(lp, np.zeros(1))
