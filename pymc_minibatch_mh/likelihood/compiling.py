"""Every PyTensor function of the package is compiled here, and the time it takes counted.

Per-datum data enter the compiled functions as inputs, not as constants baked into the
graph: :func:`data_placeholder` stands for a data array in a graph, and
:func:`compile_function` appends the arrays of the placeholders a graph reads to every
call. A compiled function then holds no data, so PyTensor's C cache key and numba's
on-disk cache (which gives up on array constants over 1 MB) do not depend on N, and the
arrays are never copied.
"""

from __future__ import annotations

import pickle
import time
import warnings
from collections.abc import Sequence

import numpy as np
import pytensor
import pytensor.gradient
import pytensor.tensor as pt
from pymc.pytensorf import compile as _compile_pymc
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.data.chunk_pass import CALL_LOCK
from pymc_minibatch_mh.data.chunked_data import ChunkedRows
from pymc_minibatch_mh.data.file_arrays import portable, restored
from pymc_minibatch_mh.data.row_source import RowSource
from pymc_minibatch_mh.likelihood import function_cache
from pymc_minibatch_mh.likelihood.batching import datum_data_inputs, shape_constants_as_length
from pymc_minibatch_mh.likelihood.graph_tools import ancestors, graph_inputs, rebuild_graph

_DATA_TAG = "minibatch_mh_data"
_seconds = 0.0
_loaded = 0
_compiled = 0
_uncacheable = 0
#: Cache key -> ordinal (1, 2, ...) of the function's compilation in this process.
_compilation_order: dict[str, int] = {}
#: For each load of a function this process had compiled itself: its ordinal.
_loads_of_own: list[int] = []


def data_placeholder(var: Variable, value: np.ndarray) -> Variable:
    """A symbolic stand-in for the data array ``value`` held by the graph input ``var``.

    Its leading (datum) axis has no static length, so one compiled function serves any N.
    """
    placeholder = pt.tensor(
        name=var.name or "data", dtype=var.dtype, shape=(None, *var.type.shape[1:])
    )
    setattr(placeholder.tag, _DATA_TAG, _DataRef(value))
    return placeholder


def data_as_placeholders(outputs: Sequence[Variable], n_data: int) -> dict:
    """Replacements that make a graph's per-datum data (arrays of ``n_data`` rows)
    :func:`data_placeholder` inputs, and ``n_data`` itself, where the graph holds it as
    a length, the placeholders' length: the compiled function's cache key then depends on
    neither the data nor N."""
    placeholders = {
        var: data_placeholder(var, value) for var, value in datum_data_inputs(outputs, n_data)
    }
    like = next(iter(placeholders.values()), None)
    if like is not None:
        placeholders.update(shape_constants_as_length(outputs, n_data, like))
    return placeholders


