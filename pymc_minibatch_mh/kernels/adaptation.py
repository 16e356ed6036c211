"""Tuning schedules for the proposal scale and covariance, applied only while tuning."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScaleAdaptation:
    """Robbins–Monro state for ``log(scaling)``.

    Attributes
    ----------
    log_scale : float
        Current log proposal scale.
    n_updates : int
        Number of adaptation updates applied so far.
    """

    log_scale: float
    n_updates: int = 0

    @property
    def scaling(self) -> float:
        return math.exp(self.log_scale)


def adapt_scale(
    state: ScaleAdaptation,
    accept_prob: float,
    target: float,
    decay: float = 0.6,
    initial_gain: float = 5.0,
    min_gain: float = 0.02,
) -> ScaleAdaptation:
    """One Robbins–Monro step on ``log s``.

    ``log s += max(initial_gain * (t + 1)^-decay, min_gain) * (p - target)``.

    The acceptance probability ``p`` (not the 0/1 outcome) is used because it has
    lower variance. A non-finite ``p`` counts as 0. The gain never falls below
    ``min_gain`` so that a scale inflated during burn-in (when most moves towards
    the mode are accepted) is brought back once the chain is in the bulk;
    adaptation only runs while tuning, so a non-vanishing gain is harmless. The
    large initial gain lets a scale that is orders of magnitude off recover within
    about a hundred iterations (the update is at most ``gain * target`` downwards).
    """
    if not math.isfinite(accept_prob):
        accept_prob = 0.0
    gain = max(initial_gain * (state.n_updates + 1.0) ** (-decay), min_gain)
    return ScaleAdaptation(
        log_scale=state.log_scale + gain * (accept_prob - target),
        n_updates=state.n_updates + 1,
    )


@dataclass(frozen=True)
class CovarianceWindow:
    """Welford estimate of the position covariance over the current tuning window.

    Windows double in length (``first_window``, ``2 * first_window``, ...); at the end
    of each window its estimate becomes the proposal covariance and a new window
    starts, so early burn-in draws are forgotten.
    """

    ndim: int
    first_window: int = 100
    window: int = 0
    count: int = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None

    @property
    def window_length(self) -> int:
        return self.first_window * 2**self.window

    def add(self, position: np.ndarray) -> CovarianceWindow:
        if self.count == 0:
            return CovarianceWindow(
                self.ndim,
                self.first_window,
                self.window,
                1,
                position.copy(),
                np.zeros((self.ndim, self.ndim)),
            )
        count = self.count + 1
        shift = position - self.mean
        mean = self.mean + shift / count
        m2 = self.m2 + np.outer(shift, position - mean)
        return CovarianceWindow(self.ndim, self.first_window, self.window, count, mean, m2)

    @property
    def complete(self) -> bool:
        return self.count >= self.window_length

    def next_window(self) -> CovarianceWindow:
        return CovarianceWindow(self.ndim, self.first_window, self.window + 1)

    def covariance(self) -> np.ndarray | None:
        """Regularised sample covariance, or None if the chain barely moved."""
        if self.count <= self.ndim + 1:
            return None
        cov = self.m2 / (self.count - 1)
        cov = 0.5 * (cov + cov.T)
        scale = float(np.mean(np.diag(cov)))
        if not np.isfinite(scale) or scale <= 0:
            return None
        shrink = 5.0 / (self.count + 5.0)
        cov = (1 - shrink) * cov + shrink * 1e-3 * scale * np.eye(self.ndim)
        try:
            np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            return None
        return cov
