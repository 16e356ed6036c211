"""Each step reports where its construction time went: setup_s, compile_s, n_data_passes."""

import time

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH


@pytest.fixture
def logistic():
    # A fresh model per test: steps built on one model share compiled functions.
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3000, 2))
    y = rng.random(3000) < 1 / (1 + np.exp(-(x @ np.array([1.0, -0.5]))))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y.astype(int))
    return model


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere, TunaMH, FlyMC])
def test_construction_reports_setup_compile_time_and_passes(logistic, step_class):
    with logistic:
        start = time.perf_counter()
        step = step_class(progressbar=False)
        elapsed = time.perf_counter() - start
    # The outermost constructor is timed once, subclass work included.
    assert 0 < step.compile_s <= step.setup_s <= elapsed
    assert step.setup_s > 0.5 * elapsed
    # Validation, self-check, recognition (value and two affinity checks), MAP and Taylor
    # sums, bound constants: about ten passes at most.
    assert isinstance(step.n_data_passes, float) and 1 <= step.n_data_passes <= 12
