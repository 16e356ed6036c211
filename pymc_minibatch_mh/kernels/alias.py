"""Walker's alias table: O(N) construction, O(1) draws of indices with given weights.

The table has one cell per item. A draw picks a cell ``k`` uniformly and returns
``k`` with probability ``prob[k]``, else ``alias[k]``. Each cell therefore holds at
most two items, and item ``i`` receives total mass ``prob[i] + sum over cells k
with alias[k] == i of (1 - prob[k])``, which the construction makes equal to
``N w_i / sum(w)``.

The construction is the "sweep" order of Hübschle-Schneider and Sanders: light
items (mass below one cell) are filled in order by the current heavy item; when
a heavy item drops below one cell, its own cell is topped up by the next heavy
item. Written with prefix sums, every cell is assigned at once (no Python loop):
see :meth:`AliasTable.from_weights`.

References
----------
.. [1] Walker, A. J. "An efficient method for generating discrete random
   variables with general distributions", ACM TOMS 3(3), 1977.
.. [2] Vose, M. D. "A linear algorithm for generating random numbers with a
   given distribution", IEEE TSE 17(9), 1991.
.. [3] Hübschle-Schneider, L., Sanders, P. "Parallel weighted random sampling",
   ACM TOMS 48(3), 2022 (sweeping alias construction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class AliasTable:
    """Alias table for drawing indices ``i`` with probability ``w_i / sum(w)``.

    Attributes
    ----------
    prob : ndarray of float64, shape (N,)
        Probability of keeping the cell's own index.
    alias : ndarray of int64, shape (N,)
        Index returned when the cell's own index is not kept.
    """

    prob: np.ndarray
    alias: np.ndarray

    @property
    def size(self) -> int:
        """Number of items N."""
        return int(self.prob.shape[0])

    @classmethod
    def from_weights(cls, weights: np.ndarray) -> AliasTable:
        """Build the table for non-negative weights (not necessarily normalised).

        Parameters
        ----------
        weights : array_like, shape (N,)
            Finite, non-negative, with a positive sum.

        Returns
        -------
        AliasTable

        Notes
        -----
        With ``p_i = N w_i / sum(w)`` (mean 1), light items have ``p_i < 1`` and heavy
        items ``p_i >= 1``. Let ``D_k`` be the total deficit ``sum (1 - p)`` of the
        lights before light ``k`` and ``E_j`` the total surplus ``sum (p - 1)`` of the
        heavies up to and including heavy ``j``, both in array order. The sweep gives
        light ``k`` to the first heavy ``j`` with ``E_j > D_k`` (its ``prob`` is
        ``p_k``). Heavy ``j`` keeps ``1 + E_j - S_j`` of its own cell, where ``S_j`` is
        the deficit of all lights with ``D_k < E_j``, and its alias is heavy ``j + 1``.
        Summing the pieces, heavy ``j`` receives ``1 + E_j - E_{j-1} = p_j``. All steps
        are cumulative sums and one merge of two sorted sequences: O(N), vectorised.
        """
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or w.size == 0:
            raise ValueError(f"weights must be a non-empty 1-D array; got shape {w.shape}.")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and non-negative.")
        total = float(w.sum())
        if not total > 0:
            raise ValueError("weights must have a positive sum.")
        n = w.size
        p = w * (n / total)
        heavy_mask = p >= 1.0
        if not heavy_mask.any():  # only possible through rounding
            heavy_mask[int(np.argmax(p))] = True
        light = np.flatnonzero(~heavy_mask)
        heavy = np.flatnonzero(heavy_mask)

        prob = np.ones(n)
        alias = np.arange(n, dtype=np.int64)
        if light.size == 0:  # all weights equal (up to rounding)
            return cls(prob=prob, alias=alias)

        deficit = 1.0 - p[light]
        deficit_after = np.cumsum(deficit)
        deficit_before = deficit_after - deficit
        surplus_upto = np.cumsum(p[heavy] - 1.0)

        # One stable merge of the two sorted key sequences (timsort merges the two runs
        # in linear time); on ties heavies come first, matching the strict inequalities.
        n_heavy = heavy.size
        order = np.argsort(np.concatenate([surplus_upto, deficit_before]), kind="stable")
        is_heavy = order < n_heavy
        heavies_before = np.cumsum(is_heavy) - is_heavy
        lights_before = np.cumsum(~is_heavy) - ~is_heavy
        owner = np.empty(light.size, dtype=np.int64)
        owner[order[~is_heavy] - n_heavy] = heavies_before[~is_heavy]  # #{j: E_j <= D_k}
        n_served = np.empty(n_heavy, dtype=np.int64)
        n_served[order[is_heavy]] = lights_before[is_heavy]  # #{k: D_k < E_j}

        # Lights: own mass p_k, topped up by the heavy current at the sweep.
        owner = np.minimum(owner, n_heavy - 1)  # rounding at the very end
        prob[light] = p[light]
        alias[light] = heavy[owner]

        # Heavies: keep 1 + E_j - S_j, topped up by the next heavy.
        served = np.where(n_served > 0, deficit_after[np.maximum(n_served - 1, 0)], 0.0)
        keep = 1.0 + surplus_upto - served
        prob[heavy[:-1]] = keep[:-1]
        alias[heavy[:-1]] = heavy[1:]
        prob[heavy[-1]] = 1.0  # the last heavy has nothing left to borrow from
        np.clip(prob, 0.0, 1.0, out=prob)
        return cls(prob=prob, alias=alias)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draw ``size`` indices with replacement; O(1) work per index.

        Parameters
        ----------
        rng : numpy.random.Generator
        size : int

        Returns
        -------
        ndarray of int64, shape (size,)
        """
        cells = rng.integers(0, self.size, size=size)
        u = rng.random(size)
        return np.where(u < self.prob[cells], cells, self.alias[cells])

    def masses(self) -> np.ndarray:
        """Exact probability of each index under :meth:`sample` (for checks), shape (N,)."""
        n = self.size
        top_up = np.bincount(self.alias, weights=1.0 - self.prob, minlength=n)
        return (self.prob + top_up) / n
