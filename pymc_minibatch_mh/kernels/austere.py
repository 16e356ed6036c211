"""Austerity: approximate MH through a sequential Student-t test on minibatches.

**Approximate method.** Exact MH accepts ``q'`` iff ``mu > mu0`` where ``mu`` is the
mean over the N data points of the tempered per-datum log-likelihood ratio
``l_i = [log p(x_i | q') - log p(x_i | q)] / K`` and
``mu0 = (log u - [log p0(q') - log p0(q)] - log_q_ratio) / N`` with ``u ~ U(0, 1)``
drawn before any data is read. Austerity estimates ``mu`` from batches drawn without
replacement that grow by ``batch_size`` and stops as soon as a t-test is confident:
with ``s`` the finite-population-corrected standard error of the batch mean, it
decides when ``1 - Phi_{n-1}(|mean - mu0| / s) < epsilon``. Each single t-test errs
with probability about ``epsilon``; the whole sequential test errs with probability
at most ``E(0, m, epsilon)`` (see :mod:`~pymc_minibatch_mh.kernels.austere_design`).
At ``n = N`` the standard error is 0 and the decision is exact MH, so ``epsilon = 0``
is exact MH (always reading all N points). With a target whose ``diff_offset`` is not
zero (control variates), ``l_i`` are the target's ratio terms (residuals) and the
offset, divided by ``K``, is subtracted from ``N mu0``.

References
----------
.. [1] Korattikara, A., Chen, Y., Welling, M. "Austerity in MCMC Land: Cutting
   the Metropolis-Hastings Budget", ICML 2014, Algorithm 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from pymc_minibatch_mh.kernels.subsample import UsedRows
from pymc_minibatch_mh.kernels.target import ChainState, TallTarget


@dataclass(frozen=True)
class AustereSettings:
    """Knobs of the sequential test.

    Attributes
    ----------
    batch_size : int
        First batch size ``m`` and increment (at least 2).
    epsilon : float
        Per-test error level in ``[0, 0.5)``: stop when the t tail probability is
        below it. 0 is exact MH.
    temperature : float
        ``K``: per-datum log-likelihood ratios are divided by ``K``.
    """

    batch_size: int
    epsilon: float
    temperature: float

    def __post_init__(self):
        if int(self.batch_size) != self.batch_size or self.batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2; got {self.batch_size}.")
        if not 0.0 <= self.epsilon < 0.5:
            raise ValueError(f"epsilon must lie in [0, 0.5); got {self.epsilon}.")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive; got {self.temperature}.")


@dataclass(frozen=True)
class AustereInfo:
    """Per-step diagnostics; each field is a PyMC sample stat of the same name.

    Attributes
    ----------
    accepted : bool
        Whether the proposal was accepted.
    accept : float
        Always NaN: the sequential test has no acceptance-probability estimate.
    batch_size : int
        Data points used (distinct, drawn without replacement).
    n_lik_evals : int
        Per-datum log-likelihood evaluations (``2 * batch_size``).
    t_stat : float
        The t statistic ``(mean - mu0) / s`` when the test stopped (+-inf at s = 0).
    group_accept : float
        The share of groups the step's group sweep accepted (set by the step; NaN without
        a sweep).
    """

    accepted: bool
    accept: float
    batch_size: int
    n_lik_evals: int
    t_stat: float
    group_accept: float = math.nan


def t_statistic(
    mean: float, mean_sq: float, n: int, n_data: int, mu0: float
) -> tuple[float, float]:
    """Finite-population-corrected t statistic and its standard error (Eqs. 4-5 of [1]).

    ``s_l = sqrt((mean_sq - mean^2) n / (n - 1))``,
    ``s = s_l / sqrt(n) * sqrt(1 - (n - 1) / (N - 1))``, ``t = (mean - mu0) / s``.

    Parameters
    ----------
    mean, mean_sq : float
        Mean and mean square of the ``n`` values seen so far. Shifting the values and
        ``mu0`` by a common constant leaves ``t`` unchanged (the kernel uses this to
        avoid cancellation in ``mean_sq - mean^2``).
    n : int
        Values seen (at least 2, at most ``n_data``).
    n_data : int
        Population size N.
    mu0 : float
        The threshold.

    Returns
    -------
    (t, s) : (float, float)
        With ``s = 0`` (all N values seen, or all values equal), ``t`` is ``+-inf`` by
        the sign of ``mean - mu0``, or 0 if they are equal.
    """
    if not 2 <= n <= n_data:
        raise ValueError(f"need 2 <= n <= n_data; got n={n}, n_data={n_data}.")
    var = max(mean_sq - mean * mean, 0.0) * n / (n - 1)
    fpc = max(1.0 - (n - 1) / (n_data - 1), 0.0) if n < n_data else 0.0
    s = math.sqrt(var / n * fpc)
    diff = mean - mu0
    if s == 0.0:
        return (math.copysign(math.inf, diff) if diff != 0 else 0.0), 0.0
    return diff / s, s


def student_t_tail(t: float, df: int) -> float:
    """``delta = 1 - Phi_df(|t|)``: upper tail probability of Student-t at ``|t|``."""
    return float(special.stdtr(df, -abs(t)))


@functools.lru_cache(maxsize=4096)
def critical_t(df: int, epsilon: float) -> float:
    """``|t|`` above which ``student_t_tail(t, df) < epsilon`` (``inf`` for epsilon = 0).

    Tests repeat the same degrees of freedom (``m - 1, 2m - 1, ...``), so the
    quantiles are cached.
    """
    return float(special.stdtrit(df, 1.0 - epsilon))


def austere_kernel(
    rng: np.random.Generator,
    state: ChainState,
    proposal: np.ndarray,
    log_q_ratio: float,
    target: TallTarget,
    settings: AustereSettings,
    rows: UsedRows | None = None,
) -> tuple[ChainState, AustereInfo]:
    """One Austerity MH transition (Algorithm 1 of Korattikara et al.).

    Parameters
    ----------
    rng : numpy.random.Generator
        The chain's generator. Its first use is ``u = 1 - rng.random()`` (so ``u`` is
        in ``(0, 1]``), before any data is read.
    state : ChainState
        Current position and log prior.
    proposal : ndarray
        Proposed position.
    log_q_ratio : float
        ``log q(q | q') - log q(q' | q)`` (0 for symmetric proposals).
    target : TallTarget
        Prior and per-datum likelihood callables.
    settings : AustereSettings
        ``batch_size``, ``epsilon`` and ``temperature``.
    rows : UsedRows, optional
        Scratch mask of drawn rows (``UsedRows(target.n_data)``), reused across calls
        to avoid an O(N) allocation per test; it is left cleared on return.

    Returns
    -------
    (ChainState, AustereInfo)

    Notes
    -----
    A proposal outside the prior support is rejected without reading data. A batch
    containing a NaN or ``-inf`` log-ratio rejects; one containing ``+inf`` (the
    current state impossible for that row) accepts. A target with ``exact_sum`` (its
    offset is the whole ratio) gets the exact MH test without reading data.
    """
    n_data = target.n_data
    log_u = math.log(1.0 - rng.random())
    lp_new = float(target.logprior(proposal))
    prior_part = lp_new - state.logprior + log_q_ratio
    if not math.isfinite(prior_part):
        accepted = prior_part == math.inf
        info = AustereInfo(accepted, math.nan, 0, 0, math.nan)
        return (ChainState(proposal, lp_new) if accepted else state), info
    # The exactly known part of the log-likelihood ratio (control variates; else 0)
    # moves the threshold; the test then runs on the remaining per-datum terms.
    offset = float(target.diff_offset(proposal, state.position)) / settings.temperature
    if getattr(target, "exact_sum", False):
        # The offset is the whole ratio (a closed-form sum): the exact MH test, no data.
        accepted = log_u < prior_part + offset
        info = AustereInfo(accepted, math.nan, 0, 0, math.nan)
        return (ChainState(proposal, lp_new) if accepted else state), info
    mu0 = (log_u - prior_part - offset) / n_data

    if rows is None:
        rows = UsedRows(n_data)
    elif rows.n_data != n_data or rows.count:
        raise ValueError("rows must be a released UsedRows over the target's n_data rows.")
    try:
        accepted, info = sequential_test(rng, state.position, proposal, mu0, target, settings, rows)
    finally:
        rows.release()
    return (ChainState(proposal, lp_new) if accepted else state), info


def sequential_test(
    rng: np.random.Generator,
    position: np.ndarray,
    proposal: np.ndarray,
    mu0: float,
    target: TallTarget,
    settings: AustereSettings,
    rows: UsedRows,
) -> tuple[bool, AustereInfo]:
    """Decide ``mu > mu0`` from growing batches drawn without replacement.

    ``mu`` is the mean over all N rows of the tempered per-datum log-likelihood
    ratio between ``proposal`` and ``position``. Stops when the Student-t tail
    probability (``n - 1`` degrees of freedom) of the finite-population-corrected t
    statistic is below ``settings.epsilon``, or at ``n = N`` where the decision is
    exact. The caller releases ``rows``.
    """
    n_data = target.n_data
    shift = math.nan  # first batch mean: sums of (d - shift) avoid cancellation
    total = total_sq = 0.0
    while True:
        idx = rows.draw(rng, settings.batch_size)
        d = target.loglik_diff(proposal, position, idx) / settings.temperature
        n = rows.count
        batch_sum = float(d.sum())
        if not math.isfinite(batch_sum) and not np.all(np.isfinite(d)):
            # Any NaN or -inf row makes the proposal invalid; +inf rows (current state
            # impossible) make it certainly better.
            accepted = not (np.any(np.isnan(d)) or np.any(d == -np.inf))
            return accepted, AustereInfo(accepted, math.nan, n, 2 * n, math.nan)
        if math.isnan(shift):
            shift = batch_sum / d.size
        centred = d - shift
        total += batch_sum - shift * d.size
        total_sq += float(np.dot(centred, centred))
        mean = total / n
        if n >= n_data:  # all rows read: s = 0 and the decision is exact MH's
            decide = True
            t = math.copysign(math.inf, mean - (mu0 - shift)) if mean != mu0 - shift else 0.0
        else:  # batch_size >= 2, so n >= 2 here
            t, _ = t_statistic(mean, total_sq / n, n, n_data, mu0 - shift)
            # Same as student_t_tail(t, n - 1) < epsilon. With s = 0 before N (all values
            # equal) t is +-inf, which decides only if epsilon > 0.
            decide = abs(t) > critical_t(n - 1, settings.epsilon)
        if decide:
            accepted = bool(mean > mu0 - shift)
            return accepted, AustereInfo(accepted, math.nan, n, 2 * n, t)
