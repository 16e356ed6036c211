"""A design matrix kept as its factors, so that its N rows are never stored as float64.

The recogniser finds linear predictors ``eta = design @ q + offset`` whose design is
``features @ coefficient map`` (``X @ beta``) plus columns that are the same on every row
(an intercept) and other per-row columns (terms such as ``b * x[:, 2]`` written outside
a matrix product, stored as float64 columns). Storing that design densely costs
``8 N D`` bytes (0.9 GB at N = 10^7, D = 11) and a float64 copy of features that may live
in a float32 file on disk. :class:`RowDesign` keeps the features as they are (a
``np.memmap`` included) and forms float64 rows only for the rows asked for: a gather of
a minibatch, or one chunk of a full-data pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from pymc_minibatch_mh.data.blocks import rows_per_chunk
from pymc_minibatch_mh.data.file_arrays import portable, restored


@dataclass(frozen=True, eq=False)
class FeatureBlock:
    """``weight[:, None] * (features @ coef_map)``: one product ``X @ W(q)`` of the design.

    Attributes
    ----------
    features : ndarray, shape (N, P)
        The data matrix as the model holds it (any real dtype; may be a ``np.memmap``).
    coef_map : ndarray, shape (P, D)
        How the P coefficients depend on ``q``.
    weight : float or ndarray of shape (N,)
        The derivative of the linear predictor by the product, per row (1 for
        ``X @ beta + a``).
    """

    features: np.ndarray
    coef_map: np.ndarray
    weight: float | np.ndarray = 1.0

    def __getstate__(self):
        # Features read from a file go to chains' worker processes as the file.
        state = {**self.__dict__, "features": portable(self.features)}
        state.pop("_placement", None)
        return state

    @property
    def placement(self) -> np.ndarray | None:
        """The design columns of the features when ``coef_map`` only places them (one
        entry 1 per row, in distinct columns, as for ``X @ beta``), else None: the rows
        are then copied into those columns instead of multiplied by the ``(P, D)`` map
        (at P = 100, D = 101 and 56 rows, 125 µs a gather, most of a FlyMC trajectory's
        set-up)."""
        if "_placement" not in self.__dict__:
            object.__setattr__(self, "_placement", _placement(np.asarray(self.coef_map)))
        return self.__dict__["_placement"]

    def rows_in_design(self, rows) -> tuple[np.ndarray | slice, np.ndarray]:
        """``(columns, values)``: the block's contribution to ``design[rows]`` is ``values``
        added in ``columns`` (``slice(None)``: every column)."""
        features = np.asarray(self.features[rows], dtype=np.float64)
        columns = self.placement
        if columns is None:
            return slice(None), _weighted(features @ self.coef_map, self.weight, rows)
        return columns, _weighted(features, self.weight, rows)

    def __setstate__(self, state):
        for name, value in state.items():
            object.__setattr__(self, name, restored(value))


@dataclass(frozen=True, eq=False)
class IndexedColumns:
    """Columns of which each row touches at most one: ``design[i, columns[index[i]]] +=
    value[i]`` (nothing where ``index[i] = -1``), e.g. a group intercept ``a[g]`` or a
    varying slope ``b[g] * x``. Stored in ``O(N)`` instead of ``O(N G)``.

    Attributes
    ----------
    columns : ndarray of int, shape (G,)
        The block coordinates of the variable.
    index : ndarray of int32, shape (N,)
        Which of them each row touches (``-1``: none).
    value : float or ndarray of shape (N,)
        The entry of each row (0 where none).
    """

    columns: np.ndarray
    index: np.ndarray
    value: float | np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", _read_only(np.asarray(self.columns, np.int64)))
        object.__setattr__(self, "index", _read_only(np.asarray(self.index, np.int32)))
        if np.ndim(self.value) != 0:
            object.__setattr__(self, "value", _read_only(np.asarray(self.value, np.float64)))

    def rows(self, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(positions among rows, columns, values)`` of the touched entries of ``rows``."""
        index = np.asarray(self.index[rows])
        value = self.value if np.ndim(self.value) == 0 else np.asarray(self.value[rows])
        where = np.flatnonzero(index >= 0)
        values = np.broadcast_to(value, index.shape)[where]
        return where, self.columns[index[where]], values


