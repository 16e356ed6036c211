"""Hessian sums of a per-row log-likelihood from a few Hessian-vector products.

The Taylor passes need ``sum_i hess l_i(x)`` over all rows. Built as a dense Jacobian of
the gradient it costs one reverse pass over the chunk per coordinate of ``x``: with 500
group intercepts, 505 reverse passes per chunk, and a pass over 10^6 rows takes seconds.

Most of those columns are known to be sparse. A row of a multilevel model reads one
intercept ``a[g_i]`` of the 500: the intercepts of two different groups never meet in a
row, so ``H[a_j, a_k] = 0`` for ``j != k``. Then the product of ``H`` with the indicator
vector ``1_a`` of all intercepts gives every diagonal entry ``H[a_j, a_j]`` at once, and
the entries between an intercept and a shared coordinate ``s`` come from the column of
``s`` (by symmetry). Vectors gathered by the *same* row index (an intercept and a slope
``b[g_i]``) share that structure: ``H[b_j, a_k] = 0`` for ``j != k``, so ``H 1_a`` also
gives ``H[b_j, a_j]``. This is the column compression of Curtis, Powell and Reid [1]_
with one colour per gathered vector and one per remaining coordinate [2]_: the Hessian
of the 500-group model takes 5 products instead of 505.

The structure is read from the graph: a block of coordinates is compressed only when the
graph reads it through nothing but a re-indexing of ``x`` (slices, reshapes) that is
gathered along the rows by one index vector. Everything else keeps a colour per
coordinate (with no gathered block this is the dense Hessian). The compiled function
takes the matrix of colour vectors as an input, so a check of the recovered Hessian
against products with random vectors costs no second compilation; a mismatch switches
to the dense colouring.

References
----------
.. [1] Curtis, A. R., Powell, M. J. D., Reid, J. K. "On the estimation of sparse
   Jacobian matrices", IMA Journal of Applied Mathematics 13, 1974.
.. [2] Gebremedhin, A. H., Manne, F., Pothen, A. "What color is your Jacobian? Graph
   coloring for computing derivatives", SIAM Review 47, 2005.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Constant, Variable

from pymc_minibatch_mh.likelihood.coloured_hessian import (
    MIN_SAVED_COLUMNS,
    ColouredSumDerivatives,
    HessianColouring,
)
from pymc_minibatch_mh.likelihood.compiling import compile_function, jacobian
from pymc_minibatch_mh.likelihood.differenced_products import DifferencedProducts
from pymc_minibatch_mh.likelihood.graph_tools import (
    clients_of,
    dependents,
    graph_inputs,
    toposort,
)
from pymc_minibatch_mh.likelihood.image import _is_row_gather

#: Whether the products may be differences of compiled gradient sums
#: (:class:`~pymc_minibatch_mh.likelihood.differenced_products.DifferencedProducts`) on a
#: first run, instead of a compiled graph of products.
DIFFERENCED_PRODUCTS = True
#: Largest rows times colours per pass for which a first run takes differences: at
#: 10^6 rows and 5 colours, about 30 gradient sums of 20 ms per pass instead of one
#: graph of products; a cold compilation of that graph took 20-56 s on numba.
DIFFERENCED_ROWS = 10_000_000
#: Operations through which a gathered block may be read from ``x`` (pure re-indexing).
_REINDEXING_OPS = ("Subtensor", "Reshape", "DimShuffle", "SpecifyShape")


def compile_coloured_sum_derivatives(
    x: Variable,
    batch: Variable,
    idx: Variable,
    compile_kwargs: dict,
    *,
    size: int | None = None,
    n_data: int | None = None,
) -> ColouredSumDerivatives:
    """Compile the value, gradient and Hessian sums of ``batch.sum()`` in the vector ``x``
    (of length ``size``, read from its type if not given) with the colouring
    :func:`hessian_colouring` finds in the graph.

    The products ``H V`` come from their compiled graph when the package's function
    cache holds it (a warm run), or when differences would cost too much: more than
    :data:`DIFFERENCED_ROWS` rows times colours per pass (``n_data`` rows; unknown counts
    as too many). Otherwise (a first run on data of moderate size) they are differences of
    the compiled gradient sums (:class:`~pymc_minibatch_mh.likelihood.
    differenced_products.DifferencedProducts`), whose function compiles several times
    faster than the products' graph; about ``4-8 C`` gradient evaluations per block of
    rows instead of ``C`` products.
    """
    size = _static_length(x) if size is None else int(size)
    if size is None:
        raise ValueError("the length of x is needed for its Hessian colouring; pass size=")
    total = batch.sum()
    grad = pt.grad(total, x)
    colouring = hessian_colouring(x, batch, idx, size)
    columns = pt.matrix("colour_columns", dtype=grad.dtype)
    products = [x, columns, idx], [total, grad, jacobian(pt.dot(grad, columns), x)]

    def compile_products(only_cached: bool = False):
        function = compile_function(*products, only_cached=only_cached, **compile_kwargs)
        if function is not None:
            function.trust_input = True
        return function

    cost = None if n_data is None else n_data * colouring.n_colours
    if not DIFFERENCED_PRODUCTS or cost is None or cost > DIFFERENCED_ROWS:
        return ColouredSumDerivatives(compile_products(), colouring)
    cached = compile_products(only_cached=True)
    if cached is not None:  # a warm run: the graph is loaded, not compiled
        return ColouredSumDerivatives(cached, colouring)
    function = compile_function([x, idx], [total, grad], **compile_kwargs)
    function.trust_input = True
    differenced = DifferencedProducts(function, compile_products)
    return ColouredSumDerivatives(differenced, colouring, symmetrise=True)


def hessian_colouring(x: Variable, batch: Variable, idx: Variable, size: int) -> HessianColouring:
    """The colouring of the Hessian of ``batch.sum()`` in ``x`` (length ``size``) read from
    the graph.

    Blocks of ``x`` that the graph reads only by gathering them along the rows with one
    index vector (``a[group[idx]]``) are compressed: the family of blocks gathered by the
    same index (intercepts and slopes of one grouping) with the most coordinates gets a
    colour per block column; every other coordinate one of its own.
    """
    dense = HessianColouring.dense(size)
    nodes = list(toposort([batch]))
    clients = clients_of(nodes)
    on_rows = dependents(nodes, idx)
    readers = clients.get(x, [])
    if not readers or any(type(node.op).__name__ != "Subtensor" for node in readers):
        return dense
    # Each reader of x, followed down a chain of re-indexing operations to the variable
    # that the rest of the graph reads.
    families: dict = {}
    claimed: list[np.ndarray] = []
    for reader in readers:
        end = _reindexing_end(reader.outputs[0], clients)
        coords = _coordinates(x, end, size)
        if coords is None:
            return dense
        claimed.append(coords.ravel())
        index = _sole_row_index(end, clients, on_rows)
        if index is not None and coords.ndim >= 1:
            family = families.setdefault((index, coords.shape[0]), [])
            family.append(coords.reshape(coords.shape[0], -1))
    every = np.concatenate(claimed)
    best = (0, np.zeros((0, 0), dtype=np.int64))
    for blocks in families.values():
        groups = np.concatenate(blocks, axis=1)
        members = groups.ravel()
        # A coordinate read by another reader too is no longer read one group per row.
        if np.unique(members).size != members.size:
            continue
        if np.sum(np.isin(every, members)) != members.size:
            continue
        saved = members.size - groups.shape[1]
        if saved >= MIN_SAVED_COLUMNS and saved > best[0]:
            best = (saved, groups)
    return HessianColouring.gathered(size, best[1], read=np.unique(every))


def _static_length(x: Variable) -> int | None:
    shape = getattr(x.type, "shape", (None,))
    return None if x.ndim != 1 or shape[0] is None else int(shape[0])


def _reindexing_end(var: Variable, clients: dict) -> Variable:
    """Follow ``var`` through single-client re-indexing operations."""
    while True:
        users = clients.get(var, [])
        if len(users) != 1 or not _is_reindexing(users[0]):
            return var
        var = users[0].outputs[0]


def _is_reindexing(node) -> bool:
    name = type(node.op).__name__
    if name in _REINDEXING_OPS:
        return True
    scalar = getattr(node.op, "scalar_op", None)
    return (
        scalar is not None
        and type(scalar).__name__ in ("Identity", "Cast")
        and node.outputs[0].dtype == node.inputs[0].dtype
    )


def _coordinates(x: Variable, end: Variable, size: int) -> np.ndarray | None:
    """The coordinate of ``x`` each entry of ``end`` holds (``end`` evaluated at
    ``x = 0, 1, ..., D - 1``), or None if ``end`` is not a re-indexing of ``x`` alone."""
    inputs = [var for var in graph_inputs([end]) if var is not x and var.owner is None]
    if any(not isinstance(var, Constant) for var in inputs):
        return None
    mode = pytensor.compile.mode.Mode(linker="py", optimizer=None)
    values = pytensor.function([x], end, mode=mode, on_unused_input="ignore")(
        np.arange(size, dtype=x.dtype)
    )
    return np.rint(np.asarray(values)).astype(np.int64)


def _sole_row_index(var: Variable, clients: dict, on_rows: set) -> Variable | None:
    """The index vector ``i`` when every use of ``var`` is a gather ``var[i]`` along the
    rows by that one vector; None otherwise."""
    users = clients.get(var, [])
    index = None
    for node in users:
        if node.inputs[0] is not var or not _is_row_gather(node, on_rows, {var}):
            return None
        if index is not None and node.inputs[1] is not index:
            return None
        index = node.inputs[1]
    return index
