"""Synthetic tall-data problems, generated in code (no downloads)."""

from __future__ import annotations

import numpy as np
import pymc as pm


def logistic_model(n_data: int, n_features: int = 10, seed: int = 0) -> pm.Model:
    """Logistic regression with an intercept and standard-normal covariates.

    True coefficients are drawn from N(0, 0.5^2) (intercept 0.3); priors are N(0, 5^2).
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_data, n_features))
    true_beta = rng.normal(0.0, 0.5, size=n_features)
    y = rng.random(n_data) < 1.0 / (1.0 + np.exp(-(0.3 + x @ true_beta)))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 5.0, shape=n_features)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y.astype(np.int8))
    return model
