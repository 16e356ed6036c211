"""An on-disk cache of compiled PyTensor functions, keyed by the structure of the graph.

Compiling a function spends most of its time rewriting the graph (PyTensor caches the C
code and numba the machine code, but not the rewriting). A step's functions hold no data
(see :mod:`pymc_minibatch_mh.likelihood.compiling`), so the same model structure gives
the same graphs whatever N is, in every process: the second process that builds a step
on such a model loads its rewritten functions from disk instead of rewriting them again.

The key of a function is a SHA-256 digest of the graph as a whole: every Apply node's Op
(its type and all its ``__props__``; for the few Ops without them, the attributes that
define their equality: a Scan's settings and inner graph, a scalar op's state), the order
of its inputs, every variable's type, the bytes of every constant, whether one array or a
list is returned, the compile keyword arguments, the PyTensor settings that change what a
compilation gives, ``PYTENSOR_FLAGS`` and the versions of Python, PyTensor and PyMC. A
graph that cannot be keyed completely is compiled as usual and not stored: an Op or a
property of an unknown kind, a shared variable or any other non-constant input that is
not an input of the function (its value would be frozen in the stored copy), a constant
of more than :data:`MAX_CONSTANT_SIZE` elements, ``In`` / ``Out`` wrappers, updates or
givens. The BLAS flags are not in the key (reading them costs 0.2 s): after installing or
removing a BLAS library, :func:`clear_function_cache`. Nor is the set of registered graph
rewrites: a library imported later that registers its own rewrites can give a differently
rewritten (equivalent) graph, and the stored one is used until the cache is cleared. The
model's ``check_bounds`` flag, which :func:`pymc.pytensorf.compile` reads, is keyed.

A stored function is the pickled PyTensor function itself (the form in which PyMC sends a
step to worker processes that are not forked), without the variables' tags. Loading it
links the stored, already rewritten graph: C modules and numba's machine code come from
their own caches. Entries are written atomically; a damaged one is compiled again with a
warning; beyond :data:`MAX_ENTRIES` the least recently used are deleted.

The directory is the package's (:mod:`~pymc_minibatch_mh.cache_location`):
``minibatch_mh_functions`` under ``pytensor.config.compiledir``, or ``functions`` under
``$PYMC_MINIBATCH_MH_CACHE_DIR`` when that is set. The environment variable
``PYMC_MINIBATCH_MH_FUNCTION_CACHE`` set to ``0`` switches the cache off, set to a path puts
it there. :func:`use_function_cache` switches it in a process.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io
import os
import pickle
import sys
import tempfile
import types
import warnings
from pathlib import Path, PurePath

import numpy as np
import pytensor
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import HasInnerGraph
from pytensor.graph.utils import Scratchpad

from pymc_minibatch_mh.cache_location import package_cache_directory
from pymc_minibatch_mh.likelihood.graph_tools import toposort

#: Constants with more elements than this make a graph uncacheable (the stored function
#: would carry them; data enter the package's functions as inputs instead).
MAX_CONSTANT_SIZE = 10_000
#: Stored functions kept at most; the least recently used are deleted beyond this.
MAX_ENTRIES = 2_000
#: A pickled function larger than this is not stored (data folded in by rewriting).
MAX_ENTRY_BYTES = 20_000_000
ENVIRONMENT_VARIABLE = "PYMC_MINIBATCH_MH_FUNCTION_CACHE"
_FORMAT = 1
_OFF, _ON = ("0", "false", "False", ""), ("1", "true", "True")


def _environment_setting() -> str:
    """The variable's value: off, on (the default) or a directory."""
    return os.environ.get(ENVIRONMENT_VARIABLE, "1").strip()


_enabled = _environment_setting() not in _OFF
#: Directories a store has failed in (warned about once per process).
_unwritable: set[Path] = set()


class Uncacheable(Exception):
    """The graph holds something the key cannot describe completely."""


def use_function_cache(enabled: bool) -> None:
    """Switch the on-disk cache of compiled functions on (the default) or off."""
    global _enabled
    _enabled = bool(enabled)


def function_cache_enabled() -> bool:
    """Whether the on-disk cache of compiled functions is on in this process."""
    return _enabled


def cache_directory() -> Path:
    """Where compiled functions are stored: ``PYMC_MINIBATCH_MH_FUNCTION_CACHE`` when it
    names a directory, else the package's cache directory for them
    (:func:`~pymc_minibatch_mh.cache_location.package_cache_directory`)."""
    configured = _environment_setting()
    if configured not in _OFF + _ON:
        return Path(configured).expanduser()
    return package_cache_directory("functions")


