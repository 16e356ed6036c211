"""Hessian sums from coloured Hessian-vector products: the structure read from the graph,
the recovery, and the check that falls back to the dense Hessian."""

import numpy as np
import pymc as pm
import pytest
from tall_builder import tall_data_of

from pymc_minibatch_mh.likelihood import hessian_colouring as colouring_module
from pymc_minibatch_mh.likelihood.coloured_hessian import (
    ColouredSumDerivatives,
    HessianColouring,
)
from pymc_minibatch_mh.likelihood.differenced_products import DifferencedProducts
from pymc_minibatch_mh.likelihood.hessian_colouring import hessian_colouring
from pymc_minibatch_mh.likelihood.taylor import compile_chunk_derivatives

N, GROUPS = 3_000, 40


def _tall(model):
    """The compiled functions (a recognised regression would be evaluated with numpy)."""
    return tall_data_of(model, numpy_functions=False)


def _groups_model(slopes: bool = False, crossed: bool = False):
    rng = np.random.default_rng(5)
    g = rng.integers(0, GROUPS, N)
    h = rng.integers(0, 7, N)
    x = rng.normal(size=N)
    y = rng.normal(size=N) + rng.normal(size=GROUPS)[g]
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        tau = pm.HalfNormal("tau", 1)
        a = pm.Normal("a", mu, tau, shape=GROUPS)
        b = pm.Normal("b", 0, 1, shape=GROUPS) if slopes else pm.Normal("b", 0, 1)
        eta = a[g] + (b[g] if slopes else b) * x
        if crossed:
            eta = eta + pm.Normal("c", 0, 1, shape=7)[h]
        pm.Normal("y", eta, pm.HalfNormal("sigma", 2), observed=y)
    return model


def _colouring(model):
    data = _tall(model)
    graphs = data.graphs
    return data, hessian_colouring(graphs.q, graphs.batch, graphs.idx, data.ndim)


def _assert_hessians_close(got, want, rel):
    """Entries equal to ``rel`` of the Hessian's scale ``sqrt(|H_jj H_kk|)`` (the products
    are differences of gradient sums: their rounding is relative to the whole column)."""
    diag = np.abs(np.diag(want))
    np.testing.assert_array_less(np.abs(got - want), rel * np.sqrt(np.outer(diag, diag)) + 1e-12)


def _dense_sums(data, q, idx):
    derivatives = compile_chunk_derivatives(data)
    return ColouredSumDerivatives(derivatives.function, HessianColouring.dense(data.ndim))(q, idx)


@pytest.mark.parametrize(
    ("slopes", "crossed", "colours"),
    [
        # (mu and tau are not read by the rows: no colour)
        (False, False, 3),  # b, sigma + one colour for the 40 intercepts
        (True, False, 3),  # sigma + intercepts + slopes (one index)
        (False, True, 10),  # b, sigma, 7 crossed levels + the intercepts
    ],
)
def test_gathered_effects_share_a_colour_and_the_hessian_is_exact(slopes, crossed, colours):
    data, colouring = _colouring(_groups_model(slopes=slopes, crossed=crossed))
    assert colouring.n_colours == colours < data.ndim
    rng = np.random.default_rng(1)
    q = rng.normal(scale=0.3, size=data.ndim)
    idx = np.arange(N, dtype=np.int64)
    coloured = compile_chunk_derivatives(data)
    assert coloured.colouring.n_colours == colours
    value, grad, hess = coloured(q, idx)
    assert coloured.colouring.n_colours == colours  # the first call's check passed
    dense_value, dense_grad, dense_hess = _dense_sums(data, q, idx)
    assert value == pytest.approx(dense_value, rel=1e-12)
    np.testing.assert_allclose(grad, dense_grad, rtol=1e-10, atol=1e-10)
    _assert_hessians_close(hess, dense_hess, 1e-9)
    # Negative control: the structure matters; intercepts of different groups never meet.
    a = slice(2, 2 + GROUPS)  # (mu, tau are first in the block: raveled in model order)
    assert np.count_nonzero(dense_hess[a, a] - np.diag(np.diag(dense_hess[a, a]))) == 0


def test_an_effect_read_by_two_indices_is_not_compressed():
    rng = np.random.default_rng(3)
    home, away = rng.integers(0, 30, N), rng.integers(0, 30, N)
    with pm.Model() as model:  # Bradley-Terry: each row reads two strengths
        s = pm.Normal("s", 0, 1, shape=30)
        pm.Bernoulli("y", logit_p=s[home] - s[away], observed=rng.integers(0, 2, N))
    data, colouring = _colouring(model)
    assert colouring.n_colours == data.ndim


def test_a_wrong_colouring_is_caught_by_the_first_call_and_replaced():
    data, _ = _colouring(_groups_model(crossed=True))
    derivatives = compile_chunk_derivatives(data)
    # Claim the crossed levels (7 of them, met by every intercept) as one gathered block
    # along with the intercepts: intercept-level entries would then be summed wrongly.
    c = np.arange(data.ndim - 8, data.ndim - 1)
    wrong = HessianColouring.gathered(data.ndim, np.stack([np.arange(2, 9), c], axis=1))
    patched = ColouredSumDerivatives(derivatives.function, wrong)
    q = np.random.default_rng(2).normal(scale=0.3, size=data.ndim)
    idx = np.arange(N, dtype=np.int64)
    hess = patched(q, idx)[2]
    assert patched.colouring.n_colours == data.ndim
    _assert_hessians_close(hess, _dense_sums(data, q, idx)[2], 1e-9)


