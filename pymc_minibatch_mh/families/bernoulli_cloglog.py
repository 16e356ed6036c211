"""Bernoulli rows with a complementary log-log link, ``p = 1 - exp(-exp(eta))``.

With ``u = exp(eta)`` a row's log-likelihood is ``f_0(eta) = -u`` where ``y = 0`` and
``f_1(eta) = log(1 - exp(-u))`` where ``y = 1``. The two rows need different bounds:

* ``f_0`` is the Poisson-log density at a zero count: ``f_0'' = f_0''' = -u`` grow without
  bound, so its bounds hold on a trust region. On ``eta <= eta_hi`` TunaMH's
  third-derivative constant is ``exp(eta_hi)``, and FlyMC's bound is the tangent at the
  anchor ``m`` less ``exp(m) e(eta_hi - m) (eta - m)^2`` with
  ``e(h) = (exp(h) - 1 - h) / h^2`` (the least such curvature, as for the Poisson,
  :mod:`pymc_minibatch_mh.families.poisson_log`).
* ``f_1`` has bounded derivatives. With ``r = u / (exp(u) - 1)``:

      f_1' = r,   f_1'' = r - u r - r^2,   f_1''' = f_1'' (1 - u - 2 r) - u r,

  all vanishing as ``eta -> +-inf``; ``-f_1''`` is at most about 0.4125 and ``|f_1'''|``
  about 0.426. Both suprema are found on a dense grid, refined and given a margin
  (:func:`curvature_supremum`, :func:`third_derivative_supremum`), so FlyMC's bound of
  these rows, the tangent less ``curvature_supremum() (eta - m)^2 / 2``, holds everywhere.

This module imports neither PyMC nor PyTensor (the recogniser, in
:mod:`pymc_minibatch_mh.likelihood.glm_families`, finds ``1 - exp(-exp(eta))``).

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets of
   Data", UAI 2014 (a collapsible lower bound per datum).
.. [2] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact Minibatch
   Metropolis-Hastings", NeurIPS 2020 (bounds on the energy differences).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound, as_design, per_datum
from pymc_minibatch_mh.bounds.exp_tangent import exp_secant_factor, highest_predictor
from pymc_minibatch_mh.bounds.grid_supremum import supremum_on_grid
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound

#: The grid of ``eta`` on which the suprema of ``f_1`` are searched: below it ``f_1``
#: is ``eta`` up to ``O(exp(eta))`` terms, above it every derivative is below 1e-30.
_GRID = (-40.0, 12.0, 200_001)


def _positive(observed) -> np.ndarray:
    return np.asarray(observed) > 0.5


def loglik(eta, y, params=None) -> np.ndarray:
    """Per-row ``log p(y | eta)``: ``-exp(eta)`` for ``y = 0``, ``log(1 - exp(-exp(eta)))``
    for ``y = 1`` (``eta - exp(eta) / 2`` where ``exp(eta)`` is tiny)."""
    eta = np.asarray(eta, dtype=np.float64)
    with np.errstate(over="ignore"):
        u = np.exp(eta)
    with np.errstate(divide="ignore"):
        one = np.where(u < 1e-8, eta - 0.5 * u, np.log(-np.expm1(-u)))
    return np.where(_positive(y), one, -u)


def positive_row_derivatives(eta) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f_1', f_1'', f_1''')`` at ``eta`` (rows with ``y = 1``)."""
    eta = np.asarray(eta, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        u = np.exp(eta)
        r = np.where(u < 1e-12, 1.0 - 0.5 * u, u / np.expm1(u))
    r = np.nan_to_num(r, nan=0.0)  # u / inf where exp(u) overflows: r is 0 there
    d2 = r - u * r - r * r
    d3 = d2 * (1.0 - u - 2.0 * r) - u * r
    return r, np.nan_to_num(d2), np.nan_to_num(d3)


@lru_cache(maxsize=1)
def curvature_supremum() -> float:
    """``sup -f_1''`` (about 0.4125, near ``eta = 0.62``; ``f_1'' < 0`` everywhere), with a
    small margin."""
    return supremum_on_grid(lambda e: positive_row_derivatives(e)[1], np.linspace(*_GRID))


@lru_cache(maxsize=1)
def third_derivative_supremum() -> float:
    """``sup |f_1'''|`` (about 0.426, near ``eta = 1.43``), with a small margin."""
    return supremum_on_grid(lambda e: positive_row_derivatives(e)[2], np.linspace(*_GRID))


def row_third_derivative_bounds(eta_high, observed) -> np.ndarray:
    """TunaMH's ``L3`` of each row on an interval ``eta <= eta_high``."""
    with np.errstate(over="ignore"):
        zero_rows = np.exp(np.asarray(eta_high, dtype=np.float64))
    return np.where(_positive(observed), third_derivative_supremum(), zero_rows)


def bound_coefficients(anchor, eta_high, observed) -> tuple[np.ndarray, ...]:
    """``(value, slope, curvature)`` in ``eta`` of each row's lower bound, tight at
    ``eta = anchor`` and valid on ``eta <= eta_high`` (rows with ``y = 1``: everywhere).
    A curvature that overflows is ``-inf`` (the row has no bound there)."""
    anchor = np.asarray(anchor, dtype=np.float64)
    positive = _positive(observed)
    with np.errstate(over="ignore", invalid="ignore"):
        rate = np.exp(anchor)
        zero_curvature = -rate * exp_secant_factor(np.maximum(eta_high - anchor, 0.0))
    slope_one = positive_row_derivatives(anchor)[0]
    value = loglik(anchor, observed)
    slope = np.where(positive, slope_one, -rate)
    curvature = np.where(positive, -0.5 * curvature_supremum(), zero_curvature)
    return value, slope, curvature


def collapsed_bound(design, offset, observed, q_map: np.ndarray, region) -> LinearQuadraticBound:
    """FlyMC's bound of every row, tight at the MAP's predictor, valid on ``region`` (a
    :class:`~pymc_minibatch_mh.bounds.trust_region.TrustRegion` or a cell region), with its
    collapsed sum. A row with ``y = 0`` whose curvature overflows on the region gets no
    bound (FlyMC reads it at every iteration)."""
    design = as_design(design)
    offset = per_datum(offset, design.shape[0], "offset")
    q_map = np.asarray(q_map, dtype=np.float64)
    anchor = design @ q_map + offset
    eta_high = highest_predictor(design, offset, region)
    value, slope, curvature = bound_coefficients(anchor, eta_high, observed)
    if not np.all(np.isfinite(value) & np.isfinite(slope)):
        raise UnsupportedBound(
            "The complementary log-log bound overflows at the MAP (the linear predictor is "
            "too large there). Use MinibatchBarker / Austere."
        )
    unbounded = ~np.isfinite(curvature)
    curvature[unbounded] = 0.0
    return LinearQuadraticBound.from_coefficients(
        design,
        offset,
        anchor,
        value,
        slope,
        curvature,
        centre=q_map,
        family="bernoulli_cloglog",
        region=region,
        unbounded=unbounded,
    )


def third_derivative_bounds(lp, eta_range) -> np.ndarray:
    """TunaMH's per-row constant on each row's ``(eta_lo, eta_hi)``: a zero row's grows
    with ``eta_hi``, so a range is needed."""
    if eta_range is None:
        raise UnsupportedBound(
            "The complementary log-log rows with y = 0 have a third derivative exp(eta) "
            "without bound on the whole space; it holds on a trust region only."
        )
    return row_third_derivative_bounds(eta_range[1], lp.observed)


def firefly_bound(lp, q_map, q_init, region) -> LinearQuadraticBound:
    """FlyMC's bound (:func:`collapsed_bound`) of the likelihood ``lp`` on ``region``."""
    return collapsed_bound(lp.design, lp.offset, lp.observed, q_map, region)
