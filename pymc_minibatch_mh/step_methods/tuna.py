"""The TunaMH step method (exact Poisson-minibatch Metropolis–Hastings)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pymc as pm
from pymc.step_methods.state import dataclass_state
from pytensor.tensor.random.basic import UniformRV

from pymc_minibatch_mh.bounds.lipschitz import (
    BOX_FAMILIES,
    EuclideanMetric,
    LipschitzBound,
    UnsupportedBound,
)
from pymc_minibatch_mh.bounds.taylor_remainder import taylor_remainder_bound
from pymc_minibatch_mh.kernels.alias import AliasTable
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.kernels.tuna import (
    BOUND_ATOL,
    BOUND_RTOL,
    ChiAdaptation,
    TunaSettings,
    tuna_kernel,
)
from pymc_minibatch_mh.likelihood.graph_tools import ancestors
from pymc_minibatch_mh.likelihood.linear_predictor import (
    UnsupportedLikelihood,
)
from pymc_minibatch_mh.step_methods.base import COMMON_STATS, MinibatchStep, MinibatchStepState

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
# Bound probes at construction: points around the initial point, rows per probe.
_PROBE_SCALES = (1e-3, 1e-1, 1.0)
_PROBE_ROWS = 2000


@dataclass_state
class TunaStepState(MinibatchStepState):
    bound: LipschitzBound
    alias: AliasTable | None
    chi_adaptation: ChiAdaptation | None


class TunaMH(MinibatchStep):
    """TunaMH: exact minibatch MH with a Poisson number of data points per step (**exact**).

    Each step proposes a Gaussian random-walk move ``q'`` in the unconstrained
    space, draws ``B ~ Poisson(chi C^2 M^2 + C M)`` data indices with probability
    ``c_i / C`` (alias table, O(1) per draw), keeps each with a probability that
    favours data whose energy rises, and accepts with an MH ratio built from the kept
    data (artanh terms), the exact prior ratio and the proposal ratio. The chain is
    reversible with respect to the exact posterior. Here ``c_i`` and ``M`` satisfy
    ``|log p(y_i | q) - log p(y_i | q')| <= c_i M(q, q')``, ``C = sum c_i / K`` at
    temperature ``K``. When ``chi C^2 M^2 + C M > N`` the step is a full-data MH step.

    Bounds are found automatically by inspecting the model when its likelihood is
    a known family of a linear predictor ``eta = X q + o`` (affine in the sampled
    block, intercepts included):

    * Bernoulli with logit link: ``c_i = ||x_i||``;
    * Student-t with fixed ``nu`` and ``sigma``: ``c_i = (nu + 1) ||x_i|| / (2 sqrt(nu) sigma)``;
    * Categorical with softmax link: ``c_i = sqrt(2) ||x_i|| ||A||``;
    * Poisson with log link, Normal with fixed ``sigma``: only when every sampled
      variable has an untransformed ``pm.Uniform`` prior (a bounded box), with the
      largest slope over that box. Otherwise the step refuses.

    ``M`` is ``||L^{-1}(q - q')||`` with ``L`` the Cholesky factor of the proposal
    covariance (``c_i`` then uses ``L^T x_i``), or the Euclidean norm when the
    proposal is isotropic. Other likelihoods need ``c=`` and ``metric=``.

    With ``control_variates=True`` the subsampled energies are the remainders of a
    second-order Taylor expansion of each per-datum log-likelihood around the reference
    point (the MAP by default), whose full-data sum enters the ratio exactly. They are
    bounded through the third derivative of the log-likelihood in the linear predictor
    (Bernoulli-logit, Student-t, Normal; see
    :mod:`pymc_minibatch_mh.bounds.taylor_remainder`), with norms whitened by the Laplace
    covariance. Near the posterior mode ``C M`` is then of order ``N^{-1/2}``, so most
    steps read no data at all, and the chain stays exact.

    Parameters
    ----------
    vars : list, optional
        Variables to sample. Default: the continuous free variables of the likelihood.
    chi : float, optional
        ``chi > 0``. Default (None): chosen while tuning by the paper's heuristic,
        the largest ``chi`` that keeps ``chi C^2 M^2 <= 1`` for 90% of recent proposals
        (so the batch stays near its floor ``C M``), then fixed. Without tuning it is
        set once from 100 pseudo-proposals at the first step. The heuristic minimises
        the data read per step; when the ratio noise dominates (large ``C M``), a larger
        ``chi``, about ``1 / (C M)`` (a batch twice its floor), divides the noise variance
        by about 3, allows a larger step and usually gives more ESS per second (see
        ``benchmarks/results/tuna_batch_size.md``). For a guaranteed spectral-gap ratio
        ``kappa`` use :func:`~pymc_minibatch_mh.bounds.lipschitz.chi_from_kappa`.
    bound : LipschitzBound, optional
        Explicit constants and metric (untempered log-likelihood).
    c : array_like, optional
        Per-datum constants (shape ``(N,)``), instead of ``bound``.
    metric : callable, optional
        ``metric(q, q_new) -> float`` with ``c``; default the Euclidean norm.
    precondition : bool, default True
        For automatic bounds: while tuning, whiten the metric with the tuned proposal
        covariance (rebuilding ``c`` and the alias table when it changes). Both are
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
start_at_reference, tune, adapt_cov, steps_per_draw, data_dim, progressbar
        As for :class:`~pymc_minibatch_mh.MinibatchBarker`; with ``control_variates=True``
        the bound is the Taylor-remainder bound described above, and ``bound``/``c``
        must not be given.
    model, rng, initial_point, compile_kwargs, blocked
        As for :class:`pymc.Metropolis`.

    Notes
    -----
    Sample stats: ``accepted``, ``accept`` (``min(1, r)``), ``batch_size`` (the Poisson
    draw ``B``, ejected points included, or ``N`` on a full-data step), ``n_lik_evals``
    (``2 B``), ``poisson_draws`` (``B``; 0 on a full-data step), ``n_kept``, ``scaling``
    and ``chi``. With ``steps_per_draw > 1`` counts are summed over the inner steps.

    Cost and limits: ``E[B] = chi C^2 M^2 + C M``. With the Lipschitz bounds above,
    ``C M`` grows like ``sqrt(N / K)`` at the usual random-walk scale, and the noise of
    ``log r`` like ``C M`` times the mean squared per-datum slope; to keep acceptance
    up, tuning then shrinks the step. TunaMH pays off for tempered posteriors (large
    ``K``) or when ``C M`` is small; at ``K = 1`` on very tall data, expect small steps
    or batches near ``N``. The bound is checked on every datum drawn: a violated
    bound raises an error instead of biasing the chain.

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

    name = "tuna_mh"
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "poisson_draws": (np.int64, []),
        "n_kept": (np.int64, []),
        "chi": (np.float64, []),
    }
    default_target_accept = 0.25
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
        **kwargs,
    ):
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
        model = pm.modelcontext(kwargs.pop("model", None))
        initial_point = kwargs.pop("initial_point", None)
        if initial_point is None:
            initial_point = model.initial_point()
        super().__init__(vars, model=model, initial_point=initial_point, **kwargs)

        n_data = self.tall_data.n_data
        self._fixed_chi = None if chi is None else float(chi)
        self._lp = None
        self._box = None
        if c is not None:
            bound = LipschitzBound(c, metric if metric is not None else EuclideanMetric())
        # With control variates the bound is whitened once by the Laplace covariance.
        self.precondition = (
            bool(precondition) and bound is None and c is None and not self.control_variates
        )
        if self.control_variates:
            lp, _ = self._recognise(model, initial_point, need_box=False)
            bound = self._remainder_bound(lp, self.reference.reference)
            self._lp = lp
        elif bound is None:
            lp, self._box = self._recognise(model, initial_point)
            chol = self._untuned_proposal_chol() if self.precondition else None
            bound = LipschitzBound.from_linear_predictor(lp, chol=chol, box=self._box)
            if self.precondition:  # kept to rebuild c when the tuned proposal changes
                self._lp = lp
        if bound.n_data != n_data:
            raise ValueError(
                f"The bound has {bound.n_data} constants but the model has {n_data} data points."
            )
        q0 = np.concatenate(
            [np.asarray(initial_point[v.name], dtype=np.float64).ravel() for v in self.vars]
        )
        self._probe_bound(bound, q0)
        self._untuned_bound = bound
        self._untuned_alias = _alias_for(bound)
        self.bound = self._untuned_bound
        self.alias = self._untuned_alias
        self.chi_adaptation = None if self._fixed_chi is not None else ChiAdaptation()
        self._last_cm2 = math.nan

    # ---------------------------------------------------------------- bounds
    def _remainder_bound(self, lp, reference: np.ndarray) -> LipschitzBound:
        try:
            return taylor_remainder_bound(lp, reference, chol=self._laplace_chol)
        except UnsupportedBound as err:
            raise UnsupportedBound(f"TunaMH with control_variates=True: {err}") from err

    def _recentre(self, position: np.ndarray) -> None:
        """Move the control variates, and the remainder bound with them (same ``c``)."""
        super()._recentre(position)
        self._set_bound(self._remainder_bound(self._lp, self.reference.reference))

    def _recognise(self, model, initial_point, need_box: bool = True):
        """Linear-predictor likelihood and (for box families) the prior box, or a clear error."""
        hint = _EXPLICIT_BOUND_HINT.format(
            names=list(self.tall_data.var_names), ndim=self.tall_data.ndim
        )
        try:
            lp = self._recognise_linear_predictor(model, initial_point)
        except UnsupportedLikelihood as err:
            raise UnsupportedLikelihood(
                f"TunaMH could not derive Lipschitz bounds from the model: {err} {hint}"
            ) from err
        box = None
        if need_box and lp.family in BOX_FAMILIES:
            box, reason = _prior_box(model, self.vars, initial_point)
            if box is None:
                raise UnsupportedBound(
                    f"TunaMH found a {lp.family} likelihood, whose log-density is not Lipschitz "
                    f"in the parameters on an unbounded space ({reason}). Give every sampled "
                    "variable an untransformed bounded prior, e.g. pm.Uniform('b', -3, 3, "
                    f"default_transform=None), so the bound can use that box. Or: {hint}"
                )
        return lp, box

    def _untuned_proposal_chol(self) -> np.ndarray | None:
        return getattr(self._untuned_proposal, "chol", None)

    def _probe_bound(self, bound: LipschitzBound, q0: np.ndarray) -> None:
        """Check the bound on a few pairs near the initial point (fixed seed; reads few rows).

        A cheap early warning for a wrong user bound; the kernel checks every drawn
        datum during sampling anyway.
        """
        probe_rng = np.random.default_rng(0)
        n, ndim = self.tall_data.n_data, self.tall_data.ndim
        rows = probe_rng.choice(n, size=min(n, _PROBE_ROWS), replace=False)
        for scale in _PROBE_SCALES:
            q_new = q0 + scale * probe_rng.standard_normal(ndim)
            if not math.isfinite(self.tall_data.logprior(q_new)):
                continue  # outside the prior support: never evaluated by the kernel
            m, m_back = float(bound.metric(q0, q_new)), float(bound.metric(q_new, q0))
            if not (math.isfinite(m) and m >= 0 and abs(m - m_back) <= 1e-9 * (1 + m)):
                raise ValueError(
                    f"The TunaMH metric must be finite, non-negative and symmetric; got "
                    f"metric(q, q')={m!r}, metric(q', q)={m_back!r}."
                )
            diff = np.abs(self.target.loglik_diff(q_new, q0, rows))
            limit = bound.c[rows] * m
            bad = ~(diff <= limit * (1 + BOUND_RTOL) + BOUND_ATOL)
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                hint = _EXPLICIT_BOUND_HINT.format(names=list(self.tall_data.var_names), ndim=ndim)
                raise ValueError(
                    f"The TunaMH bound ({bound.description}) does not hold near the initial "
                    f"point: datum {int(rows[j])} has |log p(y_i|q) - log p(y_i|q')| = "
                    f"{diff[j]:.6g} > c_i * M = {limit[j]:.6g}. {hint}"
                )

    def _set_bound(self, bound: LipschitzBound) -> None:
        self.bound = bound
        self.alias = _alias_for(bound)

    # ---------------------------------------------------------------- PyMC hooks
    def reset_tuning(self) -> None:
        """Restore scale, covariance, bound and the automatic ``chi`` to their untuned state."""
        super().reset_tuning()
        self.bound = self._untuned_bound
        self.alias = self._untuned_alias
        self.chi_adaptation = None if self._fixed_chi is not None else ChiAdaptation()
        self._last_cm2 = math.nan

    def _adapt(self, position: np.ndarray, accept_prob: float) -> None:
        """Base tuning, then the whitened bound follows the proposal and ``chi`` the moves."""
        proposal_before = self.proposal
        super()._adapt(position, accept_prob)
        if self.precondition and self.proposal is not proposal_before:
            chol = getattr(self.proposal, "chol", None)
            self._set_bound(
                LipschitzBound.from_linear_predictor(self._lp, chol=chol, box=self._box)
            )
            if self.chi_adaptation is not None:  # (C M)^2 changed units: start afresh
                self.chi_adaptation = ChiAdaptation()
                return
        if self.chi_adaptation is not None and math.isfinite(self._last_cm2):
            self.chi_adaptation = self.chi_adaptation.add(self._last_cm2)

    # ---------------------------------------------------------------- sampling
    @property
    def chi(self) -> float | None:
        """The ``chi`` of the next step (None until the automatic choice has data)."""
        if self._fixed_chi is not None:
            return self._fixed_chi
        return self.chi_adaptation.chi if self.chi_adaptation is not None else None

    def _cm2(self, position: np.ndarray, proposal: np.ndarray) -> float:
        cm = self.bound.C / self.temperature * float(self.bound.metric(position, proposal))
        return cm * cm

    def _chi_for_step(self, state: ChainState) -> float:
        chi = self.chi
        if chi is not None:
            return chi
        # Empty window: seed it from pseudo-proposals (no data read, chain unchanged).
        adaptation = self.chi_adaptation
        for _ in range(_PILOT_PROPOSALS):
            q_new, _ = self._propose(state)
            adaptation = adaptation.add(self._cm2(state.position, q_new))
        self.chi_adaptation = adaptation
        chi = adaptation.chi
        if chi is None:  # every pseudo-move had C M = 0 (C = 0): any chi works
            chi = 1.0
        return chi

    def _transition(self, state: ChainState):
        chi = self._chi_for_step(state)
        proposal, log_q_ratio = self._propose(state)
        if self.chi_adaptation is not None and self.tune and self.adapt:
            self._last_cm2 = self._cm2(state.position, proposal)
        settings = TunaSettings(chi=chi, temperature=self.temperature)
        return tuna_kernel(
            self.rng,
            state,
            proposal,
            log_q_ratio,
            self.target,
            self.bound,
            settings,
            self.alias,
        )


def _alias_for(bound: LipschitzBound) -> AliasTable | None:
    return AliasTable.from_weights(bound.c) if bound.C > 0 else None


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
