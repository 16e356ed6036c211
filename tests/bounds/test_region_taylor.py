"""FlyMC's Taylor bounds on a trust region for the Beta, zero-inflated and hurdle Poisson
likelihoods (fixed and free second parameter): first and second derivatives against
finite differences, the bound below every row's likelihood on the region with extreme
rows (|x| = 12, observations near 0 and 1, zeros with large Poisson means, large counts),
tight at the MAP, its collapsed sum and gradients consistent; negative controls."""

import numpy as np
import pytest
from bound_checks import (
    assert_below_and_tight,
    assert_dropped_rows_consistent,
    assert_gradients_match,
)
from finite_differences import channel_low_derivatives, channel_third_derivatives
from region_models import laplace_setup, region_model
from region_points import points_in_region

from pymc_minibatch_mh.bounds import region_taylor
from pymc_minibatch_mh.bounds.location_scale_curvature import (
    location_scale_derivatives,
    location_scale_third_derivatives,
)
from pymc_minibatch_mh.bounds.region_taylor import CHANNEL_DERIVATIVES, map_tuned_region_taylor
from pymc_minibatch_mh.bounds.taylor_remainder import student_t_scale_constants
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.likelihood.glm_likelihoods import family_loglik

N = 400
SECOND = {"beta_logit": "nu", "zip_log": "odds", "hurdle_poisson_log": "odds"}


@pytest.mark.parametrize("family", list(CHANNEL_DERIVATIVES))
def test_derivatives_match_finite_differences(family, rng):
    """At random points and observations the closed-form gradient and Hessian in
    ``(eta, t)`` agree with central differences of the log-likelihood to 1e-5; the same
    formulas at a linear predictor off by 0.05 do not (negative control)."""
    worst, shifted = 0.0, 0.0
    for _ in range(200):
        eta, t = rng.uniform(-4.0, 3.0), rng.uniform(-3.0, 3.0)
        if family == "beta_logit":
            y = rng.uniform(1e-3, 1.0 - 1e-3)
        else:
            y = float(rng.choice([0, 0, 1, 3, 12]))

        def loglik(e, tt, y=y):
            params = {SECOND[family]: np.array([np.exp(tt)])}
            return float(family_loglik(family, np.array([e]), np.array([y]), params)[0])

        numeric = channel_low_derivatives(loglik, eta, t)
        exact = np.array(
            [float(np.ravel(v)[0]) for v in CHANNEL_DERIVATIVES[family](np.array([y]), eta, t)]
        )
        scale = 1.0 + np.abs(exact)
        worst = max(worst, float(np.max(np.abs(numeric - exact) / scale)))
        wrong = np.array(
            [
                float(np.ravel(v)[0])
                for v in CHANNEL_DERIVATIVES[family](np.array([y]), eta + 0.05, t)
            ]
        )
        shifted = max(shifted, float(np.max(np.abs(numeric - wrong) / scale)))
    assert worst < 1e-5
    assert shifted > 1e-3


@pytest.mark.parametrize("family", ["normal", "student_t"])
def test_location_scale_derivatives_and_third_derivative_bounds(family, rng):
    """Normal and Student-t (nu = 3) in ``(eta, s = log sigma)``: first and second
    derivatives against central differences; third derivatives within their bounds on
    random boxes of the residual and ``s`` (up to the differences' error), attained within a
    factor 3 somewhere, and a bound a tenth as large is violated (negative control)."""
    nu = 3.0
    constants = student_t_scale_constants(nu) if family == "student_t" else None

    def loglik(eta, s, y):
        u = (y - eta) * np.exp(-s)
        if family == "normal":
            return -s - 0.5 * u * u
        return -s - 0.5 * (nu + 1.0) * np.log1p(u * u / nu)

    worst_low, worst, ratios = 0.0, 0.0, []
    for _ in range(150):
        y, s_lo = rng.normal(), rng.uniform(-2.0, 1.0)
        r_max = rng.uniform(0.1, 6.0)
        bound = np.array(
            [
                float(np.ravel(b)[0])
                for b in location_scale_third_derivatives(
                    family, np.array([r_max]), np.array([s_lo]), constants
                )
            ]
        )
        for _ in range(4):
            eta, s = y - rng.uniform(-r_max, r_max), s_lo + rng.uniform(0.0, 1.5)
            exact = np.array([float(v) for v in location_scale_derivatives(family, nu, y, eta, s)])
            numeric = channel_low_derivatives(lambda e, t, y=y: loglik(e, t, y), eta, s)
            worst_low = max(worst_low, float(np.max(np.abs(numeric - exact) / (1 + np.abs(exact)))))
            third = np.abs(channel_third_derivatives(lambda e, t, y=y: loglik(e, t, y), eta, s))
            scale = 1.0 + np.max(third)  # the differences' error scales with the largest
            ratio = np.maximum(third - 1e-4 * scale, 0.0) / np.maximum(bound, 1e-300)
            worst = max(worst, float(np.max(ratio)))
            ratios.append(float(np.max(third / np.maximum(0.1 * bound, 1e-300))))
    assert worst_low < 1e-5
    assert 1.0 / 3.0 < worst <= 1.0
    assert max(ratios) > 1.0


