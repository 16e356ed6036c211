"""FlyMC lower bounds from each row's Taylor expansion at the MAP, on a trust region.

For a likelihood of two affine channels ``u_n = (eta_n, t)`` — the linear predictor and
the log of a second parameter shared by every row (or that parameter fixed) — Taylor's
theorem to third order at the MAP's channels ``u_n*`` gives, for any ``u`` of a convex
region around them, with ``d = u - u_n* = (d_e, d_t)``,

    f_n(u) = f_n(u*) + grad f_n(u*) . d + d^T H_n(u*) d / 2 + D^3 f_n(xi)[d, d, d] / 6

with ``xi`` on the segment. With ``T`` the per-row bounds on the absolute third
derivatives over the region
(:func:`~pymc_minibatch_mh.bounds.taylor_remainder.region_third_derivatives`, the same
bounds TunaMH's constants use) and ``|d_e| <= De``, ``|d_t| <= Dt`` there (``De`` the
row's largest ``|eta_n - eta_n*|``, ``Dt`` the largest ``|t - t*|``, 0 for a fixed second
parameter), the last term is at least::

    -(T_eee |d_e|^3 + 3 T_eet d_e^2 |d_t| + 3 T_ett |d_e| d_t^2 + T_ttt |d_t|^3) / 6
    >= -(a_n d_e^2 + b_n d_t^2) / 2,
    a_n = (T_eee De + 3 T_eet Dt) / 3,   b_n = (3 T_ett De + T_ttt Dt) / 3,

so ``B_n(u) = f_n(u*) + grad f_n(u*) . d + (d^T H_n(u*) d - a_n d_e^2 - b_n d_t^2) / 2`` is a
lower bound on the region that touches ``f_n`` at the MAP, a quadratic in ``q`` with the
row's own Hessian at the MAP (its cross term included) that collapses to ``O(D^2)``
sufficient statistics [1]_ (:func:`~pymc_minibatch_mh.bounds.free_scale.collapse_two_channels`).
Its gap at ``u`` is at most ``(a_n d_e^2 + b_n d_t^2) / 2 + |D^3 f_n| |d|^3 / 6``: the
third derivatives times ``|d|^2`` times the region's half-width, so near the posterior a
row is bright with probability of order ``N^{-3/2}``. With the second parameter fixed the
one-channel bound must be concave row by row (:class:`~pymc_minibatch_mh.bounds.collapsed.
LinearQuadraticBound`); a row convex at the MAP gets curvature 0 there, a lower bound still.

Families: Beta regression (``t = log nu``), the zero-inflated and hurdle Poisson
(``t = logit psi``), each with the second parameter fixed or one free variable, and the
Normal and Student-t with a scale per row whose log is affine (``t_n = s_n = log sigma_n``,
each row its own scale direction ``z_n``; :mod:`~pymc_minibatch_mh.bounds.
location_scale_curvature`; the quadratic then sums ``z_n z_n^T`` and ``x_n z_n^T`` over the
rows too). The
first and second derivatives at the MAP are the closed forms of
:mod:`~pymc_minibatch_mh.bounds.beta_curvature`,
:mod:`~pymc_minibatch_mh.bounds.zip_curvature` and
:mod:`~pymc_minibatch_mh.bounds.hurdle_curvature`. FlyMC rejects proposals outside the
region, so the chain is exact for the posterior restricted to it.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1 (collapsible bounds).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from pymc_minibatch_mh.bounds.beta_curvature import beta_channel_derivatives
from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound, as_design
from pymc_minibatch_mh.bounds.free_scale import FreeScaleQuadraticBound, collapse_two_channels
from pymc_minibatch_mh.bounds.hurdle_curvature import hurdle_channel_derivatives
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound, _row_norms
from pymc_minibatch_mh.bounds.location_scale_curvature import (
    location_scale_derivatives,
    location_scale_third_derivatives,
)
from pymc_minibatch_mh.bounds.taylor_remainder import (
    region_third_derivatives,
    single_nu,
    student_t_scale_constants,
)
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.bounds.zip_curvature import zip_channel_derivatives
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.data.row_design import design_rows

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood

#: The families this bound serves, with each one's derivatives at a point in ``(eta, t)``.
CHANNEL_DERIVATIVES = {
    "beta_logit": beta_channel_derivatives,
    "zip_log": zip_channel_derivatives,
    "hurdle_poisson_log": hurdle_channel_derivatives,
}
#: Relative and absolute slack added to the curvature bounds, far above the rounding of
#: the closed forms they are built from.
_RELATIVE_SLACK, _ABSOLUTE_SLACK = 1e-9, 1e-12


def map_tuned_region_taylor(
    lp: LinearPredictorLikelihood, q_map: np.ndarray, region: TrustRegion
) -> LinearQuadraticBound | FreeScaleQuadraticBound:
    """The bound of the module docstring, touching the likelihood at ``q_map``.

    Parameters
    ----------
    lp : LinearPredictorLikelihood
        A ``"beta_logit"``, ``"zip_log"`` or ``"hurdle_poisson_log"`` likelihood, its second
        parameter fixed (``params``) or free (``scale_row``).
    q_map : ndarray, shape (D,)
        The anchor (the MAP; normally the region's centre).
    region : TrustRegion
        Where the bound must hold (an ellipsoid or every row cell's ellipsoid).

    Raises
    ------
    UnsupportedBound
        For another family, or when the curvature overflows on the region.
    """
    if getattr(lp, "row_scales", False):
        return _row_scale_bound(lp, np.asarray(q_map, dtype=np.float64), region)
    derivatives = CHANNEL_DERIVATIVES.get(lp.family)
    if derivatives is None:
        raise UnsupportedBound(f"map_tuned_region_taylor has no derivatives for {lp.family}.")
    q_map = np.asarray(q_map, dtype=np.float64)
    design = as_design(lp.design)
    n = lp.n_data
    norms = _row_norms(design, region.chol)
    eta_map = lp.linear_predictor(q_map)
    eta_centre = lp.linear_predictor(region.centre)
    value = lp.loglik(q_map)
    record_rows(3 * n, n)
    reach_eta = np.abs(eta_centre - eta_map) + region.row_radii() * norms
    if lp.free_scale:
        lz = region.chol.T @ np.asarray(lp.scale_row, dtype=np.float64)
        t_half = float(np.max(region.row_radii())) * math.sqrt(float(lz @ lz))
        t_map, t_centre = lp.log_scale(q_map), lp.log_scale(region.centre)
        reach_t = abs(t_centre - t_map) + t_half
        bounds = region_third_derivatives(lp, region, norms, t_centre, t_half)
    else:
        name = "nu" if lp.family == "beta_logit" else "odds"
        t_map = np.log(np.asarray(lp.params[name], dtype=np.float64))
        bounds = region_third_derivatives(lp, region, norms)
    slope_eta, slope_t, h_ee, h_et, h_tt = derivatives(lp.observed, eta_map, t_map)
    family = f"{lp.family}_region_taylor"
    if not lp.free_scale:
        slack_eta = _slack(bounds[0] * reach_eta / 3.0)  # t fixed: only T_eee De / 3
        # A collapsible one-channel bound is concave row by row: a row convex at the MAP
        # (an observation near 0 or 1 of a Beta, a zero explained by the inflation) gets
        # curvature 0, which lowers the bound and keeps it valid.
        coefficient = 0.5 * np.minimum(h_ee - slack_eta, 0.0)
        # A row whose slack overflows on the region gets no bound (FlyMC reads it always).
        unbounded = ~np.isfinite(coefficient)
        if not np.all(np.isfinite(value)) or unbounded.all():
            raise _overflow_error(lp)
        coefficient = np.where(unbounded, 0.0, coefficient)
        return LinearQuadraticBound.from_coefficients(
            design,
            lp.offset,
            eta_map,
            value,
            slope_eta,
            coefficient,
            centre=q_map,
            family=family,
            region=region,
            unbounded=unbounded,
        )
    return _two_channel_bound(
        lp,
        q_map,
        region,
        (value, slope_eta, slope_t, h_ee, h_et, h_tt),
        bounds,
        (reach_eta, reach_t),
        family,
    )


def _row_scale_bound(lp, q_map: np.ndarray, region: TrustRegion) -> FreeScaleQuadraticBound:
    """The bound for a Normal or Student-t whose log scale is affine per row,
    ``s_n = z_n . q + o_n``: the channels ``(eta_n, s_n)`` with the third-derivative bounds
    of :mod:`~pymc_minibatch_mh.bounds.location_scale_curvature` on the region."""
    design = as_design(lp.design)
    scale_design = design_rows(lp.scale_design)
    n = lp.n_data
    rho = region.row_radii()
    eta_reach = rho * _row_norms(design, region.chol)
    s_reach = rho * _row_norms(scale_design, region.chol)
    eta_map, eta_centre = lp.linear_predictor(q_map), lp.linear_predictor(region.centre)
    s_map, s_centre = lp.log_scales(q_map), lp.log_scales(region.centre)
    value = lp.loglik(q_map)
    record_rows(7 * n, n)
    y = np.asarray(lp.observed, dtype=np.float64)
    nu = single_nu(lp) if lp.family == "student_t" else None
    constants = None if nu is None else student_t_scale_constants(nu)
    residual_max = np.abs(y - eta_centre) + eta_reach
    thirds = location_scale_third_derivatives(
        lp.family, residual_max, s_centre - s_reach, constants
    )
    slope_eta, slope_s, h_ee, h_es, h_ss = location_scale_derivatives(
        lp.family, nu, y, eta_map, s_map
    )
    reaches = (np.abs(eta_centre - eta_map) + eta_reach, np.abs(s_centre - s_map) + s_reach)
    return _two_channel_bound(
        lp,
        q_map,
        region,
        (value, slope_eta, slope_s, h_ee, h_es, h_ss),
        thirds,
        reaches,
        f"{lp.family}_row_scale_region_taylor",
    )


def _two_channel_bound(lp, q_map, region, taylor, thirds, reaches, family):
    """The collapsed bound of the module docstring from each row's value, slopes and
    Hessian at the MAP (``taylor``), its third-derivative bounds ``(T_eee, T_eet, T_ett,
    T_ttt)`` on the region and its channels' reaches ``(De, Dt)``."""
    value, slope_eta, slope_t, h_ee, h_et, h_tt = taylor
    eee, eet, ett, ttt = thirds
    reach_eta, reach_t = reaches
    slack_eta = _slack(eee * reach_eta / 3.0 + eet * reach_t)
    slack_t = _slack(ett * reach_eta + ttt * reach_t / 3.0)
    # Rows whose slack overflows on the region get no bound (collapse_two_channels).
    curvatures = (slack_eta - h_ee, slack_t - h_tt, -h_et)
    return collapse_two_channels(
        lp, q_map, region, (value, slope_eta, slope_t), curvatures, weight=1.0, family=family
    )


def _slack(bound: np.ndarray) -> np.ndarray:
    return bound * (1.0 + _RELATIVE_SLACK) + _ABSOLUTE_SLACK


def _overflow_error(lp) -> UnsupportedBound:
    return UnsupportedBound(
        f"FlyMC's bound for this {lp.family} likelihood overflows on the trust region (a "
        "linear predictor or the second parameter reaches values where the curvature is not "
        "finite). Use TunaMH() or MinibatchBarker()."
    )
