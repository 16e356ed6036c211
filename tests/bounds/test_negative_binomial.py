"""FlyMC's negative binomial bound: below every likelihood everywhere, tight at the MAP,
collapsed sums and gradients equal to their explicit forms; fixed and free dispersion."""

from dataclasses import replace

import numpy as np
import pytest

from pymc_minibatch_mh.bounds.negative_binomial import negative_binomial_bound
from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood

N = 400


@pytest.fixture(scope="module", params=["free", "fixed", "fixed_per_datum"])
def case(request):
    """(likelihood, a point playing the MAP): counts with mean exp(0.5 + 0.4 x1 - 0.3 x2),
    dispersion 2 (free: log alpha is the last coordinate of q)."""
    rng = np.random.default_rng(31)
    x = np.column_stack([np.ones(N), rng.normal(size=(N, 2))])
    mu = np.exp(x @ np.array([0.5, 0.4, -0.3]))
    y = rng.negative_binomial(2.0, 2.0 / (2.0 + mu)).astype(float)
    y[:3] = [0.0, 40.0, 250.0]  # a zero and large counts
    if request.param == "free":
        design = np.column_stack([x, np.zeros(N)])
        lp = LinearPredictorLikelihood(
            "negative_binomial",
            design,
            np.zeros(N),
            y,
            {},
            scale_row=np.array([0.0, 0.0, 0.0, 1.0]),
            scale_offset=0.2,
        )
        return lp, np.array([0.5, 0.4, -0.3, np.log(2.0) - 0.2])
    alpha = 2.0 if request.param == "fixed" else rng.uniform(0.5, 5.0, size=N)
    lp = LinearPredictorLikelihood("negative_binomial", x, np.full(N, 0.1), y, {"alpha": alpha})
    return lp, np.array([0.4, 0.4, -0.3])


def _points(rng, centre, n=150):
    """Points near the anchor and far from it (scales 1e-3 to 3 in every coordinate)."""
    scales = rng.choice([1e-3, 0.05, 0.5, 3.0], size=(n, 1))
    return centre + scales * rng.normal(size=(n, centre.size))


@pytest.mark.parametrize("tuned", [True, False])
def test_bound_is_below_every_likelihood_everywhere_and_tight_at_the_map(case, rng, tuned):
    lp, q_map = case
    bound = negative_binomial_bound(lp, q_map if tuned else None, q_map)
    assert bound.region is None  # global
    if tuned:
        np.testing.assert_allclose(bound.log_bound(q_map), lp.loglik(q_map), rtol=1e-11)
    worst = -np.inf
    for q in _points(rng, q_map):
        gap = lp.loglik(q) - bound.log_bound(q)
        worst = max(worst, -float(gap.min()))
        explicit = bound.log_bound(q).sum()
        np.testing.assert_allclose(bound.log_bound_sum(q), explicit, rtol=1e-9, atol=1e-6)
    assert worst <= 1e-9


def test_gradients_equal_finite_differences(case, rng):
    lp, q_map = case
    bound = negative_binomial_bound(lp, q_map, q_map)
    eps = 1e-6
    basis = np.eye(q_map.size)
    for q in _points(rng, q_map, n=10):
        numeric = [
            (bound.log_bound_sum(q + eps * e) - bound.log_bound_sum(q - eps * e)) / (2 * eps)
            for e in basis
        ]
        np.testing.assert_allclose(bound.log_bound_sum_grad(q), numeric, rtol=1e-5, atol=1e-4)
        idx, weights = rng.choice(N, size=25), rng.random(25)
        numeric = [
            weights
            @ (bound.log_bound(q + eps * e, idx) - bound.log_bound(q - eps * e, idx))
            / (2 * eps)
            for e in basis
        ]
        np.testing.assert_allclose(
            bound.log_bound_weighted_grad(q, idx, weights), numeric, rtol=1e-5, atol=1e-5
        )


def test_negative_control_a_halved_curvature_rises_above_the_likelihood(case, rng):
    """With the Jaakkola-Jordan curvature halved the quadratic no longer stays below
    log sigmoid, and the check above must see it."""
    lp, q_map = case
    bound = negative_binomial_bound(lp, q_map, q_map)
    bad = replace(bound, jj_lambda=0.5 * bound.jj_lambda)
    violations = [float(np.max(bad.log_bound(q) - lp.loglik(q))) for q in _points(rng, q_map, n=50)]
    assert max(violations) > 1e-3


def test_non_count_observations_are_refused():
    lp = LinearPredictorLikelihood(
        "negative_binomial", np.ones((3, 1)), np.zeros(3), np.array([0.0, 1.5, 2.0]), {"alpha": 1.0}
    )
    with pytest.raises(ValueError, match="non-negative integers"):
        negative_binomial_bound(lp, np.zeros(1), np.zeros(1))


def test_an_overflowing_dispersion_gives_minus_infinity_not_an_error(case):
    """A wild proposal with log alpha beyond exp's range: the (valid) bound is -inf."""
    lp, q_map = case
    if lp.scale_row is None:
        pytest.skip("fixed dispersion")
    bound = negative_binomial_bound(lp, q_map, q_map)
    far = q_map + 1000.0 * np.asarray(lp.scale_row)
    assert bound.log_bound_sum(far) == -np.inf
    assert bound.log_bound_sum_grad(far).shape == q_map.shape  # no OverflowError


@pytest.mark.parametrize("tuned", [True, False])
def test_rows_without_a_bound_leave_a_consistent_sum(case, rng, tuned):
    """Dropping rows (a zero, the large counts, ordinary ones): their log-bound is -inf
    and their weighted gradient 0, the collapsed sum and its gradient are those of the
    other rows, and those rows' bounds are unchanged (the same ``xi``)."""
    lp, q_map = case
    bound = negative_binomial_bound(lp, q_map if tuned else None, q_map)
    dropped = np.array([0, 1, 2, 17, 399])
    fewer = bound.without_bounds_on(dropped)
    np.testing.assert_array_equal(fewer.unbounded_rows, dropped)
    kept = np.setdiff1d(np.arange(N), dropped)
    for q in _points(rng, q_map, n=20):
        assert np.all(np.isneginf(fewer.log_bound(q, dropped)))
        np.testing.assert_array_equal(fewer.log_bound(q, kept), bound.log_bound(q, kept))
        explicit = bound.log_bound(q, kept).sum()
        np.testing.assert_allclose(fewer.log_bound_sum(q), explicit, rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(
            fewer.log_bound_sum_grad(q),
            bound.log_bound_weighted_grad(q, kept, np.ones(kept.size)),
            rtol=1e-7,
            atol=1e-6,
        )
        assert not np.any(fewer.log_bound_weighted_grad(q, dropped, np.ones(dropped.size)))
    # Control: the whole sum differs from the kept rows' by the dropped rows' terms.
    q = q_map + 0.05
    assert abs(bound.log_bound_sum(q) - fewer.log_bound_sum(q)) > 1.0
