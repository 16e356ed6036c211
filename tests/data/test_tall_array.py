"""The tall-array container: the array kept as it is, out of the result unless asked,
replaced by pm.set_data for predictions, read by the steps like any data."""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker, tall_array

N = 2_000


def _groups(idata) -> set[str]:
    groups = idata.groups
    return set(groups() if callable(groups) else idata.children)


def _file(tmp_path, rng):
    x = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=(N, 2))
    x[:] = rng.normal(size=(N, 2))
    x.flush()
    y = (rng.random(N) < 1.0 / (1.0 + np.exp(-(x @ np.array([1.0, -0.5]))))).astype(np.int8)
    return np.load(tmp_path / "x.npy", mmap_mode="r"), y


def _model(x_data, y, *, container: bool = True, keep: bool = False):
    with pm.Model() as model:
        x = tall_array("X", x_data, keep_in_idata=keep) if container else x_data
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y, shape=x.shape[0])
    return model


def _barker_draws(n: int, *, seed: int):
    """One chain of ``MinibatchBarker()``, ``n`` tuning and ``n`` kept draws."""
    return pm.sample(
        step=MinibatchBarker(progressbar=False),
        tune=n,
        draws=n,
        chains=1,
        cores=1,
        random_seed=seed,
        progressbar=False,
        compute_convergence_checks=False,
    )


def test_the_array_is_kept_as_it_is_where_pm_data_copies_it(tmp_path, rng):
    x, _ = _file(tmp_path, rng)
    with pm.Model():
        kept = tall_array("X", x)
        copied = pm.Data("X_data", x)
    assert kept.get_value(borrow=True) is x and kept.dtype == "float32"
    # Negative control: pm.Data converts to PyMC's float type (float64), a copy in memory.
    assert copied.dtype == "float64"
    assert not np.shares_memory(copied.get_value(borrow=True), x)


@pytest.mark.parametrize("keep", [False, True])
def test_the_result_holds_the_array_only_when_asked(tmp_path, rng, keep):
    x, y = _file(tmp_path, rng)
    with _model(x, y, keep=keep):
        idata = _barker_draws(50, seed=1)
    assert ("constant_data" in _groups(idata)) is keep


def test_draws_equal_those_of_the_plain_array_and_set_data_predicts_new_rows(tmp_path, rng):
    x, y = _file(tmp_path, rng)
    with _model(x, y):
        idata = _barker_draws(100, seed=3)
        new = np.array([[3.0, 0.0], [-3.0, 0.0], [0.0, 0.0]])
        pm.set_data({"X": new})
        predicted = pm.sample_posterior_predictive(idata, progressbar=False, random_seed=4)
    with _model(np.asarray(x), y, container=False):
        plain = _barker_draws(100, seed=3)
    np.testing.assert_array_equal(idata.posterior["beta"].values, plain.posterior["beta"].values)
    rates = predicted.posterior_predictive["y"].values.reshape(-1, 3).mean(axis=0)
    assert rates[0] > 0.8 and rates[1] < 0.2  # beta[0] is about 1: the new rows were used


def test_new_values_keep_the_dtype_and_bad_inputs_are_refused(tmp_path, rng):
    x, _ = _file(tmp_path, rng)
    with pm.Model():
        var = tall_array("X", x)
        pm.set_data({"X": np.ones((3, 2))})  # PyMC hands over float64
        assert var.get_value().dtype == np.float32 and var.get_value().shape == (3, 2)
        counts = tall_array("k", np.arange(5, dtype=np.int16))
        with pytest.raises(ValueError, match="not all int16"):
            counts.set_value(np.array([0.5, 1.0]))
        with pytest.raises(TypeError, match="numpy array, np.memmap, zarr or Dask array"):
            tall_array("L", [[1.0, 2.0]])
        with pytest.raises(TypeError, match="numeric"):
            tall_array("S", np.array(["a", "b"]))


# ------------------------------------------------------------------- zarr and Dask arrays
def _chunked(kind: str, x: np.ndarray):
    """``x`` as a zarr array in memory or a Dask array, 500-row chunks."""
    if kind == "zarr":
        zarr = pytest.importorskip("zarr")
        return zarr.create_array(store={}, data=np.asarray(x), chunks=(500, 2))
    da = pytest.importorskip("dask.array")
    return da.from_array(np.asarray(x), chunks=(500, 2))


@pytest.mark.parametrize("kind", ["zarr", "dask"])
def test_a_chunked_array_samples_like_numpy_and_set_data_predicts_new_rows(tmp_path, rng, kind):
    """The same chain as from the numpy array (the steps read its rows by chunks), the
    container's value is the chunked array itself (never a copy, nothing in the result),
    and pm.set_data swaps in new rows for predictions, then back."""
    x, y = _file(tmp_path, rng)
    chunked = _chunked(kind, x)
    model = _model(chunked, y)
    variable = model["X"]
    assert variable.get_value() is chunked and variable.dtype == "float32"
    with model:
        idata = _barker_draws(100, seed=3)
    assert "constant_data" not in _groups(idata)
    with _model(np.asarray(x), y, container=False):
        plain = _barker_draws(100, seed=3)
    # The same chain; full-data sums over chunks round differently (1e-14).
    np.testing.assert_allclose(
        idata.posterior["beta"].values, plain.posterior["beta"].values, rtol=1e-9
    )
    with model:
        new = np.array([[3.0, 0.0], [-3.0, 0.0], [0.0, 0.0]])
        pm.set_data({"X": new})
        assert variable.get_value().dtype == np.float32 and variable.get_value().shape == (3, 2)
        predicted = pm.sample_posterior_predictive(idata, progressbar=False, random_seed=4)
    rates = predicted.posterior_predictive["y"].values.reshape(-1, 3).mean(axis=0)
    assert rates[0] > 0.8 and rates[1] < 0.2  # the new rows were used
    variable.set_value(chunked)  # the array the model was built on, as at the start
    assert variable.get_value() is chunked
    assert variable.shape.eval()[0] == N  # and its shape, for dims tied to it


def test_a_chunked_container_is_read_by_chunks_until_set_data_replaces_it(rng):
    """While it holds its array the package sees a chunked source (rows on demand); after
    pm.set_data, plain data with the new values; another chunked array is refused."""
    from pymc_minibatch_mh.data.chunked_data import chunked_source
    from pymc_minibatch_mh.likelihood.graph_tools import data_value, tensor_data_inputs

    x = rng.normal(size=(N, 2)).astype(np.float32)
    chunked = _chunked("zarr", x)
    with pm.Model() as model:
        rows = tall_array("X", chunked, cache_bytes=2**20)
        beta = pm.Normal("beta", 0, 1, shape=2)
        eta = rows @ beta
        source = chunked_source(rows)
        assert source is not None and source.array is chunked and source.cache_bytes == 2**20
        # The walk over the graph's data stops at the rows: the stand-in is never data.
        found = [var for var, _ in tensor_data_inputs([eta])]
        assert rows in found and rows.owner.inputs[0] not in found
        np.testing.assert_array_equal(rows.eval(), x)  # evaluated elsewhere: read whole
        pm.set_data({"X": np.ones((3, 2))})
        assert chunked_source(rows) is None
        np.testing.assert_array_equal(data_value(rows), np.ones((3, 2), dtype=np.float32))
        np.testing.assert_array_equal(eta.eval({beta: np.array([1.0, 2.0])}), [3.0, 3.0, 3.0])
        assert model["X"] is rows.owner.inputs[0]  # the variable pm.set_data sets
        with pytest.raises(TypeError, match="build the model again"):
            model["X"].set_value(_chunked("zarr", x))
