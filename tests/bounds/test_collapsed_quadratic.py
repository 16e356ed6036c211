"""The collapsed quadratic: value and gradient agree with the dense formula, through the
sparse copy of a multilevel Hessian too."""

import numpy as np
import pytest

from pymc_minibatch_mh.bounds.collapsed import CollapsedQuadratic
from pymc_minibatch_mh.kernels.sparse_matrices import SPARSE_MIN_DIM


def _arrow_hessian(rng, groups: int, shared: int) -> np.ndarray:
    """Each group's effect meets itself and the shared coefficients only."""
    dim = groups + shared
    hess = np.zeros((dim, dim))
    hess[np.arange(groups), np.arange(groups)] = -rng.uniform(1, 3, groups)
    cross = rng.normal(size=(groups, shared))
    hess[:groups, groups:], hess[groups:, :groups] = cross, cross.T
    block = rng.normal(size=(shared, shared))
    hess[groups:, groups:] = -(block @ block.T + dim * np.eye(shared))
    return hess


@pytest.mark.parametrize(("groups", "sparse_kept"), [(10, False), (300, True)])
def test_value_and_gradient_match_the_dense_formula(rng, groups, sparse_kept):
    hess = _arrow_hessian(rng, groups, 3)
    dim = hess.shape[0]
    centre, grad0 = rng.normal(size=dim), rng.normal(size=dim)
    quad = CollapsedQuadratic(centre, 1.5, grad0, hess)
    assert (quad._sparse_hessian is not None) == sparse_kept
    for _ in range(5):
        q = rng.normal(size=dim)
        d = q - centre
        value, grad = quad.value_and_gradient(q)
        np.testing.assert_allclose(value, 1.5 + grad0 @ d + 0.5 * d @ hess @ d, rtol=1e-12)
        np.testing.assert_allclose(grad, grad0 + hess @ d, rtol=1e-12, atol=1e-12)
        assert quad(q) == value
        np.testing.assert_array_equal(quad.gradient(q), grad)


def test_a_dense_hessian_is_not_kept_sparse(rng):
    dim = SPARSE_MIN_DIM + 10
    block = rng.normal(size=(dim, dim))
    quad = CollapsedQuadratic(np.zeros(dim), 0.0, np.zeros(dim), -(block @ block.T))
    assert quad._sparse_hessian is None
