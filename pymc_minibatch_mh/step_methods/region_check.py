"""After tuning: how much posterior mass a step's trust region leaves out.

TunaMH and FlyMC sample the posterior restricted to the trust region of their bounds
(Poisson, Gamma and free-scale likelihoods). At the end of tuning each chain estimates the
mass outside it (:mod:`pymc_minibatch_mh.bounds.excluded_mass`) with a proposal shaped
like its own tuning draws, reports it in the sample stat ``excluded_mass`` and warns when
it is not negligible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
from pymc.stats.convergence import SamplerWarning, WarningType

from pymc_minibatch_mh.bounds.excluded_mass import (
    NEGLIGIBLE_MASS,
    ExcludedMass,
    draws_for,
    excluded_mass,
    excluded_mass_warning,
    grow_until_negligible,
    profile_widened_shape,
)
from pymc_minibatch_mh.data.pass_tally import passes_counted_on
from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow
from pymc_minibatch_mh.kernels.proposals import IndependenceProposal, ProposalMixture

#: A window length no tuning reaches: the spread of all tuning draws.
WHOLE_TUNING = 2**62


def tuning_spread(ndim: int) -> CovarianceWindow:
    """An empty running covariance of every tuning draw."""
    return CovarianceWindow(ndim, first_window=WHOLE_TUNING)


def full_log_posterior(tall_data) -> Callable[[np.ndarray], float]:
    """``q -> log prior + sum of the N log-likelihoods`` (one full-data pass per call)."""

    def log_posterior(q: np.ndarray) -> float:
        return tall_data.logprior(q) + float(np.sum(tall_data.loglik_full(q)))

    return log_posterior


def spread_shape(spread: CovarianceWindow) -> np.ndarray | None:
    """Cholesky factor of the tuning draws' covariance, or None with too few draws."""
    cov = spread.covariance()
    return None if cov is None else np.linalg.cholesky(cov)


def posterior_shape(step, region) -> tuple[np.ndarray | None, bool]:
    """The shape of the posterior as far as ``step`` knows it after tuning: its tuning
    draws' spread, widened along the axes of ``region`` where the posterior falls too
    little on the region's boundary
    (:func:`~pymc_minibatch_mh.bounds.excluded_mass.profile_widened_shape`, ``2 D + 1``
    full-data passes: only when that is no more than the importance sampler's own
    passes, e.g. up to 49 coordinates at N = 10^6 and 199 at 10^5). It shapes the
    importance sampler of the excluded mass and the grown region, and, when widened,
    the step's independence proposal (:func:`cover_flat_directions`).

    Returns
    -------
    ndarray or None, bool
        The shape (lower Cholesky factor; None without tuning draws and without
        widening) and whether some axis was widened.
    """
    spread = spread_shape(step.tuning_spread)
    if 2 * region.centre.size + 1 > 2 * draws_for(step.tall_data.n_data):
        return spread, False
    log_posterior = full_log_posterior(step.tall_data)
    base = np.asarray(region.chol if spread is None else spread, dtype=np.float64)
    with passes_counted_on(step):
        shape, _ = profile_widened_shape(log_posterior, region, base)
    return (spread, False) if shape is base else (shape, True)


def cover_flat_directions(step, shape: np.ndarray) -> None:
    """Give ``step``'s independence proposal the widened posterior ``shape`` (its centre
    and degrees of freedom kept), at the end of tuning.

    Where :func:`posterior_shape` had to widen the tuning draws' spread, the chain did not
    explore a direction the posterior extends along while it tuned, and its proposals,
    fitted to those draws, are as narrow as they were. The random walk then crosses that
    direction in many small steps (measured: FlyMC on an ordinal regression with an
    all-zero category under a diffuse prior, the category's coefficient at -36 +- 20 and
    -59 +- 39 in two chains of 4,000 draws against -85 +- 59); independence moves shaped
    like the widened posterior cross it in one (-84 +- 57 and -80 +- 57). The proposal is
    fixed from here on, so the chain stays reversible with respect to its target; steps
    without independence moves (HMC, ``proposal="rw"``) keep theirs.
    """
    mixture = step.proposal
    if not isinstance(mixture, ProposalMixture) or mixture.p_independent == 0.0:
        return
    old = mixture.independent
    independent = IndependenceProposal(centre=old.centre, chol=np.array(shape), df=old.df)
    step.proposal = replace(mixture, independent=independent)


def excluded_mass_report(
    step_name: str, estimate: ExcludedMass, region, advice: str = "", grown: bool = True
) -> SamplerWarning | None:
    """The warning for a region that leaves out more than ``NEGLIGIBLE_MASS`` (or None)."""
    if estimate.upper <= NEGLIGIBLE_MASS:
        return None
    message = excluded_mass_warning(step_name, estimate, region, grown)
    return SamplerWarning(WarningType.BAD_PARAMS, f"{message} {advice}".strip(), "warn")


def check_region(
    step, bound, *, rebuild=None, advice: str = "", shape: np.ndarray | None = None
) -> tuple[object, float]:
    """Estimate the mass outside ``bound.region`` for ``step``'s chain after tuning.

    With ``rebuild`` (``factor -> bound`` on a region that many times larger) the region
    is grown until the mass is negligible
    (:func:`~pymc_minibatch_mh.bounds.excluded_mass.grow_until_negligible`). Sets
    ``step.excluded_mass``, counts the full-data passes on ``step`` and queues the
    warning (with ``advice`` appended) when the mass stays above ``NEGLIGIBLE_MASS``.
    ``shape`` shapes the importance sampler's proposal (the steps pass
    :func:`posterior_shape`; None: the region's own Laplace factor).

    Returns
    -------
    bound, float
        The bound to use from now on and its radius factor over ``bound``'s.
    """
    log_posterior = full_log_posterior(step.tall_data)
    options = {
        "n_draws": draws_for(step.tall_data.n_data),
        "shape": shape,
    }
    factor = 1.0
    with passes_counted_on(step):
        if rebuild is None:
            estimate = excluded_mass(log_posterior, bound.region, step.rng, **options)
        else:
            bound, estimate, factor = grow_until_negligible(
                bound, rebuild, log_posterior, step.rng, **options
            )
    step.excluded_mass = estimate.estimate
    warning = excluded_mass_report(
        type(step).__name__, estimate, bound.region, advice, grown=rebuild is not None
    )
    if warning is not None:
        step._pending_warnings.append(warning)
    return bound, factor
