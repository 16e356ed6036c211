"""Reference problems shared by the statistical tests."""

from __future__ import annotations

import numpy as np
import pymc as pm

from .agreement import moments_of

SAMPLE = {"chains": 2, "cores": 2, "progressbar": False, "compute_convergence_checks": False}


def gaussian_mean_case(n: int = 10_000, prior_sd: float = 10.0, noise_sd: float = 1.0):
    """``y ~ N(mu, noise_sd^2)``, ``mu ~ N(0, prior_sd^2)``: model and closed-form posterior
    ``(model, {"mu": mean}, {"mu": sd})``."""
    y = np.random.default_rng(101).normal(0.7, noise_sd, size=n)
    precision = 1 / prior_sd**2 + n / noise_sd**2
    exact_mean = (y.sum() / noise_sd**2) / precision
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, prior_sd)
        pm.Normal("y", mu, noise_sd, observed=y)
    return model, {"mu": exact_mean}, {"mu": precision**-0.5}


def logistic_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two covariates and labels from ``logit p = -0.5 + x @ (1, -0.7)``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    logits = -0.5 + x @ np.array([1.0, -0.7])
    y = (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(int)
    return x, y


def logistic_model(x: np.ndarray, y: np.ndarray) -> pm.Model:
    """``y ~ Bernoulli(logit_p = alpha + x @ beta)`` with N(0, 5^2) priors."""
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    return model


def logistic_nuts_case(n: int):
    """Logistic data (seed 303) and NUTS moments: ``(model, names, ref_mean, ref_sd)``."""
    model = logistic_model(*logistic_data(n, 303))
    names = ["alpha", "beta"]
    with model:
        nuts = pm.sample(draws=2000, tune=1000, random_seed=404, **SAMPLE)
    return (model, names, *moments_of(nuts, names))