def graph_key(inputs, outputs, kwargs: dict) -> str | None:
    """The cache key of ``function(inputs, outputs, **kwargs)``, or ``None`` when the graph
    cannot be described completely (then it is not cached)."""
    if not _enabled or {"updates", "givens", "random_seed"} & set(kwargs):
        return None
    inputs = list(inputs)
    # A function of one output variable returns an array, of a list of outputs a list.
    single = not isinstance(outputs, list | tuple)
    outputs = [outputs] if single else list(outputs)
    if not all(isinstance(var, Variable) for var in [*inputs, *outputs]):
        return None  # In / Out wrappers, a dict of outputs: not described by the key
    settings = {
        **kwargs,
        "_returns_one_array": single,
        # pymc.pytensorf.compile keeps or removes parameter checks by the model's flag.
        "_check_bounds": _model_check_bounds(),
    }
    try:
        return _digest(inputs, outputs, settings)
    except (Uncacheable, RecursionError, TypeError, AttributeError):
        return None  # something the key cannot describe: compile without the cache


def _model_check_bounds() -> bool:
    """The ``check_bounds`` flag of the model in context (True outside a model), which
    :func:`pymc.pytensorf.compile` reads."""
    try:
        from pymc.model import modelcontext

        return bool(modelcontext(None).check_bounds)
    except TypeError:
        return True


