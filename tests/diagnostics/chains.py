"""Synthetic chains shared by the diagnostics tests."""

import numpy as np


def ar1_chains(rng: np.random.Generator, phi: float, shape: tuple[int, ...]) -> np.ndarray:
    """Chains ``(chain, draw, ...)`` of an AR(1) process with coefficient ``phi``."""
    x = np.zeros(shape)
    noise = rng.normal(size=shape)
    for t in range(1, shape[1]):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x
