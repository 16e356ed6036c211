"""Full-data passes over chunked data (zarr / Dask) as Dask computations.

A pass evaluates a compiled per-row function ``f(*leading, idx)`` on every row of the
data. For data held in numpy arrays or ``np.memmap`` the package loops over row blocks in
the calling thread. When the function reads chunked data
(:func:`~pymc_minibatch_mh.data.chunked_data.chunked_data`), :func:`row_pass`
instead makes one Dask task per row chunk of the data (each task reads its chunk where it
runs and evaluates the function on it block by block) and combines the tasks' results in
one ``dask.compute``: on Dask's threads by default, on a ``dask.distributed`` cluster
when a ``Client`` is active (Dask's own choice of scheduler). Dask is imported only here,
and only for chunked data.

A compiled PyTensor function keeps its inputs and temporaries in storage of its own, so
two threads must not call one function at the same time (and ``Function.copy`` does not
copy Scan nodes' inner functions soundly): within one process the tasks' calls take
turns behind one lock (:data:`CALL_LOCK`), and Dask's threads overlap only what lies
outside the calls. Tasks run in parallel across the worker processes of a
``dask.distributed`` cluster, each with its own unpickled copy of the function. The
function is one key of the pass's graph, so a worker may send its copy to another worker
while one of its tasks is calling it: pickling a function must therefore hold the same
lock (:class:`~pymc_minibatch_mh.likelihood.compiling.DataBoundFunction` does), or it
would record storage cells halfway through a call, which PyTensor refuses to unpickle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from pymc_minibatch_mh.data.row_source import RowSource

#: Held by every call of a compiled function in a pass's task, and while one is pickled.
CALL_LOCK = threading.Lock()


def chunked_sources(function) -> list[RowSource]:
    """The chunked data whose rows a compiled function reads (its ``gathers``, see
    :class:`~pymc_minibatch_mh.likelihood.compiling.DataBoundFunction`), in order; empty
    for numpy and memmap data."""
    return [source for source, _ in getattr(function, "gathers", ())]


def row_pass(
    function,
    leading: Sequence,
    n_rows: int,
    *,
    block_rows: int,
    combine: str,
) -> object | None:
    """``function(*leading, idx)`` over all ``n_rows`` rows as a Dask computation.

    Parameters
    ----------
    function : compiled function
        Takes ``*leading`` then an int64 vector of rows.
    leading : sequence
        The arguments before the rows (e.g. the parameter vector).
    n_rows : int
        Rows of the data (N).
    block_rows : int
        Most rows per call of ``function`` within a task.
    combine : {"concatenate", "sum"}
        ``"concatenate"``: the function returns one value per row and the pass returns
        all N; ``"sum"``: it returns a tuple of sums and the pass returns their totals.

    Returns
    -------
    The combined result, or None if the function reads no chunked data (the caller then
    loops in its own thread, as before).
    """
    sources = chunked_sources(function)
    if not sources:
        return None
    import dask

    ranges = sources[0].row_chunks()
    if ranges[-1][1] != n_rows:
        return None
    # Not pure: hashing the compiled function for a task key would pickle it.
    fn = dask.delayed(function, pure=False, traverse=False)
    task = dask.delayed(_range_values, pure=False)
    parts = dask.compute(
        *[task(fn, tuple(leading), start, stop, block_rows, combine) for start, stop in ranges]
    )
    return _COMBINE[combine](list(parts))


def all_rows(function, leading: Sequence, n_rows: int, *, block_rows: int) -> np.ndarray:
    """``function(*leading, idx)`` (one value per row) for every row, in row order: a
    :func:`row_pass` for a function that reads chunked data, else blocks of
    ``block_rows`` rows in the calling thread (one pass either way)."""
    on_chunks = row_pass(function, leading, n_rows, block_rows=block_rows, combine="concatenate")
    if on_chunks is not None:  # chunked data: one Dask task per chunk
        return on_chunks
    out = None
    for start in range(0, n_rows, block_rows):
        stop = min(start + block_rows, n_rows)
        block = function(*leading, np.arange(start, stop, dtype=np.int64))
        if out is None:  # the dtype of the function (float32 under floatX=float32)
            out = np.empty(n_rows, dtype=block.dtype)
        out[start:stop] = block
    return out


def chunk_map(source: RowSource, task: Callable[[np.ndarray, int], object]) -> list:
    """``task(rows, first_row)`` on every row chunk of ``source``, as one Dask computation.

    The chunks are the blocks of the source as a Dask array (``dask.array.from_zarr`` for
    a zarr array), whole along the other axes; each task computes its block where it
    runs. ``task`` must be a module-level function (it is sent to the workers).
    """
    import dask
    import dask.array as da

    array = source.array
    if not hasattr(array, "to_delayed"):  # zarr
        array = da.from_zarr(array)
    array = array.rechunk({axis: -1 for axis in range(1, array.ndim)}).astype(source.dtype)
    starts = np.r_[0, np.cumsum(array.chunks[0])[:-1]].astype(int).tolist()
    call = dask.delayed(task, pure=False)
    blocks = array.to_delayed().reshape(-1)
    return list(
        dask.compute(*[call(block, start) for block, start in zip(blocks, starts, strict=True)])
    )


def design_map(
    design,
    task: Callable,
    per_row: Sequence = (),
    args: tuple = (),
    *,
    block_rows: int | None = None,
) -> np.ndarray:
    """``task(design, rows, *[a[rows] for a in per_row], *args)`` over consecutive row
    blocks ``rows`` (slices) covering all N rows of ``design``, concatenated along axis 0
    (one pass; the caller counts it in :mod:`~pymc_minibatch_mh.data.pass_tally`).

    One code path for every kind of data: for a
    :class:`~pymc_minibatch_mh.data.row_design.RowDesign` whose features are chunked data
    (zarr, Dask) the blocks run as one Dask task per row chunk of those data (the design
    and the ``per_row`` arrays are sent to the workers once per pass, each as one Dask
    key); for anything else (a numpy array, a ``np.memmap``, a design over them) they run
    in the calling thread. ``task`` must be a module-level function (or a
    ``functools.partial`` of one): it is sent to the workers.

    Parameters
    ----------
    design : ndarray or RowDesign, shape (N, D)
    task : callable
        ``task(design, rows, *row_arrays, *args) -> ndarray`` with one entry (or row) per
        row of the block.
    per_row : sequence of ndarray
        Arrays of N rows, sliced with the block for the task.
    args : tuple
        Further arguments, the same for every block.
    block_rows : int, optional
        Rows per block (default
        :func:`~pymc_minibatch_mh.data.blocks.rows_per_chunk` of the design's width).
    """
    return _over_design(design, task, tuple(per_row), tuple(args), "concatenate", block_rows)


def design_sum(
    design,
    task: Callable,
    per_row: Sequence = (),
    args: tuple = (),
    *,
    block_rows: int | None = None,
) -> tuple:
    """Like :func:`design_map`, for a task that returns a tuple of sums over its block
    (floats or arrays): the tuple of their totals over all N rows."""
    return _over_design(design, task, tuple(per_row), tuple(args), "sum", block_rows)


def design_map_sum(
    design,
    task: Callable,
    per_row: Sequence = (),
    args: tuple = (),
    *,
    block_rows: int | None = None,
) -> tuple[tuple, tuple]:
    """Like :func:`design_map` and :func:`design_sum` in one pass, for a task that returns
    ``(per_row_values, sums)``, two tuples: the first's arrays (one entry per row of the
    block) concatenated over all N rows, the second's totals."""
    return _over_design(design, task, tuple(per_row), tuple(args), "map_sum", block_rows)


