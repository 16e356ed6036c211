"""Poisson rows with a log link, ``y ~ Poisson(exp(eta))``: density, TunaMH's constants and
FlyMC's lower bound on a trust region.

For ``y_n ~ Poisson(exp(eta_n))`` the log density is
``f_n(eta) = y_n eta - exp(eta) - log(y_n!)``, with ``f_n'' = -exp(eta)``: concave, but its
curvature is unbounded as ``eta`` grows, so no quadratic lower bound holds on the whole
line. On an interval ``eta <= eta_hi`` Taylor's theorem with the Lagrange remainder gives

    f_n(eta) >= f_n(m_n) + f_n'(m_n) (eta - m_n) - exp(eta_hi) (eta - m_n)^2 / 2

for any anchor ``m_n`` (the remainder is ``f''(xi) (eta - m)^2 / 2`` with ``xi`` between
``m`` and ``eta``, and ``f''(xi) >= -exp(eta_hi)``). A smaller curvature holds on the same
interval: the tangent's gap is ``f_n(m) + f_n'(m) d - f_n(m + d) = exp(m) d^2 e(d)`` with
``d = eta - m`` and ``e(d) = (exp(d) - 1 - d) / d^2 = int_0^1 (1 - t) exp(t d) dt``, which
increases with ``d``, so

    f_n(eta) >= f_n(m_n) + f_n'(m_n) (eta - m_n) - exp(m_n) e(eta_hi - m_n) (eta - m_n)^2

on ``eta <= eta_hi``, with equality at ``eta_hi``: the least curvature of a quadratic
tangent at ``m_n`` below ``f_n`` there (``2 e(h) = 1 + h/3 + ...`` against
``exp(h) = 1 + h + ...`` of the Lagrange form: at ``h = 2`` the curvature is 3.7 times
smaller). The bound is tight at ``m_n``, the linear predictor at the MAP. On the trust region
``R = {q : ||L^{-1}(q - q*)|| <= rho}`` around the MAP ``q*``
(:mod:`pymc_minibatch_mh.bounds.trust_region`), ``eta_n <= eta_n* + rho ||L^T x_n||``,
which is the ``eta_hi`` used per datum. FlyMC rejects proposals outside ``R`` before
reading any datum, so the chain is exact for the posterior restricted to ``R``. A row whose
``exp(eta_hi)`` overflows gets no bound (``log B_n = -inf``): FlyMC reads it at every
iteration. TunaMH's third-derivative constant on the same interval is ``exp(eta_hi)``.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1 (collapsible bounds).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    LinearQuadraticBound,
    as_design,
    per_datum,
)
from pymc_minibatch_mh.bounds.exp_tangent import exp_secant_factor, highest_predictor
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.bounds.trust_region import TrustRegion


def map_tuned_poisson_log(
    design: np.ndarray,
    offset,
    observed,
    q_map: np.ndarray,
    region: TrustRegion,
    *,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> LinearQuadraticBound:
    """Poisson-log bound anchored at the MAP's linear predictor, valid on ``region``.

    Parameters
    ----------
    design : ndarray, shape (N, D)
    offset : float or ndarray, shape (N,)
    observed : ndarray, shape (N,)
        Counts.
    q_map : ndarray, shape (D,)
        Anchor point (the MAP); the bound is tight there.
    region : TrustRegion
        Where the bound must hold (its centre is normally ``q_map``).

    Raises
    ------
    UnsupportedBound
        If the rate at the anchor overflows (rows whose curvature alone overflows on the
        region are left without a bound, ``unbounded``).
    """
    design = as_design(design)
    n_data = design.shape[0]
    offset = per_datum(offset, n_data, "offset")
    y = per_datum(observed, n_data, "observed")
    q_map = np.asarray(q_map, dtype=np.float64)
    anchor = design @ q_map + offset
    eta_high = highest_predictor(design, offset, region)
    with np.errstate(over="ignore", invalid="ignore"):
        rate = np.exp(anchor)
        curvature = -rate * exp_secant_factor(np.maximum(eta_high - anchor, 0.0))
    if not np.all(np.isfinite(rate)):
        raise UnsupportedBound(
            "The Poisson-log bound overflows at the MAP (the linear predictor is too large "
            "there). Use MinibatchBarker / Austere."
        )
    unbounded = ~np.isfinite(curvature)
    curvature[unbounded] = 0.0
    value = y * anchor - rate - special.gammaln(y + 1.0)
    return LinearQuadraticBound.from_coefficients(
        design,
        offset,
        anchor,
        value,
        y - rate,
        curvature,
        centre=q_map,
        family="poisson_log",
        chunk_entries=chunk_entries,
        region=region,
        unbounded=unbounded,
    )


def loglik(eta, y, params=None) -> np.ndarray:
    """Per-row ``log p(y | eta) = y eta - exp(eta) - log(y!)``."""
    return y * eta - np.exp(eta) - special.gammaln(y + 1.0)


def third_derivative_bounds(lp, eta_range) -> np.ndarray:
    """``exp(eta_hi)`` per row (``inf`` where it overflows): the third derivative,
    ``-exp(eta)``, grows without bound, so only a range of ``eta`` gives one."""
    if eta_range is None:
        raise UnsupportedBound(
            "The Poisson-log third derivative exp(eta) has no bound on the whole space; "
            "it holds on a trust region only."
        )
    with np.errstate(over="ignore"):
        return np.exp(eta_range[1])


def firefly_bound(lp, q_map, q_init, region) -> LinearQuadraticBound:
    """FlyMC's bound (:func:`map_tuned_poisson_log`) of the likelihood ``lp``."""
    return map_tuned_poisson_log(lp.design, lp.offset, lp.observed, q_map, region)
