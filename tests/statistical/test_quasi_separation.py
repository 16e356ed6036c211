"""Quasi-separation with a diffuse prior (``slow``): a Poisson regression whose 200-row
category has only zero counts, Normal(0, 100) priors, N = 2,000.

The category's coefficient has a posterior like its prior cut off above (mean about -83,
sd about 61), while the Laplace fit at the MAP gives it an sd of 10: a trust region of
``sqrt(D) + 8`` Laplace sds leaves about 30 % of the posterior mass outside. ``TunaMH()``
estimates that mass after tuning and grows its region until it is negligible: it must
match a long NUTS run (means within 0.15 sd, sds within 15 %). Negative control: the same
step held to the default radius (``trust_radius=`` given, so never grown) must fail.
``FlyMC()`` refuses this model in words (its Poisson-log bound indexes the categories),
and, written with one-hot columns, refuses bounds whose collapsed sum would lose its
float64 precision (fast test).
"""

from functools import cache

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import FlyMC, TunaMH
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.bounds.trust_region import default_radius

from .agreement import failures_against, moments_of
from .user_models import refusal_problem

NAMES = ["a", "b", "g"]
SAMPLE = {"chains": 2, "cores": 2, "progressbar": False, "compute_convergence_checks": False}


@cache
def _model(prior_sd: float = 100.0, onehot: bool = False):
    """The categories as an index into the effects (default) or as one-hot columns."""
    rng = np.random.default_rng(11)
    category = rng.integers(0, 4, 2000)
    category[:200] = 4
    x = rng.normal(size=2000)
    effects = np.array([0.0, 0.3, -0.2, 0.1, -9.0])
    y = rng.poisson(np.exp(np.log(0.3) + effects[category] + 0.4 * x))
    y[category == 4] = 0
    with pm.Model() as model:
        a = pm.Normal("a", 0, prior_sd)
        b = pm.Normal("b", 0, prior_sd)
        g = pm.Normal("g", 0, prior_sd, shape=4)  # categories 1..4 against category 0
        if onehot:
            columns = (category[:, None] == np.arange(1, 5)).astype(float)
            eta = a + b * x + pm.math.dot(columns, g)
        else:
            eta = a + b * x + pm.math.concatenate([[0.0], g])[category]
        pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
    return model


@cache
def _reference():
    with _model():
        idata = pm.sample(draws=4000, tune=2000, target_accept=0.95, random_seed=5, **SAMPLE)
    return moments_of(idata, NAMES)


def _tuna(**kwargs):
    with _model():
        step = TunaMH(progressbar=False, **kwargs)
        return pm.sample(step=step, draws=2000, tune=1000, random_seed=3, **SAMPLE)


@pytest.mark.slow
def test_tuna_grows_its_region_and_matches_nuts():
    mean, sd = _reference()
    idata = _tuna()
    mass = np.asarray(idata.sample_stats["excluded_mass"])
    print("excluded mass per chain:", np.unique(mass))
    assert np.all(mass < 1e-3)
    assert not failures_against(idata, NAMES, mean, sd, mean_tol=0.15, sd_tol=0.15)


@pytest.mark.slow
def test_negative_control_the_default_region_without_growth_fails():
    mean, sd = _reference()
    idata = _tuna(trust_radius=default_radius(6))
    failures = failures_against(
        idata, NAMES, mean, sd, mean_tol=0.15, sd_tol=0.15, check_power=False
    )
    assert failures


@pytest.mark.slow
def test_flymc_refuses_in_words():
    with _model(), pytest.raises((ValueError, NotImplementedError)) as excinfo:
        FlyMC(progressbar=False)
    problem = refusal_problem(excinfo.value, "FlyMC", "TunaMH")
    assert problem is None, problem


def test_flymc_refuses_bounds_too_loose_for_their_summed_precision():
    """Written with one-hot columns FlyMC accepts the design, but the Laplace fit is far too
    narrow for the all-zero category: curvatures near e^96 on the region, and a collapsed
    sum rounded by ~1e32 nats (before this refusal a chain settled where the log posterior
    is -1.6e30). Control: the same data with Normal(0, 2.5) priors is accepted."""
    with _model(onehot=True), pytest.raises(UnsupportedBound, match="so loose"):
        FlyMC(progressbar=False)
    with _model(prior_sd=2.5, onehot=True):
        step = FlyMC(progressbar=False)
    assert step.bound.region is not None
