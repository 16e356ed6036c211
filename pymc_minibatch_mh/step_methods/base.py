"""Common PyMC plumbing for minibatch MH step methods (PyMC 5.2x and 6.x)."""

from __future__ import annotations

import functools
import math
import time
import warnings
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, fields, replace

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pymc.vartypes import continuous_types
from pytensor.tensor.random.basic import NormalRV

from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.bounds.normal_exact import exact_normal_likelihood
from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow, ScaleAdaptation, adapt_scale
from pymc_minibatch_mh.kernels.control_variates import (
    ControlVariateTarget,
    ExactSumTarget,
    ImageTaylorProxy,
    TaylorProxy,
)
from pymc_minibatch_mh.kernels.proposals import (
    IndependenceProposal,
    ProposalMixture,
    RandomWalkProposal,
)
from pymc_minibatch_mh.kernels.surrogate_hmc import SurrogateHMC
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.likelihood import build_tall_data, recognise_linear_predictor
from pymc_minibatch_mh.likelihood.batching import probe_indices
from pymc_minibatch_mh.likelihood.compiling import (
    compile_seconds,
    functions_compiled,
    functions_loaded,
    functions_uncacheable,
)
from pymc_minibatch_mh.likelihood.data_support import explain_non_finite_rows
from pymc_minibatch_mh.likelihood.glm_likelihoods import UnsupportedLikelihood
from pymc_minibatch_mh.likelihood.image import LikelihoodImage, find_likelihood_image
from pymc_minibatch_mh.likelihood.inspection import described_datum_inputs
from pymc_minibatch_mh.likelihood.shared_functions import shared_functions
from pymc_minibatch_mh.likelihood.surrogate import compile_surrogate_density
from pymc_minibatch_mh.likelihood.taylor import (
    NonFiniteTaylor,
    ResidualCheck,
    checked_residual_diff,
    chunked_taylor_sums,
    compile_chunk_derivatives,
    compile_prior_derivatives,
    compile_residual_diff,
    compile_sum_derivatives,
)
from pymc_minibatch_mh.passes import data_passes, passes_counted_on
from pymc_minibatch_mh.progress import progress_status
from pymc_minibatch_mh.step_methods.monitor import (
    NOISE_ROWS,
    NOISY_RATIO_CAUSE,
    PostTuningTally,
    chain_problems,
)
from pymc_minibatch_mh.step_methods.reference import (
    MODE_NEWTON_TOLERANCE,
    SUBSAMPLE_NEWTON_TOLERANCE,
    block_position,
    find_map,
    laplace_covariance,
    newton_map,
    newton_subsample,
)

PROPOSALS = ("auto", "rw", "laplace", "independent")
#: ``proposal="auto"``: probability of an independence move before tuning has measured
#: how well the Gaussian fit works.
INITIAL_P_INDEPENDENT = 0.5
#: Bounds of the tuned probability of an independence move (the random walk keeps at
#: least this share, and the independence moves too).
P_INDEPENDENT_RANGE = (0.2, 0.8)
#: Above this many dimensions a Gaussian fit is rarely good enough for independence moves
#: (their acceptance falls with the dimension), so their tuned share may fall to
#: HIGH_DIM_P_FLOOR, and a refitted proposal starts at the usual floor instead of
#: INITIAL_P_INDEPENDENT. Measured (TunaMH, centred hierarchy with 200 groups, N = 20,000):
#: min ESS 90 of 1000 draws with a share of 0.5 after every refit, 195 with local moves only.
HIGH_DIM = 20
HIGH_DIM_P_FLOOR = 0.02
#: Below this acceptance rate of its moves (relative to the method's best rate, see
#: ``best_independent_rate``) the independence proposal is refitted to the tuning draws:
#: the window's mean and covariance, the covariance inflated by this factor.
REFIT_BELOW = 0.1
REFIT_INFLATION = 1.2**2
#: A window's sample covariance is shrunk towards the covariance in use with weight
#: ``count / (count + COVARIANCE_PRIOR_DRAWS * d)``: a few hundred correlated draws
#: estimate a d x d covariance poorly, and the Laplace covariance is a good prior guess.
COVARIANCE_PRIOR_DRAWS = 10
#: Acceptance rate of the inner HMC step on the surrogate that tuning aims at.
SURROGATE_TARGET_ACCEPT = 0.8
SURROGATE_TRANSITIONS = 10
#: HMC transitions per draw when the surrogate is the exact posterior (``_exact_sum``):
#: one per draw, as an even number of them would cancel the antithetic correlation of
#: HMC draws on a near-Gaussian posterior (measured: 1.5 effective draws per transition).
EXACT_SUM_TRANSITIONS = 1

# ``accepted`` is float64 (0.0 / 1.0), as in PyMC's Metropolis: PyMC refuses a compound
# step whose samplers report the same stat name with different dtypes.
COMMON_STATS = {
    "accepted": (np.float64, []),
    "accept": (np.float64, []),
    "batch_size": (np.int64, []),
    "n_lik_evals": (np.int64, []),
    "scaling": (np.float64, []),
    # A pymc SamplerWarning when a post-tuning check finds a problem, else None: PyMC
    # logs it while sampling and drops the stat from the returned trace.
    "warning": (SamplerWarning, None),
}

# How per-iteration info is folded into one stat when steps_per_draw > 1.
_REDUCERS = {
    "accepted": lambda xs: float(any(xs)),
    "accept": lambda xs: float(np.mean(xs)),
    "batch_size": sum,
    "n_lik_evals": sum,
    "poisson_draws": sum,
    "n_kept": sum,
    "chi": lambda xs: xs[-1],
    "region_exits": sum,
}


@dataclass_state
class MinibatchStepState(StepMethodState):
    adaptation: ScaleAdaptation
    cov_window: CovarianceWindow | None
    proposal: RandomWalkProposal | IndependenceProposal
    reference: TaylorProxy | None
    chain_started: bool
    tune: bool
    independent_tally: tuple
    post_tuning: PostTuningTally
    n_data_passes: float


