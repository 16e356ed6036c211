"""Sparse copies of the square matrices a chain multiplies or solves with at every step.

In a multilevel model each group's effects meet only themselves and the shared
coordinates, so the collapsed bounds' Hessian and the Laplace precision have a few
nonzero entries per row: a product or a solve then costs O(nonzeros) instead of
O(D^2).
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

#: A matrix of at least this many rows whose nonzero entries are at most this share of
#: its entries is kept sparse as well.
SPARSE_MIN_DIM = 64
SPARSE_MAX_DENSITY = 0.05


def kept_sparse(matrix: np.ndarray) -> sparse.csr_matrix | None:
    """A CSR copy of a square ``matrix`` that is sparse enough to gain from one, else None."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] < SPARSE_MIN_DIM:
        return None
    if np.count_nonzero(matrix) > SPARSE_MAX_DENSITY * matrix.size:
        return None
    return sparse.csr_matrix(matrix)
