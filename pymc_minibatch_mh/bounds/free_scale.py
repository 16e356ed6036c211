"""FlyMC lower bounds for Normal and Student-t likelihoods with a free scale, on a trust region.

With ``s = log sigma = z . q + s0`` free, the per-datum log-likelihood depends on ``q``
through two affine channels, ``l_n = f_n(eta_n, s)`` with
``f_n(eta, s) = -s + g((y_n - eta) e^{-s})`` + const (``g(u) = -u^2/2`` for the Normal,
``g(u) = -(nu + 1)/2 log(1 + u^2/nu)`` for Student-t). Measure the channels in the
units ``W = diag(w, 1)``, ``w = e^{-s*}`` (``eta`` in units of the reference ``sigma``).
Taylor's theorem at the MAP's channels ``(eta_n*, s*)`` gives, for any point of a convex
set on which ``-H <= diag(m_n, k_n)`` for the scaled Hessian ``H`` (in the psd order),

    l_n >= l_n* + f_eta,n (eta_n - eta_n*) + f_s,n (s - s*)
           - (m_n w^2 (eta_n - eta_n*)^2 + k_n (s - s*)^2) / 2,

a quadratic in ``q`` (both channels are affine in ``q``) that touches ``l_n`` at the MAP.
If the entries of ``H`` are bounded, ``|H_ee| <= A``, ``|H_es| <= B``, ``|H_ss| <= C``, then
``m_n = A + kappa B`` and ``k_n = C + B / kappa`` work for any ``kappa > 0`` (split the
cross term with ``2 |B x y| <= B (kappa x^2 + y^2 / kappa)``); ``kappa_n`` is chosen to
balance the two channels at their Laplace scales. The sum over all data collapses to
``O(D^2)`` numbers: ``H = -(w^2 sum_n m_n x_n x_n^T + (sum_n k_n) z z^T)`` and a gradient
``sum_n f_eta,n x_n + (sum_n f_s,n) z``.

The scaled Hessian, with ``u = (y - eta) e^{-s}`` and ``delta = s - s*``, is

    [[e^{-2 delta} g\'\'(u),  e^{-delta} (g\'(u) + u g\'\'(u))],
     [e^{-delta} (g\'(u) + u g\'\'(u)),  u g\'(u) + u^2 g\'\'(u)]],

On the trust region ``R = {q : ||L^{-1}(q - q*)|| <= rho}``,
``e^{-delta} <= E = exp(rho sqrt(z' S z))`` (``S = L L^T``) and
``|y_n - eta_n| <= |y_n - eta_n*| + rho ||L^T x_n||``. So

* Normal (``g\' = -u``, ``g\'\' = -1``): ``A = E^2``, ``B = 2 U_n E``, ``C = 2 U_n^2`` with
  ``U_n`` the largest ``|u|`` on ``R``;
* Student-t: the three functions of ``u`` are bounded on the real line, with suprema
  ``C_1, C_2, C_3`` found once numerically (then enlarged by 0.1 %):
  ``A = C_1 E^2``, ``B = C_2 E``, ``C = C_3``.

FlyMC rejects proposals outside ``R``, so the chain is exact for the posterior
restricted to ``R``. With a :class:`~pymc_minibatch_mh.bounds.row_cells.CellRegion` (every
row cell's ellipsoid) each row uses its cell's radius ``rho_T`` in place of ``rho``: on
the region its linear predictor and the scale stay within ``rho_T`` Laplace sds of their
values at the centre. FlyMC uses this bound for the Student-t; a Normal likelihood is
its own, exact collapsible bound (:mod:`pymc_minibatch_mh.bounds.normal_exact`).

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1 (collapsible bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    CollapsedQuadratic,
    OverDesignRows,
    SumsThroughCollapsed,
)
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound, _row_norms
from pymc_minibatch_mh.bounds.taylor_remainder import (
    _grid_supremum,
    single_nu,
    student_t_g_derivatives,
)
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.data.chunk_pass import design_sum
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.data.row_design import design_rows

if TYPE_CHECKING:  # pragma: no cover - typing only (kept out of the import path)
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood


@lru_cache(maxsize=64)
def student_t_hessian_constants(nu: float) -> tuple[float, float, float]:
    """``C_1..C_3``: suprema over ``u`` of ``|g\'\'|``, ``|g\' + u g\'\'|`` and
    ``|u g\' + u^2 g\'\'|`` for ``g(u) = -(nu + 1)/2 log(1 + u^2 / nu)``."""

    def derivative(u, k):
        return student_t_g_derivatives(nu, u)[k]

    functions = (
        lambda u: derivative(u, 1),
        lambda u: derivative(u, 0) + u * derivative(u, 1),
        lambda u: u * derivative(u, 0) + u * u * derivative(u, 1),
    )
    upper = 1e4 * math.sqrt(nu)
    return tuple(_grid_supremum(fn, upper) for fn in functions)


