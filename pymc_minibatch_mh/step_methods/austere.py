"""The Austere step method (sequential t-test MH)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from pymc_minibatch_mh.kernels.austere import AustereInfo, AustereSettings, austere_kernel
from pymc_minibatch_mh.kernels.austere_design import AustereDesign, design_austere_test
from pymc_minibatch_mh.kernels.group_minibatch import GroupAustereTest
from pymc_minibatch_mh.kernels.subsample import UsedRows
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.step_methods.base import COMMON_STATS, MinibatchStep
from pymc_minibatch_mh.step_methods.group_moves import GroupMoves
from pymc_minibatch_mh.step_methods.proposal_mixture import HIGH_DIM

#: Worst-case probability that one default sequential test decides unlike exact MH (up to
#: HIGH_DIM dimensions; above, it shrinks as sqrt(HIGH_DIM / D), see `default_tolerance`).
DEFAULT_TOLERANCE = 0.02
#: Inner MH steps per draw above HIGH_DIM dimensions (one below, and with the exact flow on
#: a Gaussian surrogate, whose moves cross the posterior: see ``flow_steps_per_draw``).
HIGH_DIM_STEPS_PER_DRAW = 3
#: Candidates searched for the default design (a subset of design_austere_test's grid that
#: keeps the search to a fraction of a second at N = 1e6).
DESIGN_BATCH_SIZES = (500, 1000, 2000, 5000)
DESIGN_EPSILONS = (0.0002, 0.0005, 0.001, 0.002)
#: Added to the candidates for the smaller tolerances of many dimensions (the search
#: then takes about twice as long).
HIGH_DIM_BATCH_SIZES = (10000,)
HIGH_DIM_EPSILONS = (1e-5, 3e-5, 1e-4)


@functools.lru_cache(maxsize=32)
def default_design(n_data: int, tolerance: float) -> AustereDesign:
    """The test design used when ``batch_size`` / ``epsilon`` are not given (cached per N).

    :func:`~pymc_minibatch_mh.design_austere_test` over :data:`DESIGN_BATCH_SIZES` and
    :data:`DESIGN_EPSILONS`: the smallest worst-case data use whose worst-case error per
    decision is at most ``tolerance`` for this N. The design guards every N separately
    (``epsilon`` shrinks as the number of stages ``N / m`` grows), so the bias does not
    grow with N as it does at a fixed ``epsilon``. Below :data:`DEFAULT_TOLERANCE` (blocks
    of more than ``HIGH_DIM`` coordinates) larger batches and smaller ``epsilon`` are
    searched too.
    """
    batch_sizes, epsilons = DESIGN_BATCH_SIZES, DESIGN_EPSILONS
    if tolerance < DEFAULT_TOLERANCE:
        batch_sizes = batch_sizes + HIGH_DIM_BATCH_SIZES
        epsilons = tuple(sorted(HIGH_DIM_EPSILONS + epsilons))
    return design_austere_test(n_data, tolerance, batch_sizes=batch_sizes, epsilons=epsilons)


def default_tolerance(ndim: int) -> float:
    """The default worst-case error per decision for a block of ``ndim`` coordinates.

    ``DEFAULT_TOLERANCE`` up to ``HIGH_DIM`` coordinates, then
    ``DEFAULT_TOLERANCE * sqrt(HIGH_DIM / ndim)``. In many dimensions a chain needs more
    decisions per effective draw, and wrong ones add up: on a 200-group hierarchy
    (204 coordinates, N = 2e4, PyMC 6, 2 x 1000 draws) the fixed tolerance 0.02 with one
    step per draw gave a smallest ESS of 106 and a largest mean error of 0.21 posterior
    sd; three steps per draw with tolerance 0.004 gave ESS 472, 0.11 sd and sds within
    9 %.
    """
    return DEFAULT_TOLERANCE * min(1.0, math.sqrt(HIGH_DIM / max(int(ndim), 1)))


class Austere(GroupMoves, MinibatchStep):
    """Austerity MH: a sequential Student-t test on minibatches (**approximate**).

    Each step proposes a move in the unconstrained space (by default a mixture of
    independence moves and HMC moves on the control variates' surrogate posterior, see
    :class:`~pymc_minibatch_mh.MinibatchBarker`), draws
    ``u ~ U(0, 1)`` before reading any data, and then reads batches **without
    replacement** that grow by ``batch_size`` (``m``, capped at N) until a t-test on
    the mean tempered per-datum log-likelihood ratio against the threshold
    ``mu0 = (log u - log prior ratio - log proposal ratio) / N`` is confident at level
    ``epsilon`` (finite-population-corrected standard error, Student-t tail with
    ``n - 1`` degrees of freedom). At ``n = N`` the decision is exactly MH's.

    **How epsilon bounds the error.** ``epsilon`` bounds the error of each *single*
    t-test, not of the sequential test. The probability that one sequential test
    decides differently from exact MH is at most ``E(0, m, epsilon)``, its value when
    the true mean sits on the threshold; :func:`pymc_minibatch_mh.design_austere_test`
    computes it and picks ``(batch_size, epsilon)`` for a tolerance on it. The error
    of the acceptance probability, and so the total-variation bias of the stationary
    distribution (at most ``max_error / (1 - eta)`` for an exact kernel that contracts
    at rate ``eta``, Theorem 1 of the paper), is usually much smaller than that worst
    case. ``epsilon = 0`` is exact MH (every test reads all N points). This is the
    paper's "conservative" variant: ``(batch_size, epsilon)`` are fixed in advance.

    **Data use and bias in practice.** A test stops early only when ``|mu - mu0|`` is
    large compared with the standard error of the batch mean. With a random walk tuned
    to the (tempered) posterior, ``mu - mu0`` is ``O(1 / N)`` and the per-datum
    log-ratios spread ``O(1 / sqrt(N))``, so their standardised gap is ``O(1)`` whatever
    N: tests read a large, roughly constant *fraction* of N, and the rows read per draw
    grow in proportion to N (33-66% of N for a Gaussian mean at N = 1e4-1e6 in
    ``benchmarks/austere_data_use.py``). Tests stop earlier when proposal steps are
    small relative to the posterior scale, which costs mixing instead. At fixed
    ``epsilon`` the error of a sequential test grows with the number of stages
    ``N / m``, and with it the bias: in that benchmark the default ``epsilon = 0.01``
    gave a posterior sd 1.04-1.2 times the exact one at N = 1e4 but 1.75 and 2.0 times
    at N = 1e5 and 1e6. For large N choose ``(batch_size, epsilon)`` with
    :func:`~pymc_minibatch_mh.design_austere_test` (a tolerance of 0.02 gave sd ratios
    0.96, 0.96 and 1.10, within 5-9% Monte Carlo error), which is what the default does,
    or use ``epsilon = 0``. With control variates (on by default) the standardised gap is
    large and most tests stop at their first batch.
    The ``batch_size`` stat reports the rows each draw read.

    Parameters
    ----------
    vars : list, optional
        Variables to sample. Default: every continuous free variable of the model (see
        :class:`~pymc_minibatch_mh.MinibatchBarker`).
    batch_size : int, optional
        First batch and increment ``m``. Default: from the design below.
    epsilon : float, optional
        Per-test error level in ``[0, 0.5)`` (0 is exact MH). Default: from the design.
    tolerance : float, optional
        When ``batch_size`` or ``epsilon`` is not given, both come from
        :func:`default_design`: the pair ``(m, epsilon)`` with the smallest worst-case data
        use whose worst-case error per MH decision is at most ``tolerance`` for this N
        (e.g. ``m = 500, epsilon = 0.001`` at N = 2e4; ``m = 5000, epsilon = 0.0005`` at
        N = 1e6). The design is available as the attribute ``design``. Default: 0.02 for
        blocks of up to 20 coordinates, ``0.02 * sqrt(20 / D)`` above (see
        :func:`default_tolerance`: in many dimensions wrong decisions add up).
    temperature : float, default 1
        ``K``: the likelihood is raised to ``1/K``; the prior is not tempered.
    group_moves : bool, default True
        In a multilevel model whose rows fall into groups with effects of their own (given
        the shared coordinates independent between groups): follow every move of the shared
        coordinates by a sweep that moves every group's effects by a random walk and
        decides each group by the sequential t test (level ``epsilon``) on rows of its own
        group, 3, 6, 12, ... of them, or on all of them
        (:mod:`pymc_minibatch_mh.kernels.group_minibatch`; one array operation for all
        groups). A test over every group's residuals at once would read most of N. The
        groups' scale is tuned to an acceptance of 0.4. ``group_moves_unavailable`` says
        why a model has no sweep.
    scaling, proposal, proposal_cov, control_variates, reference_point, recentre, \
