"""FlyMC lower bounds for ordinal regressions from each row's Taylor expansion in the
parameters at the MAP, on a trust region.

A row of category ``k`` of ``pm.OrderedLogistic`` / ``pm.OrderedProbit`` has
log-likelihood ``l_n(q) = h(a, b)`` with ``a = c_{k+1}(q) - eta_n``, ``b = c_k(q) - eta_n``
(:mod:`~pymc_minibatch_mh.bounds.ordinal_curvature`); the cutpoints are PyMC's ordered
transform of ``kappa = K q + k0`` (``c_1 = kappa_1``, ``c_j = c_{j-1} + e^{kappa_j}``), not
affine in ``q``, so no bound that is quadratic in the channels collapses. Expanding ``l_n``
in ``q`` itself does: Taylor's theorem to third order at the MAP ``q*`` gives, for ``q``
in a convex region::

    l_n(q) >= l_n(q*) + grad l_n . d + d^T H_n d / 2 - K_n ||L^{-1} d||^3 / 6,

``d = q - q*``, where ``K_n`` bounds ``|D^3 l_n [v, v, v]|`` over the region for
``||L^{-1} v|| = 1`` — twice TunaMH's remainder constant of the row
(:func:`~pymc_minibatch_mh.bounds.taylor_remainder.taylor_remainder_bound`), which
carries the transform's second and third derivatives. With ``||L^{-1} d|| <= R`` on the
region (``R`` the radius plus the centre's distance from ``q*``)::

    log B_n(q) = l_n(q*) + grad l_n . d + (d^T H_n d - (K_n R / 3) ||L^{-1} d||^2) / 2

is a lower bound there that touches ``l_n`` at the MAP [1]_. With row cells (a
multilevel design, :class:`~pymc_minibatch_mh.bounds.row_cells.CellRegion`) a row of cell
``T`` touches only the coordinates ``T`` (its own, the shared ones and the cutpoints'), and
every whitened norm above is the same in ``T``'s own metric ``W_T`` (``W_T W_T^T`` the
Laplace covariance's block on ``T``): ``||L^{-1} d||`` becomes ``||W_T^{-1} d_T||`` and
``R`` the cell's ``rho_T``, so a coordinate the row does not touch (another group's
effect, however wide its posterior) leaves the row's bound alone. With ``w_j`` the gradient of
``c_j`` and ``C_j = sum_{2 <= m <= j} e^{kappa_m} K_m K_m^T`` its Hessian at ``q*``,
``grad l_n = h_a (w_{k+1} - x_n) + h_b (w_k - x_n)`` and
``H_n = J_n^T (d^2 h) J_n + h_a C_{k+1} + h_b C_k`` with ``J_n`` the rows
``w_{k+1} - x_n``, ``w_k - x_n``. Summed over the rows this is a quadratic in ``q`` whose
statistics are ``sum_n x_n x_n^T`` weighted by ``h_aa + 2 h_ab + h_bb``, per category the
sums of ``h``'s derivatives and of ``x_n`` weighted by them, and
``sum_n K_n`` (``O(K D^2)`` numbers). The bound holds on an ellipsoid; FlyMC rejects
proposals outside it, so the chain is exact for the posterior restricted to it.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1 (collapsible bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import linalg

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    CollapsedQuadratic,
    OverDesignRows,
    SumsThroughCollapsed,
    as_design,
)
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.bounds.ordinal_curvature import ordinal_derivatives
from pymc_minibatch_mh.bounds.row_cells import CellRegion, RowCells
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.data.chunk_pass import design_map, design_sum
from pymc_minibatch_mh.data.pass_tally import record_rows

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood

#: Relative margin on the cubic term's coefficient, far above its rounding.
_RELATIVE_SLACK = 1e-9


@dataclass(frozen=True, eq=False)
class OrdinalQuadraticBound(SumsThroughCollapsed, OverDesignRows):
    """Per-datum log-bound of an ordinal row, quadratic in ``d = q - centre`` (module
    docstring), collapsed. Build it with :func:`map_tuned_ordinal`. Untempered.

    Attributes
    ----------
    design : ndarray or RowDesign, shape (N, D)
    centre : ndarray, shape (D,)
        The MAP ``q*``.
    cut_rows : ndarray, shape (K - 1, D)
        ``K`` (the rows of ``kappa``).
    cut_exp : ndarray, shape (K - 1,)
        ``e^{kappa_m}`` at ``q*`` (0 for the first cutpoint, which is ``kappa_1`` itself).
    cut_gradients : ndarray, shape (K - 1, D)
        ``w_j``.
    upper, lower : ndarray of int, shape (N,)
        Each row's cutpoint above and below (-1 where there is none).
    value, h_a, h_b, h_aa, h_ab, h_bb : ndarray, shape (N,)
        ``l_n(q*)`` and ``h``'s derivatives at the row's channels (0 for a missing one).
    cubic : ndarray, shape (N,)
        ``K_n R / 3``.
    inverse_chol : ndarray, shape (D, D)
        ``L^{-1}``.
    cells : RowCells or None
        With row cells, each row's cubic term uses its cell's metric instead of
        ``L^{-1}``.
    collapsed : CollapsedQuadratic
    region : TrustRegion
    family : str
    unbounded : ndarray of bool, shape (N,), optional
    """

    design: np.ndarray
    centre: np.ndarray
    cut_rows: np.ndarray
    cut_exp: np.ndarray
    cut_gradients: np.ndarray
    upper: np.ndarray
    lower: np.ndarray
    value: np.ndarray
    h_a: np.ndarray
    h_b: np.ndarray
    h_aa: np.ndarray
    h_ab: np.ndarray
    h_bb: np.ndarray
    cubic: np.ndarray
    inverse_chol: np.ndarray
    collapsed: CollapsedQuadratic
    region: TrustRegion
    family: str
    unbounded: np.ndarray | None = None
    cells: RowCells | None = None

    def _shared(self, q: np.ndarray):
        """``d``, ``u_j = w_j . d`` and ``Q_j = d^T C_j d`` (``Q_{-1} = 0``)."""
        d = np.asarray(q, dtype=np.float64) - self.centre
        u = self.cut_gradients @ d
        v = self.cut_rows @ d
        big_q = np.concatenate([np.cumsum(self.cut_exp * v * v), [0.0]])
        return d, u, v, big_q

    def _white_sq(self, d: np.ndarray, sel) -> np.ndarray | float:
        """Each selected row's squared whitened distance ``||L^{-1} d||^2`` (one number
        for all) or ``||W_T^{-1} d_T||^2`` of its cell."""
        if self.cells is None:
            white = self.inverse_chol @ d
            return float(white @ white)
        white = self.cells.whitened(d)
        return np.einsum("ki,ki->k", white, white)[self.cells.cell_of_row[sel]]

    def _white_sq_grad(self, d: np.ndarray, sel, weights: np.ndarray) -> np.ndarray:
        """Gradient of ``sum_j weights[j] white_sq_j / 2`` over the selected rows."""
        if self.cells is None:
            return float(np.sum(weights)) * (self.inverse_chol.T @ (self.inverse_chol @ d))
        cells = self.cells
        per_cell = np.bincount(cells.cell_of_row[sel], weights, minlength=cells.n_cells)
        white = cells.whitened(d) * per_cell[:, None]
        back = np.einsum("kji,kj->ki", cells.inverse, white)
        out = np.zeros(d.size + 1)
        np.add.at(out, cells.columns, back)
        return out[:-1]

    def _channels(self, d, u, idx):
        sel = slice(None) if idx is None else idx
        rows = self.design if idx is None else self.gathered_rows(idx)
        e = rows @ d
        upper, lower = self.upper[sel], self.lower[sel]
        u_ext = np.concatenate([u, [0.0]])
        delta_a = np.where(upper >= 0, u_ext[upper] - e, 0.0)
        delta_b = np.where(lower >= 0, u_ext[lower] - e, 0.0)
        return sel, rows, delta_a, delta_b

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-datum ``log B_n(q)`` for rows ``idx`` (all rows if None); O(len(idx) D)."""
        d, u, _, big_q = self._shared(q)
        sel, _, da, db = self._channels(d, u, idx)
        white_sq = self._white_sq(d, sel)
        quadratic = (
            self.h_aa[sel] * da * da
            + 2.0 * self.h_ab[sel] * da * db
            + self.h_bb[sel] * db * db
            + self.h_a[sel] * big_q[self.upper[sel]]
            + self.h_b[sel] * big_q[self.lower[sel]]
            - self.cubic[sel] * white_sq
        )
        out = self.value[sel] + self.h_a[sel] * da + self.h_b[sel] * db + 0.5 * quadratic
        if self.unbounded is not None:
            out = np.where(self.unbounded[sel], -np.inf, out)
        return out

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log B_{idx[j]}(q)``, shape ``(D,)``."""
        d, u, v, _ = self._shared(q)
        sel, rows, da, db = self._channels(d, u, idx)
        # Coefficients of (w_upper - x_n) and (w_lower - x_n).
        on_a = weights * (self.h_a[sel] + self.h_aa[sel] * da + self.h_ab[sel] * db)
        on_b = weights * (self.h_b[sel] + self.h_ab[sel] * da + self.h_bb[sel] * db)
        upper, lower = self.upper[sel], self.lower[sel]
        k1 = self.cut_rows.shape[0]
        on_w = _per_cutpoint(upper, lower, on_a, on_b, k1)
        grad = self.cut_gradients.T @ on_w - rows.T @ (on_a + on_b)
        # (h_a Q_upper + h_b Q_lower) / 2: Q_j's gradient / 2 is sum_{m <= j} e^{kappa_m} v_m K_m.
        first, second = weights * self.h_a[sel], weights * self.h_b[sel]
        through = _per_cutpoint(upper, lower, first, second, k1)
        per_m = np.cumsum(through[::-1])[::-1]  # rows whose cutpoint index is >= m
        grad += self.cut_rows.T @ (per_m * self.cut_exp * v)
        return grad - self._white_sq_grad(d, sel, weights * self.cubic[sel])

    def without_bounds_on(self, rows: np.ndarray) -> OrdinalQuadraticBound:
        """The same bound with no bound on ``rows`` as well (collapsed again, one pass)."""
        return _collapsed(self, self._unbounded_with(rows))

    def row_spreads(self, region) -> np.ndarray:
        """Each row's largest ``|log B_n - value - slope|`` term on ``region``, bounded by
        its curvatures times the squared reach: FlyMC's precision check."""
        reach = _reach(self.centre, region)
        scale = np.abs(self.h_aa) + 2.0 * np.abs(self.h_ab) + np.abs(self.h_bb)
        return (scale * self._channel_norms_sq(region) + np.abs(self.cubic)) * reach**2

    def bright_gaps(self, laplace) -> np.ndarray:
        """Each row's expected gap ``log L_n - log B_n`` under the Laplace fit ``laplace``
        (its ``chol``), bounded: the bound keeps the row's own Hessian at the MAP, so its
        slack is the cubic term ``cubic_n ||L^{-1} d||^2 / 2`` plus a third-order remainder
        of at most as much inside the region, and ``cubic_n E ||L^{-1} d||^2`` bounds it;
        ``E ||L^{-1} d||^2`` is ``||L^{-1} C||_F^2`` (``C`` the fit's Cholesky factor), or
        the same in the row's cell. FlyMC's rule for rows that would be bright most of the
        time reads this instead of :meth:`row_spreads`, which measures the size of a row's
        term, not its slack."""
        chol = np.asarray(laplace.chol, dtype=np.float64)
        if self.cells is None:
            spread = np.full(self.n_data, float(np.sum((self.inverse_chol @ chol) ** 2)))
        else:
            cells = self.cells
            padded = np.vstack([chol, np.zeros((1, chol.shape[1]))])[cells.columns]
            per_cell = np.einsum("kij,kjl->kil", cells.inverse, padded)
            spread = np.einsum("kil,kil->k", per_cell, per_cell)[cells.cell_of_row]
        return np.abs(self.cubic) * spread

    def _channel_norms_sq(self, region) -> np.ndarray:
        """An upper bound on each row's channels' squared whitened norms."""
        chol = region.chol
        wl = self.cut_gradients @ chol
        ww = np.einsum("ij,ij->i", wl, wl)
        out = design_map(
            self.design,
            _doubled_whitened_norms,
            args=(chol, float(np.max(ww))),
            block_rows=DEFAULT_CHUNK_ENTRIES // max(1, self.ndim),
        )
        record_rows(self.n_data, self.n_data)
        return out


