"""FlyMC's iteration over a logit GLM held in memory, with its loops compiled.

A FlyMC iteration with split HMC (:func:`~pymc_minibatch_mh.kernels.firefly.
split_hmc_theta_update`, then :func:`~pymc_minibatch_mh.kernels.firefly.brightness_update`)
reads a handful of rows at tall N: at N = 10^6, D = 11 about 7 rows per iteration. Done
with numpy, it costs some 350 µs of Python and numpy call overhead (about 40 small-array
operations per leapfrog step, the brightness update's gathers and store swaps), which is
most of FlyMC's sampling time. Here the trajectory up to its end point, the brightness
update and the first draw of every ``z_n`` run compiled
(:mod:`~pymc_minibatch_mh.kernels.logit_numba`) on the full-data arrays: about 45 µs an
iteration. The kernel (:mod:`~pymc_minibatch_mh.kernels.firefly`) draws the same random
numbers as on its numpy path, in the same order, and passes them in, so the chain is the
same up to rounding; the log prior, the collapsed bound and the MH decision at the end
point stay with it.

Compiling the loops takes about 3 s (numba: 2 s for the trajectory), more than they save
in a run of a few thousand iterations, so a chain uses them only when numba's disk cache
already holds them; otherwise it keeps the numpy path and starts their compilation in a
separate process at the lowest priority, so that later runs on the machine find them
compiled (:mod:`~pymc_minibatch_mh.kernels.compiled_cache`).

It applies (:func:`compiled_glm`) to Bernoulli- and Binomial-logit rows with a global
quadratic bound on every row, whose design is a dense array or a
:class:`~pymc_minibatch_mh.data.row_design.RowDesign` of one product ``X @ W(q)`` plus
constant columns (``X @ beta + a``); other designs (group-indexed columns, several
products) keep the numpy path, with compiled kicks above
:data:`~pymc_minibatch_mh.kernels.split_kicks.MIN_DIM` coordinates.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from pymc_minibatch_mh.kernels import compiled_cache, split_kicks
from pymc_minibatch_mh.kernels.product_design import fixed, product_design

#: Run FlyMC iterations compiled where :func:`compiled_glm` allows it (False: numpy only,
#: in this process; the tests compare the two).
ENABLED = True
#: Statuses of the compiled loops.
AT_END, REJECT, BOUND_VIOLATED = split_kicks.AT_END, split_kicks.REJECT, split_kicks.BOUND_VIOLATED


@dataclass(frozen=True, eq=False)
class CompiledGLM(split_kicks.RowColumns):
    """Every row of a logit GLM and its quadratic bound, as the compiled loops read them:
    ``eta_n = weight (features_n . (coef_map q)) + constant_row . q + offset_n``."""

    features: np.ndarray = None
    coef_map: np.ndarray = None
    weight: float = 1.0
    constant_row: np.ndarray = None

    def row_arrays(self) -> tuple:
        """The arrays in the compiled loops' argument order (after the family)."""
        return (
            self.features, self.coef_map, self.weight, self.constant_row, self.offset,
            self.observed, self.trials, self.log_choose, self.anchor, self.value, self.slope,
            self.curvature,
        )  # fmt: skip


_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compiled_glm(rows, bound, n_data: int) -> CompiledGLM | None:
    """The rows of FlyMC's ``rows`` factory (``idx -> GLMBrightRows``) as a
    :class:`CompiledGLM`, built once per factory in each process, or None where the compiled
    iteration does not apply: no factory, :data:`ENABLED` off, a bound on a trust region or
    with rows without a bound, a family other than Bernoulli- / Binomial-logit, a design of
    another form, or numba missing."""
    if rows is None or not ENABLED or getattr(bound, "region", None) is not None:
        return None
    if getattr(bound, "unbounded", None) is not None:
        return None
    try:
        return _BUILT[rows]
    except KeyError:
        pass
    except TypeError:  # not weakly referable: not a factory of ours
        return None
    built = _build(rows, n_data)
    _BUILT[rows] = built
    return built