@dataclass(frozen=True, eq=False)
class FreeScaleQuadraticBound(SumsThroughCollapsed, OverDesignRows):
    """Per-datum quadratic log-bound in two channels (``eta_n`` and ``s``), collapsed.

    ``log B_n(q) = v_n + a_n e_n + b_n t - (m_n w^2 e_n^2 + 2 c_n w e_n t + k_n t^2) / 2``
    with ``e_n = x_n . (q - q*)`` and ``t = z . (q - q*)`` (``c_n = 0`` unless a cross term
    is given; with a scale per row ``t_n = z_n . (q - q*)``). Build it with
    :func:`map_tuned_free_scale` or :func:`collapse_two_channels`.
    Untempered, like every bound here.

    Attributes
    ----------
    design : ndarray, shape (N, D)
    scale_row : ndarray, shape (D,)
        ``z``.
    centre : ndarray, shape (D,)
        ``q*`` (the MAP), where the bound touches the likelihood.
    value, slope_eta, slope_scale : ndarray, shape (N,)
        ``v_n``, ``a_n`` and ``b_n``.
    curvature_eta, curvature_scale : ndarray, shape (N,)
        ``m_n`` and ``k_n``.
    weight : float
        ``w = e^{-s*}``.
    collapsed : CollapsedQuadratic
        ``sum_n log B_n(q)`` in O(D^2).
    region : TrustRegion
        Where the bound holds.
    family : str
    cross : ndarray, shape (N,), optional
        ``c_n``; None for 0.
    scale_design : ndarray or RowDesign, shape (N, D), optional
        A scale per row: ``t_n = z_n . (q - q*)`` with ``z_n`` its rows (``scale_row`` is
        then None).
    unbounded : ndarray of bool, shape (N,), optional
        Rows without a bound: ``log B_n = -inf``, left out of the collapsed sum (FlyMC
        keeps them bright and reads them at every iteration); their coefficients are 0.
    """

    design: np.ndarray
    scale_row: np.ndarray
    centre: np.ndarray
    value: np.ndarray
    slope_eta: np.ndarray
    slope_scale: np.ndarray
    curvature_eta: np.ndarray
    curvature_scale: np.ndarray
    weight: float
    collapsed: CollapsedQuadratic
    region: TrustRegion
    family: str
    cross: np.ndarray | None = None
    scale_design: object | None = None
    unbounded: np.ndarray | None = None

    def without_bounds_on(self, rows: np.ndarray) -> FreeScaleQuadraticBound:
        """The same bound with no bound on ``rows`` (a boolean mask or indices) as well:
        their coefficients are dropped and the sum collapsed again (one pass)."""
        return _collapsed_bound(
            self.design,
            self.scale_row if self.scale_design is None else self.scale_design,
            self.centre,
            (self.value, self.slope_eta, self.slope_scale),
            (self.curvature_eta, self.curvature_scale, self.cross),
            weight=self.weight,
            region=self.region,
            family=self.family,
            unbounded=self._unbounded_with(rows),
        )

    def _deviations(self, q: np.ndarray, idx: np.ndarray | None):
        d = np.asarray(q, dtype=np.float64) - self.centre
        rows = self.design if idx is None else self.gathered_rows(idx)
        if self.scale_design is None:
            return rows @ d, float(self.scale_row @ d)
        return rows @ d, self._scale_rows(idx) @ d

    def _scale_rows(self, idx: np.ndarray | None):
        """The rows ``z_n`` of a scale per row (all rows if ``idx`` is None)."""
        if idx is None:
            return self.scale_design
        return np.asarray(self.scale_design[idx], dtype=np.float64)

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-datum ``log B_n(q)`` for rows ``idx`` (all rows if None); O(len(idx) D)."""
        e, t = self._deviations(q, idx)
        sel = slice(None) if idx is None else idx
        w2 = self.weight * self.weight
        quadratic = self.curvature_eta[sel] * w2 * e * e + self.curvature_scale[sel] * t * t
        if self.cross is not None:
            quadratic = quadratic + 2.0 * self.weight * self.cross[sel] * e * t
        out = (
            self.value[sel] + self.slope_eta[sel] * e + self.slope_scale[sel] * t - 0.5 * quadratic
        )
        if self.unbounded is not None:
            out = np.where(self.unbounded[sel], -np.inf, out)
        return out

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log B_{idx[j]}(q)``, shape ``(D,)``."""
        e, t = self._deviations(q, idx)
        d_eta = self.slope_eta[idx] - self.curvature_eta[idx] * self.weight**2 * e
        d_scale = self.slope_scale[idx] - self.curvature_scale[idx] * t
        if self.cross is not None:
            d_eta = d_eta - self.weight * self.cross[idx] * t
            d_scale = d_scale - self.weight * self.cross[idx] * e
        grad = self.gathered_rows(idx).T @ (weights * d_eta)
        if self.scale_design is None:
            return grad + float(weights @ d_scale) * self.scale_row
        return grad + self._scale_rows(idx).T @ (weights * d_scale)


