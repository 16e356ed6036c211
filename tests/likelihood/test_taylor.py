"""Taylor control variates: exact decomposition, unbiasedness and variance reduction."""

import numpy as np
import pymc as pm
import pytest
from pymc.pytensorf import make_shared_replacements

from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget
from pymc_minibatch_mh.likelihood import build_tall_data, hessian_colouring
from pymc_minibatch_mh.likelihood.taylor import (
    check_block_covers_likelihood,
    compile_chunk_derivatives,
    compile_residual_diff,
    full_data_taylor,
)
from pymc_minibatch_mh.step_methods.reference import block_position, find_map

N, D = 20_000, 4


def _build(model, value_vars):
    """The model's compiled functions: this module tests the PyTensor Taylor functions
    (a recognised GLM's numpy ones are compared with them in test_numpy_glm.py)."""
    point = model.initial_point()
    shared = make_shared_replacements(point, value_vars, model)
    return build_tall_data(
        model, value_vars, shared=shared, initial_point=point, numpy_functions=False
    )


@pytest.fixture(scope="module")
def logistic():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(N, D))
    y = rng.random(N) < 1 / (1 + np.exp(-(0.4 + x @ np.array([1.0, -0.5, 0.25, 0.0]))))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5, shape=D)
        pm.Bernoulli("y", logit_p=a + x @ b, observed=y.astype(int))
    data = _build(model, model.value_vars)
    reference = block_position(
        find_map(model, model.initial_point(), progressbar=False), model.value_vars
    )
    proxy = full_data_taylor(data, reference, chunk_rows=3_000)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    # Posterior scale from the Laplace approximation: moves of the size a sampler makes.
    cov = np.linalg.inv(-proxy.hessian)
    return data, target, np.linalg.cholesky(cov)


def _posterior_move(rng, target, chol):
    q = target.proxy.reference + chol @ rng.standard_normal(D + 1)
    return q + chol @ rng.standard_normal(D + 1), q


def test_residuals_plus_proxy_equal_the_full_log_likelihood_ratio(logistic, rng):
    data, target, chol = logistic
    everything = np.arange(N)
    for _ in range(3):
        q_new, q_old = _posterior_move(rng, target, chol)
        exact = float(np.sum(data.loglik_full(q_new) - data.loglik_full(q_old)))
        decomposed = target.diff_offset(q_new, q_old) + float(
            target.loglik_diff(q_new, q_old, everything).sum()
        )
        assert decomposed == pytest.approx(exact, rel=1e-10, abs=1e-9)


def test_chunked_sums_do_not_depend_on_the_chunk_size(logistic):
    data, target, _ = logistic
    derivatives = compile_chunk_derivatives(data)
    reference = target.proxy.reference
    one_chunk = full_data_taylor(data, reference, chunk_rows=N, derivatives=derivatives)
    np.testing.assert_allclose(target.proxy.gradient, one_chunk.gradient, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(target.proxy.hessian, one_chunk.hessian, rtol=1e-9)
    assert target.proxy.value == pytest.approx(one_chunk.value, rel=1e-12)
    # The Hessian sum is the curvature of the summed log-likelihood.
    eps = 1e-5
    e0 = np.zeros(D + 1)
    e0[1] = eps
    grad_step = full_data_taylor(data, reference + e0, derivatives=derivatives).gradient
    np.testing.assert_allclose(
        (grad_step - one_chunk.gradient) / eps, one_chunk.hessian[:, 1], rtol=1e-4, atol=1e-3
    )


def test_estimator_is_unbiased_with_orders_of_magnitude_less_variance(logistic, rng):
    data, target, chol = logistic
    q_new, q_old = _posterior_move(rng, target, chol)
    exact = float(np.sum(data.loglik_full(q_new) - data.loglik_full(q_old)))
    b, n_batches = 50, 4000
    cv, plain = np.empty(n_batches), np.empty(n_batches)
    for k in range(n_batches):
        idx = rng.integers(0, N, size=b)
        cv[k] = target.diff_offset(q_new, q_old) + N * target.loglik_diff(q_new, q_old, idx).mean()
        plain[k] = N * data.loglik_diff(q_new, q_old, idx).mean()
    for estimates in (cv, plain):
        standard_error = estimates.std() / np.sqrt(n_batches)
        assert abs(estimates.mean() - exact) < 4 * standard_error + 1e-9
    assert plain.var() > 1e3 * cv.var()
    # Negative control: dropping the exactly-summed proxy part leaves a large bias.
    biased = N * np.mean(
        [target.loglik_diff(q_new, q_old, rng.integers(0, N, b)).mean() for _ in range(200)]
    )
    assert abs(biased - exact) > 10 * cv.std()


def test_control_variates_refuse_likelihood_variables_outside_the_block(rng):
    x = rng.normal(size=200)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu + x, sigma, observed=rng.normal(size=200))
    data = _build(model, [model.rvs_to_values[mu]])
    with pytest.raises(ValueError, match="sigma"):
        check_block_covers_likelihood(data)


