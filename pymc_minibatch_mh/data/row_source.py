"""Rows of a chunked array (zarr or Dask) read on demand, as numpy.

:class:`RowSource` wraps a ``zarr.Array`` or a ``dask.array.Array`` whose data points lie
along axis 0 and answers the row reads the package makes: a contiguous slice (one chunk of
a full-data pass) or an integer array (a minibatch), each returned as a numpy array. Only
the chunks holding the rows asked for are read, each whole (a chunk is the unit zarr
decodes and Dask computes), and recently read chunks are kept up to a memory budget
(:data:`CACHE_BYTES`), so a pass's blocks within a chunk, or a minibatch in chunks read
recently, read nothing more. A Dask array's chunks are computed in the calling thread: in
a task of a Dask pass, the worker running it reads them.
``np.asarray(source)`` reads everything; the package does so only for data small enough
for its one-call full-data functions (65,536 rows, ``tall_data.FULL_PASS_ROWS``) and for
a recognised GLM's observation vector, and counts it (:func:`materialisations`,
``RowSource.whole_reads``) so that tests can check it.

This module imports neither zarr nor Dask: it recognises their arrays by their attributes,
so it costs nothing when they are not used.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

#: Bytes of decoded chunks a :class:`RowSource` keeps (least recently used dropped first):
#: a pass that reads a chunk in several blocks decodes it once, and minibatches whose rows
#: lie in chunks read recently read nothing. Data that fit entirely are read once.
CACHE_BYTES = 256 * 2**20

_materialised = 0


def materialisations() -> int:
    """How many times a :class:`RowSource` was read whole in this process."""
    return _materialised


def is_chunked_array(array) -> bool:
    """Whether ``array`` is a zarr or Dask array (recognised without importing either)."""
    module = type(array).__module__ or ""
    return module.split(".")[0] in ("zarr", "dask") and hasattr(array, "shape")


def _is_dask(array) -> bool:
    return (type(array).__module__ or "").split(".")[0] == "dask"


class RowSource:
    """A read-only view of a chunked array's rows, answering numpy indexing with numpy.

    Parameters
    ----------
    array : zarr.Array or dask.array.Array
        The data, data points along axis 0.
    dtype : numpy dtype, optional
        The dtype rows are returned in (default: the array's). A cast is applied to the
        rows read, never to the whole array.
    cache_bytes : int, optional
        Bytes of decoded chunks kept (default :data:`CACHE_BYTES`); a chunk larger than
        this is never kept. If the whole array fits, chunks are kept in place in one
        array of its shape, filled as they are read (a gather is then one indexing).
    """

    def __init__(self, array, dtype=None, cache_bytes: int | None = None):
        if not is_chunked_array(array):
            raise TypeError(
                f"RowSource needs a zarr or Dask array, got {type(array).__name__}; numpy "
                "arrays and np.memmap are used as they are."
            )
        if len(array.shape) == 0:
            raise ValueError("A chunked data array needs at least one axis (the data points).")
        self.array = array
        self.dtype = np.dtype(array.dtype if dtype is None else dtype)
        self.shape = tuple(int(s) for s in array.shape)
        self.whole_reads = 0  # times this source was read whole (np.asarray)
        self.cache_bytes = CACHE_BYTES if cache_bytes is None else int(cache_bytes)
        self._row_bytes = max(1, self.nbytes // max(1, self.shape[0]))
        self._chunk_bounds = None
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cached_bytes = 0
        self._kept, self._kept_chunks = None, None  # all chunks, when they fit the cache
        self._lock = threading.Lock()

    # -- array-like attributes ------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"RowSource({type(self.array).__name__}, shape={self.shape}, dtype={self.dtype})"

    def astype(self, dtype, copy: bool = True) -> RowSource:  # noqa: ARG002 - numpy's signature
        """The same rows, returned in ``dtype`` (nothing is read)."""
        return RowSource(self.array, dtype, self.cache_bytes)

    def __getstate__(self):  # the array and settings, not the cache
        return {"array": self.array, "dtype": self.dtype, "cache_bytes": self.cache_bytes}

    def __setstate__(self, state):
        self.__init__(state["array"], state["dtype"], state["cache_bytes"])

    def row_chunks(self) -> list[tuple[int, int]]:
        """``(start, stop)`` of the array's chunks along axis 0, in order."""
        if _is_dask(self.array):
            lengths = self.array.chunks[0]
        else:
            step = int(self.array.chunks[0])
            lengths = [step] * (self.shape[0] // step)
            if self.shape[0] % step:
                lengths.append(self.shape[0] % step)
        bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
        return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))

    # -- reads ----------------------------------------------------------------------------
    def __getitem__(self, key) -> np.ndarray:
        rest = ()
        if isinstance(key, tuple):
            key, rest = (key[0] if key else slice(None)), key[1:]
        rows = self._rows(key)
        return rows[(slice(None), *rest)] if rest else rows

    def _rows(self, key) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                return self._rows(np.arange(start, stop, step))
            return self._read(slice(start, max(start, stop)))
        if isinstance(key, int | np.integer):
            return self._rows(np.array([int(key)]))[0]
        idx = np.asarray(key)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        if idx.dtype.kind not in "iu":
            raise IndexError(f"RowSource rows must be a slice or integers, got {idx.dtype}.")
        flat = idx.ravel()
        if flat.size == 0:
            return np.empty((*idx.shape, *self.shape[1:]), dtype=self.dtype)
        flat = np.where(flat < 0, flat + self.shape[0], flat)
        unique, inverse = np.unique(flat, return_inverse=True)
        rows = self._gather(unique)
        return rows[inverse.ravel()].reshape(*idx.shape, *self.shape[1:])

    def _read(self, rows: slice) -> np.ndarray:
        """Rows ``start:stop``, from the chunks that hold them."""
        if rows.stop <= rows.start:
            return np.empty((0, *self.shape[1:]), dtype=self.dtype)
        return self._gather(np.arange(rows.start, rows.stop))

    def _gather(self, unique: np.ndarray) -> np.ndarray:
        """The rows ``unique`` (ascending, distinct), chunk by chunk: each chunk holding
        some of them is read (decoded) once, or taken from the cache of recent chunks."""
        if self.cache_bytes >= self.nbytes:
            return self._gather_kept(unique)
        bounds = self._bounds()
        chunk_of = np.searchsorted(bounds, unique, side="right") - 1
        cut = np.flatnonzero(np.diff(chunk_of)) + 1
        parts = []
        for rows, k in zip(np.split(unique, cut), chunk_of[np.r_[0, cut]].tolist(), strict=True):
            start, stop = int(bounds[k]), int(bounds[k + 1])
            if rows.size == stop - start:  # the whole chunk
                parts.append(self._chunk(k, start, stop))
            elif rows[-1] - rows[0] + 1 == rows.size and not self._cacheable(start, stop):
                parts.append(self._read_direct(slice(int(rows[0]), int(rows[-1]) + 1)))
            else:
                parts.append(self._chunk(k, start, stop)[rows - start])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _gather_kept(self, unique: np.ndarray) -> np.ndarray:
        """:meth:`_gather` when the cache can hold all the data: decoded chunks are written
        at their rows of one array (allocated untouched: only the pages of chunks read
        take memory), so a gather is one indexing whatever the number of chunks."""
        bounds = self._bounds()
        with self._lock:
            if self._kept is None:
                self._kept = np.empty(self.shape, dtype=self.dtype)
                self._kept_chunks = np.zeros(len(bounds) - 1, dtype=bool)
        chunk_of = np.searchsorted(bounds, unique, side="right") - 1
        for k in np.unique(chunk_of[~self._kept_chunks[chunk_of]]).tolist():
            start, stop = int(bounds[k]), int(bounds[k + 1])
            self._kept[start:stop] = self._read_direct(slice(start, stop))
            self._kept_chunks[k] = True  # after the rows are written
        return self._kept[unique]

    def _cacheable(self, start: int, stop: int) -> bool:
        return (stop - start) * self._row_bytes <= self.cache_bytes

    def _chunk(self, k: int, start: int, stop: int) -> np.ndarray:
        """Chunk ``k`` (rows ``start:stop``), read once while it stays in the cache."""
        with self._lock:
            values = self._cache.get(k)
            if values is not None:
                self._cache.move_to_end(k)
                return values
        values = self._read_direct(slice(start, stop))
        values.setflags(write=False)  # shared by the cache and its readers
        if not self._cacheable(start, stop):
            return values
        with self._lock:
            self._cache[k] = values
            self._cached_bytes += values.nbytes
            while self._cached_bytes > self.cache_bytes and len(self._cache) > 1:
                _, dropped = self._cache.popitem(last=False)
                self._cached_bytes -= dropped.nbytes
        return values

    def _bounds(self) -> np.ndarray:
        if self._chunk_bounds is None:
            self._chunk_bounds = np.array([0, *(stop for _, stop in self.row_chunks())])
        return self._chunk_bounds

    def _read_direct(self, rows: slice) -> np.ndarray:
        part = self.array[rows]
        if _is_dask(self.array):
            part = part.compute(scheduler="sync")
        return np.array(part, dtype=self.dtype, copy=None)

    def __array__(self, dtype=None, copy=None):  # noqa: ARG002 - numpy's protocol
        global _materialised
        _materialised += 1
        self.whole_reads += 1
        whole = self._read_direct(slice(0, self.shape[0]))
        return whole if dtype is None else whole.astype(dtype, copy=False)
