"""Log-likelihood lower bounds that are quadratic in the parameters, and their collapse.

FlyMC needs the product of the per-datum bounds ``prod_n B_n(q)`` at every
proposal, so the bound must collapse to sufficient statistics whose size does
not grow with N. For a linear predictor ``eta_n = x_n . q + o_n`` and a bound
that is a quadratic in ``eta_n``,

    log B_n(q) = v_n + s_n (eta_n - m_n) + a_n (eta_n - m_n)^2,

the sum over all data is a quadratic in ``q``:

    sum_n log B_n(q) = F0 + g0 . d + 1/2 d^T H d,   d = q - q0,

with ``F0 = sum_n log B_n(q0)``, ``g0 = sum_n (s_n + 2 a_n e_n) x_n``,
``H = 2 sum_n a_n x_n x_n^T`` and ``e_n = eta_n(q0) - m_n``. Expanding about a
centre ``q0`` (rather than about ``q = 0``) keeps the three terms of the same
size as the sum near ``q0``, so the collapsed value agrees with the explicit
per-datum sum to about machine precision.

The anchor ``m_n`` is where the bound touches the log-likelihood; ``v_n`` and
``s_n`` are the log-likelihood and its derivative in ``eta`` there, and ``a_n``
(``<= 0``) is a curvature that dominates the true one, which makes ``B_n`` a
lower bound. Families only have to supply these four per-datum arrays.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.data.chunk_pass import design_sum
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.data.row_design import RowDesign
from pymc_minibatch_mh.kernels.sparse_matrices import kept_sparse

#: Upper limit on the number of matrix entries handled at once while collapsing.
DEFAULT_CHUNK_ENTRIES = 2**21


@dataclass(frozen=True, eq=False)
class CollapsedQuadratic:
    """``f(q) = value + gradient . d + 1/2 d^T hessian d`` with ``d = q - centre``.

    Evaluation costs O(D^2) whatever the number of data it summarises, or O(nonzeros) for
    a sparse Hessian (:func:`~pymc_minibatch_mh.kernels.sparse_matrices.kept_sparse`), as
    in a multilevel model.

    Attributes
    ----------
    centre : ndarray, shape (D,)
    value : float
        ``f(centre)``.
    gradient_at_centre : ndarray, shape (D,)
    hessian : ndarray, shape (D, D)
        Symmetric.
    """

    centre: np.ndarray
    value: float
    gradient_at_centre: np.ndarray
    hessian: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "_sparse_hessian", kept_sparse(self.hessian))

    def _product(self, d: np.ndarray) -> np.ndarray:
        """``hessian @ d``, through the sparse copy where there is one."""
        return self.hessian @ d if self._sparse_hessian is None else self._sparse_hessian @ d

    def __call__(self, q: np.ndarray) -> float:
        return self.value_and_gradient(q)[0]

    def gradient(self, q: np.ndarray) -> np.ndarray:
        """``grad f(q)``, shape ``(D,)``."""
        d = np.asarray(q, dtype=np.float64) - self.centre
        return self.gradient_at_centre + self._product(d)

    def value_and_gradient(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """``(f(q), grad f(q))`` from one product of the Hessian."""
        d = np.asarray(q, dtype=np.float64) - self.centre
        hd = self._product(d)
        value = float(self.value + self.gradient_at_centre @ d + 0.5 * (d @ hd))
        return value, self.gradient_at_centre + hd


class SumsThroughCollapsed:
    """Mixin of the bounds whose sum over all rows is one :class:`CollapsedQuadratic`
    (attribute ``collapsed``)."""

    def log_bound_sum(self, q: np.ndarray) -> float:
        """``sum_n log B_n(q)`` over all N data in O(D^2) (less for a sparse Hessian)."""
        return self.collapsed(q)

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`log_bound_sum`, shape ``(D,)``."""
        return self.collapsed.gradient(q)

    def log_bound_sum_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`log_bound_sum` and its gradient, sharing their work."""
        return self.collapsed.value_and_gradient(q)


def as_design(design: np.ndarray) -> np.ndarray:
    """The design matrix as a C-contiguous float64 ``(N, D)`` array (no copy if it already is),
    or a :class:`~pymc_minibatch_mh.data.row_design.RowDesign` unchanged."""
    if isinstance(design, RowDesign):
        return design
    design = np.ascontiguousarray(design, dtype=np.float64)
    if design.ndim != 2:
        raise ValueError(f"The design matrix must be 2-D (N, D); got shape {design.shape}.")
    return design


def per_datum(values, n_data: int, name: str) -> np.ndarray:
    """Broadcast a scalar or ``(N,)`` array to a float64 ``(N,)`` array, with a clear error."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        return np.full(n_data, float(arr))
    if arr.shape != (n_data,):
        raise ValueError(f"{name} must be a scalar or have shape ({n_data},); got {arr.shape}.")
    return np.ascontiguousarray(arr)


