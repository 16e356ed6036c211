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

Rows without a constant (``bound.exact_rows``, ``c_i = 0``) are never drawn; their terms
``loglik_diff`` are summed exactly at every step and enter ``r`` like the prior ratio, so
the test above runs on the other rows and the chain stays exact.

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
from pymc_minibatch_mh.kernels.target import ChainState, TallTarget, metropolis_accept
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
        paper) plus the rows evaluated exactly (``bound.exact_rows``), or ``N`` on a
        full-data fallback step.
    n_lik_evals : int
        Per-datum log-likelihood evaluations (``q`` and ``q'`` counted apart): twice the
        batch size.
    poisson_draws : int
        ``B`` (0 on fallback and when the prior rejects before any datum is read).
    n_kept : int
        Size of the kept multiset ``I``.
    chi : float
        The ``chi`` used in this step.
    region_exits : int
        1 if the proposal fell outside the box or trust region on which the bound holds
        (rejected without reading data), else 0.
    group_accept : float
        The share of groups accepted by the sweep that followed the move
        (:mod:`pymc_minibatch_mh.kernels.group_sweep`; its rows count in ``batch_size``),
        NaN without one.
    """

    accepted: bool
    accept: float
    batch_size: int
    n_lik_evals: int
    poisson_draws: int
    n_kept: int
    chi: float
    region_exits: int = 0
    group_accept: float = math.nan


# ------------------------------------------------------------------ the two formulas


def _keep_probability(d, c, m, chi, total):
    """Probability of keeping a drawn datum: ``lambda^+ / (chi c C M^2 + c M)``."""
    base = chi * c * total * m * m
    return (base + 0.5 * (d + c * m)) / (base + c * m)


def _artanh_argument(d, c, m, chi, total):
    """``(U_i(q) - U_i(q')) / (c_i M (1 + 2 chi C M))``; in (-1, 1) when chi > 0."""
    return -d / (c * m * (1.0 + 2.0 * chi * total * m))


def check_bound(d: np.ndarray, c: np.ndarray, m: float, idx: np.ndarray, where: str) -> None:
    """Raise :class:`BoundViolation` if some ``|d_i| > c_i M`` beyond rounding (``c`` the
    per-row bounds ``b_i`` and ``m = 1`` for pair-dependent bounds)."""
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
    pair = PairBound.between(bound, table, state.position, proposal)
    total = pair.total * inv_k
    rate = chi * total**2 + total
    if rate > n:
        # Expected batch beyond N: a standard full-data MH step.
        log_lik = target.loglik_full(proposal) - target.loglik_full(state.position)
        log_r = float(np.sum(log_lik)) * inv_k + prior_part
        accepted, accept_prob = metropolis_accept(rng, log_r)
        info = TunaInfo(accepted, accept_prob, n, 2 * n, 0, 0, chi)
        return (ChainState(proposal, lp_new) if accepted else state), info

    log_ratio, n_draws, n_kept = poisson_log_ratio(
        rng, state.position, proposal, target, bound, settings, table, pair=pair
    )
    # Exactly known part of the log-likelihood ratio (control variates), else 0.
    offset = float(target.diff_offset(proposal, state.position)) * inv_k
    log_r = prior_part + offset + log_ratio
    exact = getattr(bound, "exact_rows", None)
    n_exact = 0 if exact is None else int(exact.size)
    if n_exact:  # rows without a constant: their terms, exactly
        log_r += float(np.sum(target.loglik_diff(proposal, state.position, exact))) * inv_k
    accepted, accept_prob = metropolis_accept(rng, log_r)
    rows = n_draws + n_exact
    info = TunaInfo(accepted, accept_prob, rows, 2 * rows, n_draws, n_kept, chi)
    return (ChainState(proposal, lp_new) if accepted else state), info


def poisson_log_ratio(
    rng: np.random.Generator,
    position: np.ndarray,
    proposal: np.ndarray,
    target: TallTarget,
    bound: LipschitzBound,
    settings: TunaSettings,
    table: CumulativeTable | None,
    m: float | None = None,
    *,
    pair: PairBound | None = None,
) -> tuple[float, int, int]:
    """The data part of ``log r``: Poisson draws, thinning and the artanh sum.

    With per-datum bounds ``b_i = b_i(q, q')`` (``c_i M``, or ``c_i M_cell(i)`` for a
    bound with row cells) and ``B = sum b_i`` at the step's temperature, ``B`` replaces
    ``C M`` below: ``B ~ Poisson(chi B^2 + B)`` draws with probability ``b_i / B``, kept
    with probability ``(chi b_i B + (b_i + d_i) / 2) / (chi b_i B + b_i)``.

    Parameters
    ----------
    rng, target, bound, settings, table
        As for :func:`tuna_kernel`.
    position, proposal : ndarray
        ``q`` and ``q'``.
    m : float, optional
        ``M(q, q')`` of a bound without cells (computed if not given).
    pair : PairBound, optional
        The bounds of this pair, if already formed.

    Returns
    -------
    log_ratio : float
        ``sum over kept i of 2 artanh(-d_i / (b_i (1 + 2 chi B)))``. Its
        exponential is an unbiased estimate of ``exp(-sum_i d_i)``, the full-data
        likelihood ratio at temperature ``K``.
    n_draws : int
        ``B ~ Poisson(chi B^2 + B)``.
    n_kept : int
        Number of kept draws.
    """
    if pair is None:
        pair = PairBound.between(bound, table, position, proposal, m)
    chi = settings.chi
    inv_k = 1.0 / settings.temperature
    total = pair.total * inv_k
    rate = chi * total**2 + total
    n_draws = int(rng.poisson(rate))
    if n_draws == 0:
        return 0.0, 0, 0
    idx = pair.sample(rng, n_draws)
    d = -np.asarray(target.loglik_diff(proposal, position, idx), dtype=np.float64) * inv_k
    b = pair.row_bounds(idx) * inv_k
    kept, x = thinned_draws(rng, d, b, chi, total, idx, bound.description)
    n_kept = int(kept.sum())
    if n_kept == 0:
        return 0.0, n_draws, 0
    return float(2.0 * np.sum(np.arctanh(x))), n_draws, n_kept


def thinned_draws(rng, d, b, chi, total, idx, description: str):
    """TunaMH's test on the drawn data: check ``|d_i| <= b_i``, keep each draw with
    probability ``(chi b_i B + (b_i + d_i) / 2) / (chi b_i B + b_i)`` and return the kept
    mask and the artanh arguments of the kept draws (``log r`` gains ``2 artanh`` of each).

    ``d`` are the energy differences at the step's temperature, ``b`` their bounds and
    ``total`` the bounds' sum ``B``: one number, or one per draw when draws from several
    independent tests are handled together (:mod:`~pymc_minibatch_mh.kernels.group_sweep`).
    """
    check_bound(d, b, 1.0, idx, description)
    d = np.clip(d, -b, b)  # only rounding-level changes after the check
    kept = rng.random(d.size) < _keep_probability(d, b, 1.0, chi, total)
    kept_total = total[kept] if np.ndim(total) else total
    return kept, _artanh_argument(d[kept], b[kept], 1.0, chi, kept_total)


@dataclass(frozen=True, eq=False)
class PairBound:
    """The per-datum bounds ``b_i(q, q')`` of one proposal, untempered.

    ``b_i = c_i M(q, q')`` for a bound with one metric, ``c_i M_cell(i)(q, q')`` for one
    with row cells (:mod:`pymc_minibatch_mh.bounds.row_cells`); both are symmetric in
    ``(q, q')``, which is all TunaMH's reversibility needs.

    Attributes
    ----------
    total : float
        ``B = sum_i b_i``.
    """

    total: float
    c: np.ndarray
    metric: float | np.ndarray
    table: object

    @classmethod
    def between(cls, bound, table, q, q_new, m: float | None = None) -> PairBound:
        cells = getattr(table, "cells", None)
        if cells is not None:
            metrics = cells.metrics(q, q_new)
            if not np.all(np.isfinite(metrics)):
                raise ValueError("The TunaMH cell metrics are not finite for this proposal.")
            total = float(np.dot(table.cell_totals, metrics))
            return cls(total, bound.c, metrics, table)
        if m is None:
            m = float(bound.metric(q, q_new))
        if not (math.isfinite(m) and m >= 0.0):
            raise ValueError(f"The TunaMH metric returned {m!r}; it must be finite and >= 0.")
        return cls(bound.C * m, bound.c, m, table)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` data indices with probability ``b_i / B``."""
        if isinstance(self.metric, np.ndarray):
            return self.table.sample(rng, n, self.table.cell_totals * self.metric)
        return self.table.sample(rng, n)

    def row_bounds(self, idx: np.ndarray) -> np.ndarray:
        """``b_i`` of the rows ``idx``."""
        if isinstance(self.metric, np.ndarray):
            return self.c[idx] * self.metric[self.table.cells.cell_of_row[idx]]
        return self.c[idx] * self.metric


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
