"""Row cells: a metric per group of rows that touch the same coordinates (multilevel).

Checks: the per-cell bound ``c_i M_cell(i)`` holds for the Taylor remainders of a
multilevel logistic and Poisson model at random pairs of points (with a negative control
whose cells are whitened by a covariance a hundred times too small), it is far smaller than
the global metric's ``c_i M``, the cell table draws rows with probability ``b_i / B``, and
the cell trust region contains exactly the points inside every cell's ellipsoid.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import TunaMH
from pymc_minibatch_mh.bounds.row_cells import CellRegion, CellTable, RowCells
from pymc_minibatch_mh.kernels.tuna import PairBound

G, N = 12, 3000


def _model(family: str) -> pm.Model:
    rng = np.random.default_rng(5)
    group = rng.integers(0, G, size=N)
    x = rng.normal(size=N)
    effect = rng.normal(0, 0.8, size=G)
    eta = -0.2 + effect[group] + 0.5 * x
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        a = pm.Normal("a", 0, 1, shape=G)
        b = pm.Normal("b", 0, 1)
        if family == "bernoulli":
            y = (rng.random(N) < special.expit(eta)).astype(int)
            pm.Bernoulli("y", logit_p=mu + a[group] + b * x, observed=y)
        else:
            pm.Poisson(
                "y", mu=pm.math.exp(mu + a[group] + b * x), observed=rng.poisson(np.exp(eta))
            )
    return model


@pytest.fixture(scope="module", params=["bernoulli", "poisson"])
def step(request):
    with _model(request.param):
        return TunaMH(progressbar=False)


def _residual_diffs(step, q, q_new, rows):
    return np.abs(np.asarray(step.target.loglik_diff(q_new, q, rows), dtype=np.float64))


def _pairs(step, rng, count=40):
    """Pairs of points in the bound's region, up to 3 Laplace sds from the reference."""
    centre, chol = step.reference.reference, step._laplace_chol
    region = step.bound.region
    pairs = []
    while len(pairs) < count:
        q = centre + chol @ rng.normal(size=centre.size) * rng.uniform(0.2, 1.5)
        q_new = centre + chol @ rng.normal(size=centre.size) * rng.uniform(0.2, 1.5)
        if region is None or (region.contains(q) and region.contains(q_new)):
            pairs.append((q, q_new))
    return pairs


def test_the_step_groups_rows_into_cells(step):
    cells = step.bound.cells
    assert cells is not None and cells.n_cells == G
    # ``mu + a[group]`` with ``a ~ Normal(0, 1)`` is sampled as its centred twin
    # ``a' = mu + a``: a row touches b and its own group's a'
    assert step.centred_effects == ("a_centred <- a",)
    assert cells.width == 2
    assert isinstance(step.index_table, CellTable)
    if step._lp.family == "poisson_log":
        assert isinstance(step.bound.region, CellRegion)


def test_the_cell_bound_holds_and_is_tighter_than_the_global_one(step):
    rng = np.random.default_rng(0)
    rows = np.arange(N)
    ratios = []
    for q, q_new in _pairs(step, rng):
        diffs = _residual_diffs(step, q, q_new, rows)
        pair = PairBound.between(step.bound, step.index_table, q, q_new)
        limit = pair.row_bounds(rows)
        assert np.all(diffs <= limit * (1 + 1e-7) + 1e-10)
        ratios.append(pair.total / (step.bound.C * step.bound.metric(q, q_new)))
    assert np.median(ratios) < 0.5, ratios


def test_negative_control_cells_whitened_too_loosely_violate_the_bound(step):
    cells = step.bound.cells
    chol = step._laplace_chol
    # Whitening by a covariance 100 times too large makes every M_cell 1000 times smaller
    # while the constants c_i stay those of the right covariance.
    shrunk = RowCells.build(
        _patterns(step), _shared(step), 100.0 * (chol @ chol.T), step.reference.reference
    )
    assert shrunk is not None and shrunk.n_cells == cells.n_cells
    table = CellTable.from_constants(shrunk, step.bound.c)
    rng = np.random.default_rng(1)
    rows = np.arange(N)
    violated = 0
    for q, q_new in _pairs(step, rng, count=10):
        limit = PairBound.between(step.bound, table, q, q_new).row_bounds(rows)
        violated += int(np.any(_residual_diffs(step, q, q_new, rows) > limit))
    assert violated > 0


def _patterns(step):
    return step._row_supports[0][0]


def _shared(step):
    return step._row_supports[0][1]


