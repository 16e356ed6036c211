import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker, compare
from pymc_minibatch_mh.diagnostics import posterior_errors

COLUMNS = {
    "setup_s",
    "compile_s",
    "setup_cache",
    "n_data_passes",
    "wall_time_s",
    "ess_bulk_min",
    "ess_per_s",
    "mean_batch_size",
    "lik_evals_per_ess",
    "accept_rate",
    "max_mean_err_sd",
    "max_sd_rel_err",
    "n_data",
    "mc_error_sd",
    "verdict",
    "agrees",
}


@pytest.fixture(scope="module")
def model():
    y = np.random.default_rng(9).normal(0.5, 1.0, size=3000)
    with pm.Model() as m:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.0, observed=y)
    return m


def test_compare_table_against_nuts(model):
    table, traces = compare(
        model,
        {"barker": MinibatchBarker, "barker_hot": lambda: MinibatchBarker(temperature=50.0)},
        draws=300,
        tune=300,
        chains=2,
        random_seed=3,
        return_traces=True,
    )
    assert isinstance(table, pd.DataFrame)
    assert list(table.index) == ["nuts", "barker", "barker_hot"]
    assert COLUMNS <= set(table.columns)
    assert set(traces) == {"nuts", "barker", "barker_hot"}
    assert table.loc["nuts", "max_mean_err_sd"] == 0.0
    assert table.loc["nuts", "mean_batch_size"] == 3000
    assert 0 < table.loc["barker", "mean_batch_size"] <= 3000
    # The tempered posterior is ~sqrt(50) times wider: compare() must flag it.
    assert table.loc["barker_hot", "max_sd_rel_err"] > 2.0
    assert table.loc["barker_hot", "verdict"] == "disagree"
    assert not table.loc["barker_hot", "agrees"]
    assert table.loc["nuts", "verdict"] == "reference" and table.loc["nuts", "agrees"]
    assert table.loc["barker", "verdict"] in ("agree", "inconclusive")
    assert (table["n_data"] == 3000).all() and table.attrs["n_rows"] is None
    assert table.attrs["summary"].startswith("All N = 3,000 rows sampled; reference: NUTS")
    # With control variates (the default) both read about one batch of 100 rows per draw.
    assert table.loc["barker_hot", "mean_batch_size"] <= table.loc["barker", "mean_batch_size"]
    assert table.loc["barker", "mean_batch_size"] < 300
    assert (table["ess_per_s"] > 0).all() and (table["lik_evals_per_ess"] > 0).all()
    # Where the time went: setup within the wall time, compilation within the setup;
    # the default step makes at least its Taylor pass over the data. NUTS has neither.
    barker = table.loc["barker"]
    assert 0 < barker["compile_s"] <= barker["setup_s"] < barker["wall_time_s"]
    assert barker["n_data_passes"] >= 1
    assert np.isnan(table.loc["nuts", "compile_s"]) and np.isnan(table.loc["nuts", "n_data_passes"])
    # Whether the step's functions were compiled or loaded; NUTS has no such report.
    assert barker["setup_cache"] in ("cold", "warm", "partly warm")
    assert table.loc["nuts", "setup_cache"] == ""


def test_compare_with_given_reference_draws(model):
    # The exact posterior of mu (conjugate: prior N(0, 10^2), unit noise), and a copy of
    # it moved by half a posterior sd (a wrong reference, the negative control).
    y = np.random.default_rng(9).normal(0.5, 1.0, size=3000)
    precision = y.size + 1 / 100
    exact = np.random.default_rng(0).normal(y.sum() / precision, precision**-0.5, size=4000)
    table = compare(
        model,
        {"barker": MinibatchBarker},
        reference={"mu": exact},
        draws=300,
        tune=300,
        chains=2,
        random_seed=1,
    )
    assert list(table.index) == ["barker"]
    assert table.loc["barker", "max_mean_err_sd"] < 0.2
    assert table.loc["barker", "verdict"] == "agree"
    assert "reference: the given draws" in table.attrs["summary"]
    moved = compare(
        model,
        {"barker": MinibatchBarker},
        reference={"mu": exact + 0.5 * precision**-0.5},
        draws=300,
        tune=300,
        chains=2,
        random_seed=1,
    )
    assert moved.loc["barker", "verdict"] == "disagree"
    assert moved.loc["barker", "max_mean_err_sd"] == pytest.approx(0.5, abs=0.2)


def test_compare_rejects_unknown_reference(model):
    with pytest.raises(ValueError, match="reference"):
        compare(model, {}, reference="smc")
    # Draws that name none of the model's coordinates are refused before any sampling.
    with pytest.raises(ValueError, match="name no coordinate of the variables scored"):
        compare(model, {"barker": MinibatchBarker}, reference={"sigma": np.arange(3.0)})


def test_compare_rejects_tolerances_that_are_not_positive(model):
    with pytest.raises(ValueError, match="mean_tol must be a positive number"):
        compare(model, {}, mean_tol=-0.1)


def test_posterior_errors():
    ref = {"a": np.array([0.0, 2.0])}  # mean 1, sd 1
    mean_err, sd_err = posterior_errors({"a": np.array([1.5, 3.5])}, ref)
    assert mean_err == pytest.approx(1.5) and sd_err == pytest.approx(0.0)


def test_metropolis_is_charged_two_passes_per_coordinate_proposal():
    """PyMC's Metropolis on a 3-vector updates one coordinate at a time, evaluating the full
    log density at two points per proposal: 6 N likelihood terms per draw."""
    n = 500
    x = np.random.default_rng(2).normal(size=(n, 3))
    y = x @ np.array([1.0, -1.0, 0.5]) + np.random.default_rng(3).normal(size=n)
    with pm.Model() as linear:
        beta = pm.Normal("beta", 0, 5, shape=3)
        pm.Normal("y", x @ beta, 1.0, observed=y)
    draws, chains = 60, 1
    table = compare(
        linear,
        {"metropolis": pm.Metropolis},
        reference={"beta[0]": np.array([0.0, 2.0])},
        draws=draws,
        tune=20,
        chains=chains,
        random_seed=4,
    )
    row = table.loc["metropolis"]
    assert row["mean_batch_size"] == n
    assert row["lik_evals_per_ess"] * row["ess_bulk_min"] == pytest.approx(6 * n * draws * chains)


def test_reference_without_spread_is_refused():
    with pytest.raises(ValueError, match="no spread"):
        posterior_errors({"a": np.array([1.0, 2.0])}, {"a": np.zeros(3)})


def test_a_chain_that_never_moves_is_reported_not_a_crash(model):
    # A Metropolis step with a zero proposal scale never moves: ESS 0. compare() divided
    # by it before; now the row says so and the verdict cannot be "agree".
    table = compare(
        model,
        {"stuck": lambda: pm.Metropolis(scaling=0.0, tune=None)},
        draws=100,
        tune=0,
        chains=2,
        random_seed=3,
    )
    row = table.loc["stuck"]
    assert row["ess_bulk_min"] == 0
    assert row["lik_evals_per_ess"] == np.inf
    assert row["verdict"] in ("inconclusive", "disagree")
    assert table.loc["nuts", "verdict"] == "reference"
