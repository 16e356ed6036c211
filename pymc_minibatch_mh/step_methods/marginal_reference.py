"""A reference point that exists for hierarchies: the scales' Laplace-marginal mode.

With the group effects ``a`` of a centred hierarchy and their scale ``tau`` all sampled,
the joint density grows without bound as ``tau -> 0`` with every ``a_g`` at its prior
mean: a joint mode search runs off to a zero scale, far from where the posterior lives.
The function here splits ``q`` into the scale coordinates ``s`` (found by
:func:`~pymc_minibatch_mh.likelihood.hierarchy.group_scale_coordinates`) and the rest
``r``, and maximises the Laplace approximation of the scales' marginal log posterior

    ``F(s) = log p(r*(s), s | y) - log det(-H_rr(r*(s), s)) / 2``,

where ``r*(s)`` is the conditional mode of the rest (damped Newton steps whose passes are
the Taylor passes, :func:`~pymc_minibatch_mh.step_methods.reference.newton_map`) and
``H_rr`` the log posterior's Hessian in ``r`` there. ``F`` is bounded where the joint
density is not: the ``log det`` term charges ``1/2 log(1/tau^2)`` per effect, which
cancels the prior's ``-log tau``. The reference is ``(r*(s*), s*)``; its Laplace
precision joins ``-H_rr`` with the curvature of ``F`` at ``s*`` (see
:func:`~pymc_minibatch_mh.step_methods.reference.laplace_covariance`), because the
joint log density is not concave in ``s`` there.

``F`` is maximised by Nelder–Mead over ``s`` (a scale or a handful of Cholesky
coordinates) in rounds. The first round finds ``r*`` at the starting scales on the data
(damped Newton, a few full-data passes); each round then maximises ``F`` with the
likelihood replaced by its Taylor proxy at the last point (prior evaluations only, no
data read) and makes one full-data pass at the new point, until the scales move less than
:data:`SCALE_TOLERANCE`. On the 2,000-group Bernoulli model of the issue (N = 5·10^4)
that took 9 passes, where a search on the data at every evaluation of ``F`` took 45.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy.optimize import minimize

from pymc_minibatch_mh.kernels.control_variates import TaylorProxy
from pymc_minibatch_mh.step_methods.definite_solve import definite_factor
from pymc_minibatch_mh.step_methods.reference import NoLaplaceFit, newton_map, posterior_sums

#: Largest number of rounds (each one full-data pass) of maximising ``F`` on the Taylor
#: surrogate of the likelihood at the last point.
MAX_ROUNDS = 8
#: Largest number of evaluations of ``F`` per scale coordinate.
EVALUATIONS_PER_SCALE = 25
#: Nelder–Mead's first simplex: this step (in the unconstrained scale, e.g. log tau)
#: from the start along each scale coordinate.
SIMPLEX_STEP = 0.5
#: Convergence in the scale coordinates and in ``F`` (log-density units).
SCALE_TOLERANCE = 0.02
VALUE_TOLERANCE = 0.01
#: Finite-difference step of ``F``'s curvature along each scale coordinate.
CURVATURE_STEP = 0.1
#: Newton decrement at which each conditional search stops.
CONDITIONAL_TOLERANCE = 1e-3


@dataclass(frozen=True)
class MarginalMode:
    """Outcome of :func:`marginal_scale_mode`.

    Attributes
    ----------
    proxy : TaylorProxy
        Full-data Taylor sums at the reference ``(r*(s*), s*)``.
    scale_index : ndarray of int
        Positions of the scale coordinates in ``q``.
    scale_precision : ndarray, shape (k, k)
        ``-F''(s*)`` (diagonal, from finite differences; floored to stay positive).
    evaluations : int
        Evaluations of ``F``.
    """

    proxy: TaylorProxy
    scale_index: np.ndarray
    scale_precision: np.ndarray
    evaluations: int


def marginal_scale_mode(
    taylor_at: Callable[[np.ndarray], TaylorProxy],
    prior_at: Callable[[np.ndarray], tuple],
    start: np.ndarray,
    scale_index: np.ndarray,
    *,
    temperature: float = 1.0,
) -> MarginalMode:
    """Mode of the scales' Laplace-marginal log posterior, and the rest at its
    conditional mode there.

    Parameters
    ----------
    taylor_at : callable
        ``taylor_at(q) -> TaylorProxy``: one full-data pass at ``q``.
    prior_at : callable
        ``prior_at(q) -> (value, gradient, hessian)`` of the log prior (with Jacobians).
    start : ndarray
        Starting point (unconstrained); its scale coordinates start the search.
    scale_index : ndarray of int
        Positions of the scale coordinates in ``q``.
    temperature : float
        ``K``; the likelihood is raised to ``1/K``.

    Raises
    ------
    NoLaplaceFit
        If ``F`` is not finite anywhere the search went (no conditional mode of the rest
        with a definite Hessian).
    """
    start = np.asarray(start, dtype=np.float64)
    scale_index = np.asarray(scale_index, dtype=np.int64)
    rest = np.setdiff1d(np.arange(start.size), scale_index)
    # The rest at its conditional mode given the starting scales, on the data (damped
    # Newton from wherever the start is).
    search = _ConditionalSearch(taylor_at, prior_at, start, scale_index, rest, temperature)
    if not math.isfinite(search.marginal(start[scale_index])):
        raise _no_marginal()
    position = search.position_at(start[scale_index])
    proxy = search.proxy_at(start[scale_index])
    evaluations = 0
    for _ in range(MAX_ROUNDS):
        # F on the Taylor surrogate of the likelihood at ``position``: no data read.
        surrogate = _ConditionalSearch(
            partial(_quadratic, proxy), prior_at, position, scale_index, rest, temperature
        )
        best, curvature = _maximise(surrogate, position[scale_index])
        evaluations += surrogate.evaluations
        moved = float(np.max(np.abs(best - position[scale_index])))
        position = surrogate.position_at(best)
        proxy = taylor_at(position)  # the data at the new point
        if moved < SCALE_TOLERANCE:
            break
    return MarginalMode(proxy, scale_index, np.diag(curvature), evaluations)


def _maximise(search: _ConditionalSearch, s0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nelder–Mead's maximum of ``F`` from ``s0``, and ``-F''`` there along each scale."""
    k = s0.size
    simplex = np.vstack([s0, s0 + SIMPLEX_STEP * np.eye(k)])
    result = minimize(
        lambda s: -search.marginal(s),
        s0,
        method="Nelder-Mead",
        options={
            "initial_simplex": simplex,
            "xatol": SCALE_TOLERANCE / 2.0,
            "fatol": VALUE_TOLERANCE,
            "maxfev": EVALUATIONS_PER_SCALE * k,
        },
    )
    best = np.asarray(result.x, dtype=np.float64)
    centre = search.marginal(best)
    if not math.isfinite(centre):
        raise _no_marginal()
    curvature = np.empty(k)
    for j in range(k):
        step = np.zeros(k)
        step[j] = CURVATURE_STEP
        up, down = search.marginal(best + step), search.marginal(best - step)
        curvature[j] = -(up - 2.0 * centre + down) / CURVATURE_STEP**2
    # A flat or convex direction (a finite difference across a kink of F, or a scale the
    # data do not inform) keeps a unit precision: the proposal is only a start, tuned
    # during tuning.
    curvature = np.where(np.isfinite(curvature) & (curvature > 1e-3), curvature, 1.0)
    return best, curvature


