"""Linearising graphs that are affine in the sampled block, and checking that they are.

:class:`_Context` compiles graphs of the model as functions of the raveled block ``q``;
:func:`_decompose` splits a linear predictor into products ``X @ W(q)`` of a data matrix
and a small coefficient map plus a remainder differenced over all rows, and
:func:`_verify_affine` checks the result at random points far from the start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import join_nonshared_inputs
from pytensor.compile.mode import Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.math import Dot

from pymc_minibatch_mh.data import blocks as data_blocks
from pymc_minibatch_mh.data.chunk_pass import row_pass
from pymc_minibatch_mh.data.chunked_data import chunked_source
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.data.row_design import FeatureBlock, IndexedColumns, RowDesign
from pymc_minibatch_mh.likelihood.batching import datum_data_inputs, gather_rows
from pymc_minibatch_mh.likelihood.compiling import compile_function, data_as_placeholders
from pymc_minibatch_mh.likelihood.glm_families import (
    _BOUNDS_HINT,
    _SUPPORTED,
)
from pymc_minibatch_mh.likelihood.glm_likelihoods import (
    UnsupportedLikelihood,
)
from pymc_minibatch_mh.likelihood.graph_tools import (
    ancestors,
    rebuild_graph,
    toposort,
)
from pymc_minibatch_mh.likelihood.stable_logps import observed_logp_terms

# Graphs are evaluated a handful of times only: the Python linker compiles in
# milliseconds on both backends, and numpy does the heavy lifting (matrix products).
_MODE = Mode(linker="py", optimizer="fast_run").excluding("fusion")


def _affine_rtol() -> float:
    """Relative tolerance of the affinity checks: rounding of the model's float type."""
    return max(1e-8, 1e3 * float(np.finfo(pytensor.config.floatX).eps))


def _check_rtol() -> float:
    """Relative tolerance when comparing log-likelihoods with the model's."""
    return max(1e-6, 1e4 * float(np.finfo(pytensor.config.floatX).eps))


_CHECK_SEED = 20240607  # fixed: the self-checks are deterministic


