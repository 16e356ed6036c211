"""The Normal likelihood with a free scale as its own FlyMC "bound": exact and global.

For ``y_n ~ Normal(eta_n, sigma)`` with ``eta = X q + offset`` and
``s = log sigma = z . q + s0`` affine in the block, the log-likelihood of all N rows is
a function of a few sufficient statistics. With ``d = q - q*`` and the residuals
``r*_n = y_n - eta_n(q*)`` at a fixed point ``q*``,

    sum_n l_n(q) = -N s - N log(2 pi) / 2 - e^{-2 s} S(q) / 2,
    S(q) = sum_n (r*_n - x_n . d)^2 = R - 2 b . d + d^T A d,

with ``R = sum r*_n^2``, ``b = X^T r*`` and ``A = X^T X``: ``O(D^2)`` numbers from one
pass over the data, and expanded around ``q*`` so that the sum is computed without the
cancellation of ``y^T y - 2 q^T X^T y + q^T X^T X q``.

FlyMC needs a collapsible lower bound ``B_n <= L_n``; ``B_n = L_n`` is one, the tightest.
With it every ``L~_n = L_n / B_n - 1`` is zero, no datum is ever bright, the brightness
updates have nothing to do (:attr:`ExactNormalLikelihood.exact`), and the ``theta``
updates run on the exact posterior at ``O(D^2)`` per evaluation, reading no data. The
bound holds for every ``q``: no trust region.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets of
   Data", UAI 2014 (collapsible bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pymc_minibatch_mh.bounds.collapsed import DEFAULT_CHUNK_ENTRIES
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.data.chunk_pass import design_sum
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.data.row_design import RowDesign, design_rows

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True, eq=False)
class ExactNormalLikelihood:
    """The Normal log-likelihood with a log-linear scale, per row and collapsed.

    Attributes
    ----------
    design : ndarray or RowDesign, shape (N, D)
    observed : ndarray, shape (N,)
        ``y - offset``.
    scale_row : ndarray, shape (D,)
        ``z``.
    scale_offset : float
        ``s0``.
    centre : ndarray, shape (D,)
        ``q*``.
    residual_squares : float
        ``R``.
    cross : ndarray, shape (D,)
        ``b = X^T r*``.
    gram : ndarray, shape (D, D)
        ``A = X^T X``.
    """

    design: object
    observed: np.ndarray
    scale_row: np.ndarray
    scale_offset: float
    centre: np.ndarray
    residual_squares: float
    cross: np.ndarray
    gram: np.ndarray
    family: str = "normal_free_scale_exact"
    region: None = None
    #: ``B_n = L_n``: no datum is ever bright (FlyMC skips the brightness updates).
    exact: bool = True

    @property
    def n_data(self) -> int:
        return int(self.observed.shape[0])

    def _log_scale(self, q: np.ndarray) -> float:
        return float(self.scale_row @ q + self.scale_offset)

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-row ``log L_n(q)`` for rows ``idx`` (all if None); O(len(idx) D)."""
        q = np.asarray(q, dtype=np.float64)
        rows = self.design if idx is None else self.design[idx]
        y = self.observed if idx is None else self.observed[idx]
        s = self._log_scale(q)
        r = y - rows @ q
        return -s - _HALF_LOG_2PI - 0.5 * r * r * math.exp(-2.0 * s)

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log L_{idx[j]}(q)``, shape ``(D,)``."""
        q = np.asarray(q, dtype=np.float64)
        rows = self.design[idx]
        s = self._log_scale(q)
        inv_var = math.exp(-2.0 * s)
        r = self.observed[idx] - rows @ q
        d_scale = float(weights @ (r * r * inv_var - 1.0))
        return rows.T @ (weights * r * inv_var) + d_scale * self.scale_row

    def _squares(self, q: np.ndarray) -> tuple[np.ndarray, float]:
        d = np.asarray(q, dtype=np.float64) - self.centre
        gram_d = self.gram @ d
        return d, float(self.residual_squares - 2.0 * self.cross @ d + d @ gram_d)

    def log_bound_sum(self, q: np.ndarray) -> float:
        """``sum_n log L_n(q)`` over all N rows in O(D^2)."""
        s = self._log_scale(np.asarray(q, dtype=np.float64))
        inv_var = _inverse_variance(s)
        if math.isinf(inv_var):
            return -math.inf
        _, squares = self._squares(q)
        return -self.n_data * (s + _HALF_LOG_2PI) - 0.5 * squares * inv_var

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`log_bound_sum`, shape ``(D,)``."""
        return self.log_bound_sum_and_grad(q)[1]

    def log_bound_sum_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`log_bound_sum` and its gradient with one product by the Gram matrix."""
        q = np.asarray(q, dtype=np.float64)
        s = self._log_scale(q)
        inv_var = _inverse_variance(s)
        if math.isinf(inv_var):  # a scale of 1e-308 or less: no finite density, no gradient
            return -math.inf, np.full(q.shape, np.nan)
        d = q - self.centre
        gram_d = self.gram @ d
        squares = float(self.residual_squares - 2.0 * self.cross @ d + d @ gram_d)
        value = -self.n_data * (s + _HALF_LOG_2PI) - 0.5 * squares * inv_var
        grad = (squares * inv_var - self.n_data) * self.scale_row + inv_var * (self.cross - gram_d)
        return value, grad


def _inverse_variance(log_scale: float) -> float:
    """``exp(-2 s)``, or infinity where that overflows (a trajectory that ran off to a
    vanishing scale: its density is 0, and a move there is rejected)."""
    return math.exp(-2.0 * log_scale) if log_scale > -354.0 else math.inf


def exact_normal_likelihood(lp: LinearPredictorLikelihood, q_map: np.ndarray):
    """The sufficient statistics of a Normal likelihood with a free log-linear scale, or a
    fixed scale shared by all rows (log-linear with no coefficients), expanded at
    ``q_map`` (one pass over the data)."""
    if (
        lp.family != "normal"
        or getattr(lp, "row_scales", False)
        or not (lp.free_scale or np.ndim(lp.params.get("sigma")) == 0)
    ):
        raise UnsupportedBound(
            "exact_normal_likelihood needs a Normal with a free scale or one fixed sigma."
        )
    q_map = np.asarray(q_map, dtype=np.float64)
    design = design_rows(lp.design)
    n, ndim = design.shape
    if lp.free_scale:
        scale_row, scale_offset = np.asarray(lp.scale_row, dtype=np.float64), lp.scale_offset
    else:
        scale_row, scale_offset = np.zeros(ndim), math.log(float(lp.params["sigma"]))
    observed = np.asarray(lp.observed, dtype=np.float64) - np.asarray(
        np.broadcast_to(lp.offset, (n,)), dtype=np.float64
    )
    structured = isinstance(design, RowDesign)
    # A structured design is read as sparse row blocks (a few entries per row): longer
    # blocks, no dense (n, D) array. One pass (Dask tasks for chunked data).
    width = design.shared_columns.size + len(design.indexed) if structured else ndim
    squares, cross, gram = design_sum(
        design,
        _normal_sums,
        per_row=(observed,),
        args=(q_map, structured),
        block_rows=DEFAULT_CHUNK_ENTRIES // max(width, 1),
    )
    squares = float(squares)
    record_rows(n, n)
    if not (math.isfinite(squares) and np.all(np.isfinite(gram))):
        raise UnsupportedBound("The Normal likelihood's sums are not finite for these data.")
    return ExactNormalLikelihood(
        design=design,
        observed=observed,
        scale_row=scale_row,
        scale_offset=float(scale_offset),
        centre=q_map.copy(),
        residual_squares=squares,
        cross=cross,
        gram=0.5 * (gram + gram.T),
    )


#: Rows with at most this share of nonzero entries (group indicators of a multilevel
#: design) have their Gram matrix formed as a sparse product.
SPARSE_SHARE = 0.1


def _normal_sums(design, rows: slice, observed, q_map, structured: bool) -> tuple:
    """The rows' part of the sufficient statistics at ``q_map``: ``sum r^2``, ``X^T r``
    and ``X^T X`` (``r`` the residuals)."""
    x = design.sparse(rows) if structured else design[rows]
    r = observed - x @ q_map
    gram = (x.T @ x).toarray() if structured else _gram(x)
    return float(r @ r), x.T @ r, gram


def _gram(x: np.ndarray) -> np.ndarray:
    """``x^T x`` of a block of rows: a sparse product when most entries are zero (500
    group indicators and two covariates: a few entries per row instead of 505)."""
    if x.size and np.count_nonzero(x) <= SPARSE_SHARE * x.size:
        from scipy import sparse

        xs = sparse.csr_matrix(x)
        return (xs.T @ xs).toarray()
    return x.T @ x
