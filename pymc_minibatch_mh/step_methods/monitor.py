"""Checks of a chain after tuning, reported through PyMC's sampler-warning stat.

A minibatch step can go wrong in ways a user does not see in the draws: a chain that
no longer moves, or moves so slowly that its draws do not represent the posterior,
batches that fall back towards the full data (a slow exact sampler), or a
control-variate proxy that no longer fits where the chain is (large estimator noise).
The step counts what it needs after tuning and, at draws 200, 400, 800, ... of each
chain (and at its last draw where PyMC says how many there are), checks these; each
problem is reported once per chain as a :class:`pymc.stats.convergence.SamplerWarning`
in the ``warning`` stat, which PyMC logs while sampling (from every process, whatever
``compute_convergence_checks``) and drops from the returned trace.

The mixing check is within one chain (chains may run in other processes): the smallest
bulk effective sample size over the block's coordinates, from the chain's draws since
tuning (kept thinned to at most ``2 * KEPT_DRAWS``), from 400 draws on. Disagreement
between chains is checked on the returned draws by
:func:`pymc_minibatch_mh.diagnostics.check_mixing`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from pymc.stats.convergence import SamplerWarning, WarningType

from pymc_minibatch_mh.diagnostics.chain_statistics import chain_diagnostics
from pymc_minibatch_mh.kernels.proposals import ProposalMixture, RandomWalkProposal

#: Post-tuning draw at which the first check runs; later checks at 2x, 4x, ...
FIRST_CHECK = 200
#: Acceptance rate below which the chain counts as stuck.
STUCK_ACCEPTANCE = 0.01
#: Mean rows per MH step, as a fraction of N, above which batches count as full-data.
FULL_DATA_FRACTION = 0.5
#: Ratio of the log-ratio noise at the draws to that at the reference point, and the
#: noise (sd of the estimated log-ratio for a batch of ``NOISE_ROWS`` rows) above which
#: the control-variate proxy counts as no longer fitting.
NOISE_RATIO = 10.0
NOISE_FLOOR = 1.0
NOISE_ROWS = 100
#: Bulk ESS below which a chain's draws count as not mixing: the Monte Carlo error of a
#: mean is then over 30 % of the posterior sd. Checked from MIXING_MIN_DRAWS draws on (at
#: 200 draws a slow but sound chain, ESS 0.05 per draw, often estimates below 10 in one of
#: hundreds of coordinates).
MIN_CHAIN_ESS = 10.0
MIXING_MIN_DRAWS = 400
#: Draws kept per chain for the mixing check (thinned by two whenever twice as many).
KEPT_DRAWS = 1000
#: Variables named in a warning.
NAMES_SHOWN = 5


@dataclass(frozen=True)
class PostTuningTally:
    """What one chain did after tuning, and which problems were already reported.

    Attributes
    ----------
    draws, steps : int
        PyMC draws and inner MH steps since tuning ended.
    accepted : float
        Accepted MH steps.
    rows : float
        Data rows read (the ``batch_size`` stat summed).
    next_check : int
        Draw count of the next check.
    reported : frozenset of str
        Kinds of problem already reported for this chain.
    """

    draws: int = 0
    steps: int = 0
    accepted: float = 0.0
    rows: float = 0.0
    next_check: int = FIRST_CHECK
    reported: frozenset = frozenset()
    last_draw: int | None = None
    kept: list = field(default_factory=list, repr=False)
    stride: int = 1

    def add(
        self, steps: int, accepted: float, rows: float, position: np.ndarray | None = None
    ) -> PostTuningTally:
        """Count one draw; ``position`` (the block's value) is kept for the mixing check,
        every ``stride``-th draw, thinned by two when ``2 * KEPT_DRAWS`` are kept."""
        kept, stride = self.kept, self.stride
        if position is not None and self.draws % stride == 0:
            kept = [*kept, np.array(position, dtype=np.float64)]
            if len(kept) >= 2 * KEPT_DRAWS:
                kept, stride = kept[::2], 2 * stride
        return replace(
            self,
            draws=self.draws + 1,
            steps=self.steps + steps,
            accepted=self.accepted + accepted,
            rows=self.rows + rows,
            kept=kept,
            stride=stride,
        )

    @property
    def due(self) -> bool:
        return self.draws >= self.next_check or self.draws == self.last_draw

    def checked(self, reported: set[str]) -> PostTuningTally:
        return replace(
            self, next_check=2 * self.next_check, reported=self.reported | frozenset(reported)
        )


def coordinate_label(names: tuple[str, ...], sizes: tuple[int, ...], j: int) -> str:
    """The name of coordinate ``j`` of a block of variables ``names`` with ``sizes``
    (``"beta[3]"``, or the name alone for a scalar)."""
    for name, size in zip(names, sizes, strict=True):
        if j < size:
            return name if size == 1 else f"{name}[{j}]"
        j -= size
    raise IndexError(j)


def mixing_problem(
    tally: PostTuningTally, *, step_name: str, names: tuple[str, ...], sizes: tuple[int, ...]
) -> SamplerWarning | None:
    """A warning when the chain's draws since tuning have a bulk ESS below
    ``MIN_CHAIN_ESS`` in some coordinate of the block, else None."""
    if tally.draws < MIXING_MIN_DRAWS and tally.draws != tally.last_draw:
        return None
    if len(tally.kept) < 20:
        return None
    ess, _ = chain_diagnostics(np.stack(tally.kept)[None])
    low = np.flatnonzero(ess < MIN_CHAIN_ESS)
    if low.size == 0:
        return None
    order = low[np.argsort(ess[low])]
    shown = ", ".join(
        f"{coordinate_label(names, sizes, int(j))} (ESS {ess[j]:.1f})" for j in order[:NAMES_SHOWN]
    )
    more = f" and {low.size - NAMES_SHOWN} more" if low.size > NAMES_SHOWN else ""
    return SamplerWarning(
        WarningType.CONVERGENCE,
        f"{step_name}: this chain mixes too slowly for its draws to be trusted: after "
        f"{tally.draws} draws since tuning the effective sample size of {shown}{more} is "
        f"below {MIN_CHAIN_ESS:g} (the Monte Carlo error of their means exceeds 30 % of the "
        "posterior sd, and the chain may not have reached the bulk of the posterior). Do not "
        "use these draws as they are. Try: more tuning (tune=3000) and draws; for crossed or "
        "non-centred effects, pass reference_point= a point in the bulk of the posterior "
        "(e.g. the mean of a short NUTS run) or write the model centred; or "
        "sample this model with NUTS. Check all chains together with "
        "pymc_minibatch_mh.diagnostics.check_mixing(idata).",
        "warn",
    )


#: Why a step read nearly all rows per step, and what to try (the full-data warning's end):
#: the minibatch test's default; a step whose batches grow for another reason says its own
#: (``full_data_cause`` of the step class).
NOISY_RATIO_CAUSE = (
    "the log-likelihood ratio is too noisy to decide from a subsample. Control variates "
    "(control_variates=True, every free variable of the likelihood in the step's block) "
    "remove most of that noise on unimodal posteriors; otherwise NUTS on the full data "
    "is the better sampler for this model."
)


def chain_problems(
    tally: PostTuningTally,
    *,
    step_name: str,
    n_data: int,
    noise: tuple[float, float] | None,
    names: tuple[str, ...] = (),
    sizes: tuple[int, ...] = (),
    full_data_cause: str = NOISY_RATIO_CAUSE,
) -> dict[str, SamplerWarning]:
    """The problems visible in ``tally`` that were not reported yet, as sampler warnings.

    Parameters
    ----------
    tally : PostTuningTally
        The chain's counts since tuning.
    step_name : str
        Class name of the step, named in the messages.
    n_data : int
        N.
    noise : (float, float) or None
        With control variates: the sd of the estimated log-likelihood ratio from
        ``NOISE_ROWS`` rows for a typical proposal at the current draw and at the
        reference point; None without control variates.
    names, sizes : tuple
        The block's variables and their sizes, for the mixing check (skipped if empty).
    full_data_cause : str
        The end of the warning when nearly all rows are read per step.
    """
    found: dict[str, SamplerWarning] = {}
    if names and "mixing" not in tally.reported:
        problem = mixing_problem(tally, step_name=step_name, names=names, sizes=sizes)
        if problem is not None:
            found["mixing"] = problem
    rate = tally.accepted / max(tally.steps, 1)
    if rate < STUCK_ACCEPTANCE:
        found["stuck"] = SamplerWarning(
            WarningType.BAD_ACCEPTANCE,
            f"{step_name}: only {rate:.2%} of the {tally.steps} proposals after tuning were "
            "accepted, so the chain barely moves and its draws do not represent the "
            "posterior. Sample longer tuning (tune=2000 or more) so the proposal can adapt; "
            "if the posterior is far from Gaussian, pass reference_point= at a point in the "
            "bulk of the posterior, or use proposal='rw'.",
            "warn",
        )
    fraction = tally.rows / max(tally.steps, 1) / n_data
    if fraction > FULL_DATA_FRACTION:
        found["full_data"] = SamplerWarning(
            WarningType.BAD_PARAMS,
            f"{step_name}: after tuning each MH step read {fraction:.0%} of the N = "
            f"{n_data:,} rows on average, so minibatches saved almost nothing: " + full_data_cause,
            "warn",
        )
    if noise is not None:
        at_draws, at_reference = noise
        if at_draws > NOISE_FLOOR and at_draws > NOISE_RATIO * at_reference:
            found["proxy"] = SamplerWarning(
                WarningType.BAD_PARAMS,
                f"{step_name}: the Taylor proxy of the control variates no longer fits where "
                f"the chain is: the log-likelihood ratio estimated from {NOISE_ROWS} rows has "
                f"sd {at_draws:.3g} at the current draw against {at_reference:.3g} at the "
                "reference point, so tests read large batches (or, for the approximate steps, "
                "err more). The reference point (the MAP by default) is far from the "
                "posterior mass: pass reference_point= a point in its bulk (e.g. the mean of "
                "a pilot run), or sample longer tuning so the step recentres the proxy.",
                "warn",
            )
    return {kind: warning for kind, warning in found.items() if kind not in tally.reported}


class PostTuningChecks:
    """The checks of :class:`~pymc_minibatch_mh.step_methods.base.MinibatchStep` after
    tuning (a mixin): the chain's tally at the check points, and the warnings it gives."""

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
