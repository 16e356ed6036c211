"""The TunaMH step method (exact Poisson-minibatch Metropolis–Hastings)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pymc as pm
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.step_methods.state import dataclass_state
from pytensor.tensor.random.basic import UniformRV

from pymc_minibatch_mh.bounds.excluded_mass import GROWTH_FACTOR
from pymc_minibatch_mh.bounds.lipschitz import (
    EuclideanMetric,
    LipschitzBound,
    UnsupportedBound,
)
from pymc_minibatch_mh.bounds.row_cells import (
    CellTable,
    likelihood_row_supports,
    row_cells_for,
)
from pymc_minibatch_mh.bounds.taylor_remainder import (
    remainder_bound_unavailable,
    taylor_remainder_bound,
)
from pymc_minibatch_mh.bounds.trust_region import RADIUS_MARGIN, default_radius, grown_shape
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.families.registry import family_described, family_record
from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow, ScaleAdaptation
from pymc_minibatch_mh.kernels.group_sweep import group_tuna_sweep
from pymc_minibatch_mh.kernels.proposals import ProposalMixture
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.kernels.tuna import (
    BOUND_ATOL,
    BOUND_RTOL,
    ChiAdaptation,
    PairBound,
    TunaInfo,
    TunaSettings,
    tuna_kernel,
)
from pymc_minibatch_mh.kernels.weighted_index import CumulativeTable
from pymc_minibatch_mh.likelihood.glm_likelihoods import DataSetsOfDifferentLengths
from pymc_minibatch_mh.likelihood.graph_tools import ancestors
from pymc_minibatch_mh.likelihood.linear_predictor import (
    UnsupportedLikelihood,
)
from pymc_minibatch_mh.step_methods.base import COMMON_STATS, MinibatchStep, MinibatchStepState
from pymc_minibatch_mh.step_methods.construction import normal_with_free_scale
from pymc_minibatch_mh.step_methods.group_moves import GroupMoves
from pymc_minibatch_mh.step_methods.region_check import (
    check_region,
    cover_flat_directions,
    posterior_shape,
    tuning_spread,
)

_EXPLICIT_BOUND_HINT = (
    "Pass the bound explicitly: `c=` an array of N per-datum constants and `metric=` a "
    "symmetric callable metric(q, q_new) -> float such that "
    "|log p(y_i | q) - log p(y_i | q_new)| <= c[i] * metric(q, q_new) for every datum i and "
    "all parameter vectors q, q_new the chain can visit (q is the raveled unconstrained value "
    "of the sampled variables {names}, length {ndim}; the constants bound the untempered "
    "log-likelihood, TunaMH divides them by the temperature). Without `metric=` the Euclidean "
    "norm ||q - q_new|| is used. Alternatively pass `bound=LipschitzBound(c, metric)` "
    "(pymc_minibatch_mh.bounds.lipschitz), or use MinibatchBarker / Austere, which need no bound."
)
# Pseudo-proposals drawn to seed the chi window when it is empty (no data are read).
_PILOT_PROPOSALS = 100
# Bound probes at construction: pairs (q0, q0 + scale * z) around the initial point; a
# derived (automatic) bound is probed on _PROBE_ROWS random rows, a user-given one on every
# row (one pass per pair, as Dask tasks for chunked data).
_PROBE_SCALES = (1e-3, 1e-1, 1.0)
_PROBE_ROWS = 2000
# chi used when every recent (C M)^2 is 0 (e.g. C = 0): the batch is empty whatever chi is.
_CHI_WHEN_IRRELEVANT = 1.0


@dataclass_state
class TunaStepState(MinibatchStepState):
    bound: LipschitzBound
    index_table: CumulativeTable | None
    chi_adaptation: ChiAdaptation | None
    previous_chi_adaptation: ChiAdaptation | None
    region_shape: np.ndarray | None
    excluded_mass: float
    tuning_spread: CovarianceWindow
    group_adaptation: ScaleAdaptation


class TunaMH(GroupMoves, MinibatchStep):
    """TunaMH: exact minibatch MH with a Poisson number of data points per step (**exact**).

    Each step proposes a move ``q'`` in the unconstrained space, draws
    ``B ~ Poisson(chi C^2 M^2 + C M)`` data indices with probability ``c_i / C`` (binary
    search in their cumulative sums), keeps each with a probability that favours data
    whose energy rises, and accepts with an MH ratio built from the kept
    data (artanh terms), the exact prior ratio and the proposal ratio. The chain is
    reversible with respect to the exact posterior. Here ``c_i`` and ``M`` satisfy
    ``|log p(y_i | q) - log p(y_i | q')| <= c_i M(q, q')``, ``C = sum c_i / K`` at
    temperature ``K``. When ``chi C^2 M^2 + C M > N`` the step is a full-data MH step.

    Bounds are found automatically by inspecting the model when its likelihood is
    a known family of a linear predictor ``eta = X q + o`` (affine in the sampled
    block, intercepts included). Without control variates (``control_variates=False``)
    they bound the log-likelihood itself:

    * Bernoulli with logit link: ``c_i = ||x_i||``;
    * Student-t with fixed ``nu`` and ``sigma``: ``c_i = (nu + 1) ||x_i|| / (2 sqrt(nu) sigma)``;
    * Categorical with softmax link: ``c_i = sqrt(2) ||x_i|| ||A||``;
    * Poisson with log link, Normal with fixed ``sigma``: only when every sampled
      variable has an untransformed ``pm.Uniform`` prior (a bounded box), with the
      largest slope over that box. Otherwise the step refuses, as it does for a free
      scale ``sigma``.

    ``M`` is ``||L^{-1}(q - q')||`` with ``L`` the Cholesky factor of the proposal
    covariance (``c_i`` then uses ``L^T x_i``), or the Euclidean norm when the
    proposal is isotropic. Other likelihoods need ``c=`` and ``metric=``.

    With control variates (the default whenever every free variable of the likelihood is
    in the block) the subsampled energies are the remainders of a second-order Taylor
    expansion of each per-datum log-likelihood around the reference point (the MAP by
    default), whose full-data sum enters the ratio exactly. They are bounded through the
    third derivative of the log-likelihood in the linear predictor (and ``log sigma``),
    with norms whitened by the Laplace covariance
    (:mod:`pymc_minibatch_mh.bounds.taylor_remainder` derives each bound):

    * Bernoulli-logit, Binomial-logit with fixed trials per row (``n`` times the
      Bernoulli bound), Categorical-softmax (a bound on the K logits), Normal and
      Student-t with fixed ``sigma``, negative binomial (``mu=pm.math.exp(eta)``) with
      fixed ``alpha``: global bounds;
    * Poisson with log link, Gamma with a log-link mean (fixed or free shape), Beta with a
      logit-link mean (fixed or free precision), zero-inflated and hurdle Poisson with
      a log-link mean (fixed or free ``psi``), zero-inflated and hurdle negative binomial
      (each of ``alpha`` and ``psi`` fixed or free), ``OrderedLogistic`` / ``OrderedProbit``
      with cutpoints free under PyMC's ordered transform (or fixed), Normal /
      Student-t (fixed ``nu``) with a free scale ``sigma`` shared by all data or one per
      row whose log is affine (``sigma=pm.math.exp(c + Z @ g)``, ``sigma[group]``),
      negative binomial with a free ``alpha``: bounds on a **trust region**, the ellipsoid of
      ``trust_radius`` Laplace standard deviations around the reference point.
      Proposals outside it are rejected without reading data, so the chain is exact for
      the posterior restricted to the region; the stat ``region_exits`` counts such
      proposals. At the end of tuning each chain estimates the posterior mass outside
      the region by importance sampling (stat ``excluded_mass``, NaN without a region
      and during tuning,
      :mod:`pymc_minibatch_mh.bounds.excluded_mass`) and, with the default radius, grows
      the region until the estimate plus three standard errors is at most 1e-6: first
      reshaped to the tuning draws' spread in the directions where that is more than
      twice the Laplace variance, then those directions widened 1.5-fold (up to 4
      growths; without such a direction, the whole ellipsoid;
      :func:`~pymc_minibatch_mh.bounds.trust_region.grown_shape`); it warns if that fails,
      or if a proposal leaves the region while the chain is within 4 sds of its boundary;
    * several observed variables over the same rows, each of these families: the sum of
      their bounds (they share the metric and the region).

    Near the posterior mode ``C M`` is then of order ``N^{-1/2}``, so most steps read no
    data at all, and the chain stays exact.

    Moves (``proposal="auto"``): with control variates, a mixture of independence moves
    (multivariate t around the reference point) and 10 HMC transitions on the surrogate
    posterior (prior plus Taylor proxy, no data read), as for
    :class:`~pymc_minibatch_mh.MinibatchBarker`. The HMC transitions leave the surrogate
    invariant, so their proposal ratio is the surrogate's density ratio and the TunaMH
    test only has to decide on the residuals' differences, which the remainder bound
    covers; the chain stays exact. In many dimensions these moves go as far as an
    independent draw in one step where a random walk needs of the order of D steps
    (logistic regression with D = 101, N = 10^5: min ESS 663 of 2000 draws from 1975 rows
    per draw, against 564 from 6820 with the random walk). Without control variates the
    default is a random walk with the Laplace covariance.

    Parameters
    ----------
    vars : list, optional
        Variables to sample. Default: every continuous free variable of the model.
    chi : float, optional
        ``chi > 0``. Default (None): chosen while tuning by the paper's heuristic,
        the largest ``chi`` that keeps ``chi C^2 M^2 <= 1`` for 90% of recent proposals
        (so the batch stays near its floor ``C M``), then fixed. Without tuning it is
        set once from 100 pseudo-proposals at the first step. If the proposal changes on
        the last tuning step (a covariance window closes), the ``chi`` of the window
        before the change is kept. When every ``C M`` is 0 (e.g. ``C = 0`` with control
        variates on a Gaussian likelihood) ``chi`` is irrelevant and reported as 1. The
        heuristic minimises the data read per step; when the ratio noise dominates
        (large ``C M``), a larger ``chi``, about ``1 / (C M)`` (a batch twice its floor),
        divides the noise variance by about 3, allows a larger step and usually gives more
        ESS per second (see ``benchmarks/results/tuna_batch_size.md``). For a guaranteed
        spectral-gap ratio ``kappa`` use
        :func:`~pymc_minibatch_mh.bounds.lipschitz.chi_from_kappa`.
    bound : LipschitzBound, optional
        Explicit constants and metric (untempered log-likelihood), optionally with a
        ``box`` on which they hold: the chain then never leaves the box (it samples the
        posterior restricted to it), and the initial point must lie in it.
    c : array_like, optional
        Per-datum constants (shape ``(N,)``), instead of ``bound``.
    metric : callable, optional
        ``metric(q, q_new) -> float`` with ``c``; default the Euclidean norm.
    trust_radius : float, optional
        Radius (in Laplace standard deviations) of the trust region used by the
        remainder bounds that need one (see above). Default ``sqrt(D) + 8``, grown after
        tuning while the estimated excluded mass is above 1e-6; a radius given here is
        kept (the estimate is still reported, and a warning given). Larger values give
        larger constants (more data per step) and a region further from the bulk.
    row_cells : bool, default True
        With control variates, when each row touches the shared coordinates plus a few of
        its own (group intercepts and slopes of a multilevel model): group the rows that
        touch the same coordinates into cells and bound each row through the Laplace
        covariance of its cell's coordinates only
        (:mod:`pymc_minibatch_mh.bounds.row_cells`), so the data read per step grows with
        the cell's size instead of the block's. The trust region, where one is needed, is
        then every cell's ellipsoid of ``sqrt(|T|) + 8`` Laplace sds. Kept off when there
        are more than 20,000 cells or fewer than 4 rows per cell. ``False`` uses one metric
        for the whole block.
    group_moves : bool, default True
        With row cells whose groups have coordinates of their own (the effects of a
        multilevel model, given the shared coordinates independent between groups):
        follow every move by a sweep that moves every group's effects by a random walk
        and accepts or rejects each group by its own TunaMH test on its own rows
        (:mod:`pymc_minibatch_mh.kernels.group_sweep`; one array operation for all
        groups). Exact; the groups' scale is tuned to an acceptance of 0.4.
        ``group_moves_unavailable`` says why a model has no sweep.
    precondition : bool, default True
        For automatic bounds: while tuning, whiten the metric with the tuned proposal
        covariance (rebuilding ``c`` and its cumulative table when it changes). Both are
        fixed when tuning ends, so the chain is exact. Keeps ``C M`` small when
        covariates have very different scales.
    temperature : float, default 1
        ``K``: the likelihood is raised to ``1/K`` (energies ``-log p / K``).
    target_accept : float, default 0.25
        Acceptance rate targeted while tuning ``scaling``: the paper's choice for its
        robust-regression experiment, close to the random-walk optimum 0.234 that
        applies when ``C M`` is small (little extra noise in the ratio). When the
        minibatch noise dominates, a lower target (about 0.07) gives more movement per
        step at a larger batch.
    scaling, proposal, proposal_cov, control_variates, reference_point, recentre, \
start_at_reference, tune, adapt_cov, data_dim, progressbar
        As for :class:`~pymc_minibatch_mh.MinibatchBarker`; with ``control_variates=True``
        the bound is the Taylor-remainder bound described above, and ``bound``/``c``
        must not be given (when they are, control variates are off unless asked for).
    steps_per_draw : int, optional
        MH steps per PyMC draw (the stats sum over them). Default 2 with the HMC moves of
        ``proposal="auto"`` with control variates, else 5 (random-walk steps read fewer rows
        and move less); 1 on a Normal likelihood summed exactly (one HMC transition on the
        exact posterior per draw).
    model, rng, initial_point, compile_kwargs, blocked
        As for :class:`pymc.Metropolis`.

    Notes
    -----
    Sample stats: ``accepted``, ``accept`` (``min(1, r)``), ``batch_size`` (the Poisson
    draw ``B``, ejected points included, or ``N`` on a full-data step), ``n_lik_evals``
    (``2 B``), ``poisson_draws`` (``B``; 0 on a full-data step), ``n_kept``, ``scaling``,
    ``chi``, ``region_exits`` (proposals outside the box or trust region of the
    bound) and ``group_accept`` (the share of groups a sweep accepted, NaN without
    sweeps; their rows count in ``batch_size``). With ``steps_per_draw > 1`` counts are
    summed over the inner steps.

    Cost and limits: ``E[B] = chi C^2 M^2 + C M``. With the Lipschitz bounds above,
    ``C M`` grows like ``sqrt(N / K)`` at the usual random-walk scale, and the noise of
    ``log r`` like ``C M`` times the mean squared per-datum slope; to keep acceptance
    up, tuning then shrinks the step. TunaMH pays off for tempered posteriors (large
    ``K``) or when ``C M`` is small; at ``K = 1`` on very tall data, expect small steps
    or batches near ``N``. The bound is checked on every datum drawn: a violated
    bound raises an error instead of biasing the chain. A user-given bound is also
    checked at construction on every datum (one streaming pass over the data, at three
    moves of sizes 1e-3, 0.1 and 1 from the initial point); derived bounds are
    spot-checked there on 2000 rows. With a bound that has a ``box``, proposals outside
    it are rejected without reading data, so the chain stays in the box.

    References
    ----------
    .. [1] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact
       Minibatch Metropolis-Hastings", NeurIPS 2020.
    .. [2] Walker, A. J. "An efficient method for generating discrete random
       variables with general distributions", ACM TOMS 3(3), 1977.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_minibatch_mh import TunaMH
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(20_000, 2))
    >>> y = rng.random(20_000) < 1 / (1 + np.exp(-x @ [1.0, -0.5]))
    >>> with pm.Model():
    ...     beta = pm.Normal("beta", 0, 5, shape=2)
    ...     _ = pm.Bernoulli("y", logit_p=x @ beta, observed=y)
    ...     idata = pm.sample(step=TunaMH(temperature=100.0), draws=500, tune=500,
    ...                       chains=1, progressbar=False)  # doctest: +SKIP
    """

    # With HMC moves on the surrogate (the default with control variates) two steps per
    # draw give nearly independent draws (20-group hierarchy, N = 2e4: min ESS 441, 1035
    # and 1646 of 2000 with 1, 2 and 5 steps, at 688, 1330 and 3302 rows per draw). Random
    # walks read a handful of rows per step, so several per draw cost little and lift the
    # ESS per draw (logistic regression, N = 10^6, 2 x 1000 draws: ESS 672 with 1 step per
    # draw, 1517 with 5, in 1.4 s of sampling).
    default_steps_per_draw = 2
    random_walk_steps_per_draw = 5
    name = "tuna_mh"
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "poisson_draws": (np.int64, []),
        "n_kept": (np.int64, []),
        "chi": (np.float64, []),
        "region_exits": (np.int64, []),
        "excluded_mass": (np.float64, []),
        "group_accept": (np.float64, []),
    }
    default_target_accept = 0.25
    # The remainder bounds are derived for a Taylor proxy in the block coordinates.
    proxy_in_image = False
    _state_class = TunaStepState

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        chi: float | None = None,
        bound: LipschitzBound | None = None,
        c: np.ndarray | None = None,
        metric: Callable[[np.ndarray, np.ndarray], float] | None = None,
        precondition: bool = True,
        trust_radius: float | None = None,
        row_cells: bool = True,
        group_moves: bool = True,
        **kwargs,
    ):
        if trust_radius is not None and not (math.isfinite(trust_radius) and trust_radius > 0):
            raise ValueError(
                f"trust_radius must be a positive finite number (or None); got {trust_radius}."
            )
        self.trust_radius = trust_radius
        self.row_cells = bool(row_cells)
        self._row_supports = None
        self.region_shape = None
        self.excluded_mass = math.nan
        self._warned_region = False
        if chi is not None and not (math.isfinite(chi) and chi > 0):
            raise ValueError(f"chi must be a positive finite number (or None); got {chi}.")
        if bound is not None and (c is not None or metric is not None):
            raise ValueError("Pass either `bound=` or `c=` (with optional `metric=`), not both.")
        if metric is not None and c is None:
            raise ValueError("`metric=` needs the per-datum constants `c=` as well.")
        if bound is not None and not isinstance(bound, LipschitzBound):
            raise TypeError(
                f"bound must be a LipschitzBound (or pass `c=` and `metric=`); got "
                f"{type(bound).__name__}."
            )
        if kwargs.get("control_variates") and (bound is not None or c is not None):
            raise ValueError(
                "With control_variates=True TunaMH derives its bound from the model (a bound "
                "on the Taylor remainders, not on the log-likelihood); explicit `bound=` / `c=` "
                "are only supported without control variates."
            )
        user_bound = bound is not None or c is not None
        if user_bound and kwargs.get("control_variates") is None:
            # An explicit bound is on the log-likelihood itself, not on Taylor remainders.
            kwargs["control_variates"] = False
        model = pm.modelcontext(kwargs.pop("model", None))
        initial_point = kwargs.pop("initial_point", None)
        if initial_point is None:
            initial_point = model.initial_point()
        self._user_bound = user_bound
        self._lp = None
        self._box = None
        super().__init__(vars, model=model, initial_point=initial_point, **kwargs)

        n_data = self.tall_data.n_data
        self._fixed_chi = None if chi is None else float(chi)
        if c is not None:
            bound = LipschitzBound(c, metric if metric is not None else EuclideanMetric())
        # With control variates the bound is whitened once by the Laplace covariance.
        self.precondition = (
            bool(precondition) and bound is None and c is None and not self.control_variates
        )
        if self.control_variates:
            bound = self._remainder_bound(self._lp, self.reference.reference)
        elif bound is None:
            chol = self._untuned_proposal_chol() if self.precondition else None
            bound = LipschitzBound.from_linear_predictor(self._lp, chol=chol, box=self._box)
        if bound.n_data != n_data:
            raise ValueError(
                f"The bound has {bound.n_data} constants but the model has {n_data} data points."
            )
        q0 = np.concatenate(
            [np.asarray(initial_point[v.name], dtype=np.float64).ravel() for v in self.vars]
        )
        if bound.box is not None:
            _check_start_in_box(bound, q0, list(self.tall_data.var_names))
        # A derived bound is spot-checked; a user bound is checked on every row.
        self._untuned_bound = bound
        self.tuning_spread = tuning_spread(self.tall_data.ndim)
        self._untuned_table = _index_table_for(bound)
        if self._exact_sum is None:  # an exact sum has no bound to probe
            self._probe_bound(bound, q0, all_rows=user_bound)
        self.bound = self._untuned_bound
        self.index_table = self._untuned_table
        self.chi_adaptation = None if self._fixed_chi is not None else ChiAdaptation()
        # The window dropped when the proposal last changed (kept for stop_tuning).
        self.previous_chi_adaptation = None
        self._last_cm2 = math.nan
        self._init_group_moves(group_moves)

    # ---------------------------------------------------------------- construction hooks
    def _default_steps(self) -> int:
        if self._surrogate is None:  # random-walk moves: more of them per draw
            return self.random_walk_steps_per_draw
        return self.default_steps_per_draw

    def _check_applicable(self, model, vars, initial_point) -> None:
        """Before any pass over the data: recognise the likelihood (unless a bound is given)."""
        if not self._user_bound:
            self._lp = self._recognise(model, initial_point)

    def _control_variates_unavailable(self) -> str | None:
        reason = super()._control_variates_unavailable()
        if reason is not None:
            return reason
        if self._user_bound:
            return "an explicit bound (`bound=` / `c=`) is on the log-likelihood itself"
        return remainder_bound_unavailable(self._lp)

    def _auto_proposal(self, control_variates: bool) -> str:
        """Without control variates the Lipschitz bound grows with the move's length, so
        independence moves would read all N rows: the default is then a random walk with
        the Laplace covariance."""
        return "auto" if control_variates else "laplace"

    def _resolve_control_variates(self, requested: bool | None) -> bool:
        """Control variates as the base decides; without them (and without an explicit
        bound) the likelihood needs a Lipschitz bound, checked here before any data pass."""
        use = super()._resolve_control_variates(requested)
        if not use and not self._user_bound and self._lp.family == "composite":
            raise UnsupportedBound(
                f"TunaMH found several observed variables ({', '.join(self._lp.names)}); its "
                "bound for their sum needs control variates, which are off "
                f"({self._control_variates_unavailable() or 'control_variates=False'}). Use "
                "TunaMH() with control variates, or MinibatchBarker / Austere."
            )
        if not use and not self._user_bound and self._lp.scale_is_free:
            label, param = family_described(self._lp.family), family_record(self._lp.family).scale
            raise UnsupportedBound(
                f"TunaMH found a {label} likelihood with a free {param}, whose "
                f"log-density has no Lipschitz bound in log({param}); its bound needs control "
                "variates, which are off "
                f"({self._control_variates_unavailable() or 'control_variates=False'}). Use "
                "TunaMH() with control variates (the default when every free variable of the "
                f"likelihood is in the block), fix {param}, or use MinibatchBarker / Austere."
            )
        checked = not use and not self._user_bound  # the likelihood's own Lipschitz form
        lipschitz = family_record(self._lp.family).lipschitz if checked else None
        if checked and lipschitz is None:
            raise UnsupportedBound(
                f"TunaMH without control variates has no Lipschitz bound for a "
                f"{family_described(self._lp.family)} likelihood, and control variates are off "
                f"({self._control_variates_unavailable() or 'control_variates=False'}). Use "
                "TunaMH() with control variates, or MinibatchBarker / Austere."
            )
        if checked and lipschitz == "box":
            box, reason = _prior_box(self._model, self.vars, self._initial_point)
            if box is None:
                hint = _EXPLICIT_BOUND_HINT.format(
                    names=list(self.tall_data.var_names), ndim=self.tall_data.ndim
                )
                raise UnsupportedBound(
                    f"TunaMH found a {family_described(self._lp.family)} likelihood, whose "
                    "log-density is not "
                    "Lipschitz in the parameters on an unbounded space, and control variates "
                    f"are off ({self._control_variates_unavailable() or 'control_variates=False'})"
                    f"; moreover {reason}. Give every sampled variable an untransformed bounded "
                    "prior, e.g. pm.Uniform('b', -3, 3, default_transform=None), so the bound "
                    f"can use that box. Or: {hint}"
                )
            self._box = box
        return use

    # ---------------------------------------------------------------- bounds
    def _normal_linear_predictor(self, model, initial_point):
        """The likelihood recognised before any pass (none with a user bound)."""
        if self._user_bound:
            return None
        return normal_with_free_scale(self._lp, self)

    def _remainder_bound(self, lp, reference: np.ndarray, shape=None) -> LipschitzBound:
        """The Taylor-remainder bound around ``reference`` on the trust region of radius
        ``trust_radius`` (default ``sqrt(D) + 8``) and shape ``shape`` (default: the
        region grown after tuning, else the Laplace fit's)."""
        if self._exact_sum is not None:
            # The control variates' proxy is the log-likelihood itself: every residual is
            # 0, so c = 0 and no datum is ever drawn.
            return LipschitzBound(
                np.zeros(self.tall_data.n_data),
                EuclideanMetric(),
                description="none needed: the Normal log-likelihood is summed exactly from "
                "its sufficient statistics",
            )
        radius = self.trust_radius
        if radius is None:
            radius = default_radius(self.tall_data.ndim)
        if shape is None:
            shape = self._laplace_chol if self.region_shape is None else self.region_shape
        cells = None
        single = getattr(lp, "parts", None) is None and lp.family != "categorical_logit"
        if self.row_cells and single:
            if self._row_supports is None:
                self._row_supports = (likelihood_row_supports(lp),)
            cells = row_cells_for(lp, reference, shape, self._row_supports[0])
        try:
            return taylor_remainder_bound(lp, reference, chol=shape, radius=radius, cells=cells)
        except UnsupportedBound as err:
            raise UnsupportedBound(f"TunaMH with control_variates=True: {err}") from err

    def _recentre(self, position: np.ndarray) -> None:
        """Move the control variates, and the remainder bound with them (same ``c``)."""
        if self._exact_sum is not None:
            return  # exact at every point: nothing to move
        super()._recentre(position)
        self._set_bound(self._remainder_bound(self._lp, self.reference.reference))

    def _recognise(self, model, initial_point):
        """The likelihood as a linear predictor of the block, or a clear error."""
        hint = _EXPLICIT_BOUND_HINT.format(
            names=list(self.tall_data.var_names), ndim=self.tall_data.ndim
        )
        try:
            return self._recognise_linear_predictor(model, initial_point)
        except DataSetsOfDifferentLengths:
            raise
        except UnsupportedLikelihood as err:
            raise UnsupportedLikelihood(
                f"TunaMH could not build its bounds from the model: {err} {hint}"
            ) from err

    def _untuned_proposal_chol(self) -> np.ndarray | None:
        return _proposal_chol(self._untuned_proposal)

    def _probe_bound(self, bound: LipschitzBound, q0: np.ndarray, *, all_rows: bool) -> None:
        """Check the bound at a few pairs ``(q0, q0 + scale * z)`` (fixed seed).

        Parameters
        ----------
        bound : LipschitzBound
            The bound to check (untempered constants).
        q0 : ndarray
            The initial point (inside ``bound.box`` if there is one).
        all_rows : bool
            True: every row, one pass per pair (as Dask tasks for chunked data), for
            user-given bounds, whose constants may be wrong for any single datum. False:
            ``_PROBE_ROWS`` random rows, a cheap early warning for derived bounds.

        Pairs whose second point is outside the prior support are skipped (the kernel
        never evaluates them); with a box, the second point is clipped into it; with a
        trust region, the pairs join its centre to points 0.1, 1 and 0.9 radius away. The
        kernel checks every drawn datum during sampling as well.
        """
        n, ndim = self.tall_data.n_data, self.tall_data.ndim
        pair_rng = np.random.default_rng(0)
        pairs = []
        region = bound.region
        if region is not None:
            # Pairs from the centre to points 0.1, 1 and 0.9 radius away (whitened units).
            q0 = region.centre
        for scale in _PROBE_SCALES:
            z = pair_rng.standard_normal(ndim)
            if region is not None:
                length = {1e-3: 0.1, 1e-1: 1.0, 1.0: 0.9 * region.radius}[scale]
                q_new = q0 + region.chol @ (length * z / np.linalg.norm(z))
                pair = f"q the trust region's centre and q' {length:.3g} Laplace sds away"
            else:
                q_new = q0 + scale * z
                pair = f"q the initial point and q' = q + {scale:g} * z for a standard normal z"
            if bound.box is not None:
                q_new = np.clip(q_new, *bound.box)
            if not math.isfinite(self.tall_data.logprior(q_new)):
                continue  # outside the prior support: never evaluated by the kernel
            m, m_back = float(bound.metric(q0, q_new)), float(bound.metric(q_new, q0))
            if not (math.isfinite(m) and m >= 0 and abs(m - m_back) <= 1e-9 * (1 + m)):
                raise ValueError(
                    f"The TunaMH metric must be finite, non-negative and symmetric; got "
                    f"metric(q, q')={m!r}, metric(q', q)={m_back!r}."
                )
            pairs.append((pair, q_new, PairBound.between(bound, self._untuned_table, q0, q_new)))
        if not pairs:
            return
        target = self.target
        full_pass = getattr(target, "loglik_diff_full", None)
        if all_rows:
            # Every row, one pass per pair (Dask tasks for chunked data).
            chunks = (np.arange(n),)
            checked = f"all {n} data points are checked"
            advice = "Increase c[{i}], and check the constants of the other data likewise."
        else:
            rows = np.random.default_rng(1).choice(n, size=min(n, _PROBE_ROWS), replace=False)
            chunks = (rows,)
            checked = f"{rows.size} of {n} data points are spot-checked"
            advice = "The derived bound is wrong for this model: please report it."
        for idx in chunks:
            for pair, q_new, pair_bound in pairs:
                if all_rows and full_pass is not None:
                    diff = full_pass(q_new, q0)
                else:
                    diff = target.loglik_diff(q_new, q0, idx)
                diff = np.abs(np.asarray(diff, dtype=np.float64))
                record_rows(idx.size, n)
                limit = pair_bound.row_bounds(idx)
                if bound.exact_rows is not None:  # evaluated exactly, never drawn
                    limit = np.where(np.isin(idx, bound.exact_rows), np.inf, limit)
                bad = ~(diff <= limit * (1 + BOUND_RTOL) + BOUND_ATOL)  # NaN counts as bad
                if bad.any():
                    j = int(np.flatnonzero(bad)[0])
                    hint = _EXPLICIT_BOUND_HINT.format(
                        names=list(self.tall_data.var_names), ndim=ndim
                    )
                    raise ValueError(
                        f"The TunaMH bound ({bound.description}) does not hold: datum "
                        f"{int(idx[j])} has |log p(y_i|q) - log p(y_i|q')| = {diff[j]:.6g} > "
                        f"its bound c_i * M = {limit[j]:.6g}, with {pair} "
                        f"({checked}; {int(bad.sum())} of {idx.size} "
                        f"in this batch violate it). {advice.format(i=int(idx[j]))} {hint}"
                    )

    def _set_bound(self, bound: LipschitzBound) -> None:
        self.bound = bound
        self.index_table = _index_table_for(bound)

    # ---------------------------------------------------------------- PyMC hooks
    def reset_tuning(self) -> None:
        """Restore scale, covariance, bound and the automatic ``chi`` to their untuned state."""
        super().reset_tuning()
        self.bound = self._untuned_bound
        self.index_table = self._untuned_table
        self.chi_adaptation = None if self._fixed_chi is not None else ChiAdaptation()
        self.previous_chi_adaptation = None
        self._last_cm2 = math.nan
        self._warned_region = False
        self.region_shape = None
        self.excluded_mass = math.nan
        self.tuning_spread = tuning_spread(self.tall_data.ndim)

    def stop_tuning(self) -> None:
        """Fix ``chi``: the tuned window's, not a re-seed after a last-step proposal change.

        If the proposal (and with it the whitened bound) changed on the last tuning step,
        the ``chi`` window was just emptied; the window before the change, filled by the
        tuning moves, is restored. From now on the window is never updated, so ``chi`` is
        constant (if no window holds a value, e.g. without tuning, it is seeded once, at
        the first step).
        """
        adaptation = self.chi_adaptation
        if (
            self.tune
            and adaptation is not None
            and adaptation.count == 0
            and self.previous_chi_adaptation is not None
        ):
            self.chi_adaptation = self.previous_chi_adaptation
        super().stop_tuning()
        self._certify_region()

    def _certify_region(self) -> None:
        """After tuning (and recentring): estimate the posterior mass outside the trust
        region of the remainder bound and grow the region until it is negligible
        (:func:`~pymc_minibatch_mh.bounds.excluded_mass.grow_until_negligible`; a radius the
        user gave is kept); warn if it stays above
        :data:`~pymc_minibatch_mh.bounds.excluded_mass.NEGLIGIBLE_MASS`."""
        region = self.bound.region
        if region is None or not self.control_variates or self._user_bound:
            return

        spread, widened = posterior_shape(self, self.bound.region)
        if widened:
            cover_flat_directions(self, spread)

        def rebuild(factor):
            # The first growth reshapes the region alone (by the tuning draws' spread).
            shape = grown_shape(self._laplace_chol, spread, factor / GROWTH_FACTOR)
            return self._remainder_bound(self._lp, self.reference.reference, shape)

        grow = rebuild if self.trust_radius is None else None
        bound, _ = check_region(self, self.bound, rebuild=grow, shape=spread)
        if bound is not self.bound:
            self._set_bound(bound)
            self.region_shape = bound.region.chol

    def _adapt(self, position: np.ndarray, accept_prob: float) -> None:
        """Base tuning, then the whitened bound follows the proposal and ``chi`` the moves."""
        proposal_before = self.proposal
        super()._adapt(position, accept_prob)
        self.tuning_spread = self.tuning_spread.add(position)
        if self.precondition and self.proposal is not proposal_before:
            chol = _proposal_chol(self.proposal)
            self._set_bound(
                LipschitzBound.from_linear_predictor(self._lp, chol=chol, box=self._box)
            )
            if self.chi_adaptation is not None:  # (C M)^2 changed units: start afresh
                if self.chi_adaptation.count > 0:
                    self.previous_chi_adaptation = self.chi_adaptation
                self.chi_adaptation = ChiAdaptation()
                return
        if self.chi_adaptation is not None and math.isfinite(self._last_cm2):
            self.chi_adaptation = self.chi_adaptation.add(self._last_cm2)

    def _check_chain(self, position: np.ndarray, infos: list) -> SamplerWarning | None:
        """Base checks, plus one warning when, after tuning, a proposal leaves the trust
        region while the chain is near its boundary (posterior mass may lie outside).

        Independence proposals far in the tails leave the region now and then without
        meaning anything (they are rejected, as the posterior there is negligible); the
        chain itself within ``RADIUS_MARGIN / 2`` Laplace sds of the boundary does.
        """
        region = self.bound.region
        exits = sum(info.region_exits for info in infos)
        if exits and region is not None and not self._warned_region:
            margin = region.margin(position)
            if margin <= min(0.5 * RADIUS_MARGIN, 0.5 * region.radius):
                self._warned_region = True
                self._pending_warnings.append(
                    SamplerWarning(
                        WarningType.BAD_PARAMS,
                        f"TunaMH: the chain is {margin:.3g} Laplace sds from the boundary of "
                        f"the trust region (radius {region.radius:.3g}) on which its bound "
                        "holds, and a proposal beyond it was rejected. The chain is exact for "
                        "the posterior restricted to the region, and posterior mass may lie "
                        "outside: compare with the Laplace fit, or pass a larger "
                        "`trust_radius=`.",
                        "warn",
                    )
                )
        return super()._check_chain(position, infos)

    def _stats(self, infos: list) -> dict:
        stats = super()._stats(infos)
        stats["excluded_mass"] = self.excluded_mass
        return stats

    # ---------------------------------------------------------------- sampling
    @property
    def chi(self) -> float | None:
        """The ``chi`` of the next step (None until the automatic choice has data)."""
        if self._fixed_chi is not None:
            return self._fixed_chi
        return self.chi_adaptation.chi if self.chi_adaptation is not None else None

    def _cm2(self, position: np.ndarray, proposal: np.ndarray) -> float:
        """``B^2``, the squared sum of the proposal's per-datum bounds (``(C M)^2``)."""
        pair = PairBound.between(self.bound, self.index_table, position, proposal)
        total = pair.total / self.temperature
        return total * total

    def _chi_for_step(self, state: ChainState) -> float:
        chi = self.chi
        if chi is not None:
            return chi
        if self.bound.C == 0 or self.chi_adaptation.count > 0:
            # Every (C M)^2 is 0 (C = 0), or all recent ones were: the batch is empty
            # whatever chi is. No pilot proposals (they would find only zeros again).
            return _CHI_WHEN_IRRELEVANT
        # Empty window: seed it from pseudo-proposals (no data read, chain unchanged);
        # at most once per window, as the window is no longer empty afterwards.
        adaptation = self.chi_adaptation
        for _ in range(_PILOT_PROPOSALS):
            q_new, _ = self._propose(state)
            adaptation = adaptation.add(self._cm2(state.position, q_new))
        self.chi_adaptation = adaptation
        chi = adaptation.chi
        return _CHI_WHEN_IRRELEVANT if chi is None else chi

    def _transition(self, state: ChainState):
        if self.proposal is None:  # a model of groups and nothing shared: sweeps alone
            settings = TunaSettings(
                chi=self.chi or _CHI_WHEN_IRRELEVANT, temperature=self.temperature
            )
            state, sweep = self._group_sweep(state, settings)
            rows = sweep.group_rows
            accept = sweep.group_accept
            info = TunaInfo(accept > 0, accept, rows, 2 * rows, 0, 0, settings.chi, 0, accept)
            return state, info
        chi = self._chi_for_step(state)
        proposal, log_q_ratio = self._propose(state)
        if self.chi_adaptation is not None and self.tune and self.adapt:
            self._last_cm2 = self._cm2(state.position, proposal)
        settings = TunaSettings(chi=chi, temperature=self.temperature)
        state, info = tuna_kernel(
            self.rng,
            state,
            proposal,
            log_q_ratio,
            self.target,
            self.bound,
            settings,
            self.index_table,
        )
        return self._then_sweep(state, info, settings)

    # ---------------------------------------------------------------- group sweeps
    def _group_rows(self, model, initial_point):
        """The remainder bound's cells, and its rows without a constant."""
        return self.index_table, self.bound.exact_rows

    def _group_table(self):
        return self.index_table  # follows the bound (recentring, region growth)

    def _sweep_kernel(self, state: ChainState, table, settings: TunaSettings):
        """TunaMH's exact test on every group's rows."""
        return group_tuna_sweep(
            self.rng,
            state,
            self._group_blocks,
            self.group_adaptation.scaling,
            self.target,
            self.bound,
            table,
            self._group_prior,
            settings,
        )


def _proposal_chol(proposal) -> np.ndarray | None:
    """The covariance factor of a proposal's random-walk part (None: isotropic)."""
    if isinstance(proposal, ProposalMixture):
        proposal = proposal.random_walk
    return getattr(proposal, "chol", None)


def _index_table_for(bound: LipschitzBound) -> CumulativeTable | CellTable | None:
    if bound.C == 0:
        return None
    if bound.cells is not None:
        return CellTable.from_constants(bound.cells, bound.c)
    return CumulativeTable.from_weights(bound.c)


def _check_start_in_box(bound: LipschitzBound, q0: np.ndarray, names: list[str]) -> None:
    """The box must match the block and contain the initial point: outside the box the
    kernel treats the density as 0, so a chain started there would wait for a proposal
    that lands inside (and the probe pairs start at the initial point)."""
    lo, hi = bound.box
    if lo.size != q0.size:
        raise ValueError(
            f"The bound's box has {lo.size} coordinates but the sampled block {names} has "
            f"{q0.size} (the raveled unconstrained values)."
        )
    if not bound.contains(q0):
        j = int(np.flatnonzero(~((lo <= q0) & (q0 <= hi)))[0])
        raise ValueError(
            f"The initial point lies outside the box on which the TunaMH bound holds "
            f"(coordinate {j} of the block {names}: {q0[j]!r} not in [{lo[j]!r}, {hi[j]!r}]). "
            "Give the variables initial values inside the box (an initval on the variable, "
            "or TunaMH(initial_point=...) together with pm.sample(initvals=...)), or widen "
            "the box."
        )


def _prior_box(model, value_vars, initial_point):
    """``((lo, hi), "")`` over the raveled block if every prior is an untransformed
    Uniform with fixed bounds, else ``(None, reason)``."""
    free = set(model.free_RVs) | set(model.value_vars)
    lows, highs = [], []
    for value_var in value_vars:
        rv = model.values_to_rvs[value_var]
        size = int(np.size(initial_point[value_var.name]))
        if model.rvs_to_transforms.get(rv) is not None:
            return None, f"{rv.name!r} is sampled on a transformed, unbounded scale"
        if not isinstance(rv.owner.op, UniformRV):
            return None, f"the prior of {rv.name!r} is not a pm.Uniform"
        bounds = []
        for param in rv.owner.op.dist_params(rv.owner):
            if free & set(ancestors([param])):
                return None, f"the bounds of {rv.name!r} depend on other free variables"
            value = np.asarray(param.eval(), dtype=np.float64)
            try:
                value = np.broadcast_to(value, np.shape(initial_point[value_var.name]))
            except ValueError:
                return None, f"the bounds of {rv.name!r} do not match its shape"
            bounds.append(value.ravel())
        lo, hi = bounds
        if lo.size != size or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            return None, f"the bounds of {rv.name!r} are not finite"
        lows.append(lo)
        highs.append(hi)
    return (np.concatenate(lows), np.concatenate(highs)), ""
