"""Data a minibatch step cannot use is refused with a clear message before any O(N) work:
NaN or inf in per-datum data, observations PyMC imputes, data of mismatched lengths."""

import warnings

import numpy as np
import pymc as pm
import pytest
from tall_builder import tall_data_of

import pymc_minibatch_mh.likelihood.tall_data as tall_data_module
import pymc_minibatch_mh.step_methods.base as step_base
from pymc_minibatch_mh import Austere, MinibatchBarker
from pymc_minibatch_mh.data.row_scan import non_finite_entries
from pymc_minibatch_mh.likelihood.inspection import imputed_counterpart

N = 400


def _build(model):
    return tall_data_of(model)


@pytest.fixture
def no_compilation(monkeypatch):
    """Fail the test if build_tall_data compiles anything (the refusal must come first)."""

    def compile_forbidden(*args, **kwargs):
        raise AssertionError("build_tall_data compiled a function before refusing the data")

    monkeypatch.setattr(tall_data_module, "compile_function", compile_forbidden)


@pytest.fixture
def design(rng):
    x = rng.normal(size=(N, 2))
    y = x @ np.array([1.0, -0.5]) + rng.normal(size=N)
    return x, y


def _regression(x, y, *, data_x=False, data_y=False):
    with pm.Model() as model:
        x_in = pm.Data("x", x) if data_x else x
        y_in = pm.Data("y_data", y) if data_y else y
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Normal("y", x_in @ beta, 1.0, observed=y_in)
    return model


