"""A sweep over the groups of a multilevel model, each group decided by a minibatch test on
its own rows (**approximate**).

The sweep is that of :mod:`pymc_minibatch_mh.kernels.group_sweep` (every group's effects
move at once by a random walk whitened by its Laplace conditional; given the shared
coordinates the groups are independent, so accepting or rejecting each group on its own
conditional is a Gibbs sweep), with the exact TunaMH test replaced by the step's own
approximate test, run for every group at once:

* the exactly known part of group ``g``'s log ratio, ``k_g``: its prior term and its
  part of the summed Taylor proxy (the proxy's Hessian has no block between groups);
* the rest, ``sum over the n_g rows of g of r_i / K`` (the proxy's residual differences),
  estimated by ``n_g`` times the mean of rows drawn uniformly from the group with
  replacement, in stages of 3, 6, 12, ... rows per undecided group;
* a group whose next stage would reach ``n_g`` draws is decided exactly on all its rows.

:class:`GroupBarkerTest` decides as MinibatchBarker does (Seita et al. 2017): once the
estimate's variance ``s^2`` is below the correction table's ``sigma^2``, accept iff
``Delta* + X_nc + X_corr > 0``; exactly, iff ``Delta + X_logistic > 0``.
:class:`GroupAustereTest` decides as Austere does (Korattikara et al. 2014): with
``u ~ U(0, 1)`` drawn first, accept iff the mean residual exceeds
``mu0 = (log u - k_g) / n_g``, decided once the t test's tail probability is below
``epsilon``; exactly, iff ``k_g + sum r_i / K > log u``.

Both errors are those of their step's test on a batch of a few rows: small when the proxy
fits (the residuals are then nearly constant within a group), and zero for groups
decided on all their rows. References are in :func:`group_minibatch_sweep`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from pymc_minibatch_mh.kernels.correction import CorrectionTable
from pymc_minibatch_mh.kernels.group_sweep import (
    GroupBlocks,
    GroupSweepInfo,
    propose_groups,
    proxy_group_diff,
    rows_of_groups,
)
from pymc_minibatch_mh.kernels.target import ChainState

#: Rows drawn per undecided group at the first stage (doubling after).
FIRST_STAGE = 3


@dataclass(frozen=True)
class GroupBarkerTest:
    """MinibatchBarker's test, for every group at once.

    Attributes
    ----------
    table : CorrectionTable
        ``X_corr``; its ``sigma^2`` is the variance budget of the estimate.
    """

    table: CorrectionTable

    def thresholds(self, rng: np.random.Generator, n_groups: int) -> None:
        return None

    def decide(self, rng, known, mean, var, count, sizes, threshold):
        """``(decided, accepted)`` of the groups given their residual moments."""
        estimate_var = sizes**2 * var / count
        decided = estimate_var < self.table.sigma**2
        top_up = np.sqrt(np.maximum(self.table.sigma**2 - estimate_var, 0.0))
        noise = top_up * rng.standard_normal(known.size) + self.table.sample(rng, known.shape)
        return decided, known + sizes * mean + noise > 0.0

    def exact(self, rng, log_ratio, threshold):
        return log_ratio + rng.logistic(size=log_ratio.size) > 0.0


@dataclass(frozen=True)
class GroupAustereTest:
    """Austere's sequential t test, for every group at once.

    Attributes
    ----------
    epsilon : float
        Decide a group once the t test's tail probability is below it.
    """

    epsilon: float

    def thresholds(self, rng: np.random.Generator, n_groups: int) -> np.ndarray:
        return np.log(rng.random(n_groups))

    def decide(self, rng, known, mean, var, count, sizes, threshold):
        mu0 = (threshold - known) / sizes
        s = np.sqrt(var * count / np.maximum(count - 1, 1) / count)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(s > 0, (mean - mu0) / s, np.copysign(np.inf, mean - mu0))
        tail = special.stdtr(np.maximum(count - 1, 1), -np.abs(t))
        return (tail < self.epsilon) & (count >= 2), mean > mu0

    def exact(self, rng, log_ratio, threshold):
        return log_ratio > threshold


def group_minibatch_sweep(
    rng: np.random.Generator,
    state: ChainState,
    blocks: GroupBlocks,
    scale: float,
    target,
    table,
    prior_terms: Callable[[np.ndarray], np.ndarray],
    test: GroupBarkerTest | GroupAustereTest,
    temperature: float = 1.0,
) -> tuple[ChainState, GroupSweepInfo]:
    """Move every group's effects, each decided by ``test`` on rows of its own group.

    Parameters
    ----------
    rng : numpy.random.Generator
        The chain's generator.
    state : ChainState
        Current position and its log prior.
    blocks : GroupBlocks
        The groups (cells of ``table``) and their proposal factors.
    scale : float
        The random walk's scale.
    target : ControlVariateTarget
        Proxy (in the block coordinates) and residual differences ``loglik_diff``.
    table : CellTable
        The rows of every cell (drawn uniformly within a cell: equal constants).
    prior_terms : callable
        ``prior_terms(q) -> (G,)``: the log prior terms of every group's effects given the
        shared coordinates; the rest of the log prior does not depend on the groups.
    test : GroupBarkerTest or GroupAustereTest
        How a group is decided from its rows (see the module docstring).
    temperature : float, default 1
        ``K``: the likelihood is raised to ``1 / K``.

    Returns
    -------
    (ChainState, GroupSweepInfo)

    Notes
    -----
    **Approximate.** Each group's decision errs as its step's test does on a batch of a
    few rows: Barker's test with the correction distribution [1]_, or the sequential t
    test [2]_.

    References
    ----------
    .. [1] Seita, D., Pan, X., Chen, H., Canny, J. "An Efficient Minibatch Acceptance Test
       for Metropolis-Hastings", UAI 2017.
    .. [2] Korattikara, A., Chen, Y., Welling, M. "Austerity in MCMC Land: Cutting the
       Metropolis-Hastings Budget", ICML 2014.
    """
    inv_k = 1.0 / temperature
    n_groups = blocks.n_groups
    position = state.position
    step, proposal = propose_groups(rng, blocks, position, scale)
    known = prior_terms(proposal) - prior_terms(position)
    finite = np.isfinite(known)
    proxy_part = proxy_group_diff(target.proxy, blocks, proposal, position, inv_k)
    known = np.where(finite, known + proxy_part, known)
    threshold = test.thresholds(rng, n_groups)

    cells = table.cells
    sizes = np.diff(cells.starts)[blocks.cells].astype(np.float64)
    accepted = known == np.inf
    undecided = finite.copy()
    drawn_l, drawn_g = [], []
    count = np.zeros(n_groups)
    batch, rows_read = FIRST_STAGE, 0
    while undecided.any():
        whole = undecided & (count + batch >= sizes)
        if whole.any():
            log_ratio, rows = _exact_log_ratio(target, cells, blocks, whole, proposal, position)
            rows_read += rows
            log_ratio = known[whole] + log_ratio * inv_k
            accepted[whole] = test.exact(rng, log_ratio, _at(threshold, whole))
            undecided &= ~whole
        groups = np.flatnonzero(undecided)
        if groups.size == 0:
            break
        group_of_draw = np.repeat(groups, batch)
        idx = table.rows_in(rng, blocks.cells[group_of_draw])
        diff = np.asarray(target.loglik_diff(proposal, position, idx), dtype=np.float64) * inv_k
        rows_read += int(idx.size)
        count[groups] += batch
        drawn_l.append(diff)
        drawn_g.append(group_of_draw)
        values, owners = np.concatenate(drawn_l), np.concatenate(drawn_g)
        bad = ~np.isfinite(values)
        if bad.any():  # a NaN or -inf row rejects its group, +inf rows alone accept it
            special = np.unique(owners[bad])
            veto = np.bincount(owners[bad & (values != np.inf)], minlength=n_groups) > 0
            accepted[special] = ~veto[special]
            undecided[special] = False
            keep = undecided[owners]
            values, owners = values[keep], owners[keep]
            drawn_l, drawn_g = [values], [owners]
            groups = np.flatnonzero(undecided)
            if groups.size == 0:
                break
        mean = np.bincount(owners, values, minlength=n_groups) / np.maximum(count, 1)
        var = np.bincount(owners, (values - mean[owners]) ** 2, minlength=n_groups)
        var = var / np.maximum(count, 1)
        decided, verdict = test.decide(
            rng,
            known[groups],
            mean[groups],
            var[groups],
            count[groups],
            sizes[groups],
            _at(threshold, groups),
        )
        accepted[groups[decided]] = verdict[decided]
        undecided[groups[decided]] = False
        batch *= 2

    if not accepted.any():
        return state, GroupSweepInfo(0.0, rows_read)
    new_position = blocks.moved(position, step, accepted)
    new_state = ChainState(new_position, float(target.logprior(new_position)))
    return new_state, GroupSweepInfo(float(accepted.mean()), rows_read)


def _at(threshold, which):
    return None if threshold is None else threshold[which]


def _exact_log_ratio(target, cells, blocks: GroupBlocks, which, proposal, position):
    """Each chosen group's residual sum over all its rows (untempered), and rows read."""
    groups = np.flatnonzero(which)
    idx, owner = rows_of_groups(cells, blocks, groups)
    diff = np.asarray(target.loglik_diff(proposal, position, idx), float)
    with np.errstate(invalid="ignore"):
        sums = np.bincount(owner, diff, minlength=blocks.n_groups)[groups]
    return sums, int(idx.size)
