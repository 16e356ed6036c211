"""FlyMC lower bounds in three channels — the linear predictor and two shared parameters —
from each row's Taylor expansion at the MAP, on a trust region.

The zero-inflated and hurdle negative binomial read ``u_n = (eta_n, a, t)``: the linear
predictor, ``a = log alpha`` and ``t = logit psi``, the last two shared by every row and
each affine in ``q`` (``a = z_a . q + a0``) or fixed (its row ``z`` is then 0). Taylor's
theorem to third order at the MAP's channels, with ``delta = u - u_n*``, gives::

    f_n(u) = f_n(u*) + grad f_n . delta + delta^T H_n delta / 2 + D^3 f_n(xi)[delta]^3 / 6.

With ``T_ijk`` bounds on the absolute third derivatives over the region
(:mod:`~pymc_minibatch_mh.bounds.zinb_curvature`, the bounds TunaMH's constants use)
and ``|delta_k| <= R_k`` there, every term of the cubic satisfies
``|delta_i delta_j delta_k| <= R_k (delta_i^2 + delta_j^2) / 2``, so::

    |D^3 f_n [delta]^3| <= sum_i delta_i^2 S_i,   S_i = sum_{j, k} T_ijk R_k,

and ``log B_n(q) = f_n(u*) + grad f_n . delta + delta^T (H_n - diag(S_n / 3)) delta / 2`` is a
lower bound on the region that touches ``f_n`` at the MAP [1]_. It is a quadratic in ``q``
(``delta`` is affine in ``q``), and its sum over the rows collapses to ``O(D^2)``
statistics: with ``e_n = x_n . d``, ``tau = Z d`` (``Z`` the two shared rows, ``d = q - q*``)
and ``M_n = diag(S_n / 3) - H_n`` split into ``m_n`` (eta, eta), ``c_n`` (eta, shared) and
``K_n`` (shared, shared)::

    sum_n log B_n = sum_n v_n + (sum_n f_e,n x_n + Z^T sum_n b_n) . d
                    - (d^T (sum_n m_n x_n x_n^T) d + 2 d^T (sum_n x_n c_n^T) tau
                       + tau^T (sum_n K_n) tau) / 2.

A row whose coefficients are not finite on the region gets no bound (FlyMC reads it at
every iteration). FlyMC rejects proposals outside the region, so the chain is exact for
the posterior restricted to it.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1 (collapsible bounds).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    CollapsedQuadratic,
    OverDesignRows,
    as_design,
)
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound, _row_norms
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.bounds.zinb_curvature import ENTRIES, channel_derivatives
from pymc_minibatch_mh.data.chunk_pass import design_sum
from pymc_minibatch_mh.data.pass_tally import record_rows

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood

#: Relative and absolute slack added to the curvature bounds, far above the rounding of
#: the closed forms they are built from.
_RELATIVE_SLACK, _ABSOLUTE_SLACK = 1e-9, 1e-12
_CHANNELS = "eat"


@dataclass(frozen=True, eq=False)
class SharedChannelsQuadraticBound(OverDesignRows):
    """Per-datum quadratic log-bound in the channels ``e_n = x_n . d`` and ``tau = Z d``
    (two shared directions), collapsed; ``d = q - centre``.

    ``log B_n(q) = v_n + a_n e_n + b_n . tau - (m_n e_n^2 + 2 e_n c_n . tau +
    tau^T K_n tau) / 2``. Build it with :func:`map_tuned_three_channel`. Untempered.

    Attributes
    ----------
    design : ndarray or RowDesign, shape (N, D)
    shared_rows : ndarray, shape (2, D)
        ``Z`` (a zero row for a fixed parameter).
    centre : ndarray, shape (D,)
    value, slope_eta, curvature_eta : ndarray, shape (N,)
        ``v_n``, ``a_n``, ``m_n``.
    slope_shared, cross : ndarray, shape (N, 2)
        ``b_n``, ``c_n``.
    curvature_shared : ndarray, shape (N, 2, 2)
        ``K_n``.
    collapsed : CollapsedQuadratic
    region : TrustRegion
    family : str
    unbounded : ndarray of bool, shape (N,), optional
        Rows without a bound (``log B_n = -inf``), left out of the collapsed sum.
    """

    design: np.ndarray
    shared_rows: np.ndarray
    centre: np.ndarray
    value: np.ndarray
    slope_eta: np.ndarray
    slope_shared: np.ndarray
    curvature_eta: np.ndarray
    cross: np.ndarray
    curvature_shared: np.ndarray
    collapsed: CollapsedQuadratic
    region: TrustRegion
    family: str
    unbounded: np.ndarray | None = None

    def _deviations(self, q: np.ndarray, idx: np.ndarray | None):
        d = np.asarray(q, dtype=np.float64) - self.centre
        rows = self.design if idx is None else self.gathered_rows(idx)
        return rows @ d, self.shared_rows @ d

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-datum ``log B_n(q)`` for rows ``idx`` (all rows if None); O(len(idx) D)."""
        e, tau = self._deviations(q, idx)
        sel = slice(None) if idx is None else idx
        quadratic = (
            self.curvature_eta[sel] * e * e
            + 2.0 * e * (self.cross[sel] @ tau)
            + np.einsum("nij,i,j->n", self.curvature_shared[sel], tau, tau)
        )
        out = self.value[sel] + self.slope_eta[sel] * e + self.slope_shared[sel] @ tau
        out = out - 0.5 * quadratic
        if self.unbounded is not None:
            out = np.where(self.unbounded[sel], -np.inf, out)
        return out

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log B_{idx[j]}(q)``, shape ``(D,)``."""
        e, tau = self._deviations(q, idx)
        d_eta = self.slope_eta[idx] - self.curvature_eta[idx] * e - self.cross[idx] @ tau
        d_shared = (
            self.slope_shared[idx]
            - self.cross[idx] * e[:, None]
            - np.einsum("nij,j->ni", self.curvature_shared[idx], tau)
        )
        grad = self.gathered_rows(idx).T @ (weights * d_eta)
        return grad + self.shared_rows.T @ (weights @ d_shared)

    def log_bound_sum(self, q: np.ndarray) -> float:
        """``sum_n log B_n(q)`` over all N data in O(D^2)."""
        return self.collapsed(q)

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`log_bound_sum`, shape ``(D,)``."""
        return self.collapsed.gradient(q)

    def without_bounds_on(self, rows: np.ndarray) -> SharedChannelsQuadraticBound:
        """The same bound with no bound on ``rows`` as well (collapsed again, one pass)."""
        return _collapsed(
            self.design,
            self.shared_rows,
            self.centre,
            (self.value, self.slope_eta, self.slope_shared),
            (self.curvature_eta, self.cross, self.curvature_shared),
            region=self.region,
            family=self.family,
            unbounded=self._unbounded_with(rows),
        )

    def row_spreads(self, region) -> np.ndarray:
        """Each row's ``sum_ij |M_ij| R_i R_j`` on ``region``: its term's size in the
        collapsed sum where the bound is loosest (FlyMC's precision check)."""
        reach_e = region.row_radii() * _row_norms(self.design, region.chol)
        rho = float(np.max(region.row_radii()))
        reach_s = rho * np.linalg.norm(self.shared_rows @ region.chol, axis=1)
        spread = np.abs(self.curvature_eta) * reach_e**2
        spread = spread + 2.0 * reach_e * (np.abs(self.cross) @ reach_s)
        return spread + np.einsum("nij,i,j->n", np.abs(self.curvature_shared), reach_s, reach_s)