def setup_cache(compiled: int, loaded: int, uncacheable: int = 0) -> str:
    """Whether a construction ran on warm or cold compile caches.

    Parameters
    ----------
    compiled : int
        Functions it compiled because the package's on-disk cache
        (:mod:`~pymc_minibatch_mh.likelihood.function_cache`) did not hold them.
    loaded : int
        Functions it loaded from that cache.
    uncacheable : int, default 0
        Functions it compiled because the cache cannot key their graphs: compiled in every
        process. Beside loaded functions they are the recogniser's small probes and do not
        count; alone (e.g. every function of a step whose block leaves free variables
        outside) they make the construction cold in every process.

    Returns
    -------
    str
        ``"warm"``: nothing was compiled but the probes (every function was loaded from
        the cache, or reused from an earlier step on the same model in this process);
        ``"cold"``: every function was compiled; ``"partly warm"``: some of each (e.g. a
        model that shares some graphs with one built before).
    """
    if compiled == 0 and (loaded > 0 or uncacheable == 0):
        return "warm"
    return "cold" if loaded == 0 else "partly warm"


def _timed_construction(init):
    """Wrap a step's ``__init__`` so that the outermost call records ``setup_s`` (wall
    time of the whole construction), ``compile_s`` (compiling or loading PyTensor functions
    within it), ``functions_compiled`` / ``functions_loaded`` / ``functions_uncacheable``
    and ``setup_cache`` (see
    :func:`setup_cache`) and ``n_data_passes`` (rows read by full-data work within it,
    divided by N)."""

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        outermost = not getattr(self, "_constructing", False)
        if outermost:
            self._constructing = True
            start, compiled, passes = time.perf_counter(), compile_seconds(), data_passes()
            counts = (functions_compiled(), functions_loaded(), functions_uncacheable())
        try:
            init(self, *args, **kwargs)
        finally:
            if outermost:
                self._constructing = False
        if outermost:
            self.setup_s = time.perf_counter() - start
            self.compile_s = compile_seconds() - compiled
            self.functions_compiled = functions_compiled() - counts[0]
            self.functions_loaded = functions_loaded() - counts[1]
            self.functions_uncacheable = functions_uncacheable() - counts[2]
            self.setup_cache = setup_cache(
                self.functions_compiled, self.functions_loaded, self.functions_uncacheable
            )
            self.n_data_passes = round(data_passes() - passes, 3)

    return wrapper


