"""Data on disk used unchanged: a float32 ``np.memmap`` in the model is read row block by
row block, never copied whole, and gives the draws an in-memory array gives; zarr and Dask
arrays through ``chunked_data`` likewise, with full-data passes as Dask computations (on a
``dask.distributed`` cluster when a client is active)."""

import tracemalloc

import numpy as np
import pymc as pm
import pytest
from tall_builder import tall_data_of

from pymc_minibatch_mh import MinibatchBarker, TunaMH, chunked_data
from pymc_minibatch_mh.bounds.lipschitz import _row_norms
from pymc_minibatch_mh.data import blocks as data_blocks
from pymc_minibatch_mh.data.chunk_pass import chunked_sources
from pymc_minibatch_mh.data.row_design import RowDesign
from pymc_minibatch_mh.likelihood.linear_predictor import recognise_linear_predictor

N = 3000


def _logistic(x, y):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=x.shape[1])
        a = pm.Normal("a", 0, 2)
        pm.Bernoulli("y", logit_p=a + x @ beta, observed=y)
    return model


def _on_disk(tmp_path, name, array):
    np.save(tmp_path / f"{name}.npy", array)
    return np.load(tmp_path / f"{name}.npy", mmap_mode="r")


def _rows(rng, n):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    eta = -0.3 + x @ np.array([1.0, -0.5, 0.25, 0.0], dtype=np.float32)
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(np.int8)
    return x, y


@pytest.fixture
def logistic_data(rng):
    return _rows(rng, N)


def _draws(model, step_class, seed=5):
    with model:
        idata = pm.sample(
            step=step_class(),
            draws=150,
            tune=100,
            chains=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    return idata.posterior["beta"].values


@pytest.mark.parametrize("step_class", [TunaMH, MinibatchBarker])
def test_memmap_gives_the_draws_of_the_same_data_in_memory(tmp_path, logistic_data, step_class):
    x, y = logistic_data
    on_disk = _draws(_logistic(_on_disk(tmp_path, "x", x), _on_disk(tmp_path, "y", y)), step_class)
    in_memory = _draws(_logistic(x, y), step_class)
    np.testing.assert_array_equal(on_disk, in_memory)
    # Negative control: one changed row of the data changes the draws.
    changed = x.copy()
    changed[7] += 1.0
    assert not np.array_equal(_draws(_logistic(changed, y), step_class), in_memory)


def test_recognised_design_reads_the_file_itself(tmp_path, logistic_data):
    x, y = logistic_data
    features = _on_disk(tmp_path, "x", x)
    model = _logistic(features, _on_disk(tmp_path, "y", y))
    lp = _recognise(model)
    assert isinstance(lp.design, RowDesign)
    (block,) = lp.design.blocks
    assert block.features.dtype == np.float32 and np.shares_memory(block.features, features)
    dense = np.column_stack([x.astype(np.float64), np.ones(N)])
    np.testing.assert_allclose(np.asarray(lp.design), dense, rtol=1e-15)
    assert lp.offset.strides == (0,)  # one value for every row, no N-long array


def _recognise(model):
    value_vars = model.value_vars
    return recognise_linear_predictor(
        model, value_vars, shared={}, initial_point=model.initial_point()
    )


def test_recogniser_by_row_blocks_equals_one_block(logistic_data, monkeypatch, rng):
    """Above BLOCK_ROWS rows every evaluation runs block by block (last block short)."""
    x, y = logistic_data
    scale = np.linspace(0.5, 2.0, N)  # a per-row weight and a per-row residual column
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=4)
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("y", logit_p=a + scale * (x @ beta) + b * scale**2, observed=y)
    whole = _recognise(model)
    monkeypatch.setattr(data_blocks, "BLOCK_ROWS", 700)
    blocked = _recognise(model)
    assert blocked.design.dense is not None  # the b * scale**2 column differs per row
    np.testing.assert_allclose(np.asarray(blocked.design), np.asarray(whole.design), rtol=1e-12)
    q = rng.normal(size=6)
    np.testing.assert_allclose(blocked.loglik(q), whole.loglik(q), rtol=1e-12)
    # X @ beta + a: the residual reads no data and is evaluated on one row.
    plain = _recognise(_logistic(x, y))
    assert plain.design.dense is None and plain.offset.strides == (0,)
    monkeypatch.setattr(data_blocks, "BLOCK_ROWS", 10**9)
    np.testing.assert_allclose(
        np.asarray(plain.design), np.asarray(_recognise(_logistic(x, y)).design)
    )


def _peak_bytes(build) -> int:
    tracemalloc.start()
    try:
        build()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("step_class", [TunaMH, MinibatchBarker])
