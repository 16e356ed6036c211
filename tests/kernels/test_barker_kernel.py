"""The minibatch Barker test alone (no PyMC)."""

import math

import numpy as np
import pytest
from scipy import special

from pymc_minibatch_mh.kernels.barker import (
    BarkerSettings,
    RunningMoments,
    barker_decision,
    barker_kernel,
    barker_probability,
    clt_error_bound,
)
from pymc_minibatch_mh.kernels.correction import load_default_correction
from pymc_minibatch_mh.kernels.target import ArrayTarget, ChainState

TABLE = load_default_correction()
DELTAS = np.linspace(-4, 4, 17)


def _acceptance_curve(rng, noise_var, assumed_var, n=1_000_000):
    """Acceptance rate of the test when Delta* ~ N(Delta, noise_var)."""
    rates = []
    for delta in DELTAS:
        delta_star = delta + math.sqrt(noise_var) * rng.standard_normal(n)
        rates.append(barker_decision(rng, delta_star, np.full(n, assumed_var), TABLE).mean())
    return np.array(rates)


def test_barker_identity():
    s = np.linspace(-30, 30, 601)
    g = special.expit(s)
    np.testing.assert_allclose(g, np.exp(s) * special.expit(-s), rtol=1e-12)
    assert barker_probability(0.0) == 0.5


def test_acceptance_matches_logistic_for_gaussian_delta_star(rng):
    rates = _acceptance_curve(rng, noise_var=0.5, assumed_var=0.5)
    assert np.max(np.abs(rates - special.expit(DELTAS))) < 2e-3


def test_negative_control_ignoring_the_minibatch_noise_fails(rng):
    # Treating a noisy Delta* (variance 0.5) as exact over-disperses the test.
    rates = _acceptance_curve(rng, noise_var=0.5, assumed_var=0.0, n=200_000)
    assert np.max(np.abs(rates - special.expit(DELTAS))) > 2e-2


@pytest.mark.parametrize("delta", [-2.0, 0.0, 1.5])
def test_kernel_acceptance_on_gaussian_increments(rng, delta):
    """ALGORITHMS.md 6.2 item 13: i.i.d. Gaussian Lambda_i with known mean Delta."""
    n_data, b = 100_000, 300
    # Per-datum log-ratios l_i with mean Delta / N and sd chosen so s^2 = 0.6 at b = 300.
    sd = math.sqrt(0.6 * b) / n_data
    log_ratios = delta / n_data + sd * rng.standard_normal(n_data)
    log_ratios += delta / n_data - log_ratios.mean()  # make the full-data sum exactly Delta

    target = ArrayTarget(
        n_data=n_data,
        loglik=lambda q, idx: q[0] * log_ratios[idx],
        logprior=lambda q: 0.0,
    )
    settings = BarkerSettings(batch_size=b, temperature=1.0, delta=None, table=TABLE)
    state = ChainState(np.array([0.0]), 0.0)
    proposal = np.array([1.0])
    n_trials = 20_000
    accepted, sizes = 0, []
    for _ in range(n_trials):
        _, info = barker_kernel(rng, state, proposal, 0.0, target, settings)
        accepted += info.accepted
        sizes.append(info.batch_size)
    rate = accepted / n_trials
    se = math.sqrt(0.25 / n_trials)
    assert abs(rate - special.expit(delta)) < 4 * se + 2e-3
    assert max(sizes) <= b  # the first batch already satisfies s^2 < 1


def test_full_data_fallback_is_exact_barker(rng):
    n_data = 150
    log_ratios = rng.normal(0.01, 1.0, size=n_data)
    target = ArrayTarget(n_data, lambda q, idx: q[0] * log_ratios[idx], lambda q: 0.0)
    settings = BarkerSettings(batch_size=100, temperature=1.0, delta=None, table=TABLE)
    state = ChainState(np.array([0.0]), 0.0)
    results = [
        barker_kernel(rng, state, np.array([1.0]), 0.0, target, settings)[1] for _ in range(4000)
    ]
    assert all(r.batch_size == n_data and r.delta_var == 0.0 for r in results)
    expected = special.expit(log_ratios.sum())
    assert results[0].accept == pytest.approx(expected)
    rate = np.mean([r.accepted for r in results])
    assert abs(rate - expected) < 4 * math.sqrt(expected * (1 - expected) / 4000) + 1e-3


