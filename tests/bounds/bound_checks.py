"""Checks every FlyMC bound on a trust region must pass, shared by the bound tests here:
below each row's likelihood on the region and touching it at the MAP, its collapsed sum
and gradients consistent with the rows', and rows dropped from it leaving a consistent
sum."""

import numpy as np
from region_points import points_in_region


def assert_below_and_tight(bound, lp, q_map, region, rng) -> float:
    """The bound touches every row's likelihood at ``q_map`` and stays below it at points
    spread over the region (rows without a bound left out), its collapsed sum is the sum
    of the rows', and the summed gap shrinks like the squared distance from the MAP (a
    wrong slope would make it shrink like the distance). Returns the worst violation."""
    kept = np.setdiff1d(np.arange(lp.n_data), bound.unbounded_rows)
    np.testing.assert_allclose(
        bound.log_bound(q_map, kept), lp.loglik(q_map)[kept], rtol=1e-10, atol=1e-10
    )
    worst = -np.inf
    for q in points_in_region(rng, region, fractions=(0.05, 0.3, 0.7, 1.0), n_points=100):
        rows = bound.log_bound(q, kept)
        worst = max(worst, -float(np.min(lp.loglik(q)[kept] - rows)))
        np.testing.assert_allclose(bound.log_bound_sum(q), rows.sum(), rtol=1e-9)
    print(f"{lp.family}: worst violation {worst:.3g}, {bound.unbounded_rows.size} unbounded")
    assert worst <= 1e-9

    def summed_gap(r):
        q = q_map + r * region.chol @ np.ones(q_map.size) / np.sqrt(q_map.size)
        return float(np.sum(lp.loglik(q)[kept] - bound.log_bound(q, kept)))

    assert 0.0 <= summed_gap(0.05) <= 1.5 * summed_gap(0.5) / 100.0
    return worst


def assert_gradients_match(bound, region, rng, idx) -> None:
    """The collapsed sum's gradient and the rows' weighted gradient against central
    differences at a point of the region."""
    q = next(points_in_region(rng, region, fractions=(0.5,), n_points=1))
    weights = rng.uniform(0.5, 2.0, idx.size)
    h = 1e-6
    eye = np.eye(q.size)
    numeric_sum = [
        (bound.log_bound_sum(q + h * e) - bound.log_bound_sum(q - h * e)) / (2 * h) for e in eye
    ]
    numeric_rows = [
        float(weights @ (bound.log_bound(q + h * e, idx) - bound.log_bound(q - h * e, idx)))
        / (2 * h)
        for e in eye
    ]
    # Central differences of a sum of N quadratics lose digits in proportion to its size.
    tolerance = 1e-7 * float(np.max(np.abs(numeric_sum))) + 1e-4
    np.testing.assert_allclose(bound.log_bound_sum_grad(q), numeric_sum, rtol=1e-5, atol=tolerance)
    np.testing.assert_allclose(
        bound.log_bound_weighted_grad(q, idx, weights),
        numeric_rows,
        rtol=1e-5,
        atol=1e-7 * float(np.max(np.abs(numeric_rows))) + 1e-6,
    )


def assert_dropped_rows_consistent(bound, lp, region, rng, dropped) -> None:
    """Rows dropped from the bound get ``log B = -inf`` and a zero weighted gradient; the
    collapsed sum and its gradient are those of the other rows."""
    fewer = bound.without_bounds_on(dropped)
    assert set(dropped) <= set(fewer.unbounded_rows)
    kept = np.setdiff1d(np.arange(lp.n_data), fewer.unbounded_rows)
    for q in points_in_region(rng, region, fractions=(0.3, 0.9), n_points=5):
        assert np.all(np.isneginf(fewer.log_bound(q, dropped)))
        np.testing.assert_array_equal(fewer.log_bound(q, kept), bound.log_bound(q, kept))
        np.testing.assert_allclose(
            fewer.log_bound_sum(q), bound.log_bound(q, kept).sum(), rtol=1e-9, atol=1e-9
        )
        np.testing.assert_allclose(
            fewer.log_bound_sum_grad(q),
            bound.log_bound_weighted_grad(q, kept, np.ones(kept.size)),
            rtol=1e-8,
            atol=1e-8,
        )
        assert not np.any(fewer.log_bound_weighted_grad(q, dropped, np.ones(dropped.size)))
