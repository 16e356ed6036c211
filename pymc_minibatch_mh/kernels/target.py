"""The interface every kernel uses to reach the model: prior and per-datum likelihood."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pymc_minibatch_mh.data import blocks as data_blocks


def per_row_in_blocks(fn: Callable[..., np.ndarray], *args, idx: np.ndarray) -> np.ndarray:
    """``fn(*args, idx)`` for a function with one output value per row of ``idx``, called
    on blocks of at most :data:`~pymc_minibatch_mh.data.blocks.BLOCK_ROWS` rows (the same
    values): a larger batch (a Poisson batch far out while tuning, a sequential test that
    reads most of N) keeps the temporaries of a call (its rows in float64) bounded."""
    if len(idx) <= data_blocks.BLOCK_ROWS:
        return fn(*args, idx)
    return np.concatenate(
        [
            np.asarray(fn(*args, idx[start : start + data_blocks.BLOCK_ROWS]))
            for start in range(0, len(idx), data_blocks.BLOCK_ROWS)
        ]
    )


def metropolis_accept(rng: np.random.Generator, log_r: float) -> tuple[bool, float]:
    """The MH decision for a log acceptance ratio known exactly: ``(accepted,
    min(1, exp(log_r)))``, one uniform draw; a NaN ratio rejects."""
    if math.isnan(log_r):
        return False, 0.0
    accept_prob = math.exp(min(0.0, log_r))
    return bool(rng.random() < accept_prob), accept_prob


class TallTarget(Protocol):
    """A posterior over i.i.d. data, seen through separate callables.

    Attributes
    ----------
    n_data : int
        Number of data points N (rows along the datum axis).
    loglik : callable
        ``loglik(q, idx) -> ndarray`` of shape ``(len(idx),)``: per-datum
        log-likelihood at the raveled parameter vector ``q`` for the data rows
        ``idx``. Its cost is proportional to ``len(idx)``.
    loglik_diff : callable
        ``loglik_diff(q_new, q_old, idx) -> (len(idx),)``: per-datum log-likelihood
        ratio terms of the rows ``idx``, in one pass over the rows. Their sum over all N
        rows plus ``diff_offset(q_new, q_old)`` is the full-data log-likelihood ratio.
        For a plain target they are ``loglik(q_new, idx) - loglik(q_old, idx)`` and the
        offset is 0; with control variates they are residuals of a proxy whose exact
        full-data sum is the offset.
    diff_offset : callable
        ``diff_offset(q_new, q_old) -> float``: the exactly known part of the full-data
        log-likelihood ratio (see ``loglik_diff``).
    loglik_full : callable
        ``loglik_full(q) -> ndarray`` of shape ``(N,)``.
    logprior : callable
        ``logprior(q) -> float``: log prior density (with Jacobians of any
        transforms) plus potentials. It is never tempered.
    """

    n_data: int
    loglik: Callable[[np.ndarray, np.ndarray], np.ndarray]
    loglik_diff: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    diff_offset: Callable[[np.ndarray, np.ndarray], float]
    loglik_full: Callable[[np.ndarray], np.ndarray]
    logprior: Callable[[np.ndarray], float]


@dataclass(frozen=True)
class ChainState:
    """Position of one chain and its cached log prior density."""

    position: np.ndarray
    logprior: float


@dataclass(frozen=True)
class ArrayTarget:
    """A :class:`TallTarget` built from plain Python callables (tests, non-PyMC use)."""

    n_data: int
    loglik: Callable[[np.ndarray, np.ndarray], np.ndarray]
    logprior: Callable[[np.ndarray], float]

    def loglik_diff(self, q_new: np.ndarray, q_old: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return self.loglik(q_new, idx) - self.loglik(q_old, idx)

    def diff_offset(self, q_new: np.ndarray, q_old: np.ndarray) -> float:
        return 0.0

    def loglik_full(self, q: np.ndarray) -> np.ndarray:
        return self.loglik(q, np.arange(self.n_data))
