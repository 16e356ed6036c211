"""FlyMC's global bound of the zero-inflated and hurdle negative binomial: below every
row's likelihood everywhere (points far outside any trust region, rows with |x| = 12,
zeros where the mean is large, a count of 60), touching it at the MAP, its collapsed sum,
gradients and Hessian consistent with the rows'; a hurdle's zeros exact; negative
controls (a halved Jaakkola-Jordan curvature, a tangent with the wrong slope)."""

from dataclasses import replace

import numpy as np
import pytest
from bound_checks import (
    assert_below_and_tight,
    assert_dropped_rows_consistent,
    assert_gradients_match,
)
from finite_differences import numeric_hessian
from region_models import laplace_setup, region_model

from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.bounds.negative_binomial import negative_binomial_bound
from pymc_minibatch_mh.bounds.trust_region import TrustRegion

KINDS = ("zinb_free", "zinb_fixed_alpha", "hurdle_nb_free", "hurdle_nb_fixed_psi")
#: Points are drawn out to this many times the default trust region's radius.
FAR = 4.0


@pytest.fixture(scope="module", params=KINDS)
def case(request):
    lp, q_map, region = laplace_setup(*region_model(request.param))
    return lp, q_map, TrustRegion(q_map, region.chol, FAR * region.radius)


def _far_points(rng, centre, n=150):
    """Points near the MAP and far from it (scales 1e-3 to 3 in every coordinate)."""
    scales = rng.choice([1e-3, 0.05, 0.5, 3.0], size=(n, 1))
    return centre + scales * rng.normal(size=(n, centre.size))


def _worst_violation(bound, lp, points) -> float:
    worst = -np.inf
    for q in points:
        rows = bound.log_bound(q)
        kept = np.isfinite(rows)
        worst = max(worst, -float(np.min(lp.loglik(q)[kept] - rows[kept])))
    return worst


def test_bound_is_below_every_likelihood_everywhere_and_tight_at_the_map(case, rng):
    lp, q_map, far = case
    bound = negative_binomial_bound(lp, q_map, q_map)
    assert bound.region is None  # global: no trust region
    assert bound.unbounded_rows.size == 0
    assert_below_and_tight(bound, lp, q_map, far, rng)
    assert _worst_violation(bound, lp, _far_points(rng, q_map)) <= 1e-9


def test_untuned_bound_is_below_every_likelihood_everywhere(case, rng):
    """Anchored at another point with ``xi = 1.5``: still below everywhere."""
    lp, q_map, _ = case
    start = q_map + 0.3
    bound = negative_binomial_bound(lp, None, start)
    assert not bound.tuned
    assert _worst_violation(bound, lp, _far_points(rng, q_map)) <= 1e-9


def test_gradients_and_hessian_match_finite_differences(case, rng):
    lp, q_map, far = case
    bound = negative_binomial_bound(lp, q_map, q_map)
    assert_gradients_match(bound, far, rng, np.array([0, 1, 4, 6, 17, 200, 301]))
    numeric = numeric_hessian(bound.log_bound_sum, q_map)
    np.testing.assert_allclose(bound.collapsed.hessian, numeric, rtol=1e-4, atol=1e-3)


def test_rows_without_a_bound_leave_a_consistent_sum(case, rng):
    lp, q_map, far = case
    bound = negative_binomial_bound(lp, q_map, q_map)
    assert_dropped_rows_consistent(bound, lp, far, rng, np.array([0, 1, 4, 9, 250]))


def test_a_hurdle_zero_is_summed_exactly(rng):
    """A hurdle's zero depends on psi alone: its bound is its likelihood everywhere."""
    lp, q_map, _ = laplace_setup(*region_model("hurdle_nb_free"))
    bound = negative_binomial_bound(lp, q_map, q_map)
    zeros = np.flatnonzero(lp.observed == 0)
    for q in _far_points(rng, q_map, n=20):
        np.testing.assert_allclose(bound.log_bound(q, zeros), lp.loglik(q, zeros), rtol=1e-12)


@pytest.mark.parametrize("control", ["halved_curvature", "wrong_tangent"])
def test_negative_control_a_loosened_bound_rises_above_the_likelihood(case, rng, control):
    """Halving each row's Jaakkola-Jordan curvature, or dropping the tangents' slope in
    ``u`` (hurdle counts, zero-inflated zeros), makes some row's bound exceed its likelihood:
    the checks above have power."""
    lp, q_map, _ = case
    bound = negative_binomial_bound(lp, q_map, q_map)
    if control == "halved_curvature":
        wrong = replace(bound, jj_lambda=0.5 * bound.jj_lambda)
    else:
        # The tangents' rows: a hurdle's counts (weight 1 + h'), a zero-inflated zero's
        # (weight sigmoid(s0)); without the tangent's slope the weight is 1 or 0.
        tangent_rows = (bound.weight != 1.0) & (bound.weight != 0.0)
        assert tangent_rows.any()
        without_slope = 1.0 if bound.family == "hurdle_nb_log" else 0.0
        wrong = replace(bound, weight=np.where(tangent_rows, without_slope, bound.weight))
    assert _worst_violation(wrong, lp, _far_points(rng, q_map)) > 1e-6


def test_non_count_observations_are_refused(case):
    lp, q_map, _ = case
    bad = replace(lp, observed=np.where(np.arange(lp.n_data) == 3, 2.5, lp.observed))
    with pytest.raises(UnsupportedBound, match="non-negative integers"):
        negative_binomial_bound(bad, q_map, q_map)


def test_an_overflowing_dispersion_gives_minus_infinity_not_an_error():
    lp, q_map, _ = laplace_setup(*region_model("zinb_free"))
    bound = negative_binomial_bound(lp, q_map, q_map)
    far = q_map + 800.0 * bound.scale_row
    assert bound.log_bound_sum(far) == -np.inf
    assert np.all(np.isneginf(bound.log_bound(far)[lp.observed > 0]))
