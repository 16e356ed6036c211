"""FlyMC's split-HMC trajectory over the bright rows of a logit GLM, compiled with numba.

:func:`~pymc_minibatch_mh.kernels.firefly.split_hmc_theta_update` moves ``q`` given the
bright set by rotations about a Gaussian and kicks from the bright rows' ``log Ltilde_n``.
A kick is a few dozen rows times ``D`` multiply-adds, but done with numpy it is some forty
array operations on tiny arrays, and Python's overhead per operation, not the arithmetic,
set its cost (about 60 microseconds a step at D = 101 with 56 bright rows; a transition
takes ten or more steps). Here the steps between the first kick and the trajectory's end
point run as one compiled loop, with the arithmetic of the numpy path (same formulas, so
the same chain up to rounding):

* position ``q = m + C^-T x``; linear predictor ``eta_n = X_n q + o_n``;
* log-likelihood ``log L_n``: Bernoulli ``-log(1 + exp(-s))`` with ``s = eta`` for ``y = 1``
  and ``-eta`` for ``y = 0``; binomial ``log C(n, y) + y eta - n log(1 + exp(eta))``;
* quadratic bound ``log B_n = a_n + e (b_n + c_n e)`` with ``e = eta_n - anchor_n``;
* tempered gap ``g_n = (log L_n - log B_n) / K`` and weight ``1 / (K (1 - e^-g_n))``;
* kick ``C^-1 X^T (w (dlog L / deta - dlog B / deta))``.

A gap below ``-tolerance (1 + |log L_n|)`` (a bound above the likelihood) stops the loop
with status :data:`BOUND_VIOLATED` so that the caller raises its error from the numpy path;
a gap ``<= 0`` or a non-finite kick with status :data:`REJECT` (the numpy path's infinite
weight, a rejection). Only bounds without a trust region and rows that all have a bound
take this path (:func:`compiled_rows`); everything else, and every end point, stays in
numpy.

Setting :data:`ENABLED` to False makes this process run the numpy loop only (the tests
compare the two; PyMC's chain worker processes import the module afresh).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

import numpy as np

from pymc_minibatch_mh.families.registry import FAMILY_RECORDS

#: Run trajectories compiled where :func:`compiled_rows` allows it (False: numpy only, in
#: this process).
ENABLED = True
#: Smallest number of coordinates compiled for (fewer: the numpy loop). The loop is compiled
#: at its first use (about 1.3 s in each chain process while numba's cache is cold) and
#: saves some 40 µs a leapfrog step: at D = 6 (a first run at N = 2·10^4, 2 x 600 draws)
#: that came to less than the compilation (FlyMC's first run 3.9 s -> 5.7 s), at D = 101
#: 4 s of sampling per run.
MIN_DIM = 21
#: Statuses of :func:`run_split_kicks`.
AT_END, REJECT, BOUND_VIOLATED = 0, 1, 2
#: Families the compiled kicks evaluate, and their codes there.
FAMILY_CODES = MappingProxyType(
    {name: r.compiled_code for name, r in FAMILY_RECORDS.items() if r.compiled_code is not None}
)


@dataclass(frozen=True, eq=False)
class RowColumns:
    """Per-row columns of logit GLM rows and their quadratic bounds, as the compiled loops
    (:mod:`~pymc_minibatch_mh.kernels.logit_numba`) read them: the family code, the offset,
    the observations (with binomial trials and ``log C(trials, y)``) and the bound's
    anchor, value, slope and curvature."""

    family: int
    offset: np.ndarray
    observed: np.ndarray
    trials: np.ndarray
    log_choose: np.ndarray
    anchor: np.ndarray
    value: np.ndarray
    slope: np.ndarray
    curvature: np.ndarray


@dataclass(frozen=True, eq=False)
class CompiledRows(RowColumns):
    """The arrays of a fixed set of bright rows that the compiled loop reads (C order),
    with their gathered ``design`` rows."""

    design: np.ndarray = None


def compiled_rows(rows, region) -> CompiledRows | None:
    """The rows (:class:`~pymc_minibatch_mh.bounds.glm_bright_rows.GLMBrightRows`) as
    :class:`CompiledRows`, or None when the compiled loop cannot run them or would not pay:
    a family other than :data:`FAMILY_CODES`, a row without a bound, a bound on a trust
    region, no rows, fewer than :data:`MIN_DIM` coordinates, numba missing, or
    :data:`ENABLED` off."""
    family = getattr(rows, "family", None)
    if (
        not ENABLED
        or region is not None
        or family not in FAMILY_CODES
        or getattr(rows, "unbounded", None) is not None
        or not np.size(rows.idx)
        or np.shape(rows.source)[1] < MIN_DIM
        or compiled_loops() is None
    ):
        return None
    n = rows.idx.size

    def column(values) -> np.ndarray:
        if isinstance(values, np.ndarray) and values.shape == (n,):  # the usual case
            return np.ascontiguousarray(values, dtype=np.float64)
        return np.ascontiguousarray(np.broadcast_to(np.asarray(values, np.float64), (n,)))

    design = np.ascontiguousarray(rows.design, dtype=np.float64)
    return CompiledRows(**row_columns(rows, column), design=design)


def row_columns(rows, column) -> dict:
    """The :class:`RowColumns` fields of GLM rows (a
    :class:`~pymc_minibatch_mh.bounds.glm_bright_rows.GLMBrightRows` of a family in
    :data:`FAMILY_CODES`), each per-row column made by ``column(values)``."""
    observed = column(rows.observed)
    trials, log_choose = binomial_columns(rows.family, rows.params, observed)
    return dict(
        family=FAMILY_CODES[rows.family],
        offset=column(rows.offset),
        observed=observed,
        trials=column(trials),
        log_choose=column(log_choose),
        anchor=column(rows.anchor),
        value=column(rows.value),
        slope=column(rows.slope),
        curvature=column(rows.curvature),
    )


def run_split_kicks(
    rows: CompiledRows,
    x: np.ndarray,
    momentum: np.ndarray,
    kick: np.ndarray,
    mean: np.ndarray,
    inverse: np.ndarray,
    step_size: float,
    n_steps: int,
    temperature: float,
    check: bool,
    tolerance: float,
) -> tuple[int, int, np.ndarray]:
    """Run the trajectory up to its end point, in place on ``x`` and ``momentum``.

    Each of the ``n_steps`` steps: half kick, rotation by ``step_size``, then for all but
    the last step the kick at the new point and the second half kick. ``kick`` is the kick
    at the start (whitened); ``inverse`` is ``C^-1``, lower triangular (the loop reads only
    that triangle), as :attr:`~pymc_minibatch_mh.kernels.gaussian_flow.GaussianFlow.inverse_chol`
    gives it. Returns ``(status, steps, q)``:
    :data:`AT_END` with ``q`` the end point (its half kick still to come),
    :data:`REJECT` or :data:`BOUND_VIOLATED` at the point ``q`` reached after ``steps``
    rotations.
    """
    q = np.empty(mean.size)
    status, steps = compiled_loops().split_kicks(
        rows.family,
        rows.design,
        rows.offset,
        rows.observed,
        rows.trials,
        rows.log_choose,
        rows.anchor,
        rows.value,
        rows.slope,
        rows.curvature,
        x,
        momentum,
        np.array(kick, dtype=np.float64),
        mean,
        np.ascontiguousarray(inverse, dtype=np.float64),
        float(step_size),
        int(n_steps),
        float(temperature),
        bool(check),
        float(tolerance),
        q,
    )
    return int(status), int(steps), q


def binomial_columns(family: str, params: dict, observed: np.ndarray):
    """``(trials, log C(trials, y))`` of binomial rows (zeros for Bernoulli rows)."""
    if family != "binomial_logit":
        return np.zeros(observed.size), np.zeros(observed.size)
    from scipy.special import gammaln

    trials = np.broadcast_to(np.asarray(params["n"], np.float64), observed.shape)
    log_choose = gammaln(trials + 1.0) - gammaln(observed + 1.0)
    return trials, log_choose - gammaln(trials - observed + 1.0)


@cache
def compiled_loops():
    """The module of compiled loops (:mod:`~pymc_minibatch_mh.kernels.logit_numba`; each
    loop is compiled at its first use, then read from numba's disk cache), or None without
    numba."""
    try:
        from pymc_minibatch_mh.kernels import logit_numba
    except ImportError:  # pragma: no cover - numba comes with PyTensor
        return None
    return logit_numba
