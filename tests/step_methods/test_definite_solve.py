"""Definiteness, solves and log determinants of precision matrices, sparse and dense."""

import numpy as np
import pytest

from pymc_minibatch_mh.step_methods import definite_solve
from pymc_minibatch_mh.step_methods.definite_solve import definite_factor


def _arrow(size=600, shared=4, seed=0, coupling=0.2):
    """A multilevel precision: a diagonal for the groups, dense rows for shared coordinates."""
    rng = np.random.default_rng(seed)
    a = np.diag(rng.uniform(1.0, 5.0, size))
    a[:shared, :] = a[:, :shared].T[:shared, :] = 0.0
    block = rng.normal(size=(shared, shared))
    a[:shared, :shared] = block @ block.T + size * np.eye(shared)
    cross = coupling * rng.normal(size=(shared, size - shared))
    a[:shared, shared:] = cross
    a[shared:, :shared] = cross.T
    return a


def test_sparse_path_matches_dense_algebra(monkeypatch):
    a = _arrow()
    calls = []
    original = definite_solve._sparse_factor
    monkeypatch.setattr(definite_solve, "_sparse_factor", lambda m: calls.append(1) or original(m))
    factor = definite_factor(a)
    assert calls, "a large, mostly zero matrix takes the sparse path"
    b = np.random.default_rng(1).normal(size=a.shape[0])
    np.testing.assert_allclose(factor.solve(b), np.linalg.solve(a, b), rtol=1e-9, atol=1e-12)
    sign, log_det = np.linalg.slogdet(a)
    assert sign > 0
    assert factor.log_det == pytest.approx(log_det, rel=1e-10)


@pytest.mark.parametrize("size", [600, 50])  # the sparse path and the dense one
def test_indefinite_matrices_are_refused(size):
    """Negative controls: a negative pivot in the groups' block, and couplings strong
    enough to break definiteness while every diagonal entry stays positive."""
    a = _arrow(size=size)
    assert definite_factor(a) is not None
    negative = a.copy()
    negative[size // 2, size // 2] = -1.0
    assert definite_factor(negative) is None
    strong = _arrow(size=size, coupling=40.0)
    assert np.all(np.diag(strong) > 0)
    assert np.linalg.eigvalsh(strong)[0] < 0
    assert definite_factor(strong) is None
