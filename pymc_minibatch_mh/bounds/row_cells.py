"""Rows grouped by the coordinates they touch, each group with its own metric.

In a multilevel model row ``i`` reads the shared coefficients and one group's intercept
(and slopes), not the other groups' coordinates. The Taylor-remainder bound of
:mod:`pymc_minibatch_mh.bounds.taylor_remainder` bounds ``|x_i . v|`` by Cauchy–Schwarz,
``|x_i . v| <= ||L^T x_i|| ||L^{-1} v||``, in the whole block, so that ``||L^{-1} m||^2``
(the distance from the reference point) grows like the number of coordinates D.
Restricted to the coordinates ``T`` the row touches (``x_i`` is zero elsewhere), the same
inequality holds with any invertible ``W_T``; with ``W_T W_T^T = S_TT``, the block of the
Laplace covariance ``S = L L^T`` on ``T``,

    ||W_T^T x_iT||^2 = x_iT' S_TT x_iT = x_i' S x_i = ||L^T x_i||^2,

so the constants ``c_i`` do not change, and the metric becomes the cell's own

    M_T(q, q') = ||W_T^{-1} d_T|| (||W_T^{-1} m_T||^2 + ||W_T^{-1} d_T||^2 / 12),

whose typical size grows with ``|T|`` instead of D. The same holds for rows with several
channels (a free scale, K logits): ``||A_iT W_T||_2 = ||A_i L||_2``.

Rows that touch the same coordinates form a *cell*. The TunaMH bound of row ``i`` is then
``b_i(q, q') = c_i M_{cell(i)}(q, q')``, symmetric in ``(q, q')``; TunaMH needs only
``B = sum_i b_i = sum_cells C_cell M_cell`` and draws of ``i`` with probability
``b_i / B``: a cell with probability ``C_cell M_cell / B``, then a row of it with
probability ``c_i / C_cell``. Per step this costs ``O(n_cells |T|^2)``, no data.

References
----------
.. [1] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact Minibatch
   Metropolis-Hastings", NeurIPS 2020 (the bound may depend on the pair of states).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg, stats

from pymc_minibatch_mh.bounds.trust_region import RADIUS_MARGIN
from pymc_minibatch_mh.data.row_design import RowDesign, row_supports
from pymc_minibatch_mh.kernels.brightening_rates import grouped_by
from pymc_minibatch_mh.kernels.weighted_index import sorted_uniforms

#: More cells than this (or than N / MIN_ROWS_PER_CELL) and the step keeps the global
#: metric: the per-step cost O(n_cells |T|^2) would outweigh what the cells save.
MAX_CELLS = 20_000
MIN_ROWS_PER_CELL = 4


@dataclass(frozen=True, eq=False)
class RowCells:
    """Rows grouped into cells by the coordinates they touch, with a metric per cell.

    Attributes
    ----------
    cell_of_row : ndarray of int32, shape (N,)
        The cell of every row.
    order : ndarray of int64, shape (N,)
        The rows sorted by cell; cell ``k`` holds ``order[starts[k]:starts[k + 1]]``.
    starts : ndarray of int64, shape (n_cells + 1,)
    columns : ndarray of int64, shape (n_cells, t)
        The coordinates each cell touches, padded with ``D`` (a coordinate that is 0).
    inverse : ndarray, shape (n_cells, t, t)
        ``W_T^{-1}`` of every cell, zero on the padding.
    centre : ndarray, shape (D,)
        The reference point ``q*``.
    """

    cell_of_row: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    columns: np.ndarray
    inverse: np.ndarray
    centre: np.ndarray

    def whitened(self, v: np.ndarray) -> np.ndarray:
        """``W_T^{-1} v_T`` of every cell, shape (n_cells, t)."""
        return np.einsum("kij,kj->ki", self.inverse, np.append(v, 0.0)[self.columns])

    @property
    def sizes(self) -> np.ndarray:
        """How many coordinates each cell touches."""
        return np.count_nonzero(self.columns < self.centre.size, axis=1)

    def __deepcopy__(self, memo) -> RowCells:
        return self  # immutable; PyMC deep-copies sampling states per chain

    @property
    def n_cells(self) -> int:
        return int(self.columns.shape[0])

    @property
    def width(self) -> int:
        """Largest number of coordinates a cell touches."""
        return int(self.columns.shape[1])

    @classmethod
    def build(
        cls, patterns: np.ndarray, shared: np.ndarray, cov: np.ndarray, centre: np.ndarray
    ) -> RowCells | None:
        """Cells from each row's own columns; None where they would not pay.

        Parameters
        ----------
        patterns : ndarray of int, shape (N, r)
            The coordinates each row touches besides the shared ones, padded with ``-1``
            (rows with fewer).
        shared : ndarray of int
            Coordinates every row may touch (coefficients of products, intercepts, scales).
        cov : ndarray, shape (D, D)
            ``S = L L^T``, the covariance whose blocks whiten each cell.
        centre : ndarray, shape (D,)
            The reference point.
        """
        n, ndim = patterns.shape[0], cov.shape[0]
        unique, cell_of_row = np.unique(patterns, axis=0, return_inverse=True)
        n_cells = unique.shape[0]
        if n_cells < 2 or n_cells > min(MAX_CELLS, n // MIN_ROWS_PER_CELL):
            return None
        shared = np.unique(np.asarray(shared, dtype=np.int64))
        own = [np.setdiff1d(row[row >= 0], shared) for row in unique]
        width = shared.size + max(o.size for o in own)
        if width >= ndim:
            return None
        columns = np.full((n_cells, width), ndim, dtype=np.int64)
        inverse = np.zeros((n_cells, width, width))
        for k, cols in enumerate(own):
            touched = np.concatenate([shared, cols])
            chol = np.linalg.cholesky(cov[np.ix_(touched, touched)])
            t = touched.size
            columns[k, :t] = touched
            inverse[k, :t, :t] = linalg.solve_triangular(chol, np.eye(t), lower=True)
        cell_of_row = cell_of_row.reshape(-1).astype(np.int32)
        order, starts = grouped_by(cell_of_row, n_cells)
        centre = np.array(centre, dtype=np.float64)
        for array in (cell_of_row, order, starts, columns, inverse, centre):
            array.setflags(write=False)
        return cls(cell_of_row, order, starts, columns, inverse, centre)

    def metrics(self, q: np.ndarray, q_new: np.ndarray) -> np.ndarray:
        """``M_T(q, q')`` of every cell (symmetric in ``(q, q')``), shape (n_cells,)."""
        q = np.asarray(q, dtype=np.float64)
        q_new = np.asarray(q_new, dtype=np.float64)
        wd = self.whitened(q_new - q)
        wm = self.whitened(0.5 * (q_new + q) - self.centre)
        dd = np.einsum("ki,ki->k", wd, wd)
        return np.sqrt(dd) * (np.einsum("ki,ki->k", wm, wm) + dd / 12.0)


@dataclass(frozen=True, eq=False)
class CellTable:
    """Draws rows with probability ``c_i M_cell(i) / B`` for the cells of :class:`RowCells`.

    Attributes
    ----------
    cells : RowCells
    cumulative : ndarray, shape (N,)
        Cumulative sums of ``c`` over ``cells.order``.
    cell_totals : ndarray, shape (n_cells,)
        ``C_cell = sum of c_i`` over each cell.
    """

    cells: RowCells
    cumulative: np.ndarray
    cell_totals: np.ndarray

    def __deepcopy__(self, memo) -> CellTable:
        return self

    @classmethod
    def from_constants(cls, cells: RowCells, c: np.ndarray) -> CellTable:
        cumulative = np.cumsum(np.asarray(c, dtype=np.float64)[cells.order])
        ends = cumulative[cells.starts[1:] - 1]
        begins = np.concatenate([[0.0], ends[:-1]])
        totals = np.where(np.diff(cells.starts) > 0, ends - begins, 0.0)
        for array in (cumulative, totals):
            array.setflags(write=False)
        return cls(cells, cumulative, totals)

    def sample(self, rng: np.random.Generator, n: int, weights: np.ndarray) -> np.ndarray:
        """``n`` rows, cell ``k`` with probability proportional to ``weights[k]`` (its
        ``C_cell M_cell``), then a row of it with probability ``c_i / C_cell``."""
        cell_cum = np.cumsum(weights)
        # Sorted keys (the draws form a multiset): cells, and the rows read, come in order.
        cell = np.searchsorted(cell_cum, sorted_uniforms(rng, n) * cell_cum[-1], side="right")
        cell = np.minimum(cell, weights.size - 1)
        return self.rows_in(rng, cell)

    def rows_in(self, rng: np.random.Generator, cell: np.ndarray) -> np.ndarray:
        """One row of each given cell, with probability ``c_i / C_cell`` within it."""
        n = cell.size
        start = self.cells.starts[cell]
        base = np.where(start > 0, self.cumulative[np.maximum(start - 1, 0)], 0.0)
        u = base + rng.random(n) * self.cell_totals[cell]
        pos = np.searchsorted(self.cumulative, u, side="right")
        # Rounding at a cell's upper end: stay inside the cell.
        pos = np.clip(pos, start, self.cells.starts[cell + 1] - 1)
        return self.cells.order[pos]


#: The share of a Gaussian posterior that a default cell region may leave out, summed
#: over its cells: a thousandth of the 1e-6 that the excluded-mass check accepts, so that
#: tails somewhat heavier than the Laplace fit's stay inside too.
CELL_TAIL_MASS = 1e-9


@dataclass(frozen=True, eq=False)
class CellRegion:
    """The trust region of a bound with row cells: every cell's ellipsoid at once,

        R = {q : ||W_T^{-1}(q_T - q*_T)|| <= rho_T for every cell T},

    with radii ``rho_T`` chosen by :meth:`covering`. It is convex (an intersection of
    convex sets), so a move between two of its points stays in it, and on it the linear
    predictor of a row of cell ``T`` stays within ``rho_T ||L^T x_i||`` of its value at
    ``q*``: the per-row constants use ``rho_T`` instead of the whole block's
    ``sqrt(D) + 8``. For a Gaussian posterior each cell's whitened distance is a chi
    variable with ``|T|`` degrees of freedom, so the mass outside is at most the sum over
    cells of that chi variable's tail beyond ``rho_T``.

    Attributes
    ----------
    cells : RowCells
    radii : ndarray, shape (n_cells,)
        ``rho_T`` of every cell.
    chol : ndarray, shape (D, D)
        The Laplace covariance's Cholesky factor: a point ``q* + L u`` with
        ``||u|| <= radius`` lies in every cell's ellipsoid (a marginal Mahalanobis norm is
        at most the joint one), which the construction-time probes use.
    """

    cells: RowCells
    radii: np.ndarray
    chol: np.ndarray

    def __deepcopy__(self, memo) -> CellRegion:
        return self

    @classmethod
    def around(cls, cells: RowCells, chol: np.ndarray, margin: float) -> CellRegion:
        """Radii ``sqrt(|T|) + margin`` (a ``trust_radius`` given by the user sets the
        margin)."""
        radii = np.sqrt(cells.sizes) + margin
        radii.setflags(write=False)
        return cls(cells, radii, chol)

    @classmethod
    def covering(
        cls, cells: RowCells, chol: np.ndarray, tail: float = CELL_TAIL_MASS
    ) -> CellRegion:
        """The default region: each cell's radius leaves out ``tail / n_cells`` of a
        Gaussian posterior (its Laplace fit), so the whole region leaves out at most
        ``tail`` of it; never wider than ``sqrt(|T|) + 8``.

        ``rho_T^2`` is the chi-squared quantile with ``|T|`` degrees of freedom. A
        posterior with heavier tails than its Laplace fit loses more: the excluded-mass
        check after tuning (:mod:`pymc_minibatch_mh.bounds.excluded_mass`) estimates the
        real mass and grows the region while it is above 1e-6.
        """
        sizes = np.asarray(cells.sizes, dtype=np.float64)
        share = tail / max(int(cells.n_cells), 1)
        radii = np.minimum(np.sqrt(stats.chi2.isf(share, sizes)), np.sqrt(sizes) + RADIUS_MARGIN)
        radii.setflags(write=False)
        return cls(cells, radii, chol)

    @property
    def centre(self) -> np.ndarray:
        return self.cells.centre

    @property
    def radius(self) -> float:
        """The smallest cell radius (a global ball of it lies inside the region)."""
        return float(self.radii.min())

    def row_radii(self) -> np.ndarray:
        """``rho_T`` of every row's cell, shape (N,)."""
        return self.radii[self.cells.cell_of_row]

    def distances(self, q: np.ndarray) -> np.ndarray:
        """Each cell's whitened distance of ``q`` from the centre."""
        white = self.cells.whitened(np.asarray(q, dtype=np.float64) - self.centre)
        return np.sqrt(np.einsum("ki,ki->k", white, white))

    def contains(self, q: np.ndarray) -> bool:
        """Whether ``q`` lies in every cell's ellipsoid (NaN is outside)."""
        return bool(np.all(self.distances(q) <= self.radii))

    def margin(self, q: np.ndarray) -> float:
        """How far, in Laplace sds, ``q`` is from the nearest cell boundary."""
        return float(np.min(self.radii - self.distances(q)))


