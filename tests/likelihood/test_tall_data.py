"""Per-datum likelihood functions built from unmodified PyMC models."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph.fg import FunctionGraph
from scipy import stats
from tall_builder import tall_data_of

from pymc_minibatch_mh.data import blocks as data_blocks
from pymc_minibatch_mh.likelihood import likelihood_value_vars
from pymc_minibatch_mh.likelihood.batching import gather_rows, per_datum_sum
from pymc_minibatch_mh.likelihood.graph_tools import data_value

N = 500


def _build(model, value_vars=None, **kwargs):
    return tall_data_of(model, value_vars, **kwargs)


def _raveled(model, point, value_vars=None):
    value_vars = value_vars or model.value_vars
    return np.concatenate([np.ravel(point[v.name]) for v in value_vars]).astype(float)


@pytest.fixture
def regression_data(rng):
    x = rng.normal(size=(N, 2))
    y = x @ np.array([1.0, -2.0]) + 0.5 + rng.normal(scale=0.7, size=N)
    return x, y


def _regression(x, y, as_data=False, dims=False):
    coords = {"obs": np.arange(N), "coef": [0, 1]} if dims else None
    with pm.Model(coords=coords) as model:
        if as_data:
            x_in = pm.Data("x", x, dims=("obs", "coef") if dims else None)
            y_in = pm.Data("y_obs", y, dims="obs" if dims else None)
        else:
            x_in, y_in = x, y
        beta = pm.Normal("beta", 0, 5, shape=2, dims="coef" if dims else None)
        alpha = pm.Normal("alpha", 0, 5)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", alpha + x_in @ beta, sigma, observed=y_in, dims="obs" if dims else None)
    return model


@pytest.mark.parametrize(("as_data", "dims"), [(False, False), (True, False), (True, True)])
def test_batch_matches_closed_form_and_model_logp(regression_data, rng, as_data, dims):
    x, y = regression_data
    model = _regression(x, y, as_data=as_data, dims=dims)
    data = _build(model, data_dim="obs" if dims else None)
    assert data.n_data == N and data.ndim == 4

    point = {"beta": np.array([0.8, -1.5]), "alpha": 0.3, "sigma_log__": np.log(0.9)}
    q = _raveled(model, point)
    idx = rng.integers(0, N, size=37)
    expected = stats.norm.logpdf(y[idx], 0.3 + x[idx] @ point["beta"], 0.9)
    np.testing.assert_allclose(data.loglik(q, idx), expected, rtol=1e-10)
    np.testing.assert_allclose(data.loglik_full(q)[idx], expected, rtol=1e-10)
    np.testing.assert_allclose(
        data.loglik_diff(q, q + 0.01, idx), expected - data.loglik(q + 0.01, idx), rtol=1e-8
    )
    # Prior (with the log-transform Jacobian) + likelihood = the model's joint logp.
    total = data.logprior(q) + data.loglik_full(q).sum()
    assert total == pytest.approx(model.compile_logp()(point), rel=1e-10)


@pytest.mark.parametrize(("as_data", "dims"), [(False, False), (True, True)])
def test_full_evaluation_in_row_blocks_equals_one_call(regression_data, monkeypatch, as_data, dims):
    """Above BLOCK_ROWS rows, loglik_full runs block by block (last block short):
    the same values as one call of the full-data function."""
    x, y = regression_data
    data = _build(_regression(x, y, as_data=as_data, dims=dims), data_dim="obs" if dims else None)
    q = np.array([0.8, -1.5, 0.3, np.log(0.9)])
    monkeypatch.setattr(data_blocks, "BLOCK_ROWS", 64)
    blocked = data.loglik_full(q)
    assert blocked.shape == (N,)
    np.testing.assert_allclose(blocked, data._loglik_full_fn(q), rtol=1e-12)


def test_several_observed_variables_share_the_datum_axis(rng):
    y1 = rng.normal(size=N)
    y2 = rng.poisson(3.0, size=(N, 3))
    with pm.Model() as model:
        mu = pm.Normal("mu")
        lam = pm.Gamma("lam", 2, 1)
        pm.Normal("y1", mu, 1, observed=y1)
        pm.Poisson("y2", lam, observed=y2)
    data = _build(model)
    q = np.array([0.2, np.log(2.5)])
    idx = np.array([0, 7, 7, N - 1])
    expected = stats.norm.logpdf(y1[idx], 0.2) + stats.poisson.logpmf(y2[idx], 2.5).sum(axis=1)
    np.testing.assert_allclose(data.loglik(q, idx), expected, rtol=1e-10)


@pytest.mark.parametrize("as_data", [False, True])
def test_batch_graph_gathers_every_data_input(regression_data, as_data):
    """Structural check that a call costs O(len(idx)): N-row data is only ever indexed."""
    x, y = regression_data
    model = _regression(x, y, as_data=as_data)
    idx = pt.vector("idx", dtype="int64")
    per_datum = per_datum_sum(model.logp(vars=model.observed_RVs, sum=False))
    batched = gather_rows(per_datum, idx, N)
    fgraph = FunctionGraph(outputs=[batched], clone=False)
    n_data_inputs = 0
    for var in fgraph.variables:
        value = data_value(var)
        if value is None or value.ndim == 0 or value.shape[0] != N:
            continue
        n_data_inputs += 1
        for client, _ in fgraph.clients[var]:
            assert type(client.op).__name__.startswith("AdvancedSubtensor"), client.op
    assert n_data_inputs == 2


def test_default_value_vars_are_likelihood_parents(rng):
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("unrelated", 0, 1)
        pm.Normal("y", mu, 1, observed=rng.normal(size=N))
    assert [v.name for v in likelihood_value_vars(model)] == ["mu"]


def test_other_variables_enter_through_shared_values(rng):
    y = rng.normal(size=N)
    with pm.Model() as model:
        mu = pm.Normal("mu")
        sigma = pm.HalfNormal("sigma")
        pm.Normal("y", mu, sigma, observed=y)
    mu_value = model.rvs_to_values[mu]
    data = _build(model, value_vars=[mu_value])
    assert data.ndim == 1
    idx = np.arange(5)
    np.testing.assert_allclose(
        data.loglik(np.array([0.1]), idx), stats.norm.logpdf(y[idx], 0.1, 1.0), rtol=1e-10
    )


# ---------------------------------------------------------------- refusals
def test_no_observed_data():
    with pm.Model() as model:
        pm.Normal("mu")
    with pytest.raises(ValueError, match="no observed variables") as refusal:
        _build(model)
    assert "prior-only" in str(refusal.value) and "CustomDist" not in str(refusal.value)


def test_a_likelihood_written_as_a_potential_is_refused_with_the_observed_way(rng):
    y = rng.normal(size=N)
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Potential("loglik", pm.logp(pm.Normal.dist(mu, 1.0), y).sum())
    with pytest.raises(ValueError, match="no observed variables") as refusal:
        _build(model)
    assert "'loglik'" in str(refusal.value) and "pm.CustomDist" in str(refusal.value)


def test_observed_of_different_lengths_are_stacked(rng):
    """Two data sets of different lengths: one stacked axis of N + (N + 1) rows
    (tests/likelihood/test_stacked_rows.py checks its values)."""
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("a", mu, 1, observed=rng.normal(size=N))
        pm.Normal("b", mu, 1, observed=rng.normal(size=N + 1))
    assert _build(model).n_data == 2 * N + 1


def test_local_latent_variable(rng):
    with pm.Model() as model:
        z = pm.Normal("z", shape=N)
        pm.Normal("y", z, 1, observed=rng.normal(size=N))
    with pytest.raises(ValueError, match="per-datum \\(local\\) latent"):
        _build(model)


def test_discrete_variable_in_block(rng):
    with pm.Model() as model:
        k = pm.Poisson("k", 3)
        pm.Normal("y", k, 1, observed=rng.normal(size=N))
    with pytest.raises(ValueError, match="discrete"):
        _build(model)


def test_pm_minibatch_data(rng):
    y = rng.normal(size=N)
    with pm.Model() as model:
        mu = pm.Normal("mu")
        y_mb = pm.Minibatch(y, batch_size=50)
        pm.Normal("y", mu, 1, observed=y_mb, total_size=N)
    with pytest.raises(ValueError, match="total_size|Minibatch"):
        _build(model)


def test_pm_minibatch_without_total_size(rng):
    y = rng.normal(size=N)
    with pm.Model() as model:
        mu = pm.Normal("mu")
        y_mb = pm.Minibatch(y, batch_size=50)
        with pytest.warns(UserWarning):
            pm.Normal("y", mu, 1, observed=y_mb)
    with pytest.raises(ValueError, match="pm.Minibatch"):
        _build(model)


def test_total_size(rng):
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1, observed=rng.normal(size=N), total_size=10 * N)
    with pytest.raises(ValueError, match="total_size"):
        _build(model)


def test_scalar_observation():
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1, observed=1.0)
    with pytest.raises(ValueError, match="scalar"):
        _build(model)


def test_wrong_data_dim(rng):
    with pm.Model(coords={"obs": np.arange(N), "other": [0, 1]}) as model:
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1, observed=rng.normal(size=N), dims="obs")
    with pytest.raises(ValueError, match="not a dimension"):
        _build(model, data_dim="rows")
    with pytest.raises(ValueError, match="has length 2"):
        _build(model, data_dim="other")


def test_data_with_datum_axis_not_first(rng):
    with pm.Model() as model:
        xt = pm.Data("xt", rng.normal(size=(2, N)))  # shared: not constant-folded
        beta = pm.Normal("beta", shape=2)
        pm.Normal("y", beta @ xt, 1, observed=rng.normal(size=N))
    with pytest.raises(ValueError, match="not the leading axis"):
        _build(model)


def test_gradients_match_finite_differences(regression_data, rng):
    x, y = regression_data
    model = _regression(x, y)
    data = _build(model, gradients=True)
    q = rng.normal(scale=0.3, size=data.ndim)
    idx = rng.integers(0, N, size=40)
    weights = rng.uniform(0.5, 2.0, size=40)
    eps = 1e-6
    fd_lik, fd_prior = np.empty(data.ndim), np.empty(data.ndim)
    for k in range(data.ndim):
        e = np.zeros(data.ndim)
        e[k] = eps
        up, down = weights @ data.loglik(q + e, idx), weights @ data.loglik(q - e, idx)
        fd_lik[k] = (up - down) / (2 * eps)
        fd_prior[k] = (data.logprior(q + e) - data.logprior(q - e)) / (2 * eps)
    np.testing.assert_allclose(data.loglik_weighted_grad(q, idx, weights), fd_lik, rtol=1e-5)
    np.testing.assert_allclose(data.logprior_grad(q), fd_prior, rtol=1e-5, atol=1e-8)


def test_gradients_must_be_requested(regression_data):
    x, y = regression_data
    data = _build(_regression(x, y))
    assert not data.has_gradients
    with pytest.raises(RuntimeError, match="gradients=True"):
        data.logprior_grad(np.zeros(data.ndim))


def test_integer_pm_data_observations_are_read_through_the_cast(rng):
    x = rng.normal(size=N)
    y = (rng.random(N) < 0.5).astype("int64")
    with pm.Model() as model:
        y_data = pm.Data("y_data", y)
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("y", logit_p=b * x, observed=y_data)
    data = _build(model)
    idx = np.array([0, 5, 7])
    expected = stats.bernoulli.logpmf(y[idx], 1 / (1 + np.exp(-0.5 * x[idx])))
    np.testing.assert_allclose(data.loglik(np.array([0.5]), idx), expected, rtol=1e-10)


def test_statistics_over_all_rows_in_the_graph_are_refused(regression_data):
    x, y = regression_data
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        x_data = pm.Data("x_data", x)  # shared data: the mean is not constant-folded
        centred = x_data - x_data.mean(axis=0)
        pm.Normal("y", centred @ b, 1.0, observed=y)
    with pytest.raises(ValueError, match="depends on other rows"):
        _build(model)