#: Most rows :meth:`OverDesignRows.gathered_rows` keeps from one call to the next.
MEMO_ROWS = 4096


class OverDesignRows:
    """Mixin of the bounds whose rows are the rows of ``self.design`` (N, D): ``n_data``,
    ``ndim``, :meth:`gathered_rows` and the rows without a bound. The bounds are immutable
    once built, so a deep copy is the bound itself: PyMC deep-copies a step's sampling
    state for every chain, and copying the per-row arrays would cost O(N) memory each
    time."""

    def __deepcopy__(self, memo):
        return self

    def gathered_rows(self, idx: np.ndarray) -> np.ndarray:
        """``design[idx]`` as float64, the same rows as the last call served again.

        A FlyMC trajectory reads the bright rows at every leapfrog step with the bright
        set fixed; forming them anew from a structured design costs more than the
        arithmetic on them. The last ``idx`` (up to :data:`MEMO_ROWS` rows) and its rows
        are kept and reused when the next ``idx`` holds the same indices (compared by
        value, so a caller may change its index array in place). The rows are read-only.
        """
        idx = np.asarray(idx)
        memo = self.__dict__.get("_rows_memo")
        if memo is not None and memo[0].shape == idx.shape and np.array_equal(memo[0], idx):
            return memo[1]
        rows = np.asarray(self.design[idx], dtype=np.float64)
        if idx.ndim == 1 and idx.size <= MEMO_ROWS:
            rows.setflags(write=False)
            object.__setattr__(self, "_rows_memo", (idx.copy(), rows))
        return rows

    @property
    def n_data(self) -> int:
        return self.design.shape[0]

    @property
    def unbounded_rows(self) -> np.ndarray:
        """Indices of the rows without a bound (``log B_n = -inf``; attribute
        ``unbounded``, a boolean mask or None): empty if every row has one."""
        mask = getattr(self, "unbounded", None)
        return np.empty(0, dtype=np.int64) if mask is None else np.flatnonzero(mask)

    def _unbounded_with(self, rows: np.ndarray) -> np.ndarray:
        """The mask of rows without a bound once ``rows`` (a mask or indices) are added."""
        mask = getattr(self, "unbounded", None)
        mask = np.zeros(self.n_data, dtype=bool) if mask is None else mask.copy()
        mask[rows] = True
        return mask

    @property
    def ndim(self) -> int:
        return self.design.shape[1]


def _quadratic_sums(design, rows: slice, shift, value, slope, curvature, centre) -> tuple:
    """The rows' part of the collapsed sums of a quadratic bound at ``centre``: the bound's
    value, its gradient and its Hessian (``shift`` = offset minus anchor)."""
    x = design[rows]
    e = x @ centre + shift
    return (
        float(np.sum(value + e * (slope + curvature * e))),
        x.T @ (slope + 2.0 * curvature * e),
        x.T @ (x * (2.0 * curvature)[:, None]),
    )


@dataclass(frozen=True, eq=False)
class RowNorms:
    """``||chol' x_n||`` of every design row ``x_n`` (``values``) for one factor ``chol``."""

    chol: np.ndarray
    values: np.ndarray

    def of(self, chol: np.ndarray) -> np.ndarray | None:
        """The norms if ``chol`` is the factor they were computed for, else None."""
        chol = np.asarray(chol)
        return self.values if np.array_equal(chol, self.chol) else None


