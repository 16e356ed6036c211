"""The likelihood's own parameters as a function of the sampled block (its image).

A per-datum log-likelihood reads the block ``q`` only through a few data-free
quantities: the coefficients of a linear predictor, the group intercepts
``a = mu + sigma * z`` of a non-centred hierarchy, a scale ``exp(log_sigma)``, a
Cholesky factor. Stacked into one vector ``phi = phi(q)`` (the *image* of ``q``), the
likelihood is ``l_i(q) = f_i(phi(q))``. A Taylor proxy of ``f_i`` in ``phi`` stays
accurate wherever the likelihood is close to Gaussian in its own parameters, even when
``phi(q)`` is strongly non-linear: for the non-centred hierarchy a proxy in ``q`` fits
only near its expansion point, while one in ``phi`` fits the whole posterior.

The image is found in the graph of the per-row log-likelihood: it is the set of
floating-point variables that depend on ``q`` but not on the rows, and feed an
operation that does. Everything the image needs (its value, and the gradient and
Hessian in ``q`` of the proxy through it) is data-free and costs ``O(D^2)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.tensor.elemwise import Elemwise

from pymc_minibatch_mh.likelihood.compiling import compile_function, jacobian
from pymc_minibatch_mh.likelihood.graph_tools import (
    ancestors,
    dependents,
    integer_vector_gather,
    rebuild_graph,
    toposort,
)
from pymc_minibatch_mh.likelihood.tall_data import TallData

#: The image is used only when it is at most this many times longer than the block
#: (plus a constant): its Hessian sums grow with the square of its length.
MAX_IMAGE_RATIO = 4
MAX_IMAGE_EXTRA = 32


@dataclass(frozen=True)
class LikelihoodImage:
    """The map ``q -> phi`` and the per-row log-likelihood as a graph in ``phi``.

    Attributes
    ----------
    size : int
        Length of ``phi``.
    stacked : TensorVariable
        ``phi`` as a graph of the block vector ``q`` (the TallData's ``q`` input).
    phi : TensorVariable
        The vector input of ``batch``.
    batch : TensorVariable
        Per-row log-likelihood of the rows ``idx`` (the TallData's index input) at ``phi``.
    to_image : callable
        ``to_image(q) -> phi``.
    pull_back : callable
        ``pull_back(q, g, H) -> (J^T g, J^T H J + sum_k g_k hess phi_k)``: gradient and
        Hessian in ``q`` of a function of ``phi`` with gradient ``g`` and Hessian ``H``
        at ``phi(q)`` (chain rule; ``J`` is the Jacobian of ``phi``).
    """

    size: int
    stacked: Variable
    phi: Variable
    batch: Variable
    to_image: Callable[[np.ndarray], np.ndarray]
    pull_back: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple]


def find_likelihood_image(tall_data: TallData, q0: np.ndarray) -> LikelihoodImage | None:
    """The image of the block in the likelihood, or None when it would not help.

    None is returned when the likelihood reads the block in a way that is not through
    floating-point data-free variables (the rewritten graph still depends on ``q``), or
    when the image is much longer than the block.

    Parameters
    ----------
    tall_data : TallData
        Compiled model functions with their graphs.
    q0 : ndarray
        A point of the block where the likelihood is finite (fixes the image's shapes).
    """
    graphs = tall_data.graphs
    q, idx = graphs.q, graphs.idx
    batch = lift_row_gathers(graphs.batch, q, idx)
    frontier = _frontier(batch, q, idx)
    if not frontier:
        return None
    kwargs = graphs.compile_kwargs
    parts_fn = compile_function([q], frontier, **kwargs)
    values = parts_fn(np.asarray(q0, dtype=q.dtype))
    # A non-finite entry (e.g. a switch between 0 and -inf that guards a support) is no
    # coordinate for a Taylor proxy: leave it to be recomputed from the other entries.
    kept = [
        (var, np.shape(v))
        for var, v in zip(frontier, values, strict=True)
        if np.all(np.isfinite(v))
    ]
    if not kept:
        return None
    frontier = [var for var, _ in kept]
    shapes = [shape for _, shape in kept]
    size = int(sum(int(np.prod(shape)) for shape in shapes))
    if size > MAX_IMAGE_RATIO * tall_data.ndim + MAX_IMAGE_EXTRA:
        return None
    phi = pt.vector("phi", dtype="float64")
    replace, start = {}, 0
    for var, shape in zip(frontier, shapes, strict=True):
        length = int(np.prod(shape))
        piece = phi[start : start + length].reshape(shape) if shape else phi[start]
        replace[var] = pt.cast(piece, var.dtype)
        start += length
    batch_phi = rebuild_graph(batch, replace)
    if q in set(ancestors([batch_phi])):
        return None
    stacked = pt.concatenate([pt.cast(var, "float64").ravel() for var in frontier])
    to_image = compile_function([q], stacked, **kwargs)
    g = pt.vector("g", dtype="float64")
    h = pt.matrix("h", dtype="float64")
    jac = jacobian(stacked, q, disconnected_inputs="ignore")
    weighted = pt.grad(pt.dot(g, stacked), q, disconnected_inputs="ignore")
    curvature = jacobian(weighted, q, disconnected_inputs="ignore")
    pull_back = compile_function(
        [q, g, h], [jac.T @ g, jac.T @ h @ jac + curvature], on_unused_input="ignore", **kwargs
    )
    for fn in (to_image, pull_back):
        fn.trust_input = True
    return LikelihoodImage(
        size=size, stacked=stacked, phi=phi, batch=batch_phi, to_image=to_image, pull_back=pull_back
    )


#: Largest number of gathers moved by :func:`lift_row_gathers` (a guard on the loop).
MAX_LIFTS = 200


def lift_row_gathers(batch: Variable, q: Variable, idx: Variable) -> Variable:
    """Move row-free elementwise operations inside the gathers over rows they act on.

    A non-centred effect is written ``sigma * z[group]``: the gather ``z[group]`` reads
    the rows, so the data-free quantities the likelihood reads are ``sigma`` and ``z``
    separately, and a Taylor proxy in them fits only near its expansion point (the
    posterior is curved along ``sigma * z = const``). Rewritten as
    ``(sigma * z)[group]``, the likelihood reads the group effects themselves, in which
    it is close to Gaussian. The rewrite applies to an elementwise node affine in its one
    input that depends on the rows (sum, difference, product, negation, division of it),
    when that input is a gather ``z[i]`` along the first
    axis of a block-dependent ``z`` by a vector ``i`` and every other input is row-free and
    broadcasts along that axis (a scalar or an ``(1, K)`` row): then
    ``op(z[i], c) == op(z, c)[i]``. It is repeated until no node qualifies, so
    ``mu + sigma * z[group]`` becomes ``(mu + sigma * z)[group]``.
    """
    for _ in range(MAX_LIFTS):
        lift = _next_liftable(batch, q, idx)
        if lift is None:
            return batch
        node, position = lift
        gather = node.inputs[position].owner
        source, index = gather.inputs
        others = list(node.inputs)
        others[position] = source
        moved = node.op(*others)
        lifted = gather.clone_with_new_inputs([moved, index], strict=False).outputs[0]
        batch = rebuild_graph(batch, {node.outputs[0]: lifted})
    return batch


def _next_liftable(batch: Variable, q: Variable, idx: Variable):
    """The first ``(node, position of its gather input)`` :func:`lift_row_gathers` moves."""
    nodes = list(toposort([batch]))
    on_rows, on_q = dependents(nodes, idx), dependents(nodes, q)
    for node in nodes:
        if not isinstance(node.op, Elemwise) or len(node.outputs) != 1:
            continue
        row_inputs = [k for k, var in enumerate(node.inputs) if var in on_rows]
        if len(row_inputs) != 1 or not _affine_in(node, row_inputs[0]):
            continue
        gathered = node.inputs[row_inputs[0]]
        gather = gathered.owner
        if gather is None or not _is_row_gather(gather, on_rows, on_q):
            continue
        out = node.outputs[0]
        if out.ndim != gathered.ndim or out.dtype != gathered.dtype:
            continue
        others = [var for k, var in enumerate(node.inputs) if k != row_inputs[0]]
        if all(var.ndim == out.ndim and var.broadcastable[0] for var in others):
            return node, row_inputs[0]
    return None


#: Elementwise operations affine in each input (TrueDiv: in its numerator only).
_AFFINE_OPS = ("Add", "Sub", "Mul", "Neg")


def _affine_in(node, position: int) -> bool:
    """Whether the elementwise ``node`` is affine in its input ``position`` (the others
    fixed). Only such operations are moved inside a gather: a scale and shift keep the
    image a vector of effects, while a non-linear map (``exp(z[g])``, ``invlogit(z[g])``)
    would put the proxy in a less Gaussian coordinate."""
    name = type(node.op.scalar_op).__name__
    return name in _AFFINE_OPS or (name == "TrueDiv" and position == 0)


def _is_row_gather(node, on_rows: set, on_q: set) -> bool:
    """``z[i]`` along the first axis, ``z`` row-free and block-dependent, ``i`` a vector of
    row-dependent integers (``AdvancedSubtensor1``, or ``AdvancedSubtensor`` with one
    index)."""
    if not integer_vector_gather(node):
        return False
    source, index = node.inputs
    return (
        source in on_q
        and source not in on_rows
        and index in on_rows
        and node.outputs[0].ndim == source.ndim
    )


def _frontier(batch: Variable, q: Variable, idx: Variable) -> list[Variable]:
    """Floating-point variables that depend on ``q`` but not on ``idx`` and are read by an
    operation that depends on ``idx`` (in a fixed graph order)."""
    nodes = list(toposort([batch]))
    on_rows, on_q = dependents(nodes, idx), dependents(nodes, q)
    frontier, seen = [], set()
    for node in nodes:
        if not any(out in on_rows for out in node.outputs):
            continue
        for var in node.inputs:
            if var in on_q and var not in on_rows and var not in seen:
                seen.add(var)
                frontier.append(var)
    if any(not var.dtype.startswith("float") for var in frontier):
        # Only differentiable quantities can carry a Taylor proxy; a boolean test of the
        # parameters (a support check) is fine when it is built from other image entries.
        floats = [var for var in frontier if var.dtype.startswith("float")]
        return floats if floats else []
    return frontier