class RowDesign:
    """An ``(N, D)`` float64 design matrix formed row block by row block.

    ``design[rows] = sum_j weight_j[rows, None] * (features_j[rows] @ coef_map_j)
    + dense[rows] + constant_row``. Indexing with a slice or an integer array returns
    those rows as a dense float64 array; ``design @ w`` is computed in chunks of rows;
    ``np.asarray(design)`` forms the whole matrix (avoid it for data on disk).

    Parameters
    ----------
    n_rows, n_cols : int
        N and D.
    blocks : sequence of FeatureBlock
        The products of data matrices and coefficient maps.
    constant_row : ndarray, shape (D,)
        Columns that are the same on every row (an intercept's column of ones).
    dense : ndarray, shape (N, k), optional
        Other per-row columns (e.g. from ``b * x[:, 2]`` outside a matrix product), as
        float64; None if there are none.
    dense_columns : sequence of int, optional
        The design columns of ``dense`` (default: all D columns).
    """

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(
        self,
        n_rows: int,
        n_cols: int,
        blocks=(),
        constant_row: np.ndarray | None = None,
        dense: np.ndarray | None = None,
        dense_columns=None,
        indexed=(),
    ):
        self.n_rows, self.n_cols = int(n_rows), int(n_cols)
        self.indexed = tuple(indexed)
        for part in self.indexed:
            if part.index.shape != (self.n_rows,) or np.any(part.columns >= self.n_cols):
                raise ValueError("Indexed columns must give one index per row and valid columns.")
        self.blocks = tuple(blocks)
        row = np.zeros(n_cols) if constant_row is None else np.asarray(constant_row, np.float64)
        if row.shape != (n_cols,):
            raise ValueError(f"constant_row must have shape ({n_cols},); got {row.shape}.")
        self.constant_row = _read_only(row)
        columns = np.arange(n_cols) if dense_columns is None else np.asarray(dense_columns, int)
        if dense is not None:
            dense = np.asarray(dense, dtype=np.float64)
            if dense.shape != (n_rows, columns.size):
                raise ValueError(
                    f"dense must have shape ({n_rows}, {columns.size}); got {dense.shape}."
                )
            dense = _read_only(dense)
        self.dense = dense
        self.dense_columns = _read_only(columns)
        for block in self.blocks:
            if block.features.ndim != 2 or block.features.shape[0] != n_rows:
                raise ValueError(
                    f"Features of shape {block.features.shape} do not have N = {n_rows} rows."
                )
            if block.coef_map.shape != (block.features.shape[1], n_cols):
                raise ValueError(
                    f"A coefficient map has shape {block.coef_map.shape}; expected "
                    f"({block.features.shape[1]}, {n_cols})."
                )

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.n_cols)

    @property
    def size(self) -> int:
        return self.n_rows * self.n_cols

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        kinds = [f"{b.features.dtype}{list(b.features.shape)}" for b in self.blocks]
        return (
            f"RowDesign(shape={self.shape}, features={kinds}, dense={self.dense is not None}, "
            f"indexed={len(self.indexed)})"
        )

    def __getitem__(self, rows) -> np.ndarray:
        """Dense float64 rows: ``rows`` is a slice, an integer array or an integer."""
        if isinstance(rows, tuple):
            if len(rows) == 2:
                return self[rows[0]][:, rows[1]]
            raise IndexError("A RowDesign is indexed by rows (and optionally columns).")
        scalar = np.ndim(rows) == 0 and not isinstance(rows, slice)
        if scalar:
            rows = np.array([rows])
        if not isinstance(rows, slice):
            rows = np.asarray(rows)
            if rows.dtype == bool:
                rows = np.flatnonzero(rows)
        n = len(range(self.n_rows)[rows]) if isinstance(rows, slice) else rows.size
        out = np.broadcast_to(self.constant_row, (n, self.n_cols)).copy()
        for block in self.blocks:
            columns, values = block.rows_in_design(rows)
            out[:, _as_slice(columns)] += values
        if self.dense is not None:
            out[:, self.dense_columns] += self.dense[rows]
        for part in self.indexed:
            where, cols, values = part.rows(rows)
            out[where, cols] += values
        return out[0] if scalar else out

    @property
    def shared_columns(self) -> np.ndarray:
        """Sorted columns that rows may share: those of the constant row, of the feature
        products and of the dense columns (the indexed columns are the rest)."""
        touched = self.constant_row != 0.0
        for block in self.blocks:
            touched |= np.any(block.coef_map != 0.0, axis=0)
        if self.dense is not None:
            touched[self.dense_columns] = True
        return np.flatnonzero(touched)

    def sparse(self, rows: slice):
        """``design[rows]`` as a ``scipy.sparse`` CSR matrix, formed without the dense
        ``(n, D)`` block: the shared columns densely, each indexed part as one entry per
        row (a 500-group design: 3 stored entries per row instead of 505)."""
        from scipy import sparse

        n = len(range(self.n_rows)[rows])
        shared = self.shared_columns
        part = np.broadcast_to(self.constant_row[shared], (n, shared.size)).copy()
        for block in self.blocks:
            features = np.asarray(block.features[rows], dtype=np.float64)
            part += _weighted(features @ block.coef_map[:, shared], block.weight, rows)
        if self.dense is not None:
            part[:, np.searchsorted(shared, self.dense_columns)] += self.dense[rows]
        row_ids = [np.repeat(np.arange(n), shared.size)]
        col_ids = [np.tile(shared, n)]
        values = [part.ravel()]
        for indexed in self.indexed:
            where, cols, vals = indexed.rows(rows)
            row_ids.append(where)
            col_ids.append(cols)
            values.append(np.asarray(vals, dtype=np.float64))
        # Entries at the same place (an indexed column that is also shared) are summed.
        return sparse.csr_matrix(
            (np.concatenate(values), (np.concatenate(row_ids), np.concatenate(col_ids))),
            shape=(n, self.n_cols),
        )

    def chunks(self, chunk_rows: int | None = None) -> Iterator[tuple[slice, np.ndarray]]:
        """``(rows, design[rows])`` over consecutive row blocks covering all N rows
        (:func:`rows_per_chunk` rows each by default)."""
        chunk_rows = rows_per_chunk(self.n_cols) if chunk_rows is None else chunk_rows
        for start in range(0, self.n_rows, chunk_rows):
            rows = slice(start, min(start + chunk_rows, self.n_rows))
            yield rows, self[rows]

    def dot(self, w: np.ndarray, rows=None) -> np.ndarray:
        """``design[rows] @ w`` (all rows if None) without forming the rows' design.

        ``w`` has shape (D,) or (D, K).
        """
        w = np.asarray(w, dtype=np.float64)
        if rows is not None and _every_row_in_order(rows, self.n_rows):
            rows = None  # FlyMC's first draw of z reads all N rows: a pass, without a gather
        if rows is None:  # a pass, as Dask tasks when the features are chunked data
            from pymc_minibatch_mh.data.chunk_pass import design_map

            return design_map(self, _dot_rows, args=(w,))
        out = None
        for block in self.blocks:
            features = np.asarray(block.features[rows], dtype=np.float64)
            part = _weighted(features @ (block.coef_map @ w), block.weight, rows)
            out = part if out is None else out + part
        const = self.constant_row @ w
        if out is None:
            n = len(range(self.n_rows)[rows]) if isinstance(rows, slice) else np.size(rows)
            out = np.broadcast_to(const, (n, *w.shape[1:])).copy()
        else:
            out += const
        if self.dense is not None:
            out += self.dense[rows] @ w[self.dense_columns]
        for part in self.indexed:
            where, cols, values = part.rows(rows)
            out[where] += values.reshape(-1, *([1] * (w.ndim - 1))) * w[cols]
        return out

    def __matmul__(self, w) -> np.ndarray:
        return self.dot(w)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self[slice(None)]
        return whole if dtype is None else whole.astype(dtype, copy=False)