def map_tuned_three_channel(
    lp: LinearPredictorLikelihood, q_map: np.ndarray, region: TrustRegion
) -> SharedChannelsQuadraticBound:
    """The bound of the module docstring for a zero-inflated or hurdle negative binomial,
    touching the likelihood at ``q_map``, valid on ``region``.

    Raises
    ------
    UnsupportedBound
        When the likelihood is not finite at the MAP for every row, or every row's bound
        overflows on the region.
    """
    from pymc_minibatch_mh.bounds.taylor_remainder import (
        shared_channel_rows,
        three_channel_entries,
    )

    q_map = np.asarray(q_map, dtype=np.float64)
    design = as_design(lp.design)
    n = design.shape[0]
    shared = shared_channel_rows(lp)
    entries, (eta_lo, eta_hi), ranges = three_channel_entries(lp, region)
    eta_map = lp.linear_predictor(q_map)
    value = lp.loglik(q_map)
    record_rows(2 * n, n)
    a_map, t_map = _shared_at(lp, q_map)
    derivatives = channel_derivatives(lp.family, lp.observed, eta_map, a_map, t_map)
    reaches = [np.maximum(np.abs(eta_hi - eta_map), np.abs(eta_map - eta_lo))]
    shared_values = zip((lp.free_scale, lp.free_odds), (a_map, t_map), ranges, strict=True)
    for free, value_map, (lo, hi) in shared_values:
        reaches.append(max(hi - value_map, value_map - lo) if free else 0.0)
    slack = _slack_terms(entries, reaches, (lp.free_scale, lp.free_odds))
    f_e, f_a, f_t, h_ee, h_ea, h_et, h_aa, h_at, h_tt = derivatives
    curvature_eta = slack[0] - h_ee
    cross = -np.stack([h_ea, h_et], axis=1)
    curvature_shared = np.empty((n, 2, 2))
    curvature_shared[:, 0, 0] = slack[1] - h_aa
    curvature_shared[:, 1, 1] = slack[2] - h_tt
    curvature_shared[:, 0, 1] = curvature_shared[:, 1, 0] = -h_at
    slope_shared = np.stack([f_a, f_t], axis=1)
    if not np.all(np.isfinite(value)):
        raise UnsupportedBound(
            f"The {lp.family} log-likelihood is not finite at the MAP for every row. Use "
            "TunaMH() or MinibatchBarker()."
        )
    unbounded = ~(
        np.isfinite(curvature_eta)
        & np.isfinite(f_e)
        & np.all(np.isfinite(cross), axis=1)
        & np.all(np.isfinite(slope_shared), axis=1)
        & np.all(np.isfinite(curvature_shared), axis=(1, 2))
    )
    if unbounded.all():
        raise UnsupportedBound(
            f"FlyMC's bound for this {lp.family} likelihood overflows on the trust region for "
            "every row. Use TunaMH() or MinibatchBarker()."
        )
    return _collapsed(
        design,
        shared,
        q_map,
        (value, f_e, slope_shared),
        (curvature_eta, cross, curvature_shared),
        region=region,
        family=f"{lp.family}_three_channel",
        unbounded=unbounded,
    )


