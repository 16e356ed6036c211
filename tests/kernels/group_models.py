"""A six-group Bernoulli model without PyMC for the group sweeps' tests: every group's
exact posterior by quadrature, and z scores of a chain's moments against it."""

import math

import numpy as np
from scipy.special import log_expit

from pymc_minibatch_mh.bounds.lipschitz import EuclideanMetric, LipschitzBound
from pymc_minibatch_mh.bounds.row_cells import CellTable, RowCells
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget, TaylorProxy
from pymc_minibatch_mh.kernels.group_sweep import GroupBlocks
from pymc_minibatch_mh.kernels.target import ArrayTarget

PRIOR_SD = 1.5
#: sup |d^3/d eta^3 log p(y | eta)| of a Bernoulli-logit row: 1 / (6 sqrt(3)).
THIRD = 1.0 / (6.0 * math.sqrt(3.0))
SUCCESSES = np.array([8, 7, 5, 3, 1, 0])  # of 8 rows per group: skewed posteriors at the ends


def six_groups(residuals=True, rows=8):
    """Six groups of ``rows`` Bernoulli rows (successes in the ratios of ``SUCCESSES``),
    an intercept each with a N(0, 1.5^2) prior, and control variates around 0 (far from
    the extreme groups' posteriors, so the proxy alone is visibly wrong there)."""
    n_groups = SUCCESSES.size
    group = np.repeat(np.arange(n_groups), rows)
    y = np.concatenate([np.arange(rows) < k * rows // 8 for k in SUCCESSES]).astype(float)
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


def grid_moments(y, rows):
    """Each group's posterior mean and sd by quadrature."""
    grid = np.linspace(-12.0, 12.0, 20001)
    means, sds = [], []
    for k in y.reshape(SUCCESSES.size, rows).sum(axis=1):
        logp = k * log_expit(grid) + (rows - k) * log_expit(-grid) - 0.5 * grid**2 / PRIOR_SD**2
        w = np.exp(logp - logp.max())
        w /= w.sum()
        mean = float(w @ grid)
        means.append(mean)
        sds.append(math.sqrt(float(w @ (grid - mean) ** 2)))
    return np.array(means), np.array(sds)


def z_scores(draws, means, sds, n_batches=50):
    """z of each group's mean and of its second central moment, batch-means errors."""
    batches = np.array_split(draws, n_batches)
    first = np.array([b.mean(axis=0) for b in batches])
    second = np.array([((b - means) ** 2).mean(axis=0) for b in batches])
    z_mean = (first.mean(axis=0) - means) / (first.std(axis=0, ddof=1) / math.sqrt(n_batches))
    z_var = (second.mean(axis=0) - sds**2) / (second.std(axis=0, ddof=1) / math.sqrt(n_batches))
    return z_mean, z_var
