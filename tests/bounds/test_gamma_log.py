"""FlyMC's Gamma-log bounds (fixed and free shape): below the likelihood on the trust
region, tight at the MAP, with extreme rows (tiny and outlying observations, |x| = 12)."""

from dataclasses import replace

import numpy as np
import pymc as pm
import pytest
from region_models import laplace_setup
from region_points import points_in_region

from pymc_minibatch_mh.families.gamma_log import _gamma_j, map_tuned_gamma_log

N = 400


@pytest.fixture(scope="module", params=["fixed_shape", "free_shape"])
def case(request):
    rng = np.random.default_rng(41)
    x = rng.normal(size=N)
    x[:4] = [12.0, -12.0, 6.0, -6.0]
    y = rng.gamma(3.0, np.exp(0.4 - 0.3 * x) / 3.0)
    y[4:8] = [1e-6, 1e-3, 30.0 * np.exp(0.4), 200.0]
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3)
        shape = pm.Exponential("shape", 0.5) if request.param == "free_shape" else 3.0
        pm.Gamma("y", alpha=shape, beta=shape / pm.math.exp(a + b * x), observed=y)
        map_point = pm.find_MAP(progressbar=False)
    lp, q_map, region = laplace_setup(model, map_point)
    return request.param, lp, q_map, region


def test_bound_is_below_every_likelihood_on_the_region_and_tight_at_the_map(case, rng):
    kind, lp, q_map, region = case
    assert lp.family == "gamma_log" and lp.free_scale == (kind == "free_shape")
    bound = map_tuned_gamma_log(lp, q_map, region)
    np.testing.assert_allclose(bound.log_bound(q_map), lp.loglik(q_map), rtol=1e-10, atol=1e-10)
    worst, tightest = -np.inf, np.inf
    for q in points_in_region(rng, region, fractions=(0.05, 0.3, 0.7, 1.0), n_points=100):
        gap = lp.loglik(q) - bound.log_bound(q)
        worst = max(worst, -float(gap.min()))
        tightest = min(tightest, float(np.median(gap)))
        np.testing.assert_allclose(bound.log_bound_sum(q), bound.log_bound(q).sum(), rtol=1e-9)
    print(f"{kind}: worst violation {worst:.3g}, smallest median gap {tightest:.3g}")
    assert worst <= 1e-9
    assert bound.region is region


def test_negative_control_the_bound_fails_far_outside_the_region(case):
    """Far beyond the region, in a direction that lowers eta on most rows, the curvature
    used is too small and the bound rises above the likelihood."""
    _, lp, q_map, region = case
    bound = map_tuned_gamma_log(lp, q_map, region)
    far = q_map.copy()
    far[0] -= 8.0
    assert not region.contains(far)
    assert np.any(bound.log_bound(far) > lp.loglik(far))


def test_negative_control_half_the_curvature_is_violated_on_the_region(case, rng):
    """The same bound with half its curvature rises above the likelihood somewhere on the
    region: the check above has power."""
    kind, lp, q_map, region = case
    bound = map_tuned_gamma_log(lp, q_map, region)
    if kind == "fixed_shape":
        halved = replace(bound, curvature=0.5 * bound.curvature)
    else:
        halved = replace(
            bound,
            curvature_eta=0.5 * bound.curvature_eta,
            curvature_scale=0.5 * bound.curvature_scale,
        )
    violated = any(
        np.any(halved.log_bound(q) > lp.loglik(q) + 1e-9)
        for q in points_in_region(rng, region, fractions=(0.7, 1.0), n_points=100)
    )
    assert violated


def test_shape_constant_is_the_supremum_of_j():
    """J(alpha) = alpha (t + 1 - psi - alpha psi') is bounded: its grid supremum is at least
    every value on a finer grid."""
    from pymc_minibatch_mh.families.gamma_log import gamma_hessian_shape_constant

    t = np.linspace(-3.0, 5.0, 200_001)
    assert gamma_hessian_shape_constant(-3.0, 5.0) >= np.max(np.abs(_gamma_j(t)))