def _dot_rows(design: RowDesign, rows: slice, w: np.ndarray) -> np.ndarray:
    """``design[rows] @ w``: one block of :meth:`RowDesign.dot` over all rows."""
    return design.dot(w, rows)


def row_supports(design, max_own: int = 8) -> tuple[np.ndarray, np.ndarray] | None:
    """The coordinates each row of a :class:`RowDesign` touches: ``(patterns, shared)``.

    ``shared`` holds the columns of the products' coefficient maps and of the constant
    row (every row may touch them); ``patterns`` (N, r) the per-row columns that are
    nonzero on that row, padded with ``-1``. None for other designs, or when some row
    touches more than ``max_own`` per-row columns (no sparse structure to use). One pass
    over the per-row columns, in blocks of rows.
    """
    if not isinstance(design, RowDesign) or (design.dense is None and not design.indexed):
        return None
    shared = [np.flatnonzero(design.constant_row)]
    for block in design.blocks:
        shared.append(np.flatnonzero(np.any(np.asarray(block.coef_map) != 0, axis=0)))
    shared = np.unique(np.concatenate(shared)).astype(np.int64)
    n = design.n_rows
    parts = [
        np.where(part.index >= 0, part.columns[np.maximum(part.index, 0)], -1)[:, None]
        for part in design.indexed
    ]
    if design.dense is not None:
        dense, columns = design.dense, np.asarray(design.dense_columns, dtype=np.int64)
        step = rows_per_chunk(dense.shape[1])
        counts = np.empty(n, dtype=np.int64)
        for start in range(0, n, step):
            counts[start : start + step] = np.count_nonzero(dense[start : start + step], axis=1)
        width = int(counts.max()) if n else 0
        if width > max_own:
            return None
        own = np.full((n, width), -1, dtype=np.int64)
        for start in range(0, n, step):
            rows, cols = np.nonzero(dense[start : start + step])
            first = np.searchsorted(rows, rows, side="left")
            own[start + rows, np.arange(rows.size) - first] = columns[cols]
        parts.append(own)
    patterns = np.concatenate(parts, axis=1) if parts else np.empty((n, 0), np.int64)
    if patterns.shape[1] == 0 or patterns.shape[1] > max_own:
        return None
    return patterns.astype(np.int64, copy=False), shared


