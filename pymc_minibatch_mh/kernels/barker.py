"""Minibatch Barker acceptance test with a normal + correction decomposition.

**Approximate method.** Each decision differs from the exact Barker test by at
most the CLT error of the minibatch mean (reported as ``clt_error``) plus the
sup error of the correction table (8.9e-4 for the shipped ``C_1``).

The exact Barker test accepts ``q'`` with probability ``1 / (1 + exp(-Delta))``,
i.e. iff ``Delta + X_log > 0`` with ``X_log`` standard logistic. With a minibatch
estimate ``Delta*`` whose noise is ~ ``N(0, s^2)`` with ``s^2 < sigma^2``, the test
``Delta* + X_nc + X_corr > 0`` with ``X_nc ~ N(0, sigma^2 - s^2)`` and
``X_corr ~ C_sigma`` has the same acceptance law.

References
----------
.. [1] Seita, D., Pan, X., Chen, H., Canny, J. "An Efficient Minibatch
   Acceptance Test for Metropolis-Hastings", UAI 2017, Algorithm 1.
.. [2] Barker, A. A. "Monte Carlo calculations of the radial distribution
   functions for a proton-electron plasma", Aust. J. Phys. 18, 1965.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from pymc_minibatch_mh.kernels.correction import CorrectionTable
from pymc_minibatch_mh.kernels.target import ChainState, TallTarget, metropolis_accept

# Constants of the two-sided Berry–Esseen-type bound for the studentised mean
# (Novak 2005, as used in Corollary 1 of Seita et al.).
_CLT_THIRD_MOMENT = 6.4
_CLT_FIRST_MOMENT = 2.0


@dataclass(frozen=True)
class BarkerSettings:
    """Knobs of the minibatch Barker test.

    Attributes
    ----------
    batch_size : int
        First batch size ``m`` and the increment by which the batch grows.
    temperature : float
        ``K``: the likelihood is raised to ``1/K``; the prior is not tempered.
    delta : float or None
        If given, also grow the batch until the CLT error bound is ``<= delta``.
    table : CorrectionTable
        Sampler for ``X_corr``; its ``sigma`` is the variance budget.
    """

    batch_size: int
    temperature: float
    delta: float | None
    table: CorrectionTable


@dataclass(frozen=True)
class BarkerInfo:
    """Per-step diagnostics; each field is a PyMC sample stat of the same name.

    Attributes
    ----------
    accepted : bool
        Whether the proposal was accepted.
    accept : float
        Barker acceptance probability at the estimate, ``1 / (1 + exp(-Delta*))``.
    batch_size : int
        Distinct data points whose likelihood was evaluated.
    n_lik_evals : int
        Per-datum log-likelihood evaluations (current and proposed counted apart).
    delta_var : float
        ``s^2``: estimated variance of ``Delta*`` when the test was made (0 on full data).
    clt_error : float
        Estimated CLT error bound of the decision (0 on full data, NaN if no data used).
    group_accept : float
        The share of groups the step's group sweep accepted (set by the step; NaN without
        a sweep).
    """

    accepted: bool
    accept: float
    batch_size: int
    n_lik_evals: int
    delta_var: float
    clt_error: float
    group_accept: float = math.nan


def barker_probability(delta: float) -> float:
    """Barker acceptance function ``g(delta) = 1 / (1 + exp(-delta))``."""
    return float(special.expit(delta))


def clt_error_bound(values: np.ndarray) -> float:
    """Bound on the sup-distance of the studentised batch mean from N(0, 1).

    Uses ``(6.4 E|X|^3 + 2 E|X|) / sqrt(b)`` with moments of the *standardised*
    increments ``X = (Lambda_j - mean) / sd`` estimated on the batch (the bound
    is only scale-free in that form).
    """
    b = values.size
    if b == 0:
        return math.nan
    dev = np.abs(values - float(values.sum()) / b)  # the mean (as values.mean() computes it)
    sq = dev * dev
    var = float(sq.sum()) / b
    if var == 0.0:
        return 0.0
    sd = math.sqrt(var)
    m1 = float(dev.sum()) / (b * sd)
    m3 = float(np.dot(sq, dev)) / (b * sd**3)
    return (_CLT_THIRD_MOMENT * m3 + _CLT_FIRST_MOMENT * m1) / math.sqrt(b)


def barker_decision(rng: np.random.Generator, delta_star, delta_var, table: CorrectionTable):
    """Accept iff ``Delta* + X_nc + X_corr > 0`` with ``X_nc ~ N(0, sigma^2 - s^2)``.

    Scalars give a bool; arrays (of a common shape) give a boolean array of
    independent decisions.
    """
    if np.ndim(delta_star) == 0 and np.ndim(delta_var) == 0:
        top_up = table.sigma**2 - float(delta_var)
        if top_up < 0:
            raise ValueError(f"delta_var exceeds the table variance {table.sigma**2}")
        x_nc = math.sqrt(top_up) * rng.standard_normal()
        return bool(float(delta_star) + x_nc + float(table.sample(rng)) > 0.0)
    delta_star = np.asarray(delta_star, dtype=float)
    top_up = table.sigma**2 - np.asarray(delta_var, dtype=float)
    if np.any(top_up < 0):
        raise ValueError(f"delta_var exceeds the table variance {table.sigma**2}")
    x_nc = np.sqrt(top_up) * rng.standard_normal(delta_star.shape)
    return delta_star + x_nc + table.sample(rng, delta_star.shape) > 0.0


def _classify_nonfinite(values: np.ndarray) -> float | None:
    """Log-ratio implied by non-finite per-datum differences, or None if all finite."""
    if np.all(np.isfinite(values)):
        return None
    if np.any(np.isnan(values)) or np.any(values == -np.inf):
        return -math.inf
    return math.inf


def barker_kernel(
    rng: np.random.Generator,
    state: ChainState,
    proposal: np.ndarray,
    log_q_ratio: float,
    target: TallTarget,
    settings: BarkerSettings,
) -> tuple[ChainState, BarkerInfo]:
    """One minibatch Barker MH transition from ``state`` towards ``proposal``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The chain's generator.
    state : ChainState
        Current position and its log prior.
    proposal : ndarray
        Proposed position ``q'``.
    log_q_ratio : float
        ``log q(q | q') - log q(q' | q)`` (0 for symmetric proposals).
    target : TallTarget
        Prior and per-datum likelihood callables and ``n_data``.
    settings : BarkerSettings
        Batch size, temperature, optional CLT tolerance and correction table.

    Returns
    -------
    (ChainState, BarkerInfo)

    Notes
    -----
    Indices are drawn with replacement (as in the paper's analysis), so the
    estimate ``Delta* = (N / K) mean_j l_j + o / K + log p0(q') - log p0(q) + log_q_ratio``
    is unbiased and ``s^2 = var(Lambda_j) / b``, where ``l_j`` are the target's ratio
    terms and ``o = target.diff_offset(q', q)`` its exactly known part (0 without
    control variates; the Taylor-proxy difference with them). The batch grows by
    ``batch_size`` until ``s^2 < sigma^2`` (and the CLT bound is ``<= delta`` when
    ``delta`` is set). If the batch would reach ``N``, the exact Barker test on
    the full data is used instead. A target with ``exact_sum`` (its offset is the whole
    ratio, :class:`~pymc_minibatch_mh.kernels.control_variates.ExactSumTarget`) gets
    the exact MH test without reading data: nothing is estimated then, and MH accepts
    twice as many of the moves that leave the posterior unchanged as Barker's rule.
    """
    n = target.n_data
    lp_new = float(target.logprior(proposal))
    prior_part = lp_new - state.logprior + log_q_ratio
    if not math.isfinite(prior_part):
        # Proposal outside the prior support (or NaN): reject without touching data.
        accepted = prior_part == math.inf
        info = BarkerInfo(accepted, float(accepted), 0, 0, 0.0, math.nan)
        return (ChainState(proposal, lp_new) if accepted else state), info

    scale = n / settings.temperature
    # Exactly known part of the log-likelihood ratio (control variates), else 0.
    offset = target.diff_offset(proposal, state.position) / settings.temperature
    if getattr(target, "exact_sum", False):
        # The offset is the whole ratio (a closed-form sum): no test needs to be estimated,
        # and the exact MH test is used. Barker's rule would accept a move whose ratio is
        # exactly 1 (an HMC move on the exact posterior) only half of the time.
        accepted, accept_prob = metropolis_accept(rng, offset + prior_part)
        info = BarkerInfo(accepted, accept_prob, 0, 0, 0.0, 0.0)
        return (ChainState(proposal, lp_new) if accepted else state), info
    sigma2 = settings.table.sigma**2
    m = settings.batch_size
    moments = RunningMoments()
    lam_batches: list[np.ndarray] = []
    indices: list[np.ndarray] = []
    n_evals = 0
    while moments.count + m < n:
        idx = rng.integers(0, n, size=m)
        d = target.loglik_diff(proposal, state.position, idx)
        n_evals += 2 * m
        indices.append(idx)
        special_ratio = _classify_nonfinite(d)
        if special_ratio is not None:
            accepted = special_ratio > 0
            info = BarkerInfo(
                accepted, float(accepted), _n_distinct(indices), n_evals, math.nan, math.nan
            )
            return (ChainState(proposal, lp_new) if accepted else state), info
        lam = scale * d
        lam_batches.append(lam)
        moments = moments.merge(lam)
        delta_var = moments.variance / moments.count
        if delta_var >= sigma2:
            continue
        batch = lam_batches[0] if len(lam_batches) == 1 else np.concatenate(lam_batches)
        clt_error = clt_error_bound(batch)
        if settings.delta is None or clt_error <= settings.delta:
            delta_star = moments.mean + offset + prior_part
            accepted = barker_decision(rng, delta_star, delta_var, settings.table)
            info = BarkerInfo(
                accepted,
                barker_probability(delta_star),
                _n_distinct(indices),
                n_evals,
                delta_var,
                clt_error,
            )
            return (ChainState(proposal, lp_new) if accepted else state), info

    # The batch would reach N: exact Barker test on the full data.
    d_full = target.loglik_full(proposal) - target.loglik_full(state.position)
    n_evals += 2 * n
    special_ratio = _classify_nonfinite(d_full)
    if special_ratio is not None:
        delta = special_ratio
    else:
        delta = float(d_full.sum()) / settings.temperature + prior_part
    accepted = bool(delta + rng.logistic() > 0.0)
    info = BarkerInfo(accepted, barker_probability(delta), n, n_evals, 0.0, 0.0)
    return (ChainState(proposal, lp_new) if accepted else state), info


@dataclass(frozen=True)
class RunningMoments:
    """Count, mean and sum of squared deviations, merged batch by batch (Chan et al.)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    @property
    def variance(self) -> float:
        """Population variance (``ddof = 0``)."""
        return self.m2 / self.count if self.count else math.nan

    def merge(self, values: np.ndarray) -> RunningMoments:
        n_b = values.size
        mean_b = float(values.sum()) / n_b  # values.mean(), without its call overhead
        m2_b = float(np.sum((values - mean_b) ** 2))
        total = self.count + n_b
        shift = mean_b - self.mean
        return RunningMoments(
            count=total,
            mean=self.mean + shift * n_b / total,
            m2=self.m2 + m2_b + shift**2 * self.count * n_b / total,
        )


def _n_distinct(indices: list[np.ndarray]) -> int:
    if not indices:
        return 0
    if len(indices) == 1 and indices[0].size <= 4096:
        return len(set(indices[0].tolist()))  # cheaper than np.unique for small batches
    return int(np.unique(np.concatenate(indices)).size)