def test_residual_check_catches_a_miscompiled_residual_function(logistic):
    """The construction-time check of the compiled residuals (against the reverse-mode
    gradient and Hessian sums) accepts the compiled function and rejects a wrong one."""
    from pymc_minibatch_mh.likelihood.taylor import ResidualCheck, _residuals_agree

    data, target, chol = logistic
    q_ref = target.proxy.reference
    check = ResidualCheck(
        points=(q_ref, q_ref + chol[:, 0], q_ref - chol[:, 1]),
        ratio=data.loglik_diff,
        derivatives=compile_chunk_derivatives(data),
        rows=np.arange(0, N, 997),
    )
    assert _residuals_agree(target.residual_diff, check)

    def off_by_a_little(q_new, q_old, q_ref, idx):  # negative control: 1 % error per row
        return target.residual_diff(q_new, q_old, q_ref, idx) + 0.01 * data.loglik_diff(
            q_new, q_old, idx
        )

    assert not _residuals_agree(off_by_a_little, check)


def test_miscompiled_residuals_are_recompiled_without_fusion(logistic, monkeypatch):
    """If the first compilation is wrong, the residuals are compiled again without
    elementwise fusion; if that is wrong too, construction stops with a clear error."""
    from pymc_minibatch_mh.likelihood import taylor

    data, target, _ = logistic
    real = taylor._compile_residual_diff
    calls = []

    def broken_unless_unfused(*args, exclude_fusion):
        calls.append(exclude_fusion)
        fn = real(*args, exclude_fusion=exclude_fusion)
        if exclude_fusion:
            return fn
        return lambda q_new, q_old, q_ref, idx: 2.0 * fn(q_new, q_old, q_ref, idx) + 0.1

    monkeypatch.setattr(taylor, "_compile_residual_diff", broken_unless_unfused)
    fn = taylor.compile_residual_diff(data, reference=target.proxy.reference)
    assert calls == [False, True]
    q = target.proxy.reference
    rows = np.arange(100)
    np.testing.assert_allclose(
        fn(q + 0.01, q, q, rows), target.residual_diff(q + 0.01, q, q, rows), atol=1e-10
    )

    def always_broken(*args, exclude_fusion):
        fn = real(*args, exclude_fusion=exclude_fusion)
        return lambda *point: fn(*point) + 0.1

    monkeypatch.setattr(taylor, "_compile_residual_diff", always_broken)
    with pytest.raises(RuntimeError, match="control_variates=False"):
        taylor.compile_residual_diff(data, reference=target.proxy.reference)


@pytest.mark.parametrize("differenced", [True, False])
def test_hessian_sums_on_a_pm_data_design_with_a_separate_intercept(
    differenced, monkeypatch, first_run
):
    """Intercept + ``pm.Data`` design with coords, the way users write logistic regression.

    Its vectorised Jacobian sent PyTensor 2.x's rewriter into a loop that grew to 11 GB;
    the sums must compile and equal the closed form ``-X1^T diag(p (1 - p)) X1``, from
    differences of the gradient sums (default) and from the products' graph.
    """
    monkeypatch.setattr(hessian_colouring, "DIFFERENCED_PRODUCTS", differenced)
    rng = np.random.default_rng(12)
    n = 500
    x = rng.normal(size=(n, 3))
    y = (rng.random(n) < 0.5).astype(int)
    with pm.Model(coords={"feature": ["u", "v", "w"], "obs": np.arange(n)}) as model:
        X = pm.Data("X", x, dims=("obs", "feature"))
        a = pm.Normal("a", 0.0, 2.5)
        b = pm.Normal("b", 0.0, 1.0, dims="feature")
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X, b), observed=y, dims="obs")
    data = _build(model, model.value_vars)
    q = np.array([0.3, -0.2, 0.5, 0.1])
    _, grad, hess = compile_chunk_derivatives(data)(q, np.arange(n))
    design = np.column_stack([np.ones(n), x])
    p = 1 / (1 + np.exp(-design @ q))
    np.testing.assert_allclose(grad, design.T @ (y - p), rtol=1e-10, atol=1e-10)
    want = -design.T @ (design * (p * (1 - p))[:, None])
    np.testing.assert_allclose(hess, want, rtol=1e-8 if differenced else 1e-10)
    # Negative control: a curvature with the wrong weights is told apart.
    wrong = -design.T @ (design * p[:, None])
    assert not np.allclose(hess, wrong, rtol=1e-3)
