"""Data on disk used unchanged: a float32 ``np.memmap`` in the model is read row block by
row block, never copied whole, and gives the draws an in-memory array gives."""

import tracemalloc

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker, TunaMH
from pymc_minibatch_mh.likelihood import affine_maps
from pymc_minibatch_mh.likelihood.linear_predictor import recognise_linear_predictor
from pymc_minibatch_mh.row_design import FeatureBlock, RowDesign

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


@pytest.fixture
def logistic_data(rng):
    x = rng.normal(size=(N, 4)).astype(np.float32)
    eta = -0.3 + x @ np.array([1.0, -0.5, 0.25, 0.0], dtype=np.float32)
    y = (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(np.int8)
    return x, y


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
    """Above CHUNK_ROWS rows every evaluation runs block by block (last block short)."""
    x, y = logistic_data
    scale = np.linspace(0.5, 2.0, N)  # a per-row weight and a per-row residual column
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=4)
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("y", logit_p=a + scale * (x @ beta) + b * scale**2, observed=y)
    whole = _recognise(model)
    monkeypatch.setattr(affine_maps, "CHUNK_ROWS", 700)
    blocked = _recognise(model)
    assert blocked.design.dense is not None  # the b * scale**2 column differs per row
    np.testing.assert_allclose(np.asarray(blocked.design), np.asarray(whole.design), rtol=1e-12)
    q = rng.normal(size=6)
    np.testing.assert_allclose(blocked.loglik(q), whole.loglik(q), rtol=1e-12)
    # X @ beta + a: the residual reads no data and is evaluated on one row.
    plain = _recognise(_logistic(x, y))
    assert plain.design.dense is None and plain.offset.strides == (0,)
    monkeypatch.setattr(affine_maps, "CHUNK_ROWS", 10**9)
    np.testing.assert_allclose(
        np.asarray(plain.design), np.asarray(_recognise(_logistic(x, y)).design)
    )


def test_row_design_rows_products_and_chunks_match_the_dense_matrix(rng):
    n = 1000
    features = rng.normal(size=(n, 3)).astype(np.float32)
    coef_map = rng.normal(size=(3, 5))
    weight = rng.uniform(0.5, 1.5, size=n)
    dense_cols = np.zeros((n, 5))
    dense_cols[:, 4] = rng.normal(size=n)
    constant = np.array([0.0, 0.0, 0.0, 1.0, 0.0])
    design = RowDesign(n, 5, [FeatureBlock(features, coef_map, weight)], constant, dense_cols)
    expected = weight[:, None] * (features.astype(np.float64) @ coef_map) + constant + dense_cols
    idx = rng.integers(0, n, size=40)
    w = rng.normal(size=5)
    np.testing.assert_allclose(design[idx], expected[idx], rtol=1e-12)
    np.testing.assert_allclose(design[10:20], expected[10:20], rtol=1e-12)
    np.testing.assert_allclose(design[3], expected[3], rtol=1e-12)
    np.testing.assert_allclose(design @ w, expected @ w, rtol=1e-10)
    np.testing.assert_allclose(design.dot(w, idx), expected[idx] @ w, rtol=1e-10)
    np.testing.assert_allclose(design.dot(rng.normal(size=(5, 2)), idx).shape, (40, 2))
    chunks = list(design.chunks(chunk_rows=300))
    assert [rows.stop - rows.start for rows, _ in chunks] == [300, 300, 300, 100]
    np.testing.assert_allclose(np.vstack([block for _, block in chunks]), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="rows"):
        RowDesign(n + 1, 5, [FeatureBlock(features, coef_map)])


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


def test_views_of_a_file_are_pickled_as_the_file(tmp_path, rng):
    """Chains in spawned processes receive the file's location, not its contents."""
    import pickle

    from pymc_minibatch_mh.file_arrays import file_view, portable, restored

    mapped = _on_disk(tmp_path, "x", rng.normal(size=(20_000, 6)).astype(np.float32))
    for view in (mapped, np.asarray(mapped), mapped[100:900], mapped[:, 2:5], mapped[::3, ::2]):
        payload = pickle.dumps(portable(view))
        assert len(payload) < 1_000
        again = restored(pickle.loads(payload))
        np.testing.assert_array_equal(again, view)
        assert file_view(again).filename == file_view(mapped).filename
        assert not again.flags.writeable
    # Negative controls: an array in memory, and a copy-on-write mapping (whose edits
    # are not in the file), are pickled with their contents.
    in_memory = np.array(mapped)
    assert file_view(in_memory) is None and portable(in_memory) is in_memory
    assert len(pickle.dumps(portable(in_memory))) > in_memory.nbytes
    private = np.load(tmp_path / "x.npy", mmap_mode="c")
    private[0] = -1.0
    assert file_view(private) is None
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(portable(private)))[0], -1.0)


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
