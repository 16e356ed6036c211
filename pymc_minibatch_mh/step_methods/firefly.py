"""The FlyMC (Firefly Monte Carlo) step method."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pymc as pm
from pymc.step_methods.state import dataclass_state
from pytensor.tensor.random.basic import BernoulliRV, BinomialRV, NormalRV, StudentTRV

from pymc_minibatch_mh.bounds.bohning import map_tuned_bohning, untuned_bohning
from pymc_minibatch_mh.bounds.collapsed import CollapsedQuadratic
from pymc_minibatch_mh.bounds.excluded_mass import GROWTH_FACTOR
from pymc_minibatch_mh.bounds.free_scale import map_tuned_free_scale
from pymc_minibatch_mh.bounds.glm_bright_rows import glm_rows_factory
from pymc_minibatch_mh.bounds.jaakkola_jordan import (
    UNTUNED_XI,
    map_tuned_jaakkola_jordan,
    untuned_jaakkola_jordan,
)
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound, _row_norms
from pymc_minibatch_mh.bounds.looseness import (
    LOOSE_BOUND_RATIO,
    LooseBoundWarning,
    collapsed_looseness,
)
from pymc_minibatch_mh.bounds.negative_binomial import negative_binomial_bound
from pymc_minibatch_mh.bounds.normal_exact import exact_normal_likelihood
from pymc_minibatch_mh.bounds.ordinal_taylor import map_tuned_ordinal
from pymc_minibatch_mh.bounds.region_taylor import CHANNEL_DERIVATIVES, map_tuned_region_taylor
from pymc_minibatch_mh.bounds.row_cells import (
    CellRegion,
    likelihood_row_supports,
    row_cells_for,
)
from pymc_minibatch_mh.bounds.student_t import map_tuned_student_t, untuned_student_t
from pymc_minibatch_mh.bounds.sum_bound import SumBound
from pymc_minibatch_mh.bounds.trust_region import TrustRegion, default_radius, grown_shape
from pymc_minibatch_mh.families.registry import (
    family_described,
    family_numerics,
    family_record,
    names_where,
)
from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow, ScaleAdaptation
from pymc_minibatch_mh.kernels.brightening_rates import (
    CellRateEvidence,
    CellRates,
    RowsByCell,
    cell_index,
)
from pymc_minibatch_mh.kernels.firefly import (
    THETA_UPDATES,
    BrightFractionAverage,
    FireflyInfo,
    FireflySettings,
    FireflyState,
    firefly_kernel,
    new_firefly_state,
)
from pymc_minibatch_mh.kernels.gaussian_flow import ANGLE_RANGE, GaussianFlow
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.likelihood.glm_likelihoods import DataSetsOfDifferentLengths
from pymc_minibatch_mh.likelihood.linear_predictor import UnsupportedLikelihood
from pymc_minibatch_mh.likelihood.numpy_prior import looks_gaussian
from pymc_minibatch_mh.progress import progress_status
from pymc_minibatch_mh.step_methods.base import COMMON_STATS, MinibatchStep, MinibatchStepState
from pymc_minibatch_mh.step_methods.construction import block_value_vars
from pymc_minibatch_mh.step_methods.monitor import coordinate_label
from pymc_minibatch_mh.step_methods.reference import block_position, find_map
from pymc_minibatch_mh.step_methods.region_check import (
    check_region,
    cover_flat_directions,
    posterior_shape,
    tuning_spread,
)

#: theta | z updates that use gradients of the bright likelihoods and of the bounds.
GRADIENT_UPDATES = ("mala", "hmc")
#: Acceptance rate tuning aims at: MALA's optimum, and a usual HMC target.
GRADIENT_TARGET_ACCEPT = {"mala": 0.574, "hmc": 0.8}
#: theta and z updates per draw with HMC (a random walk needs more, see the class).
HMC_STEPS_PER_DRAW = 5
#: ``theta_update="auto"`` is HMC above this many dimensions, a random walk up to it
#: (unless the prior is Normal: then HMC split around a Gaussian at any size).
#: Measured (logistic regression, N = 10^5, 2 x 1000 draws, PyMC 6): at D = 11 the random
#: walk gave min ESS 1343 in 5 s of sampling, HMC 1729 in 15 s; at D = 51 the random walk
#: gave ESS 3, HMC 1547; on a 20-group hierarchy (D = 24) ESS 9-130 against 402 (its free
#: sigma; the other variables 1500-1900). Split HMC (Normal priors, logistic regression,
#: 2 x (500 + 1000) draws, PyMC 6): at N = 10^6, D = 11 min ESS 1771 in 3.9 s of sampling
#: against the random walk's 513 in 4.3 s; at N = 10^5, D = 101 ESS 716-962 in 8.5-9 s
#: against unsplit HMC's 547 in 16 s (both with the bright rows read jointly).
HMC_ABOVE_DIM = 20
#: With gradient moves on a multilevel likelihood, a cell's tuned brightening rate makes
#: it propose at most this many times its mean number of bright rows per iteration
#: (measured: the same ESS per row read at 2, 4 and 8, 2.7 times less at 1).
CELL_RATE_SPEND = 2.0
#: More row cells than this and one q_db is tuned for all rows.
MAX_RATE_CELLS = 100_000
#: q_db of the FlyMC paper's logistic-regression experiment (also used before tuning).
PAPER_Q_DB = {"untuned": 0.1, "map": 0.01}
_BOUND_METHODS = ("log_bound", "log_bound_sum")
_GRADIENT_METHODS = ("log_bound_sum_grad", "log_bound_weighted_grad")


@dataclass_state
class FlyMCState(MinibatchStepState):
    bound: object
    firefly: FireflyState | None
    bright_fraction: BrightFractionAverage | None
    q_db: float
    excluded_mass: float
    tuning_spread: CovarianceWindow


class FlyMC(MinibatchStep):
    """Firefly Monte Carlo: exact MCMC that evaluates only the "bright" data (**exact**).

    Every datum carries a brightness ``z_n``; with lower bounds ``B_n <= L_n`` whose
    product collapses to O(D^2) sufficient statistics, the chain on ``(theta, z)``
    targets ``p(theta) prod_n B_n(theta) prod_{bright} (L_n / B_n - 1)``, whose
    ``theta`` marginal is the exact posterior. Each iteration updates ``theta``
    given ``z`` (HMC by default, or random-walk Metropolis, or MALA) evaluating only the
    bright likelihoods, then every ``z_n`` with the implicit Metropolis–Hastings scheme
    (dark points propose to brighten with probability ``q_db``, chosen by
    geometric skips). Cost per iteration: ``n_bright + q_db * N`` likelihood
    queries plus O(D^2).

    Parameters
    ----------
    vars : list, optional
        Variables to sample. Default: every continuous free variable of the model. The
        likelihood may not depend on a free variable outside the block (the bounds are
        built for fixed values of the rest).
    bound : {"map", "untuned"} or bound object, default "map"
        ``"map"``: bounds tight at the MAP (Jaakkola–Jordan with
        ``xi_n = |eta_n(MAP)|``, Böhning with ``psi_n`` the MAP logits, Student-t
        with ``xi_n`` the MAP residual; Poisson, and Normal / Student-t with a free
        scale, anchored at the MAP with the largest curvature on a trust region, see
        ``trust_radius`` and :mod:`pymc_minibatch_mh.bounds.free_scale`).
        ``"untuned"``: ``xi = 1.5`` (JJ), ``psi = 0`` (Böhning), ``xi = 0`` (Student-t;
        the trust-region bounds refuse it). The family is recognised from the model:
        ``Bernoulli(logit_p=eta)``, ``Categorical(logit_p=X @ W + b)``,
        ``StudentT(nu, mu=eta, sigma)`` with fixed ``nu``, ``Normal(mu=eta, sigma)``
        with a free ``sigma``, ``Poisson(mu=pm.math.exp(eta))`` and
        ``NegativeBinomial(mu=pm.math.exp(eta), alpha)`` with a fixed or free ``alpha``
        (Jaakkola–Jordan on its ``log sigmoid(log alpha - eta)`` term, global, see
        :mod:`pymc_minibatch_mh.bounds.negative_binomial`), ``ZeroInflatedNegativeBinomial``
        and ``HurdleNegativeBinomial`` (the same with tangents of the zero parts, global),
        and, on a trust region,
        Gamma with a log-link mean, ``Beta(mu=pm.math.invlogit(eta), nu)``,
        ``ZeroInflatedPoisson`` and ``HurdlePoisson`` with ``mu=pm.math.exp(eta)``, Normal
        and Student-t with a scale per row whose log is affine
        (:mod:`pymc_minibatch_mh.bounds.region_taylor`),
        ``OrderedLogistic`` / ``OrderedProbit`` with ordered cutpoints
        (:mod:`pymc_minibatch_mh.bounds.ordinal_taylor`), with ``eta`` affine in the
        sampled variables. For other likelihoods pass an object
        with ``n_data``, ``log_bound(q, idx)``, ``log_bound_sum(q)`` (and, for MALA and HMC,
        ``log_bound_sum_grad(q)`` and ``log_bound_weighted_grad(q, idx, w)``) over the
        raveled unconstrained vector ``q`` of ``vars``; see
        :mod:`pymc_minibatch_mh.bounds`.
    map_point : dict or array, optional
        MAP of the model (values keyed by value-variable names, e.g. the output of
        ``pm.find_MAP()``, or the raveled vector). Default: the step's reference point (the
        posterior mode from Newton steps, see :class:`~pymc_minibatch_mh.MinibatchBarker`)
        when ``bound="map"``.
    q_db : float, optional
        Probability that a dark point proposes to become bright. Default: the paper's
        value for the bound (0.1 untuned, 0.01 MAP-tuned or custom bounds) at the start,
        then, while tuning, a running mean clipped to ``1 / N`` below and to that value
        above, fixed after tuning (a given value is never changed). A bright datum turns dark with
        probability ``min(1, q_db / Ltilde_n)`` per iteration, and each iteration costs
        ``n_bright + q_db * N`` queries. With the random walk, the mean is of the bright
        fraction ``n_bright / N`` (the paper's choice): a datum bright with probability
        ``p`` then keeps its state for about ``p / q_db`` iterations, far fewer than a
        random walk needs to cross the posterior. With gradient moves, which cross it in
        one transition, the mean is of the bright data's ``Ltilde_n`` (larger: those data
        are bright because their ``Ltilde_n`` is large), so a typical bright datum can
        turn dark at the next iteration; on a logistic regression with D = 101 and
        N = 10^5 this doubled the smallest ESS at 23 % more time per draw. The caps keep
        loose bounds from paying ``q_db * N`` for little: with 35% bright points
        (untuned) ``q_db = 0.1`` gave the same ESS per draw as ``q_db = 0.35`` at 30%
        fewer queries (``benchmarks/firefly_queries.py``); on a Poisson-log model of 100
        groups (MAP-tuned) 0.01 gave 2.3 times more ESS per row read than 0.1.
        With gradient moves on a multilevel likelihood (rows touching their own group's
        effects) a rate is tuned per group of rows instead
        (:mod:`~pymc_minibatch_mh.kernels.brightening_rates`): a typical bright row's
        ``Ltilde_n`` in the group, spending at most twice the group's bright rows in
        proposals, at least the bright fraction of all rows, rounded to powers of two
        (``q_db`` is then their largest, and attribute ``cell_rates`` holds them). The
        rows of a small group, whose bounds are loose, are refreshed fast, those of a large
        group rarely. Measured on the Poisson-log model of 100 groups (2 x 2000 draws):
        smallest ESS 1381 at 0.55 % of N read per draw, against 261 over 2 x 4000 draws at
        5.2 % with one rate; on 200 groups with slopes ESS per row read was the same for
        twice and 8 times the bright rows, and 2.7 times lower for once.
    theta_update : {"auto", "hmc", "rw", "mala"}, default "auto"
        Update of ``theta | z``. ``"hmc"``: one HMC transition (leapfrog in coordinates
        whitened by the Laplace, then tuned, covariance; trajectory length drawn from 1 to
        3 whitened units) on the augmented density with the bright set fixed, whose
        gradient costs one pass over the bright rows plus ``O(D^2)`` for the collapsed
        bound; its moves cross the posterior in one transition in any dimension. With many
        groups the bound's Hessian and the Laplace precision are sparse (each group's
        effects meet only themselves and the shared coordinates) and a leapfrog step costs
        ``O(nonzeros)``: on 2,000 groups 28 times less than with dense matrices. When the
        prior is Normal on every coordinate and the bound is quadratic in ``theta`` (the
        global Bernoulli / Binomial-logit and Student-t bounds), the prior
        times the bounds is a Gaussian and HMC is split around it: that part of the
        dynamics is a rotation solved exactly, only the bright rows act through leapfrog
        kicks and are read along the trajectory, and the time is drawn from a quarter to
        three eighths of the Gaussian's period
        (:func:`~pymc_minibatch_mh.kernels.firefly.split_hmc_theta_update`). ``"rw"``:
        random-walk Metropolis (mixes slowly beyond about 20 dimensions: ESS 9-130 of 2000
        draws at D = 24, 3 at D = 51). ``"mala"``: Metropolis-adjusted Langevin. ``"auto"``
        is ``"hmc"`` for blocks of more than 20 dimensions, or of any size with a Normal
        prior on every coordinate and a Bernoulli, Binomial or Student-t likelihood
        (split HMC) or a Normal likelihood with one ``sigma`` (summed exactly: HMC on the
        posterior itself, one move per draw), unless a custom ``bound`` lacks the gradient
        methods, and ``"rw"`` otherwise, where it mixes as well as unsplit HMC at a fraction
        of the cost per draw.
    temperature : float, default 1
        ``K``: likelihood and bounds are raised to ``1/K``; the prior is not.
    scaling : float, optional
        Initial proposal scale or leapfrog step. Default ``d^(-1/4)`` whitened units (HMC);
        ``2.38 sqrt(K / (N d))`` (RW) or ``1.65 d^(-1/6) sqrt(K / N)`` (MALA) when no
        ``proposal_cov`` is given.
    target_accept : float, optional
        Default 0.8 (HMC), 0.234 (RW) or 0.574 (MALA).
    check_bound : bool, default True
        Raise if a computed ``log L_n - log B_n`` proves the bound invalid.
    trust_radius : float, optional
        Poisson, Gamma, Beta, zero-inflated and hurdle Poisson, ordinal likelihoods,
        Student-t free scales and scales per row (a Normal with one free scale, the negative
        binomial with or without zeros need no region): the bound holds on the ellipsoid
        of this many Laplace standard deviations around the MAP (default
        ``sqrt(D) + 8``); ``theta`` proposals outside it are rejected without reading data
        (stat ``region_exits``), so the chain is exact for the posterior restricted to it
        (see :mod:`pymc_minibatch_mh.bounds.trust_region`). At the end of tuning each chain
        estimates the posterior mass outside it (stat ``excluded_mass``, NaN without a
        region and during tuning) and, unless
        ``trust_radius`` was given, grows the region until that is below 1e-6, building the
        bounds again: along the directions where the tuning draws spread beyond the Laplace
        fit, to their spread, then 1.5 times per growth, up to four growths
        (:func:`~pymc_minibatch_mh.bounds.trust_region.grown_shape`); it warns when the
        mass stays above.
        Where a bound is so loose on the region that its collapsed sum would lose its
        float64 precision, or overflows there (a diffuse prior and a quasi-separated
        category), its loosest rows get no bound and are read at every iteration
        (attribute ``n_unbounded``, at most half the rows; beyond that, and for a model of
        several likelihoods, such bounds are refused). With any bound (global ones too),
        rows whose expected gap ``log L_n - log B_n`` over the Laplace fit exceeds 2 nats
        (bright more than half the time: e.g. a diffuse prior's all-zero category, where a
        chain with every row bounded sticks near the MAP) are read at every iteration as
        well, at most half the rows.
    row_cells : bool, default True
        Bounds on a trust region (Student-t free scales, ordinal likelihoods, Poisson-log),
        when each row touches the shared
        coordinates plus a few of its own (group intercepts and slopes of a multilevel
        model): the trust region is
        every cell's ellipsoid in the coordinates ``T`` its rows touch, each leaving out
        ``1e-9 / n_cells`` of a Gaussian posterior, at most ``sqrt(|T|) + 8`` Laplace sds
        (:meth:`~pymc_minibatch_mh.bounds.row_cells.CellRegion.covering`) instead of
        one ellipsoid of ``sqrt(D) + 8`` in all of them, so each row's bound is tighter and
        ``theta | z`` mixes faster. Kept off for likelihoods of several parts, when there
        are more than 20,000 cells or fewer than 4 rows per cell, and when ``trust_radius``
        is given.
    start_at_reference : bool, default True
        With ``bound="map"``, chains that start by tuning begin at the MAP, where the
        bounds are tight (far from it most points are bright and mixing is slow).
    proposal : {"auto", "rw", "laplace", "independent"}, default "auto"
        Proposal of the ``theta | z`` update, as for
        :class:`~pymc_minibatch_mh.MinibatchBarker` (``"auto"`` and ``"independent"``
        only with ``theta_update="rw"``; with ``"mala"`` and ``"hmc"`` it is ``"laplace"``).
    steps_per_draw : int, optional
        ``theta`` and ``z`` updates per PyMC draw: default 5 with HMC (1 with HMC on the
        exact Normal bound, where each move is one on the exact posterior), 10 otherwise.
    max_dim : int, optional
        Largest block FlyMC accepts (None, the default: no limit). A larger block is
        refused at construction, before any pass over the data.
    progressbar : bool, default True
        Show progress of the MAP search and of the passes over the data (recognising
        the likelihood, summing the bounds).
    proposal_cov, reference_point, tune, adapt_cov, data_dim, model, rng, \
