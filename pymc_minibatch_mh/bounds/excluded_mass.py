"""How much posterior mass a trust region leaves out, estimated by importance sampling.

A step whose bound holds on a trust region ``R`` samples the posterior restricted to ``R``.
The mass it leaves out, ``P(q not in R | y)``, is what its draws miss. This module estimates
it with two importance samplers that share one heavy-tailed proposal ``g``: a multivariate
Student-t centred at the region's centre with shape ``(s L)(s L)^T`` (``L`` the region's
Cholesky factor, ``s`` a widening factor), whose tails are heavier than those of the
posteriors the regions are built for.

* ``Z = E_g[p / g]`` from ``n`` draws of ``g`` (``p`` the unnormalised posterior);
* ``I = E_g[(p / g) 1(q not in R)]`` from ``n`` draws of ``g`` *conditioned* on the
  whitened radius ``||L^{-1}(q - c)||`` exceeding ``r0``, the radius of a ball inside
  ``R``: under ``g`` the squared radius over ``s^2 D`` follows an ``F(D, nu)``
  distribution, so the condition is met exactly by drawing the radius from that
  distribution's tail and the direction uniformly, and ``I = P_g(radius > r0)`` times the
  conditional mean. This resolves excluded masses far below ``1 / n``.

The estimate is ``I / Z``, with a standard error by the delta method. Each draw costs one
evaluation of the full-data log posterior.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import linalg, special

from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound

#: Draws per importance sampler (two samplers: ``2 n`` full-data evaluations).
DEFAULT_DRAWS = 200
#: Degrees of freedom and widening of the proposal.
PROPOSAL_DF, PROPOSAL_SCALE = 4.0, 1.5


@dataclass(frozen=True)
class ExcludedMass:
    """Estimated posterior mass outside a region.

    Attributes
    ----------
    estimate : float
        ``P(q not in R | y)`` estimated.
    upper : float
        ``estimate`` plus three standard errors (at most 1).
    n_evals : int
        Full-data evaluations of the log posterior it took.
    """

    estimate: float
    upper: float
    n_evals: int


def _t_log_density(z: np.ndarray, df: float, log_det: float) -> np.ndarray:
    """Log density of a multivariate t at ``q = c + A z`` with ``log |det A| = log_det``."""
    d = z.shape[-1]
    return (
        special.gammaln(0.5 * (df + d))
        - special.gammaln(0.5 * df)
        - 0.5 * d * math.log(df * math.pi)
        - log_det
        - 0.5 * (df + d) * np.log1p(np.sum(z * z, axis=-1) / df)
    )


def _directions(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    g = rng.standard_normal((n, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def excluded_mass(
    log_posterior: Callable[[np.ndarray], float],
    region,
    rng: np.random.Generator,
    *,
    n_draws: int = DEFAULT_DRAWS,
    df: float = PROPOSAL_DF,
    scale: float = PROPOSAL_SCALE,
    shape: np.ndarray | None = None,
) -> ExcludedMass:
    """Posterior mass outside ``region``, estimated by importance sampling.

    Parameters
    ----------
    log_posterior : callable
        ``q -> log p(q | y)`` up to a constant (full data, untempered). Non-finite values
        count as zero density.
    region : TrustRegion or CellRegion
        With ``centre``, ``chol``, ``radius`` (a ball of that whitened radius lies inside
        the region) and ``contains(q)``.
    rng : numpy.random.Generator
    n_draws : int
        Draws of each of the two samplers.
    df, scale : float
        Degrees of freedom and widening of the Student-t proposal.
    shape : ndarray, optional
        Lower-triangular ``A`` with ``A A^T`` the posterior's covariance as far as known
        (e.g. from tuning draws); the proposal's shape matrix is ``(scale A)(scale A)^T``.
        Default: the region's ``L`` (the Laplace fit), which can be far too narrow in
        the directions where the region cuts off mass: a proposal shaped like the
        posterior needs far fewer draws.

    Returns
    -------
    ExcludedMass
    """
    centre = np.asarray(region.centre, dtype=np.float64)
    region_chol = np.asarray(region.chol, dtype=np.float64)
    chol = region_chol if shape is None else np.asarray(shape, dtype=np.float64)
    d = centre.size
    log_det = d * math.log(scale) + float(np.sum(np.log(np.abs(np.diag(chol)))))
    from scipy import stats  # imported when needed: 0.6 s of every step module's import

    f_dist = stats.f(d, df)
    # Unconditioned draws: z = g / sqrt(chi2_df / df).
    z_all = rng.standard_normal((n_draws, d)) / np.sqrt(rng.chisquare(df, n_draws) / df)[:, None]
    # Draws beyond a ball inside the region: in the proposal's whitening the region's inner
    # ball (radius r in L-units) holds the ball of radius r / ||L^{-1} A||;
    # ||z||^2 / d ~ F(d, df), conditioned on the tail.
    stretch = float(np.linalg.norm(linalg.solve_triangular(region_chol, chol, lower=True), 2))
    tail_start = (region.radius / (scale * stretch)) ** 2 / d
    log_tail = float(f_dist.logsf(tail_start))
    u = rng.uniform(0.0, 1.0, n_draws)
    f_values = f_dist.isf(np.exp(log_tail + np.log(np.maximum(u, 1e-300))))
    z_out = _directions(rng, n_draws, d) * np.sqrt(d * f_values)[:, None]

    def log_weights(z: np.ndarray, outside_only: bool) -> np.ndarray:
        out = np.full(z.shape[0], -np.inf)
        for k, zk in enumerate(z):
            q = centre + scale * (chol @ zk)
            if outside_only and region.contains(q):
                continue
            value = float(log_posterior(q))
            if math.isfinite(value):
                out[k] = value
        return out - _t_log_density(z, df, log_det)

    lw_all = log_weights(z_all, outside_only=False)
    lw_out = log_weights(z_out, outside_only=True) + log_tail
    shift = float(np.max(lw_all))
    if not math.isfinite(shift):  # the posterior was not finite at any draw
        return ExcludedMass(float("nan"), 1.0, 2 * n_draws)
    shift = max(shift, float(np.max(lw_out)))  # no overflow when the tail dominates
    w_all = np.exp(lw_all - shift)
    w_out = np.exp(lw_out - shift)
    z_hat, i_hat = float(w_all.mean()), float(w_out.mean())
    estimate = i_hat / z_hat
    var = (w_out.var() / z_hat**2 + i_hat**2 * w_all.var() / z_hat**4) / n_draws
    # Self-normalised estimate from the unconditioned draws: it does not depend on the
    # tail draws hitting the directions in which the posterior's mass lies, and catches
    # masses of a few percent that the tail sampler can miss.
    outside = np.array([not region.contains(centre + scale * (chol @ zk)) for zk in z_all])
    weights = w_all / w_all.sum()
    plain = float(np.sum(weights[outside]))
    plain_var = float(np.sum(weights**2 * (outside - plain) ** 2))
    if plain > estimate:
        estimate, var = plain, plain_var
    upper = min(1.0, estimate + 3.0 * math.sqrt(max(var, 0.0)))
    return ExcludedMass(min(estimate, 1.0), upper, 2 * n_draws)


#: Largest widening of the proposal along one of the region's axes, and the smallest
#: that is applied (narrower profiles leave the shape as it is).
MAX_WIDENING, MIN_WIDENING = 100.0, 1.5


def profile_widened_shape(
    log_posterior: Callable[[np.ndarray], float], region, shape: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """A proposal shape widened along the region's axes where the posterior is flat there.

    A proposal shaped by tuning draws (or the Laplace fit) can be far narrower than the
    posterior in a direction that the chain did not explore while tuning, e.g. a
    coefficient whose likelihood is flat on one side (a category with only zero outcomes
    under a diffuse prior); importance sampling with it then misses the mass beyond the
    region entirely (measured: an ordinal regression's region cut its posterior at 1.9 sds
    of that coefficient while the estimate was 2e-13). The posterior is evaluated on the
    region's boundary at both ends of each axis, ``c +- rho L e_k``; a Gaussian whose sd
    along that axis is ``s`` times the region's falls by ``rho^2 / (2 s^2)`` there, so a
    fall of ``Delta`` nats (the smaller of the two ends) gives ``s = rho / sqrt(2 Delta)``.
    Where ``s`` exceeds :data:`MIN_WIDENING` the shape's covariance gains
    ``(s^2 - 1) (L e_k)(L e_k)^T`` (``s`` at most :data:`MAX_WIDENING`).

    Parameters
    ----------
    log_posterior : callable
        ``q -> log p(q | y)`` up to a constant (full data); non-finite values count as a
        fall without end.
    region : TrustRegion or CellRegion
        ``centre``, ``chol`` (``L``) and ``radius`` (``rho``: a ball of that whitened
        radius lies inside the region).
    shape : ndarray, optional
        The shape to widen (lower Cholesky factor); default the region's ``L``.

    Returns
    -------
    ndarray, int
        The widened shape (lower Cholesky factor; ``shape`` itself when no axis is flat)
        and the number of full-data evaluations it took (``2 D + 1``).
    """
    centre = np.asarray(region.centre, dtype=np.float64)
    chol = np.asarray(region.chol, dtype=np.float64)
    base = chol if shape is None else np.asarray(shape, dtype=np.float64)
    rho = float(region.radius)
    at_centre = float(log_posterior(centre))
    if not math.isfinite(at_centre):
        return base, 1
    extra = np.zeros((centre.size, centre.size))
    for k in range(centre.size):
        axis = rho * chol[:, k]
        ends = [float(log_posterior(centre + sign * axis)) for sign in (1.0, -1.0)]
        fall = min(at_centre - v if math.isfinite(v) else math.inf for v in ends)
        widening = MAX_WIDENING if fall <= 0.0 else min(rho / math.sqrt(2.0 * fall), MAX_WIDENING)
        if widening > MIN_WIDENING:
            extra += (widening**2 - 1.0) * np.outer(chol[:, k], chol[:, k])
    n_evals = 2 * centre.size + 1
    if not np.any(extra):
        return base, n_evals
    return np.linalg.cholesky(base @ base.T + extra), n_evals


#: The excluded mass a region may leave out before it is grown.
NEGLIGIBLE_MASS = 1e-6
#: Each growth multiplies the radius by this; at most this many growths.
GROWTH_FACTOR, MAX_GROWTHS = 1.5, 4


def grow_until_negligible(
    bound,
    rebuild: Callable[[float], object],
    log_posterior: Callable[[np.ndarray], float],
    rng: np.random.Generator,
    *,
    n_draws: int = DEFAULT_DRAWS,
    shape: np.ndarray | None = None,
) -> tuple[object, ExcludedMass, float]:
    """Grow the trust region of ``bound`` until its excluded mass is negligible.

    Estimates the mass outside ``bound.region`` (:func:`excluded_mass`); while its upper
    end (three standard errors above the estimate) exceeds :data:`NEGLIGIBLE_MASS`, builds
    the bound again on a region whose radius is :data:`GROWTH_FACTOR` times larger
    (``rebuild(factor)`` with the factor over the first region), at most
    :data:`MAX_GROWTHS` times; it stops early when the larger region's bound cannot be
    built (``rebuild`` raises :class:`UnsupportedBound`, e.g. constants that overflow).

    Returns
    -------
    bound, ExcludedMass, float
        The last bound built, the estimate for its region, and its radius factor.
    """
    factor = 1.0
    estimate = excluded_mass(log_posterior, bound.region, rng, n_draws=n_draws, shape=shape)
    for _ in range(MAX_GROWTHS):
        if estimate.upper <= NEGLIGIBLE_MASS or not math.isfinite(estimate.estimate):
            break
        try:
            grown = rebuild(factor * GROWTH_FACTOR)
        except UnsupportedBound:  # the larger region's bound overflows: keep this one
            break
        bound, factor = grown, factor * GROWTH_FACTOR
        estimate = excluded_mass(log_posterior, bound.region, rng, n_draws=n_draws, shape=shape)
    return bound, estimate, factor


def draws_for(n_data: int) -> int:
    """Draws per sampler: :data:`DEFAULT_DRAWS`, fewer for large N (each draw is a
    full-data evaluation), at least 50."""
    return int(min(DEFAULT_DRAWS, max(50, 4e7 // max(n_data, 1))))


def excluded_mass_warning(
    step_name: str, estimate: ExcludedMass, region, grown: bool = True
) -> str:
    """The warning a step gives when its region leaves out more than
    :data:`NEGLIGIBLE_MASS` of the posterior (``grown``: whether the step tried to grow
    the region)."""
    where = (
        f"{step_name}: its bound holds on a trust region around its reference point "
        f"(whitened radius {region.radius:.3g}), so it samples the posterior restricted to "
        "that region. "
    )
    if not math.isfinite(estimate.estimate):
        return where + (
            "The posterior mass outside it could not be estimated (the log posterior was not "
            "finite at any importance-sampling draw); check the model's log density, or use "
            "MinibatchBarker() or Austere()."
        )
    why = (
        "and the region could not be grown enough (its bound's constants grow too fast)"
        if grown
        else "and the region is kept as it is"
    )
    return where + (
        f"An importance-sampling estimate puts {estimate.estimate:.2g} of the posterior mass "
        f"outside it (up to {estimate.upper:.2g}), more than {NEGLIGIBLE_MASS:g}, {why}. The "
        "draws miss that mass: the posterior's tails are cut off. This happens with diffuse "
        "priors and (quasi-)separated data, e.g. a category whose outcomes are all zero. Use "
        "MinibatchBarker() or Austere(), or a weakly informative prior."
    )
