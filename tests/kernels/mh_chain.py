"""A Metropolis–Hastings chain driven by a proposal kernel, and its ESS-scaled errors
against a known Gaussian target: shared by the tests of the surrogate moves."""

from __future__ import annotations

import math
from collections.abc import Callable

import arviz as az
import numpy as np


def gaussian_logp(mean: np.ndarray, cov: np.ndarray) -> Callable[[np.ndarray], float]:
    """``log N(q | mean, cov)`` up to a constant."""
    precision = np.linalg.inv(cov)

    def logp(q):
        d = q - mean
        return -0.5 * float(d @ precision @ d)

    return logp


def mh_chain(rng, n: int, start: np.ndarray, propose: Callable, logp: Callable, *, use_ratio=True):
    """``n`` draws of MH on ``logp`` with ``propose(q) -> (q', log q(q | q') - log q(q' |
    q))``; ``use_ratio=False`` drops the proposal's ratio (the negative controls)."""
    q = np.asarray(start, dtype=float)
    draws = np.empty((n, q.size))
    for i in range(n):
        proposal, log_q_ratio = propose(q)
        log_ratio = logp(proposal) - logp(q) + (log_q_ratio if use_ratio else 0.0)
        if math.log(1.0 - rng.random()) <= log_ratio:
            q = proposal
        draws[i] = q
    return draws


def z_scores(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Per coordinate, the errors of the mean and of the variance in Monte Carlo standard
    errors (the variance's by the delta method, with the ESS of the squares)."""
    out = []
    for j in range(draws.shape[1]):
        x = draws[:, j]
        sd = math.sqrt(cov[j, j])
        out.append(abs(x.mean() - mean[j]) / (sd / math.sqrt(float(az.ess(x[None, :])))))
        squares = (x - mean[j]) ** 2
        ess = float(az.ess(squares[None, :]))
        out.append(abs(x.var() - sd**2) / (sd**2 * math.sqrt(2.0 / ess)))
    return np.array(out)