def map_tuned_free_scale(
    lp: LinearPredictorLikelihood, q_map: np.ndarray, region: TrustRegion
) -> FreeScaleQuadraticBound:
    """The bound of the module docstring, touching the likelihood at ``q_map``.

    Parameters
    ----------
    lp : LinearPredictorLikelihood
        A Normal or Student-t likelihood with a free scale (``lp.free_scale``).
    q_map : ndarray, shape (D,)
        The MAP (the anchor; normally the region's centre).
    region : TrustRegion
        Where the bound must hold.
    """
    if not lp.free_scale or lp.family not in ("normal", "student_t"):
        raise UnsupportedBound("map_tuned_free_scale needs a Normal or Student-t free scale.")
    q_map = np.asarray(q_map, dtype=np.float64)
    design = design_rows(lp.design)
    n, ndim = design.shape
    z = np.asarray(lp.scale_row, dtype=np.float64)
    # One radius for an ellipsoid, one per row's cell for a CellRegion.
    chol, rho = region.chol, region.row_radii()
    lz = chol.T @ z
    s_half = rho * math.sqrt(float(lz @ lz))
    s_star = lp.log_scale(q_map)
    s_centre = lp.log_scale(region.centre)
    w = math.exp(-s_star)
    # Largest e^{-(s - s*)} on the region.
    big_e = np.exp(s_half + s_star - s_centre)
    eta_map = lp.linear_predictor(q_map)
    eta_centre = lp.linear_predictor(region.centre)
    y = np.asarray(lp.observed, dtype=np.float64)
    u = (y - eta_map) * w
    value = lp.loglik(q_map)
    record_rows(n, n)
    if lp.family == "normal":
        g1 = -u
    else:
        nu = single_nu(lp)
        g1 = student_t_g_derivatives(nu, u)[0]
    slope_eta = -w * g1  # d/d eta of g((y - eta) e^{-s}) at s*
    slope_scale = -1.0 - u * g1
    norms = _row_norms(design, chol)
    if lp.family == "normal":
        residual = np.abs(y - eta_centre) + rho * norms
        u_max = residual * np.exp(-(s_centre - s_half))
        # Entry bounds of the scaled Hessian on the region: |H_ee| <= E^2,
        # |H_es| <= 2 U E, |H_ss| <= 2 U^2.
        h_ee, h_es, h_ss = big_e**2, 2.0 * u_max * big_e, 2.0 * u_max**2
    else:
        c1, c2, c3 = student_t_hessian_constants(nu)
        h_ee, h_es, h_ss = c1 * big_e**2, c2 * big_e, c3
    return two_channel_bound(
        lp,
        q_map,
        region,
        (value, slope_eta, slope_scale),
        (h_ee, h_es, h_ss),
        weight=w,
        family=f"{lp.family}_free_scale",
    )


