"""The Gaussian-mixture helpers behind the gmm benchmark: binning, grid, bounds."""

from dataclasses import replace

import numpy as np
import pytest

from pymc_minibatch_mh.bench.problems import (
    GMM_PRIOR_VAR,
    bin_data,
    gmm_binned_model,
    gmm_binning_error,
    gmm_data,
    gmm_log_posterior_grid,
    gmm_loglik,
    gmm_model,
    gmm_tuna_constants,
)

N, K = 20_000, 200.0


@pytest.fixture(scope="module")
def x():
    return gmm_data(N, seed=3)


def test_binning_keeps_counts_and_is_accurate(x):
    binned = bin_data(x, 2_000)
    assert binned.counts.sum() == N
    np.testing.assert_allclose(binned.counts @ binned.centres, x.sum(), rtol=1e-12)
    thetas = np.array([[0.0, 1.0], [1.0, -1.0], [-0.5, 2.0], [0.3, 0.1]])
    # Second-order error bound: 1/2 max|l''| * within-bin sum of squares / K, with
    # |l''| <= 1 / sigma^2 + (theta2 / sigma^2)^2 / 4 <= 1.5 for |theta2| <= 2.
    bound = 2 * 0.5 * 1.5 * binned.within_ss / K
    error = gmm_binning_error(x, binned, K, thetas)
    assert error <= bound
    # Negative control: bin *edges* instead of bin means leave a first-order error.
    shifted = replace(binned, centres=binned.centres + binned.width / 2)
    assert gmm_binning_error(x, shifted, K, thetas) > 10 * bound


def test_grid_matches_model_logp(x):
    binned = bin_data(x, 2_000)
    t1, t2 = np.linspace(-1, 2, 7), np.linspace(-2, 2, 9)
    grid = gmm_log_posterior_grid(binned, K, t1, t2)
    model = gmm_binned_model(binned, K)
    logp = model.compile_logp()
    values = np.array([[logp({"theta": np.array([a, b])}) for b in t2] for a in t1])
    np.testing.assert_allclose(values - values.max(), grid.log_density, atol=1e-9)
    # The full-data tempered posterior agrees up to the binning error bound.
    tempered = np.array(
        [
            [gmm_loglik(x, a, b).sum() / K - a**2 / (2 * GMM_PRIOR_VAR[0]) - b**2 / 2 for b in t2]
            for a in t1
        ]
    )
    bound = 2 * 0.5 * 1.5 * binned.within_ss / K
    np.testing.assert_allclose(tempered - tempered.max(), grid.log_density, atol=bound)


def test_gmm_model_logp_is_the_mixture(x):
    model = gmm_model(x[:500])
    theta = np.array([0.2, 0.7])
    expected = gmm_loglik(x[:500], *theta).sum() - 0.2**2 / 20 - 0.7**2 / 2
    expected -= np.log(2 * np.pi) + 0.5 * np.log(GMM_PRIOR_VAR[0] * GMM_PRIOR_VAR[1])
    np.testing.assert_allclose(model.compile_logp()({"theta": theta}), expected, rtol=1e-10)
    box = gmm_model(x[:500], prior="box")
    assert np.isfinite(box.compile_logp()({"theta": np.array([2.9, -2.9])}))
    assert box.compile_logp()({"theta": np.array([3.1, 0.0])}) == -np.inf


def test_grid_draws_reproduce_grid_moments(x):
    binned = bin_data(x, 2_000)
    grid = gmm_log_posterior_grid(binned, K, np.linspace(-2.5, 3.5, 121), np.linspace(-4, 4, 161))
    draws = grid.sample(np.random.default_rng(0), 40_000)
    for key, (mean, sd) in grid.moments().items():
        # Independent draws: Monte Carlo error of the mean is sd / sqrt(n).
        assert abs(draws[key].mean() - mean) < 4 * sd / np.sqrt(40_000)
        assert abs(draws[key].std() / sd - 1) < 0.02
    assert grid.edge_mass() < 1e-6


def test_tuna_constants_bound_the_loglik_on_the_box(x, rng):
    a = rng.uniform(-3, 3, size=(200, 2))
    b = rng.uniform(-3, 3, size=(200, 2))
    sub = x[:2_000]
    c = gmm_tuna_constants(sub)
    for p, q in zip(a, b, strict=True):
        diff = np.abs(gmm_loglik(sub, *p) - gmm_loglik(sub, *q))
        assert np.all(diff <= c * np.linalg.norm(p - q) * (1 + 1e-12))
    # Negative control: constants for a box half as wide are violated somewhere.
    small = gmm_tuna_constants(sub, half_width=0.5) / 4
    violated = any(
        np.any(np.abs(gmm_loglik(sub, *p) - gmm_loglik(sub, *q)) > small * np.linalg.norm(p - q))
        for p, q in zip(a, b, strict=True)
    )
    assert violated
