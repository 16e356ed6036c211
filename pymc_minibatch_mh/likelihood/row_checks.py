"""PyMC's parameter checks in a per-datum log-likelihood, made to hold row by row.

PyMC wraps a distribution's log-density in ``check_parameters(logp, *conditions)``, which
reduces every condition to one scalar (``all`` over all its entries) and, in compiled
log-probability graphs, becomes ``switch(that scalar, logp, -inf)``. Summed into a model's
log-probability that is right. In a per-datum log-likelihood it is not: one row whose
parameter leaves its domain sets every row of the batch to ``-inf``, or, inside a
mixture, to the other component alone. Measured: a zero-inflated negative binomial whose
linear predictor reached -796 on one row (``mu = exp(eta)`` underflows to 0, and PyMC
5's check asks for ``mu > 0``) gave every row of a batch holding that row
``log(1 - psi)`` (-1.38 instead of -0.32 for a row with ``mu = 0.5``), and FlyMC's bound
check stopped the chain on the row it then seemed to exceed.

:func:`checks_per_row` rewrites each such check into ``switch(ok_n, logp_n, -inf)`` with
``ok_n`` the conditions of row ``n``: a condition that reads per-datum data keeps its
leading (row) axis, reduced over its other axes; a condition that does not is the same
for every row and stays one scalar.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pytensor.tensor as pt
from pymc.logprob.utils import CheckParameterValue
from pytensor.graph.basic import Variable
from pytensor.graph.replace import clone_replace
from pytensor.tensor.basic import MakeVector, ScalarFromTensor
from pytensor.tensor.math import All

from pymc_minibatch_mh.likelihood.graph_tools import ancestors

__all__ = ["checks_per_row"]


def checks_per_row(
    outputs: Sequence[Variable], row_inputs: Iterable[Variable], *, check_bounds: bool = True
) -> list[Variable]:
    """``outputs`` (per-datum log-likelihood terms, rows on axis 0) with every replaceable
    parameter check of PyMC taken row by row (module docstring).

    Parameters
    ----------
    outputs : sequence of Variable
        Graphs whose leading axis indexes the data rows.
    row_inputs : iterable of Variable
        The per-datum data inputs (a condition that reads one has rows on axis 0).
    check_bounds : bool, default True
        The model's flag: False removes the checks instead, as
        :func:`pymc.pytensorf.compile` does for such a model.

    Returns
    -------
    list of Variable
        ``outputs`` itself when there is no such check.
    """
    rows = set(row_inputs)
    outputs = list(outputs)
    # Checks nest (a mixture's components carry their own): each round replaces the
    # outermost ones, whose replacements still hold the inner ones.
    while True:
        replace = _row_wise_replacements(outputs, rows, check_bounds)
        if not replace:
            return outputs
        outputs = clone_replace(outputs, replace=replace)


def _row_wise_replacements(outputs: list[Variable], rows: set, check_bounds: bool) -> dict:
    """``{check's output: row-wise switch}`` (or the checked expression itself, without
    ``check_bounds``) for the checks of ``outputs`` that no other check holds."""
    replace = {}
    for var in ancestors(outputs):
        node = var.owner
        if node is None or not isinstance(node.op, CheckParameterValue):
            continue
        if not node.op.can_be_replaced_by_ninf:
            continue
        expr, flag = node.inputs[0], node.inputs[1:]
        if not check_bounds:
            replace[var] = expr
            continue
        if expr.ndim == 0:
            continue
        ok = None
        for condition in (leaf for f in flag for leaf in _conditions(f)):
            row_wise = condition.ndim >= 1 and not rows.isdisjoint(ancestors([condition]))
            if row_wise:
                per_row = condition
                if condition.ndim > 1:
                    per_row = pt.all(condition, axis=tuple(range(1, condition.ndim)))
                if expr.ndim > 1:
                    per_row = pt.shape_padright(per_row, expr.ndim - 1)
            else:
                per_row = pt.all(condition)
            ok = per_row if ok is None else pt.and_(ok, per_row)
        if ok is None:
            continue
        replace[var] = pt.switch(ok, expr, np.array(-np.inf, dtype=expr.dtype))
    inner = {v for out in replace for v in ancestors([out.owner.inputs[0]])}
    return {var: new for var, new in replace.items() if var not in inner}


def _conditions(flag: Variable) -> list[Variable]:
    """The conditions that ``flag`` reduces with ``all`` (itself if it is not such a
    reduction)."""
    node = flag.owner
    if node is not None and isinstance(node.op, ScalarFromTensor):
        return _conditions(node.inputs[0])
    if node is not None and isinstance(node.op, All) and node.op.axis is None:
        return _conditions(node.inputs[0])
    if node is not None and isinstance(node.op, MakeVector):
        return [leaf for part in node.inputs for leaf in _conditions(part)]
    return [flag]
