"""Small PyTensor graph helpers that work on pytensor 2.x and 3.x."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.scalar.basic import Cast
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.type import TensorType

from pymc_minibatch_mh.data.chunked_data import chunked_source, is_data_leaf, swapped_rows
from pymc_minibatch_mh.data.row_source import RowSource

try:  # pytensor >= 2.30 / 3.x
    from pytensor.graph.traversal import ancestors, graph_inputs, toposort
except ImportError:  # pragma: no cover - older pytensor
    from pytensor.graph.basic import ancestors, graph_inputs
    from pytensor.graph.basic import io_toposort as _io_toposort

    def toposort(graphs):
        return _io_toposort(list(graph_inputs(graphs)), list(graphs))


__all__ = [
    "ancestors",
    "clients_of",
    "dependents",
    "data_leaves",
    "data_value",
    "graph_inputs",
    "integer_vector_gather",
    "rebuild_graph",
    "tensor_data_inputs",
]


def dependents(nodes: list, *roots: Variable) -> set:
    """The ``roots`` and every variable of ``nodes`` (in topological order) computed from
    any of them."""
    found = set(roots)
    for node in nodes:
        if any(var in found for var in node.inputs):
            found.update(node.outputs)
    return found


def clients_of(nodes: list) -> dict:
    """For each variable read by ``nodes``, the nodes that read it (in order)."""
    clients: dict = {}
    for node in nodes:
        for var in node.inputs:
            clients.setdefault(var, []).append(node)
    return clients


def data_value(var: Variable) -> np.ndarray | RowSource | None:
    """The numpy value of a tensor constant or tensor shared variable, else None.

    A dtype cast of one (PyMC casts integer ``pm.Data`` observations) is looked through.
    A :func:`~pymc_minibatch_mh.data.chunked_data.chunked_data` tensor gives its
    :class:`~pymc_minibatch_mh.data.row_source.RowSource` (rows read on demand, not the array).
    """
    if not isinstance(var.type, TensorType):
        return None
    source = chunked_source(var)
    if source is not None:
        return source
    swapped = swapped_rows(var)
    if swapped is not None:  # a chunked tall_array given new rows by pm.set_data
        return data_value(swapped)
    if isinstance(var, Constant):
        return np.asarray(var.data)
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value(borrow=True))
    if (
        var.owner is not None
        and isinstance(var.owner.op, Elemwise)
        and isinstance(var.owner.op.scalar_op, Cast)
    ):
        inner = data_value(var.owner.inputs[0])
        return None if inner is None else inner.astype(var.dtype)
    return None


def data_leaves(outputs: Iterable[Variable]) -> list[Variable]:
    """The graph's inputs and its :func:`chunked_data` and chunked ``tall_array`` tensors
    (not graph inputs: they have an owner), in one walk of the graph that does not go
    past them (a chunked ``tall_array``'s input only stands in for its array)."""
    leaves, seen, stack = [], set(), list(outputs)
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        if is_data_leaf(var):
            leaves.append(var)
        else:
            stack.extend(var.owner.inputs)  # right-recursive, as pytensor's ancestors
    return leaves


def tensor_data_inputs(outputs: Iterable[Variable]) -> list[tuple[Variable, np.ndarray]]:
    """All constant, shared or chunked tensor inputs of a graph with their values."""
    found = []
    for var in data_leaves(outputs):
        value = data_value(var)
        if value is not None:
            found.append((var, value))
    return found


def rebuild_graph(output: Variable, replace: dict[Variable, Variable]) -> Variable:
    """Rebuild ``output`` with ``replace`` applied, re-inferring every node's output type.

    Unlike :func:`pytensor.graph.replace.clone_replace`, a replacement may have a
    less specific static shape (``(None,)`` instead of ``(N,)``): nodes are remade
    with ``make_node`` and nothing pins the old shape with ``SpecifyShape``.
    """
    memo = dict(replace)
    for node in toposort([output]):
        new_inputs = [memo.get(var, var) for var in node.inputs]
        if all(new is old for new, old in zip(new_inputs, node.inputs, strict=True)):
            continue
        if _specialised_to_input_types(node.op):
            # pytensor 3 SymbolicOps (e.g. Softmax) are built for fixed input types and
            # their make_node would pin the old static shape; calling the op builds one
            # for the new types.
            new_outputs = node.op(*new_inputs, return_list=True)
        else:
            new_outputs = node.clone_with_new_inputs(new_inputs, strict=False).outputs
        memo.update(zip(node.outputs, new_outputs, strict=True))
    return memo.get(output, output)


def _specialised_to_input_types(op) -> bool:
    return any(cls.__name__ == "SymbolicOp" for cls in type(op).__mro__)


def constant_scalar(var: Variable, depth: int = 30) -> float | None:
    """The one value of ``var`` when it is a constant broadcast to some shape, folded
    through element-wise operations of constants (``floor(c) + 1``, casts, dimension
    shuffles and ``second(x, c)``, PyTensor's broadcast of ``c`` to the shape of ``x``);
    None otherwise. Data are never read."""
    from pytensor.scalar.basic import Second
    from pytensor.tensor.elemwise import DimShuffle

    if isinstance(var, Constant):
        value = np.asarray(var.data)
        if value.size == 0 or not np.all(value == value.flat[0]):
            return None
        return float(value.flat[0])
    node = var.owner
    if node is None or depth <= 0:
        return None
    if isinstance(node.op, DimShuffle):
        return constant_scalar(node.inputs[0], depth - 1)
    if not isinstance(node.op, Elemwise):
        return None
    if isinstance(node.op.scalar_op, Second):
        return constant_scalar(node.inputs[1], depth - 1)
    values = [constant_scalar(term, depth - 1) for term in node.inputs]
    if any(value is None for value in values):
        return None
    with np.errstate(all="ignore"):
        out = node.op.scalar_op.impl(*values)
    return None if isinstance(out, tuple | list) else float(out)


def unit_incomplete_beta_as_power(outputs: list[Variable]) -> list[Variable]:
    """``outputs`` with every regularised incomplete beta ``I_x(a, 1)`` (``betainc(a, 1,
    x)``) written as ``x ** a``, its closed form. PyMC's negative binomial cdf is
    ``betainc(n, floor(y) + 1, p)``, so a hurdle negative binomial's truncation at zero
    reads ``betainc(n, 1, p)``, whose second derivatives PyTensor does not implement
    (``ScalarLoop.grad``); the power has all of them."""
    from pytensor.graph.replace import clone_replace
    from pytensor.scalar.math import BetaInc

    replace = {}
    for var in ancestors(outputs):
        node = var.owner
        if node is None or not isinstance(node.op, Elemwise):
            continue
        if not isinstance(node.op.scalar_op, BetaInc):
            continue
        a, b, x = node.inputs
        if constant_scalar(b) == 1.0:
            power = x**a
            replace[var] = (power * (b * 0 + 1)).astype(var.dtype)  # b's shape
    if not replace:
        return list(outputs)
    return clone_replace(list(outputs), replace=replace)


def integer_vector_gather(node) -> bool:
    """Whether ``node`` is ``v[index]`` along the first axis by one integer vector
    (``AdvancedSubtensor1``, or ``AdvancedSubtensor`` with one index: pytensor 3 has only
    the latter and keeps the index pattern in the op)."""
    if type(node.op).__name__ not in ("AdvancedSubtensor1", "AdvancedSubtensor"):
        return False
    idx_list = getattr(node.op, "idx_list", None)
    if len(node.inputs) != 2 or (idx_list is not None and len(idx_list) != 1):
        return False
    index = node.inputs[1]
    return index.ndim == 1 and index.dtype.startswith(("int", "uint"))
