"""Our steps in compound steps with every PyMC sampler a user may pair with them."""

import numpy as np
import pymc as pm
import pytest
from step_sampling import QUIET, logistic_design

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.diagnostics import posterior as _posterior
from pymc_minibatch_mh.diagnostics import sample_stats as _stats

PARTNERS = {
    "metropolis": lambda z, k: pm.Metropolis([z]),
    "slice": lambda z, k: pm.Slice([z]),
    "binary_gibbs": lambda z, k: pm.BinaryGibbsMetropolis([k]),
}


# Every step class with pm.Metropolis (whose `accepted` stat must have our dtype), and the
# other partners with one class (the stats they report do not overlap with ours).
COMBINATIONS = [(cls, "metropolis") for cls in (MinibatchBarker, Austere, TunaMH, FlyMC)] + [
    (MinibatchBarker, "slice"),
    (MinibatchBarker, "binary_gibbs"),
]


@pytest.mark.parametrize(
    ("step_class", "partner"),
    COMBINATIONS,
    ids=[f"{cls.__name__}-{partner}" for cls, partner in COMBINATIONS],
)
def test_compound_with_pymc_samplers(step_class, partner):
    x, y = logistic_design(n=1000)
    with pm.Model():
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
        z = pm.Normal("z", 0, 1)  # outside the likelihood
        k = pm.Bernoulli("k", 0.3)  # a discrete variable
        ours = step_class(vars=[alpha, beta], progressbar=False)
        idata = pm.sample(
            step=[ours, PARTNERS[partner](z, k)],
            draws=200,
            tune=200,
            chains=1,
            random_seed=3,
            **QUIET,
        )
    stats = _stats(idata)
    assert "batch_size" in stats and "accepted" in stats
    draws = np.asarray(_posterior(idata)["beta"])
    assert np.all(np.isfinite(draws)) and np.unique(draws[0, :, 0]).size > 10
    moved = "k" if partner == "binary_gibbs" else "z"
    assert np.unique(np.asarray(_posterior(idata)[moved])).size > 1
