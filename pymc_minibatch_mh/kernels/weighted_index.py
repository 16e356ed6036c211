"""Drawing indices with given weights from one array of cumulative sums.

A draw of index ``i`` with probability ``w_i / sum(w)`` takes ``u`` uniform on
``[0, sum(w))`` and returns the first ``i`` whose cumulative sum ``w_0 + ... + w_i``
exceeds ``u``: a binary search, ``O(log N)`` per draw. The table is that one float64
array (8 N bytes), built in one pass; Walker's alias table draws in ``O(1)`` but holds
twice the memory and its construction needs several more N-long temporaries, which
counts at N = 10^8. TunaMH draws a few dozen indices per step, so the ``log N``
comparisons are not what its time goes to.

References
----------
.. [1] Devroye, L. (1986). Non-Uniform Random Variate Generation, Springer, section III.2
   (inversion by binary search).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class CumulativeTable:
    """Cumulative weights for drawing indices ``i`` with probability ``w_i / sum(w)``.

    Attributes
    ----------
    cumulative : ndarray of float64, shape (N,)
        ``w_0 + ... + w_i``; non-decreasing, last entry positive.
    last : int
        The last index with a positive weight (draws never go beyond it).
    """

    cumulative: np.ndarray
    last: int

    def __deepcopy__(self, memo) -> CumulativeTable:
        # Immutable (read-only array): chains can share it; PyMC deep-copies a step's
        # sampling state for every chain.
        return self

    @property
    def size(self) -> int:
        """Number of items N."""
        return int(self.cumulative.shape[0])

    @classmethod
    def from_weights(cls, weights: np.ndarray) -> CumulativeTable:
        """Build the table for non-negative weights (not necessarily normalised).

        Parameters
        ----------
        weights : array_like, shape (N,)
            Finite, non-negative, with a positive sum.

        Raises
        ------
        ValueError
            For weights that are not a non-empty 1-D array of finite, non-negative numbers
            with a positive sum.
        """
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or w.size == 0:
            raise ValueError(f"weights must be a non-empty 1-D array; got shape {w.shape}.")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and non-negative.")
        cumulative = np.cumsum(w)
        if not cumulative[-1] > 0:
            raise ValueError("weights must have a positive sum.")
        last = int(np.flatnonzero(w)[-1])
        cumulative.setflags(write=False)
        return cls(cumulative=cumulative, last=last)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draw ``size`` indices with replacement; ``O(log N)`` work per index.

        Parameters
        ----------
        rng : numpy.random.Generator
        size : int

        Returns
        -------
        ndarray of int64, shape (size,)
        """
        u = rng.random(size) * self.cumulative[-1]
        idx = np.searchsorted(self.cumulative, u, side="right")
        # u * total can round up to total itself; that draw belongs to the last item.
        return np.minimum(idx, self.last).astype(np.int64, copy=False)

    def masses(self) -> np.ndarray:
        """Probability of each index under :meth:`sample` (for checks), shape (N,)."""
        return np.diff(self.cumulative, prepend=0.0) / self.cumulative[-1]
