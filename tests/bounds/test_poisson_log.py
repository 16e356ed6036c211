"""FlyMC's Poisson-log bound: below the likelihood on its trust region, tight at the MAP."""

import numpy as np
import pytest
from region_points import points_in_region
from scipy import special

from pymc_minibatch_mh.bounds.poisson_log import map_tuned_poisson_log
from pymc_minibatch_mh.bounds.trust_region import TrustRegion, default_radius

N = 500


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(12)
    x = np.column_stack([np.ones(N), rng.normal(size=N)])
    y = rng.poisson(np.exp(x @ np.array([0.3, 0.6]))).astype(float)
    # MAP (flat prior) by Newton's method, and the Laplace covariance there.
    q = np.zeros(2)
    for _ in range(50):
        rate = np.exp(x @ q)
        hess = x.T @ (x * rate[:, None])
        q = q + np.linalg.solve(hess, x.T @ (y - rate))
    chol = np.linalg.cholesky(np.linalg.inv(x.T @ (x * np.exp(x @ q)[:, None])))
    region = TrustRegion(q, chol, default_radius(2))
    return x, y, q, region


def _loglik(x, y, q):
    eta = x @ q
    return y * eta - np.exp(eta) - special.gammaln(y + 1)


def _points(rng, region, fractions, n=200):
    return points_in_region(rng, region, fractions, n)


def test_bound_is_below_every_likelihood_on_the_region_and_tight_at_the_map(case, rng):
    x, y, q_map, region = case
    bound = map_tuned_poisson_log(x, 0.0, y, q_map, region)
    np.testing.assert_allclose(bound.log_bound(q_map), _loglik(x, y, q_map), rtol=1e-12)
    worst = -np.inf
    for q in _points(rng, region, fractions=(0.1, 0.5, 0.9, 1.0)):
        gap = _loglik(x, y, q) - bound.log_bound(q)
        worst = max(worst, -float(gap.min()))
        np.testing.assert_allclose(bound.log_bound_sum(q), bound.log_bound(q).sum(), rtol=1e-9)
    assert worst <= 1e-9
    assert bound.region is region


def test_negative_control_the_bound_fails_far_outside_the_region(case):
    """Along a direction that raises eta, far beyond the region, the curvature used is
    too small and the bound rises above the likelihood."""
    x, y, q_map, region = case
    bound = map_tuned_poisson_log(x, 0.0, y, q_map, region)
    far = q_map + np.array([6.0, 6.0])
    assert not region.contains(far)
    assert np.any(bound.log_bound(far) > _loglik(x, y, far))
