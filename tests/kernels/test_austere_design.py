"""Worst-case error and data use of the Austerity test (dynamic program vs simulation)."""

import itertools
import math

import numpy as np
import pytest
from scipy import special

from pymc_minibatch_mh import design_austere_test
from pymc_minibatch_mh.kernels.austere import AustereSettings, sequential_test
from pymc_minibatch_mh.kernels.austere_design import stage_sizes, worst_case_error
from pymc_minibatch_mh.kernels.subsample import UsedRows
from pymc_minibatch_mh.kernels.target import ArrayTarget


def _simulate_kernel_tests(rng, n_data, batch_size, epsilon, n_tests):
    """Run the kernel's own sequential test with the true mean exactly on the threshold.

    Returns the estimated ``E(0)`` (half the early-stopping rate), its standard error,
    the mean data fraction and its standard error.
    """
    values = rng.normal(size=n_data)  # the per-datum log-ratios l_i
    target = ArrayTarget(n_data, lambda q, idx: q[0] * values[idx], lambda q: 0.0)
    settings = AustereSettings(batch_size, epsilon, 1.0)
    rows = UsedRows(n_data)
    used = np.empty(n_tests)
    for i in range(n_tests):
        _, info = sequential_test(
            rng, np.zeros(1), np.ones(1), values.mean(), target, settings, rows
        )
        rows.release()
        used[i] = info.batch_size
    early = np.mean(used < n_data)
    fraction = used / n_data
    return (
        early / 2,
        math.sqrt(early * (1 - early) / n_tests) / 2,
        fraction.mean(),
        fraction.std() / math.sqrt(n_tests),
    )


N_SIM = 4_000


@pytest.fixture(scope="module")
def simulated():
    """Kernel tests at mu = mu0 for (batch_size, epsilon) = (200, 0.05) and (400, 0.01)."""
    rng = np.random.default_rng(77)
    return {
        key: _simulate_kernel_tests(rng, N_SIM, *key, 2_000) for key in [(200, 0.05), (400, 0.01)]
    }


@pytest.mark.parametrize(("batch_size", "epsilon"), [(200, 0.05), (400, 0.01)])
def test_dynamic_program_matches_simulated_sequential_tests(simulated, batch_size, epsilon):
    error_mc, error_se, fraction_mc, fraction_se = simulated[batch_size, epsilon]
    error, fraction = worst_case_error(N_SIM, batch_size, epsilon)
    # 4 Monte Carlo s.e. plus 0.005 for the t-as-z and Gaussian-sum approximations.
    assert abs(error - error_mc) < 4 * error_se + 0.005, (error, error_mc)
    assert abs(fraction - fraction_mc) < 4 * fraction_se + 0.005, (fraction, fraction_mc)


def test_negative_control_wrong_batch_size_is_detected(simulated):
    """The comparison above has power: the DP for batches of 400 does not match tests of 200."""
    error_mc, error_se, _, _ = simulated[200, 0.05]
    error, _ = worst_case_error(N_SIM, 400, 0.05)
    assert abs(error - error_mc) > 4 * error_se + 0.005


def _simulate_gaussian_walk(rng, n_data, batch_size, epsilon, n_paths):
    """The model behind the DP, simulated: Gaussian bridge sums, t quantile thresholds."""
    sizes = stage_sizes(n_data, batch_size)
    total = np.zeros(n_paths)
    alive = np.ones(n_paths, dtype=bool)
    stopped_at = np.full(n_paths, float(n_data))
    previous = 0
    for n in sizes:
        shrink = (n_data - n) / (n_data - previous)
        total = total * shrink + rng.standard_normal(n_paths) * math.sqrt((n - previous) * shrink)
        z = total / math.sqrt(n * (n_data - n) / n_data)
        limit = special.stdtrit(n - 1, 1 - epsilon) * math.sqrt(n_data / (n_data - 1))
        stop = alive & (np.abs(z) > limit)
        stopped_at[stop] = n
        alive &= ~stop
        previous = n
    early = 1.0 - alive.mean()
    return early / 2, math.sqrt(early * (1 - early) / n_paths) / 2, stopped_at.mean() / n_data


def test_dynamic_program_is_accurate_over_a_thousand_stages(rng):
    """Many stages magnify grid errors (an earlier bin-centre DP was 0.01 too high here)."""
    error_mc, error_se, fraction_mc = _simulate_gaussian_walk(rng, 100_000, 100, 0.01, 40_000)
    error, fraction = worst_case_error(100_000, 100, 0.01)
    assert abs(error - error_mc) < 4 * error_se, (error, error_mc)
    assert abs(fraction - fraction_mc) < 0.01


def test_error_and_data_use_are_monotone_in_epsilon():
    results = [worst_case_error(20_000, 500, eps) for eps in (1e-4, 1e-3, 0.01, 0.05, 0.2)]
    errors, fractions = zip(*results, strict=True)
    assert all(a < b for a, b in itertools.pairwise(errors))
    assert all(a > b for a, b in itertools.pairwise(fractions))
    assert all(0 < e < 0.5 for e in errors) and all(0 < f <= 1 for f in fractions)


def test_degenerate_cases_are_exact():
    assert worst_case_error(10_000, 500, 0.0) == (0.0, 1.0)  # epsilon = 0: exact MH
    assert worst_case_error(400, 500, 0.1) == (0.0, 1.0)  # one batch covers all N
    assert stage_sizes(1_050, 500).tolist() == [500, 1_000]
    with pytest.raises(ValueError, match="epsilon"):
        worst_case_error(1_000, 100, 0.5)
    with pytest.raises(ValueError, match="batch_size"):
        worst_case_error(1_000, 1, 0.1)


def test_design_is_the_best_feasible_grid_point():
    n_data, tolerance = 5_000, 0.08
    batch_sizes, epsilons = (100, 250, 500), (0.1, 0.02, 0.005, 0.001)
    design = design_austere_test(n_data, tolerance, batch_sizes=batch_sizes, epsilons=epsilons)
    feasible = [
        (worst_case_error(n_data, m, e)[1], m, e)
        for m in batch_sizes
        for e in epsilons
        if worst_case_error(n_data, m, e)[0] <= tolerance
    ]
    fraction, m, e = min(feasible)
    assert (design.batch_size, design.epsilon) == (m, e)
    assert design.error <= tolerance and design.data_fraction == pytest.approx(fraction)
    assert 0 < design.epsilon < 0.5


def test_design_falls_back_to_exact_mh_and_caps_the_stage_count():
    design = design_austere_test(5_000, 1e-6, epsilons=(0.1, 0.01))
    assert design.epsilon == 0.0 and design.error == 0.0 and design.data_fraction == 1.0
    capped = design_austere_test(10**6, 0.2, batch_sizes=(10,), max_stages=500)
    assert capped.batch_size == 2_000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_data": 1, "tolerance": 0.1}, "n_data"),
        ({"n_data": 1000, "tolerance": 0.0}, "tolerance"),
        ({"n_data": 1000, "tolerance": 0.1, "batch_sizes": (1,)}, "batch_sizes"),
        ({"n_data": 1000, "tolerance": 0.1, "epsilons": (0.6,)}, "epsilons"),
    ],
)
def test_design_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        design_austere_test(**kwargs)
