"""A sweep over the groups of a multilevel model: each group tested on its own rows (exact).

In a multilevel model row ``i`` reads the shared coordinates and the effects of its own
group ``g`` (a *cell* of :mod:`pymc_minibatch_mh.bounds.row_cells` whose own coordinates
``q_g`` no other cell touches). Given the rest, the groups' effects are then independent:

    p(q_g | rest)  ∝  p_g(q_g | shared) * prod over rows i of g of p(y_i | q_g, shared),

where ``p_g`` is the group's own prior term. A sweep proposes a random-walk move of every
group at once, ``q_g' = q_g + s W_g z_g`` (``W_g`` a Cholesky factor of the Laplace fit's
covariance of ``q_g`` given the rest, ``z_g`` standard normal), and accepts or rejects each
group on its own. As the conditionals are independent, this is the same chain as
updating the groups one after the other (Metropolis within Gibbs; Gelman and Hill 2007),
and every group's test is an ordinary MH test on its conditional: the sweep leaves the
posterior invariant.

Each group's test is TunaMH's (Zhang et al. 2020; :mod:`pymc_minibatch_mh.kernels.tuna`)
on its rows, with control variates. Group ``g``'s log-likelihood ratio is its part of the
exactly summed Taylor proxy (``G . d + d' H s / 2`` restricted to ``q_g``, valid because
the proxy's Hessian has no block between two groups, which the caller checks) plus its
residual differences, bounded by ``b_i = c_i M_g(q, q')`` with the remainder bound's
constants and group ``g``'s cell metric. The group draws ``B_g ~ Poisson(chi T_g^2 + T_g)``
rows (``T_g`` the sum of its ``b_i`` at the temperature), each with probability
``c_i / C_g``, keeps them by TunaMH's thinning and adds the artanh terms; a group whose
expected draw exceeds its number of rows is tested on all of them exactly instead (the
switch depends only on the symmetric ``M_g``). A sweep reads about ``sum_g T_g`` rows.
Each ``T_g`` is of third order in the group's whitened distances (its own move and the
cell's distance from the reference point) and falls like ``n_g^{-1/2}`` with the group's
number of rows ``n_g``: groups of many rows cost little, and groups of a few dozen rows
about one row each per sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.kernels.tuna import TunaSettings, thinned_draws


@dataclass(frozen=True, eq=False)
class GroupBlocks:
    """The groups' own coordinates and the proposal factor of each group.

    Group ``g`` is cell ``cells[g]`` of the remainder bound's row cells.

    Attributes
    ----------
    cells : ndarray of int64, shape (G,)
        The row cell of every group.
    columns : ndarray of int64, shape (G, w)
        The group's own coordinates, padded with ``D`` (a coordinate that is never read).
    chol : ndarray, shape (G, w, w)
        Lower Cholesky factors of the groups' conditional covariances, zero on the padding.
    exact_rows, exact_row_groups : ndarray of int64, optional
        The groups' rows without a constant (the bound's ``exact_rows``, read whenever their
        group moves) and the group of each.
    """

    cells: np.ndarray
    columns: np.ndarray
    chol: np.ndarray
    exact_rows: np.ndarray | None = None
    exact_row_groups: np.ndarray | None = None

    def __deepcopy__(self, memo) -> GroupBlocks:
        return self  # immutable; PyMC deep-copies sampling states per chain

    @property
    def n_groups(self) -> int:
        return int(self.columns.shape[0])

    @property
    def width(self) -> int:
        return int(self.columns.shape[1])

    def sums(self, values: np.ndarray) -> np.ndarray:
        """``values`` summed over every group's own coordinates, shape (G,)."""
        return np.append(values, 0.0)[self.columns].sum(axis=1)

    def moved(self, position: np.ndarray, step: np.ndarray, which=None) -> np.ndarray:
        """``position`` with the groups ``which`` (all by default) moved by ``step`` (G, w)."""
        out = np.append(position, 0.0)
        if which is None:
            out[self.columns] += step
        else:
            out[self.columns[which]] += step[which]
        return out[:-1]


