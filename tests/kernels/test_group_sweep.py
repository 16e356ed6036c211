"""The group sweep alone (no PyMC): every group's conditional is left invariant, exactly."""

import math

import numpy as np
import pytest
from scipy.special import expit, log_expit

from pymc_minibatch_mh.bounds.lipschitz import EuclideanMetric, LipschitzBound
from pymc_minibatch_mh.bounds.row_cells import CellTable, RowCells
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget, TaylorProxy
from pymc_minibatch_mh.kernels.group_sweep import GroupBlocks, group_tuna_sweep
from pymc_minibatch_mh.kernels.target import ArrayTarget, ChainState
from pymc_minibatch_mh.kernels.tuna import TunaSettings

PRIOR_SD = 1.5
#: sup |d^3/d eta^3 log p(y | eta)| of a Bernoulli-logit row: 1 / (6 sqrt(3)).
THIRD = 1.0 / (6.0 * math.sqrt(3.0))
SUCCESSES = np.array([8, 7, 5, 3, 1, 0])  # of 8 rows per group: skewed posteriors at the ends


def _groups(residuals=True):
    """Six groups of 8 Bernoulli rows, an intercept each with a N(0, 1.5^2) prior, and
    control variates around 0 (far from the extreme groups' posteriors, so the proxy
    alone is visibly wrong there)."""
    n_groups, rows = SUCCESSES.size, 8
    group = np.repeat(np.arange(n_groups), rows)
    y = np.concatenate([np.arange(rows) < k for k in SUCCESSES]).astype(float)
    sign = 2.0 * y - 1.0

    def loglik(q, idx):
        return log_expit(sign[idx] * q[group[idx]])

    def logprior(q):
        return float(-0.5 * np.sum(q**2) / PRIOR_SD**2)

    def taylor(x, idx):  # second-order expansion of every row at eta = 0
        eta = x[group[idx]]
        return math.log(0.5) + (y[idx] - 0.5) * eta - eta**2 / 8.0

    def residual_diff(x_new, x_old, x_ref, idx):
        if not residuals:
            return np.zeros(idx.size)  # negative control: the proxy alone
        new = loglik(x_new, idx) - taylor(x_new, idx)
        old = loglik(x_old, idx) - taylor(x_old, idx)
        return new - old

    reference = np.zeros(n_groups)
    counts = np.bincount(group, minlength=n_groups)
    proxy = TaylorProxy(
        reference,
        float(counts.sum() * math.log(0.5)),
        np.bincount(group, y - 0.5, minlength=n_groups),
        -np.diag(counts / 4.0),
    )
    base = ArrayTarget(group.size, loglik, logprior)
    target = ControlVariateTarget(base, proxy, residual_diff)
    cells = RowCells.build(group[:, None], np.zeros(0, dtype=int), np.eye(n_groups), reference)
    # |r_i(u') - r_i(u)| <= THIRD / 2 |d| (m^2 + d^2 / 12) with d the move, m the midpoint
    c = np.full(group.size, THIRD / 2.0)
    bound = LipschitzBound(c, EuclideanMetric(), description="test", cells=cells)
    blocks = GroupBlocks(
        np.arange(n_groups), np.arange(n_groups)[:, None], np.full((n_groups, 1, 1), 1.0)
    )

    def prior_terms(q):
        return -0.5 * q**2 / PRIOR_SD**2

    return target, bound, CellTable.from_constants(cells, c), blocks, prior_terms, y, rows


def _grid_moments(y, rows):
    """Each group's posterior mean and sd by quadrature."""
    grid = np.linspace(-12.0, 12.0, 20001)
    means, sds = [], []
    for k in SUCCESSES:
        logp = k * log_expit(grid) + (rows - k) * log_expit(-grid) - 0.5 * grid**2 / PRIOR_SD**2
        w = np.exp(logp - logp.max())
        w /= w.sum()
        mean = float(w @ grid)
        means.append(mean)
        sds.append(math.sqrt(float(w @ (grid - mean) ** 2)))
    return np.array(means), np.array(sds)


