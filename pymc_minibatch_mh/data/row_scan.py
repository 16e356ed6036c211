"""Scans of data arrays by row chunks: non-finite entries, flagged rows.

Validation reads every covariate and observation array once before sampling. A numpy
array or ``np.memmap`` is read a block of rows at a time (never loaded whole); chunked
data (a :class:`~pymc_minibatch_mh.data.row_source.RowSource`) as one Dask task per chunk.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pymc_minibatch_mh.data import blocks as data_blocks
from pymc_minibatch_mh.data.chunk_pass import chunk_map
from pymc_minibatch_mh.data.row_source import RowSource

_INEXACT_KINDS = "fc"  # dtypes that can hold NaN or inf


def non_finite_entries(value: np.ndarray, chunk_rows: int | None = None) -> tuple[int, int | None]:
    """Count the NaN or inf entries of an array in one pass over chunks of rows.

    Only ``chunk_rows`` rows are in memory at a time, so a ``np.memmap`` is not loaded
    whole; chunked data (zarr / Dask) are counted by one Dask task per chunk. Integer and
    boolean arrays cannot hold NaN and are skipped without reading.

    Parameters
    ----------
    value : numpy.ndarray or RowSource
        An array with the rows along axis 0 (at least one dimension).
    chunk_rows : int, optional
        Rows per chunk (default :data:`~pymc_minibatch_mh.data.blocks.BLOCK_ROWS`).

    Returns
    -------
    count : int
        The number of non-finite entries.
    first_row : int or None
        The first row holding one, or None if there are none.
    """
    if value.dtype.kind not in _INEXACT_KINDS:
        return 0, None
    found = on_row_chunks(value, _non_finite_in, chunk_rows)
    firsts = [first for _, first in found if first is not None]
    return sum(count for count, _ in found), (min(firsts) if firsts else None)


def on_row_chunks(value, task: Callable, chunk_rows: int | None = None) -> list:
    """``task(rows, first_row)`` on every chunk of rows of ``value``, results in order.

    A numpy array or ``np.memmap`` is read ``chunk_rows`` rows at a time, so it is never
    loaded whole; chunked data (a :class:`~pymc_minibatch_mh.data.row_source.RowSource`) as
    one Dask task per chunk, for which ``task`` must be a module-level function (or a
    ``functools.partial`` of one).
    """
    if isinstance(value, RowSource):
        return chunk_map(value, task)
    chunk_rows = data_blocks.BLOCK_ROWS if chunk_rows is None else chunk_rows
    return [
        task(value[start : start + chunk_rows], start)
        for start in range(0, value.shape[0], chunk_rows)
    ]


def flagged_rows(bad: np.ndarray, first_row: int) -> tuple[int, int | None]:
    """``(number of rows with a flagged entry, the first of them in the data)`` for the
    entry mask ``bad`` of one chunk whose first row is ``first_row``."""
    rows = bad.reshape(bad.shape[0], -1).any(axis=1)
    count = int(np.count_nonzero(rows))
    return (count, first_row + int(np.argmax(rows))) if count else (0, None)


def _non_finite_in(rows: np.ndarray, first_row: int) -> tuple[int, int | None]:
    """Non-finite entries of one chunk of rows, and the first row (in the data) holding
    one."""
    bad = ~np.isfinite(rows)
    return int(np.count_nonzero(bad)), flagged_rows(bad, first_row)[1]
