"""What a step's construction cost: wall time, compilation, cache use and data passes."""

from __future__ import annotations

import functools
import time

from pymc_minibatch_mh.data.pass_tally import data_passes
from pymc_minibatch_mh.likelihood.compiling import (
    compile_seconds,
    functions_compiled,
    functions_loaded,
    functions_reloaded_since,
    functions_uncacheable,
)


def setup_cache(compiled: int, loaded: int, uncacheable: int = 0) -> str:
    """Whether a construction ran on warm or cold compile caches.

    Parameters
    ----------
    compiled : int
        Functions it compiled because the package's on-disk cache
        (:mod:`~pymc_minibatch_mh.likelihood.function_cache`) did not hold them.
    loaded : int
        Functions it loaded from that cache.
    uncacheable : int, default 0
        Functions it compiled because the cache cannot key their graphs: compiled in every
        process. Beside loaded functions they do not count (e.g. a small probe holding a
        large constant); alone (e.g. every function of a step whose block leaves free variables
        outside) they make the construction cold in every process.

    Returns
    -------
    str
        ``"warm"``: nothing was compiled but uncacheable graphs (every function was loaded from
        the cache, or reused from an earlier step on the same model in this process);
        ``"cold"``: every function was compiled; ``"partly warm"``: some of each (e.g. a
        model that shares some graphs with one built before).
    """
    if compiled == 0 and (loaded > 0 or uncacheable == 0):
        return "warm"
    return "cold" if loaded == 0 else "partly warm"


def _timed_construction(init):
    """Wrap a step's ``__init__`` so that the outermost call records ``setup_s`` (wall
    time of the whole construction), ``compile_s`` (compiling or loading PyTensor functions
    within it), ``functions_compiled`` / ``functions_loaded`` / ``functions_uncacheable``
    and ``setup_cache`` (see
    :func:`setup_cache`) and ``n_data_passes`` (rows read by full-data work within it,
    divided by N)."""

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        outermost = not getattr(self, "_constructing", False)
        if outermost:
            self._constructing = True
            start, compiled, passes = time.perf_counter(), compile_seconds(), data_passes()
            counts = (functions_compiled(), functions_loaded(), functions_uncacheable())
        try:
            init(self, *args, **kwargs)
        finally:
            if outermost:
                self._constructing = False
        if outermost:
            self.setup_s = time.perf_counter() - start
            self.compile_s = compile_seconds() - compiled
            self.functions_compiled = functions_compiled() - counts[0]
            # Functions it compiled and then loaded again itself are not counted as loaded.
            self.functions_loaded = (
                functions_loaded() - counts[1] - functions_reloaded_since(counts[0])
            )
            self.functions_uncacheable = functions_uncacheable() - counts[2]
            self.setup_cache = setup_cache(
                self.functions_compiled, self.functions_loaded, self.functions_uncacheable
            )
            self.n_data_passes = round(data_passes() - passes, 3)

    return wrapper