def _build(rows, n_data: int) -> CompiledGLM | None:
    """The :class:`CompiledGLM` of every row, or None; what it depends on is read from a few
    rows first, so that nothing of size N is gathered where it does not apply or the loops
    are not cached."""
    few = rows(np.arange(min(n_data, 4), dtype=np.int64))
    family = getattr(few, "family", None)
    if family not in split_kicks.FAMILY_CODES or getattr(few, "unbounded", None) is not None:
        return None
    if split_kicks.compiled_loops() is None:
        return None
    product = product_design(few.source, n_data)
    if product is None:
        return None
    features, coef_map, weight, constant_row = product
    code = split_kicks.FAMILY_CODES[family]
    if not compiled_cache.ready(loop_types(code, features, coef_map, n_data)):
        return None
    every = rows(np.arange(n_data, dtype=np.int64))

    def column(values) -> np.ndarray:
        return fixed(np.broadcast_to(np.asarray(values, np.float64), (n_data,)))

    return CompiledGLM(
        **split_kicks.row_columns(every, column),
        features=fixed(features, features.dtype),
        coef_map=fixed(coef_map),
        weight=weight,
        constant_row=fixed(constant_row),
    )


def trajectory(state, glm: CompiledGLM, gaussian, step_size, n_steps, momentum, settings):
    """The split trajectory of ``q | z`` from the state's position over its bright rows,
    compiled: ``n_steps`` steps of ``step_size`` from ``momentum`` (updated in place).
    Returns ``(status, steps, row, end point, the bright rows' log Ltilde there, kinetic
    energy change, sum of the bright rows' log Ltilde at the start, at the end)``; ``row``
    is the data row whose bound is above its likelihood at :data:`BOUND_VIOLATED`."""
    args = _trajectory_args(state, glm, gaussian, step_size, n_steps, momentum, settings)
    loops = split_kicks.compiled_loops()
    status, steps, row, kinetic, lt_sum0, lt_sum1 = loops.split_trajectory(*args)
    return int(status), int(steps), int(row), args[-2], args[-1], kinetic, lt_sum0, lt_sum1


def brightness_update(state, glm: CompiledGLM, settings, u_dark, offsets, u_candidates) -> int:
    """The implicit update of every ``z_n`` given the state's position, compiled, in place,
    with the numpy path's draws (see :func:`~pymc_minibatch_mh.kernels.logit_numba.
    brightness_update`). Returns the violating row or -1."""
    args = _brightness_args(state, glm, settings, u_dark, offsets, u_candidates)
    n_bright, row, _ = split_kicks.compiled_loops().brightness_update(*args)
    state.store.n_bright = int(n_bright)
    return int(row)


def draw_brightness(uniforms, position, glm: CompiledGLM, settings, store, log_lt):
    """Every ``z_n`` drawn from ``p(z_n | q)`` at ``position`` with one uniform per row,
    compiled: ``log_lt`` and the store (a new one, all dark) filled in place. Returns
    ``(n_bright, row)``; see :func:`~pymc_minibatch_mh.kernels.logit_numba.draw_brightness`."""
    state = SimpleNamespace(store=store, log_lt=log_lt)
    n_bright, row = split_kicks.compiled_loops().draw_brightness(
        *_draw_args(uniforms, position, glm, settings, state)
    )
    if n_bright >= 0:
        store.n_bright = int(n_bright)
    return int(n_bright), int(row)


def _store_dtype(n_data: int) -> np.dtype:
    """The index dtype of a :class:`~pymc_minibatch_mh.kernels.firefly.BrightnessStore`."""
    return np.dtype(np.int32 if n_data < 2**31 - 1 else np.int64)


