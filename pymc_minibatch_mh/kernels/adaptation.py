"""Tuning schedule for the proposal scale, applied only while tuning."""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    min_gain: float = 0.02,
) -> ScaleAdaptation:
    """One Robbins–Monro step: ``log s += max((t + 1)^-decay, min_gain) * (p - target)``.

    The acceptance probability ``p`` (not the 0/1 outcome) is used because it has
    lower variance. A non-finite ``p`` counts as 0. The gain never falls below
    ``min_gain`` so that a scale inflated during burn-in (when most moves towards
    the mode are accepted) is brought back once the chain is in the bulk;
    adaptation only runs while tuning, so a non-vanishing gain is harmless.
    """
    if not math.isfinite(accept_prob):
        accept_prob = 0.0
    gain = max((state.n_updates + 1.0) ** (-decay), min_gain)
    return ScaleAdaptation(
        log_scale=state.log_scale + gain * (accept_prob - target),
        n_updates=state.n_updates + 1,
    )
