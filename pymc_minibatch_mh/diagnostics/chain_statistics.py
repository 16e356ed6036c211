"""Rank-normalised split R-hat and bulk effective sample size, in numpy, for the steps.

The definitions of Vehtari et al. (2021), which ArviZ also implements, computed here
without ArviZ: a step checks its own chain at the end of sampling inside PyMC's worker
process, and importing ArviZ there (it pulls in scipy.stats and matplotlib) cost about
1.5 s of every chain's wall time. Arrays are ``(chain, draw, K)``; every statistic is
computed for the ``K`` coordinates at once.

Only the steps' per-chain check (:mod:`pymc_minibatch_mh.step_methods.monitor`) uses
this module. The public diagnostics report ArviZ's own values
(:mod:`~pymc_minibatch_mh.diagnostics.convergence`); the tests check that the two agree.

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B., Bürkner, P.-C.
   "Rank-normalization, folding, and localization: an improved R-hat for assessing
   convergence of MCMC", Bayesian Analysis 16, 2021.
.. [2] Geyer, C. J. "Practical Markov chain Monte Carlo", Statistical Science 7, 1992
   (initial monotone sequence estimator).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri


def split_chains(draws: np.ndarray) -> np.ndarray:
    """Each chain cut into its first and second half (the middle draw of an odd count
    dropped): ``(2 * chain, draw // 2, K)``."""
    half = draws.shape[1] // 2
    return np.concatenate([draws[:, :half], draws[:, draws.shape[1] - half :]], axis=0)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks ``1..n`` of each column of ``values`` ``(n, K)``, ties given their mean rank
    (a Metropolis chain repeats its state at every rejection)."""
    n, k = values.shape
    ranks = np.empty((n, k))
    for j in range(k):
        _, inverse, counts = np.unique(values[:, j], return_inverse=True, return_counts=True)
        last = np.cumsum(counts)
        ranks[:, j] = (last - 0.5 * (counts - 1))[inverse]
    return ranks


def rank_normalise(draws: np.ndarray) -> np.ndarray:
    """Normal scores of the pooled ranks: ``ndtri((r - 3/8) / (S + 1/4))``, same shape."""
    chains, n, k = draws.shape
    ranks = average_ranks(draws.reshape(chains * n, k))
    return ndtri((ranks - 0.375) / (chains * n + 0.25)).reshape(chains, n, k)


def _within_and_pooled(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean within-chain variance ``W`` and the pooled estimate
    ``var+ = (n - 1) / n W + B / n`` (``B / n`` the variance of the chain means; 0 for
    one chain)."""
    chains, n = draws.shape[:2]
    within = np.mean(np.var(draws, axis=1, ddof=1), axis=0)
    pooled = (n - 1) / n * within
    if chains > 1:
        pooled = pooled + np.var(np.mean(draws, axis=1), axis=0, ddof=1)
    return within, pooled


def _rhat(draws: np.ndarray) -> np.ndarray:
    within, pooled = _within_and_pooled(draws)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(pooled / within)


def split_rhat(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat of each coordinate: the larger of the bulk value
    (ranks of the draws) and the tail value (ranks of ``|draw - median|``)."""
    split = split_chains(np.asarray(draws, dtype=np.float64))
    folded = np.abs(split - np.median(split, axis=(0, 1)))
    return np.maximum(_rhat(rank_normalise(split)), _rhat(rank_normalise(folded)))


def _autocovariance(draws: np.ndarray) -> np.ndarray:
    """Biased autocovariance of each chain and coordinate at lags ``0..n-1`` (FFT)."""
    n = draws.shape[1]
    centred = draws - draws.mean(axis=1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(centred, n=size, axis=1)
    return np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=1)[:, :n] / n


def effective_sample_size(draws: np.ndarray) -> np.ndarray:
    """ESS of each coordinate of ``(chain, draw, K)`` draws, pooled over chains.

    The autocorrelation at lag ``t`` is ``1 - (W - mean acov_t) / var+`` (``W`` the mean
    within-chain variance, ``var+`` the pooled variance estimate); sums of consecutive
    pairs are kept while positive and made non-increasing (Geyer's initial monotone
    sequence), and ``tau = -1 + 2 * sum(pairs)``, at least ``1 / log10(S)`` for ``S``
    draws in all (the cap of reference [1] on antithetic chains).
    """
    draws = np.asarray(draws, dtype=np.float64)
    chains, n, k = draws.shape
    acov = _autocovariance(draws)
    within, pooled = _within_and_pooled(draws)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (within - np.mean(acov, axis=0)) / pooled  # (n, K)
    rho[0] = 1.0
    n_pairs = n // 2
    pairs = rho[0 : 2 * n_pairs : 2] + rho[1 : 2 * n_pairs : 2]  # (n_pairs, K)
    positive = np.cumprod(pairs > 0, axis=0).astype(bool)  # up to the first non-positive
    monotone = np.minimum.accumulate(np.where(positive, pairs, np.inf), axis=0)
    tau = -1.0 + 2.0 * np.sum(np.where(positive, monotone, 0.0), axis=0)
    total = chains * n
    tau = np.maximum(tau, 1.0 / np.log10(total))
    with np.errstate(divide="ignore", invalid="ignore"):
        return total / tau


def bulk_ess(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS: the ESS of the rank-normalised split chains."""
    return effective_sample_size(rank_normalise(split_chains(np.asarray(draws, np.float64))))


def chain_diagnostics(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bulk ESS and split R-hat of each coordinate of ``draws`` ``(chain, draw, K)``.

    For the steps' own check of their chain inside PyMC's worker processes
    (:mod:`pymc_minibatch_mh.step_methods.monitor`); the public diagnostics use ArviZ's
    values (:mod:`~pymc_minibatch_mh.diagnostics.convergence`). A coordinate that never
    moved gets ESS 0 and R-hat inf; with one chain R-hat is reported as 1 (not computed).
    """
    draws = np.asarray(draws, dtype=np.float64)
    draws = draws.reshape(draws.shape[0], draws.shape[1], -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ess = bulk_ess(draws)
        rhat = split_rhat(draws) if draws.shape[0] > 1 else np.ones_like(ess)
    moved = np.ptp(draws.reshape(-1, ess.size), axis=0) > 0
    ess = np.where(np.isfinite(ess) & moved, ess, 0.0)
    rhat = np.where(np.isfinite(rhat) & moved, rhat, np.inf)
    return ess, rhat
