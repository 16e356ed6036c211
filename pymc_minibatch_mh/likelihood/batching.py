"""Rewrite a per-datum log-likelihood graph so that it reads only the rows ``idx``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.data.chunked_data import ChunkedRows, chunked_source
from pymc_minibatch_mh.likelihood.graph_tools import rebuild_graph, tensor_data_inputs

_INTEGER_KINDS = "iu"
_MAX_SHAPE_LENGTH = 32  # longest integer vector treated as a shape/size argument


def gather_rows(loglik: Variable, idx: Variable, n_data: int) -> Variable:
    """Return ``loglik`` rebuilt on ``data[idx]`` for every input with N rows.

    Every constant or shared tensor input whose leading axis has length
    ``n_data`` is replaced by its rows ``idx``, and every integer scalar input
    or short integer vector holding ``n_data`` (a dimension length or ``size``
    used by ``Alloc``) has those entries replaced by ``len(idx)``. The result
    therefore costs ``O(len(idx))``; indexing the full-data output instead would
    cost ``O(N)``.
    """
    placeholders, gathers = {}, {}
    for var, value in tensor_data_inputs([loglik]):
        if _has_datum_axis(value, n_data):
            rows = pt.tensor(dtype=var.dtype, shape=(None, *value.shape[1:]))
            placeholders[var] = rows
            source = chunked_source(var)
            # Chunked data (zarr / Dask) read the rows when the graph runs.
            gathers[rows] = var[idx] if source is None else ChunkedRows(source)(idx)
    for var, length in shape_constants_as_length([loglik], n_data, idx).items():
        placeholders.setdefault(var, length)  # a data input of N rows stays data
    if not gathers:
        raise ValueError(
            f"No data input with N = {n_data} rows was found in the log-likelihood graph, "
            "so it cannot be subsampled."
        )
    on_rows = rebuild_graph(loglik, placeholders)
    leftover = [
        var.name or str(var)
        for var, value in tensor_data_inputs([on_rows])
        if value.ndim >= 1 and n_data in value.shape
    ]
    if leftover:
        raise ValueError(
            f"The log-likelihood reads data {leftover} with an axis of length N = {n_data} "
            "that is not the leading axis, so a minibatch would still touch all N rows. "
            "Store per-datum data with the data points along axis 0."
        )
    batched = rebuild_graph(on_rows, gathers)
    return batched


def shape_constants_as_length(outputs: Sequence[Variable], n_data: int, like: Variable) -> dict:
    """Replacements for the integer constants of a graph that hold ``n_data`` as a length
    (an ``Alloc``'s shape, a ``size``): each such entry becomes ``like.shape[0]``.

    PyMC broadcasts an observed variable's log-density to its size, a constant ``(N,)``;
    with these replacements a graph whose data are placeholders (``like`` is one, of
    leading length N) holds no N, so one compiled function serves every N.
    """
    return {
        var: _shape_with_batch_length(value, like, n_data)
        for var, value in tensor_data_inputs(outputs)
        if _is_shape_constant(value, n_data)
    }


def datum_data_inputs(
    outputs: Sequence[Variable], n_data: int
) -> list[tuple[Variable, np.ndarray]]:
    """Constant or shared tensor inputs of a graph with ``n_data`` entries along axis 0.

    These are the inputs :func:`gather_rows` replaces by their rows ``idx``.
    """
    return [
        (var, value) for var, value in tensor_data_inputs(outputs) if _has_datum_axis(value, n_data)
    ]


def other_length_data_inputs(
    outputs: Sequence[Variable], n_data: int
) -> list[tuple[Variable, np.ndarray]]:
    """Array inputs of a graph whose leading axis has neither ``n_data`` nor 1 entries.

    Integer vectors short enough to be shape or size arguments are left out.
    """
    return [
        (var, value)
        for var, value in tensor_data_inputs(outputs)
        if value.ndim >= 1
        and value.shape[0] not in (1, n_data)
        and not (value.dtype.kind in _INTEGER_KINDS and value.size <= _MAX_SHAPE_LENGTH)
    ]


def _has_datum_axis(value: np.ndarray, n_data: int) -> bool:
    return value.ndim >= 1 and value.shape[0] == n_data


def _is_shape_constant(value: np.ndarray, n_data: int) -> bool:
    return (
        value.dtype.kind in _INTEGER_KINDS
        and value.ndim <= 1
        and value.size <= _MAX_SHAPE_LENGTH
        and bool(np.any(value == n_data))
    )


def _shape_with_batch_length(value: np.ndarray, like: Variable, n_data: int) -> Variable:
    batch_length = pt.cast(like.shape[0], value.dtype)
    if value.ndim == 0:
        return batch_length
    return pt.stack(
        [batch_length if v == n_data else pt.constant(v, dtype=value.dtype) for v in value]
    )


def per_datum_sum(terms: list[Variable]) -> Variable:
    """Sum observed-variable log-density terms into one ``(N,)`` vector."""
    total = None
    for term in terms:
        if term.ndim > 1:
            term = term.sum(axis=tuple(range(1, term.ndim)))
        total = term if total is None else total + term
    return total


def probe_indices(n_data: int, size: int = 16) -> np.ndarray:
    """A fixed, deterministic spread of row indices used to self-check the batched graph."""
    return np.unique(np.linspace(0, n_data - 1, num=min(size, n_data)).astype(np.int64))