def _no_marginal() -> NoLaplaceFit:
    return NoLaplaceFit(
        "The hierarchy's scales have no finite Laplace-marginal posterior where the "
        "search went (no conditional mode of the group effects with a definite "
        "Hessian). Pass reference_point= a point in the bulk of the posterior (e.g. "
        "the mean of a short NUTS run)."
    )


def _quadratic(proxy: TaylorProxy, q: np.ndarray) -> TaylorProxy:
    """The Taylor proxy's value, gradient and Hessian at ``q`` (no data read)."""
    offset = q - proxy.reference
    return TaylorProxy(
        reference=q,
        value=proxy.total(q),
        gradient=proxy.gradient + proxy.hessian @ offset,
        hessian=proxy.hessian,
    )


@dataclass(frozen=True)
class _RestProxy(TaylorProxy):
    """Taylor sums restricted to the rest ``r``, carrying the full ones in ``q``."""

    full: TaylorProxy | None = None


class _ConditionalSearch:
    """``F(s)`` by conditional Newton searches, each warm-started where the last ended.

    Only the value of ``F`` and the conditional mode are kept per evaluation (a full
    proxy holds a ``D x D`` Hessian); :meth:`proxy_at` solves again from that mode (one
    pass) when asked for an earlier point's sums.
    """

    def __init__(self, taylor_at, prior_at, start, scale_index, rest, temperature):
        self._taylor_at = taylor_at
        self._prior_at = prior_at
        self._scale_index = scale_index
        self._rest = rest
        self._temperature = temperature
        self._warm = start[rest].copy()
        self._base = start.copy()
        self._values: dict[bytes, tuple[float, np.ndarray]] = {}
        self._last: tuple[bytes, TaylorProxy] | None = None
        self.evaluations = 0

    def marginal(self, s: np.ndarray) -> float:
        """``F(s)``; ``-inf`` where the conditional search finds no definite mode."""
        key = np.asarray(s, dtype=np.float64).tobytes()
        if key not in self._values:
            self._solve(np.asarray(s, dtype=np.float64), self._warm)
        return self._values[key][0]

    def position_at(self, s: np.ndarray) -> np.ndarray:
        """``q = (r*(s), s)`` (after :meth:`marginal` at ``s``)."""
        s = np.asarray(s, dtype=np.float64)
        if s.tobytes() not in self._values:
            self.marginal(s)
        q = self._base.copy()
        q[self._rest] = self._values[s.tobytes()][1]
        q[self._scale_index] = s
        return q

    def proxy_at(self, s: np.ndarray) -> TaylorProxy:
        """Full-data Taylor sums at ``(r*(s), s)``; the next search starts there."""
        s = np.asarray(s, dtype=np.float64)
        key = s.tobytes()
        if self._last is None or self._last[0] != key:
            self._solve(s, self._values[key][1] if key in self._values else self._warm)
        self._warm = self._values[key][1].copy()
        return self._last[1]

    def _solve(self, s: np.ndarray, warm: np.ndarray) -> None:
        self.evaluations += 1
        rest, scale_index, key = self._rest, self._scale_index, s.tobytes()

        def full(r):
            q = self._base.copy()
            q[rest] = r
            q[scale_index] = s
            return q

        def taylor(r):
            proxy = self._taylor_at(full(r))
            return _RestProxy(
                reference=r,
                value=proxy.value,
                gradient=proxy.gradient[rest],
                hessian=proxy.hessian[np.ix_(rest, rest)],
                full=proxy,
            )

        def prior(r):
            value, gradient, hessian = self._prior_at(full(r))
            return value, np.asarray(gradient)[rest], np.asarray(hessian)[np.ix_(rest, rest)]

        try:
            found = newton_map(
                taylor, prior, warm, temperature=self._temperature, tolerance=CONDITIONAL_TOLERANCE
            )
        except ValueError:  # not finite at the warm start
            self._values[key] = (-math.inf, warm)
            return
        self._last = (key, found.proxy.full)
        value, _, hessian = posterior_sums(found.proxy, prior(found.position), self._temperature)
        factor = definite_factor(-0.5 * (hessian + hessian.T))
        if factor is None:
            self._values[key] = (-math.inf, found.position)
            return
        marginal = value - 0.5 * factor.log_det
        if not math.isfinite(marginal):
            self._values[key] = (-math.inf, found.position)
            return
        self._values[key] = (marginal, found.position)
        self._warm = found.position.copy()