def likelihood_row_supports(lp) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`~pymc_minibatch_mh.data.row_design.row_supports` of ``lp.design``, joined with
    those of a scale per row (``lp.scale_design``, e.g. ``sigma[group]``): a row touches
    its linear predictor's coordinates and its scale's. None when either has no sparse
    structure that cells could use, and for a likelihood of several parts (no one design).
    """
    if getattr(lp, "parts", None) is not None or not hasattr(lp, "design"):
        return None
    supports = row_supports(lp.design)
    scale = getattr(lp, "scale_design", None)
    if supports is None or scale is None:
        return supports
    patterns, shared = supports
    scale_supports = row_supports(scale)
    if scale_supports is None:
        if not isinstance(scale, RowDesign):
            return None  # a dense scale design: any row may touch any coordinate
        return patterns, np.union1d(shared, scale.shared_columns)
    scale_patterns, scale_shared = scale_supports
    return np.concatenate([patterns, scale_patterns], axis=1), np.union1d(shared, scale_shared)


def row_cells_for(lp, reference: np.ndarray, chol: np.ndarray | None, supports) -> RowCells | None:
    """Cells of the rows of a linear-predictor likelihood ``lp`` that touch the same
    coordinates (multilevel designs), or None (no row supports, no Laplace factor, a
    likelihood of several parts, or cells that would not pay).

    ``supports`` is :func:`likelihood_row_supports` of ``lp``; the coordinates of a free
    scale or psi, and an ordinal likelihood's cutpoints, are shared by every row.
    """
    if supports is None or chol is None or getattr(lp, "parts", None) is not None:
        return None
    patterns, shared = supports
    shared_parameters = (
        getattr(lp, "scale_row", None),
        getattr(lp, "odds_row", None),
        getattr(lp, "cut_rows", None),
    )
    for shared_rows in shared_parameters:
        if shared_rows is not None:  # a free scale or psi, an ordinal likelihood's cutpoints
            touched = np.any(np.atleast_2d(shared_rows) != 0, axis=0)
            shared = np.union1d(shared, np.flatnonzero(touched))
    return RowCells.build(patterns, shared, chol @ chol.T, reference)