def load(key: str):
    """The stored function of ``key``, or ``None``."""
    path = cache_directory() / f"{key}.pkl"
    try:
        with open(path, "rb") as file:
            stored_format, stored_key, function = _TaglessUnpickler(file).load()
    except FileNotFoundError:
        return None
    except Exception as err:  # a damaged or incompatible entry: compile afresh, say so
        warnings.warn(
            f"Ignoring the cached compiled function {path.name} ({type(err).__name__}: "
            f"{err}); it is compiled again.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    if stored_format != _FORMAT or stored_key != key:
        return None
    try:
        os.utime(path)  # recently used: kept longest
    except OSError:
        pass
    return function


def store(key: str, function) -> None:
    """Store ``function`` under ``key`` (atomically; a failure to write only warns)."""
    directory = cache_directory()
    buffer = io.BytesIO()
    try:
        _TaglessPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump((_FORMAT, key, function))
    except Exception:  # a function that does not pickle is simply not stored
        return
    if buffer.tell() > MAX_ENTRY_BYTES:
        return  # rewriting folded data into the function: not worth a disk entry
    temporary = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(handle, "wb") as file:
            file.write(buffer.getvalue())
        os.chmod(temporary, 0o644)
        os.replace(temporary, directory / f"{key}.pkl")
        temporary = None
        _prune(directory)
    except OSError as err:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        if directory in _unwritable:
            return  # said once: the functions are compiled in each process
        _unwritable.add(directory)
        warnings.warn(
            f"Could not store a compiled function in {directory} ({err}); set "
            f"{ENVIRONMENT_VARIABLE}=0 to switch the cache off or to a writable directory.",
            RuntimeWarning,
            stacklevel=3,
        )


def clear_function_cache() -> int:
    """Delete every stored function (e.g. after installing a BLAS library); return how
    many were deleted."""
    directory = cache_directory()
    entries = list(directory.glob("*.pkl")) if directory.is_dir() else []
    for path in entries:
        path.unlink(missing_ok=True)
    return len(entries)


def _prune(directory: Path) -> None:
    entries = list(directory.glob("*.pkl"))
    if len(entries) <= MAX_ENTRIES:
        return

    def last_used(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except FileNotFoundError:  # deleted by another process pruning at the same time
            return 0.0

    entries.sort(key=last_used)
    for path in entries[: len(entries) - MAX_ENTRIES]:
        path.unlink(missing_ok=True)


class _TaglessPickler(pickle.Pickler):
    """Pickles variables without their tags (trace-back information and, on the package's
    data placeholders, the data array itself), which a compiled function does not use."""

    def persistent_id(self, obj):
        if isinstance(obj, Scratchpad):
            return "tag"
        return None


class _TaglessUnpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        if pid == "tag":
            return Scratchpad()
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def _digest(inputs: list[Variable], outputs: list[Variable], kwargs: dict) -> str:
    hasher = hashlib.sha256()
    _feed(
        hasher,
        "minibatch_mh_function",
        _FORMAT,
        sys.version_info[:3],
        pytensor.__version__,
        _pymc_version(),
        _config_key(),
    )
    _feed(hasher, "kwargs", _value_key(dict(sorted(kwargs.items()))))
    _feed_graph(hasher, inputs, outputs)
    return hasher.hexdigest()


def _feed(hasher, *parts) -> None:
    hasher.update(repr(parts).encode())
    hasher.update(b"\x00")


def _feed_graph(hasher, inputs: list[Variable], outputs: list[Variable]) -> None:
    """Feed the structure of the graph from ``inputs`` to ``outputs`` into ``hasher``."""
    index: dict[int, int] = {}

    def refer(var: Variable) -> int:
        if id(var) not in index:
            if var.owner is not None:
                raise Uncacheable(f"variable {var} used before the node computing it")
            index[id(var)] = len(index)
            _feed(hasher, "root", index[id(var)], _root_key(var))
        return index[id(var)]

    for position, var in enumerate(inputs):
        if var.owner is not None or isinstance(var, Constant) or id(var) in index:
            raise Uncacheable(f"function input {var} is computed, constant or repeated")
        if getattr(var, "get_value", None) is not None:
            raise Uncacheable(f"function input {var} is a shared variable")
        index[id(var)] = len(index)
        _feed(hasher, "input", position, _type_key(var.type))
    for node in toposort(outputs):
        _feed(
            hasher,
            "apply",
            _op_key(node.op),
            tuple(refer(var) for var in node.inputs),
            tuple(_type_key(var.type) for var in node.outputs),
        )
        for var in node.outputs:
            index.setdefault(id(var), len(index))
    _feed(hasher, "outputs", tuple(refer(var) for var in outputs))


def _root_key(var: Variable) -> tuple:
    if not isinstance(var, Constant):
        raise Uncacheable(f"non-constant graph input {var} that is not a function input")
    data = var.data
    if isinstance(data, np.generic):
        data = np.asarray(data)  # keyed by its bytes, as array constants are
    return ("constant", _type_key(var.type), _value_key(data))


def _type_key(type_) -> tuple:
    props = getattr(type_, "__props__", None)
    if props is None and not getattr(type_, "__dict__", None):
        props = ()  # a type without state (e.g. NoneTypeT, SliceType): its class says all
    if props is None:
        raise Uncacheable(f"type without __props__: {type_!r}")
    return (_qualified(type(type_)), tuple(_value_key(getattr(type_, p)) for p in props))


#: Ops without ``__props__`` whose equality PyTensor defines by these attributes and the
#: inner graph.
_OP_ATTRIBUTES = {
    "pytensor.scan.op.Scan": ("info", "profile", "truncate_gradient", "name", "allow_gc", "mode")
}


#: Instance attributes that do not change what an Op computes: names and docs, caches of
#: values derived from the props (an Elemwise's numpy ufunc, an external C op's source
#: files and code), the inner graph (keyed separately by its digest).
_IGNORED_ATTRIBUTES = frozenset(
    {
        "name",
        "__doc__",
        "__module__",
        "__epydoc_asRoutine",
        "ufunc",
        "nfunc",
        "func_files",
        "func_codes",
        "func_name",
        "code_sections",
        "_fn",
        "_fgraph",
        "fgraph",
        "_inner_fgraph",
        "_hash_inner_graph",
        "_props_dict",
    }
)


#: Graph objects: an Op holding one is keyed through its inner graph, or not at all.
_GRAPH_OBJECTS = (Variable, Apply, FunctionGraph)


def _holds_graph(value) -> bool:
    if isinstance(value, _GRAPH_OBJECTS):
        return True
    return isinstance(value, list | tuple) and any(isinstance(v, Variable) for v in value)


def _op_key(op) -> tuple:
    inner = isinstance(op, HasInnerGraph)
    # An inner graph is keyed by its digest below, not through the attributes holding it.
    state = {
        name: value
        for name, value in getattr(op, "__dict__", {}).items()
        if name not in _IGNORED_ATTRIBUTES and not (inner and _holds_graph(value))
    }
    props = getattr(op, "__props__", None)
    if props is None:
        props = _OP_ATTRIBUTES.get(_qualified(type(op)))
    if props is None and type(op).__module__.startswith("pytensor."):
        props = tuple(sorted(state))  # scalar ops: their state is their identity
    if props is None:
        raise Uncacheable(f"Op without __props__: {type(op).__name__}")
    key = (_qualified(type(op)), tuple((p, _value_key(getattr(op, p))) for p in props))
    # Settings an Op keeps outside its __props__ (e.g. a root finder's tolerances) must
    # be keyed too: every other instance attribute, or the graph is not cached.
    extra = sorted(set(state) - set(props))
    if extra:
        key += tuple((name, _value_key(getattr(op, name))) for name in extra)
    if inner:  # Scan, OpFromGraph, Composite: the inner graph too
        hasher = hashlib.sha256()
        _feed_graph(hasher, list(op.inner_inputs), list(op.inner_outputs))
        key += ("inner", hasher.hexdigest())
    return key


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _value_key(value):
    if isinstance(value, _PLAIN):
        return (type(value).__name__, value)
    if isinstance(value, np.generic):
        return ("np", str(value.dtype), value.item())
    if isinstance(value, np.dtype):
        return ("dtype", str(value))
    if isinstance(value, enum.Enum):
        return ("enum", _qualified(type(value)), value.name)
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_value_key(v) for v in value))
    if isinstance(value, dict) or type(value).__name__ == "frozendict":
        items = sorted((repr(_value_key(k)), _value_key(v)) for k, v in value.items())
        return ("mapping", tuple(items))
    if isinstance(value, frozenset | set):
        return ("set", tuple(sorted(repr(_value_key(v)) for v in value)))
    if isinstance(value, np.ndarray):
        if value.size > MAX_CONSTANT_SIZE or value.dtype.hasobject:
            raise Uncacheable("large or object array")
        return ("array", str(value.dtype), value.shape, value.tobytes())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (_qualified(type(value)), tuple(_value_key(getattr(value, f.name)) for f in fields))
    if isinstance(value, PurePath):
        return ("path", str(value))
    if isinstance(value, slice):
        return ("slice", _value_key(value.start), _value_key(value.stop), _value_key(value.step))
    if isinstance(value, type):
        return ("class", _qualified(value))
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType):
        if "<locals>" in value.__qualname__ or "<lambda>" in value.__qualname__:
            raise Uncacheable("local function property")
        return ("function", value.__module__, value.__qualname__)
    if isinstance(value, _GRAPH_OBJECTS):
        raise Uncacheable("a graph held as a property")
    if isinstance(value, Mode):
        return _mode_key(value)
    if hasattr(value, "make_node"):  # an Op (e.g. an Elemwise's scalar op)
        return _op_key(value)
    if hasattr(value, "__props__"):  # a Type
        return _type_key(value)
    if type(value).__module__.startswith("pytensor."):  # e.g. a scalar op's output type rule
        return (_qualified(type(value)), _value_key(vars(value)))
    raise Uncacheable(f"property of type {type(value).__name__}")


