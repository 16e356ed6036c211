"""One timed single-chain ``pm.sample`` run, shared by the benchmark scripts here."""

from __future__ import annotations

import time
import warnings

import pymc as pm

from pymc_minibatch_mh.diagnostics import posterior, sample_stats


def timed_single_chain(model, step, *, draws: int, tune: int, seed: int, initvals=None):
    """Sample one chain of ``model`` with ``step`` (no progress bar, PyMC's warnings muted).

    Returns ``(posterior, sample_stats, wall_seconds)``; the wall time covers sampling only,
    not the construction of ``step``.
    """
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        idata = pm.sample(
            step=step,
            draws=draws,
            tune=tune,
            chains=1,
            cores=1,
            initvals=initvals,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        wall = time.perf_counter() - start
    return posterior(idata), sample_stats(idata), wall
