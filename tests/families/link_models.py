"""A small Bernoulli model with a given link, and what the recogniser makes of it."""

from __future__ import annotations

import numpy as np
import pymc as pm
from pymc.pytensorf import make_shared_replacements

from pymc_minibatch_mh.likelihood.linear_predictor import recognise_linear_predictor


def link_model(p_of) -> pm.Model:
    """Bernoulli rows with ``p = p_of(a + b x)`` (N = 400)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=400)
    y = (rng.random(400) < 0.4 + 0.2 * (x > 0)).astype(int)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        pm.Bernoulli("y", p=p_of(a + b * x), observed=y)
    return model


def recognised(model: pm.Model):
    """The model's likelihood as the recogniser reads it at the initial point."""
    point = model.initial_point()
    shared = make_shared_replacements(point, model.value_vars, model)
    return recognise_linear_predictor(model, model.value_vars, shared=shared, initial_point=point)


def logp_rows(model: pm.Model, point: dict) -> np.ndarray:
    """PyMC's per-row log-likelihood at ``point``."""
    return model.compile_logp(vars=model.observed_RVs, sum=False)(point)[0]