def _run(chi, residuals, n_sweeps=30_000, seed=3):
    target, bound, table, blocks, prior_terms, y, rows = _groups(residuals)
    rng = np.random.default_rng(seed)
    q = np.zeros(blocks.n_groups)
    state = ChainState(q, target.logprior(q))
    settings = TunaSettings(chi=chi)
    draws, accepted, rows_read = np.empty((n_sweeps, q.size)), 0.0, 0
    for t in range(n_sweeps):
        state, info = group_tuna_sweep(
            rng, state, blocks, 1.2, target, bound, table, prior_terms, settings
        )
        draws[t] = state.position
        accepted += info.group_accept
        rows_read += info.group_rows
    return draws[2000:], accepted / n_sweeps, rows_read / n_sweeps, _grid_moments(y, rows)


def _z_scores(draws, means, sds, n_batches=50):
    """z of each group's mean and of its second central moment, batch-means errors."""
    batches = np.array_split(draws, n_batches)
    first = np.array([b.mean(axis=0) for b in batches])
    second = np.array([((b - means) ** 2).mean(axis=0) for b in batches])
    z_mean = (first.mean(axis=0) - means) / (first.std(axis=0, ddof=1) / math.sqrt(n_batches))
    z_var = (second.mean(axis=0) - sds**2) / (second.std(axis=0, ddof=1) / math.sqrt(n_batches))
    return z_mean, z_var


@pytest.mark.parametrize("chi", [0.3, 50.0])
def test_a_sweep_leaves_every_groups_posterior_invariant(chi):
    """chi = 0.3: the Poisson test on a few rows; chi = 50: the expected draw exceeds the
    group's 8 rows, so most groups are tested exactly on all of them."""
    draws, accept, rows, (means, sds) = _run(chi, residuals=True)
    z_mean, z_var = _z_scores(draws, means, sds)
    assert np.all(np.abs(z_mean) < 4.5), (z_mean, draws.mean(axis=0), means)
    assert np.all(np.abs(z_var) < 4.5), (z_var, draws.std(axis=0), sds)
    assert 0.2 < accept < 0.9
    assert 0 < rows < 8 * SUCCESSES.size  # data are read, and not every row every sweep


def test_negative_control_the_proxy_alone_is_visibly_wrong():
    """Dropping the residuals samples the Laplace-like proxy posterior around 0: the same
    comparison must fail at the extreme groups."""
    draws, _, _, (means, sds) = _run(0.3, residuals=False)
    z_mean, z_var = _z_scores(draws, means, sds)
    assert np.max(np.abs(z_mean)) > 6.0 or np.max(np.abs(z_var)) > 6.0


def test_rows_outside_the_region_are_rejected_without_data():
    """A group whose proposal leaves its cell's ellipsoid stays where it is."""
    from pymc_minibatch_mh.bounds.row_cells import CellRegion

    target, bound, table, blocks, prior_terms, _, _ = _groups()
    region = CellRegion(table.cells, np.full(table.cells.n_cells, 0.5), np.eye(6))
    bound = LipschitzBound(
        bound.c, bound.metric, description="test", region=region, cells=table.cells
    )
    q = np.zeros(6)
    state = ChainState(q, target.logprior(q))
    rng = np.random.default_rng(0)
    for _ in range(200):
        state, _ = group_tuna_sweep(
            rng, state, blocks, 1.2, target, bound, table, prior_terms, TunaSettings(chi=1.0)
        )
        assert np.all(np.abs(state.position) <= 0.5 + 1e-12)
    assert np.any(state.position != 0.0)


def test_expit_is_the_bernoulli_mean():  # guards the sign convention of the test target
    target, *_ = _groups()
    q = np.full(6, 0.3)
    idx = np.arange(48)
    grad = (target.loglik(q + 1e-6, idx) - target.loglik(q - 1e-6, idx)) / 2e-6
    y = np.concatenate([np.arange(8) < k for k in SUCCESSES]).astype(float)
    np.testing.assert_allclose(grad, y - expit(0.3), atol=1e-6)
