"""Per-cell probabilities that a dark FlyMC row proposes to turn bright.

FlyMC's implicit update of ``z_n`` (:func:`pymc_minibatch_mh.kernels.firefly.brightness_update`)
stays a valid Metropolis–Hastings move for ``z_n`` given ``q`` with any proposal
probability ``r_n`` in ``(0, 1]`` that depends on neither ``q`` nor ``z``: a dark row
proposes with probability ``r_n`` and is accepted with ``min(1, Ltilde_n / r_n)``, a bright
row is accepted dark with ``min(1, r_n / Ltilde_n)``; both directions then carry
``B_n min(r_n, Ltilde_n)`` of probability flow, which is detailed balance for
``p(z_n = 1 | q) / p(z_n = 0 | q) = Ltilde_n``. The paper uses one ``r_n = q_db``.

One rate costs ``q_db N`` reads per iteration, however few rows are bright. In a
multilevel model the rows of a small group have loose bounds (its effect is poorly
determined, so its trust region is wide) and need a fast refresh, the rows of a large
group have tight ones and almost never turn bright: a rate per *cell* (rows touching the
same coordinates) near the cell's typical ``Ltilde`` spends the reads where rows do turn
bright. The rates are rounded to powers of two below the largest (at most
:data:`MAX_LEVELS` levels), and the rows are kept sorted by level, so that one iteration
finds the proposing rows with geometric skips over each level's rows (dark and bright
alike; the bright ones are dropped, as they move by the other direction), at a cost
``O(sum_c r_c N_c)``, never ``O(N)``; new rates while tuning cost ``O(n_cells)``.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.3 (the implicit update with one ``q_{d->b}``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Rates are rounded to ``r_max 2^-k`` for k below this; smaller rates join the last level.
MAX_LEVELS = 24


def grouped_by(labels: np.ndarray, n_groups: int, dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """``(order, starts)``: the positions sorted by their label (stably), group ``k``'s
    being ``order[starts[k]:starts[k + 1]]``."""
    order = np.argsort(labels, kind="stable").astype(dtype)
    starts = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=n_groups), out=starts[1:])
    return order, starts


@dataclass(frozen=True, eq=False)
class RowsByCell:
    """The rows grouped by cell, built once: ``order[starts[c]:starts[c + 1]]`` are the
    rows of cell ``c``, ``cell_of_row[n]`` the cell of row ``n``."""

    cell_of_row: np.ndarray
    order: np.ndarray
    starts: np.ndarray

    def __deepcopy__(self, memo) -> RowsByCell:
        return self  # immutable; PyMC deep-copies step methods per chain

    @classmethod
    def build(cls, cell_of_row: np.ndarray, n_cells: int) -> RowsByCell:
        cell_of_row = np.asarray(cell_of_row, dtype=np.int32)
        dtype = np.int32 if cell_of_row.size < 2**31 - 1 else np.int64
        order, starts = grouped_by(cell_of_row, n_cells, dtype)
        for array in (cell_of_row, order, starts):
            array.setflags(write=False)
        return cls(cell_of_row, order, starts)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.starts)


@dataclass(frozen=True, eq=False)
class CellRates:
    """Brightening rates per cell, rounded to levels.

    A level's rows are its cells' rows, read through :class:`RowsByCell` (built once), so
    that a new set of rates costs ``O(n_cells log n_cells)``, no work per row.

    Attributes
    ----------
    rows : RowsByCell
    cell_rates : ndarray, shape (n_cells,)
        The rate every row of the cell proposes with (already rounded to its level).
    level_rates : ndarray, shape (n_levels,)
        The distinct rates, largest first.
    level_cells : ndarray of int64, shape (n_cells,)
        The cells sorted by level; level ``k`` holds
        ``level_cells[cell_starts[k]:cell_starts[k + 1]]``.
    cell_starts : ndarray of int64, shape (n_levels + 1,)
    row_starts : ndarray of int64, shape (n_cells + 1,)
        The rows of the cells in ``level_cells``' order, numbered one after the other:
        cell ``level_cells[j]`` holds numbers ``row_starts[j]`` to ``row_starts[j + 1]``.
    """

    rows: RowsByCell
    cell_rates: np.ndarray
    level_rates: np.ndarray
    level_cells: np.ndarray
    cell_starts: np.ndarray
    row_starts: np.ndarray

    def __deepcopy__(self, memo) -> CellRates:
        return self  # immutable; PyMC deep-copies step methods per chain

    @classmethod
    def build(cls, rows: RowsByCell, rates: np.ndarray) -> CellRates:
        """Rates ``rates[c]`` in ``(0, 1]`` per cell, rounded to the nearest power of two
        below the largest (in log scale)."""
        rates = np.asarray(rates, dtype=np.float64)
        if rates.shape != (rows.starts.size - 1,) or not np.all((rates > 0) & (rates <= 1)):
            raise ValueError("cell rates must be a vector of values in (0, 1], one per cell.")
        top = float(rates.max())
        level_of_cell = np.clip(np.rint(np.log2(top / rates)), 0, MAX_LEVELS - 1).astype(np.int64)
        used = np.unique(level_of_cell)
        level_of_cell = np.searchsorted(used, level_of_cell)
        level_rates = top * np.exp2(-used.astype(np.float64))
        cell_rates = level_rates[level_of_cell]
        level_cells, cell_starts = grouped_by(level_of_cell, used.size)
        row_starts = np.zeros(level_cells.size + 1, dtype=np.int64)
        np.cumsum(rows.sizes[level_cells], out=row_starts[1:])
        for array in (cell_rates, level_rates, level_cells, cell_starts, row_starts):
            array.setflags(write=False)
        return cls(rows, cell_rates, level_rates, level_cells, cell_starts, row_starts)

    @property
    def largest(self) -> float:
        return float(self.level_rates[0])

    def log_rates(self, rows: np.ndarray) -> np.ndarray:
        """``log r_n`` of the rows."""
        return np.log(self.cell_rates[self.rows.cell_of_row[rows]])

    def proposing(self, rng: np.random.Generator, geometric_positions) -> np.ndarray:
        """Every row with probability its rate, independently (dark and bright alike),
        found by ``geometric_positions(rng, rate, length)`` over each level's rows."""
        found = []
        for k, rate in enumerate(self.level_rates):
            first = int(self.row_starts[self.cell_starts[k]])
            end = int(self.row_starts[self.cell_starts[k + 1]])
            numbers = first + geometric_positions(rng, float(rate), end - first)
            if not numbers.size:
                continue
            j = np.searchsorted(self.row_starts, numbers, side="right") - 1
            offsets = numbers - self.row_starts[j]
            found.append(self.rows.order[self.rows.starts[self.level_cells[j]] + offsets])
        if not found:
            return np.empty(0, dtype=np.int64)
        return np.concatenate(found).astype(np.int64, copy=False)

    def expected_proposals(self) -> float:
        """Rows proposed per iteration on average (bright ones included)."""
        return float(np.dot(self.rows.sizes, self.cell_rates))


