"""Common PyMC plumbing for minibatch MH step methods (PyMC 5.2x and 6.x)."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, fields

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pymc.vartypes import continuous_types

from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow, ScaleAdaptation, adapt_scale
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget, TaylorProxy
from pymc_minibatch_mh.kernels.proposals import IndependenceProposal, RandomWalkProposal
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.likelihood import (
    build_tall_data,
    likelihood_value_vars,
    recognise_linear_predictor,
)
from pymc_minibatch_mh.likelihood.taylor import (
    check_block_covers_likelihood,
    compile_chunk_derivatives,
    compile_prior_hessian,
    compile_residual_diff,
    full_data_taylor,
)
from pymc_minibatch_mh.progress import progress_status
from pymc_minibatch_mh.step_methods.reference import block_position, find_map, laplace_covariance

PROPOSALS = ("rw", "laplace", "independent")

# ``accepted`` is float64 (0.0 / 1.0), as in PyMC's Metropolis: PyMC refuses a compound
# step whose samplers report the same stat name with different dtypes.
COMMON_STATS = {
    "accepted": (np.float64, []),
    "accept": (np.float64, []),
    "batch_size": (np.int64, []),
    "n_lik_evals": (np.int64, []),
    "scaling": (np.float64, []),
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
}


@dataclass_state
class MinibatchStepState(StepMethodState):
    adaptation: ScaleAdaptation
    cov_window: CovarianceWindow | None
    proposal: RandomWalkProposal | IndependenceProposal
    reference: TaylorProxy | None
    chain_started: bool
    tune: bool


class MinibatchStep(ArrayStepShared):
    """Base class: random-walk proposals in the unconstrained space plus a minibatch test.

    Subclasses implement :meth:`_transition` with a kernel from
    :mod:`pymc_minibatch_mh.kernels` and declare their extra stats.
    """

    name = "minibatch_mh"
    default_blocked = True
    stats_dtypes_shapes = dict(COMMON_STATS)
    _state_class = MinibatchStepState
    default_target_accept = 0.234
    # Subclasses that need TallData.loglik_weighted_grad / logprior_grad set this
    # (on the class, or on the instance before calling MinibatchStep.__init__).
    _needs_gradients = False

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        temperature: float = 1.0,
        scaling: float | None = None,
        proposal: str = "rw",
        proposal_cov: np.ndarray | None = None,
        control_variates: bool = False,
        reference_point: dict | None = None,
        recentre: bool = False,
        start_at_reference: bool = True,
        target_accept: float | None = None,
        tune: bool = True,
        adapt_cov: bool | None = None,
        steps_per_draw: int = 1,
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
        if vars is None:
            vars = [v for v in likelihood_value_vars(model) if v.dtype in continuous_types]
            if not vars:
                raise ValueError(
                    "The observed log-likelihood depends on no continuous free variable, so "
                    "there is nothing for a minibatch step to sample. Pass `vars=` explicitly."
                )
        else:
            vars = get_value_vars_from_user_vars(vars, model)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive; got {temperature}.")
        if int(steps_per_draw) != steps_per_draw or steps_per_draw < 1:
            raise ValueError(f"steps_per_draw must be a positive integer; got {steps_per_draw}.")
        if target_accept is None:
            target_accept = self.default_target_accept
        if not 0 < target_accept < 1:
            raise ValueError(f"target_accept must lie in (0, 1); got {target_accept}.")
        if proposal not in PROPOSALS:
            raise ValueError(f"proposal must be one of {PROPOSALS}; got {proposal!r}.")
        if proposal_cov is not None and proposal != "rw":
            raise ValueError(
                f"proposal_cov is only used with proposal='rw'; proposal={proposal!r} takes "
                "its covariance from the Laplace approximation at the reference point."
            )
        if recentre and not control_variates:
            raise ValueError(
                "recentre=True moves the control variates: it needs control_variates=True."
            )

        shared = make_shared_replacements(initial_point, vars, model)
        self.tall_data = build_tall_data(
            model,
            vars,
            shared=shared,
            initial_point=initial_point,
            data_dim=data_dim,
            compile_kwargs=compile_kwargs,
            gradients=self._needs_gradients,
        )
        ndim = self.tall_data.ndim
        self.temperature = float(temperature)
        self.progressbar = bool(progressbar)
        self.reference: TaylorProxy | None = None
        self._taylor_derivatives = None
        self._residual_diff = None
        if control_variates or proposal != "rw":
            self._taylor_derivatives = compile_chunk_derivatives(self.tall_data)
            if reference_point is None:
                reference_point = find_map(model, initial_point, progressbar=self.progressbar)
            self.reference = full_data_taylor(
                self.tall_data,
                block_position(reference_point, vars),
                derivatives=self._taylor_derivatives,
                progressbar=self.progressbar,
            )
        if control_variates:
            check_block_covers_likelihood(self.tall_data)
            self._residual_diff = compile_residual_diff(self.tall_data)
        self._untuned_reference = self.reference
        self.recentre = bool(recentre)
        self._recentre_window = CovarianceWindow(ndim, first_window=50) if recentre else None

        self.adapt_scale = proposal != "independent"
        self._laplace_chol = None
        if self.reference is not None:
            prior_hessian = compile_prior_hessian(self.tall_data)(self.reference.reference)
            try:
                cov = laplace_covariance(self.reference, prior_hessian, self.temperature)
                self._laplace_chol = np.linalg.cholesky(cov)
            except ValueError:
                if proposal != "rw":
                    raise
                # Random-walk proposals need no Laplace covariance: chains that tune then
                # start at the reference point itself.
        # Where tuning chains start (see `start_at_reference`): centre plus chol @ z.
        self._start_requested = bool(start_at_reference)
        self._start_centre = None if self.reference is None else self.reference.reference
        self._start_chol = self._laplace_chol
        self.chain_started = False
        if proposal == "rw":
            self._untuned_proposal = RandomWalkProposal.from_covariance(proposal_cov, ndim)
            default_scaling = self._default_scaling(
                temperature, self.tall_data.n_data, ndim, proposal_cov
            )
        else:
            if proposal == "laplace":
                self._untuned_proposal = RandomWalkProposal.from_covariance(cov, ndim)
                default_scaling = 2.38 / math.sqrt(ndim)
            else:
                self._untuned_proposal = IndependenceProposal(
                    centre=self.reference.reference, chol=self._laplace_chol
                )
                default_scaling = 1.0
        self.proposal = self._untuned_proposal
        if adapt_cov is None:
            adapt_cov = proposal == "rw"
        self.adapt_cov = bool(adapt_cov) and ndim > 1 and proposal != "independent"
        self.cov_window = CovarianceWindow(ndim) if self.adapt_cov else None
        if scaling is None:
            scaling = default_scaling
        if not (math.isfinite(scaling) and scaling > 0):
            raise ValueError(f"scaling must be a positive finite number; got {scaling}.")
        self.target_accept = float(target_accept)
        self.steps_per_draw = int(steps_per_draw)
        self.adapt = bool(tune)
        self.tune = bool(tune)
        self._untuned_adaptation = ScaleAdaptation(math.log(scaling))
        self.adaptation = self._untuned_adaptation
        super().__init__(vars, shared, blocked=blocked, rng=rng)

    def _recognise_linear_predictor(self, model: pm.Model, initial_point: dict):
        """The likelihood as a linear-predictor family over this step's block, checked
        against the compiled per-datum likelihood; raises ``UnsupportedLikelihood``."""
        status = f"Reading the likelihood as a linear predictor ({self.tall_data.n_data:,} rows)"
        with progress_status(status, enabled=self.progressbar):
            return recognise_linear_predictor(
                model,
                self.vars,
                shared=make_shared_replacements(initial_point, self.vars, model),
                initial_point=initial_point,
                check_against=self.tall_data.loglik,
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
        whose ratio terms are residuals of the Taylor proxy at ``self.reference``."""
        if self._residual_diff is None:
            return self.tall_data
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
        if self.recentre:
            self._recentre_window = CovarianceWindow(self.tall_data.ndim, first_window=50)

    def stop_tuning(self) -> None:
        """End of tuning: with ``recentre=True``, move the control variates to the chain's
        recent mean (one pass over the data); the proxy is fixed from then on."""
        if self.recentre and self.tune and self._recentre_window.count > 0:
            self._recentre(self._recentre_window.mean)
        super().stop_tuning()

    def _recentre(self, position: np.ndarray) -> None:
        self.reference = full_data_taylor(
            self.tall_data, position, derivatives=self._taylor_derivatives, progressbar=False
        )

    def set_rng(self, rng) -> None:
        """PyMC 5 per-chain hook: one Generator per chain, fresh per-chain state."""
        self.rng = get_random_generator(rng, copy=False)
        self.reset_tuning()

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """PyMC 6 per-chain hook: one Generator per chain, fresh per-chain state."""
        self.set_rng(rng)

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

    def _propose(self, state: ChainState) -> tuple[np.ndarray, float]:
        return self.proposal(self.rng, state.position, self.adaptation.scaling)

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
        return RaveledVars(state.position, q0.point_map_info), [stats]

    def _adapt(self, position: np.ndarray, accept_prob: float) -> None:
        """Tuning schedule: Robbins–Monro on log(scaling), windowed covariance estimates,
        and the running mean used to recentre the control variates."""
        if self._recentre_window is not None:
            self._recentre_window = self._recentre_window.add(position)
            if self._recentre_window.complete:
                # Doubling windows: at the end of tuning the mean covers the latest half.
                self._recentre_window = self._recentre_window.next_window()
        if self.adapt_scale:
            self.adaptation = adapt_scale(self.adaptation, accept_prob, self.target_accept)
        if self.cov_window is None:
            return
        self.cov_window = self.cov_window.add(position)
        if not self.cov_window.complete:
            return
        cov = self.cov_window.covariance()
        if cov is not None:
            if self.proposal is self._untuned_proposal:
                # The scale tuned for the initial proposal does not carry over.
                self.adaptation = ScaleAdaptation(
                    math.log(2.38 / math.sqrt(self.tall_data.ndim)), self.adaptation.n_updates
                )
            self.proposal = RandomWalkProposal.from_covariance(cov, self.tall_data.ndim)
        self.cov_window = self.cov_window.next_window()

    def _stats(self, infos: list) -> dict:
        if len(infos) == 1:
            return asdict(infos[0])
        stats = {}
        for f in fields(infos[0]):
            values = [getattr(info, f.name) for info in infos]
            reduce = _REDUCERS.get(f.name, lambda xs: float(np.nanmax(xs)))
            stats[f.name] = reduce(values)
        return stats
