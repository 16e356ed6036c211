"""Each step reports where its construction time went: setup_s, compile_s, n_data_passes,
and whether its compile caches were cold or warm."""

import time

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.likelihood import function_cache
from pymc_minibatch_mh.likelihood.shared_functions import share_between_steps
from pymc_minibatch_mh.step_methods.setup_timing import setup_cache


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


def test_construction_says_whether_its_compile_caches_were_cold_or_warm(
    logistic, tmp_path, monkeypatch
):
    """``setup_cache``: "cold" when the step compiled its functions, "warm" when it
    loaded all of them from the on-disk cache (an empty cache directory stands for a
    machine that never compiled this model)."""
    monkeypatch.setenv(function_cache.ENVIRONMENT_VARIABLE, str(tmp_path))
    share_between_steps(False)  # every step compiles or loads its own functions
    try:
        function_cache.use_function_cache(True)
        with logistic:
            first = TunaMH(progressbar=False)
            second = TunaMH(progressbar=False)
        function_cache.use_function_cache(False)
        with logistic:
            uncached = TunaMH(progressbar=False)
    finally:
        function_cache.use_function_cache(True)
        share_between_steps(True)
    assert first.setup_cache == "cold"
    assert first.functions_compiled >= 5 and first.functions_loaded == 0
    assert second.setup_cache == "warm"
    assert second.functions_compiled == 0
    assert second.functions_loaded == first.functions_compiled
    # Negative control: with the cache off, the same construction compiles again.
    assert uncached.setup_cache == "cold"
    assert uncached.functions_compiled == first.functions_compiled + first.functions_uncacheable
    # The recogniser's probe functions cannot be keyed: compiled every time, not counted.
    assert second.functions_uncacheable == first.functions_uncacheable


def _logistic_of_size(n):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(n, 2))
    y = rng.random(n) < 1 / (1 + np.exp(-(x @ np.array([1.0, -0.5]))))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y.astype(int))
    return model


def _barkers_in_a_fresh_cache(tmp_path, monkeypatch, models: list) -> list:
    """``MinibatchBarker()`` on each model in turn, with an empty on-disk function cache
    and no sharing between steps (so that only the cache can make one warm)."""
    monkeypatch.setenv(function_cache.ENVIRONMENT_VARIABLE, str(tmp_path))
    share_between_steps(False)
    steps = []
    try:
        for model in models:
            with model:
                steps.append(MinibatchBarker(progressbar=False))
    finally:
        share_between_steps(True)
    return steps


def test_the_same_model_on_more_rows_loads_every_function(tmp_path, monkeypatch):
    """No compiled function holds N (the data are inputs, and so is the length PyMC
    broadcasts an observed log-density to): the model on new rows is warm (control: the
    same N again)."""
    models = [_logistic_of_size(3000), _logistic_of_size(4000), _logistic_of_size(4000)]
    first, other_n, same_n = _barkers_in_a_fresh_cache(tmp_path, monkeypatch, models)
    assert first.setup_cache == "cold"
    assert other_n.setup_cache == "warm" and other_n.functions_compiled == 0
    assert same_n.functions_loaded == other_n.functions_loaded == first.functions_compiled


def test_a_step_reusing_another_steps_functions_is_warm(logistic):
    share_between_steps(True)
    with logistic:
        MinibatchBarker(progressbar=False)
        again = MinibatchBarker(progressbar=False)
    assert again.functions_compiled == 0 and again.setup_cache == "warm"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_step_whose_functions_cannot_be_cached_is_cold():
    """A block that leaves a free variable of the likelihood outside reads it through a
    shared variable: the cache cannot key such graphs, so every process compiles them."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2000, 2))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 5, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", x @ beta, sigma, observed=x @ [1.0, -0.5] + rng.normal(size=2000))
    with model:
        steps = [MinibatchBarker(vars=[beta], progressbar=False) for _ in range(2)]
    for step in steps:
        assert step.functions_uncacheable >= 3
        assert step.functions_compiled == step.functions_loaded == 0
        assert step.setup_cache == "cold"


@pytest.mark.parametrize(
    ("compiled", "loaded", "uncacheable", "expected"),
    [
        (0, 0, 0, "warm"),
        (0, 7, 0, "warm"),
        (0, 7, 3, "warm"),
        (0, 0, 6, "cold"),
        (7, 0, 0, "cold"),
        (3, 4, 0, "partly warm"),
    ],
)
def test_setup_cache_labels(compiled, loaded, uncacheable, expected):
    assert setup_cache(compiled, loaded, uncacheable) == expected


def _groups_of_size(n, groups=12):
    rng = np.random.default_rng(n)
    label = rng.integers(0, groups, n)
    x = rng.normal(size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        sigma_a = pm.HalfNormal("sigma_a", 1)
        a = pm.Normal("a", mu, sigma_a, shape=groups)
        b = pm.Normal("b", 0, 2)
        sigma = pm.HalfNormal("sigma", 2)
        y = rng.normal(size=groups)[label] + 0.5 * x + rng.normal(size=n)
        pm.Normal("y", a[label] + b * x, sigma, observed=y)
    return model


def test_a_hierarchy_on_new_rows_and_group_labels_loads_every_function(tmp_path, monkeypatch):
    """The recogniser's graphs read the group labels as data inputs too (not constants): a
    multilevel model on new rows with new labels is warm. Control: one more group (a new
    graph) compiles again."""
    models = [_groups_of_size(3000), _groups_of_size(4000), _groups_of_size(4000, groups=13)]
    first, new_rows, new_graph = _barkers_in_a_fresh_cache(tmp_path, monkeypatch, models)
    assert first.setup_cache == "cold"
    assert new_rows.setup_cache == "warm" and new_rows.functions_compiled == 0
    assert new_graph.functions_compiled > 0
