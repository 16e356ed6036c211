"""Drawing data indices: without replacement, growing batch by batch, at O(batch) cost."""

from __future__ import annotations

import numpy as np


def draw_new_indices(
    rng: np.random.Generator, n_data: int, used: np.ndarray, size: int
) -> np.ndarray:
    """``size`` indices uniformly from ``range(n_data)`` minus ``used``, without replacement.

    Candidates are drawn with replacement and duplicates (within the draw or with
    ``used``) are dropped in draw order, which is sequential sampling without
    replacement. Cost is ``O((len(used) + size) log)``, independent of ``n_data``
    until ``used`` covers most of the data; when the remainder is at most ``size``
    the remainder itself is returned (shuffled).
    """
    remaining = n_data - used.size
    if size >= remaining:
        rest = np.setdiff1d(np.arange(n_data), used, assume_unique=True)
        return rng.permutation(rest)
    chosen = np.empty(0, dtype=np.int64)
    while chosen.size < size:
        need = size - chosen.size
        # Oversample by the expected share of rejections.
        draw = rng.integers(0, n_data, size=int(need * n_data / remaining) + 8)
        _, first = np.unique(draw, return_index=True)
        draw = draw[np.sort(first)]
        draw = draw[~np.isin(draw, used) & ~np.isin(draw, chosen)]
        chosen = np.concatenate([chosen, draw[:need]])
    return chosen
