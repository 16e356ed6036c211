"""TunaMH: exact minibatch MH with a Poisson number of data points per step.

**Exact method.** Given per-datum energies ``U_i(q) = -log p(y_i | q) / K`` and
constants with ``|U_i(q) - U_i(q')| <= c_i M(q, q')`` (``C = sum c_i``), each step

1. proposes ``q'`` and computes ``M = M(q, q')``;
2. draws ``B ~ Poisson(chi C^2 M^2 + C M)`` and ``B`` indices with ``P(i) = c_i / C``
   (binary search in cumulative sums, with replacement);
3. keeps each drawn ``i`` with probability
   ``(chi c_i C M^2 + (d_i + c_i M) / 2) / (chi c_i C M^2 + c_i M)`` where
   ``d_i = U_i(q') - U_i(q)`` (points whose energy rises are kept more often);
4. accepts with probability ``min(1, r)``,
   ``log r = sum_{kept} 2 artanh(-d_i / (c_i M (1 + 2 chi C M)))
   + log p0(q') - log p0(q) + log q(q | q') - log q(q' | q)``.

Thinning makes the kept multiplicities ``s_i`` independent Poisson variables with
rates ``lambda_i^+ = chi c_i C M^2 + (c_i M + d_i) / 2``; the reverse move has
``lambda_i^- = chi c_i C M^2 + (c_i M - d_i) / 2`` and ``r = prod (lambda^- /
lambda^+)^{s_i}`` times the prior and proposal ratios, which makes the chain
reversible with respect to the posterior. Here the prior ratio (and any
exactly known part of the likelihood ratio, ``target.diff_offset``) enters
``r`` exactly, outside the bounded energies, so the prior needs no Lipschitz
bound. If ``E[B] = chi C^2 M^2 + C M`` exceeds ``N``, the step is an ordinary
full-data MH step instead; the switch depends only on the symmetric ``M``, so
both branches are reversible and so is their mixture.

When the bound holds only on a box (``bound.box``) or a trust region (``bound.region``,
an ellipsoid around the reference point), that set is treated like the
support of the prior: a proposal outside it is rejected before the prior or any datum
is evaluated, and a chain that starts outside it accepts the first proposal that lands
inside (again without data), as from any zero-density state. The chain is reversible
with respect to the posterior restricted to that set (the full posterior when a box
contains the prior support; for a trust region, see
:mod:`pymc_minibatch_mh.bounds.trust_region`).

References
----------
.. [1] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact
   Minibatch Metropolis-Hastings", NeurIPS 2020, Algorithm 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pymc_minibatch_mh.bounds.lipschitz import LipschitzBound
from pymc_minibatch_mh.kernels.target import ChainState, TallTarget
from pymc_minibatch_mh.kernels.weighted_index import CumulativeTable

# |d_i| may exceed c_i M by this much (relative, then absolute) before the bound
# counts as violated: room for floating-point rounding in the log-likelihood only.
BOUND_RTOL = 1e-7
BOUND_ATOL = 1e-10


class BoundViolation(RuntimeError):
    """An energy difference exceeded its Lipschitz bound: the chain would be biased."""


@dataclass(frozen=True)
class TunaSettings:
    """Knobs of the TunaMH test.

    Attributes
    ----------
    chi : float
        ``chi > 0``: larger values give larger batches and mixing closer to full MH.
    temperature : float
        ``K``: energies are ``-log p(y_i | q) / K``; the prior is not tempered.
    """

    chi: float
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.chi) and self.chi > 0):
            raise ValueError(f"chi must be a positive finite number; got {self.chi}.")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be positive and finite; got {self.temperature}.")


@dataclass(frozen=True)
class TunaInfo:
    """Per-step diagnostics; each field is a PyMC sample stat of the same name.

    Attributes
    ----------
    accepted : bool
        Whether the proposal was accepted.
    accept : float
        ``min(1, r)`` for the realised ``r`` (the full-data MH probability on fallback).
    batch_size : int
        Data points read: the Poisson draw ``B`` (ejected points included, as in the
        paper), or ``N`` on a full-data fallback step.
    n_lik_evals : int
        Per-datum log-likelihood evaluations (``q`` and ``q'`` counted apart): ``2 B`` or ``2 N``.
    poisson_draws : int
        ``B`` (0 on fallback and when the prior rejects before any datum is read).
    n_kept : int
        Size of the kept multiset ``I``.
    chi : float
        The ``chi`` used in this step.
    region_exits : int
        1 if the proposal fell outside the box or trust region on which the bound holds
        (rejected without reading data), else 0.
    """

    accepted: bool
    accept: float
    batch_size: int
    n_lik_evals: int
    poisson_draws: int
    n_kept: int
    chi: float
    region_exits: int = 0


# ------------------------------------------------------------------ the two formulas


def _keep_probability(d, c, m, chi, total):
    """Probability of keeping a drawn datum: ``lambda^+ / (chi c C M^2 + c M)``."""
    base = chi * c * total * m * m
    return (base + 0.5 * (d + c * m)) / (base + c * m)


def _artanh_argument(d, c, m, chi, total):
    """``(U_i(q) - U_i(q')) / (c_i M (1 + 2 chi C M))``; in (-1, 1) when chi > 0."""
    return -d / (c * m * (1.0 + 2.0 * chi * total * m))


def check_bound(d: np.ndarray, c: np.ndarray, m: float, idx: np.ndarray, where: str) -> None:
    """Raise :class:`BoundViolation` if some ``|d_i| > c_i M`` beyond rounding."""
    limit = c * m
    bad = ~(np.abs(d) <= limit * (1.0 + BOUND_RTOL) + BOUND_ATOL)  # NaN counts as bad
    if not bad.any():
        return
    j = int(np.flatnonzero(bad)[0])
    raise BoundViolation(
        f"TunaMH bound violated for datum {int(idx[j])}: the energy difference "
        f"|U_i(q') - U_i(q)| = {abs(d[j]):.6g} (U_i = -log p(y_i | q) / temperature) exceeds "
        f"c_i * M = {c[j]:.6g} * {m:.6g} = {limit[j]:.6g} ({int(bad.sum())} of "
        f"{d.size} drawn points violate it; bound: {where}). A wrong bound would silently "
        "bias the chain, so sampling stops. Pass per-datum constants `c=` and a metric "
        "`metric=` with |log p(y_i|q) - log p(y_i|q')| <= c_i * metric(q, q') for all states "
        "the chain can reach (or use MinibatchBarker / Austere, which need no bound)."
    )


def _accept(rng: np.random.Generator, log_r: float) -> tuple[bool, float]:
    if math.isnan(log_r):
        return False, 0.0
    accept_prob = math.exp(min(0.0, log_r))
    return bool(rng.random() < accept_prob), accept_prob


# ------------------------------------------------------------------ the kernel


def tuna_kernel(
    rng: np.random.Generator,
    state: ChainState,
    proposal: np.ndarray,
    log_q_ratio: float,
    target: TallTarget,
    bound: LipschitzBound,
    settings: TunaSettings,
    table: CumulativeTable | None,
) -> tuple[ChainState, TunaInfo]:
    """One TunaMH transition from ``state`` towards ``proposal``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The chain's generator.
    state : ChainState
        Current position and its log prior.
    proposal : ndarray
        Proposed position ``q'``.
    log_q_ratio : float
        ``log q(q | q') - log q(q' | q)`` (0 for symmetric proposals).
    target : TallTarget
        Prior and per-datum log-likelihood callables.
    bound : LipschitzBound
        ``c`` (untempered, shape ``(N,)``) and ``metric``.
    settings : TunaSettings
        ``chi`` and the temperature.
    table : CumulativeTable or None
        Table for ``P(i) = c_i / C`` (built once from ``bound.c``); ``None`` only if
        ``C = 0``.

    Returns
    -------
    (ChainState, TunaInfo)

    Raises
    ------
    BoundViolation
        If a drawn datum has ``|d_i| > c_i M`` (beyond floating-point rounding).
    ValueError
        If the metric returns a negative or non-finite value.
    """
    n = target.n_data
    chi = settings.chi
    # Outside the box where the bound holds the target density counts as 0, as outside
    # the prior support (O(D) checks; always inside without a box).
    inside = bound.contains(proposal)
    lp_new = float(target.logprior(proposal)) if inside else -math.inf
    lp_old = state.logprior if bound.contains(state.position) else -math.inf
    prior_part = lp_new - lp_old + log_q_ratio
    if not math.isfinite(prior_part):
        # Outside the prior support or the box (or NaN): decided without touching data.
        accepted = prior_part == math.inf
        info = TunaInfo(accepted, float(accepted), 0, 0, 0, 0, chi, int(not inside))
        return (ChainState(proposal, lp_new) if accepted else state), info

    inv_k = 1.0 / settings.temperature
    total = bound.C * inv_k
    m = float(bound.metric(state.position, proposal))
    if not (math.isfinite(m) and m >= 0.0):
        raise ValueError(f"The TunaMH metric returned {m!r}; it must be finite and >= 0.")
    rate = chi * (total * m) ** 2 + total * m
    if rate > n:
        # Expected batch beyond N: a standard full-data MH step.
        log_lik = target.loglik_full(proposal) - target.loglik_full(state.position)
        log_r = float(np.sum(log_lik)) * inv_k + prior_part
        accepted, accept_prob = _accept(rng, log_r)
        info = TunaInfo(accepted, accept_prob, n, 2 * n, 0, 0, chi)
        return (ChainState(proposal, lp_new) if accepted else state), info

    log_ratio, n_draws, n_kept = poisson_log_ratio(
        rng, state.position, proposal, target, bound, settings, table, m
    )
    # Exactly known part of the log-likelihood ratio (control variates), else 0.
    offset = float(target.diff_offset(proposal, state.position)) * inv_k
    log_r = prior_part + offset + log_ratio
    accepted, accept_prob = _accept(rng, log_r)
    info = TunaInfo(accepted, accept_prob, n_draws, 2 * n_draws, n_draws, n_kept, chi)
    return (ChainState(proposal, lp_new) if accepted else state), info


def poisson_log_ratio(
    rng: np.random.Generator,
    position: np.ndarray,
    proposal: np.ndarray,
    target: TallTarget,
    bound: LipschitzBound,
    settings: TunaSettings,
    table: CumulativeTable | None,
    m: float,
) -> tuple[float, int, int]:
    """The data part of ``log r``: Poisson draws, thinning and the artanh sum.

    Parameters
    ----------
    rng, target, bound, settings, table
        As for :func:`tuna_kernel`.
    position, proposal : ndarray
        ``q`` and ``q'``.
    m : float
        ``M(q, q')``.

    Returns
    -------
    log_ratio : float
        ``sum over kept i of 2 artanh(-d_i / (c_i M (1 + 2 chi C M)))``. Its
        exponential is an unbiased estimate of ``exp(-sum_i d_i)``, the full-data
        likelihood ratio at temperature ``K``.
    n_draws : int
        ``B ~ Poisson(chi C^2 M^2 + C M)``.
    n_kept : int
        Number of kept draws.
    """
    chi = settings.chi
    inv_k = 1.0 / settings.temperature
    total = bound.C * inv_k
    rate = chi * (total * m) ** 2 + total * m
    n_draws = int(rng.poisson(rate))
    if n_draws == 0:
        return 0.0, 0, 0
    idx = table.sample(rng, n_draws)
    d = -np.asarray(target.loglik_diff(proposal, position, idx), dtype=np.float64) * inv_k
    c = bound.c[idx] * inv_k
    check_bound(d, c, m, idx, bound.description)
    d = np.clip(d, -c * m, c * m)  # only rounding-level changes after the check
    kept = rng.random(n_draws) < _keep_probability(d, c, m, chi, total)
    n_kept = int(kept.sum())
    if n_kept == 0:
        return 0.0, n_draws, 0
    x = _artanh_argument(d[kept], c[kept], m, chi, total)
    return float(2.0 * np.sum(np.arctanh(x))), n_draws, n_kept


# ------------------------------------------------------------------ choosing chi


@dataclass(frozen=True, eq=False)
class ChiAdaptation:
    """Window of recent ``(C M)^2`` values and the ``chi`` they suggest.

    The paper's heuristic is the largest ``chi`` that keeps ``chi C^2 M^2 <~ 1`` in
    most steps, so the batch stays near its floor ``C M``. Here
    ``chi = target / quantile(C^2 M^2)`` over the last ``window`` proposals. Applied
    only while tuning; afterwards ``chi`` is fixed, so the chain is exact.

    Attributes
    ----------
    window, quantile, target : int, float, float
        Window length, quantile level and the value ``chi C^2 M^2`` should not exceed
        at that quantile.
    count : int
        Values added so far (the buffer holds the last ``min(count, window)``).
    values : ndarray
        Ring buffer of ``(C M)^2`` (energy units, i.e. at the step's temperature).
    chi : float or None
        Suggested ``chi``; None before any value (or if all ``C M`` were 0).
    """

    window: int = 100
    quantile: float = 0.9
    target: float = 1.0
    count: int = 0
    values: np.ndarray = field(default=None, repr=False)
    chi: float | None = None

    def __post_init__(self) -> None:
        if self.values is None:
            object.__setattr__(self, "values", np.zeros(self.window))

    def add(self, cm2: float) -> ChiAdaptation:
        """Record one proposal's ``(C M)^2`` and recompute ``chi``."""
        values = self.values.copy()
        values[self.count % self.window] = cm2
        count = self.count + 1
        recent = values[: min(count, self.window)]
        k = min(recent.size - 1, max(0, math.ceil(self.quantile * recent.size) - 1))
        level = float(np.partition(recent, k)[k])  # the empirical quantile (an order statistic)
        chi = self.target / level if level > 0 else None
        return ChiAdaptation(self.window, self.quantile, self.target, count, values, chi)