@dataclass(frozen=True)
class GroupSweepInfo:
    """What one sweep did.

    Attributes
    ----------
    group_accept : float
        The share of groups whose move was accepted.
    group_rows : int
        Rows read: the Poisson draws plus every row of the groups tested exactly.
    """

    group_accept: float
    group_rows: int


def group_tuna_sweep(
    rng: np.random.Generator,
    state: ChainState,
    blocks: GroupBlocks,
    scale: float,
    target,
    bound,
    table,
    prior_terms: Callable[[np.ndarray], np.ndarray],
    settings: TunaSettings,
) -> tuple[ChainState, GroupSweepInfo]:
    """Move every group's effects by its own TunaMH test on its own rows.

    Parameters
    ----------
    rng : numpy.random.Generator
        The chain's generator.
    state : ChainState
        Current position and its log prior.
    blocks : GroupBlocks
        The groups (cells of ``table``) and their proposal factors.
    scale : float
        The random walk's scale ``s``.
    target : ControlVariateTarget
        Proxy (in the block coordinates) and residual differences ``loglik_diff``.
    bound : LipschitzBound
        Remainder bound with row cells: ``c`` (untempered), ``exact_rows``, and its region
        (a :class:`~pymc_minibatch_mh.bounds.row_cells.CellRegion`) or box, if any.
    table : CellTable
        Rows of every cell and their cumulative constants.
    prior_terms : callable
        ``prior_terms(q) -> (G,)``: the log prior terms of every group's effects given the
        shared coordinates; the rest of the log prior does not depend on the groups.
    settings : TunaSettings
        ``chi`` and the temperature.

    Returns
    -------
    (ChainState, GroupSweepInfo)

    Notes
    -----
    Each group's test is the TunaMH test [1]_ on the group's conditional; the groups are
    independent given the rest, so testing them together is a Gibbs sweep [2]_.

    References
    ----------
    .. [1] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact Minibatch
       Metropolis-Hastings", NeurIPS 2020 (the per-datum bounds may depend on the pair of states).
    .. [2] Gelman, A., Hill, J. "Data Analysis Using Regression and Multilevel/Hierarchical
       Models", Cambridge University Press, 2007 (updating group effects group by group).
    """
    inv_k = 1.0 / settings.temperature
    chi = settings.chi
    n_groups = blocks.n_groups
    position = state.position
    step, proposal = propose_groups(rng, blocks, position, scale)

    # Where the bound holds: a region of cells, a box, or everywhere. Outside it the
    # density counts as 0 (as outside the prior's support), decided without data.
    inside_new = _inside(bound, blocks, proposal)
    inside_old = _inside(bound, blocks, position)
    log_r = prior_terms(proposal) - prior_terms(position)
    log_r = np.where(inside_new, log_r, -np.inf)
    log_r = np.where(inside_old | ~inside_new, log_r, np.inf)
    live = np.isfinite(log_r)
    x_new, x_old = proposal, position
    log_r = log_r + np.where(live, proxy_group_diff(target.proxy, blocks, x_new, x_old, inv_k), 0.0)

    cells = table.cells
    cell_metric = cells.metrics(position, proposal)[blocks.cells]
    totals = table.cell_totals[blocks.cells] * cell_metric * inv_k
    if not np.all(np.isfinite(totals[live])):
        raise ValueError("The TunaMH cell metrics are not finite for this group move.")
    rates = np.where(live, chi * totals**2 + totals, 0.0)
    sizes = np.diff(cells.starts)[blocks.cells]
    exact = live & (rates > sizes)
    counts = np.where(exact, 0, rng.poisson(np.where(exact, 0.0, rates)))
    rows_read = int(counts.sum())

    if rows_read:
        group_of_draw = np.repeat(np.arange(n_groups), counts)
        idx = table.rows_in(rng, blocks.cells[group_of_draw])
        d = -np.asarray(target.loglik_diff(x_new, x_old, idx), dtype=np.float64) * inv_k
        b = bound.c[idx] * cell_metric[group_of_draw] * inv_k
        kept, x = thinned_draws(rng, d, b, chi, totals[group_of_draw], idx, bound.description)
        terms = 2.0 * np.arctanh(x)
        log_r = log_r + np.bincount(group_of_draw[kept], terms, minlength=n_groups)

    idx, group_of_row = _rows_read_exactly(cells, blocks, live, exact)
    if idx.size:
        diff = np.asarray(target.loglik_diff(x_new, x_old, idx), dtype=np.float64) * inv_k
        log_r = log_r + np.bincount(group_of_row, diff, minlength=n_groups)
        rows_read += int(idx.size)

    accepted = np.log(rng.random(n_groups)) < log_r
    if not accepted.any():
        return state, GroupSweepInfo(0.0, rows_read)
    new_position = blocks.moved(position, step, accepted)
    new_state = ChainState(new_position, float(target.logprior(new_position)))
    return new_state, GroupSweepInfo(float(accepted.mean()), rows_read)