def _shared_at(lp, q: np.ndarray) -> tuple[float, float]:
    """``(log alpha, logit psi)`` at ``q`` (a fixed parameter's one value)."""
    if lp.free_scale:
        a = lp.log_scale(q)
    else:
        a = np.log(np.asarray(lp.params["alpha"], dtype=np.float64))
    t = lp.log_odds(q) if lp.free_odds else np.log(np.asarray(lp.params["odds"], np.float64))
    return a, t


def _slack_terms(entries, reaches, free) -> list:
    """``S_i / 3`` per channel (module docstring) with a small relative margin; entries
    with a fixed channel's index contribute nothing (that channel does not move)."""
    tensor = dict(zip(ENTRIES, entries, strict=True))
    moving = {"e": True, "a": free[0], "t": free[1]}
    reach = dict(zip(_CHANNELS, reaches, strict=True))
    out = []
    for i in _CHANNELS:
        total = 0.0
        if moving[i]:
            for j, k in itertools.product(_CHANNELS, repeat=2):
                if moving[j] and moving[k]:
                    key = "".join(sorted(i + j + k, key=_CHANNELS.index))
                    total = total + tensor[key] * reach[k]
        with np.errstate(over="ignore", invalid="ignore"):
            out.append((total / 3.0) * (1.0 + _RELATIVE_SLACK) + _ABSOLUTE_SLACK)
    return out


def _channel_sums(design, rows: slice, slope_eta, curvature_eta, cross) -> tuple:
    """The rows' part of the linear predictor's gradient and Hessian and of ``sum x_n
    cross_n`` (two columns: the shared channels)."""
    x = np.asarray(design[rows], dtype=np.float64)
    return x.T @ slope_eta, -(x.T @ (x * curvature_eta[:, None])), x.T @ cross


def _collapsed(
    design, shared, centre, taylor, curvatures, *, region, family, unbounded
) -> SharedChannelsQuadraticBound:
    """Sum the rows' quadratics (those not ``unbounded``) into the collapsed statistics."""
    n, ndim = design.shape
    keep = ~unbounded if unbounded is not None and unbounded.any() else None

    def kept(part):
        part = np.asarray(part, dtype=np.float64)
        if keep is None:
            return part
        mask = keep.reshape((n,) + (1,) * (part.ndim - 1))
        return np.where(mask, part, 0.0)

    value, slope_eta, slope_shared = (kept(part) for part in taylor)
    curvature_eta, cross, curvature_shared = (kept(part) for part in curvatures)
    # One pass (Dask tasks for a design over chunked data).
    grad, hess, cross_sum = design_sum(
        design,
        _channel_sums,
        per_row=(slope_eta, curvature_eta, cross),
        block_rows=DEFAULT_CHUNK_ENTRIES // max(1, ndim),
    )
    record_rows(n, n)
    grad += shared.T @ slope_shared.sum(axis=0)
    mixed = cross_sum @ shared
    hess -= mixed + mixed.T
    hess -= shared.T @ curvature_shared.sum(axis=0) @ shared
    hess = 0.5 * (hess + hess.T)
    collapsed = CollapsedQuadratic(centre.copy(), math.fsum(value), grad, hess)
    return SharedChannelsQuadraticBound(
        design,
        shared,
        centre.copy(),
        value,
        slope_eta,
        slope_shared,
        curvature_eta,
        cross,
        curvature_shared,
        collapsed,
        region,
        family,
        unbounded=None if keep is None else unbounded,
    )
