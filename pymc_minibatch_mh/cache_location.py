"""Where the package keeps what it compiles: in the user's compile cache, never beside its
own modules (an installed package's directory may be read-only or shared by several
users, and a file written there would change the installed tree).

The package has two disk caches:

* its rewritten PyTensor functions (:mod:`~pymc_minibatch_mh.likelihood.function_cache`);
* numba's machine code of its compiled loops (:mod:`~pymc_minibatch_mh.kernels.logit_numba`),
  with the markers of a compilation under way
  (:mod:`~pymc_minibatch_mh.kernels.compiled_cache`).

By default both live in PyTensor's compile directory (``pytensor.config.compiledir``:
``~/.pytensor/compiledir_<platform and Python>`` on Linux and macOS unless
``PYTENSOR_FLAGS`` moves it), beside the C modules PyTensor compiles for the same models:
``minibatch_mh_functions`` and ``minibatch_mh_numba`` there. The environment variable
``PYMC_MINIBATCH_MH_CACHE_DIR`` moves both, to ``functions`` and ``numba`` under the
directory it names. Two more specific settings take precedence over these defaults, each
for its own cache only:

* ``PYMC_MINIBATCH_MH_FUNCTION_CACHE`` set to a path stores the functions there (``0``
  switches that cache off; see :mod:`~pymc_minibatch_mh.likelihood.function_cache`);
* numba's own ``NUMBA_CACHE_DIR``, when ``PYMC_MINIBATCH_MH_CACHE_DIR`` is not set, holds
  the compiled loops, as it holds every numba cache of the process.

The package does not set ``NUMBA_CACHE_DIR`` in the user's process nor change where numba
caches other code: its loops are compiled by dispatchers whose disk cache has a locator of
its own (:func:`cached_njit`; a ``NUMBA_CACHE_LOCATOR_CLASSES`` list of the user's replaces
it, as it replaces numba's). Where the directory cannot be written, the loops are compiled
in each process without a disk cache, with one warning.

The directories are read when they are used: the numba one when
:mod:`~pymc_minibatch_mh.kernels.logit_numba` is first imported (which, without either
variable, imports PyTensor for its compile directory).
"""

from __future__ import annotations

import os
import warnings
from functools import cache
from pathlib import Path

#: The environment variable naming the directory of all the package's caches.
CACHE_DIR_VARIABLE = "PYMC_MINIBATCH_MH_CACHE_DIR"


def configured_cache_root() -> Path | None:
    """The directory named by ``PYMC_MINIBATCH_MH_CACHE_DIR`` (``~`` expanded), or None
    when the variable is unset or empty."""
    configured = os.environ.get(CACHE_DIR_VARIABLE, "").strip()
    return Path(configured).expanduser() if configured else None


def package_cache_directory(kind: str) -> Path:
    """The directory of the package's cache ``kind`` (``"functions"`` or ``"numba"``):
    ``<PYMC_MINIBATCH_MH_CACHE_DIR>/<kind>`` when the variable is set, else
    ``minibatch_mh_<kind>`` in PyTensor's compile directory."""
    root = configured_cache_root()
    if root is not None:
        return root / kind
    import pytensor

    return Path(pytensor.config.compiledir) / f"minibatch_mh_{kind}"


def numba_cache_directory() -> Path:
    """The base directory of the compiled loops' numba cache (each source directory gets a
    subdirectory of it, named as numba names its own): ``PYMC_MINIBATCH_MH_CACHE_DIR``'s
    ``numba``, else numba's ``NUMBA_CACHE_DIR`` when set, else ``minibatch_mh_numba`` in
    PyTensor's compile directory."""
    if configured_cache_root() is None:
        import numba

        if numba.config.CACHE_DIR:
            return Path(numba.config.CACHE_DIR)
    return package_cache_directory("numba")


# ---------------------------------------------------------------------------- numba's cache
_warned_unwritable = False


def _warn_unwritable(directory, err: Exception) -> None:
    """One warning per process that the loops' disk cache cannot be used."""
    global _warned_unwritable
    if _warned_unwritable:
        return
    _warned_unwritable = True
    warnings.warn(
        f"pymc-minibatch-mh cannot keep numba's cache of its compiled loops in {directory} "
        f"({type(err).__name__}: {err}); they are compiled in each process instead. Set "
        f"{CACHE_DIR_VARIABLE} to a writable directory to keep them.",
        RuntimeWarning,
        stacklevel=3,
    )


def _numba_class(caching, *names):
    """The first of ``names`` that this numba's ``caching`` module defines (numba renamed
    some of its cache classes between versions)."""
    for name in names:
        found = getattr(caching, name, None)
        if found is not None:
            return found
    raise ImportError(f"numba.core.caching defines none of {names}")


@cache
def _function_cache_class():
    """numba's ``FunctionCache`` with a locator that puts the files under
    :func:`numba_cache_directory`, and that warns instead of failing where a write does."""
    from numba.core import caching

    base_locator = _numba_class(caching, "UserProvidedCacheLocator", "_UserProvidedCacheLocator")

    class PackageCacheLocator(base_locator):
        """numba's locator for a user-provided directory, with the package's directory
        in place of ``NUMBA_CACHE_DIR`` (and used whether or not that is set)."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            subpath = self.get_suitable_cache_subpath(py_file)
            self._cache_path = str(numba_cache_directory() / subpath)

        @classmethod
        def from_function(cls, py_func, py_file):
            # Unlike the parent, whether or not NUMBA_CACHE_DIR is set; and a directory that
            # cannot be created or written raises its OSError (cached_njit reports it).
            if not os.path.exists(py_file):
                return None  # no source file (e.g. a zipped install): no disk cache
            locator = cls(py_func, py_file)
            locator.ensure_cache_path()
            return locator

    class PackageCacheImpl(caching.CompileResultCacheImpl):
        _locator_classes = [PackageCacheLocator]

    class PackageFunctionCache(caching.FunctionCache):
        _impl_class = PackageCacheImpl

        # The directory was usable when the dispatcher was made; should it stop being so
        # (removed, made read-only), the loop is compiled and not stored.
        def load_overload(self, sig, target_context):
            try:
                return super().load_overload(sig, target_context)
            except OSError as err:
                _warn_unwritable(self._cache_path, err)
                self.disable()
                return None

        def save_overload(self, sig, data):
            try:
                super().save_overload(sig, data)
            except OSError as err:
                _warn_unwritable(self._cache_path, err)
                self.disable()

    return PackageFunctionCache


def cached_njit(**options):
    """``numba.njit(**options)`` (``cache`` not among them) whose dispatcher keeps its disk
    cache under :func:`numba_cache_directory`: the default locators of ``cache=True``
    would write it into ``__pycache__`` beside the source, inside the installed package.
    Where that directory cannot be written, the dispatcher compiles without a disk cache
    (one warning per process)."""
    import numba

    if "cache" in options:
        raise TypeError("cached_njit decides the disk cache itself; do not pass cache=")
    jit = numba.njit(**options)

    def decorate(py_func):
        dispatcher = jit(py_func)
        if not hasattr(dispatcher, "enable_caching"):
            return dispatcher  # NUMBA_DISABLE_JIT: the Python function itself
        try:
            dispatcher._cache = _function_cache_class()(dispatcher.py_func)
        except (OSError, RuntimeError) as err:  # no writable directory: no disk cache
            _warn_unwritable(numba_cache_directory(), err)
        return dispatcher

    return decorate