def test_construction_memory_does_not_grow_with_the_number_of_columns(tmp_path, rng, step_class):
    """A float64 (N, D) design or copy of the features would make the peak memory of a
    construction grow by 8 N bytes per column; it grows by O(D^2) only."""
    n, narrow, wide = 200_000, 4, 34
    y = _on_disk(tmp_path, "y", (rng.random(n) < 0.5).astype(np.int8))
    x = _on_disk(tmp_path, "x", 0.1 * rng.normal(size=(n, wide)).astype(np.float32))
    models = {d: _logistic(x[:, :d], y) for d in (narrow, wide)}

    def construct(d):
        with models[d]:
            return step_class()

    construct(narrow), construct(wide)  # compile once; measure the second constructions
    growth = _peak_bytes(lambda: construct(wide)) - _peak_bytes(lambda: construct(narrow))
    dense_growth = 8 * n * (wide - narrow)
    assert growth < 0.25 * dense_growth, (growth, dense_growth)
    # Negative control: forming the dense design is seen by the same measurement.
    designs = {d: _recognise(models[d]).design for d in (narrow, wide)}
    dense = _peak_bytes(lambda: np.asarray(designs[wide])) - _peak_bytes(
        lambda: np.asarray(designs[narrow])
    )
    assert dense >= 0.25 * dense_growth


def test_a_step_over_a_file_pickles_its_data_functions_without_the_data(tmp_path, rng):
    import pickle

    x = rng.normal(size=(40_000, 5)).astype(np.float32)
    y = (rng.random(40_000) < 0.5).astype(np.int8)
    with _logistic(_on_disk(tmp_path, "x", x), _on_disk(tmp_path, "y", y)):
        step = TunaMH()
    with _logistic(x, y):
        step_in_memory = TunaMH()
    fn = step.tall_data._loglik_fn
    payload = pickle.dumps(fn)
    # PyMC holds the observations in memory (as int64): those are pickled either way; the
    # features (x.nbytes) only when they are in memory (negative control).
    assert len(pickle.dumps(step_in_memory.tall_data._loglik_fn)) - len(payload) > 0.9 * x.nbytes
    again = pickle.loads(payload)
    idx = np.arange(0, 40_000, 997)
    q = rng.normal(size=step.tall_data.ndim)
    np.testing.assert_array_equal(again(q, idx), fn(q, idx))
    block = pickle.loads(pickle.dumps(step._lp.design.blocks[0]))
    np.testing.assert_array_equal(block.features, x)


def test_data_functions_with_shared_inputs_pickle_and_compute_the_same(tmp_path, rng):
    """A shared variable in the likelihood (an implicit input of the compiled function)
    survives pickling, and the features still travel as the file."""
    import pickle

    x = rng.normal(size=(20_000, 3)).astype(np.float32)
    y = (rng.random(20_000) < 0.5).astype(np.int8)
    steps = []
    for features in (_on_disk(tmp_path, "x", x), x):
        with pm.Model():
            scale = pm.Data("scale", 2.0)
            beta = pm.Normal("beta", 0, 1, shape=3)
            pm.Bernoulli("y", logit_p=(features @ beta) * scale, observed=y)
            steps.append(MinibatchBarker())
    fn = steps[0].tall_data._loglik_fn
    idx = np.arange(0, 20_000, 331)
    q = rng.normal(size=3)
    expected = fn(q, idx)
    payload = pickle.dumps(fn)
    # Negative control: with the features in memory they are in the payload.
    assert len(pickle.dumps(steps[1].tall_data._loglik_fn)) - len(payload) > 0.9 * x.nbytes
    np.testing.assert_array_equal(pickle.loads(payload)(q, idx), expected)
    np.testing.assert_array_equal(fn(q, idx), expected)  # the original still works


# -- Chunked arrays (zarr, Dask) through chunked_data ---------------------------------------


def _zarr(tmp_path, name, array, chunk_rows):
    zarr = pytest.importorskip("zarr")
    return zarr.create_array(
        store=str(tmp_path / f"{name}.zarr"),
        data=array,
        chunks=(chunk_rows, *array.shape[1:]),
    )


def _dask_array():
    return pytest.importorskip("dask.array")