def test_the_cell_table_draws_rows_in_proportion_to_their_bounds(step):
    rng = np.random.default_rng(2)
    centre, chol = step.reference.reference, step._laplace_chol
    q, q_new = centre, centre + chol @ rng.normal(size=centre.size)
    pair = PairBound.between(step.bound, step.index_table, q, q_new)
    expected = pair.row_bounds(np.arange(N)) / pair.total
    assert np.isclose(expected.sum(), 1.0)
    draws = pair.sample(rng, 400_000)
    observed = np.bincount(draws, minlength=N) / draws.size
    # Per cell (a few hundred rows each) the frequencies match to Monte Carlo error.
    cell = step.bound.cells.cell_of_row
    got = np.bincount(cell, weights=observed, minlength=G)
    want = np.bincount(cell, weights=expected, minlength=G)
    assert np.all(np.abs(got - want) <= 5 * np.sqrt(want / draws.size) + 1e-12)
    # Within the heaviest cell, rows follow c_i.
    heavy = np.flatnonzero(cell == np.argmax(want))
    assert np.corrcoef(observed[heavy], expected[heavy])[0, 1] > 0.95


def test_the_cell_region_is_every_cells_ellipsoid():
    rng = np.random.default_rng(3)
    cov = np.diag([1.0, 4.0, 0.25, 1.0])
    patterns = np.array([[2], [3]] * 10)
    cells = RowCells.build(patterns, np.array([0, 1]), cov, np.zeros(4))
    region = CellRegion.around(cells, np.sqrt(cov), margin=1.0)
    assert np.allclose(region.radii, np.sqrt(3.0) + 1.0)
    for _ in range(200):
        q = rng.normal(size=4) * 2.0
        first = np.sqrt(q[0] ** 2 + q[1] ** 2 / 4 + q[2] ** 2 / 0.25)
        second = np.sqrt(q[0] ** 2 + q[1] ** 2 / 4 + q[3] ** 2)
        inside = first <= region.radii[0] and second <= region.radii[1]
        assert region.contains(q) == inside


def _gaussian_cells(n_cells: int, rng: np.random.Generator):
    """``n_cells`` cells of an intercept and a slope each beside two shared coordinates,
    under a correlated Gaussian posterior (its covariance and Cholesky factor)."""
    d = 2 + 2 * n_cells
    a = rng.normal(size=(d, d)) / np.sqrt(d)
    cov = a @ a.T + np.diag(rng.uniform(0.5, 2.0, size=d))
    own = 2 + 2 * np.arange(n_cells)[:, None] + np.arange(2)
    patterns = np.repeat(own, 5, axis=0)
    cells = RowCells.build(patterns, np.array([0, 1]), cov, np.zeros(d))
    return cells, cov, np.linalg.cholesky(cov)


def test_the_covering_region_leaves_out_the_asked_gaussian_tail():
    """Per-cell radii leave out ``tail / n_cells`` each of a Gaussian posterior: with a
    large tail asked (so that it is countable), the share of Gaussian draws outside the
    region is at most ``tail`` (a union bound; cells overlap in the shared coordinates)
    and of that order. Negative control: radii that give every cell the whole ``tail``
    leave out far more than asked."""
    rng = np.random.default_rng(11)
    n_cells, tail, draws = 20, 0.05, 40_000
    cells, cov, chol = _gaussian_cells(n_cells, rng)
    region = CellRegion.covering(cells, chol, tail=tail)
    assert np.all(region.radii < np.sqrt(cells.sizes) + 8.0)
    q = rng.multivariate_normal(np.zeros(cov.shape[0]), cov, size=draws)
    outside = np.mean([not region.contains(x) for x in q])
    se = np.sqrt(tail * (1 - tail) / draws)
    assert tail / 3 < outside <= tail + 4 * se

    loose = CellRegion.covering(cells, chol, tail=tail * n_cells)
    outside_loose = np.mean([not loose.contains(x) for x in q[:5000]])
    assert outside_loose > tail + 4 * np.sqrt(tail / 5000)


def test_the_covering_region_is_never_wider_than_the_fixed_margin():
    """A tiny tail asked of few-coordinate cells would need radii beyond ``sqrt(|T|) + 8``;
    they stop there (the default before per-cell tails), and shrink with a larger tail."""
    cells, _, chol = _gaussian_cells(4, np.random.default_rng(2))
    widest = CellRegion.covering(cells, chol, tail=1e-40)
    assert np.allclose(widest.radii, np.sqrt(cells.sizes) + 8.0)
    default = CellRegion.covering(cells, chol)
    assert np.all(default.radii < widest.radii)
    assert np.all(CellRegion.covering(cells, chol, tail=1e-3).radii < default.radii)
