"""Drawing data indices without replacement, batch by batch, at O(batch) cost."""

from __future__ import annotations

import numpy as np


class UsedRows:
    """Rows already drawn in the current sequential test, as a reusable boolean mask.

    The mask has one entry per datum and is allocated once (per step object); each
    test marks the rows it draws and :meth:`release` clears exactly those rows, so
    a test costs ``O(rows drawn)``, not ``O(N)``.

    Parameters
    ----------
    n_data : int
        Number of data points N.
    """

    def __init__(self, n_data: int):
        self.n_data = int(n_data)
        self._mask = np.zeros(self.n_data, dtype=bool)
        self._drawn: list[np.ndarray] = []
        self.count = 0

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` new rows, uniformly among those not yet drawn (fewer if exhausted).

        Candidates are drawn with replacement; those already drawn (earlier or in
        this draw) are discarded in draw order, which is sequential sampling
        without replacement.
        """
        size = min(int(size), self.n_data - self.count)
        chosen: list[np.ndarray] = []
        need = size
        while need > 0:
            remaining = self.n_data - self.count - (size - need)
            n_candidates = min(int(need * self.n_data / remaining) + 16, 4 * self.n_data)
            cand = rng.integers(0, self.n_data, size=n_candidates)
            cand = cand[~self._mask[cand]]
            _, first = np.unique(cand, return_index=True)
            cand = cand[np.sort(first)][:need]
            self._mask[cand] = True
            chosen.append(cand)
            need -= cand.size
        out = np.concatenate(chosen) if len(chosen) != 1 else chosen[0]
        self._drawn.append(out)
        self.count += out.size
        return out

    def release(self) -> None:
        """Forget the current test's rows (clears only the rows that were drawn)."""
        for rows in self._drawn:
            self._mask[rows] = False
        self._drawn.clear()
        self.count = 0

    def __getstate__(self):
        return {"n_data": self.n_data}

    def __setstate__(self, state):
        self.__init__(state["n_data"])