@pytest.mark.parametrize("step_class", [TunaMH, MinibatchBarker])
def test_zarr_and_dask_give_the_draws_of_the_same_data_in_memory(
    tmp_path, logistic_data, step_class
):
    da = _dask_array()
    x, y = logistic_data
    in_memory = _draws(_logistic(x, y), step_class)
    zx, zy = _zarr(tmp_path, "x", x, 700), _zarr(tmp_path, "y", y, 700)
    on_zarr = _draws(_logistic(chunked_data(zx), chunked_data(zy)), step_class)
    on_dask = _draws(
        _logistic(chunked_data(da.from_zarr(zx)), chunked_data(da.from_array(y, chunks=1000))),
        step_class,
    )
    # Full-data sums over chunks (Dask tasks) are added in another order than over the
    # blocks of an in-memory pass: equal up to rounding.
    np.testing.assert_allclose(on_zarr, in_memory, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(on_dask, in_memory, rtol=1e-9, atol=1e-12)
    # Negative control: one changed row of the zarr data changes the draws.
    changed = x.copy()
    changed[7] += 1.0
    zc = _zarr(tmp_path, "changed", changed, 700)
    assert not np.allclose(
        _draws(_logistic(chunked_data(zc), chunked_data(zy)), step_class), in_memory
    )


def test_large_chunked_covariates_are_never_read_whole(tmp_path, rng):
    """Above 65,536 rows every read of the covariates is a batch or one chunk."""
    n = 70_000
    x, y = _rows(rng, n)
    zx = _zarr(tmp_path, "x", x, 16_384)
    tensor = chunked_data(zx)
    source = tensor.owner.op.source
    _draws(_logistic(tensor, chunked_data(_zarr(tmp_path, "y", y, 16_384))), TunaMH)
    assert source.whole_reads == 0
    # Negative control: the counter sees a whole read.
    np.asarray(source)
    assert source.whole_reads == 1


# Caches: all the data (kept in place), two chunks of 7 or 9 rows (least recently used
# dropped), none (every read from the array).
def _tall(model):
    return tall_data_of(model)


def test_full_data_pass_on_a_local_cluster_matches_the_numpy_pass(tmp_path, rng, cluster_client):
    distributed = pytest.importorskip("distributed")
    da = _dask_array()
    n = 70_000  # above one block: the pass is one Dask task per chunk
    x, y = _rows(rng, n)
    in_memory = _tall(_logistic(x, y))
    zarr_model = _logistic(
        chunked_data(da.from_zarr(_zarr(tmp_path, "x", x, 20_000))),
        chunked_data(_zarr(tmp_path, "y", y, 20_000)),
    )
    on_zarr = _tall(zarr_model)
    assert chunked_sources(on_zarr._loglik_fn)  # the pass below goes through Dask
    q = 0.1 * rng.normal(size=in_memory.ndim)
    expected = in_memory.loglik_full(q)
    with distributed.get_task_stream(cluster_client) as stream:
        got = on_zarr.loglik_full(q)
        # The recogniser's passes and a bound's pass over the design, on the cluster.
        norms = _row_norms(_recognise(zarr_model).design, None)
    tasks = [t for t in stream.data if "_range_values" in str(t["key"])]
    design_tasks = [t for t in stream.data if "_design_chunk_values" in str(t["key"])]
    workers = {t["worker"] for t in tasks + design_tasks}
    known = set(cluster_client.scheduler_info()["workers"])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(norms, _row_norms(_recognise(_logistic(x, y)).design, None))
    assert len(tasks) >= 4  # one task per chunk and pass, run by the cluster's workers
    # The norms' pass and the recogniser's products with the design: four chunks each.
    assert len(design_tasks) >= 4 and len(design_tasks) % 4 == 0
    assert workers and workers <= known
    # Negative control: another parameter vector gives another pass.
    assert not np.allclose(on_zarr.loglik_full(q + 0.5), expected, rtol=1e-6)


def test_non_finite_chunked_data_is_refused_with_its_first_row(rng):
    zarr = pytest.importorskip("zarr")
    da = _dask_array()
    x, y = _rows(rng, N)
    x[2001, 2], x[2500, 0] = np.nan, np.inf
    arrays = (
        zarr.create_array(store={}, data=x, chunks=(700, 4)),
        da.from_array(x, chunks=(500, 2)),  # split along the columns too
    )
    for array in arrays:
        with _logistic(chunked_data(array), y), pytest.raises(ValueError) as refused:
            TunaMH()
        assert "2 non-finite entries" in str(refused.value)
        assert "the first is in row 2001" in str(refused.value)
    # Negative control: the same data without the bad entries are accepted.
    x[2001, 2], x[2500, 0] = 0.0, 0.0
    with _logistic(chunked_data(zarr.create_array(store={}, data=x, chunks=(700, 4))), y):
        TunaMH()


@pytest.mark.parametrize("store", ["memmap", "zarr", "dask"])
def test_an_observation_outside_the_support_is_found_in_any_store(tmp_path, rng, store):
    """The support check reads data on disk and chunked data chunk by chunk (one Dask task
    per chunk) and names the row, in the last chunk too."""
    x, y = _rows(rng, N)
    y = y.astype(np.int64)
    y[N - 3] = 2
    if store == "memmap":
        y_in = _on_disk(tmp_path, "y", y)
    elif store == "zarr":
        y_in = chunked_data(_zarr(tmp_path, "y", y, 700))
    else:
        y_in = chunked_data(_dask_array().from_array(y, chunks=700))
    with _logistic(x, y_in), pytest.raises(ValueError, match=f"row {N - 3} of its data holds 2"):
        MinibatchBarker(progressbar=False)
