"""FlyMC's bound for ordinal regressions (a Taylor expansion in the parameters at the MAP
with a cubic term from TunaMH's third-derivative constants): below every row's
likelihood on the trust region with extreme rows (|x| = 12 in the end categories and
against them), tight at the MAP, its collapsed sum and gradients consistent; negative
controls."""

import numpy as np
import pymc as pm
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
from pymc_minibatch_mh.bounds.row_cells import CellRegion, likelihood_row_supports, row_cells_for
from pymc_minibatch_mh.bounds.trust_region import TrustRegion, default_radius


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


def _grouped_ordinal(family: str):
    """An ordinal regression with a slope and an effect per group (8 groups of 50 rows,
    the last group's effect under a diffuse prior with only the lowest category), extreme
    rows |x| = 12 against their categories, and its MAP."""
    rng = np.random.default_rng(5)
    n, groups = 400, 8
    group = np.repeat(np.arange(groups), n // groups)
    x = rng.normal(size=n)
    x[:4] = [12.0, -12.0, 12.0, -12.0]
    latent = 0.8 * x + rng.normal(0.0, 0.7, groups)[group]
    latent += rng.logistic(size=n) if family == "ordered_logistic" else rng.normal(size=n)
    y = np.searchsorted(np.array([-1.0, 0.2, 1.1]), latent)
    y[:4] = [3, 0, 0, 3]
    y[group == groups - 1] = 0
    with pm.Model() as model:
        b = pm.Normal("b", 0, 3)
        u = pm.Normal("u", 0, np.r_[np.full(groups - 1, 2.0), 30.0], shape=groups)
        cutpoints = pm.Normal(
            "cutpoints",
            mu=[-1.0, 0.0, 1.0],
            sigma=3.0,
            shape=3,
            transform=pm.distributions.transforms.ordered,
        )
        dist = pm.OrderedLogistic if family == "ordered_logistic" else pm.OrderedProbit
        dist("y", eta=b * x + u[group], cutpoints=cutpoints, observed=y)
        map_point = pm.find_MAP(progressbar=False)
    return model, map_point


def _points_in_cells(rng, region, fractions, n_points):
    """Points whose largest cell distance is ``fraction`` of that cell's radius."""
    for fraction in fractions:
        for _ in range(n_points):
            step = region.chol @ rng.standard_normal(region.centre.size)
            scale = np.max(region.distances(region.centre + step) / region.radii)
            yield region.centre + fraction * step / scale


@pytest.fixture(scope="module", params=["ordered_logistic", "ordered_probit"])
def cell_case(request):
    from finite_differences import numeric_hessian

    model, map_point = _grouped_ordinal(request.param)
    lp, q_map, _ = _likelihood_at(model, map_point)
    # The last effect's likelihood is flat: the Laplace fit with the priors' curvature
    # (1 / 3^2, 1 / 2^2 for the effects and 1 / 30^2 for the last; the cutpoints' as if
    # Normal(0, 3) on the transformed scale).
    prior = np.r_[1 / 9, np.full(7, 1 / 4), 1 / 900, np.full(3, 1 / 9)]
    hess = numeric_hessian(lambda q: float(lp.loglik(q).sum()), q_map) - np.diag(prior)
    chol = np.linalg.cholesky(np.linalg.inv(-hess))
    cells = row_cells_for(lp, q_map, chol, likelihood_row_supports(lp))
    assert cells is not None and cells.n_cells == 8
    margin = default_radius(q_map.size) - np.sqrt(q_map.size)
    return lp, q_map, CellRegion.around(cells, chol, margin)


def _likelihood_at(model, map_point):
    """``laplace_setup`` without its Laplace fit: the likelihood and the MAP vector."""
    from pymc.pytensorf import make_shared_replacements

    from pymc_minibatch_mh.likelihood import recognise_linear_predictor

    point = model.initial_point()
    shared = make_shared_replacements(point, model.value_vars, model)
    lp = recognise_linear_predictor(model, model.value_vars, shared=shared, initial_point=point)
    q_map = np.concatenate(
        [np.atleast_1d(map_point[v.name]).astype(float) for v in model.value_vars]
    )
    return lp, q_map, None


def test_with_row_cells_the_bound_is_below_every_likelihood_in_every_cell(cell_case, rng):
    """Each row's cubic term in its cell's own metric: below every row's likelihood at
    points reaching each cell's boundary, tight at the MAP, sums and gradients consistent;
    moving the last group's effect (which no other row reads) leaves the other rows'
    bounds unchanged. Control: the bare second-order expansion rises above some row."""
    lp, q_map, region = cell_case
    bound = map_tuned_ordinal(lp, q_map, region)
    assert bound.cells is region.cells
    kept = np.setdiff1d(np.arange(lp.n_data), bound.unbounded_rows)
    np.testing.assert_allclose(bound.log_bound(q_map, kept), lp.loglik(q_map)[kept], atol=1e-10)
    worst = -np.inf
    for q in _points_in_cells(rng, region, (0.3, 0.7, 1.0), 150):
        assert region.contains(q * (1 - 1e-12) + region.centre * 1e-12)
        rows = bound.log_bound(q, kept)
        worst = max(worst, -float(np.min(lp.loglik(q)[kept] - rows)))
        np.testing.assert_allclose(bound.log_bound_sum(q), rows.sum(), rtol=1e-9)
    assert worst <= 1e-9, worst
    assert_gradients_match(bound, region, rng, np.array([0, 3, 60, 200, 390]))
    # The last group's effect is coordinate 8 (b, then u[0..7]); its rows are 350-399.
    moved = q_map.copy()
    moved[8] += 50.0
    others = np.arange(350)
    np.testing.assert_array_equal(bound.log_bound(moved, others), bound.log_bound(q_map, others))


def test_negative_control_with_row_cells_the_bare_expansion_is_violated(
    cell_case, rng, monkeypatch
):
    lp, q_map, region = cell_case
    monkeypatch.setattr(ordinal_taylor, "_RELATIVE_SLACK", -1.0)
    bare = map_tuned_ordinal(lp, q_map, region)
    assert not np.any(bare.cubic)
    violated = any(
        np.any(bare.log_bound(q) > lp.loglik(q) + 1e-9)
        for q in _points_in_cells(rng, region, (0.7, 1.0), 150)
    )
    assert violated


def _mean_gaps(bound, lp, laplace, rng, n_draws: int = 200) -> np.ndarray:
    """Each row's ``log L_n - log B_n`` averaged over draws of the Laplace fit that fall in
    the bound's region (where the bound holds)."""
    total, kept = np.zeros(lp.n_data), 0
    for _ in range(n_draws):
        q = laplace.centre + laplace.chol @ rng.standard_normal(laplace.centre.size)
        if bound.region.contains(q):
            total += lp.loglik(q) - bound.log_bound(q)
            kept += 1
    assert kept > n_draws // 2
    return total / kept


def test_bright_gaps_bound_the_expected_gap_over_the_laplace_fit(case, rng):
    _assert_bright_gaps_bound_the_mean_gap(*case, rng)


def test_bright_gaps_in_row_cells_bound_the_expected_gap(cell_case, rng):
    _assert_bright_gaps_bound_the_mean_gap(*cell_case, rng)


def _assert_bright_gaps_bound_the_mean_gap(lp, q_map, region, rng) -> None:
    """FlyMC drops the bounds of rows whose ``bright_gaps`` exceed 2 nats (bright more than
    half the time): the estimate must bound each row's mean gap over the Laplace fit (up
    to Monte Carlo error) and not exceed it by more than the remainder's factor of 2 plus
    that error. Control: ``row_spreads``, the size of a row's term that the rule read
    before, is below the mean gap of the rows with the largest gaps (measured on the
    all-zero ordinal category of the quasi-separation tests: 1.0 against 2.9 nats for
    the middle level's rows), so it could not have told them apart."""
    laplace = TrustRegion(q_map, region.chol, 1.0)
    bound = map_tuned_ordinal(lp, q_map, region)
    estimate = bound.bright_gaps(laplace)
    mean_gap = _mean_gaps(bound, lp, laplace, rng)
    assert np.all(mean_gap >= -1e-9)
    assert np.all(estimate >= 0.8 * mean_gap - 1e-3)
    loose = mean_gap > np.quantile(mean_gap, 0.9)
    assert np.all(estimate[loose] <= 4.0 * mean_gap[loose] + 1e-3)
    spreads = bound.row_spreads(laplace)
    assert np.any(spreads[loose] < 0.8 * mean_gap[loose])
