"""Group sweeps for a step: which coordinates are a group's own, their proposal, their tuning.

:class:`GroupMoves` is a mixin of the steps with control variates. After every ordinary
move the step runs a sweep over the groups when the model is a multilevel one whose groups
can be told apart: the rows fall into cells by the coordinates they touch, some
coordinates are touched by the rows of one cell only (the group's effects), the proxy's
Hessian has no block between two groups, and the log prior splits into one term per
group plus a rest that does not read the groups (:mod:`~pymc_minibatch_mh.likelihood.group_priors`).
``group_moves_unavailable`` says why a model gets no sweep. TunaMH's sweep is exact
(:func:`~pymc_minibatch_mh.kernels.group_sweep.group_tuna_sweep`, its cells those of the
remainder bound); MinibatchBarker's and Austere's decide each group by their own
approximate test on a few of its rows
(:func:`~pymc_minibatch_mh.kernels.group_minibatch.group_minibatch_sweep`, the cells
those of the recognised linear predictor).

With sweeps the ordinary move changes only the shared coordinates (HMC on the surrogate,
or the random walk, whitened by the Laplace fit's covariance of the shared coordinates
given the groups; no independence moves, no covariance refits): a move of every
coordinate at once would need a test over the residuals of every group, which reads
most rows in a model of many groups. A model without shared coordinates is sampled by
sweeps alone.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from pymc.pytensorf import make_shared_replacements
from scipy import linalg

from pymc_minibatch_mh.bounds.row_cells import CellTable, likelihood_row_supports, row_cells_for
from pymc_minibatch_mh.kernels.adaptation import ScaleAdaptation, adapt_scale
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget, ImageTaylorProxy
from pymc_minibatch_mh.kernels.gaussian_flow import GaussianFlow
from pymc_minibatch_mh.kernels.group_minibatch import (
    GroupAustereTest,
    GroupBarkerTest,
    group_minibatch_sweep,
)
from pymc_minibatch_mh.kernels.group_sweep import GroupBlocks, GroupSweepInfo
from pymc_minibatch_mh.kernels.proposals import ProposalMixture, RandomWalkProposal
from pymc_minibatch_mh.kernels.surrogate_hmc import SurrogateHMC
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.likelihood.group_priors import group_prior_terms, split_holds
from pymc_minibatch_mh.likelihood.linear_predictor import UnsupportedLikelihood
from pymc_minibatch_mh.likelihood.surrogate import compile_surrogate_density
from pymc_minibatch_mh.step_methods.proposal_mixture import SURROGATE_TRANSITIONS

#: Fewer groups than this and a model is not treated as multilevel.
MIN_GROUPS = 3
#: Acceptance rate the groups' random-walk scale is tuned to under Metropolis' rule (one or
#: two coordinates per group: near the optimum of a low-dimensional random walk); a step
#: with Barker's rule sets its own ``group_target_accept``.
GROUP_TARGET_ACCEPT = 0.4
#: A Hessian entry between two groups larger than this, relative to the largest, means
#: the rows of one group read another's effects: no sweep.
CROSS_GROUP_RTOL = 1e-10


class GroupMoves:
    """Sweeps over a multilevel model's groups (a mixin; see the module docstring)."""

    #: Acceptance rate of the groups' moves that tuning aims at.
    group_target_accept = GROUP_TARGET_ACCEPT

    def _init_group_moves(self, enabled: bool) -> None:
        """Find the groups once, at construction; ``group_moves_unavailable`` says why not."""
        self._group_blocks = None
        self._group_prior = None
        self._sweep_table = None
        self.group_moves_unavailable = (
            self._find_groups(self._model, self._initial_point)
            if enabled
            else "turned off (group_moves=False)"
        )
        width = 1 if self._group_blocks is None else self._group_blocks.width
        self._untuned_group_adaptation = ScaleAdaptation(np.log(2.38 / np.sqrt(width)))
        self.group_adaptation = self._untuned_group_adaptation
        if self._group_blocks is not None:
            self._moves_on_shared_coordinates()

    def _proxy_in_image(self, model, initial_point) -> bool:
        """No image when sweeps may follow: they need the proxy in the sampled coordinates,
        which for rows that read few coordinates through a linear predictor is the same
        quadratic as one in the image."""
        if getattr(self, "_group_moves_requested", False):
            try:
                lp = self._recognise_linear_predictor(model, initial_point)
            except UnsupportedLikelihood:
                lp = None
            if lp is not None and likelihood_row_supports(lp) is not None:
                return False
        return super()._proxy_in_image(model, initial_point)

    @property
    def group_moves(self) -> bool:
        """Whether every move is followed by a sweep over the groups."""
        return self._group_blocks is not None

    def _find_groups(self, model, initial_point) -> str | None:
        target = self.target
        if getattr(target, "exact_sum", False):
            return "the likelihood is summed exactly: no move reads a row"
        if not isinstance(target, ControlVariateTarget) or target.coordinates is not None:
            return "it needs control variates with a proxy in the sampled coordinates"
        if isinstance(self.reference, ImageTaylorProxy):
            return "the proxy is expanded in the likelihood's image"
        table, exact_rows = self._group_rows(model, initial_point)
        if not isinstance(table, CellTable):
            return table or "the rows do not fall into cells that touch few coordinates"
        cells = table.cells
        ndim = self.tall_data.ndim
        cols = cells.columns
        count = np.bincount(cols[cols < ndim], minlength=ndim)
        alone = (cols < ndim) & (count[np.minimum(cols, ndim - 1)] == 1)
        owner_cell = np.full(ndim, -1)
        owner_cell[cols[alone]] = np.nonzero(alone)[0]
        group_cells = np.unique(owner_cell[owner_cell >= 0])
        if group_cells.size < MIN_GROUPS:
            return f"fewer than {MIN_GROUPS} groups have coordinates of their own"
        group_of_cell = np.full(cells.n_cells, -1)
        group_of_cell[group_cells] = np.arange(group_cells.size)
        owner = np.where(owner_cell >= 0, group_of_cell[np.maximum(owner_cell, 0)], -1)
        reason = _cross_group_curvature(self.reference.hessian, owner)
        if reason is not None:
            return reason
        shared = make_shared_replacements(initial_point, self.vars, model)
        terms, reason = group_prior_terms(
            model, self.vars, initial_point, owner, shared, self.tall_data.graphs.compile_kwargs
        )
        if terms is None:
            return reason
        centre = self.reference.reference
        if not split_holds(terms, self.tall_data.logprior, centre, owner, np.random.default_rng(0)):
            return "the log prior reads the group effects outside their own priors (a Potential?)"
        columns = _padded_columns(owner, group_cells.size, ndim)
        inverse = linalg.solve_triangular(self._laplace_chol, np.eye(ndim), lower=True)
        chol = _conditional_factors(inverse, columns, ndim)
        self._shared_coordinates = np.flatnonzero(owner < 0)
        self._shared_factor = _shared_factor(inverse, self._shared_coordinates)
        exact_groups = None
        if exact_rows is not None and exact_rows.size:
            groups = group_of_cell[cells.cell_of_row[exact_rows]]
            exact_rows, exact_groups = exact_rows[groups >= 0], groups[groups >= 0]
        else:
            exact_rows = None
        self._group_blocks = GroupBlocks(group_cells, columns, chol, exact_rows, exact_groups)
        self._group_prior = terms
        self._sweep_table = table
        return None

    def _moves_on_shared_coordinates(self) -> None:
        """The ordinary move of a step with sweeps: the shared coordinates only."""
        factor = self._shared_factor
        self._prior_and_grad = None
        if factor is None:
            self._untuned_proposal = self.proposal = None  # sweeps alone
            return
        untuned = self._untuned_proposal
        local = untuned.random_walk if isinstance(untuned, ProposalMixture) else untuned
        shared = self._shared_coordinates
        if isinstance(local, SurrogateHMC | GaussianFlow):
            # HMC on the surrogate in the shared coordinates alone: O(d_s D) per move.
            moves, scaling = SurrogateHMC(factor, SURROGATE_TRANSITIONS), shared.size**-0.25
            self._prior_and_grad = self._shared_functions.get(
                "surrogate_prior", lambda: compile_surrogate_density(self.tall_data, proxy=False)
            )
        else:
            # A random walk of the whole vector that leaves the groups where they are.
            ndim = self.tall_data.ndim
            embedded = np.zeros((ndim, ndim))
            embedded[np.ix_(shared, shared)] = factor
            moves, scaling = RandomWalkProposal(embedded), 2.38 / np.sqrt(shared.size)
        self._untuned_proposal = self.proposal = moves
        self._untuned_adaptation = self.adaptation = ScaleAdaptation(float(np.log(scaling)))
        self.adapt_cov = False
        self.cov_window = None
        if not self._user_steps:
            self.steps_per_draw = self._untuned_steps_per_draw = self.default_steps_per_draw

    def _propose(self, state: ChainState) -> tuple[np.ndarray, float]:
        """With sweeps and HMC moves: HMC on the surrogate as a function of the shared
        coordinates, the groups held where they are (its proposal ratio is the
        surrogate's density ratio, as for the moves of every coordinate)."""
        if self._group_blocks is None or self._prior_and_grad is None:
            return super()._propose(state)
        shared = self._shared_coordinates
        position = state.position
        g, h_s, h_ss, x_ref = self._shared_proxy_terms()
        rest = position - x_ref
        rest[shared] = 0.0
        linear = (
            g[shared] + h_s @ rest
        )  # the proxy's gradient in the shared coordinates at x_s = x_ref_s
        base = x_ref[shared]

        def density(x_s):
            q = position.copy()
            q[shared] = x_s
            value, grad = self._prior_and_grad(q)
            offset = x_s - base
            curved = h_ss @ offset
            total = float(value) + float(linear @ offset) + 0.5 * float(offset @ curved)
            return total, np.asarray(grad)[shared] + linear + curved

        moved, log_q_ratio, self._inner_accept = self.proposal(
            self.rng, position[shared], self.adaptation.scaling, density
        )
        self._move_independent = self._move_flow = False
        proposal = position.copy()
        proposal[shared] = moved
        return proposal, log_q_ratio

    def _shared_proxy_terms(self):
        """``(g, H[shared, :], H[shared, shared], x_ref)`` of the tempered proxy, once per
        expansion point."""
        cached = getattr(self, "_shared_proxy", None)
        if cached is None or cached[0] is not self.reference:
            g, h, x_ref = self._tempered_proxy_terms()
            h_s = h[self._shared_coordinates]
            cached = (self.reference, g, h_s, h_s[:, self._shared_coordinates], x_ref)
            self._shared_proxy = cached
        return cached[1:]

    def _group_rows(self, model, initial_point):
        """``(table, exact_rows)``: the rows of every cell (drawn uniformly within a cell)
        and rows to read whenever their group moves (none here), or ``(reason, None)``.
        The cells are those of the likelihood read as a linear predictor."""
        if self._laplace_chol is None:
            return "it needs the Laplace fit at the reference point", None
        try:
            lp = self._recognise_linear_predictor(model, initial_point)
        except UnsupportedLikelihood as err:
            return f"the likelihood is not a recognised linear predictor ({err})", None
        if _residuals_vanish(self.target, self.reference.reference, self._laplace_chol):
            return "the control variates are exact (the residuals vanish): no rows to save", None
        supports = likelihood_row_supports(lp)
        cells = row_cells_for(lp, self.reference.reference, self._laplace_chol, supports)
        if cells is None:
            return None, None
        return CellTable.from_constants(cells, np.ones(self.tall_data.n_data)), None

    def _group_table(self) -> CellTable | None:
        """The rows of the cells the groups were found in (fixed once found)."""
        return self._sweep_table

    def _sweep_kernel(self, state: ChainState, table: CellTable, settings):
        """One sweep by the step's own test (this mixin: Barker's rule or Austere's)."""
        return group_minibatch_sweep(
            self.rng,
            state,
            self._group_blocks,
            self.group_adaptation.scaling,
            self.target,
            table,
            self._group_prior,
            self._group_test(),
            self.temperature,
        )

    def _group_test(self) -> GroupBarkerTest | GroupAustereTest:
        raise NotImplementedError

    def _group_sweep(self, state: ChainState, settings=None):
        """One sweep; tunes the groups' scale while tuning."""
        blocks = self._group_blocks
        table = self._group_table()
        if not isinstance(table, CellTable) or table.cells.n_cells <= int(blocks.cells.max()):
            return state, GroupSweepInfo(np.nan, 0)  # the bound lost its cells
        state, info = self._sweep_kernel(state, table, settings)
        if self.tune and self.adapt:
            self.group_adaptation = adapt_scale(
                self.group_adaptation, info.group_accept, self.group_target_accept
            )
        return state, info

    def _then_sweep(self, state: ChainState, info, settings=None):
        """After an ordinary move with ``info``: a sweep, its rows added to the move's."""
        if not self.group_moves:
            return state, info
        state, sweep = self._group_sweep(state, settings)
        return state, replace(
            info,
            batch_size=info.batch_size + sweep.group_rows,
            n_lik_evals=info.n_lik_evals + 2 * sweep.group_rows,
            group_accept=sweep.group_accept,
        )

    def reset_tuning(self) -> None:
        super().reset_tuning()
        self.group_adaptation = self._untuned_group_adaptation