def _over_design(design, task, per_row: tuple, args: tuple, combine: str, block_rows):
    from pymc_minibatch_mh.data.blocks import rows_per_chunk

    step = rows_per_chunk(design.shape[1]) if block_rows is None else max(1, int(block_rows))
    n_rows = design.shape[0]
    ranges = _design_chunk_ranges(design)
    if ranges is None:
        return _design_block_values(design, 0, n_rows, step, task, per_row, args, combine)
    import dask

    shared = dask.delayed(design, pure=False, traverse=False)
    arrays = [dask.delayed(a, pure=False, traverse=False) for a in per_row]
    call = dask.delayed(_design_chunk_values, pure=False)
    parts = dask.compute(
        *[call(shared, start, stop, step, task, arrays, args, combine) for start, stop in ranges]
    )
    return _COMBINE[combine](list(parts))


def _design_chunk_ranges(design) -> list[tuple[int, int]] | None:
    """The row ranges of the chunked data a design's features read, or None when they
    read none (then the pass runs in the calling thread)."""
    from pymc_minibatch_mh.data.row_design import RowDesign

    if not isinstance(design, RowDesign):
        return None
    sources = [b.features for b in design.blocks if isinstance(b.features, RowSource)]
    return sources[0].row_chunks() if sources else None


def _design_chunk_values(design, start, stop, step, task, per_row, args, combine):
    """One Dask task of :func:`design_map` / :func:`design_sum` (``per_row`` arrives as a
    list of arrays)."""
    return _design_block_values(design, start, stop, step, task, tuple(per_row), args, combine)


def _design_block_values(design, start, stop, step, task, per_row: tuple, args: tuple, combine):
    """The task on the rows ``start:stop`` in blocks of ``step`` rows, combined."""
    parts = []
    for a in range(start, stop, step):
        rows = slice(a, min(a + step, stop))
        parts.append(task(design, rows, *(array[rows] for array in per_row), *args))
    if not parts:
        return {"concatenate": np.empty(0), "sum": (), "map_sum": ((), ())}[combine]
    return _COMBINE[combine](parts)


def _range_values(function, leading: tuple, start: int, stop: int, block_rows: int, combine: str):
    """One task: the function on the rows ``start:stop``, block by block, combined."""
    # Arrays that crossed to a worker process may come unaligned out of its message
    # buffer; compiled functions called with trust_input need aligned, contiguous ones.
    leading = tuple(
        np.require(a, requirements=("C", "A")) if isinstance(a, np.ndarray) else a for a in leading
    )
    parts = []
    for a in range(start, stop, block_rows):
        rows = np.arange(a, min(a + block_rows, stop), dtype=np.int64)
        with CALL_LOCK:  # one call of a compiled function at a time in this process
            parts.append(function(*leading, rows))
    return _COMBINE[combine](parts)


def _concatenate(parts: list) -> np.ndarray:
    # A function compiled with a list of one output returns a list of one array.
    parts = [p[0] if isinstance(p, list | tuple) and len(p) == 1 else p for p in parts]
    return np.concatenate([np.atleast_1d(np.asarray(p)) for p in parts])


def _sum(parts: list) -> tuple:
    return tuple(
        sum(np.asarray(p[k], dtype=np.float64) for p in parts) for k in range(len(parts[0]))
    )


def _map_sum(parts: list) -> tuple[tuple, tuple]:
    mapped = tuple(np.concatenate([p[0][k] for p in parts]) for k in range(len(parts[0][0])))
    return mapped, _sum([p[1] for p in parts])


_COMBINE: dict[str, Callable] = {"concatenate": _concatenate, "sum": _sum, "map_sum": _map_sum}