def design_rows(design) -> np.ndarray | RowDesign:
    """A design as the bounds read it: a :class:`RowDesign` unchanged (rows on demand),
    anything else as a float64 array."""
    if isinstance(design, RowDesign):
        return design
    return np.asarray(design, dtype=np.float64)


def _placement(coef_map: np.ndarray) -> np.ndarray | None:
    """Column of each row of ``coef_map`` if it is a placement (a single 1 per row, no
    column used twice, zeros elsewhere), else None."""
    if coef_map.ndim != 2 or coef_map.shape[0] == 0:
        return None
    columns = np.argmax(coef_map != 0.0, axis=1)
    expected = np.zeros_like(coef_map, dtype=np.float64)
    expected[np.arange(coef_map.shape[0]), columns] = 1.0
    if np.unique(columns).size != columns.size or not np.array_equal(coef_map, expected):
        return None
    return _read_only(columns.astype(np.int64))


def _weighted(product: np.ndarray, weight, rows) -> np.ndarray:
    """``weight[rows] * product`` row by row (a scalar weight multiplies every row)."""
    if np.ndim(weight) == 0:
        return product if float(weight) == 1.0 else float(weight) * product
    row_weight = np.asarray(weight[rows], dtype=np.float64)
    return row_weight.reshape(-1, *([1] * (product.ndim - 1))) * product


def _as_slice(columns):
    """``columns`` as a slice when they are consecutive and increasing (a strided update of
    the rows' block instead of a scatter: 10x faster for ``X @ beta`` placed in the
    design, 1e5 rows of 100 columns), else unchanged."""
    if isinstance(columns, slice) or not np.size(columns):
        return columns
    start, stop = int(columns[0]), int(columns[-1]) + 1
    if stop - start == columns.size and np.all(np.diff(columns) == 1):
        return slice(start, stop)
    return columns


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


def _every_row_in_order(rows, n_rows: int) -> bool:
    """Whether the index array ``rows`` is ``0, 1, ..., n_rows - 1`` (checked in O(N) only
    when its length is ``n_rows``)."""
    if isinstance(rows, slice) or np.ndim(rows) != 1 or np.size(rows) != n_rows or n_rows < 2:
        return False
    rows = np.asarray(rows)
    if rows.dtype.kind not in "iu" or rows[0] != 0 or rows[-1] != n_rows - 1:
        return False
    return bool(np.all(np.diff(rows) == 1))
