"""The MinibatchBarker step method."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pymc_minibatch_mh.kernels.barker import BarkerInfo, BarkerSettings, barker_kernel
from pymc_minibatch_mh.kernels.correction import CorrectionTable, load_default_correction
from pymc_minibatch_mh.kernels.group_minibatch import GroupBarkerTest
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.step_methods.base import COMMON_STATS, MinibatchStep
from pymc_minibatch_mh.step_methods.group_moves import GroupMoves


class MinibatchBarker(GroupMoves, MinibatchStep):
    """Minibatch Barker MH test with a normal + correction decomposition (**approximate**).

    Each step proposes a move in the unconstrained space (see ``proposal``) and
    decides with the minibatch Barker test of Seita et al.: the batch grows by
    ``batch_size`` (indices drawn with replacement) until the variance of the
    log-ratio estimate ``Delta*`` is below 1 (and, with ``delta``, until the CLT
    error bound is below ``delta``); then ``Delta* + X_nc + X_corr > 0`` decides.
    If the batch would reach N, the exact Barker test on the full data is used.

    The method is approximate: each decision can differ from the exact Barker
    test by the CLT error of the minibatch mean (bounded per draw by the
    ``clt_error`` stat, a bound often above 1 at small batches, then uninformative)
    plus the 8.9e-4 sup error of the correction table. At
    temperature 1 with a well-scaled proposal the batch tends towards N unless
    the proposal is small; the batch shrinks as ``temperature**-2`` and
    ``scaling**2``; control variates (on by default) remove most of that growth.

    Parameters
    ----------
    vars : list, optional
        Variables to sample. Default: every continuous free variable of the model,
        hyperparameters included (their prior is cheap to evaluate, and leaving them to
        NUTS would make NUTS read the full data at every leapfrog step). Discrete
        variables are left to PyMC's other step methods.
    batch_size : int, default 100
        First batch size and growth increment ``m``.
    delta : float, optional
        Tolerance on the CLT error bound of each test. Off by default: with
        Gaussian increments the bound is ``>= 11.8 / sqrt(b)``, so it only bites
        for ``delta`` of order ``0.1-1``.
    temperature : float, default 1
        ``K``: the likelihood is raised to ``1/K``. The prior is not tempered.
    scaling : float, optional
        Initial scale of the random-walk moves, or the leapfrog step size of the HMC
        moves of ``"auto"`` with control variates (default ``d ** -0.25``, whitened).
        Default ``2.38 / sqrt(d)`` for ``"auto"`` without control variates and
        ``"laplace"``; for ``"rw"`` ``2.38 * sqrt(K / (N d))`` without
        ``proposal_cov`` (the usual posterior scale for tall data), else ``2.38 / sqrt(d)``;
        1 for ``"independent"``.
    proposal : {"auto", "rw", "laplace", "independent"}, default "auto"
        ``"auto"``: at every iteration, with probability ``p`` an independence move (a
        multivariate Student-t with 7 degrees of freedom around the reference point with
        its Laplace covariance) and otherwise a local move. With control variates the
        local move is 10 HMC transitions on the surrogate posterior (prior plus Taylor
        proxy: no data), a valid MH proposal whose minibatch test only decides on the
        proxy's residuals (surrogate transition method); its step size is tuned to 80 %
        acceptance on the surrogate. Without them it is a random walk with the Laplace
        covariance. At the end of each tuning window (100, 200, 400, ... iterations) the
        local move takes the covariance of the window's draws (shrunk towards the one in
        use with weight ``count / (count + 10 d)``); ``p`` follows the acceptance rate of the
        independence moves (between 0.2 and 0.8), and when that rate is below a tenth of
        the best the rule allows (0.05 for Barker's, 0.1 for Metropolis') the
        independence proposal is refitted to the window's mean and covariance. On
        near-Gaussian posteriors this proposes nearly independent draws; where the
        Gaussian fit is poor the local moves keep the chain moving. Falls back to
        ``"rw"`` (with a warning) when the log posterior is not concave at the reference
        point. ``"rw"``: Gaussian random walk (covariance ``proposal_cov``, or adapted
        while tuning), no MAP search unless control variates need it. ``"laplace"``:
        random walk with the Laplace covariance. ``"independent"``: independence moves
        only (mixes badly on multimodal or strongly non-Gaussian posteriors).
    proposal_cov : array, optional
        Proposal covariance (matrix) or variances (vector) in the unconstrained space
        (``proposal="rw"`` only).
    control_variates : bool, optional
        Subsample only the residuals of a second-order Taylor expansion of each
        per-datum log-likelihood around the reference point; the expansion's full-data
        sum enters exactly (one pass over the data). At temperature 1 this shrinks the
        variance of the log-ratio estimate by orders of magnitude on near-Gaussian
        posteriors, so batches stay small. Default (None): on whenever every free
        variable of the likelihood is in the step's block; otherwise off, with a warning
        that says why. ``True`` raises if that is not the case.
    reference_point : dict, optional
        The expansion point of the control variates and centre of the Gaussian fit, as a
        point of the model (value-variable names, e.g. from :func:`pymc.find_MAP`).
        Default: the posterior mode, found by Newton steps whose full-data passes give
        the Taylor sums as well (:func:`pymc.find_MAP` when the block is not the whole
        model, or if Newton does not converge).
    recentre : bool, optional
        Where the control variates are expanded while tuning. Default (None): at the end
        of a tuning window whose mean lies more than about one posterior sd from the
        expansion point (beyond Monte Carlo noise), or whose independence moves were
        rarely accepted, the proxy is re-expanded at the window's mean (one pass over the
        data per recentring, counted in ``n_data_passes``). ``True``: once, at the end of
        tuning, at the mean of the latest tuning iterations. ``False``: never. The proxy
        is fixed after tuning.
    start_at_reference : bool, default True
        When there is a reference point and the chain starts by tuning, replace its
        initial point by a draw from the Laplace approximation at the reference point,
        where the control variates are accurate; this shortens burn-in (tuning draws are
        discarded anyway).
    target_accept : float, default 0.158
        Acceptance rate of the random-walk moves targeted while tuning ``scaling``.
        Barker's rule accepts less often than Metropolis'; 0.158 is its optimal rate for
        random-walk proposals in high dimension (Agrawal et al. 2023).
    tune : bool, default True
        Adapt the proposal during PyMC's tuning phase (never after it).
    adapt_cov : bool, optional
        While tuning, replace the random-walk covariance by the sample covariance of
        the chain over doubling windows (100, 200, 400, ... iterations), as Stan
        does for its mass matrix. Default: on for ``"auto"`` and ``"rw"``.
    steps_per_draw : int, optional
        Inner MH iterations per PyMC draw (amortises PyMC's per-draw overhead).
        Stats are summed (``batch_size``, ``n_lik_evals``), averaged (``accept``),
        OR-ed (``accepted``) or maximised (``delta_var``, ``clt_error``) over them.
        Default 3 here (each other step documents its own), and 1 for every step with
        control variates on a likelihood summed exactly (see the base class).
    correction : CorrectionTable, optional
        Correction distribution; default the shipped ``C_1`` (n_grid 4000, V 20, lambda 10).
    group_moves : bool, default True
        In a multilevel model whose rows fall into groups with effects of their own (given
        the shared coordinates independent between groups): follow every move of the shared
        coordinates by a sweep that moves every group's effects by a random walk and
        decides each group by the minibatch Barker test on rows of its own group, 3, 6,
        12, ... of them until the estimate's variance is below the correction's, or all of
        them (:mod:`pymc_minibatch_mh.kernels.group_minibatch`; one array operation for
        all groups). The groups' scale is tuned to an acceptance of 0.27.
        ``group_moves_unavailable`` says why a model has no sweep.
    data_dim : str, optional
        Name of the model dimension that indexes data points (checked).
    progressbar : bool, default True
        Show progress of the one-off precomputations (MAP, full-data Taylor sums).
    model, rng, initial_point, compile_kwargs, blocked
        As for :class:`pymc.Metropolis`.

    Notes
    -----
    Sample stats: ``accepted`` (0.0 or 1.0), ``accept`` (Barker probability at
    ``Delta*``), ``batch_size`` (data points evaluated by the step, its group sweeps' draws
    included), ``n_lik_evals``, ``group_accept`` (the share of groups a sweep accepted, NaN
    without sweeps),
    ``scaling``, ``delta_var`` (``s^2`` of ``Delta*`` at the decision) and ``clt_error``
    (the Berry-Esseen-type bound of :func:`~pymc_minibatch_mh.kernels.barker.clt_error_bound`
    on the decision's batch: an upper bound on the distance of the batch mean's
    distribution from the normal one, which at the small batches control variates allow is
    often above 1 and then says nothing; the error it bounds is usually far smaller).

    After tuning, every step of this package checks its chain at draws 200, 400, 800,
    ... and logs a warning through PyMC (once per problem and chain) when the chain is
    stuck (acceptance below 1 %), when batches read more than half of N on average, or
    when the control-variate proxy no longer fits where the chain is (the log-ratio
    noise is more than 10 times its value at the reference point). ``n_data_passes``
    counts the full passes over the data made so far (the Newton search for the mode
    included), ``setup_s`` and ``compile_s`` the construction and compilation time, and
    ``setup_cache`` whether the construction found its compiled functions in the on-disk
    cache (``"warm"``) or compiled them (``"cold"``).

    References
    ----------
    .. [1] Seita, D., Pan, X., Chen, H., Canny, J. "An Efficient Minibatch
       Acceptance Test for Metropolis-Hastings", UAI 2017.
    .. [2] Agrawal, S., Vats, D., Łatuszyński, K., Roberts, G. O. "Optimal
       scaling of MCMC beyond Metropolis", Adv. Appl. Probab. 55, 2023.
    .. [3] Christen, J. A., Fox, C. "Markov chain Monte Carlo using an approximation",
       J. Comput. Graph. Stat. 14, 2005 (the surrogate moves).

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_minibatch_mh import MinibatchBarker
    >>> y = np.random.default_rng(0).normal(1.0, 1.0, size=20_000)
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 10)
    ...     _ = pm.Normal("y", mu, 1.0, observed=y)
    ...     idata = pm.sample(step=MinibatchBarker(), draws=200, tune=200, chains=1,
    ...                       progressbar=False, random_seed=1)  # doctest: +SKIP
    """

    name = "minibatch_barker"
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "delta_var": (np.float64, []),
        "clt_error": (np.float64, []),
        "group_accept": (np.float64, []),
    }
    default_target_accept = 0.158
    # Barker's rule accepts less often than Metropolis' at the same scale: the groups'
    # 0.4 (Metropolis) times 0.158 / 0.234, the two rules' optimal rates in high dimension.
    group_target_accept = 0.27
    best_independent_rate = 0.5
    # Barker's rule accepts at most about half of the good independence moves; three MH
    # steps per draw (about 300 rows with control variates) brought the ESS of 2 x 1000
    # draws from 300-450 to about 1000 on the regressions of the statistical suite.
    default_steps_per_draw = 3
    # The same holds for the exact flow's moves (logistic regression, N = 10^6, D = 11, 2 x
    # 1000 draws: smallest ESS 782 with one step per draw, 1662 with three).
    flow_steps_per_draw = 3

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        batch_size: int = 100,
        delta: float | None = None,
        correction: CorrectionTable | None = None,
        group_moves: bool = True,
        **kwargs,
    ):
        if int(batch_size) != batch_size or batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2; got {batch_size}.")
        if delta is not None and not delta > 0:
            raise ValueError(f"delta must be positive (or None to disable); got {delta}.")
        self._group_moves_requested = bool(group_moves)
        super().__init__(vars, **kwargs)
        self.settings = BarkerSettings(
            batch_size=int(batch_size),
            temperature=self.temperature,
            delta=delta,
            table=correction if correction is not None else load_default_correction(),
        )
        self._init_group_moves(group_moves)

    def _group_test(self) -> GroupBarkerTest:
        return GroupBarkerTest(self.settings.table)

    def _transition(self, state: ChainState):
        if self.proposal is None:  # a model of groups and nothing shared: sweeps alone
            state, sweep = self._group_sweep(state)
            accept, rows = sweep.group_accept, sweep.group_rows
            return state, BarkerInfo(accept > 0, accept, rows, 2 * rows, 0.0, math.nan, accept)
        proposal, log_q_ratio = self._propose(state)
        state, info = barker_kernel(
            self.rng, state, proposal, log_q_ratio, self.target, self.settings
        )
        return self._then_sweep(state, info)