def _reach(centre: np.ndarray, region: TrustRegion | CellRegion) -> float | np.ndarray:
    """``R``: the largest ``||L^{-1} (q - centre)||`` on the region; with row cells, each
    row's largest ``||W_T^{-1} (q - centre)_T||`` on its cell's ellipsoid, shape (N,)."""
    if isinstance(region, CellRegion):
        per_cell = region.distances(centre) + region.radii
        return per_cell[region.cells.cell_of_row]
    inverse = linalg.solve_triangular(region.chol, np.eye(centre.size), lower=True)
    offset = inverse @ (np.asarray(region.centre, dtype=np.float64) - centre)
    return float(np.linalg.norm(offset)) + float(np.max(region.row_radii()))


def map_tuned_ordinal(
    lp: LinearPredictorLikelihood, q_map: np.ndarray, region: TrustRegion | CellRegion
) -> OrdinalQuadraticBound:
    """The bound of the module docstring for an ordinal likelihood, touching it at
    ``q_map``, valid on ``region`` (an ellipsoid, or every row cell's).

    Raises
    ------
    UnsupportedBound
        When the likelihood is not finite at the MAP, or every row's bound overflows.
    """
    from pymc_minibatch_mh.bounds.taylor_remainder import _ordinal_constants

    q_map = np.asarray(q_map, dtype=np.float64)
    design = as_design(lp.design)
    n, ndim = design.shape
    cut_rows = np.asarray(lp.cut_rows, dtype=np.float64)
    k1 = cut_rows.shape[0]
    kappa = cut_rows @ q_map + lp.cut_offsets
    gap = np.arange(k1) > 0
    cut_exp = np.where(gap, np.exp(np.where(gap, kappa, 0.0)), 0.0)
    slope = np.where(gap, cut_exp, 1.0)
    cut_gradients = np.cumsum(slope[:, None] * cut_rows, axis=0)
    cutpoints = lp.cutpoints(q_map)
    y = np.asarray(lp.observed, dtype=np.int64)
    upper = np.where(y <= k1 - 1, y, -1)
    lower = np.where(y >= 1, y - 1, -1)
    eta = lp.linear_predictor(q_map)
    value = lp.loglik(q_map)
    record_rows(2 * n, n)
    if not np.all(np.isfinite(value)):
        raise UnsupportedBound(
            f"The {lp.family} log-likelihood is not finite at the MAP for every row. Use "
            "TunaMH() or MinibatchBarker()."
        )
    extended = np.concatenate([cutpoints, [np.inf]])
    a = np.where(upper >= 0, extended[upper], np.inf) - eta
    b = np.where(lower >= 0, extended[np.maximum(lower, 0)], -np.inf) - eta
    h_a, h_b, h_aa, h_ab, h_bb = ordinal_derivatives(lp.family, a, b)[:5]
    # K_n = 2 c_n (TunaMH's constant bounds |D^3 l_n [v, v, v]| / 2 on the region).
    third = 2.0 * _ordinal_constants(lp, region)
    cubic = third * _reach(q_map, region) / 3.0 * (1.0 + _RELATIVE_SLACK)
    unbounded = ~np.isfinite(cubic)
    if unbounded.all():
        raise UnsupportedBound(
            f"FlyMC's bound for this {lp.family} likelihood overflows on the trust region for "
            "every row. Use TunaMH() or MinibatchBarker()."
        )
    inverse_chol = linalg.solve_triangular(region.chol, np.eye(ndim), lower=True)
    parts = OrdinalQuadraticBound(
        design,
        q_map.copy(),
        cut_rows,
        cut_exp,
        cut_gradients,
        upper,
        lower,
        value,
        h_a,
        h_b,
        h_aa,
        h_ab,
        h_bb,
        cubic,
        inverse_chol,
        None,
        region,
        f"{lp.family}_taylor",
        cells=region.cells if isinstance(region, CellRegion) else None,
    )
    return _collapsed(parts, unbounded if unbounded.any() else None)