def _mode_key(mode: Mode) -> tuple:
    query = mode.provided_optimizer
    if isinstance(query, str) or query is None:
        optimizer = _value_key(query)
    else:
        if getattr(query, "extra_rewrites", None) or getattr(query, "subquery", None):
            raise Uncacheable("mode with extra rewrites")
        optimizer = tuple(
            tuple(sorted(str(name) for name in getattr(query, part, ())))
            for part in ("include", "exclude", "require")
        ) + (str(getattr(query, "position_cutoff", None)),)
    linker = mode.provided_linker
    if not isinstance(linker, str):  # a linker object: its settings (lazy, callbacks) too
        state = {k: v for k, v in vars(linker).items() if k != "fgraph" or v is not None}
        linker = (_qualified(type(linker)), _value_key(state))
    return ("mode", _qualified(type(mode)), linker, optimizer)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


#: PyTensor settings that change what compiling a graph gives.
_CONFIG_FLAGS = (
    "floatX",
    "mode",
    "linker",
    "optimizer",
    "optimizer_including",
    "optimizer_excluding",
    "optimizer_requiring",
    "cxx",
    "gcc__cxxflags",
    "numba__fastmath",
    "numba__cache",
    "cast_policy",
    "deterministic",
    "allow_gc",
    "scan__allow_gc",
    "tensor__cmp_sloppy",
    "on_opt_error",
    "compute_test_value",
    "warn_float64",
    "on_unused_input",
    "check_input",
    "vm__lazy",
    "cycle_detection",
    "optdb__max_use_ratio",
    "optdb__position_cutoff",
    "profile",
    "profile_memory",
)


def _config_key() -> tuple:
    # The BLAS flags are left out (reading them costs 0.2 s, more than a cache hit saves
    # on a small function); they follow from PYTENSOR_FLAGS and the installed libraries.
    flags = tuple((flag, str(getattr(pytensor.config, flag, None))) for flag in _CONFIG_FLAGS)
    return (*flags, os.environ.get("PYTENSOR_FLAGS", ""))


def _pymc_version() -> str:
    module = sys.modules.get("pymc")
    return getattr(module, "__version__", "") if module is not None else ""
