"""FlyMC lower bounds for Normal and Student-t likelihoods with a free scale, on a trust region.

With ``s = log sigma = z . q + s0`` free, the per-datum log-likelihood depends on ``q``
through two affine channels, ``l_n = f_n(eta_n, s)`` with
``f_n(eta, s) = -s + g((y_n - eta) e^{-s})`` + const (``g(u) = -u^2/2`` for the Normal,
``g(u) = -(nu + 1)/2 log(1 + u^2/nu)`` for Student-t). Measure the channels in the
units ``W = diag(w, 1)``, ``w = e^{-s*}`` (``eta`` in units of the reference ``sigma``).
Taylor's theorem at the MAP's channels ``(eta_n*, s*)`` gives, for any point of a convex
set on which the scaled Hessian has operator norm at most ``lambda_n``,

    l_n >= l_n* + f_eta,n (eta_n - eta_n*) + f_s,n (s - s*)
           - lambda_n / 2 (w^2 (eta_n - eta_n*)^2 + (s - s*)^2),

a quadratic in ``q`` (both channels are affine in ``q``) that touches ``l_n`` at the MAP.
Its sum over all data collapses to ``O(D^2)`` numbers:
``H = -(w^2 sum_n lambda_n x_n x_n^T + (sum_n lambda_n) z z^T)`` and a gradient
``sum_n f_eta,n x_n + (sum_n f_s,n) z``.

The scaled Hessian, with ``u = (y - eta) e^{-s}`` and ``delta = s - s*``, is

    [[e^{-2 delta} g\'\'(u),  e^{-delta} (g\'(u) + u g\'\'(u))],
     [e^{-delta} (g\'(u) + u g\'\'(u)),  u g\'(u) + u^2 g\'\'(u)]],

and its Frobenius norm bounds the operator norm. On the trust region
``R = {q : ||L^{-1}(q - q*)|| <= rho}``, ``e^{-delta} <= E = exp(rho sqrt(z' S z))``
(``S = L L^T``) and ``|y_n - eta_n| <= |y_n - eta_n*| + rho ||L^T x_n||``. So

* Normal (``g\' = -u``, ``g\'\' = -1``): ``lambda_n = sqrt(E^4 + 8 U_n^2 E^2 + 4 U_n^4)`` with
  ``U_n`` the largest ``|u|`` on ``R``;
* Student-t: the three functions of ``u`` are bounded on the real line, with suprema
  ``C_1, C_2, C_3`` found once numerically (then enlarged by 0.1 %):
  ``lambda = sqrt(C_1^2 E^4 + 2 C_2^2 E^2 + C_3^2)``, the same for every datum.

FlyMC rejects proposals outside ``R``, so the chain is exact for the posterior
restricted to ``R``.

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
    chunk_rows,
)
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound, _row_norms
from pymc_minibatch_mh.bounds.taylor_remainder import _grid_supremum
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.passes import record_rows

if TYPE_CHECKING:  # pragma: no cover - typing only (kept out of the import path)
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood


@lru_cache(maxsize=64)
def student_t_hessian_constants(nu: float) -> tuple[float, float, float]:
    """``C_1..C_3``: suprema over ``u`` of ``|g\'\'|``, ``|g\' + u g\'\'|`` and
    ``|u g\' + u^2 g\'\'|`` for ``g(u) = -(nu + 1)/2 log(1 + u^2 / nu)``."""

    def derivatives(u):
        v = nu + u * u
        return -(nu + 1.0) * u / v, -(nu + 1.0) * (nu - u * u) / v**2

    functions = (
        lambda u: derivatives(u)[1],
        lambda u: derivatives(u)[0] + u * derivatives(u)[1],
        lambda u: u * derivatives(u)[0] + u * u * derivatives(u)[1],
    )
    upper = 1e4 * math.sqrt(nu)
    return tuple(_grid_supremum(fn, upper) for fn in functions)