def test_recover_inverts_the_products_of_a_structured_hessian():
    rng = np.random.default_rng(4)
    size, groups = 12, np.array([[3, 8], [4, 9], [5, 10], [6, 11]])  # 2 blocks x 4 groups
    hess = np.zeros((size, size))
    shared = [0, 1, 2, 7]
    hess[np.ix_(shared, shared)] = rng.normal(size=(4, 4))
    for j in range(4):
        hess[np.ix_(groups[j], groups[j])] = rng.normal(size=(2, 2))
        hess[np.ix_(shared, groups[j])] = rng.normal(size=(4, 2))
    hess = hess + hess.T
    colouring = HessianColouring.gathered(size, groups)
    assert colouring.n_colours == 6
    np.testing.assert_allclose(colouring.recover((hess @ colouring.columns).T), hess)


def _unscaled_logistic():
    """A logistic regression with a covariate in the 10^5 range (income in dollars): the
    log-likelihood bends on a scale of 1e-5 in its coefficient."""
    rng = np.random.default_rng(8)
    income = rng.normal(5e4, 2e4, size=N)
    x = rng.normal(size=N)
    logit = 0.2 + 3e-5 * (income - 5e4) + 0.5 * x
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli(
            "y",
            logit_p=b[0] + b[1] * income + b[2] * x,
            observed=(rng.random(N) < 1 / (1 + np.exp(-logit))).astype(int),
        )
    return model, np.array([0.2 - 1.5, 3e-5, 0.5])


def test_differenced_products_equal_the_products_graph_where_the_likelihood_bends_fast(
    monkeypatch, first_run
):
    """The steps shrink until the differences settle: the Hessian sums of the unscaled
    logistic regression equal those of the compiled products (negative control: one
    fixed step of 1e-3 is far off)."""
    model, q = _unscaled_logistic()
    data = _tall(model)
    idx = np.arange(N, dtype=np.int64)
    differenced = compile_chunk_derivatives(data)
    assert isinstance(differenced.function, DifferencedProducts)
    value, grad, hess = differenced(q, idx)
    assert differenced.function.exact is None  # the differences settled
    monkeypatch.setattr(colouring_module, "DIFFERENCED_PRODUCTS", False)
    exact = compile_chunk_derivatives(data)
    assert not isinstance(exact.function, DifferencedProducts)
    want_value, want_grad, want_hess = exact(q, idx)
    assert value == pytest.approx(want_value, rel=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10)
    _assert_hessians_close(hess, want_hess, 1e-8)
    scale = np.sqrt(np.outer(np.diag(want_hess), np.diag(want_hess)))
    # Negative control: central differences with the first step, 1e-3, not shrunk.
    gradient_sums = differenced.function.function
    coarse = np.empty((3, 3))
    for j in range(3):
        e = np.zeros(3)
        e[j] = 1e-3 * max(1.0, abs(q[j]))
        coarse[:, j] = (gradient_sums(q + e, idx)[1] - gradient_sums(q - e, idx)[1]) / (2 * e[j])
    assert not np.all(np.abs(coarse - want_hess) < 1e-3 * scale)


def test_products_are_compiled_where_the_differences_do_not_settle():
    """A gradient with a jump at the point (``|x - 0.3|``): no step settles, and the
    products come from ``compile_exact`` from then on."""
    calls = []

    def gradient_sums(x, idx):
        return float(np.abs(x - 0.3).sum()), np.sign(x - 0.3)

    def compile_exact():
        calls.append(1)
        return lambda x, columns, idx: (0.0, np.zeros(x.size), np.zeros((columns.shape[1], 2)))

    products = DifferencedProducts(gradient_sums, compile_exact)
    smooth = products(np.array([1.0, 2.0]), np.eye(2), np.arange(3))
    np.testing.assert_allclose(smooth[2], 0.0, atol=1e-12)  # settled: sign is flat there
    assert calls == [] and products.exact is None
    products(np.array([0.3, 2.0]), np.eye(2), np.arange(3))
    assert calls == [1] and products.exact is not None


def test_the_products_graph_serves_warm_runs_and_large_data(monkeypatch, first_run, tmp_path):
    """Differences on a first run of moderate size only: the products' graph is used when
    the function cache holds it, or when rows times colours exceed the limit."""
    from pymc_minibatch_mh.likelihood import function_cache

    data = _tall(_unscaled_logistic()[0])
    assert isinstance(compile_chunk_derivatives(data).function, DifferencedProducts)
    monkeypatch.setattr(colouring_module, "DIFFERENCED_ROWS", 3 * N - 1)
    assert not isinstance(compile_chunk_derivatives(data).function, DifferencedProducts)
    monkeypatch.setattr(colouring_module, "DIFFERENCED_ROWS", 3 * N)
    function_cache.use_function_cache(True)
    monkeypatch.setenv(function_cache.ENVIRONMENT_VARIABLE, str(tmp_path))
    assert isinstance(compile_chunk_derivatives(data).function, DifferencedProducts)
    monkeypatch.setattr(colouring_module, "DIFFERENCED_PRODUCTS", False)
    compile_chunk_derivatives(data)  # compiles the products' graph and stores it
    monkeypatch.setattr(colouring_module, "DIFFERENCED_PRODUCTS", True)
    assert not isinstance(compile_chunk_derivatives(data).function, DifferencedProducts)
    assert any(tmp_path.iterdir())