def _doubled_whitened_norms(design, rows: slice, chol, max_ww: float) -> np.ndarray:
    """``2 (||L^T x_i||^2 + max_j ||L^T w_j||^2)`` of the rows ``rows``."""
    block = np.asarray(design[rows], dtype=np.float64) @ chol
    return 2.0 * (np.einsum("ij,ij->i", block, block) + max_ww)


def _ordinal_sums(design, rows: slice, w_ee, h_ab, upper, lower, on_u, on_l, k1) -> tuple:
    """The rows' part of the ordinal bound's sums: ``sum x x^T w_ee``, ``sum x (h_a +
    h_b)`` (``h_ab`` here) and, per cutpoint, the sums of ``x`` weighted by the terms on
    its upper and lower side."""
    x = np.asarray(design[rows], dtype=np.float64)
    x_on_u = np.zeros((k1, x.shape[1]))
    x_on_l = np.zeros((k1, x.shape[1]))
    for j in range(k1):
        mine_u, mine_l = upper == j, lower == j
        if mine_u.any():
            x_on_u[j] = x[mine_u].T @ on_u[mine_u]
        if mine_l.any():
            x_on_l[j] = x[mine_l].T @ on_l[mine_l]
    return x.T @ (x * w_ee[:, None]), x.T @ h_ab, x_on_u, x_on_l


