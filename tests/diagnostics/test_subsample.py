"""A model rebuilt on a random subsample of its rows: the same model on those rows only,
read from numpy, memmap, zarr or Dask data, with the user's model left as it was."""

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import chunked_data, tall_array
from pymc_minibatch_mh.diagnostics import subsample_model, subsample_rows
from pymc_minibatch_mh.diagnostics.subsample import MIN_ROWS

N = 4_000


def _design(n=N, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = (rng.random(n) < special.expit(0.3 + x @ np.array([1.0, -0.5]))).astype(np.int8)
    return x, y


def _regression(x, y, group, *, x_data, y_data):
    """Logistic regression with a group effect and a Gaussian second response, with every
    kind of per-row input: a covariate container, pm.Data with a dimension, numpy."""
    with pm.Model(coords={"obs": np.arange(len(y)) * 10, "k": ["u", "v"]}) as model:
        X = x_data(x)
        beta = pm.Normal("beta", 0, 2, dims="k")
        alpha = pm.Normal("alpha", 0, 2, shape=3)
        sigma = pm.HalfNormal("sigma")
        g = pm.Data("g", group, dims="obs")
        eta = pm.Deterministic("eta", alpha[g] + X @ beta, dims="obs")
        pm.Bernoulli("y", logit_p=eta, observed=y_data(y), dims="obs")
        pm.Normal("z", 0.5 * eta, sigma, observed=x[:, 0] + x[:, 1])
    return model


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    x, y = _design()
    path = tmp_path_factory.mktemp("rows") / "x.npy"
    np.save(path, x)
    group = np.random.default_rng(1).integers(0, 3, size=N)
    return np.load(path, mmap_mode="r"), y, group


def test_rows_are_distinct_sorted_and_fixed_by_the_seed():
    rows = subsample_rows(10**8, 5_000, random_seed=7)
    assert rows.size == 5_000 and np.all(np.diff(rows) > 0) and 0 <= rows[0] < rows[-1] < 10**8
    np.testing.assert_array_equal(rows, subsample_rows(10**8, 5_000, random_seed=7))
    assert not np.array_equal(rows, subsample_rows(10**8, 5_000, random_seed=8))


def test_the_rebuilt_model_is_the_model_on_those_rows(data):
    x, y, group = data
    model = _regression(x, y, group, x_data=lambda v: tall_array("X", v), y_data=lambda v: v)
    sub = subsample_model(model, 1_500, random_seed=3)
    rows = sub.rows
    assert sub.n_data == N and rows.size == 1_500
    # The same model written directly on the rows has the same log density everywhere.
    direct = _regression(
        np.asarray(x[rows]), y[rows], group[rows], x_data=lambda v: v, y_data=lambda v: v
    )
    point = {"beta": np.array([0.3, -1.1]), "alpha": np.array([0.2, -0.4, 0.9]), "sigma_log__": 0.1}
    assert sub.model.compile_logp()(point) == pytest.approx(direct.compile_logp()(point), rel=1e-12)
    assert sub.model.compile_logp()(point) != pytest.approx(model.compile_logp()(point), rel=0.1)
    # Rows, coordinates and data containers follow; the other dimension does not.
    np.testing.assert_array_equal(sub.model.rvs_to_values[sub.model["y"]].eval(), y[rows])
    assert sub.model.coords["obs"] == tuple(10 * rows)
    assert sub.model.coords["k"] == ("u", "v")
    np.testing.assert_array_equal(sub.model["g"].get_value(), group[rows])
    assert [v.name for v in sub.model.data_vars] == ["g"]
    assert {rv.name for rv in sub.model.free_RVs} == {"beta", "alpha", "sigma"}
    # The user's model is as it was.
    assert model["g"].get_value().shape == (N,) and int(model.dim_lengths["obs"].eval()) == N
    assert model["X"].get_value(borrow=True).shape == (N, 2)


def test_new_data_on_the_rebuilt_model_leave_the_original_alone(data):
    x, y, group = data
    model = _regression(x, y, group, x_data=lambda v: v, y_data=lambda v: v)
    sub = subsample_model(model, 1_200, random_seed=0)
    with sub.model:
        pm.set_data({"g": np.zeros(5, dtype=int)}, coords={"obs": range(5)})
    assert model["g"].get_value().shape == (N,)
    np.testing.assert_array_equal(model["g"].get_value(), group)


def test_zarr_and_dask_rows_are_read(data):
    zarr = pytest.importorskip("zarr")
    dask_array = pytest.importorskip("dask.array")
    x, y, group = data
    zx = zarr.create_array(store={}, data=np.asarray(x, dtype=np.float32), chunks=(500, 2))
    dy = dask_array.from_array(y, chunks=700)
    model = _regression(
        x,
        y,
        group,
        x_data=lambda v: chunked_data(zx, "X"),
        y_data=lambda v: tall_array("Y", dy, keep_in_idata=True),
    )
    sub = subsample_model(model, 1_000, random_seed=2)
    np.testing.assert_array_equal(sub.model.rvs_to_values[sub.model["y"]].eval(), y[sub.rows])
    # The registered data container holds the rows too (and the original its Dask array).
    np.testing.assert_array_equal(sub.model["Y"].get_value(), y[sub.rows])
    assert model["Y"].get_value(borrow=True) is dy
    eta = sub.model["eta"]
    point = {"beta": np.array([1.0, 2.0]), "alpha": np.zeros(3)}
    values = eta.eval({sub.model["beta"]: point["beta"], sub.model["alpha"]: point["alpha"]})
    expected = np.asarray(x[sub.rows], dtype=np.float32) @ point["beta"]
    np.testing.assert_allclose(values, expected, rtol=1e-6)


def test_subsample_sizes_out_of_range_are_refused(data):
    x, y, group = data
    model = _regression(x, y, group, x_data=lambda v: v, y_data=lambda v: v)
    with pytest.raises(ValueError, match="not smaller than the data"):
        subsample_model(model, N)
    with pytest.raises(ValueError, match=f"below the smallest subsample, {MIN_ROWS} rows"):
        subsample_model(model, MIN_ROWS - 1)
    with pytest.raises(TypeError, match="n_rows must be an integer"):
        subsample_model(model, 1500.0)


def test_models_whose_data_cannot_be_subsampled_are_refused_with_the_reason():
    x, y = _design(n=3_000)
    with pm.Model() as latent:
        z = pm.Normal("z", 0, 1, shape=len(y))  # one latent value per row
        pm.Normal("y", z, 1.0, observed=y)
    with pytest.raises(ValueError, match="Free variable 'z' depends on the data rows"):
        subsample_model(latent, 1_500)
    with pm.Model() as transposed:
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=beta @ x.T, observed=y)  # rows along axis 1 of x.T
    with pytest.raises(ValueError, match="axis of length N = 3000 that is not the first"):
        subsample_model(transposed, 1_500)
    with pm.Model() as no_data:
        pm.Normal("mu")
    with pytest.raises(ValueError, match="no observed variables"):
        subsample_model(no_data, 1_500)
