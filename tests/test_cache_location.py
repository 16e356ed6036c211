"""Where the package's compile caches live (:mod:`pymc_minibatch_mh.cache_location`): one
overridable location, never inside the package, and compilation without a disk cache
where that location cannot be written."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import numba
import numpy as np
import pytensor
import pytest
from numba.core.caching import NullCache

import pymc_minibatch_mh
from pymc_minibatch_mh import cache_location
from pymc_minibatch_mh.cache_location import CACHE_DIR_VARIABLE, cached_njit
from pymc_minibatch_mh.kernels import compiled_cache, split_kicks
from pymc_minibatch_mh.likelihood import function_cache

PACKAGE = Path(pymc_minibatch_mh.__file__).resolve().parent


@pytest.fixture
def clean_environment(monkeypatch):
    """No cache setting of the user's: the defaults apply."""
    monkeypatch.delenv(CACHE_DIR_VARIABLE, raising=False)
    monkeypatch.delenv(function_cache.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    monkeypatch.setattr(cache_location, "_warned_unwritable", False)


def test_the_caches_default_to_pytensors_compile_directory(clean_environment):
    compiledir = Path(pytensor.config.compiledir)
    assert function_cache.cache_directory() == compiledir / "minibatch_mh_functions"
    assert cache_location.numba_cache_directory() == compiledir / "minibatch_mh_numba"


def test_one_variable_moves_every_cache(clean_environment, monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path))
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba_elsewhere"))
    assert function_cache.cache_directory() == tmp_path / "functions"
    assert cache_location.numba_cache_directory() == tmp_path / "numba"  # before numba's


def test_each_caches_own_setting_still_applies(clean_environment, monkeypatch, tmp_path):
    """NUMBA_CACHE_DIR (without the package's variable) holds the loops as it holds every
    numba cache; PYMC_MINIBATCH_MH_FUNCTION_CACHE a path holds the functions."""
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba"))
    assert cache_location.numba_cache_directory() == tmp_path / "numba"
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path / "package"))
    monkeypatch.setenv(function_cache.ENVIRONMENT_VARIABLE, str(tmp_path / "functions"))
    assert function_cache.cache_directory() == tmp_path / "functions"


def _twice(x):
    return 2.0 * x


def _plus_one(x):
    return x + 1.0


def test_a_loop_is_cached_in_the_package_directory(clean_environment, monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path))
    first = cached_njit()(_twice)
    assert first(1.5) == 3.0
    index = list((tmp_path / "numba").rglob("*_twice*.nbi"))
    assert len(index) == 1 and list(index[0].parent.glob("*_twice*.nbc"))
    assert first.stats.cache_misses and not first.stats.cache_hits
    # A new dispatcher of the same function (as in a new process) reads it from there.
    second = cached_njit()(_twice)
    assert second(1.5) == 3.0
    assert second.stats.cache_hits and not second.stats.cache_misses
    assert not list(Path(__file__).parent.glob("__pycache__/*_twice*"))  # not beside it


def test_an_unwritable_directory_warns_once(clean_environment, monkeypatch, tmp_path):
    """A directory that cannot be created (under a file: true for root too): the loops
    compile without a disk cache, with one warning."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(blocker / "cache"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loops = [cached_njit()(_twice), cached_njit()(_plus_one)]
    assert [str(w.message).count("cannot keep numba's cache") for w in caught] == [1]
    assert all(isinstance(loop._cache, NullCache) for loop in loops)
    assert loops[0](2.0) == 4.0 and loops[1](2.0) == 3.0  # compiled all the same
    assert blocker.read_text() == ""


def test_a_directory_lost_before_compiling(clean_environment, monkeypatch, tmp_path):
    """The directory is not writable when the first compilation is saved: one warning,
    then no disk cache."""
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path / "cache"))
    loop = cached_njit()(_plus_one)
    (tmp_path / "cache" / "numba").rename(tmp_path / "moved")
    (tmp_path / "cache" / "numba").write_text("")  # now a file: nothing can be saved
    with pytest.warns(RuntimeWarning, match="cannot keep numba's cache"):
        assert loop(1.0) == 2.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert loop(np.float32(1.0)) == 2.0  # a new signature: compiled, not stored
    assert caught == [] and not loop._cache._enabled


def test_the_packages_loops_keep_their_cache_outside_the_package():
    loops = split_kicks.compiled_loops()
    dispatcher_type = numba.core.dispatcher.Dispatcher
    dispatchers = [f for f in vars(loops).values() if isinstance(f, dispatcher_type)]
    assert len(dispatchers) > 10
    for dispatcher in dispatchers:
        path = getattr(dispatcher._cache, "_cache_path", None)
        if path is not None:  # None: no disk cache (an unwritable directory)
            resolved = Path(path).resolve()
            assert not resolved.is_relative_to(PACKAGE), path
            assert resolved.is_relative_to(cache_location.numba_cache_directory().resolve())


def test_compilation_markers_are_beside_the_loops_cache():
    types = (0, "<f8", 2, 2, "<i4")
    marker = Path(compiled_cache._compiling_marker(types))
    cache_path = split_kicks.compiled_loops().split_trajectory._cache._cache_path
    assert marker.parent == Path(cache_path)
    assert not marker.resolve().is_relative_to(PACKAGE)
    assert not marker.exists()  # only named: written by a compilation's start


def test_no_background_compilation_without_a_writable_cache(monkeypatch, tmp_path):
    types = (0, "<f8", 2, 2, "<i4")
    start = compiled_cache._start.__wrapped__  # not the per-process memo
    popen = []
    monkeypatch.setattr(compiled_cache.subprocess, "Popen", lambda *a, **k: popen.append(k))
    # loops without a disk cache
    uncached = SimpleNamespace(split_trajectory=SimpleNamespace(_cache=NullCache()))
    monkeypatch.setattr(split_kicks, "compiled_loops", lambda: uncached)
    assert compiled_cache._compiling_marker(types) is None and not start(types)
    # a cache directory that cannot be created
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    lost = SimpleNamespace(_cache_path=str(blocker / "numba"))
    monkeypatch.setattr(uncached.split_trajectory, "_cache", lost)
    assert compiled_cache._compiling_marker(types) is None and not start(types)
    assert popen == []
    # Control: a writable one gets its marker and the compilation is started.
    monkeypatch.setattr(lost, "_cache_path", str(tmp_path / "numba"))
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path / "elsewhere"))
    assert start(types) and len(popen) == 1
    assert (tmp_path / "numba" / "compiling-0-<f8-2-2-<i4").is_file()
    # The compiling process is told this cache's directory, as numba's (the loops' cache
    # directories are subdirectories of it named by their source directory).
    assert popen[0]["env"]["NUMBA_CACHE_DIR"] == str(tmp_path)
    assert CACHE_DIR_VARIABLE not in popen[0]["env"]
