"""After tuning, a step says when its chain is stuck, reads ~all the data, or its proxy
no longer fits: PyMC logs the step's ``warning`` stat while sampling."""

import logging

import numpy as np
import pymc as pm
import pytest
from step_sampling import QUIET, gaussian_mean_model, logistic_design, logistic_regression_model

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.diagnostics.groups import group


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def logged():
    """Messages PyMC logs at WARNING or above while the test runs."""
    handler = _Collect()
    logger = logging.getLogger("pymc")
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def _sample(model, step, draws=300):
    with model:
        return pm.sample(step=step, draws=draws, tune=0, chains=1, random_seed=4, **QUIET)


def _ours(messages, step_class):
    return [m for m in messages if m.startswith(f"{step_class.__name__}:")]


def test_a_stuck_chain_is_reported(logged):
    model = gaussian_mean_model()
    with model:
        step = MinibatchBarker(
            proposal="rw", control_variates=False, scaling=50.0, tune=False, progressbar=False
        )
    _sample(model, step)
    messages = _ours(logged, MinibatchBarker)
    assert any("barely moves" in m for m in messages)
    assert len(messages) == len(set(messages))  # each problem once per chain


def test_batches_near_n_are_reported(logged):
    model = gaussian_mean_model()
    with model:
        # A posterior-scale random walk without control variates at temperature 1: the
        # minibatch test cannot decide from a subsample.
        step = Austere(proposal="rw", control_variates=False, epsilon=0.0, progressbar=False)
    _sample(model, step)
    messages = _ours(logged, Austere)
    assert any("minibatches saved almost nothing" in m for m in messages)
    assert any("control_variates=True" in m for m in messages)


def test_flymc_reading_nearly_all_rows_is_not_told_to_use_control_variates():
    """FlyMC refuses control_variates=True, so its warning names its bounds instead;
    control: another step's names control variates."""
    from pymc_minibatch_mh.step_methods.monitor import PostTuningTally, chain_problems

    tally = PostTuningTally()
    for _ in range(50):
        tally = tally.add(steps=1, accepted=1.0, rows=90.0)
    fly = chain_problems(
        tally, step_name="FlyMC", n_data=100, noise=None, full_data_cause=FlyMC.full_data_cause
    )["full_data"]
    assert "n_bright" in fly.message and "control_variates" not in fly.message
    tuna = chain_problems(
        tally, step_name="TunaMH", n_data=100, noise=None, full_data_cause=TunaMH.full_data_cause
    )["full_data"]
    assert "control_variates=True" in tuna.message


def test_a_proxy_far_from_the_chain_is_reported(logged):
    x, y = logistic_design()
    model = logistic_regression_model(x, y)
    with model:
        map_point = pm.find_MAP(progressbar=False)
        far = {**map_point, "alpha": map_point["alpha"] + 5.0}
        step = MinibatchBarker(
            reference_point=far,
            recentre=False,
            proposal="rw",
            steps_per_draw=1,
            tune=False,
            progressbar=False,
        )
        idata = pm.sample(
            step=step,
            draws=300,
            tune=0,
            chains=1,
            random_seed=4,
            initvals={"alpha": map_point["alpha"], "beta": map_point["beta"]},
            **QUIET,
        )
    assert float(np.asarray(idata.posterior["alpha"]).mean()) < far["alpha"] - 4.0
    messages = _ours(logged, MinibatchBarker)
    assert any("no longer fits" in m for m in messages)


def test_a_healthy_default_chain_reports_nothing(logged):
    model = gaussian_mean_model()
    with model:
        step = MinibatchBarker(progressbar=False)
        pm.sample(step=step, draws=300, tune=300, chains=1, random_seed=4, **QUIET)
    assert _ours(logged, MinibatchBarker) == []


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere])
def test_a_chain_that_cannot_mix_is_reported_in_words(logged, step_class):
    """Steps a thousand times too short and no tuning: every proposal is accepted (no
    'barely moves' warning), yet the chain crawls; the mixing check names the variable."""
    model = gaussian_mean_model()
    with model:
        step = step_class(
            proposal="rw", control_variates=False, scaling=1e-3, tune=False, progressbar=False
        )
    _sample(model, step, draws=500)
    messages = [m for m in _ours(logged, step_class) if "mixes too slowly" in m]
    assert len(messages) == 1, _ours(logged, step_class)
    assert "mu (ESS" in messages[0] and "Do not use these draws" in messages[0]
    assert not any("barely moves" in m for m in _ours(logged, step_class))


def _poisson_model(prior_sd: float = 3.0):
    rng = np.random.default_rng(8)
    x = rng.normal(size=300)
    with pm.Model() as model:
        a = pm.Normal("a", 0, prior_sd)
        b = pm.Normal("b", 0, prior_sd)
        pm.Poisson("y", mu=pm.math.exp(a + b * x), observed=rng.poisson(np.exp(0.2 + 0.5 * x)))
    return model


def test_the_mass_outside_the_trust_region_is_a_stat_and_negligible_by_default(logged):
    model = _poisson_model()
    with model:
        step = TunaMH(progressbar=False)
        idata = pm.sample(step=step, draws=50, tune=200, chains=1, random_seed=4, **QUIET)
    mass = np.asarray(group(idata, "sample_stats")["excluded_mass"])
    assert np.all(np.isfinite(mass)) and float(mass.max()) < 1e-6
    assert not [m for m in _ours(logged, TunaMH) if "importance-sampling" in m]


def test_a_region_that_cuts_off_mass_is_reported_in_words(logged):
    """A user radius of 0.5 Laplace sds leaves most of the posterior outside; TunaMH keeps
    a radius the user gave, estimates the excluded mass and warns (the default above is
    the control)."""
    model = _poisson_model()
    with model:
        step = TunaMH(trust_radius=0.5, progressbar=False)
        idata = pm.sample(step=step, draws=50, tune=200, chains=1, random_seed=4, **QUIET)
    mass = float(np.asarray(group(idata, "sample_stats")["excluded_mass"]).max())
    assert mass > 0.1
    messages = [m for m in _ours(logged, TunaMH) if "importance-sampling estimate" in m]
    assert len(messages) == 1 and "cut off" in messages[0]