start_at_reference, target_accept, tune, adapt_cov, steps_per_draw, data_dim, progressbar
        As for :class:`~pymc_minibatch_mh.MinibatchBarker`, except that the default
        ``target_accept`` is 0.234 (the random-walk Metropolis rate) and the default
        ``steps_per_draw`` is 1 for blocks of up to 20 coordinates and 3 above (1 on a Normal
        likelihood summed exactly from sufficient statistics). With control
        variates the test runs on the residuals of the Taylor proxy, whose spread is far
        smaller, so most tests stop at the first batch.
    model, rng, initial_point, compile_kwargs, blocked
        As for :class:`pymc.Metropolis`.

    Notes
    -----
    Sample stats: ``accepted``, ``accept`` (NaN: the test gives no acceptance
    probability), ``batch_size`` (distinct rows read by the step's test, plus its group
    sweeps' draws), ``n_lik_evals`` (twice that: current and proposed state), ``scaling``,
    ``group_accept`` (the share of groups a sweep accepted, NaN without sweeps) and
    ``t_stat`` (the t statistic when the
    test stopped, ``+-inf`` when it read all N rows, NaN when no data was read). With
    ``steps_per_draw > 1`` the counts are summed and ``t_stat`` is the last one.

    Failure modes: the t-test relies on the CLT for the batch mean of the log-ratios;
    heavy-tailed, very sparse or outlying data break it, and a batch whose
    log-ratios are all equal (e.g. many identical rows) stops at once when
    ``epsilon > 0``. Some ``(q, q', u)`` always need all N points.

    References
    ----------
    .. [1] Korattikara, A., Chen, Y., Welling, M. "Austerity in MCMC Land: Cutting
       the Metropolis-Hastings Budget", ICML 2014.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_minibatch_mh import Austere, design_austere_test
    >>> y = np.random.default_rng(0).normal(1.0, 1.0, size=50_000)
    >>> design = design_austere_test(y.size, tolerance=0.05)  # worst-case design
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 10)
    ...     _ = pm.Normal("y", mu, 1.0, observed=y)
    ...     idata = pm.sample(step=Austere(batch_size=design.batch_size,
    ...                                    epsilon=design.epsilon),
    ...                       draws=200, tune=200, chains=1, progressbar=False)  # doctest: +SKIP
    """

    name = "austere"
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "t_stat": (np.float64, []),
        "group_accept": (np.float64, []),
    }

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        batch_size: int | None = None,
        epsilon: float | None = None,
        tolerance: float | None = None,
        group_moves: bool = True,
        **kwargs,
    ):
        if batch_size is not None and (int(batch_size) != batch_size or batch_size < 2):
            raise ValueError(f"batch_size must be an integer >= 2; got {batch_size}.")
        if epsilon is not None and not 0 <= epsilon < 0.5:
            raise ValueError(
                f"epsilon must lie in [0, 0.5) (0 is exact MH); got {epsilon}. Use "
                "design_austere_test(N, tolerance) to choose it from an error tolerance."
            )
        if tolerance is not None and not 0 < tolerance < 0.5:
            raise ValueError(f"tolerance must lie in (0, 0.5); got {tolerance}.")
        self._group_moves_requested = bool(group_moves)
        super().__init__(vars, **kwargs)
        if tolerance is None:
            tolerance = default_tolerance(self.tall_data.ndim)
        self.design = None
        if batch_size is None or epsilon is None:
            self.design = default_design(self.tall_data.n_data, tolerance)
            batch_size = self.design.batch_size if batch_size is None else batch_size
            epsilon = self.design.epsilon if epsilon is None else epsilon
        self.settings = AustereSettings(
            batch_size=int(batch_size), epsilon=float(epsilon), temperature=self.temperature
        )
        self._rows = UsedRows(self.tall_data.n_data)
        self._init_group_moves(group_moves)

    def _group_test(self) -> GroupAustereTest:
        return GroupAustereTest(self.settings.epsilon)

    def _default_steps(self) -> int:
        if self.tall_data.ndim > HIGH_DIM:
            return HIGH_DIM_STEPS_PER_DRAW
        return self.default_steps_per_draw

    def _transition(self, state: ChainState):
        if self.proposal is None:  # a model of groups and nothing shared: sweeps alone
            state, sweep = self._group_sweep(state)
            accept, rows = sweep.group_accept, sweep.group_rows
            return state, AustereInfo(accept > 0, math.nan, rows, 2 * rows, math.nan, accept)
        proposal, log_q_ratio = self._propose(state)
        state, info = austere_kernel(
            self.rng,
            state,
            proposal,
            log_q_ratio,
            self.target,
            self.settings,
            rows=self._rows,
        )
        return self._then_sweep(state, info)

    def _stats(self, infos: list) -> dict:
        if len(infos) == 1:
            return super()._stats(infos)
        # Sum/mean/any as the base class does; t_stat is that of the last inner test.
        stats = super()._stats([replace(info, t_stat=0.0) for info in infos])
        stats["t_stat"] = infos[-1].t_stat
        return stats