#: Rows on which :func:`_residuals_vanish` looks.
PROBE_ROWS = 64


def _residuals_vanish(target: ControlVariateTarget, reference: np.ndarray, chol) -> bool:
    """Whether the control variates' residuals are zero (a likelihood quadratic in the
    coordinates, e.g. a Normal with a fixed scale): checked on a few rows spread over the
    data, between the reference point and a point one Laplace sd away in every direction."""
    rows = np.unique(np.linspace(0, target.n_data - 1, PROBE_ROWS).astype(np.int64))
    moved = reference + chol @ np.ones(reference.size)
    diff = np.asarray(target.loglik_diff(moved, reference, rows), dtype=np.float64)
    return bool(np.all(np.abs(diff) <= 1e-9))


def _cross_group_curvature(hessian: np.ndarray, owner: np.ndarray) -> str | None:
    """Why the proxy couples two groups (a Hessian entry between them), or None."""
    own = np.flatnonzero(owner >= 0)
    block = np.abs(hessian[np.ix_(own, own)])
    groups = owner[own]
    between = groups[:, None] != groups[None, :]
    largest = float(np.abs(hessian).max()) if hessian.size else 0.0
    if between.any() and float(block[between].max()) > CROSS_GROUP_RTOL * largest:
        return "the log-likelihood couples the effects of different groups"
    return None


