"""Austerity: approximate MH through a sequential Student-t test on minibatches.

**Approximate method.** Exact MH accepts ``q'`` iff ``mu > mu0`` where ``mu`` is the
mean per-datum (tempered) log-likelihood ratio and
``mu0 = (log u - [log p0(q') - log p0(q)] - log_q_ratio) / N`` with ``u`` drawn
before any data is read. Austerity estimates ``mu`` from a batch drawn without
replacement that grows by ``batch_size`` and stops as soon as a t-test is
confident at level ``epsilon``. Each t-test errs with probability about
``epsilon``; at ``n = N`` the finite-population correction makes the standard
error 0 and the decision is exact MH (``epsilon = 0`` is always exact MH).

References
----------
.. [1] Korattikara, A., Chen, Y., Welling, M. "Austerity in MCMC Land: Cutting
   the Metropolis-Hastings Budget", ICML 2014, Algorithm 1.
"""

from __future__ import annotations

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
        Per-test error level: stop when the t tail probability is below it.
    temperature : float
        ``K``: per-datum log-likelihood ratios are divided by ``K``.
    """

    batch_size: int
    epsilon: float
    temperature: float


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
    """

    accepted: bool
    accept: float
    batch_size: int
    n_lik_evals: int
    t_stat: float


def t_statistic(
    mean: float, mean_sq: float, n: int, n_data: int, mu0: float
) -> tuple[float, float]:
    """Finite-population-corrected t statistic and its standard error.

    ``s_l = sqrt((mean_sq - mean^2) n / (n - 1))``,
    ``s = s_l / sqrt(n) * sqrt(1 - (n - 1) / (N - 1))``, ``t = (mean - mu0) / s``.
    """
    var = max(mean_sq - mean * mean, 0.0) * n / (n - 1)
    fpc = max(1.0 - (n - 1) / (n_data - 1), 0.0)
    s = math.sqrt(var / n * fpc)
    if s == 0.0:
        diff = mean - mu0
        return (math.copysign(math.inf, diff) if diff != 0 else 0.0), 0.0
    return (mean - mu0) / s, s


def student_t_tail(t: float, df: int) -> float:
    """``delta = 1 - Phi_df(|t|)``: upper tail probability of Student-t at ``|t|``."""
    return float(special.stdtr(df, -abs(t)))


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
        The chain's generator; ``u`` is drawn first, before any data.
    state : ChainState
        Current position and log prior.
    proposal : ndarray
        Proposed position.
    log_q_ratio : float
        ``log q(q | q') - log q(q' | q)``.
    target : TallTarget
        Prior and per-datum likelihood callables.
    settings : AustereSettings
        ``batch_size``, ``epsilon`` and ``temperature``.
    rows : UsedRows, optional
        Scratch mask of drawn rows, reused across calls to avoid an O(N)
        allocation per test; it is left cleared on return.

    Returns
    -------
    (ChainState, AustereInfo)
    """
    n_data = target.n_data
    log_u = math.log(rng.random())
    lp_new = float(target.logprior(proposal))
    prior_part = lp_new - state.logprior + log_q_ratio
    if not math.isfinite(prior_part):
        accepted = prior_part == math.inf
        info = AustereInfo(accepted, math.nan, 0, 0, math.nan)
        return (ChainState(proposal, lp_new) if accepted else state), info
    mu0 = (log_u - prior_part) / n_data

    if rows is None:
        rows = UsedRows(n_data)
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
    ratio between ``proposal`` and ``position``. The caller releases ``rows``.
    """
    n_data = target.n_data
    total = total_sq = 0.0
    while True:
        idx = rows.draw(rng, settings.batch_size)
        d = target.loglik_diff(proposal, position, idx) / settings.temperature
        n = rows.count
        if not np.all(np.isfinite(d)):
            # Any NaN or -inf row makes the proposal invalid; +inf rows (current state
            # impossible) make it certainly better.
            accepted = not (np.any(np.isnan(d)) or np.any(d == -np.inf))
            return accepted, AustereInfo(accepted, math.nan, n, 2 * n, math.nan)
        total += float(d.sum())
        total_sq += float(np.dot(d, d))
        mean = total / n
        t, s = t_statistic(mean, total_sq / n, n, n_data, mu0)
        if n >= n_data or s == 0.0:
            decide = True
        else:
            decide = student_t_tail(t, n - 1) < settings.epsilon
        if decide:
            accepted = bool(mean > mu0)
            return accepted, AustereInfo(accepted, math.nan, n, 2 * n, t)
