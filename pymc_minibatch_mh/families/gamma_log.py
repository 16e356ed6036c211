"""Gamma rows with a log-link mean: density, TunaMH's constant and FlyMC's lower bounds on a
trust region.

With mean ``exp(eta_n)`` and shape ``alpha`` (rate ``alpha e^{-eta_n}``) the log density is

    f_n(eta, t) = alpha (t - eta - y_n e^{-eta}) + (alpha - 1) log y_n - log Gamma(alpha)
                = alpha (t + log u_n - u_n) - log y_n - log Gamma(alpha),

with ``t = log alpha`` and ``u_n = y_n e^{-eta}``. In ``eta`` it is concave with curvature
``f_n'' = -alpha u_n``, unbounded as ``eta`` falls, so, as for the Poisson-log
(:mod:`pymc_minibatch_mh.families.poisson_log`), a quadratic lower bound holds only where
``eta`` is bounded below. On the trust region ``R`` around the MAP,
``eta_n >= eta_n^c - rho ||L^T x_n||`` (``eta_n^c`` at the region's centre), so
``u_n <= u_n^hi = y_n exp(-eta_n^c + rho ||L^T x_n||)``.

* **Fixed shape.** The tangent at the MAP's ``eta_n*`` lies above ``f_n`` by
  ``alpha u_n* d^2 e(-d)`` at ``eta = eta* + d``, with ``e`` the increasing
  :func:`~pymc_minibatch_mh.bounds.exp_tangent.exp_secant_factor`; on ``R`` that is at most
  ``alpha u_n* e(h_n) d^2`` with ``h_n = log(u_n^hi / u_n*)``, so
  ``f_n(eta) >= f_n(eta*) + alpha (u_n* - 1) (eta - eta*) - alpha u_n* e(h_n) (eta - eta*)^2``
  (equal at the bottom of the interval; Taylor's Lagrange form, with ``alpha u_n^hi / 2``
  in place of ``alpha u_n* e(h_n)``, is looser).
* **Free shape** (``t = z . q + t0``): two channels ``(eta_n, t)``, used as they are
  (``w = 1`` in :func:`~pymc_minibatch_mh.bounds.free_scale.two_channel_bound`). The
  Hessian entries are ``H_ee = -alpha u``, ``H_et = alpha (u - 1)`` and
  ``H_tt = J(alpha) + alpha (1 + log u - u)`` with
  ``J(alpha) = alpha (t + 1 - psi(alpha) - alpha psi'(alpha))``. On ``R``, ``alpha`` lies in
  ``[alpha_lo, alpha_hi]`` and ``u`` in ``[u_lo, u_hi]``; ``|u - 1|`` and
  ``u - 1 - log u >= 0`` are largest at an end of ``[u_lo, u_hi]``, and ``sup |J|`` is taken
  over a dense grid of ``t`` (refined, times a small margin). So ``|H_ee| <= alpha_hi u_hi``,
  ``|H_et| <= alpha_hi max |u - 1|`` and ``|H_tt| <= sup |J| + alpha_hi max (u - 1 - log u)``.

FlyMC rejects proposals outside ``R``, so the chain is exact for the posterior restricted
to ``R``.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1 (collapsible bounds).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    LinearQuadraticBound,
    as_design,
)
from pymc_minibatch_mh.bounds.exp_tangent import exp_secant_factor
from pymc_minibatch_mh.bounds.free_scale import FreeScaleQuadraticBound, two_channel_bound
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound, _row_norms
from pymc_minibatch_mh.bounds.taylor_remainder import grid_supremum_over
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.data.pass_tally import record_rows

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood


def _u_range(lp: LinearPredictorLikelihood, region: TrustRegion, design: np.ndarray):
    """``(u_lo, u_hi)`` per datum: the range of ``y e^{-eta}`` on ``region``."""
    y = np.asarray(lp.observed, dtype=np.float64)
    reach = region.row_radii() * _row_norms(design, region.chol)
    eta_centre = lp.linear_predictor(region.centre)
    record_rows(y.size, y.size)
    with np.errstate(over="ignore"):
        return y * np.exp(-eta_centre - reach), y * np.exp(-eta_centre + reach)


def _overflow_error() -> UnsupportedBound:
    return UnsupportedBound(
        "The Gamma bound overflows on the trust region (an observation is far above its "
        "mean there, or the shape is very large). Use TunaMH() or MinibatchBarker()."
    )


def map_tuned_gamma_log(
    lp: LinearPredictorLikelihood,
    q_map: np.ndarray,
    region: TrustRegion,
    *,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> LinearQuadraticBound | FreeScaleQuadraticBound:
    """Gamma-log bound touching the likelihood at ``q_map``, valid on ``region``.

    Parameters
    ----------
    lp : LinearPredictorLikelihood
        A ``"gamma_log"`` likelihood, with a fixed shape (``params["alpha"]``) or a free
        one (``scale_row``: ``log alpha`` affine in ``q``).
    q_map : ndarray, shape (D,)
        The anchor (the MAP; normally the region's centre).
    region : TrustRegion
        Where the bound must hold.

    Raises
    ------
    UnsupportedBound
        If the curvature overflows on the region.
    """
    if lp.family != "gamma_log":
        raise UnsupportedBound(f"map_tuned_gamma_log needs a Gamma likelihood, not {lp.family}.")
    q_map = np.asarray(q_map, dtype=np.float64)
    design = as_design(lp.design)
    y = np.asarray(lp.observed, dtype=np.float64)
    anchor = lp.linear_predictor(q_map)
    value = lp.loglik(q_map)
    record_rows(y.size, 2 * y.size)
    u_lo, u_hi = _u_range(lp, region, design)
    with np.errstate(over="ignore"):
        u_map = y * np.exp(-anchor)
    if not lp.free_scale:
        alpha = lp.params["alpha"]
        # The least curvature of the tangent below f_n for eta >= eta_lo: the gap of
        # exp(-eta) from its tangent at the anchor, largest relative to d^2 at eta_lo
        # (as for the Poisson-log, exp_tangent.exp_secant_factor).
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            drop = np.maximum(np.log(u_hi) - np.log(u_map), 0.0)
        curvature = -alpha * u_map * exp_secant_factor(drop)
        if not (np.all(np.isfinite(curvature)) and np.all(np.isfinite(value))):
            raise _overflow_error()
        return LinearQuadraticBound.from_coefficients(
            design,
            lp.offset,
            anchor,
            value,
            alpha * (u_map - 1.0),
            curvature,
            centre=q_map,
            family="gamma_log",
            chunk_entries=chunk_entries,
            region=region,
        )
    z = np.asarray(lp.scale_row, dtype=np.float64)
    lz = region.chol.T @ z
    t_half = float(np.max(region.row_radii())) * math.sqrt(float(lz @ lz))
    t_map, t_centre = lp.log_scale(q_map), lp.log_scale(region.centre)
    alpha_map, alpha_hi = math.exp(t_map), math.exp(t_centre + t_half)
    with np.errstate(over="ignore", divide="ignore"):
        gap = np.maximum(u_lo - 1.0 - np.log(u_lo), u_hi - 1.0 - np.log(u_hi))
    h_ee = alpha_hi * u_hi
    h_es = alpha_hi * np.maximum(np.abs(u_lo - 1.0), np.abs(u_hi - 1.0))
    h_ss = gamma_hessian_shape_constant(t_centre - t_half, t_centre + t_half) + alpha_hi * gap
    slope_eta = alpha_map * (u_map - 1.0)
    slope_scale = alpha_map * (
        t_map + 1.0 + np.log(y) - anchor - u_map - float(special.digamma(alpha_map))
    )
    if not all(np.all(np.isfinite(a)) for a in (h_ee, h_es, h_ss, slope_scale)):
        raise _overflow_error()
    return two_channel_bound(
        lp,
        q_map,
        region,
        (value, slope_eta, slope_scale),
        (h_ee, h_es, h_ss),
        weight=1.0,
        family="gamma_log_free_shape",
    )


def _gamma_j(t):
    a = np.exp(t)
    return a * (t + 1.0 - special.digamma(a) - a * special.polygamma(1, a))


def gamma_hessian_shape_constant(t_lo: float, t_hi: float) -> float:
    """``sup |J(alpha)|`` for ``t = log alpha`` in ``[t_lo, t_hi]`` (module docstring)."""
    return grid_supremum_over(_gamma_j, t_lo, t_hi)


def loglik(eta, y, params) -> np.ndarray:
    """Per-row ``log p(y | eta)`` with mean ``exp(eta)`` and shape ``alpha`` (rate
    ``alpha e^{-eta}``): ``alpha (log alpha - eta - y e^{-eta}) + (alpha - 1) log y -
    log Gamma(alpha)``."""
    alpha = np.asarray(params["alpha"], dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return (
        alpha * (np.log(alpha) - eta - y * np.exp(-eta))
        + (alpha - 1.0) * np.log(y)
        - special.gammaln(alpha)
    )


def third_derivative_bounds(lp, eta_range) -> np.ndarray:
    """TunaMH's per-row constant with the shape fixed, ``alpha y exp(-eta_lo)`` (the third
    derivative in ``eta`` is ``alpha u``, ``u = y e^{-eta}``, unbounded as ``eta`` falls:
    a range is needed). A free shape is a second channel, bounded by
    :mod:`pymc_minibatch_mh.bounds.taylor_remainder`'s free-scale constants."""
    if eta_range is None:
        raise UnsupportedBound(
            "The Gamma-log third derivative alpha y exp(-eta) has no bound on the whole "
            "space; it holds on a trust region only."
        )
    y = np.asarray(lp.observed, dtype=np.float64)
    with np.errstate(over="ignore"):
        return lp.params["alpha"] * y * np.exp(-eta_range[0])


def firefly_bound(lp, q_map, q_init, region) -> LinearQuadraticBound:
    """FlyMC's bound (:func:`map_tuned_gamma_log`, fixed or free shape) on ``region``."""
    return map_tuned_gamma_log(lp, q_map, region)