def _padded_columns(owner: np.ndarray, n_groups: int, ndim: int) -> np.ndarray:
    """Each group's own coordinates, in order, padded with ``ndim``; shape (G, w)."""
    order = np.argsort(owner, kind="stable")
    order = order[owner[order] >= 0]
    counts = np.bincount(owner[order], minlength=n_groups)
    columns = np.full((n_groups, int(counts.max())), ndim, dtype=np.int64)
    slot = np.arange(order.size) - np.repeat(np.cumsum(counts) - counts, counts)
    columns[owner[order], slot] = order
    columns.setflags(write=False)
    return columns


def _shared_factor(inverse: np.ndarray, shared: np.ndarray) -> np.ndarray | None:
    """A Cholesky factor of the shared coordinates' covariance given the groups under the
    Laplace fit, ``(P_ss)^{-1}`` with ``P = S^{-1} = L^{-T} L^{-1}``; None without shared
    coordinates."""
    if shared.size == 0:
        return None
    block = inverse[:, shared]
    return np.linalg.cholesky(np.linalg.inv(block.T @ block))


def _conditional_factors(inverse: np.ndarray, columns: np.ndarray, ndim: int) -> np.ndarray:
    """Cholesky factors of each group's covariance given the rest under the Laplace fit
    ``S = L L^T``: ``(P_gg)^{-1}`` with ``P = S^{-1}``, from ``inverse = L^{-1}``; zero on
    the padding."""
    padded = np.concatenate([inverse, np.zeros((ndim, 1))], axis=1)[:, columns]  # (D, G, w)
    precision = np.einsum("rga,rgb->gab", padded, padded)
    pad = columns >= ndim
    width = columns.shape[1]
    precision[:, np.arange(width), np.arange(width)] += pad  # identity on the padding
    factors = np.linalg.cholesky(np.linalg.inv(precision))
    factors *= ~pad[:, :, None] & ~pad[:, None, :]
    factors.setflags(write=False)
    return factors
