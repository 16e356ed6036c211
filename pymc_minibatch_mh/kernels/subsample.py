"""Drawing data rows without replacement, batch by batch, at O(batch) cost."""

from __future__ import annotations

import numpy as np


class UsedRows:
    """Rows already drawn in the current sequential test, as a reusable boolean mask.

    Successive :meth:`draw` calls return disjoint batches, each row uniform among the
    rows not drawn yet (sequential sampling without replacement). The mask is
    allocated once (per step object); :meth:`release` clears exactly the rows that
    were drawn, so one test costs time proportional to the rows it draws, not to N.

    While at least half of the rows are undrawn, candidates are drawn uniformly with
    replacement and those already drawn are discarded (expected cost at most twice
    the batch). Once more than half are drawn, the undrawn rows are listed and
    shuffled once (``O(N)``, which the test has already spent on likelihood
    evaluations) and later batches are read off that list.

    Parameters
    ----------
    n_data : int
        Number of data points N.
    """

    def __init__(self, n_data: int):
        if int(n_data) != n_data or n_data < 1:
            raise ValueError(f"n_data must be a positive integer; got {n_data}.")
        self.n_data = int(n_data)
        self._mask = np.zeros(self.n_data, dtype=bool)
        self._drawn: list[np.ndarray] = []
        self._pool: np.ndarray | None = None  # shuffled undrawn rows, once past N / 2
        self._pool_pos = 0
        self.count = 0

    @property
    def remaining(self) -> int:
        """Rows not drawn yet in the current test."""
        return self.n_data - self.count

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``min(size, remaining)`` new rows: a uniformly random subset of those not yet drawn,
        in increasing order (a batch enters the test through its sums only, and rows read in
        file order are gathered faster)."""
        size = min(int(size), self.remaining)
        if size <= 0:
            return np.empty(0, dtype=np.int64)
        if self._pool is None and 2 * (self.remaining - size) < self.n_data:
            # This batch would take the test past half the data: switch to a list.
            self._pool = rng.permutation(np.flatnonzero(~self._mask))
            self._pool_pos = 0
        if self._pool is not None:
            out = np.sort(self._pool[self._pool_pos : self._pool_pos + size])
            self._pool_pos += size
        else:
            out = self._rejection_draw(rng, size)
        self._mask[out] = True
        self._drawn.append(out)
        self.count += out.size
        return out

    def _rejection_draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Candidates with replacement, used ones discarded, duplicates merged.

        The procedure treats all undrawn rows alike (it commutes with relabelling
        them), so the rows it returns are a uniformly random subset of them.
        """
        chosen: list[np.ndarray] = []
        need = size
        while need > 0:
            # At least half the rows are free, so about 2 * need candidates suffice.
            cand = np.sort(rng.integers(0, self.n_data, size=2 * need + 16))
            cand = cand[~self._mask[cand]]
            if cand.size > 1:  # drop repeats (sorted, so they are adjacent)
                fresh = np.empty(cand.size, dtype=bool)
                fresh[0] = True
                np.not_equal(cand[1:], cand[:-1], out=fresh[1:])
                cand = cand[fresh]
            if cand.size > need:
                cand = np.sort(rng.choice(cand, size=need, replace=False))
            self._mask[cand] = True
            chosen.append(cand)
            need -= cand.size
        return chosen[0] if len(chosen) == 1 else np.concatenate(chosen)

    def release(self) -> None:
        """Forget the current test's rows (clears only the rows that were drawn)."""
        for rows in self._drawn:
            self._mask[rows] = False
        self._drawn.clear()
        self._pool = None
        self._pool_pos = 0
        self.count = 0

    def __getstate__(self):
        return {"n_data": self.n_data}

    def __setstate__(self, state):
        self.__init__(state["n_data"])
