"""Factor a precision matrix once: whether it is positive definite, its solves, its log det.

The Newton searches of the reference point factor ``-H`` (the log posterior's negative
Hessian) at every step. In a multilevel model most of ``H`` is zero (effects of different
groups never meet in a row or a prior term), and a dense Cholesky factorisation of a
2,000-coordinate hierarchy costs seconds where a sparse one costs milliseconds. A matrix
that is large and mostly zero is therefore factored by SuperLU with a symmetric
fill-reducing ordering and no row interchanges, ``P A P^T = L U``: for a symmetric ``A``
the pivots (the diagonal of ``U``) are those of its ``L D L^T`` factorisation, so ``A`` is
positive definite exactly when every pivot is positive, and ``log det A`` is the sum of
their logs. Other matrices take the dense Cholesky path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg, sparse
from scipy.sparse import linalg as sparse_linalg

# Matrices of at least SPARSE_MIN_SIZE rows with at most SPARSE_SHARE non-zeros are factored
# in sparse form, as the proxy's Hessian is multiplied in sparse form.
from pymc_minibatch_mh.kernels.control_variates import SPARSE_MIN_SIZE, SPARSE_SHARE


@dataclass(frozen=True, eq=False)
class DefiniteFactor:
    """A factorisation of a symmetric positive definite matrix ``A``.

    Attributes
    ----------
    log_det : float
        ``log det A``.
    """

    log_det: float
    _solve: object

    def solve(self, b: np.ndarray) -> np.ndarray:
        """``A^{-1} b``."""
        return np.asarray(self._solve(np.asarray(b, dtype=np.float64)))


def definite_factor(precision: np.ndarray) -> DefiniteFactor | None:
    """Factor the symmetric matrix ``precision``; None when it is not positive definite."""
    precision = np.asarray(precision, dtype=np.float64)
    size = precision.shape[0]
    if size >= SPARSE_MIN_SIZE and np.count_nonzero(precision) <= SPARSE_SHARE * precision.size:
        return _sparse_factor(precision)
    try:
        chol = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError:
        return None
    log_det = 2.0 * float(np.sum(np.log(np.diag(chol))))
    return DefiniteFactor(log_det, lambda b: linalg.cho_solve((chol, True), b))


def _sparse_factor(precision: np.ndarray) -> DefiniteFactor | None:
    matrix = sparse.csc_matrix(precision)
    try:
        lu = sparse_linalg.splu(
            matrix,
            permc_spec="MMD_AT_PLUS_A",
            diag_pivot_thresh=0.0,
            options={"SymmetricMode": True},
        )
    except RuntimeError:  # an exactly zero pivot: singular
        return None
    pivots = lu.U.diagonal()
    no_interchange = np.array_equal(lu.perm_r, lu.perm_c)
    if not (no_interchange and np.all(np.isfinite(pivots)) and np.all(pivots > 0.0)):
        return None
    return DefiniteFactor(float(np.sum(np.log(pivots))), lu.solve)