def propose_groups(
    rng: np.random.Generator, blocks: GroupBlocks, position: np.ndarray, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(step, proposal)``: every group's effects moved by the random walk whitened by its
    conditional Laplace factor, ``step`` of shape ``(G, width)``."""
    z = rng.standard_normal((blocks.n_groups, blocks.width))
    step = scale * np.einsum("gij,gj->gi", blocks.chol, z)
    return step, blocks.moved(position, step)


def proxy_group_diff(proxy, blocks: GroupBlocks, new: np.ndarray, old: np.ndarray, inv_k: float):
    """Each group's part of the summed Taylor proxy's difference between ``new`` and
    ``old`` (which differ in the groups' effects only; the proxy's Hessian has no block
    between groups), tempered by ``inv_k``, shape (G,)."""
    drift = proxy.gradient + 0.5 * proxy.hessian_dot(new + old - 2.0 * proxy.reference)
    return blocks.sums(drift * (new - old)) * inv_k


def rows_of_groups(cells, blocks: GroupBlocks, groups: np.ndarray):
    """Every row of the given groups and the group of each: ``(rows, groups)``, int64."""
    starts = cells.starts[blocks.cells[groups]]
    ends = cells.starts[blocks.cells[groups] + 1]
    pieces = [cells.order[a:b] for a, b in zip(starts, ends, strict=True)]
    if not pieces:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = np.concatenate(pieces).astype(np.int64)
    return rows, np.repeat(np.asarray(groups, dtype=np.int64), ends - starts)


def _inside(bound, blocks: GroupBlocks, q: np.ndarray) -> np.ndarray:
    """Whether each group's part of ``q`` lies where the bound holds, shape (G,)."""
    inside = np.ones(blocks.n_groups, dtype=bool)
    region = bound.region
    if region is not None:
        inside &= (region.distances(q) <= region.radii)[blocks.cells]
    if bound.box is not None:
        lo, hi = bound.box
        ok = np.append((lo <= q) & (q <= hi), True)
        inside &= ok[blocks.columns].all(axis=1)
    return inside


def _rows_read_exactly(cells, blocks: GroupBlocks, live: np.ndarray, exact: np.ndarray):
    """Every row of the groups tested on all their rows (``exact``), and the rows without
    a constant (``blocks.exact_rows``) of the other groups that moved. Returns
    ``(rows, group of each row)``."""
    rows, group_of_row = rows_of_groups(cells, blocks, np.flatnonzero(exact))
    pieces, owners = [rows], [group_of_row]
    if blocks.exact_rows is not None:
        owner = blocks.exact_row_groups
        keep = live[owner] & ~exact[owner]
        pieces.append(blocks.exact_rows[keep])
        owners.append(owner[keep])
    return np.concatenate(pieces).astype(np.int64), np.concatenate(owners).astype(np.int64)