@dataclass
class _Context:
    model: pm.Model
    value_vars: list
    shared: dict
    initial_point: dict
    rv: Variable
    n_data: int
    q0: np.ndarray

    @property
    def slices(self) -> dict:
        """Slice of ``q`` of every value variable of the block."""
        out, start = {}, 0
        for var in self.value_vars:
            size = int(np.size(self.initial_point[var.name]))
            out[var] = slice(start, start + size)
            start += size
        return out

    def free_inputs(self, graph: Variable) -> list:
        """Value variables of the model that ``graph`` depends on."""
        found = set(ancestors([graph]))
        return [v for v in self.model.value_vars if v in found]

    def compile(self, outputs: list, extra_inputs: Sequence[Variable] = ()):
        """Compile ``outputs`` (in value-variable form) as ``f(q, *extra) -> list``.

        Per-datum data enter as inputs (:func:`data_as_placeholders`), not as constants:
        a model on new data (group labels, covariates) loads the function from the cache.
        """
        placeholders = data_as_placeholders(outputs, self.n_data)
        if placeholders:
            outputs = [rebuild_graph(out, placeholders) for out in outputs]
        joined, q_var = join_nonshared_inputs(
            point=self.initial_point,
            outputs=outputs,
            inputs=self.value_vars,
            shared_inputs=self.shared,
        )
        fn = compile_function([q_var, *extra_inputs], joined, mode=_MODE, on_unused_input="ignore")
        dtype = q_var.dtype

        def evaluate(q, *extra):
            return [np.asarray(o, dtype=np.float64) for o in fn(np.asarray(q, dtype), *extra)]

        evaluate.compiled, evaluate.q_dtype = fn, dtype  # for passes over chunked data
        return evaluate

    def compile_rows(self, output: Variable, trailing: tuple, extra_inputs=(), what: str = ""):
        """Compile a per-row graph as ``f(q, *extra) -> (N, *trailing)`` float64 array,
        evaluated over blocks of :data:`~pymc_minibatch_mh.data.blocks.BLOCK_ROWS` rows.

        The graph is rebuilt on the rows of each block (as a minibatch reads them), so
        its temporaries (e.g. float32 features widened to float64 for a product) stay
        O(block) instead of O(N). ``extra_inputs`` are per-row inputs (leading axis
        None); the caller passes them whole and each block gets its rows. A graph
        without per-datum data is evaluated on the extra inputs' blocks as it is; one that
        cannot be evaluated by blocks (a length-N shape in a graph without data), and any
        graph when N is at most one block, is evaluated on all rows at once. A graph that
        reads a statistic of all rows (in-graph centring) is then evaluated per block and
        fails the affinity check that follows, loudly: such a graph cannot be subsampled.
        """
        n_data = self.n_data
        # Only a graph that reads per-datum data makes a pass over the data (recorded).
        reads = n_data if datum_data_inputs([output], n_data) else 0
        whole_fn = None
        if n_data > data_blocks.BLOCK_ROWS:
            idx = pt.vector("rows", dtype="int64")
            on_rows = gather_rows(output, idx, n_data) if reads else output
            block_fn = self.compile([on_rows], [idx, *extra_inputs])
        else:
            whole_fn = self.compile([output], extra_inputs)

        def evaluate(q, *extra):
            nonlocal whole_fn
            if whole_fn is not None:
                record_rows(reads, n_data)
                return _broadcast(whole_fn(q, *extra)[0], (n_data, *trailing), what)
            if not reads and all(_same_on_every_row(e) for e in extra):
                # No per-datum data and the same inputs on every row: every row has the
                # value of the first one (the residual of X @ beta + a: its intercept).
                try:
                    (value,) = block_fn(q, np.zeros(1, dtype=np.int64), *(e[:1] for e in extra))
                except (ValueError, AssertionError):  # a length fixed to N: rows differ
                    value = None
                if value is not None and (np.ndim(value) == 0 or np.shape(value)[0] == 1):
                    row = _broadcast(value, (1, *trailing), what)[0]
                    return np.broadcast_to(row, (n_data, *trailing))
            if reads and not extra:
                on_chunks = _pass_over_chunks(block_fn, q, n_data)
                if on_chunks is not None:
                    record_rows(n_data, n_data)
                    return _broadcast(on_chunks, (n_data, *trailing), what)
            out = np.empty((n_data, *trailing))
            for start in range(0, n_data, data_blocks.BLOCK_ROWS):
                stop = min(start + data_blocks.BLOCK_ROWS, n_data)
                rows = np.arange(start, stop, dtype=np.int64)
                try:
                    (value,) = block_fn(q, rows, *(e[start:stop] for e in extra))
                except (ValueError, AssertionError):  # PyTensor's shape errors
                    if start > 0:
                        raise
                    break  # a shape fixed to N: evaluate all rows at once below
                out[start:stop] = _broadcast(value, (stop - start, *trailing), what)
                record_rows((stop - start) * (reads > 0), n_data)
            else:
                return out
            whole_fn = self.compile([output], extra_inputs)
            return evaluate(q, *extra)

        return evaluate

    def model_loglik(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """The model's own per-datum observed log-density, compiled for given rows."""
        (term,) = observed_logp_terms(self.model, [self.rv])
        if self.n_data > data_blocks.BLOCK_ROWS and datum_data_inputs([term], self.n_data):
            idx = pt.vector("rows", dtype="int64")
            on_rows_fn = self.compile([gather_rows(term, idx, self.n_data)], [idx])
            return lambda q, rows: on_rows_fn(q, np.asarray(rows, dtype=np.int64))[0]
        fn = self.compile([term])
        return lambda q, rows: fn(q)[0][np.asarray(rows)]

    def describe_vars(self, variables: list) -> str:
        parts = []
        for var in variables:
            rv = self.model.values_to_rvs.get(var)
            if rv is not None and rv.name != var.name:
                parts.append(
                    f"{rv.name!r} (sampled on a transformed scale as {var.name!r}, so even "
                    f"X * {rv.name} is not affine in the sampled value)"
                )
            else:
                parts.append(repr(var.name))
        return ", ".join(parts)


def _pass_over_chunks(block_fn, q: np.ndarray, n_data: int) -> np.ndarray | None:
    """A per-row graph's values on all rows as a Dask pass over the chunks of the chunked
    data it reads (:func:`~pymc_minibatch_mh.data.chunk_pass.row_pass`); None for other data,
    or if a block cannot be evaluated alone (the caller's loop then finds out why)."""
    try:
        return row_pass(
            block_fn.compiled,
            (np.asarray(q, block_fn.q_dtype),),
            n_data,
            block_rows=data_blocks.BLOCK_ROWS,
            combine="concatenate",
        )
    except (ValueError, AssertionError):  # PyTensor's shape errors
        return None


def _refuse_outside_block(ctx: _Context, graph: Variable, what: str) -> None:
    block = set(ctx.value_vars)
    outside = [v for v in ctx.free_inputs(graph) if v not in block]
    if outside:
        raise UnsupportedLikelihood(
            f"{what.capitalize()} depends on free variable(s) {[v.name for v in outside]} that "
            "are not sampled by this step: another step would change them during sampling "
            "while the bounds keep their initial values. Include them in the step's `vars` "
            "(if they enter linearly), fix them as constants or pm.Data, or use MinibatchBarker "
            "/ Austere. " + _BOUNDS_HINT
        )


def _columns(ctx: _Context, graph: Variable) -> list[int]:
    """Indices of ``q`` whose value variable ``graph`` depends on."""
    inputs = set(ctx.free_inputs(graph))
    cols = []
    for var, sl in ctx.slices.items():
        if var in inputs:
            cols.extend(range(sl.start, sl.stop))
    return cols


def _linearise(fn, q0: np.ndarray, columns: list[int]):
    """Unit-step differences of an affine map: ``(jacobian, value at zero)``."""
    base = _finite(np.array(fn(q0), dtype=np.float64), "The coefficient matrix")
    jac = np.zeros((*base.shape, q0.size), dtype=np.float64)
    for k in columns:
        q = q0.copy()
        q[k] += 1.0
        jac[..., k] = fn(q) - base
    offset = base - jac @ q0
    return jac, offset


def _verify_affine(ctx: _Context, evaluate, predict, columns: list[int], what: str) -> None:
    """Check ``evaluate == predict`` at random points; name non-affine variables if not."""
    rng = np.random.default_rng(_CHECK_SEED)
    dim = ctx.q0.size
    points = [ctx.q0 + rng.normal(size=dim), ctx.q0 + 10.0 * rng.normal(size=dim)]
    if all(_affine_ok(evaluate, predict, q) for q in points):
        return
    # Name the culprits: a variable is non-linear on its own if the second difference
    # eta(q + d) + eta(q - d) - 2 eta(q) along its coordinates is not zero.
    offenders = []
    for var, sl in ctx.slices.items():
        if not set(range(sl.start, sl.stop)) & set(columns):
            continue
        for base, scale in ((points[0], 1.0), (points[1], 10.0)):
            step = np.zeros(dim)
            step[sl] = scale * rng.normal(size=sl.stop - sl.start)
            with np.errstate(all="ignore"):
                plus, centre, minus = (evaluate(q) for q in (base + step, base, base - step))
                if not _close(plus, 2.0 * np.asarray(centre) - minus):
                    offenders.append(var)
                    break
    if offenders:
        detail = f"{ctx.describe_vars(offenders)} enter(s) non-linearly."
        rvs = [ctx.model.values_to_rvs.get(v) for v in offenders]
        transformed = [rv.name for rv in rvs if ctx.model.rvs_to_transforms.get(rv) is not None]
        if transformed:
            names = ", ".join(map(repr, transformed))
            detail += (
                f" If {names} scales group effects of a non-centred hierarchy (a = mu + "
                "sigma * z), write it centred, a = pm.Normal('a', mu, sigma, ...) with a[group] "
                "in the predictor: that is affine, and TunaMH and FlyMC sample it."
            )
    else:
        detail = "each variable enters linearly on its own, but they interact (e.g. a product)."
    raise UnsupportedLikelihood(
        f"{what} is not affine in the sampled variables: {detail} TunaMH/FlyMC recognise "
        "eta = X @ beta + intercept with the coefficients as free variables on their own "
        "(unconstrained) scale. Reparameterise, leave the non-linear variables out of the "
        "step, or use MinibatchBarker / Austere. " + _SUPPORTED + " " + _BOUNDS_HINT
    )


def _affine_ok(evaluate, predict, q: np.ndarray) -> bool:
    with np.errstate(all="ignore"):
        return _close(evaluate(q), predict(q))


def _close(actual, expected) -> bool:
    """Equal up to rounding, relative to the magnitude of the values (read in row blocks,
    so that comparing two (N,) arrays needs no further N-long temporaries)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.ndim == 0 or expected.ndim == 0 or actual.shape != expected.shape:
        actual, expected = np.broadcast_arrays(actual, expected)
        actual, expected = np.atleast_1d(actual), np.atleast_1d(expected)
    largest = largest_gap = 0.0
    for start in range(0, actual.shape[0], data_blocks.BLOCK_ROWS):
        a, e = (
            actual[start : start + data_blocks.BLOCK_ROWS],
            expected[start : start + data_blocks.BLOCK_ROWS],
        )
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(e))):
            return False
        largest = max(largest, np.max(np.abs(a), initial=0.0), np.max(np.abs(e), initial=0.0))
        largest_gap = max(largest_gap, np.max(np.abs(a - e), initial=0.0))
    return bool(largest_gap <= _affine_rtol() * (1.0 + largest))


@dataclass
class _Product:
    """A product ``X @ W(q)`` in the linear predictor.

    ``X`` is an (N, P) data matrix and ``W(q)`` a (P, M) matrix affine in ``q``:
    ``W(q).ravel() = coef_map @ q + coef_offset``. ``weight`` is the derivative of the
    linear predictor with respect to the product output (N, 1) -> (N,) or (N, K),
    taken elementwise (found by setting the output to ones).
    """

    output: Variable
    placeholder: Variable
    features: np.ndarray
    coef_map: np.ndarray
    coef_offset: np.ndarray
    weight: np.ndarray | None = None


@dataclass
class _Decomposition:
    """The linearised pieces of a linear predictor.

    ``residual_jac`` is the unit-step jacobian of the part outside the products: one row
    ``(..., D)`` shared by all rows (``per_row=False``, or the columns that are exactly
    the same on every row when ``per_row=True``); for ``per_row=True``,
    ``residual_dense`` holds the columns ``dense_columns`` that differ between rows as an
    ``(N, len(dense_columns))`` array (None if there are none).
    """

    products: list[_Product]
    residual_jac: np.ndarray
    dense_columns: list[int]
    residual_dense: np.ndarray | None
    indexed: list[IndexedColumns]
    value_q0: np.ndarray  # the graph at q0, (N, *trailing)
    full: Callable  # q -> graph value, (N, *trailing)


def _decompose(
    ctx: _Context,
    graph: Variable,
    trailing: tuple,
    what: str,
    *,
    per_row: bool = True,
    not_row_constant: str = "",
) -> _Decomposition:
    """Split ``graph`` into data products ``X @ W(q)`` and a residual, both linearised.

    The products are linearised through their small coefficient matrices (cost
    O(P * M) per coordinate), so the N-row data matrices are multiplied only once.
    Only the residual (intercepts, per-row terms such as ``b * x[:, 2]``) is
    differenced numerically over all N rows, for the coordinates it depends on.
    With ``per_row=False`` the residual must change identically on every row
    (an intercept), else ``UnsupportedLikelihood(not_row_constant)`` is raised.
    Every evaluation runs over blocks of rows (:meth:`_Context.compile_rows`).
    """
    n_data = ctx.n_data
    width = trailing[0] if trailing else 1
    full_fn = ctx.compile_rows(graph, trailing, what=what)
    value_q0 = _finite(full_fn(ctx.q0), what)
    products = _find_products(ctx, graph, width)
    stripped = graph
    placeholders = [p.placeholder for p in products]
    if products:
        stripped = rebuild_graph(graph, {p.output: p.placeholder for p in products})
    residual = ctx.compile_rows(stripped, trailing, placeholders, what=what)
    # The product outputs set to 0 (and one at a time to 1): read-only views, no memory.
    zeros = [np.broadcast_to(np.zeros((), dtype=h.dtype), (n_data, width)) for h in placeholders]
    base = _finite(residual(ctx.q0, *zeros), what)
    for j, product in enumerate(products):
        ones = list(zeros)
        ones[j] = np.broadcast_to(np.ones((), dtype=placeholders[j].dtype), (n_data, width))
        product.weight = residual(ctx.q0, *ones) - base
    # Variables of which each row reads at most one entry (group effects a[g], varying
    # slopes b[g] * x): found with a few passes and kept as (index, value) per row.
    columns = _columns(ctx, stripped)
    indexed = []
    if per_row and not trailing:
        indexed, columns = _find_indexed(ctx, residual, zeros, base, columns)
    # Unit-step differences of the residual: the columns that are the same on every row
    # (an intercept) are kept as one row, the others (per-row terms) as dense columns.
    jac = np.zeros((*trailing, ctx.q0.size))
    dense_columns, dense = [], []
    for k in columns:
        q = ctx.q0.copy()
        q[k] += 1.0
        delta = residual(q, *zeros) - base
        if per_row and not _same_value(delta):
            dense_columns.append(k)
            dense.append(delta)
        elif per_row or _close(delta, np.broadcast_to(delta[0], delta.shape)):
            jac[..., k] = delta[0]
        else:
            raise UnsupportedLikelihood(not_row_constant)
    return _Decomposition(
        products=products,
        residual_jac=jac,
        dense_columns=dense_columns,
        residual_dense=np.column_stack(dense) if dense else None,
        indexed=indexed,
        value_q0=value_q0,
        full=lambda q: full_fn(q),
    )


#: A variable with at least this many coordinates is tried as indexed columns.
INDEXED_MIN_COLUMNS = 8


def _find_indexed(ctx: _Context, residual, zeros, base, columns: list[int]):
    """Split off the variables of which each row reads at most one coordinate.

    For such a variable with G coordinates, ``1 + ceil(log2 G)`` passes give every row's
    coordinate and entry: the residual's change when all G move by one (the entry), and
    when those whose index has bit ``b`` set move (equal to the entry where the row's
    coordinate has that bit, 0 where not). A third kind of pass, all coordinates moved by
    random amounts, checks the result; a variable that fails any check (a row reading
    several of its coordinates) keeps the unit-step columns. Returns
    ``(indexed parts, the columns left)``.
    """
    wanted = set(columns)
    indexed, left = [], []
    rng = np.random.default_rng(_CHECK_SEED)
    for sl in ctx.slices.values():
        cols = [k for k in range(sl.start, sl.stop) if k in wanted]
        found = None
        if len(cols) >= INDEXED_MIN_COLUMNS:
            found = _indexed_part(ctx.q0, residual, zeros, base, np.asarray(cols), rng)
        if found is None:
            left.extend(cols)
        else:
            indexed.append(found)
    return indexed, left


def _indexed_part(q0, residual, zeros, base, cols: np.ndarray, rng) -> IndexedColumns | None:
    def change(weights):
        q = q0.copy()
        q[cols] += weights
        return np.asarray(residual(q, *zeros) - base, dtype=np.float64).reshape(-1)

    entry = change(np.ones(cols.size))
    touched = entry != 0.0
    if not touched.any():
        return None
    tol = 1e-9 * (1.0 + np.abs(entry))
    code = np.zeros(entry.size, dtype=np.int64)
    for bit in range(max(1, math.ceil(math.log2(cols.size)))):
        part = change(((np.arange(cols.size) >> bit) & 1).astype(np.float64))
        hit = np.abs(part - entry) <= tol
        miss = np.abs(part) <= tol
        if not np.all(hit | miss):
            return None  # some row reads several coordinates of this variable
        code |= (hit & touched).astype(np.int64) << bit
    if np.any(code[touched] >= cols.size):
        return None
    index = np.where(touched, code, -1)
    weights = rng.normal(size=cols.size)
    expected = np.where(touched, entry * weights[np.maximum(index, 0)], 0.0)
    if not _close(change(weights), expected):
        return None
    # Untouched rows' entries are exactly 0; one shared entry on every row is kept as a float.
    value = float(entry[0]) if touched.all() and _same_value(entry) else entry
    return IndexedColumns(cols, index, value)


def _find_products(ctx: _Context, graph: Variable, width: int) -> list[_Product]:
    """Products ``X @ W`` in ``graph`` with X (N, P) free of q and W (P, width) in q."""
    block = set(ctx.value_vars)
    candidates = []
    for node in toposort([graph]):
        op = node.op
        is_dot = isinstance(op, Dot) or (
            isinstance(op, Blockwise) and isinstance(getattr(op, "core_op", None), Dot)
        )
        if not is_dot or len(node.inputs) != 2:
            continue
        x_var, w_var = node.inputs
        if x_var.ndim != 2 or w_var.ndim != 2:
            continue
        if ctx.free_inputs(x_var) or not set(ctx.free_inputs(w_var)) & block:
            continue
        candidates.append((node.outputs[0], x_var, w_var))
    if not candidates:
        return []
    x_values = _feature_values([x for _, x, _ in candidates])
    w_fn = ctx.compile([w for _, _, w in candidates])
    w_values = w_fn(ctx.q0)
    products = []
    for j, (out, _, w_var) in enumerate(candidates):
        x_value = x_values[j]
        if x_value.shape[0] != ctx.n_data or w_values[j].shape != (x_value.shape[1], width):
            continue  # not per-datum features times a (P, width) matrix: stays in the residual

        def w_flat(q, j=j):
            return w_fn(q)[j].ravel()

        coef_map, coef_offset = _linearise(w_flat, ctx.q0, _columns(ctx, w_var))
        # Rows of the product's output, fed block by block (no fixed length).
        placeholder = pt.tensor(dtype=out.dtype, shape=(None, width))
        products.append(_Product(out, placeholder, x_value, coef_map, coef_offset))
    return products


def _feature_values(features: list[Variable]) -> list[np.ndarray]:
    """The values of the feature matrices, as the model holds them (no copy).

    A constant or a shared variable (``pm.Data``) gives its array itself, in its own dtype
    (a float32 ``np.memmap`` stays one), and a :func:`chunked_data` tensor its
    :class:`~pymc_minibatch_mh.data.row_source.RowSource`: the design reads rows of it on
    demand. A later
    ``pm.set_data`` replaces the shared variable's array rather than writing into it, so
    the recognised design keeps the data it was recognised from. A computed matrix is
    evaluated.
    """
    computed = [
        x
        for x in features
        if not isinstance(x, Constant | SharedVariable) and chunked_source(x) is None
    ]
    evaluated = iter(compile_function([], computed, mode=_MODE)() if computed else [])
    values = []
    for x in features:
        if chunked_source(x) is not None:  # zarr / Dask: rows read on demand
            values.append(chunked_source(x))
        elif isinstance(x, Constant):
            values.append(np.asarray(x.data))
        elif isinstance(x, SharedVariable):
            values.append(np.asarray(x.get_value(borrow=True)))
        else:
            values.append(np.asarray(next(evaluated), dtype=np.float64))
    return values


def _design_of(ctx: _Context, parts: _Decomposition, what: str) -> RowDesign:
    """The scalar linear predictor's design ``d eta / d q`` as a :class:`RowDesign`."""
    blocks = []
    for product in parts.products:
        weight = product.weight.reshape(-1)
        if not np.all(np.isfinite(weight)):
            raise UnsupportedLikelihood(f"{what} is not finite.")
        if _same_value(weight):
            weight = float(weight[0])
        blocks.append(FeatureBlock(product.features, product.coef_map, weight))
    return RowDesign(
        ctx.n_data,
        ctx.q0.size,
        blocks,
        constant_row=parts.residual_jac,
        dense=parts.residual_dense,
        dense_columns=parts.dense_columns,
        indexed=parts.indexed,
    )


def _same_on_every_row(values: np.ndarray) -> bool:
    """Whether ``values`` repeats one row without storing it (a zero-stride view)."""
    return values.ndim >= 1 and values.strides[0] == 0


def _same_value(values: np.ndarray) -> bool:
    """Whether every entry of ``values`` equals the first, exactly (read in blocks)."""
    values = np.asarray(values)
    if values.size == 0 or _same_on_every_row(values):
        return True
    first = values.flat[0]
    return all(
        bool(np.all(values[start : start + data_blocks.BLOCK_ROWS] == first))
        for start in range(0, values.shape[0], data_blocks.BLOCK_ROWS)
    )


def _row_constant(values: np.ndarray) -> np.ndarray:
    """``values`` (N,), or a read-only zero-stride view of one value if every row has
    exactly it: an offset of ``X @ beta + a`` then takes no memory."""
    if values.size and _same_value(values):
        return np.broadcast_to(np.float64(values[0]), values.shape)
    return values


def _broadcast(value: np.ndarray, shape: tuple, what: str) -> np.ndarray:
    try:
        return np.broadcast_to(value, shape)
    except ValueError:
        raise UnsupportedLikelihood(
            f"{what} has shape {np.shape(value)}; expected one value per data point, shape {shape}."
        ) from None


def _finite(value: np.ndarray, what: str) -> np.ndarray:
    if not np.all(np.isfinite(value)):
        bad = np.flatnonzero(~np.isfinite(np.ravel(value)))
        minus_inf = bool(np.all(np.isneginf(np.ravel(value)[bad])))
        hint = (
            " A log-link mean written `exposure * exp(eta)` has the offset log(exposure): "
            "an exposure of 0 makes it -inf. Drop the rows with zero exposure (their "
            "likelihood is 1 when y = 0 and does not depend on the parameters)."
            if minus_inf
            else ""
        )
        raise UnsupportedLikelihood(
            f"{what} is not finite at the initial point ({bad.size} rows, the first at row "
            f"{int(bad[0])}); check the data for NaN/inf and the initial values.{hint}"
        )
    return value