def test_temperature_scales_the_log_ratio(rng):
    n_data = 120
    log_ratios = np.full(n_data, 0.05)
    target = ArrayTarget(n_data, lambda q, idx: q[0] * log_ratios[idx], lambda q: 0.0)
    state = ChainState(np.array([0.0]), 0.0)
    for temperature in (1.0, 3.0):
        settings = BarkerSettings(100, temperature, None, TABLE)
        _, info = barker_kernel(rng, state, np.array([1.0]), 0.0, target, settings)
        assert info.accept == pytest.approx(special.expit(log_ratios.sum() / temperature))


def test_nonfinite_prior_rejects_without_data(rng):
    calls = []

    def loglik(q, idx):
        calls.append(idx)
        return np.zeros(len(idx))

    target = ArrayTarget(10_000, loglik, lambda q: -math.inf if q[0] < 0 else 0.0)
    settings = BarkerSettings(100, 1.0, None, TABLE)
    state = ChainState(np.array([1.0]), 0.0)
    new, info = barker_kernel(rng, state, np.array([-1.0]), 0.0, target, settings)
    assert new is state and not info.accepted and info.batch_size == 0 and not calls


@pytest.mark.parametrize("bad", [np.nan, -np.inf])
def test_nonfinite_likelihood_rejects(rng, bad):
    def loglik(q, idx):
        out = np.zeros(len(idx))
        if q[0] > 0.5:
            out[0] = bad
        return out

    target = ArrayTarget(10_000, loglik, lambda q: 0.0)
    settings = BarkerSettings(100, 1.0, None, TABLE)
    state = ChainState(np.array([0.0]), 0.0)
    new, info = barker_kernel(rng, state, np.array([1.0]), 0.0, target, settings)
    assert new is state and not info.accepted and info.batch_size > 0


def test_batch_grows_until_variance_below_one(rng):
    n_data = 1_000_000
    log_ratios = rng.normal(0.0, 1.0, size=n_data) * 2e-5
    target = ArrayTarget(n_data, lambda q, idx: q[0] * log_ratios[idx], lambda q: 0.0)
    settings = BarkerSettings(50, 1.0, None, TABLE)
    state = ChainState(np.array([0.0]), 0.0)
    _, info = barker_kernel(rng, state, np.array([1.0]), 0.0, target, settings)
    # Var(Lambda_j) = (N * 2e-5)^2 = 400, so s^2 < 1 needs b of about 400 (the
    # sample variance fluctuates by ~7% at that size).
    assert 300 <= info.batch_size <= 600
    assert info.delta_var < 1.0
    assert info.n_lik_evals % 100 == 0 and info.n_lik_evals >= 2 * info.batch_size


def test_delta_option_grows_batch_until_clt_bound_met(rng):
    n_data = 1_000_000
    log_ratios = rng.normal(0.0, 1.0, size=n_data) * 1e-7
    target = ArrayTarget(n_data, lambda q, idx: q[0] * log_ratios[idx], lambda q: 0.0)
    state = ChainState(np.array([0.0]), 0.0)
    _, loose = barker_kernel(
        rng, state, np.array([1.0]), 0.0, target, BarkerSettings(100, 1.0, None, TABLE)
    )
    _, strict = barker_kernel(
        rng, state, np.array([1.0]), 0.0, target, BarkerSettings(100, 1.0, 0.5, TABLE)
    )
    assert loose.batch_size == 100
    assert strict.clt_error <= 0.5 and strict.batch_size >= (11.8 / 0.5) ** 2 * 0.9


def test_clt_bound_for_gaussian_increments(rng):
    z = rng.standard_normal(200_000)
    # 6.4 E|Z|^3 + 2 E|Z| = 11.81 for a standard normal.
    assert clt_error_bound(z) * math.sqrt(z.size) == pytest.approx(11.81, rel=0.01)
    assert clt_error_bound(np.ones(10)) == 0.0


def test_running_moments_match_numpy(rng):
    x = rng.normal(1e6, 3.0, size=1000)
    moments = RunningMoments()
    for chunk in np.array_split(x, 7):
        moments = moments.merge(chunk)
    assert moments.count == 1000
    assert moments.mean == pytest.approx(x.mean(), rel=1e-12)
    assert moments.variance == pytest.approx(x.var(), rel=1e-8)