class _DataRef:
    """The data array a placeholder stands for, held in the placeholder's tag. A compiled
    function pickles its input variables with their tags: this pickles a view of a
    memory-mapped file as the file (:func:`~pymc_minibatch_mh.data.file_arrays.portable`)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = restored(value)

    def __reduce__(self):
        return (_DataRef, (portable(self.value),))


def bound_data(outputs) -> list[Variable]:
    """The data placeholders a graph reads, in a fixed order."""
    outputs = list(outputs) if isinstance(outputs, Sequence) else [outputs]
    return [var for var in graph_inputs(outputs) if hasattr(var.tag, _DATA_TAG)]


class DataBoundFunction:
    """A compiled function whose trailing inputs are data supplied on every call.

    Calling it with the leading inputs calls the compiled function with the data
    appended; other attributes (``maker``, ``trust_input``) are the compiled function's.
    After each call the data inputs' storage cells are emptied: the compiled function
    would otherwise keep the last arrays passed (pickling them with itself, e.g. to a
    chain's worker process, and holding their memory).

    Rows of chunked data come first: ``gathers`` holds ``(source, k)`` pairs, and a call
    reads ``source[args[k]]`` (the rows of the index argument ``k``, only the chunks
    holding them) for the compiled function's input that stands for those rows
    (:func:`compile_function` took the gather out of the graph, so that the graph holds
    no data and is cached like any other). Chunked data in ``data`` (read whole by the
    graph) are read whole for a call: only functions of all rows of small data do that.
    """

    def __init__(self, function, data: tuple = (), gathers: tuple = ()):
        self.function = function
        self.data = data
        self.gathers = gathers
        self._data_cells = _data_cells(function, len(gathers) + len(data))
        self._chunked = any(isinstance(d, RowSource) for d in data)

    def __call__(self, *args):
        return self._call(args, [source[args[k]] for source, k in self.gathers])

    def _call(self, args: tuple, rows: list):
        data = (np.asarray(d) for d in self.data) if self._chunked else self.data
        try:
            return self.function(*args, *rows, *data)
        finally:
            for cell in self._data_cells:
                cell.storage[0] = None

    def with_rows_of(self, *args):
        """A function of the same arguments that uses the chunked rows of ``args``'
        indices, read once now (differences of a gradient call the function several times
        on one block of rows; the indices of later calls must be the same)."""
        rows = [source[args[k]] for source, k in self.gathers]
        return lambda *call_args: self._call(call_args, rows)

    @property
    def trust_input(self) -> bool:
        return self.function.trust_input

    @trust_input.setter
    def trust_input(self, value: bool) -> None:
        self.function.trust_input = value

    def __getattr__(self, name):
        if name in ("function", "data", "gathers", "_data_cells", "_chunked"):
            raise AttributeError(name)  # not yet set (while unpickling)
        return getattr(self.function, name)

    def __getstate__(self):
        # Data read from a file go to chains' worker processes as the file, not a copy.
        # The compiled function is pickled here, under the lock that calls in a pass's
        # tasks hold: a Dask worker may send it to another worker while a task calls it,
        # and its storage cells (a Scan's inner function's too) change during a call;
        # PyTensor checks them when unpickling and fails on a half-done call's.
        with CALL_LOCK:
            function = _dumps(self.function)
        return {
            "function": function,
            "data": tuple(portable(d) for d in self.data),
            "gathers": self.gathers,
        }

    def __setstate__(self, state):
        data = tuple(restored(d) for d in state["data"])
        self.__init__(pickle.loads(state["function"]), data, state.get("gathers", ()))


def _dumps(function) -> bytes:
    """``function`` pickled; with cloudpickle (Dask's, loaded by ``pickle.loads``) when the
    standard pickler cannot: PyTensor 3 builds the gradient of an ``OpFromGraph`` (e.g. in a
    zero-inflated negative binomial's log density) around a local function."""
    try:
        return pickle.dumps(function, protocol=pickle.HIGHEST_PROTOCOL)
    except (AttributeError, pickle.PicklingError, TypeError):
        import cloudpickle

        return cloudpickle.dumps(function, protocol=pickle.HIGHEST_PROTOCOL)


def _data_cells(function, n_data: int) -> list:
    """Storage cells of the last ``n_data`` explicit inputs (implicit inputs, e.g. shared
    variables, come after the explicit ones)."""
    explicit = [
        cell
        for cell, spec in zip(function.input_storage, function.maker.inputs, strict=True)
        if not spec.implicit
    ]
    return explicit[len(explicit) - n_data :]


def compile_function(inputs, outputs, *, only_cached: bool = False, **kwargs):
    """:func:`pymc.pytensorf.compile`, binding the data placeholders the graph reads and
    adding the wall time to :func:`compile_seconds`. With ``only_cached``, the function
    only if the package's on-disk cache holds it (else None, nothing compiled)."""
    global _seconds
    start = time.perf_counter()
    try:
        outputs, gathered = _chunked_rows_as_inputs(inputs, outputs)
        data = [var for var in bound_data(outputs) if not any(var is i for i in inputs)]
        rows = [placeholder for placeholder, _, _ in gathered]
        if gathered:  # an index may now serve only to read the rows, outside the graph
            kwargs = {**kwargs, "on_unused_input": "ignore"}
        function = _cached_compile([*inputs, *rows, *data], outputs, kwargs, only_cached)
        if function is None:
            return None
        if not data and not gathered:
            return function
        return DataBoundFunction(
            function,
            tuple(getattr(v.tag, _DATA_TAG).value for v in data),
            tuple((source, k) for _, source, k in gathered),
        )
    finally:
        _seconds += time.perf_counter() - start


def _chunked_rows_as_inputs(inputs, outputs):
    """``outputs`` with every gather of chunked data whose rows are a function input
    (``ChunkedRows(source)(idx)``) replaced by a new input standing for those rows, and
    the ``(input, source, position of idx)`` of each."""
    single = not isinstance(outputs, Sequence)
    graphs = [outputs] if single else list(outputs)
    replace, gathered = {}, []
    for var in ancestors(graphs):
        node = var.owner
        if node is None or not isinstance(node.op, ChunkedRows):
            continue
        k = next((k for k, i in enumerate(inputs) if i is node.inputs[0]), None)
        if k is None:
            continue  # rows computed inside the graph: read when the graph runs
        placeholder = pt.tensor(name="rows", dtype=var.dtype, shape=var.type.shape)
        replace[var] = placeholder
        gathered.append((placeholder, node.op.source, k))
    if not replace:
        return outputs, []
    rebuilt = [rebuild_graph(graph, replace) for graph in graphs]
    return (rebuilt[0] if single else rebuilt), gathered


def _cached_compile(inputs: list, outputs, kwargs: dict, only_cached: bool = False):
    """Load the compiled function from :mod:`~pymc_minibatch_mh.likelihood.function_cache`
    or compile it (and store it there); with ``only_cached``, None instead of compiling."""
    global _loaded, _compiled, _uncacheable
    key = function_cache.graph_key(inputs, outputs, kwargs)
    function = None if key is None else function_cache.load(key)
    if function is not None:
        _loaded += 1
        if key in _compilation_order:
            _loads_of_own.append(_compilation_order[key])
        return function
    if only_cached:
        return None
    with warnings.catch_warnings():
        # PyTensor's numba backend runs Python-level Ops in object mode and says so; for
        # ChunkedRows (a zarr or Dask read) that is the intended way.
        warnings.filterwarnings(
            "ignore", message="Numba will use object mode to run ChunkedRows", category=UserWarning
        )
        function = _compile_pymc(inputs, outputs, **kwargs)
    if key is None and function_cache.function_cache_enabled():
        _uncacheable += 1
    else:  # a miss (or the cache is off: every function is compiled)
        _compiled += 1
    if key is not None:
        _compilation_order[key] = _compiled
        function_cache.store(key, function)
    return function


def functions_loaded() -> int:
    """How many functions this process took from the on-disk cache instead of compiling."""
    return _loaded


def functions_reloaded_since(compiled: int) -> int:
    """How many of the functions loaded from the on-disk cache this process had compiled
    itself after its first ``compiled`` compilations (a construction that compiles a
    graph and later needs it again loads its own function: that is no warm cache)."""
    return sum(1 for ordinal in _loads_of_own if ordinal > compiled)


def functions_compiled() -> int:
    """How many functions this process compiled (graph rewriting and, on the C backend,
    C compilation or loading C modules from PyTensor's cache) because the package's
    on-disk cache did not hold them (graphs it cannot key are counted by
    :func:`functions_uncacheable` instead)."""
    return _compiled


def functions_uncacheable() -> int:
    """How many functions this process compiled whose graphs the on-disk cache cannot key
    (see :mod:`~pymc_minibatch_mh.likelihood.function_cache`): compiled in every process,
    warm or cold (e.g. a graph holding a large array as a constant, or every function of
    a step whose block leaves some free variables outside)."""
    return _uncacheable


def compile_seconds() -> float:
    """Seconds spent in :func:`compile_function` so far in this process.

    This is graph rewriting and, on PyTensor's C backend, C compilation (or loading from
    the on-disk caches: the package's cache of rewritten functions, PyTensor's of C
    modules, numba's of machine code). What numba compiles at a function's first call is
    not counted.
    """
    return _seconds


#: Whether Jacobians are built as one vectorised graph. On PyTensor 3 this is faster per
#: call than a Scan over the D rows, and numba's disk cache keeps it (not a Scan's inner
#: function). PyTensor 2.x's graph rewriter does not terminate on some vectorised
#: Jacobians (a scalar intercept plus a coefficient vector in a logistic regression grew
#: to 11 GB), so there a Scan builds them.
VECTORISED_JACOBIAN = int(pytensor.__version__.split(".")[0]) >= 3


def jacobian(expression: Variable, wrt: Variable, **kwargs) -> Variable:
    """``pytensor.gradient.jacobian`` built the way that is safe on this PyTensor (see
    :data:`VECTORISED_JACOBIAN`)."""
    return pytensor.gradient.jacobian(expression, wrt, vectorize=VECTORISED_JACOBIAN, **kwargs)
