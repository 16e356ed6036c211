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
from pymc_minibatch_mh.kernels.proposals import RandomWalkProposal
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.likelihood import build_tall_data, likelihood_value_vars

COMMON_STATS = {
    "accepted": (bool, []),
    "accept": (np.float64, []),
    "batch_size": (np.int64, []),
    "n_lik_evals": (np.int64, []),
    "scaling": (np.float64, []),
}

# How per-iteration info is folded into one stat when steps_per_draw > 1.
_REDUCERS = {
    "accepted": any,
    "accept": lambda xs: float(np.mean(xs)),
    "batch_size": sum,
    "n_lik_evals": sum,
}


@dataclass_state
class MinibatchStepState(StepMethodState):
    adaptation: ScaleAdaptation
    cov_window: CovarianceWindow | None
    proposal: RandomWalkProposal
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
        proposal_cov: np.ndarray | None = None,
        target_accept: float | None = None,
        tune: bool = True,
        adapt_cov: bool = True,
        steps_per_draw: int = 1,
        data_dim: str | None = None,
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
        self._untuned_proposal = RandomWalkProposal.from_covariance(proposal_cov, ndim)
        self.proposal = self._untuned_proposal
        self.adapt_cov = bool(adapt_cov) and ndim > 1
        self.cov_window = CovarianceWindow(ndim) if self.adapt_cov else None
        if scaling is None:
            scaling = self._default_scaling(temperature, self.tall_data.n_data, ndim, proposal_cov)
        if not (math.isfinite(scaling) and scaling > 0):
            raise ValueError(f"scaling must be a positive finite number; got {scaling}.")
        self.temperature = float(temperature)
        self.target_accept = float(target_accept)
        self.steps_per_draw = int(steps_per_draw)
        self.adapt = bool(tune)
        self.tune = bool(tune)
        self._untuned_adaptation = ScaleAdaptation(math.log(scaling))
        self.adaptation = self._untuned_adaptation
        super().__init__(vars, shared, blocked=blocked, rng=rng)

    @staticmethod
    def _default_scaling(temperature, n_data, ndim, proposal_cov) -> float:
        """2.38/sqrt(d), times the O(sqrt(K/N)) posterior scale when no covariance is given."""
        scale = 2.38 / math.sqrt(ndim)
        if proposal_cov is None:
            scale *= math.sqrt(temperature / n_data)
        return scale

    # ---------------------------------------------------------------- PyMC hooks
    def reset_tuning(self) -> None:
        """Restore the proposal scale and covariance to their values before tuning."""
        self.adaptation = self._untuned_adaptation
        self.proposal = self._untuned_proposal
        self.cov_window = CovarianceWindow(self.tall_data.ndim) if self.adapt_cov else None

    def set_rng(self, rng) -> None:
        """PyMC 5 per-chain hook: one Generator per chain, fresh per-chain state."""
        self.rng = get_random_generator(rng, copy=False)
        self.reset_tuning()

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """PyMC 6 per-chain hook: one Generator per chain, fresh per-chain state."""
        self.set_rng(rng)

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
        """Tuning schedule: Robbins–Monro on log(scaling), windowed covariance estimates."""
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