def loop_types(family: int, features: np.ndarray, coef_map: np.ndarray, n_data: int) -> tuple:
    """What the loops' compiled signatures depend on: ``(family, features dtype,
    coefficients, coordinates, store dtype)``."""
    n_feat, dim = coef_map.shape
    return family, features.dtype.str, n_feat, dim, _store_dtype(n_data).str


def _example(family, dtype, n_feat, dim, store_dtype) -> tuple:
    """``(state, glm, gaussian, settings, draws)`` of 4 rows of these types (:func:`loop_types`),
    ``draws`` those of a brightness update: arguments that make the loops compile the
    signatures a chain uses."""
    features = np.zeros((4, n_feat), dtype=dtype)
    column = fixed(np.zeros(4))
    glm = CompiledGLM(
        family=family, offset=column, observed=column, trials=column, log_choose=column,
        anchor=column, value=fixed(np.full(4, -1.0)), slope=column, curvature=column,
        features=fixed(features, dtype), coef_map=fixed(np.eye(n_feat, dim)), weight=1.0,
        constant_row=fixed(np.zeros(dim)),
    )  # fmt: skip
    store = SimpleNamespace(
        arr=np.arange(4, dtype=store_dtype), tab=np.arange(4, dtype=store_dtype), n_bright=1
    )
    state = SimpleNamespace(store=store, log_lt=np.full(4, -1.0), position=np.zeros(dim))
    eye = np.eye(dim)
    gaussian = SimpleNamespace(mean=np.zeros(dim), precision_chol=eye, inverse_chol=eye)
    settings = SimpleNamespace(temperature=1.0, check_bound=True, bound_tolerance=1e-8, q_db=0.5)
    draws = (np.full(4, 0.5), np.arange(2, dtype=np.int64), np.full(2, 0.5))
    return state, glm, gaussian, settings, draws


def _trajectory_args(state, glm: CompiledGLM, gaussian, step_size, n_steps, momentum, settings):
    store = state.store
    bright = store.arr[: store.n_bright]
    q = np.empty(state.position.size)
    log_lt_end = np.empty(bright.size)
    return (
        bright, glm.family, *glm.row_arrays(), state.log_lt, state.position,
        np.ascontiguousarray(gaussian.mean), np.ascontiguousarray(gaussian.precision_chol),
        np.ascontiguousarray(gaussian.inverse_chol), float(step_size), int(n_steps), momentum,
        float(settings.temperature), bool(settings.check_bound),
        float(settings.bound_tolerance), q, log_lt_end,
    )  # fmt: skip


def _brightness_args(state, glm: CompiledGLM, settings, u_dark, offsets, u_candidates):
    store = state.store
    return (
        store.arr, store.tab, store.n_bright, state.log_lt, float(settings.q_db), u_dark,
        offsets, u_candidates, glm.family, *glm.row_arrays(), state.position,
        float(settings.temperature), bool(settings.check_bound),
        float(settings.bound_tolerance),
    )  # fmt: skip


def _draw_args(uniforms, position, glm: CompiledGLM, settings, state):
    return (
        uniforms, glm.family, *glm.row_arrays(), position, float(settings.temperature),
        bool(settings.check_bound), float(settings.bound_tolerance), state.log_lt,
        state.store.arr, state.store.tab,
    )  # fmt: skip


def example_calls(types: tuple) -> list:
    """``(loop, arguments)`` of each loop for these :func:`loop_types`: small arguments of the
    types a chain passes (:mod:`~pymc_minibatch_mh.kernels.compiled_cache`)."""
    loops = split_kicks.compiled_loops()
    state, example, gaussian, settings, draws = _example(*types)
    dim = state.position.size
    return [
        (
            loops.split_trajectory,
            _trajectory_args(state, example, gaussian, 0.5, 3, np.zeros(dim), settings),
        ),
        (loops.brightness_update, _brightness_args(state, example, settings, *draws)),
        (loops.draw_brightness, _draw_args(draws[0], state.position, example, settings, state)),
    ]
