"""The exponential's tangent gap and a row's largest linear predictor on a trust region.

Bounds of log-link rows (Poisson counts, a Gamma's ``exp(-eta)`` term, the complementary
log-log link's zero rows) share two facts. The gap between ``exp`` and its tangent at
``m`` is ``exp(m) d^2 e(d)`` at ``m + d``, with ``e`` increasing
(:func:`exp_secant_factor`); and on a region the predictor of row ``x`` is at most its
value at the centre plus the radius times ``||L^T x||`` (:func:`highest_predictor`).
"""

from __future__ import annotations

import numpy as np

from pymc_minibatch_mh.bounds.lipschitz import _row_norms


def highest_predictor(design, offset: np.ndarray, region) -> np.ndarray:
    """Each row's largest ``eta = x . q + o`` on ``region``: its value at the centre plus
    the radius (one for an ellipsoid, the row's cell's for a CellRegion) times
    ``||L^T x||``."""
    eta_centre = design @ region.centre + offset
    return eta_centre + region.row_radii() * _row_norms(design, region.chol)


def exp_secant_factor(h: np.ndarray) -> np.ndarray:
    """``e(h) = (exp(h) - 1 - h) / h^2`` (``1/2`` at ``h = 0``), increasing in ``h``.

    ``exp(m) e(h) d^2`` is the gap between ``exp`` and its tangent at ``m`` at ``m + d``
    with ``d = h``; ``inf`` where ``exp(h)`` overflows. A series near 0, where the
    closed form cancels.
    """
    h = np.asarray(h, dtype=np.float64)
    small = np.abs(h) < 1e-3
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        closed = (np.expm1(h) - h) / (h * h)
    series = 0.5 + h / 6.0 + h * h / 24.0
    return np.where(small, series, closed)