class MinibatchStep(ArrayStepShared):
    """Base class: random-walk proposals in the unconstrained space plus a minibatch test.

    Subclasses implement :meth:`_transition` with a kernel from
    :mod:`pymc_minibatch_mh.kernels` and declare their extra stats.

    After construction, ``setup_s`` is the wall time the construction took (MAP search,
    full-data passes, compilation), ``compile_s`` the part of it spent compiling PyTensor
    functions or loading them from the on-disk cache of
    :mod:`~pymc_minibatch_mh.likelihood.function_cache` (graph rewriting, C compilation,
    linking; what numba compiles at a function's first call counts in ``setup_s`` only),
    ``functions_compiled`` and ``functions_loaded`` how many of those functions were
    compiled because that cache did not hold them and how many were loaded from it
    (``functions_uncacheable``: compiled because the cache cannot key their graphs, in
    every process), ``setup_cache`` ``"cold"``, ``"warm"`` or
    ``"partly warm"`` accordingly (:func:`setup_cache`; PyTensor's own cache of C modules
    and numba's cache are not seen: a function compiled anew can still find its C modules
    or machine code there), and ``n_data_passes`` the full-data
    work done so far in passes over the data: rows read by validation, the Newton search
    for the mode, Taylor sums, bound constants and recentring, divided by N (a pass over
    a 5 % subsample counts 0.05; a fallback to ``pm.find_MAP`` is not counted).

    With control variates, a likelihood that is one Normal with a linear-predictor mean
    and a free log-linear scale is summed exactly from its sufficient statistics
    (``target.exact_sum``; one pass at construction): the step then reads no datum while
    sampling and its test is exact. ``exact_sum_unavailable`` says why a model has no
    such sum (None when it has one, or when control variates are off).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _timed_construction(cls.__dict__["__init__"])

    name = "minibatch_mh"
    default_blocked = True
    stats_dtypes_shapes = dict(COMMON_STATS)
    _state_class = MinibatchStepState
    default_target_accept = 0.234
    #: Acceptance rate of an independence proposal equal to the target (Metropolis' rule
    #: accepts every such move; Barker's accepts half of them).
    best_independent_rate = 1.0
    # Subclasses that need TallData.loglik_weighted_grad / logprior_grad set this
    # (on the class, or on the instance before calling MinibatchStep.__init__).
    _needs_gradients = False

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        temperature: float = 1.0,
        scaling: float | None = None,
        proposal: str = "auto",
        proposal_cov: np.ndarray | None = None,
        control_variates: bool | None = None,
        reference_point: dict | None = None,
        recentre: bool | None = None,
        start_at_reference: bool = True,
        target_accept: float | None = None,
        tune: bool = True,
        adapt_cov: bool | None = None,
        steps_per_draw: int | None = None,
        data_dim: str | None = None,
        progressbar: bool = True,
        model: pm.Model | None = None,
        rng=None,
        initial_point: dict | None = None,
        compile_kwargs: dict | None = None,
        blocked: bool = True,
    ):
        model = pm.modelcontext(model)
        if initial_point is None:
            initial_point = model.initial_point()
        vars = block_value_vars(model, vars)
        user_steps = steps_per_draw
        if steps_per_draw is None:
            steps_per_draw = self.default_steps_per_draw
        if proposal == "auto" and proposal_cov is not None:
            proposal = "rw"  # a given covariance asks for a random walk with it
        _check_options(
            temperature,
            steps_per_draw,
            target_accept,
            proposal,
            proposal_cov,
            control_variates,
            recentre,
        )
        if target_accept is None:
            target_accept = self.default_target_accept

        shared = make_shared_replacements(initial_point, vars, model)
        # Compiled functions and full-data results of earlier steps on this model.
        self._shared_functions = shared_functions(
            model,
            tuple(v.name for v in vars),
            (data_dim, repr(sorted((compile_kwargs or {}).items())), self._needs_gradients),
        )
        self.tall_data = self._shared_functions.get(
            "tall_data",
            lambda: build_tall_data(
                model,
                vars,
                shared=shared,
                initial_point=initial_point,
                data_dim=data_dim,
                compile_kwargs=compile_kwargs,
                gradients=self._needs_gradients,
            ),
        )
        ndim = self.tall_data.ndim
        self.vars = vars  # (set again by ArrayStepShared; the hooks below read it)
        self.temperature = float(temperature)
        self.progressbar = bool(progressbar)
        self.n_data_passes = 0
        self._check_applicable(model, vars, initial_point)
        control_variates = self._resolve_control_variates(control_variates)
        if proposal == "auto":
            proposal = self._auto_proposal(control_variates)

        self.reference: TaylorProxy | None = None
        self._taylor_derivatives = None
        self._residual_diff = None
        self._image_maps = None
        if control_variates or proposal != "rw":
            image = None
            functions = self._shared_functions
            # A Normal likelihood with a free scale is summed exactly (below): its proxy
            # needs no image, only the Taylor sums in q for the mode and Laplace fit.
            normal_lp = (
                self._normal_linear_predictor(model, initial_point) if control_variates else None
            )
            if control_variates and self.proxy_in_image and normal_lp is None:
                image = functions.get(
                    "image",
                    lambda: find_likelihood_image(
                        self.tall_data, block_position(initial_point, vars)
                    ),
                )
            if image is None:
                self._taylor_derivatives = functions.get(
                    "taylor_derivatives", lambda: compile_chunk_derivatives(self.tall_data)
                )
            else:
                graphs = self.tall_data.graphs
                self._taylor_derivatives = functions.get(
                    "image_taylor_derivatives",
                    lambda: compile_sum_derivatives(
                        image.phi, image.batch, graphs.idx, graphs.compile_kwargs, size=image.size
                    ),
                )
                self._image_maps = (image.to_image, image.pull_back)
            self._prior_derivatives = functions.get(
                "prior_derivatives", lambda: compile_prior_derivatives(self.tall_data)
            )
            whole_model = {v.name for v in vars} == {v.name for v in model.value_vars}
            try:
                if reference_point is None and whole_model:
                    self.reference = functions.get(
                        ("reference", self.temperature, image is not None),
                        lambda: self._newton_reference(model, initial_point),
                    )
                else:
                    if reference_point is None:
                        reference_point = find_map(
                            model, initial_point, progressbar=self.progressbar
                        )
                    self.reference = self._taylor_at(block_position(reference_point, vars))
            except NonFiniteTaylor as err:
                raise self._non_finite_rows(model, err) from err
            if control_variates:
                self._exact_sum = self._exact_likelihood_sum(normal_lp)
                if self._exact_sum is not None:
                    # The proxy is the likelihood itself: no residual function to compile.
                    self._residual_diff = no_residuals
                else:
                    self._residual_diff = functions.get(
                        ("residual_diff", image is not None),
                        lambda: self._compile_residuals(image),
                    )
        # Hamiltonian moves on the surrogate (prior + proxy) as the local move of "auto".
        self._surrogate = None
        if proposal == "auto" and control_variates and self.surrogate_moves:
            if self._exact_sum is not None:  # the prior; the likelihood sum is added to it
                self._surrogate = self._shared_functions.get(
                    "surrogate_prior",
                    lambda: compile_surrogate_density(self.tall_data, proxy=False),
                )
            else:
                self._surrogate = self._shared_functions.get(
                    ("surrogate", image is not None),
                    lambda: compile_surrogate_density(
                        self.tall_data, None if image is None else image.stacked
                    ),
                )
        self._untuned_reference = self.reference
        self._laplace_chol = None
        # Centre of the independence proposal and of the chains' start.
        centre = None if self.reference is None else self.reference.reference
        if self.reference is not None:
            try:
                self._laplace_chol = self._laplace_factor()
            except ValueError as err:
                if proposal in ("laplace", "independent"):
                    raise
                if proposal == "auto":
                    warnings.warn(
                        f"{type(self).__name__}: {err} The step falls back to an adaptive "
                        "random walk (proposal='rw'), and its draws may be wrong: in many "
                        "dimensions, or on the funnel-shaped posteriors of non-centred and "
                        "crossed effects, a random walk can fail to reach the bulk of the "
                        "posterior (the step warns after tuning when its chain mixes too "
                        "slowly). Pass reference_point= a point in the bulk of the posterior "
                        "(e.g. the mean of a short NUTS run), write the model centred, or use "
                        "NUTS.",
                        UserWarning,
                        stacklevel=2,
                    )
                    proposal = "rw"
        # Where tuning chains start (see `start_at_reference`): centre plus chol @ z.
        self._start_requested = bool(start_at_reference)
        self._start_centre = centre
        self._start_chol = self._laplace_chol
        self.chain_started = False
        self.proposal_kind = proposal
        if proposal == "rw":
            self._untuned_proposal = RandomWalkProposal.from_covariance(proposal_cov, ndim)
            default_scaling = self._default_scaling(
                temperature, self.tall_data.n_data, ndim, proposal_cov
            )
        elif proposal == "independent":
            self._untuned_proposal = IndependenceProposal(centre=centre, chol=self._laplace_chol)
            default_scaling = 1.0
        else:
            random_walk = RandomWalkProposal(self._laplace_chol)
            default_scaling = 2.38 / math.sqrt(ndim)
            p_independent = INITIAL_P_INDEPENDENT
            if self._surrogate is not None:
                # The local move is HMC on the surrogate; the scale is its step size.
                transitions = SURROGATE_TRANSITIONS
                if self._exact_sum is not None:
                    # The surrogate is the posterior: every HMC move is accepted by the
                    # exact test, and independence moves (rarely accepted in many
                    # dimensions) would only leave the chain in place.
                    transitions, p_independent = EXACT_SUM_TRANSITIONS, 0.0
                random_walk = SurrogateHMC(self._laplace_chol, transitions)
                default_scaling = ndim ** (-0.25)
            if proposal == "laplace":
                self._untuned_proposal = random_walk
            else:
                self._untuned_proposal = ProposalMixture(
                    random_walk,
                    IndependenceProposal(centre=centre, chol=self._laplace_chol),
                    p_independent,
                )
        self.proposal = self._untuned_proposal
        self._move_independent = False
        self._inner_accept = None
        # Recentring the control variates: True, at the end of tuning; None (default, with
        # control variates), whenever a tuning window shows the proxy's centre is off.
        self.recentre = recentre if control_variates else False
        self._recentre_window = (
            CovarianceWindow(ndim, first_window=50) if self.recentre is True else None
        )

        self.adapt_scale = proposal != "independent"
        if adapt_cov is None:
            adapt_cov = proposal in ("rw", "auto")
        self.adapt_cov = bool(adapt_cov) and ndim > 1 and proposal != "independent"
        self.cov_window = CovarianceWindow(ndim) if self.adapt_cov else None
        if scaling is None:
            scaling = default_scaling
        if not (math.isfinite(scaling) and scaling > 0):
            raise ValueError(f"scaling must be a positive finite number; got {scaling}.")
        self.target_accept = float(target_accept)
        if user_steps is not None:
            self.steps_per_draw = int(user_steps)
        elif self._exact_sum is not None and self._surrogate is not None:
            self.steps_per_draw = 1  # EXACT_SUM_TRANSITIONS exact HMC transitions per draw
        else:
            self.steps_per_draw = int(self._default_steps())
        self.adapt = bool(tune)
        self.tune = bool(tune)
        self._untuned_adaptation = ScaleAdaptation(math.log(scaling))
        self.adaptation = self._untuned_adaptation
        self.independent_tally = (0, 0.0)
        self.post_tuning = PostTuningTally()
        self._pending_warnings: list = []
        # Names and sizes of the block's value variables, for the mixing warning.
        self._block_names = tuple(v.name for v in vars)
        self._block_sizes = tuple(int(np.size(initial_point[v.name])) for v in vars)
        super().__init__(vars, shared, blocked=blocked, rng=rng)

    # ---------------------------------------------------------------- construction hooks
    #: Whether the method can use Taylor control variates (FlyMC's bounds play that role).
    supports_control_variates = True
    #: The end of the warning when nearly all rows are read per step (see
    #: :func:`~pymc_minibatch_mh.step_methods.monitor.chain_problems`).
    full_data_cause = NOISY_RATIO_CAUSE
    #: Inner MH iterations per PyMC draw when ``steps_per_draw`` is not given.
    default_steps_per_draw = 1

    def _default_steps(self) -> int:
        """``steps_per_draw`` when the user gives none, decided once the block's
        dimension and the proposal are known (the base: :attr:`default_steps_per_draw`)."""
        return self.default_steps_per_draw

    #: Expand the control variates in the likelihood's image (see
    #: :mod:`pymc_minibatch_mh.likelihood.image`) when one is found. TunaMH's bounds
    #: are derived for a proxy in ``q`` and keep it.
    proxy_in_image = True
    #: With control variates, ``proposal="auto"`` mixes independence moves with HMC moves
    #: on the surrogate posterior (prior + proxy) instead of a random walk.
    surrogate_moves = True
    #: The full-data log-likelihood in closed form (``log_bound_sum``), when a step found
    #: one (a Normal likelihood's sufficient statistics): then no datum is read.
    _exact_sum = None
    #: Why ``_exact_sum`` is None (None when it is set or was not looked for).
    exact_sum_unavailable: str | None = None

    def _check_applicable(self, model: pm.Model, vars: Sequence, initial_point: dict) -> None:
        """Refuse a model the method cannot sample, before any pass over the data.

        Subclasses that need a recognised likelihood (TunaMH, FlyMC) override this.
        """

    def _auto_proposal(self, control_variates: bool) -> str:
        """What ``proposal="auto"`` means for this method and model (the mixture here)."""
        return "auto"

    def _control_variates_unavailable(self) -> str | None:
        """Why control variates cannot be used for this model and block, or None."""
        if not self.supports_control_variates:
            return f"{type(self).__name__} does not use control variates"
        outside = self.tall_data.graphs.likelihood_outside_block
        if outside:
            return (
                f"the likelihood depends on {list(outside)}, which are outside the step's "
                "block (sampled by other step methods), so the proxy's full-data sums could "
                "not be kept fixed"
            )
        return None

    def _resolve_control_variates(self, requested: bool | None) -> bool:
        """``control_variates=None`` means: on whenever the model allows them."""
        reason = self._control_variates_unavailable()
        if requested is None:
            if reason is not None and self.supports_control_variates:
                warnings.warn(
                    f"{type(self).__name__}: control variates are off because {reason}. "
                    "Without them the minibatch log-likelihood ratio is noisy at temperature "
                    "1, and batches grow towards N (or, for TunaMH, steps shrink). Put every "
                    "free variable of the likelihood in the step's block (vars=None does) to "
                    "switch them on.",
                    UserWarning,
                    stacklevel=3,
                )
            return reason is None
        if requested and reason is not None:
            raise ValueError(f"control_variates=True is not possible: {reason}.")
        return bool(requested)

    def _taylor_at(
        self, position: np.ndarray, *, progressbar: bool = True, rows: np.ndarray | None = None
    ) -> TaylorProxy:
        """Full-data Taylor sums at ``position`` (one pass over the data, counted).

        With ``rows``, estimates of them from those rows (scaled by N / len(rows)). With
        the proxy in the likelihood's image (``proxy_in_image``) the pass sums in ``phi``
        and the sums in ``q`` follow by the chain rule (no second pass).
        """
        progressbar = self.progressbar and progressbar and rows is None
        position = np.asarray(position, dtype=np.float64)
        if self._image_maps is None:
            return chunked_taylor_sums(
                self._taylor_derivatives,
                position,
                self.tall_data.n_data,
                rows=rows,
                progressbar=progressbar,
            )
        to_image, pull_back = self._image_maps
        image = chunked_taylor_sums(
            self._taylor_derivatives,
            to_image(position),
            self.tall_data.n_data,
            rows=rows,
            progressbar=progressbar,
        )
        gradient, hessian = pull_back(position, image.gradient, image.hessian)
        return ImageTaylorProxy(
            reference=position.copy(),
            value=image.value,
            gradient=np.asarray(gradient, dtype=np.float64),
            hessian=0.5 * (hessian + hessian.T),
            image=image,
        )

    def _non_finite_rows(self, model: pm.Model, err: NonFiniteTaylor) -> NonFiniteTaylor:
        """``err`` with the rows whose log-likelihood is not finite at its point named
        (one more pass), or ``err`` itself when every row's is finite there."""
        if err.point is None:
            return err
        explanation = explain_non_finite_rows(
            self.tall_data.loglik_full,
            err.point,
            described_datum_inputs(model, self.tall_data.n_data),
            "the point the step's setup started from (the model's initial point, or "
            "reference_point if given)",
        )
        return err if explanation is None else NonFiniteTaylor(explanation, err.point)

    def _laplace_factor(self) -> np.ndarray:
        """Cholesky factor of the Laplace covariance at the reference point; ValueError
        where the log posterior is not concave there."""
        prior_hessian = self._prior_derivatives(self.reference.reference)[2]
        cov = laplace_covariance(self.reference, prior_hessian, self.temperature)
        return np.linalg.cholesky(cov)

    def _newton_reference(self, model: pm.Model, initial_point: dict) -> TaylorProxy:
        """Taylor sums at the posterior mode, found by Newton steps whose passes are the
        Taylor passes themselves (:func:`newton_map`); ``pm.find_MAP`` from the best point
        reached if Newton does not converge."""
        start = block_position(initial_point, self.vars)
        status = f"{type(self).__name__}: Newton search for the posterior mode"
        with progress_status(status, enabled=self.progressbar):
            rows = newton_subsample(self.tall_data.n_data)
            if rows is not None:
                # Most of the way on a subsample (its sums scaled to N): the full-data
                # passes then start within a few posterior sds of the mode.
                start = newton_map(
                    lambda q: self._taylor_at(q, rows=rows),
                    self._prior_derivatives,
                    start,
                    temperature=self.temperature,
                    tolerance=SUBSAMPLE_NEWTON_TOLERANCE,
                ).position
            result = newton_map(
                lambda q: self._taylor_at(q, progressbar=False),
                self._prior_derivatives,
                start,
                temperature=self.temperature,
                tolerance=MODE_NEWTON_TOLERANCE,
            )
        if result.converged:
            return result.proxy
        point = dict(initial_point)
        point.update(_unravel(result.position, self.vars, initial_point))
        reference_point = find_map(model, point, progressbar=self.progressbar)
        return self._taylor_at(block_position(reference_point, self.vars))

    def _compile_residuals(self, image: LikelihoodImage | None):
        """The residual function of the control variates (in ``q`` or in the image)."""
        if image is None:
            return compile_residual_diff(
                self.tall_data,
                derivatives=self._taylor_derivatives,
                reference=self.reference.reference,
            )
        rng = np.random.default_rng(7)
        q_ref = self.reference.reference + 0.05 * rng.standard_normal(self.tall_data.ndim)
        q_old = q_ref + 0.05 * rng.standard_normal(q_ref.size)
        q_new = q_ref + 0.05 * rng.standard_normal(q_ref.size)
        graphs = self.tall_data.graphs
        return checked_residual_diff(
            image.phi,
            image.batch,
            graphs.idx,
            graphs.compile_kwargs,
            check=ResidualCheck(
                points=tuple(image.to_image(q) for q in (q_ref, q_old, q_new)),
                # The likelihood ratio of the images is that of their preimages.
                ratio=lambda _new, _old, rows: self.tall_data.loglik_diff(q_new, q_old, rows),
                derivatives=self._taylor_derivatives,
                rows=probe_indices(self.tall_data.n_data),
            ),
        )

    def _exact_likelihood_sum(self, lp):
        """The block's log-likelihood summed in closed form, or None.

        A Normal likelihood with a free scale (``y ~ Normal(X q + o, exp(z . q + s0))``)
        is a function of ``O(D^2)`` sufficient statistics, gathered in one pass at the
        reference point (:mod:`pymc_minibatch_mh.bounds.normal_exact`). With it the
        control variates' proxy is the log-likelihood itself: no datum is read after
        construction and every step's test is the exact MH test. Why a model has none is
        kept in ``exact_sum_unavailable``.

        Parameters
        ----------
        lp : LinearPredictorLikelihood or None
            The likelihood from :meth:`_normal_linear_predictor` (None: no exact sum).
        """
        if lp is None:
            return None
        try:
            return exact_normal_likelihood(lp, self.reference.reference)
        except UnsupportedBound as err:
            self.exact_sum_unavailable = str(err)
            return None

    def _normal_linear_predictor(self, model: pm.Model, initial_point: dict):
        """The likelihood as a linear predictor when it is one Normal with a free scale."""
        observed = list(model.observed_RVs)
        if len(observed) != 1 or not isinstance(observed[0].owner.op, NormalRV):
            written = ", ".join(
                f"{getattr(rv.owner.op, 'name', type(rv.owner.op).__name__)} ({rv.name!r})"
                for rv in observed
            )
            self.exact_sum_unavailable = (
                f"the likelihood is {written or 'missing'}; a closed-form sum needs one Normal"
            )
            return None
        try:
            lp = self._recognise_linear_predictor(model, initial_point)
        except UnsupportedLikelihood as err:
            self.exact_sum_unavailable = str(err)
            return None
        return normal_with_free_scale(lp, self)

    def _recognise_linear_predictor(self, model: pm.Model, initial_point: dict):
        """The likelihood as a linear-predictor family over this step's block, checked
        against the compiled per-datum likelihood; raises ``UnsupportedLikelihood``."""
        status = f"Reading the likelihood as a linear predictor ({self.tall_data.n_data:,} rows)"
        with progress_status(status, enabled=self.progressbar):
            return self._shared_functions.get(
                "linear_predictor",
                lambda: recognise_linear_predictor(
                    model,
                    self.vars,
                    shared=make_shared_replacements(initial_point, self.vars, model),
                    initial_point=initial_point,
                    check_against=self.tall_data.loglik,
                ),
            )

    @property
    def start_at_reference(self) -> bool:
        """Whether chains that tune start at (a Laplace draw around) the reference point."""
        return self._start_requested and self._start_centre is not None

    @property
    def control_variates(self) -> bool:
        return self._residual_diff is not None

    @property
    def target(self):
        """What the kernels read: the model's per-datum likelihood, or with control
        variates a :class:`~pymc_minibatch_mh.kernels.control_variates.ControlVariateTarget`
        whose ratio terms are residuals of the Taylor proxy at ``self.reference`` (an
        :class:`~pymc_minibatch_mh.kernels.control_variates.ExactSumTarget`, which reads no
        data, when the log-likelihood's sum is known in closed form: ``_exact_sum``)."""
        if self._residual_diff is None:
            return self.tall_data
        if self._exact_sum is not None:
            return ExactSumTarget(self.tall_data, self._exact_sum)
        if isinstance(self.reference, ImageTaylorProxy):
            return ControlVariateTarget(
                self.tall_data,
                self.reference.image,
                self._residual_diff,
                coordinates=self._image_maps[0],
            )
        return ControlVariateTarget(self.tall_data, self.reference, self._residual_diff)

    @staticmethod
    def _default_scaling(temperature, n_data, ndim, proposal_cov) -> float:
        """2.38/sqrt(d), times the O(sqrt(K/N)) posterior scale when no covariance is given."""
        scale = 2.38 / math.sqrt(ndim)
        if proposal_cov is None:
            scale *= math.sqrt(temperature / n_data)
        return scale

    # ---------------------------------------------------------------- PyMC hooks
    def reset_tuning(self) -> None:
        """Restore the proposal, its scale and the control variates to their untuned state."""
        self.adaptation = self._untuned_adaptation
        self.proposal = self._untuned_proposal
        self.reference = self._untuned_reference
        self.chain_started = False
        self.cov_window = CovarianceWindow(self.tall_data.ndim) if self.adapt_cov else None
        if self.recentre is True:
            self._recentre_window = CovarianceWindow(self.tall_data.ndim, first_window=50)
        self.independent_tally = (0, 0.0)
        # The chain's length (PyMC 6 says it before resetting tuning) is kept.
        self.post_tuning = PostTuningTally(last_draw=self.post_tuning.last_draw)
        self._pending_warnings = []

    def stop_tuning(self) -> None:
        """End of tuning: with ``recentre=True``, move the control variates to the chain's
        recent mean (one pass over the data); the proxy is fixed from then on."""
        if self.recentre is True and self.tune and self._recentre_window.count > 0:
            self._recentre(self._recentre_window.mean)
        super().stop_tuning()

    def _recentre(self, position: np.ndarray) -> None:
        """Move the control variates' expansion point (one pass over the data); nothing to
        move when the log-likelihood's sum is exact (``_exact_sum``)."""
        if self._exact_sum is not None:
            return
        with passes_counted_on(self):
            self.reference = self._taylor_at(position, progressbar=False)

    def set_rng(self, rng) -> None:
        """PyMC 5 per-chain hook: one Generator per chain, fresh per-chain state."""
        one_blas_thread_in_chain_workers()
        self.rng = get_random_generator(rng, copy=False)
        self.post_tuning = PostTuningTally()
        self.reset_tuning()

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """PyMC 6 per-chain hook: one Generator per chain, fresh per-chain state; the
        chain's last draw (``draws`` after tuning) gets the checks of :mod:`.monitor`."""
        self.set_rng(rng)
        self.post_tuning = replace(self.post_tuning, last_draw=int(draws))

    # Extra per-draw stats shown (current value) in PyMC's progress bar: {stat: column title}.
    progress_columns: dict[str, str] = {}

    def _progressbar_config(self, n_chains: int = 1):
        """Columns of PyMC's progress bar: running mean batch size and acceptance rate."""
        from rich.progress import TextColumn
        from rich.table import Column

        fields = {
            "mb_batch": ("{task.fields[mb_batch]:0.0f}", "Mean batch"),
            "mb_accept": ("{task.fields[mb_accept]:0.2f}", "Accept rate"),
            **{
                f"mb_{stat}": (f"{{task.fields[mb_{stat}]:0.0f}}", title)
                for stat, title in self.progress_columns.items()
            },
        }
        columns = [
            TextColumn(fmt, table_column=Column(title, ratio=1)) for fmt, title in fields.values()
        ]
        return columns, {name: [0.0] * n_chains for name in fields}

    def _make_progressbar_update_functions(self):
        totals = {"draws": 0, "batch": 0.0, "accepted": 0.0}
        extra = tuple(self.progress_columns)

        def update_stats(step_stats):
            # Running means over all draws received so far (all chains together).
            totals["draws"] += 1
            totals["batch"] += float(step_stats["batch_size"])
            totals["accepted"] += float(step_stats["accepted"])
            shown = {
                "mb_batch": totals["batch"] / totals["draws"],
                "mb_accept": totals["accepted"] / totals["draws"],
            }
            shown.update({f"mb_{stat}": float(step_stats[stat]) for stat in extra})
            return shown

        return (update_stats,)

    @staticmethod
    def competence(var, has_grad):
        if var.dtype in continuous_types:
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE

    # ---------------------------------------------------------------- sampling
    @property
    def scaling(self) -> float:
        return self.adaptation.scaling

    @abstractmethod
    def _transition(self, state: ChainState):
        """Propose and test once; return ``(new_state, info)`` from a kernel."""

    def _choose_move(self):
        """The proposal of the next MH iteration and its scale; records its kind.

        Returns ``(proposal, scaling)``; ``proposal(rng, position, scaling)`` gives the
        proposed point and the log proposal-density ratio.
        """
        proposal = self.proposal
        if isinstance(proposal, ProposalMixture):
            self._move_independent = proposal.choose(self.rng)
            if self._move_independent:
                return proposal.independent, 1.0
            return proposal.random_walk, self.adaptation.scaling
        self._move_independent = isinstance(proposal, IndependenceProposal)
        return proposal, self.adaptation.scaling

    def _propose(self, state: ChainState) -> tuple[np.ndarray, float]:
        proposal, scaling = self._choose_move()
        if isinstance(proposal, SurrogateHMC):
            moved, log_q_ratio, self._inner_accept = proposal(
                self.rng, state.position, scaling, self._surrogate_density
            )
            return moved, log_q_ratio
        self._inner_accept = None
        return proposal(self.rng, state.position, scaling)

    def _surrogate_density(self, position: np.ndarray) -> tuple[float, np.ndarray]:
        """Prior plus tempered proxy of the control variates and its gradient in ``q``
        (prior plus the exact tempered log-likelihood when ``_exact_sum`` is set)."""
        if self._exact_sum is not None:
            return self._exact_surrogate_density(position)
        cached = getattr(self, "_tempered_proxy", None)
        if cached is None or cached[0] is not self.reference:
            # Divided by the temperature once per expansion point, not per leapfrog step
            # (the Hessian has D^2 entries).
            proxy = self.reference
            if isinstance(proxy, ImageTaylorProxy):
                proxy = proxy.image
            cached = (
                self.reference,
                proxy.gradient / self.temperature,
                proxy.hessian / self.temperature,
                proxy.reference,
            )
            self._tempered_proxy = cached
        value, grad = self._surrogate(position, *cached[1:])
        return float(value), grad

    def _exact_surrogate_density(self, position: np.ndarray) -> tuple[float, np.ndarray]:
        """The prior (``_surrogate`` compiled without a proxy) plus the exact log-likelihood
        over the temperature: the surrogate is the tempered posterior itself."""
        value, grad = self._surrogate(position)
        lik, lik_grad = self._exact_sum.log_bound_sum_and_grad(position)
        return float(value) + lik / self.temperature, grad + lik_grad / self.temperature

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        position = np.asarray(q0.data, dtype=np.float64)
        if not self.chain_started:
            self.chain_started = True
            if self.start_at_reference and self.tune:
                # Start of a tuning phase: begin from a draw of the Laplace approximation
                # (control variates and bounds are accurate there; tuning draws are
                # discarded), or at the reference point itself when there is no covariance.
                position = self._start_centre.copy()
                if self._start_chol is not None:
                    position += self._start_chol @ self.rng.standard_normal(position.size)
        state = ChainState(position, self.tall_data.logprior(position))
        infos = []
        for _ in range(self.steps_per_draw):
            scaling = self.adaptation.scaling
            state, info = self._transition(state)
            if self.tune and self.adapt:
                # Methods without an acceptance-probability estimate report NaN: use 0/1.
                accept_prob = info.accept if math.isfinite(info.accept) else float(info.accepted)
                self._adapt(state.position, accept_prob)
            infos.append(info)
        stats = self._stats(infos)
        stats["scaling"] = scaling
        stats["warning"] = None if self.tune else self._check_chain(state.position, infos)
        return RaveledVars(state.position, q0.point_map_info), [stats]

    # ---------------------------------------------------------------- tuning
    def _adapt(self, position: np.ndarray, accept_prob: float) -> None:
        """Tuning schedule: Robbins–Monro on log(scaling) from the random-walk moves,
        windowed covariance estimates (which also refit ``proposal="auto"``), and the
        running mean used by ``recentre=True``."""
        if self._recentre_window is not None:
            self._recentre_window = self._recentre_window.add(position)
            if self._recentre_window.complete:
                # Doubling windows: at the end of tuning the mean covers the latest half.
                self._recentre_window = self._recentre_window.next_window()
        if self._move_independent:
            proposed, accepted = self.independent_tally
            self.independent_tally = (proposed + 1, accepted + accept_prob)
        elif self._inner_accept is not None:
            # HMC on the surrogate: its step size follows the inner acceptance.
            self.adaptation = adapt_scale(
                self.adaptation, self._inner_accept, SURROGATE_TARGET_ACCEPT
            )
        elif self.adapt_scale:
            self.adaptation = adapt_scale(self.adaptation, accept_prob, self.target_accept)
        if self.cov_window is None:
            return
        self.cov_window = self.cov_window.add(position)
        if not self.cov_window.complete:
            return
        cov = self.cov_window.covariance()
        if cov is not None:
            if isinstance(self.proposal, ProposalMixture):
                self._refit_mixture(self.cov_window.mean, cov)
            else:
                if self.proposal is self._untuned_proposal:
                    # The scale tuned for the initial proposal does not carry over.
                    self.adaptation = ScaleAdaptation(
                        math.log(2.38 / math.sqrt(self.tall_data.ndim)), self.adaptation.n_updates
                    )
                self.proposal = RandomWalkProposal.from_covariance(cov, self.tall_data.ndim)
        self.cov_window = self.cov_window.next_window()

    def _refit_mixture(self, mean: np.ndarray, cov: np.ndarray) -> None:
        """End of a tuning window with ``proposal="auto"``.

        The random walk takes the window's covariance, shrunk towards the one in use. The
        independence proposal keeps its Gaussian fit unless its moves were rarely accepted,
        in which case it is refitted to the window's mean and (inflated) covariance; the
        probability of an independence move follows its acceptance rate. With control
        variates (``recentre=None``) the proxy is re-expanded at the window's mean when the
        independence fit was poor or the mean sits more than about one posterior sd (beyond
        Monte Carlo noise) from the expansion point: one pass over the data.
        """
        mixture = self.proposal
        ndim = self.tall_data.ndim
        previous = mixture.random_walk.chol
        weight = self.cov_window.count / (self.cov_window.count + COVARIANCE_PRIOR_DRAWS * ndim)
        cov = weight * cov + (1.0 - weight) * (previous @ previous.T)
        chol = np.linalg.cholesky(cov)
        proposed, accepted = self.independent_tally
        rate = accepted / proposed / self.best_independent_rate if proposed else 0.0
        independent = mixture.independent
        refit = rate < REFIT_BELOW
        low, high = P_INDEPENDENT_RANGE
        many = ndim > HIGH_DIM
        if mixture.p_independent == 0.0:
            p_independent = 0.0  # HMC on the exact posterior only (``_exact_sum``)
        elif refit:
            independent = IndependenceProposal(
                centre=mean.copy(), chol=math.sqrt(REFIT_INFLATION) * chol, df=independent.df
            )
            p_independent = low if many else INITIAL_P_INDEPENDENT
        else:
            p_independent = float(np.clip(1.6 * rate, HIGH_DIM_P_FLOOR if many else low, high))
        local = replace(mixture.random_walk, chol=chol)
        self.proposal = ProposalMixture(local, independent, p_independent)
        self.independent_tally = (0, 0.0)
        if self.recentre is None and self.reference is not None:
            offset = float(np.linalg.norm(np.linalg.solve(chol, mean - self.reference.reference)))
            noise = math.sqrt(ndim / max(self.cov_window.count, 1))
            if refit or offset > 1.0 + 2.0 * noise:
                try:
                    self._recentre(mean)
                except NonFiniteTaylor as err:
                    # Any fixed proxy keeps the estimator unbiased: keep the current one.
                    self._pending_warnings.append(
                        SamplerWarning(
                            WarningType.BAD_PARAMS,
                            f"{type(self).__name__}: the control variates could not be "
                            f"moved to the mean of the tuning draws ({err}); they stay at "
                            f"the previous expansion point. The chain visited a region "
                            "where the likelihood is not finite: check the model, or pass "
                            "reference_point= a point in the bulk of the posterior.",
                            "warn",
                        )
                    )

    # ---------------------------------------------------------------- after tuning
    def _check_chain(self, position: np.ndarray, infos: list) -> SamplerWarning | None:
        """Count the draw; at the check points report problems (one warning per draw)."""
        tally = self.post_tuning.add(
            len(infos),
            sum(float(info.accepted) for info in infos),
            sum(float(info.batch_size) for info in infos),
            position,
        )
        if tally.due:
            noise = None
            if self.control_variates:
                noise = (self._ratio_noise(position), self._ratio_noise(self.reference.reference))
            problems = chain_problems(
                tally,
                step_name=type(self).__name__,
                n_data=self.tall_data.n_data,
                noise=noise,
                names=self._block_names,
                sizes=self._block_sizes,
                full_data_cause=self.full_data_cause,
            )
            tally = tally.checked(set(problems))
            self._pending_warnings.extend(problems.values())
        self.post_tuning = tally
        return self._pending_warnings.pop(0) if self._pending_warnings else None

    def _ratio_noise(self, position: np.ndarray) -> float:
        """Sd of the control-variate estimate of the log-likelihood ratio from
        ``NOISE_ROWS`` rows, for a fixed random-walk move from ``position`` (own seed)."""
        probe = np.random.default_rng(20261123)
        n = self.tall_data.n_data
        rows = probe.choice(n, size=min(n, 4 * NOISE_ROWS), replace=False).astype(np.int64)
        proposal = self.proposal
        if isinstance(proposal, ProposalMixture):
            proposal = proposal.random_walk
        if not isinstance(proposal, RandomWalkProposal):
            proposal = RandomWalkProposal(self._laplace_chol)
        moved, _ = proposal(probe, position, self.adaptation.scaling)
        residuals = self.target.loglik_diff(moved, position, rows) / self.temperature
        return float(n * np.std(residuals) / math.sqrt(NOISE_ROWS))

    def _stats(self, infos: list) -> dict:
        if len(infos) == 1:
            return asdict(infos[0])
        stats = {}
        for f in fields(infos[0]):
            values = [getattr(info, f.name) for info in infos]
            reduce = _REDUCERS.get(f.name, lambda xs: float(np.nanmax(xs)))
            stats[f.name] = reduce(values)
        return stats


