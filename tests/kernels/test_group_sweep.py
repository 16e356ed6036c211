"""The group sweep alone (no PyMC): every group's conditional is left invariant, exactly."""

import numpy as np
import pytest
from group_models import SUCCESSES, grid_moments, six_groups, z_scores
from scipy.special import expit

from pymc_minibatch_mh.bounds.lipschitz import LipschitzBound
from pymc_minibatch_mh.kernels.group_sweep import group_tuna_sweep
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.kernels.tuna import TunaSettings


def _run(chi, residuals, n_sweeps=30_000, seed=3):
    target, bound, table, blocks, prior_terms, y, rows = six_groups(residuals)
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
    return draws[2000:], accepted / n_sweeps, rows_read / n_sweeps, grid_moments(y, rows)


@pytest.mark.parametrize("chi", [0.3, 50.0])
def test_a_sweep_leaves_every_groups_posterior_invariant(chi):
    """chi = 0.3: the Poisson test on a few rows; chi = 50: the expected draw exceeds the
    group's 8 rows, so most groups are tested exactly on all of them."""
    draws, accept, rows, (means, sds) = _run(chi, residuals=True)
    z_mean, z_var = z_scores(draws, means, sds)
    assert np.all(np.abs(z_mean) < 4.5), (z_mean, draws.mean(axis=0), means)
    assert np.all(np.abs(z_var) < 4.5), (z_var, draws.std(axis=0), sds)
    assert 0.2 < accept < 0.9
    assert 0 < rows < 8 * SUCCESSES.size  # data are read, and not every row every sweep


def test_negative_control_the_proxy_alone_is_visibly_wrong():
    """Dropping the residuals samples the Laplace-like proxy posterior around 0: the same
    comparison must fail at the extreme groups."""
    draws, _, _, (means, sds) = _run(0.3, residuals=False)
    z_mean, z_var = z_scores(draws, means, sds)
    assert np.max(np.abs(z_mean)) > 6.0 or np.max(np.abs(z_var)) > 6.0


def test_rows_outside_the_region_are_rejected_without_data():
    """A group whose proposal leaves its cell's ellipsoid stays where it is."""
    from pymc_minibatch_mh.bounds.row_cells import CellRegion

    target, bound, table, blocks, prior_terms, _, _ = six_groups()
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
    target, *_ = six_groups()
    q = np.full(6, 0.3)
    idx = np.arange(48)
    grad = (target.loglik(q + 1e-6, idx) - target.loglik(q - 1e-6, idx)) / 2e-6
    y = np.concatenate([np.arange(8) < k for k in SUCCESSES]).astype(float)
    np.testing.assert_allclose(grad, y - expit(0.3), atol=1e-6)