def _collapsed(bound: OrdinalQuadraticBound, unbounded) -> OrdinalQuadraticBound:
    """``bound`` with its rows' quadratics (those not ``unbounded``) summed into the
    collapsed statistics (module docstring), one pass over the rows."""
    n, ndim = bound.design.shape
    k1 = bound.cut_rows.shape[0]
    keep = np.ones(n) if unbounded is None else (~unbounded).astype(np.float64)
    # Rows without a bound keep no coefficient (their weighted gradient is 0).
    h_a, h_b = keep * bound.h_a, keep * bound.h_b
    h_aa, h_ab, h_bb = keep * bound.h_aa, keep * bound.h_ab, keep * bound.h_bb
    value, cubic = keep * bound.value, keep * bound.cubic
    upper, lower = bound.upper, bound.lower
    has_u, has_l = upper >= 0, lower >= 0
    w_ee = h_aa + 2.0 * h_ab + h_bb
    on_u = np.where(has_u, h_aa + h_ab, 0.0)
    on_l = np.where(has_l, h_ab + h_bb, 0.0)
    # One pass (Dask tasks for a design over chunked data); per cutpoint j the sums of
    # x_n weighted by the e.u_j terms.
    hess, grad_x, x_on_u, x_on_l = design_sum(
        bound.design,
        _ordinal_sums,
        per_row=(w_ee, h_a + h_b, upper, lower, on_u, on_l),
        args=(k1,),
        block_rows=DEFAULT_CHUNK_ENTRIES // max(1, ndim),
    )
    record_rows(n, n)
    w = bound.cut_gradients
    mixed = (x_on_u + x_on_l).T @ w  # sum_j (x-sums) w_j^T
    hess -= mixed + mixed.T
    sum_aa = np.bincount(upper[has_u], h_aa[has_u], minlength=k1)
    sum_bb = np.bincount(lower[has_l], h_bb[has_l], minlength=k1)
    both = has_u & has_l
    pair = np.zeros((k1, k1))
    np.add.at(pair, (upper[both], lower[both]), h_ab[both])
    hess += w.T @ (np.diag(sum_aa + sum_bb) + pair + pair.T) @ w
    # h_a C_upper + h_b C_lower: C_j = sum_{1 <= m <= j} e^{kappa_m} K_m K_m^T.
    on_w = _per_cutpoint(upper, lower, h_a, h_b, k1)
    per_m = np.cumsum(on_w[::-1])[::-1]  # rows whose cutpoint is m or above
    rows_k = bound.cut_rows
    hess += rows_k.T @ ((per_m * bound.cut_exp)[:, None] * rows_k)
    hess -= _cubic_metric(bound, cubic)
    hess = 0.5 * (hess + hess.T)
    grad = w.T @ on_w - grad_x
    collapsed = CollapsedQuadratic(bound.centre.copy(), math.fsum(value), grad, hess)
    fields = dict(bound.__dict__)
    fields.pop("_rows_memo", None)
    fields.update(
        value=value,
        h_a=h_a,
        h_b=h_b,
        h_aa=h_aa,
        h_ab=h_ab,
        h_bb=h_bb,
        cubic=cubic,
        collapsed=collapsed,
        unbounded=unbounded,
    )
    return OrdinalQuadraticBound(**fields)