#: The region models (:mod:`region_models`, extreme rows included) this bound serves, with
#: the family and whether the second parameter is fixed, free, or one per row.
KINDS = {
    "beta_fixed_precision": ("beta_logit", False),
    "beta_free_precision": ("beta_logit", True),
    "zip_fixed_psi": ("zip_log", False),
    "zip_free_psi": ("zip_log", True),
    "hurdle_fixed_psi": ("hurdle_poisson_log", False),
    "hurdle_free_psi": ("hurdle_poisson_log", True),
    "normal_row_scale": ("normal", "rows"),
    "student_t_row_scale": ("student_t", "rows"),
}


@pytest.fixture(scope="module", params=list(KINDS))
def case(request):
    family, free = KINDS[request.param]
    lp, q_map, region = laplace_setup(*region_model(request.param))
    assert lp.family == family
    assert (lp.row_scales, lp.free_scale) == ((True, False) if free == "rows" else (False, free))
    return lp, q_map, region


def test_bound_is_below_every_likelihood_on_the_region_and_tight_at_the_map(case, rng):
    lp, q_map, region = case
    bound = map_tuned_region_taylor(lp, q_map, region)
    assert_below_and_tight(bound, lp, q_map, region, rng)
    assert bound.region is region and bound.unbounded_rows.size == 0


def test_gradients_match_finite_differences(case, rng):
    lp, q_map, region = case
    bound = map_tuned_region_taylor(lp, q_map, region)
    assert_gradients_match(bound, region, rng, np.array([0, 3, 5, 17, 200]))


def test_negative_control_without_third_derivatives_the_bound_is_violated(case, rng, monkeypatch):
    """The bare second-order Taylor expansion (third-derivative bounds set to 0) rises above
    some row's likelihood on the region: the check above has power."""
    lp, q_map, region = case

    def no_third_derivatives(*args, **kwargs):
        return (np.zeros(lp.n_data),) * 4

    monkeypatch.setattr(region_taylor, "region_third_derivatives", no_third_derivatives)
    monkeypatch.setattr(region_taylor, "location_scale_third_derivatives", no_third_derivatives)
    bare = map_tuned_region_taylor(lp, q_map, region)
    violated = any(
        np.any(bare.log_bound(q) > lp.loglik(q) + 1e-9)
        for q in points_in_region(rng, region, fractions=(0.7, 1.0), n_points=100)
    )
    assert violated


def test_rows_without_a_bound_leave_a_consistent_sum(case, rng):
    """Dropping rows (their bound becomes -inf): the collapsed sum and its gradient are
    those of the other rows, the dropped rows' weighted gradient is 0."""
    lp, q_map, region = case
    bound = map_tuned_region_taylor(lp, q_map, region)
    dropped = np.array([0, 1, 4, 9, 250])
    np.testing.assert_array_equal(bound.without_bounds_on(dropped).unbounded_rows, dropped)
    assert_dropped_rows_consistent(bound, lp, region, rng, dropped)


def test_rows_whose_bound_overflows_get_none():
    """On a region far too large for the |x| = 12 rows (exp of their linear predictor
    overflows in the third-derivative bounds) those rows get no bound instead of the whole
    bound being refused; the others' bounds still hold."""
    lp, q_map, region = laplace_setup(*region_model("zip_free_psi"))
    huge = TrustRegion(q_map, region.chol, 60.0 * region.radius)
    bound = map_tuned_region_taylor(lp, q_map, huge)
    rows = bound.unbounded_rows
    assert rows.size and set(rows) <= {0, 2}, rows  # x = 12 and 6
    kept = np.setdiff1d(np.arange(lp.n_data), rows)
    for q in points_in_region(np.random.default_rng(3), region, fractions=(0.5,), n_points=20):
        assert np.all(lp.loglik(q)[kept] >= bound.log_bound(q, kept) - 1e-9)
