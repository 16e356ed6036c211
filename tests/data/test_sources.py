"""The data sources and the row design: rows read from numpy, files, zarr and Dask as
numpy indexing reads them, files pickled as their location, designs kept as factors."""

import numpy as np
import pytest

from pymc_minibatch_mh import chunked_data
from pymc_minibatch_mh.data.row_design import FeatureBlock, IndexedColumns, RowDesign
from pymc_minibatch_mh.data.row_source import RowSource


def _on_disk(tmp_path, name, array):
    np.save(tmp_path / f"{name}.npy", array)
    return np.load(tmp_path / f"{name}.npy", mmap_mode="r")


def _zarr(tmp_path, name, array, chunk_rows):
    zarr = pytest.importorskip("zarr")
    return zarr.create_array(
        store=str(tmp_path / f"{name}.zarr"), data=array, chunks=(chunk_rows, *array.shape[1:])
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


def test_a_placing_coefficient_map_copies_columns_and_gives_the_same_rows(rng):
    """``X @ beta`` places the features in columns: rows are copied there, not multiplied
    by the map, and equal the general product; maps that scale or repeat a column, or sum
    two features into one, take the general product."""
    from pymc_minibatch_mh.data.row_design import _placement

    n = 500
    features = rng.normal(size=(n, 3)).astype(np.float32)
    place = np.zeros((3, 6))
    place[[0, 1, 2], [5, 1, 2]] = 1.0
    weight = rng.uniform(0.5, 1.5, size=n)
    block = FeatureBlock(features, place, weight)
    np.testing.assert_array_equal(block.placement, [5, 1, 2])
    design = RowDesign(n, 6, [block], np.r_[1.0, 0, 0, 0, 0, 0])
    expected = weight[:, None] * (features.astype(np.float64) @ place)
    expected[:, 0] += 1.0
    idx = np.sort(rng.integers(0, n, size=60))
    np.testing.assert_array_equal(design[idx], expected[idx])
    np.testing.assert_array_equal(design[7:19], expected[7:19])
    # Negative controls: not placements.
    scaled, repeated, summed = place.copy(), place.copy(), np.zeros((3, 6))
    scaled[0, 5] = 2.0
    repeated[2] = repeated[1]
    summed[[0, 1, 2], [5, 5, 1]] = 1.0
    for coef_map in (scaled, repeated, summed, np.zeros((3, 6))):
        assert _placement(coef_map) is None
        general = RowDesign(n, 6, [FeatureBlock(features, coef_map)])
        np.testing.assert_allclose(
            general[idx], features[idx].astype(np.float64) @ coef_map, rtol=1e-12
        )


def test_sparse_row_blocks_equal_the_dense_rows(rng):
    """Shared columns (constant, feature product, dense) and indexed ones (a group
    intercept, and a varying slope on a column that a feature also touches) together."""
    n, groups = 600, 7
    features = rng.normal(size=(n, 2))
    coef_map = np.zeros((2, 12))
    coef_map[0, 0] = coef_map[1, 1] = 1.0
    dense_cols = rng.normal(size=(n, 1))
    constant = np.zeros(12)
    constant[2] = 1.0
    index = rng.integers(-1, groups, size=n)  # -1: the row touches no group
    intercepts = IndexedColumns(np.arange(3, 3 + groups), index, 1.0)
    slopes = IndexedColumns(np.array([1, 10, 11, 1, 10, 11, 1]), index, features[:, 1])
    design = RowDesign(
        n,
        12,
        [FeatureBlock(features, coef_map)],
        constant,
        dense_cols,
        dense_columns=[11],
        indexed=[intercepts, slopes],
    )
    assert list(design.shared_columns) == [0, 1, 2, 11]
    for rows in (slice(0, 250), slice(250, n)):
        np.testing.assert_allclose(design.sparse(rows).toarray(), design[rows], rtol=1e-14)
    # Negative control: the comparison sees a missing indexed part.
    partial = RowDesign(n, 12, [FeatureBlock(features, coef_map)], constant, indexed=[slopes])
    assert not np.allclose(partial.sparse(slice(0, 250)).toarray(), design[0:250])


def test_views_of_a_file_are_pickled_as_the_file(tmp_path, rng):
    """Chains in spawned processes receive the file's location, not its contents."""
    import pickle

    from pymc_minibatch_mh.data.file_arrays import file_view, portable, restored

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


@pytest.mark.parametrize("cache_bytes", [None, 2 * 9 * 3 * 4, 1])
def test_row_source_reads_rows_as_numpy_indexing_does(tmp_path, rng, cache_bytes):
    da = pytest.importorskip("dask.array")
    x = rng.normal(size=(50, 3)).astype(np.float32)
    for array in (_zarr(tmp_path, "x", x, 7), da.from_array(x, chunks=(9, 3))):
        source = RowSource(array, cache_bytes=cache_bytes)
        idx = np.array([3, 49, 3, 0, 20, 21, 8])
        np.testing.assert_array_equal(source[idx], x[idx])
        np.testing.assert_array_equal(source[10:13], x[10:13])  # inside one chunk
        np.testing.assert_array_equal(source[5:40], x[5:40])  # across chunks
        np.testing.assert_array_equal(source[idx, 1], x[idx, 1])
        np.testing.assert_array_equal(source[np.array([4, 5, 6])], x[4:7])
        np.testing.assert_array_equal(source.astype(np.float64)[idx], x[idx].astype(np.float64))
        for _ in range(3):  # again, from whatever the cache holds now
            batch = rng.integers(0, 50, size=12)
            np.testing.assert_array_equal(source[batch], x[batch])
        assert source[idx].dtype == np.float32 and source.whole_reads == 0
        assert source.row_chunks()[-1][1] == 50
        assert source._cached_bytes <= max(source.cache_bytes, 9 * 3 * 4)


def test_chunked_data_refuses_numpy_with_a_pointer_to_the_numpy_way():
    with pytest.raises(TypeError, match="np.memmap"):
        chunked_data(np.zeros((3, 2)))


def test_the_shape_of_chunked_rows_is_inferred_on_either_pytensor(tmp_path, rng):
    """``ChunkedRows.infer_shape`` takes PyTensor 2's ``(fgraph, node, shapes)`` and
    PyTensor 3's ``(node, shapes)``; PyTensor 3 wraps (and deprecates) a method with the
    fgraph parameter, which it did not here."""
    import pytensor
    import pytensor.tensor as pt

    from pymc_minibatch_mh.data.chunked_data import ChunkedRows

    zarr = pytest.importorskip("zarr")
    x = rng.normal(size=(40, 3))
    stored = zarr.create_array(store=str(tmp_path / "x.zarr"), data=x, chunks=(16, 3))
    idx = pt.vector("idx", dtype="int64")
    rows = ChunkedRows(RowSource(stored))(idx)
    shape = pytensor.function([idx], rows.shape)(np.array([3, 1, 7, 30]))
    np.testing.assert_array_equal(shape, [4, 3])
    node = rows.owner
    for args in ((None, node, [(5,)]), (node, [(5,)])):
        assert node.op.infer_shape(*args) == [(5, 3)]
    assert ChunkedRows.infer_shape.__name__ == "infer_shape"  # not PyTensor 3's wrapper
