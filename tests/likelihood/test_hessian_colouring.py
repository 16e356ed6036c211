"""Hessian sums from coloured Hessian-vector products: the structure read from the graph,
the recovery, and the check that falls back to the dense Hessian."""

import numpy as np
import pymc as pm
import pytest
from pymc.pytensorf import make_shared_replacements

from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.hessian_colouring import (
    ColouredSumDerivatives,
    HessianColouring,
    hessian_colouring,
)
from pymc_minibatch_mh.likelihood.taylor import compile_chunk_derivatives

N, GROUPS = 3_000, 40


def _tall(model):
    point = model.initial_point()
    shared = make_shared_replacements(point, model.value_vars, model)
    return build_tall_data(model, model.value_vars, shared=shared, initial_point=point)


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
    np.testing.assert_allclose(hess, dense_hess, rtol=1e-9, atol=1e-9)
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
    np.testing.assert_allclose(hess, _dense_sums(data, q, idx)[2], rtol=1e-9, atol=1e-9)


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
