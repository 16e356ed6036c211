"""Every PyTensor function of the package is compiled here, and the time it takes counted."""

from __future__ import annotations

import time

from pymc.pytensorf import compile as _compile_pymc

_seconds = 0.0


def compile_function(inputs, outputs, **kwargs):
    """:func:`pymc.pytensorf.compile`, adding its wall time to :func:`compile_seconds`."""
    global _seconds
    start = time.perf_counter()
    try:
        return _compile_pymc(inputs, outputs, **kwargs)
    finally:
        _seconds += time.perf_counter() - start


def compile_seconds() -> float:
    """Seconds spent in :func:`compile_function` so far in this process.

    This is graph rewriting and, on PyTensor's C backend, C compilation (or loading from
    the on-disk cache). The numba backend compiles each function at its first call, which
    this does not count.
    """
    return _seconds
