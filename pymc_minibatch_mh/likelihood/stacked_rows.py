"""Several data sets of different lengths on one stacked row axis.

A model may observe several data sets that share parameters (counts of one length and
yes/no answers of another). Data set ``k`` (observed variable ``k``, ``N_k`` rows) holds
the rows ``offsets[k] .. offsets[k] + N_k - 1`` of one stacked axis of
``N = N_1 + ... + N_K`` rows, in the order of ``model.observed_RVs``. The log-likelihood
is the sum over every row of every data set, so the kernels' estimate of it from a
uniform minibatch of the stacked axis, scaled by ``N / n``, is unbiased exactly as for
one data set: nothing in the kernels assumes that rows are alike, only that the total is
their sum.

A batch ``idx`` of stacked rows is split by data set, each data set's graph reads its own
rows (:func:`~pymc_minibatch_mh.likelihood.batching.gather_rows` on its local indices), and
the values go back to ``idx``'s positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.likelihood.batching import (
    datum_data_inputs,
    gather_rows,
    other_length_data_inputs,
    per_datum_sum,
)
from pymc_minibatch_mh.likelihood.compiling import data_as_placeholders
from pymc_minibatch_mh.likelihood.graph_tools import rebuild_graph
from pymc_minibatch_mh.likelihood.row_checks import checks_per_row


@dataclass(frozen=True)
class StackedRows:
    """Where each observed variable's rows sit on the stacked axis.

    Attributes
    ----------
    names : tuple of str
        The observed variables, in the model's order.
    lengths : tuple of int
        Their numbers of rows ``N_k``.
    """

    names: tuple[str, ...]
    lengths: tuple[int, ...]

    @property
    def offsets(self) -> tuple[int, ...]:
        """First stacked row of each data set."""
        return tuple(int(v) for v in np.concatenate([[0], np.cumsum(self.lengths)[:-1]]))

    @property
    def n_data(self) -> int:
        """Rows of the stacked axis, ``N = sum N_k``."""
        return int(sum(self.lengths))

    def data_set_of(self, rows: np.ndarray) -> np.ndarray:
        """The data set (index into :attr:`names`) of each stacked row."""
        return np.searchsorted(np.cumsum(self.lengths), np.asarray(rows), side="right")


def stacked_layout(lengths: dict[str, int]) -> StackedRows | None:
    """The stacked axis of observed variables of different lengths; None when they all
    have the same length (one ordinary row axis)."""
    if len(set(lengths.values())) <= 1:
        return None
    return StackedRows(tuple(lengths), tuple(int(n) for n in lengths.values()))


@dataclass(frozen=True)
class StackedGraphs:
    """The per-datum log-likelihood on all stacked rows (``full``) and on ``idx``
    (``batch``), and the data inputs of a data set whose leading axis is not its length
    (``other_lengths``, to explain a failed first evaluation)."""

    full: Variable
    batch: Variable
    other_lengths: dict[str, int]


def data_set_graphs(
    terms: Sequence[Variable], n_rows: int, idx: Variable, *, check_bounds: bool
) -> tuple[Variable, Variable, dict[str, int]]:
    """The per-datum log-likelihood of observed ``terms`` over the same ``n_rows`` rows: on
    all rows, on the rows ``idx``, and the data inputs whose leading axis is neither
    ``n_rows`` nor 1 (to explain a failed first evaluation).

    PyMC's parameter checks are taken row by row (one row's failed check must not reach
    the others), and the data become inputs of the compiled functions
    (:func:`~pymc_minibatch_mh.likelihood.compiling.data_placeholder`) with ``n_rows``, where
    the graph holds it as a length (PyMC's Alloc of a log-density to the observed size),
    their length: cache keys of the functions that change with neither.
    """
    per_datum = per_datum_sum(list(terms))
    data_vars = [var for var, _ in datum_data_inputs([per_datum], n_rows)]
    (per_datum,) = checks_per_row([per_datum], data_vars, check_bounds=check_bounds)
    other_lengths = {
        var.name or f"a numpy array of shape {value.shape}": value.shape[0]
        for var, value in other_length_data_inputs([per_datum], n_rows)
    }
    rows = gather_rows(per_datum, idx, n_rows)
    placeholders = data_as_placeholders([per_datum], n_rows)
    return (
        rebuild_graph(per_datum, placeholders),
        rebuild_graph(rows, placeholders),
        other_lengths,
    )


def stacked_graphs(
    terms: Sequence[Variable], layout: StackedRows, idx: Variable, *, check_bounds: bool
) -> StackedGraphs:
    """Per-datum graphs of the observed ``terms`` (one per data set, in ``layout``'s
    order) on the stacked axis, each data set's as :func:`data_set_graphs` makes them."""
    fulls, batch, other_lengths = [], pt.zeros(idx.shape, dtype="float64"), {}
    for term, n_rows, offset in zip(terms, layout.lengths, layout.offsets, strict=True):
        (positions,) = pt.nonzero((idx >= offset) & (idx < offset + n_rows))
        full, rows, others = data_set_graphs(
            [term], n_rows, idx[positions] - offset, check_bounds=check_bounds
        )
        other_lengths.update(others)
        batch = pt.set_subtensor(batch[positions], pt.cast(rows, "float64"))
        fulls.append(pt.cast(full, "float64"))
    return StackedGraphs(pt.concatenate(fulls), batch, other_lengths)
