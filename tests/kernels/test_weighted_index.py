"""Cumulative weight table: exact masses, zero weights never drawn, sampling frequencies."""

import numpy as np
import pytest
from scipy import stats

from pymc_minibatch_mh.kernels.weighted_index import CumulativeTable, sorted_uniforms


def _weights():
    rng = np.random.default_rng(0)
    n = 999
    return {
        "uniform": rng.random(10),
        "exponential": rng.exponential(size=1000),
        "pareto": rng.pareto(1.1, size=20_000),
        "chain": np.r_[0.5, np.full(n, 1 + 0.5 / n)],
        "one_giant": np.r_[1e6, np.ones(100)],
        "one_tiny": np.r_[1.0, np.full(9_999, 1e-9)],
        "zeros": np.r_[np.zeros(5), 2.0, 0.0, 1.0],
        "equal": np.ones(7),
        "single": np.array([3.0]),
    }


@pytest.mark.parametrize("name", list(_weights()))
def test_table_reproduces_the_weights_exactly(name):
    w = _weights()[name]
    table = CumulativeTable.from_weights(w)
    assert table.size == w.size
    assert np.all(np.diff(table.cumulative) >= 0)
    np.testing.assert_allclose(table.masses(), w / w.sum(), rtol=1e-9, atol=1e-15)


def test_zero_weights_are_never_drawn(rng):
    w = np.r_[np.zeros(5), 2.0, 0.0, 1.0]
    draws = CumulativeTable.from_weights(w).sample(rng, 100_000)
    assert set(np.unique(draws)) == {5, 7}


def test_zero_weights_at_the_end_are_never_drawn_even_for_u_at_the_total():
    """A uniform equal to the total (u = 1, as rounding could give) must not select the
    trailing zero-weight items, which a bare binary search would return."""

    class TopUniform:
        # Spacings 1, 0, ..., 0: every partial sum equals the total, so every u is 1.
        def standard_exponential(self, size):
            return np.r_[1.0, np.zeros(size - 1)]

    table = CumulativeTable.from_weights(np.r_[0.3, 0.1 + 0.2, 0.0, 0.0])
    assert np.all(table.sample(TopUniform(), 5) == 1)
    # Negative control: without the table's clamp the search runs past the end.
    assert np.searchsorted(table.cumulative, table.cumulative[-1], side="right") == 4


@pytest.mark.parametrize("name", ["exponential_50", "pareto_200"])
def test_sampling_frequencies_match(rng, name):
    w = rng.exponential(size=50) if name == "exponential_50" else rng.pareto(1.1, size=200)
    draws = CumulativeTable.from_weights(w).sample(rng, 400_000)
    observed = np.bincount(draws, minlength=w.size)
    expected = draws.size * w / w.sum()
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    # Negative control: the same draws against weights with two entries swapped.
    swapped = w.copy()
    top, bottom = np.argmax(w), np.argmin(w)
    swapped[[top, bottom]] = swapped[[bottom, top]]
    assert stats.chisquare(observed, draws.size * swapped / swapped.sum()).pvalue < 1e-8


def test_sampling_is_reproducible_and_vectorised():
    table = CumulativeTable.from_weights(np.arange(1.0, 11.0))
    a = table.sample(np.random.default_rng(3), 1000)
    b = table.sample(np.random.default_rng(3), 1000)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (1000,) and a.dtype == np.int64
    assert table.sample(np.random.default_rng(3), 0).shape == (0,)


@pytest.mark.parametrize(
    "weights",
    [np.array([]), np.ones((2, 2)), np.array([1.0, -1.0]), np.array([np.nan, 1.0]), np.zeros(3)],
)
def test_bad_weights_are_refused(weights):
    with pytest.raises(ValueError, match="weights"):
        CumulativeTable.from_weights(weights)


def test_sorted_uniforms_are_the_order_statistics_of_uniforms(rng):
    """Pooled values are uniform, each batch is sorted, and the k-th smallest of B follows
    Beta(k, B + 1 - k), the law of the k-th order statistic of B uniforms."""
    batches = np.array([sorted_uniforms(rng, 9) for _ in range(20_000)])
    assert np.all(np.diff(batches, axis=1) >= 0) and np.all((batches >= 0) & (batches <= 1))
    assert stats.kstest(batches.ravel(), "uniform").pvalue > 1e-3
    for k in (1, 5, 9):
        assert stats.kstest(batches[:, k - 1], stats.beta(k, 10 - k).cdf).pvalue > 1e-3
    # Negative control: sorting B uniforms drawn from [0, 0.98) is visibly off.
    wrong = np.sort(0.98 * rng.random((20_000, 9)), axis=1)
    assert stats.kstest(wrong[:, 8], stats.beta(9, 1).cdf).pvalue < 1e-8
    assert sorted_uniforms(rng, 0).shape == (0,)


def test_draws_come_in_increasing_order(rng):
    draws = CumulativeTable.from_weights(rng.pareto(1.1, size=5_000)).sample(rng, 3_000)
    assert np.all(np.diff(draws) >= 0)
