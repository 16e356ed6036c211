"""Common PyMC plumbing for minibatch MH step methods (PyMC 5.2x and 6.x).

:class:`MinibatchStep` holds the constructor, PyMC's per-chain hooks, the draw loop and
its stats. The rest of the base class lives with its concern, as mixins:
:mod:`~pymc_minibatch_mh.step_methods.construction` (construction hooks and full-data
setup), :mod:`~pymc_minibatch_mh.step_methods.proposal_mixture` (the moves),
:mod:`~pymc_minibatch_mh.step_methods.tuning` (tuning) and
:mod:`~pymc_minibatch_mh.step_methods.monitor` (checks and warnings after tuning);
:mod:`~pymc_minibatch_mh.step_methods.setup_timing` times the construction.
"""

from __future__ import annotations

import math
import warnings
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, fields, replace

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.stats.convergence import SamplerWarning
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pymc.vartypes import continuous_types

from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow, ScaleAdaptation
from pymc_minibatch_mh.kernels.control_variates import TaylorProxy
from pymc_minibatch_mh.kernels.proposals import IndependenceProposal, RandomWalkProposal
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.image import find_likelihood_image
from pymc_minibatch_mh.likelihood.numpy_glm import numpy_evaluation_enabled
from pymc_minibatch_mh.likelihood.numpy_prior import recognise_gaussian_prior
from pymc_minibatch_mh.likelihood.shared_functions import shared_functions
from pymc_minibatch_mh.likelihood.surrogate import compile_surrogate_density
from pymc_minibatch_mh.likelihood.taylor import (
    NonFiniteTaylor,
    compile_chunk_derivatives,
    compile_prior_derivatives,
    compile_sum_derivatives,
)
from pymc_minibatch_mh.step_methods.centred_coordinates import (
    CentredCoordinates,
    in_centred_coordinates,
)
from pymc_minibatch_mh.step_methods.construction import (
    ConstructionHooks,
    _check_options,
    block_value_vars,
    no_residuals,
)
from pymc_minibatch_mh.step_methods.marginal_reference import MarginalMode
from pymc_minibatch_mh.step_methods.monitor import PostTuningChecks, PostTuningTally
from pymc_minibatch_mh.step_methods.proposal_mixture import ProposalMoves
from pymc_minibatch_mh.step_methods.reference import block_position, find_map
from pymc_minibatch_mh.step_methods.setup_timing import _timed_construction
from pymc_minibatch_mh.step_methods.tuning import Tuning

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


def _largest(values) -> float:
    """The largest of a draw's per-transition values, NaN ignored (NaN if all are); plain
    Python, as numpy's reductions cost more than the draw's arithmetic on a few scalars."""
    finite = [float(v) for v in values if v == v]
    return max(finite) if finite else math.nan