def _imputing_model(build):
    """A model built with NaN observations: PyMC warns that it imputes them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm.ImputationWarning)
        return build()


# ------------------------------------------------------------------ non-finite data
def test_nan_in_numpy_covariate(design, no_compilation):
    x, y = design
    x[17, 1] = np.nan
    with pytest.raises(
        ValueError,
        match=(
            r"(?s)a numpy array of shape \(400, 2\) \(read by the likelihood of 'y'\) has 1 "
            r"non-finite entry \(NaN or inf\); the first is in row 17\..*"
            r"Drop or impute those rows with numpy before building the model"
        ),
    ):
        _build(_regression(x, y))


def test_inf_in_pm_data_covariate(design, no_compilation):
    x, y = design
    x[[40, 41, 300], 0] = np.inf
    with pytest.raises(
        ValueError,
        match=r"data input 'x' .* has 3 non-finite entries .*; the first is in row 40\.",
    ):
        _build(_regression(x, y, data_x=True))


def test_nan_set_into_pm_data_after_building_the_model(design, no_compilation):
    # pm.Data refuses NaN at creation, but not in a later set_data.
    x, y = design
    model = _regression(x, y, data_x=True)
    x_nan = x.copy()
    x_nan[N - 1] = np.nan
    with model:
        pm.set_data({"x": x_nan})
    with pytest.raises(ValueError, match=r"'x' .* has 2 non-finite entries .* row 399\."):
        _build(model)


@pytest.mark.parametrize("data_y", [False, True])
def test_inf_in_observed_data(design, data_y, no_compilation):
    x, y = design
    y[5] = -np.inf
    with pytest.raises(
        ValueError,
        match=(
            r"(?s)the observed data of 'y' has 1 non-finite entry .* row 5\..*PyMC's automatic "
            r"imputation makes them per-datum latent variables, which a minibatch step "
            r"cannot sample"
        ),
    ):
        _build(_regression(x, y, data_y=data_y))


def test_every_non_finite_input_is_listed(design, no_compilation):
    x, y = design
    x[3, 0] = np.inf
    y[8] = np.inf
    with pytest.raises(ValueError, match=r"(?s)data input 'x'.* row 3\.\n.*observed data of 'y'"):
        _build(_regression(x, y, data_x=True))


def test_nan_in_data_read_by_several_observed_variables(rng, no_compilation):
    x = rng.normal(size=N)
    x[250] = np.nan
    with pm.Model() as model:
        beta = pm.Normal("beta")
        pm.Normal("y1", beta * x, 1.0, observed=rng.normal(size=N))
        pm.Normal("y2", beta * x, 2.0, observed=rng.normal(size=N))
    with pytest.raises(
        ValueError, match=r"shape \(400,\) \(read by the likelihood of 'y1', 'y2'\) .* row 250"
    ):
        _build(model)


def test_nan_in_memory_mapped_covariate(tmp_path, design, no_compilation):
    x, y = design
    mapped = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", shape=x.shape)
    mapped[:] = x
    mapped[123, 0] = np.nan
    with pytest.raises(ValueError, match=r"1 non-finite entry .* row 123\."):
        _build(_regression(mapped, y))


def test_finite_data_with_integer_and_other_length_inputs_is_accepted(rng):
    # An integer per-datum index (cannot hold NaN) and a group-level table of another
    # length (not per-datum data) pass; the model builds.
    group = rng.integers(0, 3, size=N)
    table = np.array([0.5, 1.0, 2.0])
    y = rng.normal(size=N) * table[group]
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("y", mu, table[group], observed=y)
    data = _build(model)
    assert data.n_data == N
    assert np.all(np.isfinite(data.loglik_full(np.zeros(1))))


@pytest.mark.parametrize("chunk_rows", [1, 3, 65_536])
def test_non_finite_entries_streams_over_row_chunks(chunk_rows):
    value = np.zeros((10, 2, 2))
    value[7, 1, 0] = np.nan
    value[7, 0, 1] = np.inf
    value[9, 0, 0] = -np.inf
    assert non_finite_entries(value, chunk_rows=chunk_rows) == (3, 7)
    assert non_finite_entries(np.zeros(10), chunk_rows=chunk_rows) == (0, None)


def test_non_finite_entries_on_a_memmap_and_skips_integer_arrays(tmp_path):
    mapped = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", shape=(1000, 3))
    mapped[:] = 1.0
    mapped[999, 2] = np.nan
    assert non_finite_entries(mapped, chunk_rows=64) == (1, 999)
    assert non_finite_entries(np.arange(10)) == (0, None)
    assert non_finite_entries(np.ones(10, dtype=bool)) == (0, None)


def test_steps_refuse_a_nan_covariate_before_finding_the_map(design, monkeypatch):
    def map_forbidden(*args, **kwargs):
        raise AssertionError("find_map ran before the data was checked")

    monkeypatch.setattr(step_base, "find_map", map_forbidden)
    x, y = design
    x[17, 1] = np.nan
    with _regression(x, y):
        with pytest.raises(ValueError, match=r"numpy array of shape \(400, 2\) .* row 17\."):
            MinibatchBarker(control_variates=True, progressbar=False)
        with pytest.raises(ValueError, match=r"numpy array of shape \(400, 2\) .* row 17\."):
            Austere(proposal="laplace", progressbar=False)


# ------------------------------------------------------------------ imputed observations
def test_imputed_observations_are_refused(design, no_compilation):
    x, y = design
    y[[5, 8]] = np.nan
    model = _imputing_model(lambda: _regression(x, y))
    with pytest.raises(
        ValueError,
        match=(
            r"Observed variable 'y' has 2 missing values \(NaN in `observed=`\), which PyMC "
            r"imputes as the latent variable 'y_unobserved': .* which a minibatch step "
            r"cannot sample .* Drop the rows with missing observations .* or impute them "
            r"beforehand\."
        ),
    ):
        _build(model)


def test_imputed_multivariate_observations_are_refused(rng, no_compilation):
    # A row missing in part makes PyMC use a PartialObservedRV; 3 missing entries here.
    y = rng.normal(size=(N, 2))
    y[4, 1] = np.nan
    y[7] = np.nan

    def build():
        with pm.Model() as model:
            mu = pm.Normal("mu", shape=2)
            pm.MvNormal("w", mu, np.eye(2), observed=y)
        return model

    with pytest.raises(ValueError, match=r"Observed variable 'w' has 3 missing values"):
        _build(_imputing_model(build))


def test_imputed_observations_are_refused_before_other_length_checks(design, no_compilation):
    # y_observed has N - 1 rows, z has N: the imputation is the problem to report.
    x, y = design
    y[0] = np.nan

    def build():
        model = _regression(x, y)
        with model:
            pm.Normal("z", model["beta"][0], 1.0, observed=x[:, 0])
        return model

    with pytest.raises(ValueError, match=r"Observed variable 'y' has 1 missing values"):
        _build(_imputing_model(build))


def test_step_refuses_imputed_observations(design):
    x, y = design
    y[[5, 8]] = np.nan
    with _imputing_model(lambda: _regression(x, y)):
        with pytest.raises(ValueError, match=r"'y' has 2 missing values .* 'y_unobserved'"):
            MinibatchBarker(progressbar=False)


def test_imputed_counterpart_needs_pymcs_whole_pattern(rng):
    y = rng.normal(size=N)
    y_nan = y.copy()
    y_nan[3] = np.nan
    imputed = _imputing_model(lambda: _regression(rng.normal(size=(N, 2)), y_nan))
    assert imputed_counterpart(imputed, imputed["y_observed"]) is imputed["y_unobserved"]
    # The same names without PyMC's join of the two parts are not an imputation.
    with pm.Model() as lookalike:
        y_unobserved = pm.Normal("y_unobserved")
        observed = pm.Normal("y_observed", y_unobserved, 1.0, observed=y)
        pm.Deterministic("y", 2 * y_unobserved)
    assert imputed_counterpart(lookalike, observed) is None
    assert _build(lookalike).n_data == N


# ------------------------------------------------------------------ mismatched lengths
def test_covariate_of_another_length_gives_our_error(design):
    # pm.Data hides the length from PyMC's static shape checks: without our check the
    # error would be PyTensor's "Input dimension mismatch" from inside the graph.
    x, y = design
    with pm.Model() as model:
        x_in = pm.Data("x", x)
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Normal("y", x_in @ beta, 1.0, observed=y[:-10])
    with pytest.raises(
        ValueError,
        match=(
            r"the observed data have N = 390 rows, but the likelihood also reads data with "
            r"another number of rows \(x: 400 rows\)\. Every per-datum array"
        ),
    ) as caught:
        _build(model)
    assert caught.value.__cause__ is not None  # PyTensor's error is kept as the cause


# ------------------------------------------------------------------ data outside the support
def _glm(family, y, x):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        eta = beta[0] + beta[1] * x
        if family == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=y)
        elif family == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
        elif family == "gamma":
            pm.Gamma("y", alpha=2.0, beta=2.0 / pm.math.exp(eta), observed=y)
        elif family == "beta":
            pm.Beta("y", mu=pm.math.sigmoid(eta), nu=5.0, observed=y)
    return model


@pytest.mark.parametrize(
    "family, good, bad, words",
    [
        ("bernoulli", 1, 2, "Bernoulli likelihood, whose values are 0 or 1"),
        ("poisson", 3, -1, "Poisson likelihood, whose values are non-negative integers"),
        ("gamma", 1.5, 0.0, "Gamma likelihood, whose values are positive numbers"),
        ("beta", 0.4, 1.0, "Beta likelihood, whose values are numbers strictly between 0 and 1"),
    ],
)
def test_observations_outside_the_support_are_refused_with_row_and_value(
    no_compilation, rng, family, good, bad, words
):
    y = np.full(N, good, dtype=float)
    y[[37, 200]] = bad
    model = _glm(family, y, rng.normal(size=N))
    with pytest.raises(ValueError) as info:
        _build(model)
    message = str(info.value)
    assert words in message
    assert f"row 37 of its data holds {bad!r}" in message and "(2 rows in all)" in message
    assert "Correct or drop those rows" in message


def test_binomial_successes_above_the_trials_are_refused(no_compilation, rng):
    trials = rng.integers(1, 6, N)
    y = np.minimum(trials, 2)
    y[44] = trials[44] + 1
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.Binomial("y", n=pm.Data("trials", trials), logit_p=b * np.ones(N), observed=y)
    with pytest.raises(ValueError, match=f"row 44 of its data holds {y[44]} successes of "):
        _build(model)


def test_data_inside_the_support_pass_the_check(rng):
    # The negative control: the same models with valid data build.
    x = rng.normal(size=N)
    for family, y in [
        ("bernoulli", rng.integers(0, 2, N)),
        ("poisson", rng.poisson(2.0, N)),
        ("gamma", rng.gamma(2.0, 1.0, N)),
        ("beta", rng.uniform(0.01, 0.99, N)),
    ]:
        assert _build(_glm(family, y, x)).n_data == N


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere])
def test_an_extreme_covariate_is_named_with_its_row(rng, step_class):
    """A covariate of 1e300 (a missing-value code) overflows the likelihood's derivatives:
    the message names the row and the value, not the reference point."""
    x = rng.normal(size=N)
    x[5] = 1e300
    model = _glm("bernoulli", rng.integers(0, 2, N), x)
    with model, pytest.raises(ValueError) as info:
        step_class(progressbar=False)
    message = str(info.value)
    assert "row 5" in message and "1e+300" in message
    assert "missing-value code" in message