def two_channel_bound(
    lp: LinearPredictorLikelihood,
    q_map: np.ndarray,
    region: TrustRegion,
    taylor: tuple[np.ndarray, np.ndarray, np.ndarray],
    hessian_bounds: tuple,
    *,
    weight: float,
    family: str,
) -> FreeScaleQuadraticBound:
    """The collapsed bound from each datum's value and slopes at ``q_map`` (``taylor``:
    ``v_n``, ``a_n``, ``b_n``) and bounds on the entries of its scaled Hessian on
    ``region`` (``hessian_bounds``: ``|H_ee|``, ``|H_es|``, ``|H_ss|``, arrays or floats);
    ``weight`` is ``w``, the unit of the ``eta`` channel."""
    h_ee, h_es, h_ss = hessian_bounds
    design = design_rows(lp.design)
    z = np.asarray(lp.scale_row, dtype=np.float64)
    lz = region.chol.T @ z
    norms = _row_norms(design, region.chol)
    # -H <= diag(h_ee + kappa h_es, h_ss + h_es / kappa) for any kappa > 0 (split the
    # off-diagonal term: 2 |h_es x y| <= h_es (kappa x^2 + y^2 / kappa)). kappa balances the
    # two gaps at the Laplace scale of each channel: sqrt(Var(t) / Var(w e_n)).
    var_t = float(lz @ lz)
    kappa = np.sqrt(var_t / np.maximum(weight * weight * norms**2, 1e-300))
    curvatures = (h_ee + kappa * h_es, h_ss + h_es / kappa, None)
    return collapse_two_channels(
        lp, q_map, region, taylor, curvatures, weight=weight, family=family
    )


def collapse_two_channels(
    lp: LinearPredictorLikelihood,
    q_map: np.ndarray,
    region: TrustRegion,
    taylor: tuple[np.ndarray, np.ndarray, np.ndarray],
    curvatures: tuple,
    *,
    weight: float,
    family: str,
) -> FreeScaleQuadraticBound:
    """The collapsed bound from each datum's value and slopes at ``q_map`` (``taylor``:
    ``v_n``, ``a_n``, ``b_n``) and its quadratic's coefficients (``curvatures``: ``m_n``,
    ``k_n`` and the cross term ``c_n`` or None), in one pass over the rows. Rows whose
    coefficients are not finite (a curvature that overflows at the region's far end) get
    no bound (``unbounded``); a value at the MAP that is not finite is refused."""
    per_row = getattr(lp, "scale_design", None) is not None
    z = design_rows(lp.scale_design) if per_row else np.asarray(lp.scale_row, np.float64)
    if not np.all(np.isfinite(taylor[0])):
        raise UnsupportedBound(
            f"The {lp.family} log-likelihood is not finite at the MAP for every row. Use "
            "TunaMH() or MinibatchBarker()."
        )
    n = taylor[0].shape[0]
    unbounded = np.zeros(n, dtype=bool)
    for part in (*taylor[1:], *curvatures):
        if part is not None:
            unbounded |= ~np.isfinite(np.broadcast_to(part, (n,)))
    if unbounded.all():
        raise UnsupportedBound(
            f"The {lp.family} free-scale bound overflows on the trust region for every row. "
            "Use TunaMH() or MinibatchBarker()."
        )
    return _collapsed_bound(
        design_rows(lp.design),
        z,
        q_map,
        taylor,
        curvatures,
        weight=weight,
        region=region,
        family=family,
        unbounded=unbounded,
    )