def _mean_of_finite(values) -> float:
    """The mean of a draw's finite per-transition values (NaN if none is)."""
    finite = [float(v) for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


#: How a draw's per-transition info fields become one sample stat when ``steps_per_draw``
#: > 1 (default: :func:`_largest`).
_REDUCERS = {
    "accepted": lambda xs: float(any(xs)),
    "accept": lambda xs: float(sum(xs)) / len(xs),
    "batch_size": sum,
    "n_lik_evals": sum,
    "poisson_draws": sum,
    "n_kept": sum,
    "chi": lambda xs: xs[-1],
    "region_exits": sum,
    "group_accept": _mean_of_finite,
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


class MinibatchStep(
    ConstructionHooks,
    ProposalMoves,
    Tuning,
    PostTuningChecks,
    CentredCoordinates,
    ArrayStepShared,
):
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
            cls.__init__ = _timed_construction(in_centred_coordinates(cls.__dict__["__init__"]))

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
            (
                data_dim,
                repr(sorted((compile_kwargs or {}).items())),
                self._needs_gradients,
                numpy_evaluation_enabled(),
            ),
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
        self._model, self._initial_point = model, initial_point
        self._refuse_kinked_likelihood(model, control_variates, proposal)
        self._check_applicable(model, vars, initial_point)
        control_variates = self._resolve_control_variates(control_variates)
        if proposal == "auto":
            proposal = self._auto_proposal(control_variates)

        self.reference: TaylorProxy | None = None
        #: The hierarchy's scales and their marginal precision where the reference is a
        #: Laplace-marginal mode (:mod:`.marginal_reference`); else None.
        self._marginal_scales: MarginalMode | None = None
        self._taylor_derivatives = None
        self._residual_diff = None
        self._image_maps = None
        #: ``(mean, precision diagonal)`` of a Normal prior on every coordinate, when the
        #: local move may be the flow on a Gaussian surrogate; else None.
        self._gaussian_prior = None
        if control_variates or proposal != "rw":
            image = None
            functions = self._shared_functions
            # A Normal likelihood with a free scale is summed exactly (below): its proxy
            # needs no image, only the Taylor sums in q for the mode and Laplace fit.
            normal_lp = (
                self._normal_linear_predictor(model, initial_point) if control_variates else None
            )
            # A linear predictor evaluated with numpy: a proxy in q is one in its image.
            numpy_glm = self.tall_data.numpy_glm is not None
            # A Normal prior on every coordinate with a proxy in q makes the surrogate a
            # Gaussian, whose Hamiltonian flow is exact (the local move of "auto"): the
            # proxy stays in q (an image of such a block is mostly q itself).
            flow_possible = proposal == "auto" and control_variates and self.surrogate_moves
            if flow_possible and normal_lp is None:
                self._gaussian_prior = functions.get(
                    "gaussian_prior",
                    lambda: self._recognise_gaussian_prior(model, vars, initial_point),
                )
            if (
                control_variates
                and self._proxy_in_image(model, initial_point)
                and normal_lp is None
                and not numpy_glm
                and self._gaussian_prior is None
            ):
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
                        image.phi,
                        image.batch,
                        graphs.idx,
                        graphs.compile_kwargs,
                        size=image.size,
                        n_data=self.tall_data.n_data,
                    ),
                )
                self._image_maps = (image.to_image, image.pull_back)
            self._prior_derivatives = functions.get(
                "prior_derivatives", lambda: compile_prior_derivatives(self.tall_data)
            )
            whole_model = {v.name for v in vars} == {v.name for v in model.value_vars}
            try:
                if reference_point is None and whole_model:
                    self.reference, self._marginal_scales = functions.get(
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
        self._laplace_precision = None
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
        self._untuned_proposal, default_scaling = self._untuned_moves(
            proposal, centre, proposal_cov, ndim
        )
        self.proposal = self._untuned_proposal
        self._move_independent = False
        self._move_flow = False
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
        elif self.uses_gaussian_flow:
            self.steps_per_draw = self.flow_steps_per_draw
        else:
            self.steps_per_draw = int(self._default_steps())
        self._untuned_steps_per_draw = self.steps_per_draw
        self._user_steps = user_steps is not None
        self.flow_tally = (0, 0.0)
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

    def _recognise_gaussian_prior(self, model, vars, initial_point):
        """``(mean, precision diagonal)`` of a Normal prior on every coordinate, or None."""
        numpy_glm = self.tall_data.numpy_glm
        if numpy_glm is not None:
            return numpy_glm.gaussian_prior()
        graphs = self.tall_data.graphs
        return recognise_gaussian_prior(model, vars, initial_point, graphs.q, graphs.prior)

    # ---------------------------------------------------------------- PyMC hooks
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

    def _stats(self, infos: list) -> dict:
        if len(infos) == 1:
            return asdict(infos[0])
        stats = {}
        for f in fields(infos[0]):
            values = [getattr(info, f.name) for info in infos]
            reduce = _REDUCERS.get(f.name, _largest)
            stats[f.name] = reduce(values)
        return stats


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
