"""Suprema of smooth functions of two variables over a box, found numerically.

The bounds of the Beta and ordinal likelihoods need ``sup |g_k(x, y)|`` over a rectangle
for a few smooth functions ``g_k``. Each is evaluated on a grid; from each function's
grid maximum a bounded quasi-Newton search refines it (to about 1e-8 relative), and the
larger of the two is enlarged by a safety margin.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: Safety factor on the numerically found suprema.
MARGIN = 1.001


def box_suprema(
    functions: Callable[[np.ndarray, np.ndarray], tuple],
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    points: tuple[int, int],
) -> np.ndarray:
    """``sup |g_k|`` over ``x_range x y_range`` for each ``g_k`` of ``functions(x, y)``
    (which broadcasts over arrays and returns a tuple of same-shaped arrays); ``points``
    grid points per axis (one on an axis whose range is a single value). Infinite values
    anywhere on the grid give ``inf`` for every function."""
    from scipy import optimize  # imported when needed: 0.3 s of every step's setup

    (x_lo, x_hi), (y_lo, y_hi) = x_range, y_range
    xs = np.linspace(x_lo, x_hi, points[0] if x_hi > x_lo else 1)
    ys = np.linspace(y_lo, y_hi, points[1] if y_hi > y_lo else 1)
    grid_x, grid_y = np.meshgrid(xs, ys, indexing="ij")
    with np.errstate(all="ignore"):
        values = np.abs(np.stack(functions(grid_x, grid_y)))
    if not np.all(np.isfinite(values)):
        return np.full(values.shape[0], np.inf)
    out = np.empty(values.shape[0])
    box = [(x_lo, x_hi), (y_lo, y_hi)]
    for k in range(values.shape[0]):
        i, j = np.unravel_index(int(np.argmax(values[k])), values[k].shape)
        best = float(values[k, i, j])

        def negative(p, k=k):
            with np.errstate(all="ignore"):
                value = abs(float(np.asarray(functions(p[0], p[1])[k])))
            return -value if np.isfinite(value) else 0.0

        found = optimize.minimize(
            negative, x0=np.array([grid_x[i, j], grid_y[i, j]]), bounds=box, method="L-BFGS-B"
        )
        out[k] = MARGIN * max(best, -float(found.fun))
    return out