@dataclass(frozen=True, eq=False)
class LinearQuadraticBound(SumsThroughCollapsed, OverDesignRows):
    """Per-datum quadratic log-bound of a scalar linear predictor, and its collapsed sum.

    ``log B_n(q) = v_n + s_n (eta_n - m_n) + a_n (eta_n - m_n)^2`` with
    ``eta_n = design[n] @ q + offset[n]``. Build instances with
    :meth:`from_coefficients` (or the family constructors in
    :mod:`pymc_minibatch_mh.bounds`), which also collapse the sum.

    All methods are untempered; a tempered sampler divides their outputs by K.

    Attributes
    ----------
    design : ndarray, shape (N, D)
    offset : ndarray, shape (N,)
    anchor, value, slope, curvature : ndarray, shape (N,)
        ``m_n``, ``v_n``, ``s_n`` and ``a_n`` above.
    collapsed : CollapsedQuadratic
        ``sum_n log B_n(q)`` in O(D^2).
    family : str
        Name of the likelihood family the bound is for (informational).
    region : TrustRegion or None
        Where the bound holds when it does not hold everywhere (FlyMC rejects proposals
        outside it); None for a global bound.
    unbounded : ndarray of bool, shape (N,), or None
        Rows without a bound: ``log B_n = -inf``, left out of the collapsed sum (FlyMC
        keeps them bright and reads them at every iteration, see
        :mod:`pymc_minibatch_mh.kernels.firefly`).
    row_norms : RowNorms or None
        ``||L' x_n||`` of every row for one factor ``L``, when the pass that built the
        bound computed them too (FlyMC's choice of rows to leave unbounded reads them).
    """

    design: np.ndarray
    offset: np.ndarray
    anchor: np.ndarray
    value: np.ndarray
    slope: np.ndarray
    curvature: np.ndarray
    collapsed: CollapsedQuadratic
    family: str = "custom"
    region: TrustRegion | None = None
    unbounded: np.ndarray | None = None
    row_norms: RowNorms | None = None

    def without_bounds_on(self, rows: np.ndarray) -> LinearQuadraticBound:
        """The same bound with no bound on ``rows`` (a boolean mask or indices) as well:
        their coefficients are dropped and the sum collapsed again (one pass)."""
        return type(self).from_coefficients(
            self.design,
            self.offset,
            self.anchor,
            self.value,
            self.slope,
            self.curvature,
            centre=self.collapsed.centre,
            family=self.family,
            region=self.region,
            unbounded=self._unbounded_with(rows),
        )

    @classmethod
    def from_coefficients(
        cls,
        design: np.ndarray,
        offset,
        anchor,
        value,
        slope,
        curvature,
        *,
        centre: np.ndarray | None = None,
        family: str = "custom",
        chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
        region: TrustRegion | None = None,
        unbounded: np.ndarray | None = None,
    ) -> LinearQuadraticBound:
        """Precompute the sufficient statistics (O(N D^2) time, O(chunk D + D^2) extra memory).

        Parameters
        ----------
        design : ndarray, shape (N, D)
        offset, anchor, value, slope, curvature : float or ndarray, shape (N,)
        centre : ndarray, shape (D,), optional
            Expansion point of the collapsed quadratic; default the origin. Use a
            point near the posterior (e.g. the MAP) for the best accuracy there.
        family : str
            Label.
        chunk_entries : int
            About this many design entries are processed at once.
        region : TrustRegion, optional
            The region on which the bound holds, if it is not global.
        unbounded : ndarray of bool, shape (N,), optional
            Rows without a bound (``log B_n = -inf``); their coefficients are ignored.
        """
        design = as_design(design)
        n_data, ndim = design.shape
        offset = per_datum(offset, n_data, "offset")
        anchor = per_datum(anchor, n_data, "anchor")
        value = per_datum(value, n_data, "value")
        slope = per_datum(slope, n_data, "slope")
        curvature = per_datum(curvature, n_data, "curvature")
        if unbounded is not None:
            unbounded = np.asarray(unbounded, dtype=bool)
            if unbounded.shape != (n_data,):
                raise ValueError(f"unbounded must have shape ({n_data},); got {unbounded.shape}.")
            if not unbounded.any():
                unbounded = None
            else:
                value, slope, curvature = (
                    np.where(unbounded, 0.0, arr) for arr in (value, slope, curvature)
                )
        if not np.all(np.isfinite(value)):
            raise ValueError("The bound's values at its anchors must be finite.")
        if np.any(curvature > 0):
            raise ValueError("A collapsible lower bound needs curvature a_n <= 0.")
        centre = np.zeros(ndim) if centre is None else np.asarray(centre, dtype=np.float64)
        if centre.shape != (ndim,):
            raise ValueError(f"centre must have shape ({ndim},); got {centre.shape}.")

        # One pass (Dask tasks for a design over chunked data): the sums at the centre.
        total, grad, hess = design_sum(
            design,
            _quadratic_sums,
            per_row=(offset - anchor, value, slope, curvature),
            args=(centre,),
            block_rows=chunk_entries // max(1, ndim),
        )
        record_rows(n_data, n_data)
        hess = 0.5 * (hess + hess.T)
        collapsed = CollapsedQuadratic(centre.copy(), float(total), grad, hess)
        return cls(
            design, offset, anchor, value, slope, curvature, collapsed, family, region, unbounded
        )

    def linear_predictor(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """``eta`` for rows ``idx`` (all rows if None)."""
        if idx is None:
            return self.design @ q + self.offset
        if isinstance(self.design, RowDesign) and np.size(idx) > MEMO_ROWS:
            # Many rows read once (FlyMC's first draw of z reads all N): no dense copy.
            return self.design.dot(q, idx) + self.offset[idx]
        return self.gathered_rows(idx) @ q + self.offset[idx]

    def _residual(self, q: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
        anchor = self.anchor if idx is None else self.anchor[idx]
        return self.linear_predictor(q, idx) - anchor

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-datum ``log B_n(q)`` for rows ``idx`` (all rows if None); cost O(len(idx) D)."""
        e = self._residual(q, idx)
        sel = slice(None) if idx is None else idx
        out = self.value[sel] + e * (self.slope[sel] + self.curvature[sel] * e)
        if self.unbounded is not None:
            out = np.where(self.unbounded[sel], -np.inf, out)
        return out

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log B_{idx[j]}(q)``, shape ``(D,)``."""
        e = self._residual(q, idx)
        d_eta = self.slope[idx] + 2.0 * self.curvature[idx] * e
        return self.gathered_rows(idx).T @ (weights * d_eta)
