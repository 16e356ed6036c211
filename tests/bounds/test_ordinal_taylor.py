"""FlyMC's bound for ordinal regressions (a Taylor expansion in the parameters at the MAP
with a cubic term from TunaMH's third-derivative constants): below every row's
likelihood on the trust region with extreme rows (|x| = 12 in the end categories and
against them), tight at the MAP, its collapsed sum and gradients consistent; negative
controls."""

import numpy as np
import pytest
from bound_checks import (
    assert_below_and_tight,
    assert_dropped_rows_consistent,
    assert_gradients_match,
)
from region_models import laplace_setup, region_model
from region_points import points_in_region

from pymc_minibatch_mh.bounds import ordinal_taylor
from pymc_minibatch_mh.bounds.ordinal_taylor import map_tuned_ordinal


@pytest.fixture(scope="module", params=["ordered_logistic", "ordered_probit"])
def case(request):
    lp, q_map, region = laplace_setup(*region_model(request.param))
    assert lp.family == request.param
    return lp, q_map, region


def test_bound_is_below_every_likelihood_on_the_region_and_tight_at_the_map(case, rng):
    lp, q_map, region = case
    bound = map_tuned_ordinal(lp, q_map, region)
    assert_below_and_tight(bound, lp, q_map, region, rng)
    assert bound.unbounded_rows.size == 0


def test_gradients_match_finite_differences(case, rng):
    lp, q_map, region = case
    bound = map_tuned_ordinal(lp, q_map, region)
    assert_gradients_match(bound, region, rng, np.array([0, 3, 5, 17, 200]))


def test_negative_control_without_the_cubic_term_the_bound_is_violated(case, rng, monkeypatch):
    """The bare second-order expansion (third-derivative constants 0) rises above some
    row's likelihood on the region: the check above has power."""
    lp, q_map, region = case
    monkeypatch.setattr(ordinal_taylor, "_RELATIVE_SLACK", -1.0)  # cubic term times 0
    bare = map_tuned_ordinal(lp, q_map, region)
    assert not np.any(bare.cubic)
    violated = any(
        np.any(bare.log_bound(q) > lp.loglik(q) + 1e-9)
        for q in points_in_region(rng, region, fractions=(0.7, 1.0), n_points=100)
    )
    assert violated


def test_rows_without_a_bound_leave_a_consistent_sum(case, rng):
    """Dropping rows: the collapsed sum and its gradient are those of the other rows, the
    dropped rows' weighted gradient is 0."""
    lp, q_map, region = case
    bound = map_tuned_ordinal(lp, q_map, region)
    assert_dropped_rows_consistent(bound, lp, region, rng, np.array([0, 1, 4, 9, 250]))