def _cubic_metric(bound: OrdinalQuadraticBound, cubic: np.ndarray) -> np.ndarray:
    """``sum_n cubic_n M_n``, ``M_n`` the matrix of row ``n``'s squared whitened distance:
    ``L^{-T} L^{-1}`` for all, or its cell's ``W_T^{-T} W_T^{-1}`` placed on ``T``."""
    if bound.cells is None:
        inverse = bound.inverse_chol
        return math.fsum(cubic) * (inverse.T @ inverse)
    cells = bound.cells
    per_cell = np.bincount(cells.cell_of_row, cubic, minlength=cells.n_cells)
    blocks = np.einsum("kji,kjl->kil", cells.inverse, cells.inverse) * per_cell[:, None, None]
    ndim = bound.centre.size
    out = np.zeros((ndim + 1, ndim + 1))
    np.add.at(out, (cells.columns[:, :, None], cells.columns[:, None, :]), blocks)
    return out[:-1, :-1]


def _per_cutpoint(upper, lower, h_a, h_b, k1: int) -> np.ndarray:
    """Per cutpoint ``j``: the summed ``h_a`` of the rows whose upper cutpoint is ``j`` plus
    the summed ``h_b`` of those whose lower one is (for the gradient's ``w_j``)."""
    has_u, has_l = upper >= 0, lower >= 0
    out = np.bincount(upper[has_u], h_a[has_u], minlength=k1)
    return out + np.bincount(lower[has_l], h_b[has_l], minlength=k1)