@dataclass(frozen=True, eq=False)
class FreeScaleQuadraticBound:
    """Per-datum quadratic log-bound in two channels (``eta_n`` and ``s``), collapsed.

    ``log B_n(q) = v_n + a_n e_n + b_n t - lambda_n / 2 (w^2 e_n^2 + t^2)`` with
    ``e_n = x_n . (q - q*)`` and ``t = z . (q - q*)``. Build it with
    :func:`map_tuned_free_scale`. Untempered, like every bound here.

    Attributes
    ----------
    design : ndarray, shape (N, D)
    scale_row : ndarray, shape (D,)
        ``z``.
    centre : ndarray, shape (D,)
        ``q*`` (the MAP), where the bound touches the likelihood.
    value, slope_eta, slope_scale, curvature : ndarray, shape (N,)
        ``v_n``, ``a_n``, ``b_n`` and ``lambda_n >= 0``.
    weight : float
        ``w = e^{-s*}``.
    collapsed : CollapsedQuadratic
        ``sum_n log B_n(q)`` in O(D^2).
    region : TrustRegion
        Where the bound holds.
    family : str
    """

    design: np.ndarray
    scale_row: np.ndarray
    centre: np.ndarray
    value: np.ndarray
    slope_eta: np.ndarray
    slope_scale: np.ndarray
    curvature: np.ndarray
    weight: float
    collapsed: CollapsedQuadratic
    region: TrustRegion
    family: str

    @property
    def n_data(self) -> int:
        return self.design.shape[0]

    @property
    def ndim(self) -> int:
        return self.design.shape[1]

    def _deviations(self, q: np.ndarray, idx: np.ndarray | None):
        d = np.asarray(q, dtype=np.float64) - self.centre
        rows = self.design if idx is None else self.design[idx]
        return rows @ d, float(self.scale_row @ d)

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-datum ``log B_n(q)`` for rows ``idx`` (all rows if None); O(len(idx) D)."""
        e, t = self._deviations(q, idx)
        sel = slice(None) if idx is None else idx
        w2 = self.weight * self.weight
        return (
            self.value[sel]
            + self.slope_eta[sel] * e
            + self.slope_scale[sel] * t
            - 0.5 * self.curvature[sel] * (w2 * e * e + t * t)
        )

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log B_{idx[j]}(q)``, shape ``(D,)``."""
        e, t = self._deviations(q, idx)
        lam = self.curvature[idx]
        d_eta = self.slope_eta[idx] - lam * self.weight**2 * e
        d_scale = self.slope_scale[idx] - lam * t
        return self.design[idx].T @ (weights * d_eta) + float(weights @ d_scale) * self.scale_row

    def log_bound_sum(self, q: np.ndarray) -> float:
        """``sum_n log B_n(q)`` over all N data in O(D^2)."""
        return self.collapsed(q)

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`log_bound_sum`, shape ``(D,)``."""
        return self.collapsed.gradient(q)


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
    design = np.asarray(lp.design, dtype=np.float64)
    n, ndim = design.shape
    z = np.asarray(lp.scale_row, dtype=np.float64)
    chol, rho = region.chol, region.radius
    lz = chol.T @ z
    s_half = rho * math.sqrt(float(lz @ lz))
    s_star = lp.log_scale(q_map)
    s_centre = lp.log_scale(region.centre)
    w = math.exp(-s_star)
    # Largest e^{-(s - s*)} on the region.
    big_e = math.exp(s_half + s_star - s_centre)
    eta_map = lp.linear_predictor(q_map)
    eta_centre = lp.linear_predictor(region.centre)
    y = np.asarray(lp.observed, dtype=np.float64)
    u = (y - eta_map) * w
    value = lp.loglik(q_map)
    record_rows(n, n)
    if lp.family == "normal":
        g1 = -u
    else:
        nu = np.unique(np.asarray(lp.params["nu"], dtype=np.float64))
        if nu.size != 1:
            raise UnsupportedBound("Student-t with a free scale needs one nu for all data.")
        nu = float(nu[0])
        g1 = -(nu + 1.0) * u / (nu + u * u)
    slope_eta = -w * g1  # d/d eta of g((y - eta) e^{-s}) at s*
    slope_scale = -1.0 - u * g1
    if lp.family == "normal":
        residual = np.abs(y - eta_centre) + rho * _row_norms(design, chol)
        u_max = residual * math.exp(-(s_centre - s_half))
        curvature = np.sqrt(big_e**4 + 8.0 * u_max**2 * big_e**2 + 4.0 * u_max**4)
    else:
        c1, c2, c3 = student_t_hessian_constants(nu)
        curvature = np.full(n, math.sqrt(c1**2 * big_e**4 + 2 * c2**2 * big_e**2 + c3**2))
    if not (np.all(np.isfinite(curvature)) and np.all(np.isfinite(value))):
        raise UnsupportedBound(
            f"The {lp.family} free-scale bound overflows on the trust region. Use TunaMH()."
        )
    grad = np.zeros(ndim)
    hess = np.zeros((ndim, ndim))
    for rows in chunk_rows(n, ndim, DEFAULT_CHUNK_ENTRIES):
        x = design[rows]
        grad += x.T @ slope_eta[rows]
        hess -= (w * w) * (x.T @ (x * curvature[rows][:, None]))
    record_rows(n, n)
    grad += float(np.sum(slope_scale)) * z
    hess -= float(np.sum(curvature)) * np.outer(z, z)
    hess = 0.5 * (hess + hess.T)
    collapsed = CollapsedQuadratic(q_map.copy(), float(np.sum(value)), grad, hess)
    return FreeScaleQuadraticBound(
        design,
        z,
        q_map.copy(),
        value,
        slope_eta,
        slope_scale,
        curvature,
        w,
        collapsed,
        region,
        family=f"{lp.family}_free_scale",
    )
