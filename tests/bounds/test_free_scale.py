"""FlyMC's free-scale bounds (Normal, Student-t): below the likelihood on the trust region."""

import numpy as np
import pymc as pm
import pytest
from pymc.pytensorf import make_shared_replacements
from region_points import points_in_region

from pymc_minibatch_mh.bounds.free_scale import (
    FreeScaleQuadraticBound,
    map_tuned_free_scale,
    student_t_hessian_constants,
)
from pymc_minibatch_mh.bounds.trust_region import TrustRegion, default_radius
from pymc_minibatch_mh.likelihood import recognise_linear_predictor

N = 400


@pytest.fixture(scope="module", params=["normal", "student_t"])
def case(request):
    rng = np.random.default_rng(31)
    x = rng.normal(size=N)
    noise = rng.normal(size=N) if request.param == "normal" else rng.standard_t(3, size=N)
    y = 0.5 - 0.8 * x + 0.6 * noise
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3)
        sigma = pm.HalfNormal("sigma", 2)
        if request.param == "normal":
            pm.Normal("y", a + b * x, sigma, observed=y)
        else:
            pm.StudentT("y", nu=3, mu=a + b * x, sigma=sigma, observed=y)
        map_point = pm.find_MAP(progressbar=False)
    point = model.initial_point()
    shared = make_shared_replacements(point, model.value_vars, model)
    lp = recognise_linear_predictor(model, model.value_vars, shared=shared, initial_point=point)
    q_map = np.array([map_point["a"], map_point["b"], map_point["sigma_log__"]], dtype=float)
    # Laplace covariance from a finite-difference Hessian of the log-likelihood sum.
    h, eye = 1e-4, np.eye(3)

    def total(q):
        return float(lp.loglik(q).sum())

    hess = np.array(
        [
            [
                (
                    total(q_map + h * (eye[i] + eye[j]))
                    - total(q_map + h * (eye[i] - eye[j]))
                    - total(q_map - h * (eye[i] - eye[j]))
                    + total(q_map - h * (eye[i] + eye[j]))
                )
                / (4 * h * h)
                for j in range(3)
            ]
            for i in range(3)
        ]
    )
    chol = np.linalg.cholesky(np.linalg.inv(-hess))
    region = TrustRegion(q_map, chol, default_radius(3))
    return lp, q_map, region, map_tuned_free_scale(lp, q_map, region)


def _points(rng, region, fractions, n=100):
    return points_in_region(rng, region, fractions, n)


def test_bound_is_below_the_likelihood_on_the_region_and_tight_at_the_map(case, rng):
    lp, q_map, region, bound = case
    np.testing.assert_allclose(bound.log_bound(q_map), lp.loglik(q_map), rtol=1e-12)
    worst_gap = np.inf
    for q in _points(rng, region, fractions=(0.05, 0.3, 0.7, 1.0)):
        gap = lp.loglik(q) - bound.log_bound(q)
        worst_gap = min(worst_gap, float(gap.min()))
        np.testing.assert_allclose(bound.log_bound_sum(q), bound.log_bound(q).sum(), rtol=1e-9)
    assert worst_gap >= -1e-9


def test_weighted_gradient_matches_finite_differences(case, rng):
    _, q_map, region, bound = case
    idx = rng.choice(N, size=30, replace=False)
    weights = rng.normal(size=30)
    q = next(_points(rng, region, fractions=(0.5,), n=1))
    grad = bound.log_bound_weighted_grad(q, idx, weights)
    h = 1e-6
    numeric = [
        (weights @ bound.log_bound(q + h * e, idx) - weights @ bound.log_bound(q - h * e, idx))
        / (2 * h)
        for e in np.eye(q.size)
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        bound.log_bound_sum_grad(q),
        [
            (bound.log_bound_sum(q + h * e) - bound.log_bound_sum(q - h * e)) / (2 * h)
            for e in np.eye(q.size)
        ],
        rtol=1e-6,
        atol=1e-5,
    )


def test_negative_control_a_tenth_of_the_curvature_is_not_a_lower_bound(case, rng):
    lp, q_map, region, bound = case
    weak = FreeScaleQuadraticBound(
        bound.design,
        bound.scale_row,
        bound.centre,
        bound.value,
        bound.slope_eta,
        bound.slope_scale,
        0.1 * bound.curvature_eta,
        0.1 * bound.curvature_scale,
        bound.weight,
        bound.collapsed,
        region,
        bound.family,
    )
    assert any(
        np.any(weak.log_bound(q) > lp.loglik(q) + 1e-9)
        for q in _points(rng, region, fractions=(0.7, 1.0))
    )


def test_student_t_hessian_constants_against_finite_differences():
    nu = 3.0
    c1, c2, c3 = student_t_hessian_constants(nu)
    u = np.linspace(-60, 60, 120_001)

    def g1(v):
        return -(nu + 1) * v / (nu + v * v)

    h = 1e-5
    g2 = (g1(u + h) - g1(u - h)) / (2 * h)
    for numeric, bound in zip(
        (np.abs(g2), np.abs(g1(u) + u * g2), np.abs(u * g1(u) + u * u * g2)),
        (c1, c2, c3),
        strict=True,
    ):
        assert numeric.max() <= bound * (1 + 1e-6)
        assert numeric.max() >= bound / 1.01