def cell_index(patterns: np.ndarray) -> RowsByCell | None:
    """The rows grouped by the coordinates they touch (``patterns``, one row per datum, as
    from :func:`~pymc_minibatch_mh.bounds.row_cells.likelihood_row_supports`), or None
    when every row touches the same ones."""
    unique, inverse = np.unique(patterns, axis=0, return_inverse=True)
    if unique.shape[0] < 2:
        return None
    return RowsByCell.build(inverse.reshape(-1), int(unique.shape[0]))


@dataclass(frozen=True)
class CellRateEvidence:
    """Running means, per cell, of what the rates follow while tuning.

    For every cell: the number of its bright rows and the sum of their ``min(1,
    Ltilde_n)``, each an exponentially weighted mean over tuning draws with the weights of
    :class:`~pymc_minibatch_mh.kernels.firefly.BrightFractionAverage`. With ``N_c`` rows,
    ``bright_c / N_c`` estimates the cell's mean ``Ltilde / (1 + Ltilde)`` (the paper's
    "fraction of bright points", per cell) and ``lt_sum_c / bright_c`` the ``Ltilde`` of
    a typical bright row of the cell.
    """

    bright: np.ndarray
    lt_sum: np.ndarray
    n_updates: int = 0

    @classmethod
    def empty(cls, n_cells: int) -> CellRateEvidence:
        return cls(np.zeros(n_cells), np.zeros(n_cells))

    def update(
        self, cells_of_bright: np.ndarray, lt_bright: np.ndarray, min_weight: float = 0.02
    ) -> CellRateEvidence:
        n_cells = self.bright.size
        weight = max(1.0 / (self.n_updates + 1.0), min_weight)
        counts = np.bincount(cells_of_bright, minlength=n_cells)
        sums = np.bincount(cells_of_bright, weights=np.minimum(lt_bright, 1.0), minlength=n_cells)
        return CellRateEvidence(
            (1.0 - weight) * self.bright + weight * counts,
            (1.0 - weight) * self.lt_sum + weight * sums,
            self.n_updates + 1,
        )

    def rates(self, cell_sizes: np.ndarray, floor: float, spend: float) -> np.ndarray:
        """Per-cell rates: a typical bright row's ``Ltilde`` (so that it turns dark at the
        next iteration), spending at most ``spend`` times the cell's bright rows in
        proposals per iteration; ``floor`` for cells without bright rows."""
        with np.errstate(divide="ignore", invalid="ignore"):
            typical = np.where(self.bright > 0, self.lt_sum / self.bright, 0.0)
        affordable = spend * self.bright / cell_sizes
        return np.clip(np.minimum(typical, affordable), floor, 1.0)


__all__ = ["MAX_LEVELS", "CellRateEvidence", "CellRates", "RowsByCell", "cell_index", "grouped_by"]
