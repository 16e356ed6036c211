"""Kernels on a target whose log-likelihood sum is known in closed form (no PyMC).

An :class:`ExactSumTarget` (e.g. a Normal likelihood from its sufficient statistics) gives
the whole log-likelihood ratio as ``diff_offset``. Each kernel must then run the exact MH
test without reading a datum (``tuna_kernel`` with a bound of 0). The acceptance
frequency over many repetitions of one move is compared with the closed form; as a
negative control the same frequency must be far from Barker's probability, so the check
can tell the two rules apart.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pymc_minibatch_mh.bounds.lipschitz import EuclideanMetric, LipschitzBound
from pymc_minibatch_mh.kernels.austere import AustereSettings, austere_kernel
from pymc_minibatch_mh.kernels.barker import BarkerSettings, barker_kernel
from pymc_minibatch_mh.kernels.control_variates import ExactSumTarget
from pymc_minibatch_mh.kernels.correction import load_default_correction
from pymc_minibatch_mh.kernels.target import ArrayTarget, ChainState
from pymc_minibatch_mh.kernels.tuna import TunaSettings, tuna_kernel

N_DATA = 1000
REPEATS = 20_000
Q_OLD = np.array([0.0, 0.0])
Q_NEW = np.array([0.6, -0.5])


class _QuadraticSum:
    """``sum_i l_i(q) = -3 |q - m|^2 / 2``: a closed-form sum over the N rows."""

    mean = np.array([0.1, -0.2])

    def log_bound_sum(self, q: np.ndarray) -> float:
        d = q - self.mean
        return -1.5 * float(d @ d)

    def log_bound_sum_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        d = q - self.mean
        return self.log_bound_sum(q), -3.0 * d


def _no_row(q, idx):
    raise AssertionError("a kernel read a datum from an exact-sum target")


def _target() -> ExactSumTarget:
    return ExactSumTarget(ArrayTarget(N_DATA, _no_row, lambda q: 0.0), _QuadraticSum())


def _log_ratio() -> float:
    likelihood = _QuadraticSum()
    return likelihood.log_bound_sum(Q_NEW) - likelihood.log_bound_sum(Q_OLD)


def _frequency(step) -> tuple[float, float]:
    rng = np.random.default_rng(5)
    accepted = 0
    for _ in range(REPEATS):
        state, info = step(rng)
        assert info.batch_size == 0 and info.n_lik_evals == 0
        accepted += int(state.position is not None and np.array_equal(state.position, Q_NEW))
    freq = accepted / REPEATS
    return freq, math.sqrt(freq * (1 - freq) / REPEATS)


def _barker(rng):
    settings = BarkerSettings(100, 1.0, None, load_default_correction())
    return barker_kernel(rng, ChainState(Q_OLD, 0.0), Q_NEW, 0.0, _target(), settings)


def _austere(rng):
    settings = AustereSettings(100, 0.05, 1.0)
    return austere_kernel(rng, ChainState(Q_OLD, 0.0), Q_NEW, 0.0, _target(), settings)


def _tuna(rng):
    bound = LipschitzBound(np.zeros(N_DATA), EuclideanMetric())
    return tuna_kernel(
        rng, ChainState(Q_OLD, 0.0), Q_NEW, 0.0, _target(), bound, TunaSettings(chi=1.0), None
    )


def test_the_offset_is_the_whole_ratio_and_residuals_are_zero():
    target = _target()
    assert target.exact_sum
    assert target.diff_offset(Q_NEW, Q_OLD) == pytest.approx(_log_ratio())
    np.testing.assert_array_equal(target.loglik_diff(Q_NEW, Q_OLD, np.arange(7)), 0.0)


@pytest.mark.parametrize("kernel", [_barker, _austere, _tuna])
def test_kernels_run_the_exact_mh_test_without_data(kernel):
    delta = _log_ratio()
    assert delta < -0.3  # a move that is rejected often enough to tell the rules apart
    barker = 1.0 / (1.0 + math.exp(-delta))
    mh = min(1.0, math.exp(delta))
    freq, se = _frequency(kernel)
    assert abs(freq - mh) < 4.5 * se, (freq, mh)
    # Negative control: the frequency separates the two rules.
    assert abs(freq - barker) > 10 * se, (freq, barker)