initial_point, compile_kwargs, blocked
        As for :class:`~pymc_minibatch_mh.MinibatchBarker`. FlyMC takes no
        ``control_variates``: its bounds already play that role.

    Notes
    -----
    Sample stats: ``accepted``, ``accept`` (Metropolis probability of the
    ``theta`` move on the augmented target), ``batch_size`` (likelihood queries of
    the draw: bright points at the proposal plus dark points proposed to brighten),
    ``n_lik_evals`` (``batch_size`` plus the gradient passes of MALA and HMC), ``scaling`` and
    ``n_bright`` (bright points after the draw).

    ``z`` belongs to the chain: it is discarded when a chain starts (PyMC's
    ``set_rng``/``setup_chain`` hooks) and drawn exactly from ``p(z | theta)`` at the
    chain's actual starting point on its first step, which costs one pass over
    the data (counted in that draw's stats). The same full draw happens whenever the
    step is handed a point other than where it left the chain. ``z`` is part of
    :attr:`sampling_state`, so a restored state resumes with the same ``z``.

    Memory: per datum, the brightness store (two int32 indices), the cached
    ``log Ltilde_n`` (one float64) and the bound's coefficients (five float64 for
    scalar families), besides the design matrix shared with the recogniser. Setup:
    the MAP search and one O(N D^2) pass to collapse the bounds.

    MAP-tuned bounds are loose far from the MAP, so burn-in from a distant point
    makes many points bright (the paper notes the same); start chains near the MAP
    (``initvals=``) for a cheap burn-in. Untuned bounds give a speed-up only when
    most data are well classified.

    Attribute ``bound_looseness``: how many times more curved the collapsed bound built at
    construction is than the posterior's Laplace fit, in the worst direction (NaN for an
    exact bound or without a Laplace fit; see :mod:`pymc_minibatch_mh.bounds.looseness`).
    Above 20 FlyMC warns (``LooseBoundWarning``) and names the variable: given ``z``,
    ``theta`` moves only a fraction of its posterior spread there per update and the
    chain mixes slowly (measured on this project's test models: 1.1-9 for most families,
    18-54 for ordinal ones and quasi-separated categories; the zero-inflated and hurdle
    negative binomial's per-row Taylor bounds, 56-98 with ``alpha``'s ESS at 2-6 % of the
    draws, were replaced by global bounds at 5-8).

    References
    ----------
    .. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
       of Data", UAI 2014.
    .. [2] Jaakkola, T. S., Jordan, M. I. "Bayesian parameter estimation via
       variational methods", Statistics and Computing 10, 2000.
    .. [3] Böhning, D. "Multinomial logistic regression algorithm", Annals of the
       Institute of Statistical Mathematics 44, 1992.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_minibatch_mh import FlyMC
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(20_000, 3))
    >>> y = rng.random(20_000) < 1 / (1 + np.exp(-x @ [1.0, -0.5, 0.2]))
    >>> with pm.Model():
    ...     beta = pm.Normal("beta", 0, 5, shape=3)
    ...     _ = pm.Bernoulli("y", logit_p=x @ beta, observed=y.astype(int))
    ...     idata = pm.sample(step=FlyMC(), draws=500, tune=500, chains=1)  # doctest: +SKIP
    """

    name = "flymc"
    supports_control_variates = False
    full_data_cause = (
        "most rows were bright or had no bound (stat n_bright, attribute n_unbounded), so "
        "FlyMC's bounds are loose where this posterior lies. The draws are still exact; for "
        "speed, MinibatchBarker() or NUTS on the full data is the better sampler for this "
        "model."
    )
    # theta and z are coupled through the bright points, so one theta move mixes little
    # (logistic regression, N = 10^6, 2 x 1000 draws: ESS 257 with 3 steps per draw,
    # 866 with 10, which still cost under 2 ms per draw).
    default_steps_per_draw = 10
    progress_columns = {"n_bright": "Bright"}
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "n_bright": (np.int64, []),
        "region_exits": (np.int64, []),
        "excluded_mass": (np.float64, []),
    }
    _state_class = FlyMCState

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        bound="map",
        map_point=None,
        q_db: float | None = None,
        theta_update: str = "auto",
        check_bound: bool = True,
        trust_radius: float | None = None,
        row_cells: bool = True,
        max_dim: int | None = None,
        **kwargs,
    ):
        if max_dim is not None and (
            isinstance(max_dim, bool) or not isinstance(max_dim, int | np.integer) or max_dim < 1
        ):
            raise ValueError(f"max_dim must be a positive integer or None; got {max_dim!r}.")
        self.max_dim = None if max_dim is None else int(max_dim)
        if trust_radius is not None and not (math.isfinite(trust_radius) and trust_radius > 0):
            raise ValueError(
                f"trust_radius must be a positive finite number (or None); got {trust_radius}."
            )
        self.trust_radius = trust_radius
        self.row_cells = bool(row_cells)
        if theta_update not in (*THETA_UPDATES, "auto"):
            raise ValueError(
                f"theta_update must be 'auto' or one of {THETA_UPDATES}; got {theta_update!r}."
            )
        if q_db is not None and not 0.0 < q_db <= 1.0:
            raise ValueError(f"q_db must lie in (0, 1]; got {q_db}.")
        if isinstance(bound, str) and bound not in PAPER_Q_DB:
            raise ValueError(f"bound must be 'map', 'untuned' or a bound object; got {bound!r}.")
        if kwargs.get("control_variates"):
            raise ValueError(
                "FlyMC does not use control variates (control_variates=True): its bounds "
                "already play that role."
            )
        model = pm.modelcontext(kwargs.pop("model", None))
        initial_point = kwargs.pop("initial_point", None)
        if initial_point is None:
            initial_point = model.initial_point()
        if theta_update == "auto":
            # HMC in many dimensions, where gradients of the bounds exist (built-in bounds
            # always have them); below, random-walk moves mix well and cost less per draw,
            # unless the prior is Normal and the built-in bound quadratic: then HMC is split
            # around the prior times the bounds (q | z but the bright rows) and wins at any
            # size.
            has_gradients = isinstance(bound, str) or all(
                callable(getattr(bound, m, None)) for m in _GRADIENT_METHODS
            )
            block = block_value_vars(model, vars)
            ndim = sum(int(np.size(initial_point[v.name])) for v in block)
            split = (
                isinstance(bound, str)
                and kwargs.get("proposal", "auto") in ("auto", "laplace")  # not one asked for
                and _quadratic_bound_likelihood(model)
                and looks_gaussian(model, block)
            )
            # A Normal likelihood with one sigma is summed exactly (no datum ever bright):
            # the chain is HMC on the posterior itself, whose antithetic draws a random walk
            # forgoes (measured at N = 10^5, D = 12, PyMC 6: ESS 3,840 in 0.86 s of
            # sampling against 1,876 in 2.14 s).
            exact = isinstance(bound, str) and _exact_normal_likelihood(model)
            theta_update = (
                "hmc" if has_gradients and (ndim > HMC_ABOVE_DIM or split or exact) else "rw"
            )
        gradient_move = theta_update in GRADIENT_UPDATES
        if gradient_move and kwargs.get("proposal", "auto") in ("independent", "auto"):
            if kwargs.get("proposal") == "independent":
                raise ValueError(
                    f"theta_update={theta_update!r} cannot use proposal='independent'."
                )
            # MALA and HMC are local moves: preconditioned with the Laplace covariance.
            kwargs["proposal"] = "laplace"
        if gradient_move:
            self._needs_gradients = True
            kwargs.setdefault("target_accept", GRADIENT_TARGET_ACCEPT[theta_update])
        user_scaling = kwargs.get("scaling") is not None
        if isinstance(map_point, dict) and kwargs.get("reference_point") is None:
            kwargs["reference_point"] = map_point  # no second MAP search for the proposal
        self._bound_request = bound
        self._gradient_move = gradient_move
        super().__init__(vars, model=model, initial_point=initial_point, **kwargs)

        ndim, n_data = self.tall_data.ndim, self.tall_data.n_data
        no_metric = gradient_move and self._untuned_proposal.chol is None
        if gradient_move and not user_scaling and (theta_update == "hmc" or no_metric):
            start = _gradient_step_size(theta_update, ndim)
            if no_metric:  # no Laplace fit: guess the posterior's scale
                start *= math.sqrt(self.temperature / n_data)
            self._untuned_adaptation = ScaleAdaptation(math.log(start))
            self.adaptation = self._untuned_adaptation
        self.theta_update = theta_update
        self.check_bound = bool(check_bound)
        self.bound_kind = bound if isinstance(bound, str) else "custom"
        if isinstance(bound, str):
            self.bound = self._recognised_bound(model, initial_point, bound, map_point)
        else:
            self.bound = self._checked_bound(bound, initial_point, gradient_move)
        self._bound_before_growth = None
        self.bound_looseness = self._warn_if_loose()
        #: ``(mean, precision diagonal)`` of a Normal prior on every coordinate, which with
        #: a quadratic collapsed bound makes q | z a Gaussian times the bright rows' terms:
        #: HMC is then split around that Gaussian (``_theta_gaussian``).
        self._theta_prior = None
        if theta_update == "hmc":
            self._theta_prior = self._shared_functions.get(
                "gaussian_prior",
                lambda: self._recognise_gaussian_prior(model, self.vars, initial_point),
            )
        if getattr(self.bound, "exact", False) and theta_update == "hmc":
            if kwargs.get("steps_per_draw") is None:
                # No datum is ever bright: each HMC move is one on the exact posterior, and
                # one per draw keeps HMC's antithetic draws (an even number cancels them).
                # Also the value each chain's tuning restarts from (``reset_tuning``).
                self.steps_per_draw = self._untuned_steps_per_draw = 1
        self.adapt_q_db = q_db is None
        default_q_db = PAPER_Q_DB[bound] if isinstance(bound, str) else PAPER_Q_DB["map"]
        self._untuned_q_db = float(q_db) if q_db is not None else default_q_db
        self.excluded_mass = math.nan
        self.tuning_spread = tuning_spread(self.tall_data.ndim)
        self.q_db = self._untuned_q_db
        self.q_db_floor = 1.0 / n_data
        self.bright_fraction: BrightFractionAverage | None = None
        self._cells = self._brightening_cells() if self.adapt_q_db else None
        self.cell_rates: CellRates | None = None
        self._cell_evidence: CellRateEvidence | None = None
        self.firefly: FireflyState | None = None
        self._last_n_bright = 0
        self._entering_region = False

    # ---------------------------------------------------------------- bounds
    def _warn_if_loose(self) -> float:
        """The collapsed bound's largest curvature ratio to the posterior (NaN where not
        computed); warns (:class:`~pymc_minibatch_mh.bounds.looseness.LooseBoundWarning`)
        above :data:`~pymc_minibatch_mh.bounds.looseness.LOOSE_BOUND_RATIO`."""
        looseness = collapsed_looseness(self.bound, self._laplace_chol, self.temperature)
        if looseness is None:
            return math.nan
        if looseness.ratio > LOOSE_BOUND_RATIO:
            label = coordinate_label(self._block_names, self._block_sizes, looseness.coordinate)
            warnings.warn(
                f"FlyMC: its bounds are {looseness.ratio:.0f} times more curved than the "
                f"posterior along {label} (each row's bound follows that row's own "
                "curvature, which the rows' sum partly cancels). Given the brightness "
                f"variables, {label} then moves about {math.sqrt(looseness.ratio):.0f} times "
                "less far per update than its posterior spread, so the chain mixes slowly "
                f"there: check the ESS of {label} before trusting the draws, draw more, or "
                "use TunaMH() (exact, without brightness variables).",
                LooseBoundWarning,
                stacklevel=3,
            )
        return looseness.ratio

    def _default_steps(self) -> int:
        return HMC_STEPS_PER_DRAW if self._gradient_move else self.default_steps_per_draw

    def _check_block_covers_likelihood(self) -> None:
        """The bounds and the cached z assume no other step changes the likelihood."""
        outside = list(self.tall_data.graphs.likelihood_outside_block)
        if outside:
            raise ValueError(
                f"FlyMC needs every free variable of the likelihood in its block, but "
                f"{outside} would be sampled by other step methods: the bounds and the "
                "brightness variables are only valid while those stay fixed. Add them to "
                "`vars=` (or leave `vars=None`) and make sure the bounds cover them, or use "
                "MinibatchBarker / Austere."
            )

    def _check_applicable(self, model, vars, initial_point) -> None:
        """Before any pass over the data: the block covers the likelihood and, for the
        built-in bounds, the likelihood is a family FlyMC can bound; the block is not larger
        than ``max_dim``."""
        self._check_block_covers_likelihood()
        self._lp = None
        if isinstance(self._bound_request, str):
            self._lp = self._recognise_bound_family(model, initial_point)
        ndim = self.tall_data.ndim
        if self.max_dim is not None and ndim > self.max_dim:
            raise ValueError(
                f"FlyMC refuses this block of {ndim} dimensions: you passed "
                f"max_dim={self.max_dim}. Pass a larger max_dim (or None, the default) to "
                "sample it."
            )

    def _recognise_bound_family(self, model, initial_point):
        try:
            lp = self._recognise_linear_predictor(model, initial_point)
        except DataSetsOfDifferentLengths:
            raise
        except UnsupportedLikelihood as err:
            raise UnsupportedLikelihood(
                f"FlyMC could not build bounds automatically: {err} FlyMC has built-in bounds "
                "for Bernoulli-logit and Binomial-logit (Jaakkola–Jordan), Categorical-softmax "
                "(Böhning), Student-t (Gaussian), negative binomial (Jaakkola–Jordan), "
                "Poisson-log, Gamma-log, Beta, zero-inflated and hurdle Poisson and negative "
                "binomial, ordinal (trust region), Normal and "
                "Student-t with a log-linear scale per row (trust region) and Normal with a "
                "free scale or one fixed sigma (the likelihood itself, from sufficient "
                "statistics) likelihoods; for another likelihood pass `bound=<object>` with "
                "n_data, log_bound(q, idx) and log_bound_sum(q) (see pymc_minibatch_mh.bounds)."
            ) from None
        for part in getattr(lp, "parts", (lp,)):
            self._check_part(part)
        return lp

    def _check_part(self, lp) -> None:
        """Refuse (before the MAP search) a likelihood FlyMC has no bound for."""
        if getattr(lp, "row_scales", False):
            if self._bound_request != "map":
                raise UnsupportedLikelihood(
                    f"FlyMC's bound for a {family_described(lp.family)} likelihood whose sigma "
                    "differs between rows holds on a trust region around the MAP, so it needs "
                    "bound='map' (the default), not bound='untuned'. TunaMH() covers this "
                    "model too."
                )
            return
        if lp.family == "negative_binomial":
            return  # global bound, fixed or free dispersion
        if lp.family == "normal" and (lp.free_scale or np.ndim(lp.params["sigma"]) == 0):
            return  # exact: the likelihood itself, collapsed (bounds/normal_exact.py)
        if lp.free_scale and lp.family == "student_t":
            if self._bound_request != "map":
                raise UnsupportedLikelihood(
                    f"FlyMC's bound for a {lp.family} likelihood with a free scale sigma holds "
                    "on a trust region around the MAP, so it needs bound='map' (the default), not "
                    "bound='untuned'. TunaMH() covers this model too."
                )
            return
        if family_record(lp.family).firefly_region and self._bound_request != "map":
            raise UnsupportedLikelihood(
                f"FlyMC's {family_described(lp.family)} bound holds on a trust region around the "
                "MAP, so it needs bound='map' (the default), not bound='untuned'."
            )
        if not family_record(lp.family).firefly_bound:
            bounded = names_where(firefly_bound=True)
            hint = {
                "normal": " FlyMC sums a Normal likelihood exactly when sigma is free or one "
                "fixed value for all rows; here sigma differs between rows.",
            }.get(lp.family, "")
            raise UnsupportedLikelihood(
                f"FlyMC has no built-in bound for the {family_described(lp.family)} likelihood of "
                f"this model (supported: {', '.join(map(family_described, bounded))})."
                f"{hint} Pass "
                "`bound=<object>` with "
                "n_data, log_bound(q, idx) and log_bound_sum(q) to use FlyMC anyway, or use "
                "MinibatchBarker() / Austere(), which need no bound."
            )

    def _recognised_bound(self, model, initial_point, kind: str, map_point):
        lp = self._lp
        q_map = None
        if kind == "map":
            q_map = self._map_position(model, initial_point, map_point)
            if not self._finite_sum_at(q_map) and not np.all(np.isfinite(lp.loglik(q_map))):
                raise ValueError("The log-likelihood is not finite at the MAP point.")
            # Tuning chains start where the MAP-tuned bounds are tight.
            self._start_centre = q_map
        status = f"FlyMC: summing {kind} bounds over {self.tall_data.n_data:,} data points"
        parts = getattr(lp, "parts", (lp,))
        region = None
        if any(_needs_region(part) for part in parts):
            if self._laplace_chol is None:
                raise UnsupportedBound(
                    "FlyMC's Poisson-log, Gamma-log, Beta, zero-inflated and hurdle Poisson, "
                    "ordinal and free-scale bounds hold on a trust region shaped by the "
                    "Laplace covariance at the MAP, which is not available (proposal='rw' or "
                    "a failed Laplace fit). Use the default proposal, or MinibatchBarker / "
                    "Austere."
                )
            region = self._trust_region(lp, q_map)
        q_init = block_position(initial_point, self.vars)
        self._q_map, self._q_init = q_map, q_init
        with progress_status(status, enabled=self.progressbar):
            return self._bound_on(region)

    def _finite_sum_at(self, q: np.ndarray) -> bool:
        """Whether the setup's full-data Taylor pass was at ``q`` and its log-likelihood
        sum is finite: then every row's is (a sum with an infinite or NaN term is not
        finite), and no pass is needed to check it."""
        reference = getattr(self, "reference", None)
        return (
            reference is not None
            and np.array_equal(reference.reference, q)
            and math.isfinite(float(reference.value))
        )

    def _bound_on(self, region):
        """The recognised likelihood's bound on ``region`` (None: the family's bounds are
        global), with the loosest rows left unbounded if its sum would lose precision."""
        parts = getattr(self._lp, "parts", (self._lp,))
        # The rows' reach over the Laplace fit (for _without_bounds_on_bright_rows), in the
        # same pass where the family's construction can compute it.
        chol = self._laplace_chol if self._q_map is not None and len(parts) == 1 else None
        bounds = [
            _build_bound(part, self._q_map, self._q_init, region, row_norms_chol=chol)
            for part in parts
        ]
        if region is not None:
            bounds = _precise_bounds(bounds, region)
        if len(bounds) == 1 and self._q_map is not None and self._laplace_chol is not None:
            laplace = TrustRegion(self._q_map, self._laplace_chol, 1.0)
            bounds = [_without_bounds_on_bright_rows(bounds[0], laplace)]
        # The rows' norms served that choice only: N values fewer to hold.
        bounds = [
            replace(b, row_norms=None) if getattr(b, "row_norms", None) is not None else b
            for b in bounds
        ]
        return bounds[0] if len(bounds) == 1 else SumBound(tuple(bounds), region)

    def _trust_region(self, lp, q_map: np.ndarray, chol=None):
        """Every row cell's ellipsoid (``row_cells``, :meth:`CellRegion.covering`) or one
        ellipsoid of ``trust_radius`` (default ``sqrt(D) + 8``) sds around the MAP, shaped
        by ``chol`` (default the Laplace fit's; a grown region's shape after tuning)."""
        chol = self._laplace_chol if chol is None else chol
        ndim = self.tall_data.ndim
        single = getattr(lp, "parts", None) is None
        if self.row_cells and self.trust_radius is None and single:
            cells = row_cells_for(lp, q_map, chol, likelihood_row_supports(lp))
            if cells is not None:
                return CellRegion.covering(cells, chol)
        radius = default_radius(ndim) if self.trust_radius is None else self.trust_radius
        return TrustRegion(q_map, chol, radius)

    def _map_position(self, model, initial_point, map_point) -> np.ndarray:
        ndim = self.tall_data.ndim
        if map_point is None:
            reference = getattr(self, "reference", None)
            if reference is not None:  # the base class already found the MAP
                return np.asarray(reference.reference, dtype=np.float64)
            map_point = find_map(model, initial_point, progressbar=self.progressbar)
        if isinstance(map_point, dict):
            q_map = block_position(map_point, self.vars)
        else:
            q_map = np.asarray(map_point, dtype=np.float64).ravel()
        if q_map.shape != (ndim,) or not np.all(np.isfinite(q_map)):
            raise ValueError(
                f"map_point must give finite values for the {ndim} unconstrained coordinates "
                f"of {list(self.tall_data.var_names)}; got shape {q_map.shape}."
            )
        return q_map

    def _checked_bound(self, bound, initial_point, gradients: bool):
        needed = _BOUND_METHODS + (_GRADIENT_METHODS if gradients else ())
        missing = [m for m in needed if not callable(getattr(bound, m, None))]
        if missing or getattr(bound, "n_data", None) is None:
            raise TypeError(
                f"bound must be 'map', 'untuned' or an object with n_data and the methods "
                f"{list(needed)}; {type(bound).__name__} lacks {missing or ['n_data']}."
            )
        if int(bound.n_data) != self.tall_data.n_data:
            raise ValueError(
                f"The bound covers {bound.n_data} data points but the model has "
                f"{self.tall_data.n_data}."
            )
        q0 = block_position(initial_point, self.vars)
        if not np.isfinite(bound.log_bound_sum(q0)):
            raise ValueError("The bound's log_bound_sum is not finite at the initial point.")
        return bound

    @property
    def n_unbounded(self) -> int:
        """Rows left without a bound (read at every iteration; see ``trust_radius``)."""
        return int(np.size(_unbounded_rows(self.bound)))

    # ---------------------------------------------------------------- PyMC hooks
    def reset_tuning(self) -> None:
        """Restore proposal scale, covariance, ``q_db`` and the bound (its region) to their
        values before tuning."""
        super().reset_tuning()
        if self._bound_before_growth is not None:  # a region grown by the last chain
            self.bound, self._bound_before_growth = self._bound_before_growth, None
            self.firefly = None
        self.q_db = self._untuned_q_db
        self.bright_fraction = None
        self.cell_rates = self._cell_evidence = None
        self.excluded_mass = math.nan
        self.tuning_spread = tuning_spread(self.tall_data.ndim)

    def stop_tuning(self) -> None:
        """End of tuning: estimate the posterior mass outside the bounds' trust region
        (stat ``excluded_mass``) and, with the default radius, grow the region until it is
        negligible (:func:`~pymc_minibatch_mh.bounds.excluded_mass.grow_until_negligible`:
        the bounds are built again on the larger region, and ``z`` is drawn afresh at the
        chain's point); warn if the mass stays above 1e-6. A ``trust_radius=`` given is
        kept."""
        super().stop_tuning()
        if getattr(self.bound, "region", None) is None or not isinstance(self._bound_request, str):
            return
        advice = (
            "Pass a larger `trust_radius=` to FlyMC (in Laplace sds; the default is "
            "sqrt(D) + 8 and grown after tuning), or use TunaMH() or MinibatchBarker()."
        )

        spread, widened = posterior_shape(self, self.bound.region)
        if widened:
            cover_flat_directions(self, spread)

        def rebuild(factor):
            # The first growth reshapes the region alone (by the tuning draws' spread).
            shape = grown_shape(self._laplace_chol, spread, factor / GROWTH_FACTOR)
            return self._bound_on(self._trust_region(self._lp, self._q_map, chol=shape))

        grow = rebuild if self.trust_radius is None else None
        bound, _ = check_region(self, self.bound, rebuild=grow, shape=spread, advice=advice)
        if bound is not self.bound:
            if self._bound_before_growth is None:
                self._bound_before_growth = self.bound
            self.bound = bound
            self.firefly = None  # z is tied to the bounds: drawn again at the next step

    def set_rng(self, rng) -> None:
        """Per-chain hook: new generator; ``z`` is redrawn at the chain's first point."""
        super().set_rng(rng)
        self.firefly = None

    # ---------------------------------------------------------------- sampling
    def astep(self, q0):
        """One PyMC draw; first refreshes the prior cached in the FlyMC state (O(D)).

        In a compound step another step method may have moved variables that enter
        this block's prior (e.g. ``tau`` in ``beta ~ Normal(0, tau)``); PyMC writes
        their current values into the shared variables read by
        ``tall_data.logprior`` before every call. So the cached log prior (and the
        MALA prior gradient) are recomputed here, once per draw, whatever
        ``steps_per_draw``; ``z`` stays valid, as it depends only on the block and
        the data.
        """
        if self.firefly is not None:
            self.firefly.refresh_prior(self.tall_data)
        return super().astep(q0)

    @property
    def settings(self) -> FireflySettings:
        """The kernel's settings from the step's current values (kept while they hold)."""
        key = (self.q_db, self.temperature, self.theta_update, self.check_bound, self.cell_rates)
        cached = self.__dict__.get("_settings_for")
        if cached is None or cached[0] != key:
            settings = FireflySettings(
                q_db=key[0],
                temperature=key[1],
                theta_update=key[2],
                check_bound=key[3],
                cell_rates=key[4],
            )
            cached = self._settings_for = (key, settings)
        return cached[1]

    def _transition(self, state: ChainState):
        region = getattr(self.bound, "region", None)
        if region is not None and not region.contains(state.position):
            return self._enter_region(state, region)
        settings = self.settings
        fly = self.firefly
        fresh = fly is None or (
            fly.position is not state.position and not np.array_equal(fly.position, state.position)
        )
        if fresh:
            fly = new_firefly_state(
                self.rng, state.position, self.tall_data, self.bound, settings, self._joint_rows()
            )
            self.firefly = fly
        proposal, scaling = self._choose_move()
        fly, info = firefly_kernel(
            self.rng,
            fly,
            self.tall_data,
            self.bound,
            settings,
            scaling=scaling,
            proposal=proposal,
            rows=self._joint_rows(),
            gaussian=self._theta_gaussian(),
        )
        if fresh and not getattr(self.bound, "exact", False):
            # The exact draw of z read every datum once (an exact bound reads none).
            n = self.tall_data.n_data
            info = replace(info, batch_size=n, n_lik_evals=info.n_lik_evals + n)
        self._last_n_bright = info.n_bright
        return ChainState(fly.position, fly.logprior), info

    def _joint_rows(self):
        """The kernel's ``rows``: the recognised likelihood and the current bound read
        together from one linear predictor (:mod:`~pymc_minibatch_mh.bounds.glm_bright_rows`),
        or None (the target and the bound asked separately). Kept per bound."""
        cached = self.__dict__.get("_rows_for")
        if cached is None or cached[0] is not self.bound:
            cached = (self.bound, glm_rows_factory(self._lp, self.bound))
            self._rows_for = cached
        return cached[1]

    def _theta_gaussian(self) -> GaussianFlow | None:
        """The Gaussian that HMC on ``q | z`` is split around, or None (plain HMC): with a
        Normal prior (mean ``m``, precisions ``d``) and a collapsed bound that is a quadratic
        ``(F0, g0, H)`` about ``c``, the prior times the tempered bounds is ``exp(-q^T (diag(d)
        - H / K) q / 2 + q . (d m + (g0 - H c) / K))``: ``q | z`` before the bright rows'
        factors. Kept per bound."""
        cached = self.__dict__.get("_gaussian_for")
        if cached is not None and cached[0] is self.bound:
            return cached[1]
        collapsed = getattr(self.bound, "collapsed", None)
        gaussian = None
        # A bound that holds on a trust region only (Poisson-log, free scales) takes the
        # region's largest curvature: a Gaussian narrower than the posterior where it is
        # skewed, along which split moves mixed too slowly (Poisson regression with an
        # all-zero category and Normal(0, 100) priors: Monte Carlo error 0.68 sd).
        global_bound = getattr(self.bound, "region", None) is None
        if (
            self._theta_prior is not None
            and global_bound
            and isinstance(collapsed, CollapsedQuadratic)
        ):
            mean, precision = self._theta_prior
            h = collapsed.hessian / self.temperature
            linear = collapsed.gradient_at_centre - collapsed.hessian @ collapsed.centre
            try:
                gaussian = GaussianFlow.from_quadratic(
                    np.diag(precision) - h, precision * mean + linear / self.temperature
                )
            except np.linalg.LinAlgError:
                gaussian = None  # not a Gaussian (cannot happen for bounds with a_n <= 0)
        self._gaussian_for = (self.bound, gaussian)
        return gaussian

    def _enter_region(self, state: ChainState, region) -> tuple[ChainState, FireflyInfo]:
        """A chain outside the trust region (a start there, or another step moved it out)
        has density 0 on the restricted target: like any zero-density state, it accepts the
        first proposal that lands inside, without reading data; z is drawn afresh there."""
        proposal, scaling = self._choose_move()
        moved, _ = proposal(self.rng, state.position, scaling)
        inside = region.contains(moved) and math.isfinite(self.tall_data.logprior(moved))
        self.firefly = None
        self._entering_region = True  # not a move of the sampler: tuning ignores it
        info = FireflyInfo(inside, float(inside), 0, 0, 0, int(not inside))
        if not inside:
            return state, info
        return ChainState(moved, float(self.tall_data.logprior(moved))), info

    def _adapt(self, position: np.ndarray, accept_prob: float) -> None:
        """Base tuning (scale, covariance) plus ``q_db`` (see :meth:`_q_db_evidence`)."""
        if self._entering_region:
            self._entering_region = False
            return
        was_untuned = self.proposal is self._untuned_proposal
        super()._adapt(position, accept_prob)
        self.tuning_spread = self.tuning_spread.add(position)
        if (
            self.theta_update in GRADIENT_UPDATES
            and was_untuned
            and self.proposal is not self._untuned_proposal
        ):
            # The base class restarts random walks at 2.38 d^(-1/2); gradient moves with a
            # posterior-shaped preconditioner take larger steps.
            self.adaptation = ScaleAdaptation(
                math.log(_gradient_step_size(self.theta_update, self.tall_data.ndim)),
                self.adaptation.n_updates,
            )
        longest = math.log(ANGLE_RANGE[1])
        if self.adaptation.log_scale > longest and self._theta_gaussian() is not None:
            # Split HMC with negligible kicks accepts any step: one step of the whole
            # time is the longest that means anything (see split_hmc_theta_update).
            self.adaptation = ScaleAdaptation(longest, self.adaptation.n_updates)
        if not self.adapt_q_db:
            return
        if self._cells is not None and self.firefly is not None:
            self._adapt_cell_rates()
            return
        average = self.bright_fraction or BrightFractionAverage(self.q_db)
        self.bright_fraction = average.update(*self._q_db_evidence())
        # Capped at its start, the paper's value for the bound (0.1 untuned, 0.01 MAP-tuned
        # or custom). With gradient moves one q_db tracks the bright rows' mean Ltilde_n,
        # which reached the old common cap 0.1 on a Poisson-log model of 100 groups
        # (N = 5·10^4): 50 % of N read per draw for a smallest ESS near 300 of 4000 draws,
        # where 0.01 read 5 % for about 130 (PyMC 5, 2 x 2000 draws). Such models now
        # tune a rate per group of rows (_adapt_cell_rates).
        cap = self._untuned_q_db
        self.q_db = float(min(cap, max(self.bright_fraction.mean, self.q_db_floor)))

    def _brightening_cells(self) -> RowsByCell | None:
        """The rows of a multilevel likelihood grouped by the coordinates they touch, whose
        brightening rates gradient moves tune cell by cell; None for other likelihoods
        and moves."""
        if self.theta_update not in GRADIENT_UPDATES or getattr(self.bound, "exact", False):
            return None
        supports = None if self._lp is None else likelihood_row_supports(self._lp)
        if supports is None:
            return None
        cells = cell_index(supports[0])
        if cells is None or cells.sizes.size > MAX_RATE_CELLS:
            return None
        return cells

    def _adapt_cell_rates(self) -> None:
        """Per-cell brightening rates (:mod:`~pymc_minibatch_mh.kernels.brightening_rates`):
        a typical bright row's ``Ltilde`` in its cell, at most
        :data:`CELL_RATE_SPEND` times the cell's mean number of bright rows per row, and at
        least the bright fraction of all rows."""
        cell_of_row, sizes = self._cells.cell_of_row, self._cells.sizes
        fly = self.firefly
        bright = np.asarray(fly.store.bright_indices(), dtype=np.int64)
        evidence = self._cell_evidence or CellRateEvidence.empty(sizes.size)
        with np.errstate(over="ignore"):
            lt = np.exp(fly.log_lt[bright])
        self._cell_evidence = evidence.update(cell_of_row[bright], lt)
        floor = max(self.q_db_floor, float(np.sum(self._cell_evidence.bright)) / sizes.sum())
        rates = self._cell_evidence.rates(sizes, floor, CELL_RATE_SPEND)
        self.cell_rates = CellRates.build(self._cells, rates)
        self.q_db = self.cell_rates.largest

    def _q_db_evidence(self) -> tuple[float, int]:
        """``(numerator, denominator)`` of the value ``q_db`` tracks while tuning.

        Random walk: the bright fraction ``n_bright / N``. Gradient moves cross the
        posterior in one transition, so ``z`` should refresh as fast: a bright datum turns
        dark with probability ``min(1, q_db / Ltilde_n)``, and ``q_db`` tracks the mean
        ``Ltilde_n`` of the bright data (at most 1), which lets a typical bright datum turn
        dark at the next iteration. Measured (logistic regression, D = 101, N = 10^5):
        the bright fraction was 0.00045 and the bright data's mean ``Ltilde`` 0.002; min
        ESS 296 -> 621 of 2000 draws, 23 % more sampling time.
        """
        n_data = self.tall_data.n_data
        fly = self.firefly
        if self.theta_update not in GRADIENT_UPDATES or fly is None:
            return self._last_n_bright, n_data
        bright = np.asarray(fly.store.bright_indices(), dtype=np.int64)
        if not bright.size:
            return 0.0, n_data
        with np.errstate(over="ignore"):
            typical = float(np.mean(np.exp(fly.log_lt[bright])))
        return min(typical, 1.0), 1

    def _stats(self, infos: list) -> dict:
        stats = super()._stats(infos)
        stats["n_bright"] = infos[-1].n_bright
        stats["excluded_mass"] = self.excluded_mass
        # Distinct rows: a draw that drew z exactly read every row, whatever came after.
        stats["batch_size"] = min(stats["batch_size"], self.tall_data.n_data)
        return stats


#: Largest rounding error (in nats) tolerated in the collapsed sum of the bounds.
_MAX_SUM_ROUNDING = 0.01
#: Largest fraction of the rows left without a bound (read at every iteration) for it.
_MAX_UNBOUNDED_FRACTION = 0.5


def _precise_bounds(bounds: list, region) -> list:
    """The bounds, with the loosest rows left without a bound where the collapsed sum
    would otherwise lose its precision on the trust region; refused if that cannot help.

    FlyMC's target adds the collapsed sum of all N log-bounds and subtracts the bright
    data's own: where a quadratic bound falls far below its likelihood (a curvature such
    as ``exp(eta_hi)`` taken at the region's far end) both are huge and cancel, and the
    float64 rounding of the sum, about ``eps D sum_n |a_n| reach_n^2``, swamps the
    likelihood itself. Measured on a Poisson regression whose 200-row category has only
    zero counts (prior sd 100): curvatures near ``e^96``, and a chain that settled where
    the log posterior is -1.6e30. A single bound (of one likelihood) drops the rows of
    largest ``|a_n| reach_n^2`` from its sum until the rest rounds by at most
    :data:`_MAX_SUM_ROUNDING` nats: FlyMC reads those rows at every iteration (they are
    bright with probability near 1 anyway), as it reads rows whose bound overflowed on the
    region. Bounds of several likelihoods, and bounds that would leave more than
    :data:`_MAX_UNBOUNDED_FRACTION` of the rows unbounded, are refused.
    """
    eps = float(np.finfo(np.float64).eps)
    limit = _MAX_SUM_ROUNDING / (eps * region.centre.size)
    spreads = [_row_spreads(bound, region) for bound in bounds]
    total = sum(float(np.sum(spread)) for spread in spreads)
    most = _MAX_UNBOUNDED_FRACTION * bounds[0].n_data
    if total <= limit and all(np.size(_unbounded_rows(b)) <= most for b in bounds):
        return bounds
    (bound,) = bounds if len(bounds) == 1 else (None,)
    if hasattr(bound, "without_bounds_on"):
        spread = spreads[0]
        order = np.argsort(spread)[::-1]
        # left[k]: the sum over the rows kept after dropping the k loosest (summed from the
        # smallest up: a difference of huge sums would be rounding noise).
        left = np.append(np.cumsum(spread[order][::-1])[::-1], 0.0)
        n_drop = int(np.searchsorted(-left, -limit))
        if n_drop + np.size(_unbounded_rows(bound)) <= most:
            return [bound.without_bounds_on(order[:n_drop]) if n_drop else bound]
    rounding = eps * region.centre.size * total
    raise UnsupportedBound(
        f"FlyMC's bounds ({', '.join(b.family for b in bounds)}) are so loose on their "
        f"trust region that their summed log-bound would be rounded by about "
        f"{rounding:.2g} nats (curvatures up to {_largest_curvature(bounds):.3g}), and "
        "reading the loosest rows at every iteration instead would not help: the "
        "posterior is much wider than its Laplace fit at the MAP in some direction, as "
        "with a diffuse prior and a (quasi-)separated category. FlyMC cannot sample it "
        "exactly. Use TunaMH(), which estimates the mass outside its region after "
        "tuning and grows the region, or MinibatchBarker(); or give the coefficients a "
        "weakly informative prior."
    )


#: Expected gap ``log L_n - log B_n`` (nats, under the Laplace fit) above which a row is
#: read at every iteration instead of bounded.
_BRIGHT_GAP = 2.0


def _without_bounds_on_bright_rows(bound, laplace: TrustRegion):
    """The bound without bounds on the rows that would be bright most of the time.

    A MAP-tuned bound can be far more curved than its likelihood in a direction the
    posterior spreads along: the rows of a category whose outcomes are all zero, under a
    diffuse prior, have a Jaakkola-Jordan bound tight at an ``eta`` near -12 with
    curvature ``1 / (4 |eta|)`` per trial against the likelihood's ``e^eta``. Their
    coefficient then sticks near the MAP until its rows turn bright one by one, and the
    chain traps (measured, Binomial-logit, N = 2,000, prior sd 100: the coefficient 0.8
    posterior sd off after 2 x 4,000 draws, ESS 6). ``|a_n| x_n' Sigma x_n`` (``a_n`` the
    bound's curvature, ``Sigma`` the Laplace covariance) bounds the row's expected gap
    ``log L_n - log B_n`` over the Laplace fit (an ordinal row's bound keeps its own
    Hessian, so its gap is set by the cubic term instead:
    :meth:`~pymc_minibatch_mh.bounds.ordinal_taylor.OrdinalQuadraticBound.bright_gaps`;
    on the ordinal quasi-separation case the middle level's rows, about 3 nats each);
    rows where it exceeds
    :data:`_BRIGHT_GAP` nats are bright more than half the time anyway, and are read at every
    iteration (exactly, so the chain moves on their likelihood itself), at most
    :data:`_MAX_UNBOUNDED_FRACTION` of the rows, the loosest first.
    """
    if not hasattr(bound, "without_bounds_on"):
        return bound
    if hasattr(bound, "bright_gaps"):  # slack not set by the curvature (ordinal)
        gaps = bound.bright_gaps(laplace)
    else:
        gaps = _spreads_on(bound, laplace)
    gaps[_unbounded_rows(bound)] = 0.0
    rows = np.flatnonzero(gaps > _BRIGHT_GAP)
    room = int(_MAX_UNBOUNDED_FRACTION * bound.n_data) - np.size(_unbounded_rows(bound))
    if rows.size > room:
        rows = rows[np.argsort(gaps[rows])[::-1][: max(room, 0)]]
    return bound.without_bounds_on(rows) if rows.size else bound


def _unbounded_rows(bound) -> np.ndarray:
    """The rows a bound leaves without a bound (none for most bounds)."""
    return getattr(bound, "unbounded_rows", np.empty(0, dtype=np.int64))


def _row_spreads(bound, region) -> np.ndarray:
    """Each row's ``|a_n| reach_n^2`` (summed over its channels) on the region: the size of
    its term in the collapsed sum where the bound is loosest; 0 for a global bound."""
    if getattr(bound, "region", None) is None:
        return np.zeros(bound.n_data)
    return _spreads_on(bound, region)


def _spreads_on(bound, region) -> np.ndarray:
    """Each row's ``|a_n| reach_n^2`` on ``region``, whether or not the bound needs one."""
    if hasattr(bound, "row_spreads"):  # three channels, ordinal
        return bound.row_spreads(region)
    known = getattr(bound, "row_norms", None)
    norms = None if known is None else known.of(region.chol)
    if norms is None:
        norms = _row_norms(bound.design, region.chol)
    reach = region.row_radii() * norms
    if not hasattr(bound, "curvature_eta"):
        return np.abs(bound.curvature) * reach**2
    # Two channels: eta and the free scale (shared, or one per row).
    if bound.scale_design is not None:
        scale_reach = region.row_radii() * _row_norms(bound.scale_design, region.chol)
    else:
        scale_reach = region.radius * float(np.linalg.norm(region.chol.T @ bound.scale_row))
    spread = np.abs(bound.curvature_eta) * bound.weight**2 * reach**2
    spread = spread + np.abs(bound.curvature_scale) * scale_reach**2
    if bound.cross is not None:
        spread = spread + 2.0 * np.abs(bound.cross) * bound.weight * reach * scale_reach
    return spread


def _largest_curvature(bounds: list) -> float:
    values = [
        float(np.max(np.abs(getattr(b, "curvature", getattr(b, "curvature_eta", 0.0)))))
        for b in bounds
    ]
    return max(values)


def _gradient_step_size(theta_update: str, ndim: int) -> float:
    """Initial step of a gradient move in whitened units: MALA's optimum ``1.65 d^(-1/6)``,
    HMC's usual ``d^(-1/4)`` scaling."""
    if theta_update == "mala":
        return 1.65 * ndim ** (-1 / 6)
    return ndim ** (-0.25)


def _quadratic_bound_likelihood(model) -> bool:
    """Whether every observed variable is a Bernoulli, Binomial or Student-t: the
    likelihoods whose built-in bounds are quadratic in the parameters and global (with
    fixed parameters besides the linear predictor, as a Normal prior on every free variable
    implies), so that split HMC applies."""
    observed = model.observed_RVs
    return bool(observed) and all(
        isinstance(rv.owner.op, BernoulliRV | BinomialRV | StudentTRV) for rv in observed
    )


def _exact_normal_likelihood(model) -> bool:
    """Whether every observed variable is a Normal with one ``sigma`` for all rows (fixed
    or free): the likelihood FlyMC sums exactly from sufficient statistics when its mean is
    a linear predictor (:mod:`pymc_minibatch_mh.bounds.normal_exact`)."""
    observed = model.observed_RVs
    return bool(observed) and all(
        isinstance(rv.owner.op, NormalRV)
        and all(rv.owner.op.dist_params(rv.owner)[1].type.broadcastable)  # one value
        for rv in observed
    )


def _needs_region(lp) -> bool:
    """Whether the part's bound holds only on a trust region (Poisson-log, Gamma-log, Beta,
    zero-inflated and hurdle Poisson, ordinal, a Student-t free scale, a scale per
    row)."""
    return (
        family_record(lp.family).firefly_region
        or (lp.free_scale and lp.family == "student_t")
        or getattr(lp, "row_scales", False)
    )


def _build_bound(
    lp, q_map: np.ndarray | None, q_init: np.ndarray, region=None, row_norms_chol=None
):
    """Bounds of the recognised family: MAP-tuned if ``q_map`` is given, else untuned
    (Poisson-log, Gamma-log: MAP-tuned on the trust region ``region``). A MAP-tuned
    Bernoulli bound also holds its rows' norms through ``row_norms_chol``, if given."""
    family = lp.family
    numerics = family_numerics(family)
    if numerics is not None:
        return numerics.firefly_bound(lp, q_map, q_init, region)
    if family_record(family).negative_binomial_counts:  # alone, zero-inflated or hurdle
        return negative_binomial_bound(lp, q_map, q_init)
    if family_record(family).ordinal:
        return map_tuned_ordinal(lp, q_map, region)
    if family in CHANNEL_DERIVATIVES or getattr(lp, "row_scales", False):
        # Beta, zero-inflated and hurdle Poisson; Normal / Student-t with a scale per row.
        return map_tuned_region_taylor(lp, q_map, region)
    if family == "normal":  # free scale or one fixed sigma (checked by _check_part)
        return exact_normal_likelihood(lp, q_init if q_map is None else q_map)
    if lp.free_scale:
        return map_tuned_free_scale(lp, q_map, region)
    if family in ("bernoulli_logit", "binomial_logit"):
        trials = lp.params.get("n")  # Binomial: a sum of n Bernoulli bounds per row
        if q_map is None:
            return untuned_jaakkola_jordan(
                lp.design, lp.offset, lp.observed, xi=UNTUNED_XI, centre=q_init, trials=trials
            )
        return map_tuned_jaakkola_jordan(
            lp.design, lp.offset, lp.observed, q_map, trials=trials, row_norms_chol=row_norms_chol
        )
    if family == "student_t":
        nu, sigma = lp.params["nu"], lp.params["sigma"]
        if q_map is None:
            return untuned_student_t(lp.design, lp.offset, lp.observed, nu, sigma, centre=q_init)
        return map_tuned_student_t(lp.design, lp.offset, lp.observed, nu, sigma, q_map)
    if family == "categorical_logit":
        common = {"coef_map": lp.coef_map, "coef_offset": lp.coef_offset}
        if q_map is None:
            return untuned_bohning(
                lp.design, lp.offset, lp.observed, lp.n_classes, centre=q_init, **common
            )
        return map_tuned_bohning(lp.design, lp.offset, lp.observed, lp.n_classes, q_map, **common)
    raise AssertionError(f"unexpected family {family!r}")  # guarded by the caller
