"""The approximate group sweeps alone (no PyMC): Barker's and Austere's tests per group on
six Bernoulli groups with quadrature posteriors, with the proxy-alone negative control."""

import numpy as np
import pytest
from group_models import grid_moments, six_groups, z_scores

from pymc_minibatch_mh.bounds.row_cells import CellTable
from pymc_minibatch_mh.kernels.correction import load_default_correction
from pymc_minibatch_mh.kernels.group_minibatch import (
    GroupAustereTest,
    GroupBarkerTest,
    group_minibatch_sweep,
)
from pymc_minibatch_mh.kernels.target import ChainState

TESTS = {
    "barker": lambda: GroupBarkerTest(load_default_correction()),
    "austere": lambda: GroupAustereTest(0.05),
}


def _run(test, residuals, rows=8, n_sweeps=30_000, seed=3):
    target, _, table, blocks, prior_terms, y, rows = six_groups(residuals, rows)
    table = CellTable.from_constants(table.cells, np.ones(y.size))  # uniform within a group
    rng = np.random.default_rng(seed)
    q = np.zeros(blocks.n_groups)
    state = ChainState(q, target.logprior(q))
    draws, accepted, rows_read = np.empty((n_sweeps, q.size)), 0.0, 0
    for t in range(n_sweeps):
        state, info = group_minibatch_sweep(
            rng, state, blocks, 1.2, target, table, prior_terms, test
        )
        draws[t] = state.position
        accepted += info.group_accept
        rows_read += info.group_rows
    return draws[2000:], accepted / n_sweeps, rows_read / n_sweeps, grid_moments(y, rows)


@pytest.mark.parametrize("name", sorted(TESTS))
def test_the_sweep_samples_every_groups_posterior(name):
    """Groups of 40 rows: the tests decide most groups on a few rows (an approximation whose
    error is far below the Monte Carlo error here), the rest on all rows."""
    draws, accept, rows, (means, sds) = _run(TESTS[name](), residuals=True, rows=40)
    z_mean, z_var = z_scores(draws, means, sds)
    assert np.all(np.abs(z_mean) < 4.5), (z_mean, draws.mean(axis=0), means)
    assert np.all(np.abs(z_var) < 4.5), (z_var, draws.std(axis=0), sds)
    assert 0.1 < accept < 0.9
    assert 0 < rows < 0.5 * 40 * 6  # a minority of the rows per sweep


@pytest.mark.parametrize("name", sorted(TESTS))
def test_negative_control_the_proxy_alone_is_visibly_wrong(name):
    draws, _, _, (means, sds) = _run(TESTS[name](), residuals=False, rows=40)
    z_mean, z_var = z_scores(draws, means, sds)
    assert np.max(np.abs(z_mean)) > 6.0 or np.max(np.abs(z_var)) > 6.0


@pytest.mark.parametrize("name", sorted(TESTS))
def test_a_row_that_is_nan_rejects_its_group_only(name):
    target, _, table, blocks, prior_terms, y, _ = six_groups(True)
    table = CellTable.from_constants(table.cells, np.ones(y.size))
    group = np.repeat(np.arange(6), 8)

    class NanInGroupTwo:
        proxy = target.proxy
        logprior = staticmethod(target.logprior)

        @staticmethod
        def loglik_diff(new, old, idx):
            diff = target.loglik_diff(new, old, idx)
            return np.where(group[idx] == 2, np.nan, diff)

    rng = np.random.default_rng(0)
    q = np.zeros(6)
    state = ChainState(q, target.logprior(q))
    for _ in range(100):
        state, _ = group_minibatch_sweep(
            rng, state, blocks, 1.2, NanInGroupTwo, table, prior_terms, TESTS[name]()
        )
    assert state.position[2] == 0.0
    assert np.all(state.position[[0, 1, 3, 4, 5]] != 0.0)
