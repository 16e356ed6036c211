"""Checks of a chain after tuning, reported through PyMC's sampler-warning stat.

A minibatch step can go wrong in ways a user does not see in the draws: a chain that
no longer moves, batches that fall back towards the full data (a slow exact sampler),
or a control-variate proxy that no longer fits where the chain is (large estimator
noise). The step counts what it needs after tuning and, at draws 200, 400, 800, ...
of each chain, checks these; each problem is reported once per chain as a
:class:`pymc.stats.convergence.SamplerWarning` in the ``warning`` stat, which PyMC logs
while sampling (from every process) and drops from the returned trace.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pymc.stats.convergence import SamplerWarning, WarningType

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

    def add(self, steps: int, accepted: float, rows: float) -> PostTuningTally:
        return replace(
            self,
            draws=self.draws + 1,
            steps=self.steps + steps,
            accepted=self.accepted + accepted,
            rows=self.rows + rows,
        )

    @property
    def due(self) -> bool:
        return self.draws >= self.next_check

    def checked(self, reported: set[str]) -> PostTuningTally:
        return replace(
            self, next_check=2 * self.next_check, reported=self.reported | frozenset(reported)
        )


def chain_problems(
    tally: PostTuningTally,
    *,
    step_name: str,
    n_data: int,
    noise: tuple[float, float] | None,
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
    """
    found: dict[str, SamplerWarning] = {}
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
            f"{n_data:,} rows on average, so minibatches saved almost nothing: the "
            "log-likelihood ratio is too noisy to decide from a subsample. Control variates "
            "(control_variates=True, every free variable of the likelihood in the step's "
            "block) remove most of that noise on unimodal posteriors; otherwise NUTS on the "
            "full data is the better sampler for this model.",
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