def _shared_scale_sums(design, rows: slice, slope_eta, curvature_eta, cross, w) -> tuple:
    """The rows' part of the sums of a bound whose scale direction ``z`` is shared: the
    linear predictor's gradient and Hessian, and ``sum x_n cross_n`` (its products with
    ``z`` follow once, outside the pass)."""
    x = design[rows]
    return (
        x.T @ slope_eta,
        -(w * w) * (x.T @ (x * curvature_eta[:, None])),
        x.T @ cross,
    )


def _per_row_scale_sums(
    design, rows: slice, slope_eta, curvature_eta, z, slope_scale, curvature_scale, cross, w
) -> tuple:
    """The rows' part of the sums of a bound whose rows have their own scale direction
    ``z_n``: gradient and Hessian over both designs and their cross term."""
    x = design[rows]
    zr = np.asarray(z, dtype=np.float64)
    mixed = w * (x.T @ (zr * cross[:, None]))
    hess = -(w * w) * (x.T @ (x * curvature_eta[:, None]))
    hess -= zr.T @ (zr * curvature_scale[:, None]) + mixed + mixed.T
    return x.T @ slope_eta + zr.T @ slope_scale, hess


def _collapsed_bound(
    design, z, centre, taylor, curvatures, *, weight, region, family, unbounded
) -> FreeScaleQuadraticBound:
    """Sum the rows' quadratics (those not ``unbounded``) into the collapsed statistics.
    ``z`` is the shared scale row (1-D) or the scale per row's design (2-D)."""
    n, ndim = design.shape
    per_row = not isinstance(z, np.ndarray) or z.ndim == 2
    keep = None if unbounded is None or not unbounded.any() else ~unbounded

    def kept(part):
        if part is None:
            return None
        part = np.broadcast_to(np.asarray(part, dtype=np.float64), (n,))
        return part if keep is None else np.where(keep, part, 0.0)

    value, slope_eta, slope_scale = (kept(part) for part in taylor)
    curvature_eta, curvature_scale, cross = (kept(part) for part in curvatures)
    w = weight
    no_cross = np.zeros(n) if cross is None else cross
    # One pass (Dask tasks for a design over chunked data).
    if per_row:  # each row its own scale direction z_n: sums over both designs
        grad, hess = design_sum(
            design,
            _per_row_scale_sums,
            per_row=(slope_eta, curvature_eta, z, slope_scale, curvature_scale, no_cross),
            args=(w,),
            block_rows=DEFAULT_CHUNK_ENTRIES // max(1, ndim),
        )
        cross_sum = np.zeros(ndim)
    else:
        grad, hess, cross_sum = design_sum(
            design,
            _shared_scale_sums,
            per_row=(slope_eta, curvature_eta, no_cross),
            args=(w,),
            block_rows=DEFAULT_CHUNK_ENTRIES // max(1, ndim),
        )
    record_rows(n, n)
    if not per_row:
        grad += float(np.sum(slope_scale)) * z
        hess -= float(np.sum(curvature_scale)) * np.outer(z, z)
        hess -= w * (np.outer(cross_sum, z) + np.outer(z, cross_sum))
    hess = 0.5 * (hess + hess.T)
    collapsed = CollapsedQuadratic(centre.copy(), float(np.sum(value)), grad, hess)
    return FreeScaleQuadraticBound(
        design,
        None if per_row else z,
        centre.copy(),
        value,
        slope_eta,
        slope_scale,
        curvature_eta,
        curvature_scale,
        w,
        collapsed,
        region,
        family=family,
        cross=cross,
        scale_design=z if per_row else None,
        unbounded=None if keep is None else unbounded,
    )
