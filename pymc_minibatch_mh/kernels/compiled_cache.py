"""Whether numba's disk cache holds the compiled loops, and their compilation in the
background where it does not.

Compiling the loops of :mod:`~pymc_minibatch_mh.kernels.logit_numba` for a model's types
takes about 4 s, more than they save in a run of a few thousand iterations, so a chain
uses them only when numba's disk cache already holds them for its types (:func:`cached`:
the cache's index is read, nothing is compiled). Otherwise it keeps its numpy path, and
:func:`ready` starts their compilation in a separate process at the lowest priority, which
writes numba's cache and exits, so that later runs on the machine find them. A marker file
beside the cache keeps a second process from compiling the same loops meanwhile. The cache
and its markers are in the package's cache directory, never beside the installed modules
(see :mod:`~pymc_minibatch_mh.cache_location`); where it cannot be written, nothing is
compiled in the background and the chains keep their numpy paths.
``PYMC_MINIBATCH_MH_COMPILED_LOOPS=0`` in the environment switches the compiled loops off
(neither used nor compiled).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import cache

from pymc_minibatch_mh.cache_location import CACHE_DIR_VARIABLE
from pymc_minibatch_mh.kernels import split_kicks

#: The environment variable that switches the compiled loops off when "0".
SWITCH = "PYMC_MINIBATCH_MH_COMPILED_LOOPS"


def ready(types: tuple) -> bool:
    """Whether every compiled loop can run without compiling for these types (see
    :func:`~pymc_minibatch_mh.kernels.compiled_split_iteration.loop_types`); if not, their
    compilation is started in the background (:func:`compile_in_background`). False when
    the environment switches them off."""
    if os.environ.get(SWITCH, "1") == "0" or not _index_readable():
        return False
    if cached(types):
        return True
    compile_in_background(types)
    return False


def example_calls(types: tuple) -> list:
    """``(loop, arguments)`` of every compiled loop for these types."""
    from pymc_minibatch_mh.kernels import compiled_residuals, compiled_split_iteration

    calls = compiled_split_iteration.example_calls(types)
    return calls + compiled_residuals.example_calls(types)


def cached(types: tuple) -> bool:
    """Whether every loop is compiled in this process for these types, or held by numba's
    disk cache (its index is read; the loops are read at their first call)."""
    if split_kicks.compiled_loops() is None:
        return False
    import numba

    for loop, args in example_calls(types):
        signature = tuple(numba.typeof(arg) for arg in args)
        if signature not in loop.overloads and not _on_disk(loop, signature):
            return False
    return True


def _index_readable() -> bool:
    """Whether this numba exposes the disk cache's index the way :func:`_on_disk` reads it
    (numba 0.65 and 0.68, the two stacks' versions, do); without it the compiled loops
    are neither used nor compiled."""
    loops = split_kicks.compiled_loops()
    disk = getattr(getattr(loops, "split_trajectory", None), "_cache", None)
    index = getattr(disk, "_cache_file", None)
    return hasattr(disk, "_index_key") and hasattr(index, "_load_index")


def _on_disk(loop, signature: tuple) -> bool:
    """Whether numba's disk cache indexes ``loop`` for ``signature`` (the key its
    Dispatcher.compile looks up before compiling, in an index of the current source)."""
    disk = loop._cache
    key = disk._index_key(signature, loop.targetctx.codegen())
    try:
        return key in disk._cache_file._load_index()
    except OSError:  # the cache directory is gone or unreadable: nothing on disk
        return False


def compile_in_background(types: tuple) -> bool:
    """Start compiling every loop for these types in a separate process at the lowest
    priority (it writes them to numba's disk cache), unless this process started it
    already or another process is compiling them. Returns whether it was started."""
    return _start(types)


#: A compilation marked as under way longer ago than this is taken as dead.
COMPILING_STALE_S = 600.0


@cache
def _start(types: tuple) -> bool:
    marker = _compiling_marker(types)
    if marker is None:
        return False  # no disk cache to compile into
    try:
        if time.time() - os.path.getmtime(marker) < COMPILING_STALE_S:
            return False  # another process is compiling them
    except OSError:  # no marker: none is
        pass
    try:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
    except OSError:  # the cache directory is not writable: its compilation could not be kept
        return False
    command = [sys.executable, "-m", __name__, marker, *map(str, types)]
    # The compiling process writes where this one looks, named to it as numba's own cache
    # directory (which it uses for nothing else), so that it need not resolve the package's
    # location again (that would import PyTensor for its compile directory).
    env = {key: value for key, value in os.environ.items() if key != CACHE_DIR_VARIABLE}
    env["NUMBA_CACHE_DIR"] = os.path.dirname(os.path.dirname(marker))
    # Same session and process group as the caller, so that the lowest priority holds
    # against its chains (a new session gets a scheduler group of its own on Linux).
    subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.nice(19),
    )
    return True


def _compiling_marker(types: tuple) -> str | None:
    """A file beside numba's cache of the loops (in the package's cache directory) that says
    they are being compiled; None when the loops have no disk cache."""
    loops = split_kicks.compiled_loops()
    cache_dir = getattr(getattr(loops, "split_trajectory", None), "_cache", None)
    cache_dir = getattr(cache_dir, "_cache_path", None)
    if cache_dir is None:
        return None
    try:
        os.makedirs(cache_dir, exist_ok=True)
    except OSError:
        return None
    return os.path.join(cache_dir, "compiling-" + "-".join(map(str, types)))


if __name__ == "__main__":  # pragma: no cover - run by compile_in_background
    marker, family, dtype, n_feat, dim, store_dtype = sys.argv[1:7]
    try:
        for loop, args in example_calls((int(family), dtype, int(n_feat), int(dim), store_dtype)):
            loop(*args)  # compiled, and written to numba's disk cache
    finally:
        os.remove(marker)