def block_value_vars(model: pm.Model, vars: Sequence | None) -> list:
    """The value variables of a step's block: ``vars``, or by default every continuous
    free variable (hyperparameters that only enter the prior cost nothing per datum, and
    leaving them to NUTS would make NUTS evaluate the full-data likelihood at every
    leapfrog step)."""
    if vars is not None:
        return get_value_vars_from_user_vars(vars, model)
    block = [v for v in model.value_vars if v.dtype in continuous_types]
    if not block:
        raise ValueError(
            "The model has no continuous free variable, so there is nothing for a "
            "minibatch step to sample."
        )
    return block


def _check_options(
    temperature, steps_per_draw, target_accept, proposal, proposal_cov, control_variates, recentre
) -> None:
    """Refuse inconsistent constructor options before any work."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive; got {temperature}.")
    if int(steps_per_draw) != steps_per_draw or steps_per_draw < 1:
        raise ValueError(f"steps_per_draw must be a positive integer; got {steps_per_draw}.")
    if target_accept is not None and not 0 < target_accept < 1:
        raise ValueError(f"target_accept must lie in (0, 1); got {target_accept}.")
    if proposal not in PROPOSALS:
        raise ValueError(f"proposal must be one of {PROPOSALS}; got {proposal!r}.")
    if proposal_cov is not None and proposal != "rw":
        raise ValueError(
            f"proposal_cov is only used with proposal='rw'; proposal={proposal!r} takes "
            "its covariance from the Laplace approximation at the reference point."
        )
    if recentre and control_variates is False:
        raise ValueError(
            "recentre=True moves the control variates: it cannot go with control_variates=False."
        )


def _unravel(position: np.ndarray, value_vars, point: dict) -> dict:
    """Split a raveled block position into ``{name: array}`` shaped as in ``point``."""
    out, start = {}, 0
    for var in value_vars:
        shape = np.shape(point[var.name])
        size = int(np.prod(shape))
        out[var.name] = position[start : start + size].reshape(shape)
        start += size
    return out


def normal_with_free_scale(lp, step: MinibatchStep):
    """``lp`` if it is a single Normal likelihood with a free scale, else None (the
    reason kept in ``step.exact_sum_unavailable``)."""
    if lp is None:
        step.exact_sum_unavailable = "the likelihood was not recognised"
        return None
    if getattr(lp, "row_scales", False):
        step.exact_sum_unavailable = (
            "sigma differs between rows (a closed-form sum needs one scale for all rows)"
        )
        return None
    if getattr(lp, "parts", None) is not None or lp.family != "normal" or not lp.free_scale:
        step.exact_sum_unavailable = (
            f"the likelihood is {lp.family} (a closed-form sum needs one Normal with a free scale)"
        )
        return None
    return lp


def no_residuals(x_new, x_old, x_ref, idx) -> np.ndarray:
    """The residuals of a proxy that is the log-likelihood itself: all zero."""
    return np.zeros(len(idx))


def one_blas_thread_in_chain_workers() -> bool:
    """In one of PyMC's chain worker processes, limit BLAS to one thread (once).

    PyMC runs one chain per core, and limits each worker's BLAS threads itself
    (``blas_cores="auto"``) except under the ``fork`` start method, the default on Linux
    (pymc-devs/pymc#7354). The steps' row products (a few thousand rows by D columns per
    draw) then run with as many BLAS threads as cores in every worker: measured on a
    2-core machine, 2 chains of ``TunaMH()`` on a 101-dimensional logistic regression
    sampled 4.5 times slower than with one thread each. Returns whether it limited.
    """
    import multiprocessing

    if not multiprocessing.current_process().name.startswith("worker_chain_"):
        return False
    global _BLAS_LIMITER
    if _BLAS_LIMITER is None:
        from threadpoolctl import threadpool_limits

        _BLAS_LIMITER = threadpool_limits(limits=1, user_api="blas")
    return True


#: The process-wide BLAS limit of a chain worker (kept for the worker's lifetime).
_BLAS_LIMITER = None
