"""FlyMC's Poisson-log bound: below the likelihood on its trust region, tight at the MAP."""

import numpy as np
import pytest
from region_points import points_in_region
from scipy import special

from pymc_minibatch_mh.bounds.trust_region import TrustRegion, default_radius
from pymc_minibatch_mh.families.poisson_log import map_tuned_poisson_log

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


def test_secant_factor_matches_its_integral_and_increases():
    from scipy import integrate

    from pymc_minibatch_mh.bounds.exp_tangent import exp_secant_factor

    h = np.array([-3.0, -1e-4, 0.0, 1e-5, 5e-4, 0.2, 2.0, 8.0])
    integral = [integrate.quad(lambda t, d=d: (1 - t) * np.exp(t * d), 0, 1)[0] for d in h]
    np.testing.assert_allclose(exp_secant_factor(h), integral, rtol=1e-9)
    grid = np.linspace(-5, 5, 2001)
    assert np.all(np.diff(exp_secant_factor(grid)) > 0)
    assert exp_secant_factor(np.array([800.0]))[0] == np.inf


def test_each_row_bound_touches_the_likelihood_at_the_top_of_its_interval(case):
    """Along eta the curvature is the least one that holds: the per-row bound meets the
    likelihood at ``eta_hi`` and lies below it on the interval; 1 % less curvature
    (negative control) crosses it."""
    x, y, q_map, region = case
    bound = map_tuned_poisson_log(x, 0.0, y, q_map, region)
    anchor = x @ q_map
    eta_high = anchor + region.radius * np.linalg.norm(x @ region.chol, axis=1)
    rows = np.arange(0, N, 50)
    for n in rows:
        eta = np.linspace(anchor[n] - 3.0, eta_high[n], 400)
        f = y[n] * eta - np.exp(eta) - special.gammaln(y[n] + 1)
        tangent = (
            y[n] * anchor[n]
            - np.exp(anchor[n])
            - special.gammaln(y[n] + 1)
            + (y[n] - np.exp(anchor[n])) * (eta - anchor[n])
        )
        curv = bound.curvature[n]
        lower = tangent + curv * (eta - anchor[n]) ** 2
        assert np.all(f - lower >= -1e-9 * np.maximum(1.0, np.abs(f)))
        assert abs(f[-1] - lower[-1]) <= 1e-7 * max(1.0, abs(f[-1]))
        looser = tangent + 0.99 * curv * (eta - anchor[n]) ** 2
        assert f[-1] - looser[-1] < 0
