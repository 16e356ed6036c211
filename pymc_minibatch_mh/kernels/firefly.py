"""Firefly Monte Carlo: exact MCMC that only evaluates the likelihood of "bright" data.

Each datum gets a binary brightness ``z_n``. Given strictly positive lower bounds
``0 < B_n(q) <= L_n(q)`` whose product over the data collapses (see
:mod:`pymc_minibatch_mh.bounds`), the augmented target

    p(q, z) ∝ p(q) prod_n B_n(q) prod_{n: z_n = 1} Ltilde_n(q),
    Ltilde_n = L_n / B_n - 1,

has the exact posterior as its ``q`` marginal, and
``p(z_n = 1 | q) = 1 - B_n / L_n``. One iteration of :func:`firefly_kernel`
updates ``q`` given ``z`` (random-walk Metropolis, MALA, or HMC with the bright set held
fixed, see :func:`hmc_theta_update`) and
then every ``z_n`` given ``q`` with the implicit Metropolis–Hastings scheme:
bright points always propose to go dark (accepted with probability
``min(1, q_db / Ltilde_n)``, using the ``Ltilde_n`` cached by the ``q`` step) and
dark points propose to go bright with probability ``q_db`` (accepted with
probability ``min(1, Ltilde_n / q_db)``; the paper prints this comparison the
wrong way round). The dark points that propose are found with geometric skips,
so one iteration costs ``O(n_bright + q_db N)`` likelihood evaluations plus the
``O(D^2)`` collapsed bound, never ``O(N)``.

**Exact method.** The ``q`` marginal is the exact (tempered) posterior for any
valid bound and any ``q_db`` in ``(0, 1]``.

Temperature ``K``: the sampler targets ``p(q) prod_n L_n(q)^(1/K)``. The bounds
are tempered the same way, ``B_n^(1/K) <= L_n^(1/K)``, i.e. the per-datum
log-likelihood, the per-datum log-bound and the collapsed log-bound sum are all
divided by ``K``; the prior is not.

Numerics: with the tempered gap ``g_n = (log L_n - log B_n) / K``,
``log Ltilde_n = g_n + log(-expm1(-g_n))``, accurate for tiny and large gaps.
A gap below ``-bound_tolerance * (1 + |log L_n|)`` anywhere it is computed
(initial draw of ``z``, bright points at a proposal, dark points proposed to
brighten) proves ``B_n > L_n``: the bound is invalid and
:class:`InvalidBoundError` is raised (``check_bound=False`` disables this, for
tests only). A gap in ``[-tol, 0]`` is a touching point up to rounding and
means ``Ltilde_n = 0``: a proposal that makes such a point bright has density 0
and is rejected, and such a dark point is never brightened. Hence every bright
point of the current state has a positive gap: the invariant needs no check at
the current state.

Compound steps: the prior may depend on variables that another step method moves
(e.g. a scale ``tau`` in ``q ~ N(0, tau^2)``). The cached ``logprior`` (and, for
MALA, the prior part of the gradient) then refer to the old values, and the next
``q`` update would compare priors at different ``tau``: call
:meth:`FireflyState.refresh_prior` before an iteration that may follow such a
move (O(D), no data). ``z``, ``log Ltilde`` and the data part of the gradient stay
valid, since they depend only on ``q`` and the data (the likelihood must not
depend on variables outside ``q``).

Rows without a bound: a bound may give ``log B_n = -inf`` for some rows (its
``unbounded_rows``, e.g. rows whose quadratic bound would be too loose on the trust region
to keep the collapsed sum's float64 precision) and leave them out of its collapsed sum.
Such a row's factor in the augmented target is ``L_n`` itself (``B_n = 0`` gives
``p(z_n = 1 | q) = 1``): it is bright from the first draw of ``z`` and never darkens, its
entry of ``log_lt`` holds ``log L_n / K`` and its gradient weight is ``1 / K``. The ``q``
marginal is still the exact posterior; each such row is read at every iteration.

Uniform variates: every accept/reject test draws ``u = rng.random()`` in ``[0, 1)``
and accepts when ``log1p(-u) <= log r`` for an acceptance ratio ``r``. ``v = 1 - u``
lies in ``(0, 1]``, so ``log v`` is never ``log(0)``, and ``P(v <= r) = min(1, r)``:
even ``u = 0`` gives the right decision (accept exactly when ``r >= 1``).

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Algorithms 1-2 and Section 3.3.
.. [2] Roberts, G. O., Tweedie, R. L. "Exponential convergence of Langevin
   distributions and their discrete approximations", Bernoulli 2, 1996 (MALA).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from scipy.linalg import solve_triangular

from pymc_minibatch_mh.kernels import compiled_split_iteration, split_kicks
from pymc_minibatch_mh.kernels.brightening_rates import CellRates
from pymc_minibatch_mh.kernels.gaussian_flow import ANGLE_RANGE, GaussianFlow
from pymc_minibatch_mh.kernels.proposals import RandomWalkProposal
from pymc_minibatch_mh.kernels.surrogate_hmc import MAX_LEAPFROG_STEPS, TRAJECTORY_RANGE
from pymc_minibatch_mh.kernels.target import TallTarget

THETA_UPDATES = ("rw", "mala", "hmc")


class InvalidBoundError(ValueError):
    """A supplied "lower bound" exceeds the likelihood somewhere (``B_n > L_n``)."""


class CollapsibleBound(Protocol):
    """What FlyMC needs from a per-datum lower bound ``B_n(q) <= L_n(q)`` (untempered).

    Attributes
    ----------
    n_data : int
    log_bound : callable
        ``log_bound(q, idx) -> (len(idx),)``: per-datum ``log B_n(q)``.
    log_bound_sum : callable
        ``log_bound_sum(q) -> float``: ``sum_n log B_n(q)`` over all N data,
        in time independent of N.
    log_bound_sum_grad : callable
        Gradient of ``log_bound_sum`` (MALA only).
    log_bound_weighted_grad : callable
        ``(q, idx, weights) -> (D,)``: gradient of ``sum_j weights[j] log B_{idx[j]}(q)``
        (MALA only).
    unbounded_rows : ndarray of int, optional
        Rows with ``log B_n = -inf`` (no bound), left out of ``log_bound_sum``; see the
        module docstring.
    """

    n_data: int

    def log_bound(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray: ...

    def log_bound_sum(self, q: np.ndarray) -> float: ...

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray: ...

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray: ...


class BrightRows(Protocol):
    """A fixed set of data rows (the bright set of a ``q | z`` update, or the dark rows
    proposed to brighten) seen as a function of ``q``: what the kernel needs of the target
    and the bound on those rows. A model may evaluate both in one pass over the rows (see
    :class:`~pymc_minibatch_mh.bounds.glm_bright_rows.GLMBrightRows`); the default,
    :class:`SeparateRows`, asks the target and the bound one after the other.

    Attributes
    ----------
    idx : ndarray of int
        The rows.
    """

    idx: np.ndarray

    def values(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Untempered ``(log L_n(q), log B_n(q))`` of the rows."""
        ...

    def weighted_grad(self, q: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] (log L_j(q) - log B_j(q))``."""
        ...

    # Optional: ``values_and_grad(q, weigh) -> (out, grad)``, both from one pass over the
    # rows, where ``weigh(log L, log B) -> (out, weights)`` (see :func:`_bright_terms`).


@dataclass(frozen=True, eq=False)
class SeparateRows:
    """:class:`BrightRows` through the target's and the bound's own per-row methods."""

    target: TallTarget
    bound: CollapsibleBound
    idx: np.ndarray

    def values(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.target.loglik(q, self.idx), self.bound.log_bound(q, self.idx)

    def weighted_grad(self, q: np.ndarray, weights: np.ndarray) -> np.ndarray:
        grad = self.target.loglik_weighted_grad(q, self.idx, weights)
        return grad - self.bound.log_bound_weighted_grad(q, self.idx, weights)


#: Builds the :class:`BrightRows` of an index array (``firefly_kernel``'s ``rows``).
RowsFactory = Callable[[np.ndarray], BrightRows]


def rows_of(target: TallTarget, bound: CollapsibleBound, idx: np.ndarray, rows=None):
    """The rows ``idx`` as :class:`BrightRows`: ``rows(idx)`` when a factory is given (a
    joint evaluation of the model's likelihood and bound), else :class:`SeparateRows`."""
    return SeparateRows(target, bound, idx) if rows is None else rows(idx)


# ------------------------------------------------------------------------ brightness store
class BrightnessStore:
    """The set of bright data points with O(1) brighten/darken per point.

    ``arr`` holds every index ``0..N-1`` once, bright ones first; ``tab[n]`` is the
    position of ``n`` in ``arr``; ``n_bright`` is the size of the bright block.
    :meth:`brighten` and :meth:`darken` take index arrays and cost O(len(idx)).

    Parameters
    ----------
    n_data : int
        N.
    bright : ndarray, optional
        Boolean mask of shape ``(N,)`` or an array of distinct indices of the
        initially bright points (default: all dark).
    """

    def __init__(self, n_data: int, bright: np.ndarray | None = None):
        n_data = int(n_data)
        if n_data < 1:
            raise ValueError(f"n_data must be positive; got {n_data}.")
        dtype = np.int32 if n_data < 2**31 - 1 else np.int64
        self.n_data = n_data
        self.n_bright = 0
        if bright is None:
            self.arr = np.arange(n_data, dtype=dtype)
        else:
            bright = np.asarray(bright)
            mask = bright if bright.dtype == bool else _index_mask(bright, n_data)
            if mask.shape != (n_data,):
                raise ValueError(f"bright mask must have shape ({n_data},); got {mask.shape}.")
            # A stable partition: bright indices first.
            self.arr = np.argsort(~mask, kind="stable").astype(dtype)
            self.n_bright = int(mask.sum())
        self.tab = np.empty(n_data, dtype=dtype)
        self.tab[self.arr] = np.arange(n_data, dtype=dtype)

    @property
    def n_dark(self) -> int:
        return self.n_data - self.n_bright

    def bright_indices(self) -> np.ndarray:
        """The bright indices (a read-only view of ``arr[:n_bright]``)."""
        view = self.arr[: self.n_bright]
        view.flags.writeable = False
        return view

    def dark_indices(self) -> np.ndarray:
        """The dark indices (a read-only view of ``arr[n_bright:]``)."""
        view = self.arr[self.n_bright :]
        view.flags.writeable = False
        return view

    def ith_bright(self, i):
        """The ``i``-th bright index (``i`` may be an array), in the store's order."""
        i = np.asarray(i)
        if np.any((i < 0) | (i >= self.n_bright)):
            raise IndexError(f"bright position out of range [0, {self.n_bright}).")
        return self.arr[i]

    def ith_dark(self, i):
        """The ``i``-th dark index (``i`` may be an array), in the store's order."""
        i = np.asarray(i)
        if np.any((i < 0) | (i >= self.n_dark)):
            raise IndexError(f"dark position out of range [0, {self.n_dark}).")
        return self.arr[self.n_bright + i]

    def is_bright(self, idx) -> np.ndarray:
        return self.tab[idx] < self.n_bright

    def mask(self) -> np.ndarray:
        """Boolean ``(N,)`` array, True where bright (O(N); for tests and summaries)."""
        return self.tab < self.n_bright

    def brighten(self, idx: np.ndarray, *, validate: bool = True) -> None:
        """Make the distinct, currently dark indices ``idx`` bright, in O(len(idx)).

        ``validate=False`` skips the O(len(idx) log len(idx)) argument checks (the
        kernel passes indices that are valid by construction).
        """
        idx = self._checked(idx, want_bright=False) if validate else idx
        k = idx.size
        if k == 0:
            return
        start = self.n_bright
        self._swap_into_block(idx, start, start + k)
        self.n_bright += k

    def darken(self, idx: np.ndarray, *, validate: bool = True) -> None:
        """Make the distinct, currently bright indices ``idx`` dark, in O(len(idx))."""
        idx = self._checked(idx, want_bright=True) if validate else idx
        k = idx.size
        if k == 0:
            return
        stop = self.n_bright
        self._swap_into_block(idx, stop - k, stop)
        self.n_bright -= k

    def _checked(self, idx, want_bright: bool) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64).ravel()
        if idx.size == 0:
            return idx
        if idx.min() < 0 or idx.max() >= self.n_data:
            raise IndexError(f"indices must lie in [0, {self.n_data}).")
        if np.unique(idx).size != idx.size:
            raise ValueError("indices passed to brighten/darken must be distinct.")
        if not np.all(self.is_bright(idx) == want_bright):
            state = "bright" if want_bright else "dark"
            raise ValueError(f"every index must currently be {state}.")
        return idx

    def _swap_into_block(self, idx: np.ndarray, lo: int, hi: int) -> None:
        """Move the ``hi - lo`` indices ``idx`` to positions ``[lo, hi)`` by swaps.

        Members already inside the block stay; each member outside swaps with one
        non-member occupying a block position.
        """
        pos = self.tab[idx].astype(np.int64)
        inside = (pos >= lo) & (pos < hi)
        taken = np.zeros(hi - lo, dtype=bool)
        taken[pos[inside] - lo] = True
        free = lo + np.flatnonzero(~taken)
        movers = idx[~inside]
        from_pos = pos[~inside]
        displaced = self.arr[free].copy()
        self.arr[free] = movers
        self.arr[from_pos] = displaced
        self.tab[movers] = free
        self.tab[displaced] = from_pos

    def check_consistency(self) -> None:
        """Raise ``AssertionError`` unless ``arr``/``tab``/``n_bright`` agree (O(N))."""
        n = self.n_data
        assert self.arr.shape == (n,) and self.tab.shape == (n,)
        assert 0 <= self.n_bright <= n
        assert np.array_equal(np.sort(self.arr), np.arange(n)), "arr is not a permutation"
        assert np.array_equal(self.tab[self.arr], np.arange(n)), "tab is not arr's inverse"

    def copy(self) -> BrightnessStore:
        new = BrightnessStore.__new__(BrightnessStore)
        new.n_data, new.n_bright = self.n_data, self.n_bright
        new.arr, new.tab = self.arr.copy(), self.tab.copy()
        return new

    def __eq__(self, other) -> bool:
        """Same bright set (order within the blocks is irrelevant)."""
        if not isinstance(other, BrightnessStore):
            return NotImplemented
        return (
            self.n_data == other.n_data
            and self.n_bright == other.n_bright
            and np.array_equal(np.sort(self.bright_indices()), np.sort(other.bright_indices()))
        )

    __hash__ = None

    def __repr__(self) -> str:
        return f"BrightnessStore(n_data={self.n_data}, n_bright={self.n_bright})"


def _index_mask(indices: np.ndarray, n_data: int) -> np.ndarray:
    indices = np.asarray(indices, dtype=np.int64).ravel()
    if indices.size and (indices.min() < 0 or indices.max() >= n_data):
        raise IndexError(f"bright indices must lie in [0, {n_data}).")
    if np.unique(indices).size != indices.size:
        raise ValueError("bright indices must be distinct.")
    mask = np.zeros(n_data, dtype=bool)
    mask[indices] = True
    return mask


def geometric_positions(rng: np.random.Generator, prob: float, length: int) -> np.ndarray:
    """Positions in ``range(length)`` selected by independent Bernoulli(``prob``) coins.

    Drawn as cumulative geometric skips, so the cost is O(number selected), not
    O(length). Returns a sorted int64 array.
    """
    if length <= 0 or prob <= 0.0:
        return np.empty(0, dtype=np.int64)
    if prob >= 1.0:
        return np.arange(length, dtype=np.int64)
    expected = prob * length
    chunk = int(expected + 4.0 * math.sqrt(expected) + 16)
    pos = np.cumsum(rng.geometric(prob, size=chunk)) - 1
    if pos[-1] >= length:  # nearly always: one chunk reaches past the end
        return pos[: int(np.searchsorted(pos, length))]
    out = [pos]
    last = int(pos[-1])
    while True:
        pos = last + np.cumsum(rng.geometric(prob, size=chunk))
        if pos[-1] >= length:
            out.append(pos[pos < length])
            break
        out.append(pos)
        last = int(pos[-1])
    return np.concatenate(out).astype(np.int64, copy=False)


# ------------------------------------------------------------------------ q_db while tuning
@dataclass(frozen=True)
class BrightFractionAverage:
    """Running mean of the value ``q_db`` follows while tuning: the bright fraction
    ``n_bright / N``, or with gradient moves the bright data's mean ``Ltilde_n`` (see
    ``FlyMC._q_db_evidence``); ``update`` takes it as a ratio.

    The FlyMC paper sets ``q_db`` to "the typical fraction of bright data points".
    The mean is exponentially weighted with weight ``max(1 / (t + 1), min_weight)``
    on the newest value, so burn-in values (many bright points far from the
    posterior bulk) are forgotten after a few multiples of ``1 / min_weight``
    iterations.

    Attributes
    ----------
    mean : float
        Current estimate.
    n_updates : int
        Values seen so far.
    """

    mean: float
    n_updates: int = 0

    def update(self, n_bright: int, n_data: int, min_weight: float = 0.02) -> BrightFractionAverage:
        weight = max(1.0 / (self.n_updates + 1.0), min_weight)
        mean = (1.0 - weight) * self.mean + weight * (n_bright / n_data)
        return BrightFractionAverage(mean, self.n_updates + 1)


# ------------------------------------------------------------------------ settings, state, info
@dataclass(frozen=True)
class FireflySettings:
    """Knobs of one FlyMC iteration.

    Attributes
    ----------
    q_db : float
        Probability in ``(0, 1]`` that a dark point proposes to become bright.
    temperature : float
        ``K``: likelihood and bounds are raised to ``1/K`` (the prior is not).
    theta_update : {"rw", "mala", "hmc"}
        Random-walk Metropolis, Metropolis-adjusted Langevin or Hamiltonian Monte Carlo
        for ``q | z``.
    check_bound : bool
        Raise :class:`InvalidBoundError` when a gap proves ``B_n > L_n``.
    bound_tolerance : float
        Rounding allowance: a gap below ``-bound_tolerance * (1 + |log L_n|)`` is a violation.
    cell_rates : CellRates, optional
        A brightening rate per row cell in place of ``q_db`` (which is then their largest),
        see :mod:`~pymc_minibatch_mh.kernels.brightening_rates`.
    """

    q_db: float
    temperature: float = 1.0
    theta_update: str = "rw"
    check_bound: bool = True
    bound_tolerance: float = 1e-8
    cell_rates: CellRates | None = field(default=None, compare=False)

    def __post_init__(self):
        if not 0.0 < self.q_db <= 1.0:
            raise ValueError(f"q_db must lie in (0, 1]; got {self.q_db}.")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive; got {self.temperature}.")
        if self.cell_rates is not None and self.cell_rates.largest != self.q_db:
            raise ValueError("q_db must be the largest of the cell rates.")
        if self.theta_update not in THETA_UPDATES:
            raise ValueError(
                f"theta_update must be one of {THETA_UPDATES}; got {self.theta_update!r}."
            )


@dataclass(frozen=True)
class FireflyInfo:
    """Per-iteration diagnostics; each field is a PyMC sample stat of the same name.

    Attributes
    ----------
    accepted : bool
        Whether the ``q`` proposal was accepted.
    accept : float
        Metropolis acceptance probability of the ``q`` proposal on the augmented target.
    batch_size : int
        Likelihood queries of this iteration: bright points at the proposal plus
        dark points proposed for brightening (distinct data rows).
    n_lik_evals : int
        Per-datum likelihood evaluations (equals ``batch_size`` for random-walk
        updates; MALA and HMC add their value and gradient passes over the bright points).
    n_bright : int
        Bright points after the iteration.
    region_exits : int
        1 if the ``q`` proposal fell outside the trust region of the bound (rejected
        without reading data), else 0.
    """

    accepted: bool
    accept: float
    batch_size: int
    n_lik_evals: int
    n_bright: int
    region_exits: int = 0


@dataclass(eq=False)
class FireflyState:
    """Augmented state ``(q, z)`` of one chain plus cached quantities at ``q``.

    Updated in place by :func:`firefly_kernel` (copying N-sized arrays each
    iteration would cost O(N)).

    Attributes
    ----------
    position : ndarray, shape (D,)
    logprior : float
    bound_sum : float
        ``sum_n log B_n(position)`` (untempered, from the collapsed statistics).
    store : BrightnessStore
        ``z``.
    log_lt : ndarray, shape (N,)
        Tempered ``log Ltilde_n(position)``; meaningful on bright points only.
    prior_grad : ndarray or None
        MALA: gradient of the log prior at ``position``; None if stale.
    data_grad : ndarray or None
        MALA: gradient of the rest of the augmented log density,
        ``sum_n log B_n / K + sum_bright log Ltilde_n``, at ``(position, z)``; None if
        stale. Kept apart from ``prior_grad`` so that :meth:`refresh_prior` never
        needs a pass over the data.
    unbounded : ndarray of bool, shape (N,), or None
        The bound's rows without a bound (always bright; see the module docstring).
    """

    position: np.ndarray
    logprior: float
    bound_sum: float
    store: BrightnessStore
    log_lt: np.ndarray
    prior_grad: np.ndarray | None = field(default=None)
    data_grad: np.ndarray | None = field(default=None)
    unbounded: np.ndarray | None = field(default=None)

    @property
    def grad(self) -> np.ndarray | None:
        """MALA: gradient of the augmented log density at ``(position, z)``; None if stale."""
        if self.prior_grad is None or self.data_grad is None:
            return None
        return self.prior_grad + self.data_grad

    def refresh_prior(self, target: TallTarget) -> None:
        """Recompute the cached log prior at ``position``, in place (O(D), no data).

        Call it before an iteration whenever variables outside ``q`` that enter the
        prior may have changed since the state was last updated (another step method
        of a compound step moved them; ``target.logprior`` reads their current
        values). The MALA prior gradient is marked stale and recomputed, also in
        O(D), by the next ``q`` update; ``z``, ``log_lt``, ``bound_sum`` and
        ``data_grad`` depend only on ``q`` and the data and are kept.

        Parameters
        ----------
        target : TallTarget
            Supplies ``logprior(q)`` at the current values of the other variables.
        """
        self.logprior = float(target.logprior(self.position))
        self.prior_grad = None

    def log_density(self, temperature: float) -> float:
        """Log of ``p(q) prod_n B_n^(1/K) prod_bright Ltilde_n`` at the current state."""
        bright = self.store.bright_indices()
        return self.logprior + self.bound_sum / temperature + float(np.sum(self.log_lt[bright]))


# ------------------------------------------------------------------------ numerics
def log_tilde_likelihood(
    loglik,
    logbound,
    temperature: float = 1.0,
    *,
    check: bool = True,
    tolerance: float = 1e-8,
    rows=None,
) -> np.ndarray:
    """Tempered ``log(L^(1/K) / B^(1/K) - 1)``; ``-inf`` where the (tempered) gap is ``<= 0``;
    ``log L / K`` for a row without a bound (``log B = -inf``: its factor is ``L`` itself).

    Raises :class:`InvalidBoundError` (if ``check``) where the gap is below
    ``-tolerance * (1 + |log L|)``. Non-finite ``log L`` (e.g. ``-inf``) gives ``-inf``.
    """
    loglik = np.asarray(loglik, dtype=np.float64)
    logbound = np.asarray(logbound, dtype=np.float64)
    gap = loglik - logbound
    if check and (gap < -tolerance * (1.0 + np.abs(loglik))).any():
        bad = (gap < -tolerance * (1.0 + np.abs(loglik))) & np.isfinite(loglik)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            row = j if rows is None else int(np.asarray(rows)[j])
            raise InvalidBoundError(
                f"The FlyMC bound exceeds the likelihood for data row {row}: "
                f"log L = {loglik[j]!r} < log B = {loglik[j] - gap[j]!r}. A FlyMC bound must "
                "satisfy B_n(q) <= L_n(q) for every q; fix the bound object passed as "
                "`bound=`, or report this if the bound was built automatically."
            )
    if temperature != 1.0:
        gap = gap / temperature
    with np.errstate(divide="ignore", invalid="ignore"):
        out = gap + np.log(-np.expm1(-gap))
    positive = gap > 0.0  # False for NaN too
    if not positive.all():
        out[~positive] = -np.inf
    unbounded = logbound == -np.inf
    if unbounded.any():
        unbounded &= np.isfinite(loglik)
        out[unbounded] = loglik[unbounded] / temperature
    return out


def unbounded_mask(bound, n_data: int) -> np.ndarray | None:
    """Boolean ``(N,)`` mask of the bound's rows without a bound, or None if it has none."""
    rows = getattr(bound, "unbounded_rows", None)
    if rows is None or not np.size(rows):
        return None
    mask = np.zeros(n_data, dtype=bool)
    mask[np.asarray(rows, dtype=np.int64)] = True
    return mask


def draw_brightness(
    rng: np.random.Generator,
    position: np.ndarray,
    target: TallTarget,
    bound: CollapsibleBound,
    settings: FireflySettings,
    rows: RowsFactory | None = None,
) -> tuple[BrightnessStore, np.ndarray]:
    """Draw every ``z_n`` exactly from ``p(z_n | q)``: O(N) likelihood evaluations, once
    (none for an exact bound, ``bound.exact``: all data are dark). With ``rows`` (the
    kernel's rows factory) that the compiled iteration applies to
    (:mod:`~pymc_minibatch_mh.kernels.compiled_split_iteration`), in one compiled pass.

    Returns the store and the ``(N,)`` array of tempered ``log Ltilde_n`` at ``q``.
    """
    n = target.n_data
    if getattr(bound, "exact", False):
        # B_n = L_n: every Ltilde_n is 0, so every datum is dark; no row needs reading.
        return BrightnessStore(n), np.full(n, -np.inf)
    glm = compiled_split_iteration.compiled_glm(rows, bound, n)
    if glm is not None:
        store, log_lt = BrightnessStore(n), np.empty(n)
        n_bright, row = compiled_split_iteration.draw_brightness(
            rng.random(n), position, glm, settings, store, log_lt
        )
        if n_bright == -2:
            raise ValueError(_NOT_FINITE_AT_START)
        if n_bright == -1:
            _raise_violation(position, row, target, bound, settings, rows)
        return store, log_lt
    all_rows = np.arange(n, dtype=np.int64)
    loglik = np.asarray(target.loglik_full(position), dtype=np.float64)
    if not np.all(np.isfinite(loglik)):
        raise ValueError(_NOT_FINITE_AT_START)
    logbound = np.asarray(bound.log_bound(position, all_rows), dtype=np.float64)
    log_lt = log_tilde_likelihood(
        loglik,
        logbound,
        settings.temperature,
        check=settings.check_bound,
        tolerance=settings.bound_tolerance,
    )
    # p(bright) = 1 - B/L = Ltilde / (1 + Ltilde) = sigmoid(log Ltilde); 1 without a bound.
    bright = np.log1p(-rng.random(n)) <= -np.logaddexp(0.0, -log_lt)
    bright |= np.isneginf(logbound)
    return BrightnessStore(n, bright), log_lt


_NOT_FINITE_AT_START = (
    "The log-likelihood is not finite for every datum at the chain's current point, "
    "so FlyMC cannot draw the brightness variables there. Start the chain elsewhere "
    "(e.g. `initvals=`)."
)


def new_firefly_state(
    rng: np.random.Generator,
    position: np.ndarray,
    target: TallTarget,
    bound: CollapsibleBound,
    settings: FireflySettings,
    rows: RowsFactory | None = None,
) -> FireflyState:
    """A chain state at ``position`` with ``z`` drawn from ``p(z | q)`` (O(N), once); ``rows``
    as for :func:`draw_brightness`."""
    position = np.array(position, dtype=np.float64)
    store, log_lt = draw_brightness(rng, position, target, bound, settings, rows)
    return FireflyState(
        position=position,
        logprior=float(target.logprior(position)),
        bound_sum=float(bound.log_bound_sum(position)),
        store=store,
        log_lt=log_lt,
        unbounded=unbounded_mask(bound, target.n_data),
    )


# ------------------------------------------------------------------------ q | z
def _data_grad(
    q, rows, log_lt, bound, temperature, bound_sum_grad=None, unbounded=None
) -> tuple[np.ndarray, int]:
    """Gradient of the augmented log density minus the log prior at ``q``, bright set ``idx``.

    With the tempered gap ``g_n = (log L_n - log B_n) / K``,
    ``grad log Ltilde_n = (grad log L_n - grad log B_n) / (K (1 - exp(-g_n)))``, and
    ``1 / (1 - exp(-g)) = (1 + Ltilde) / Ltilde = 1 + exp(-log Ltilde)``: one weighted
    gradient pass over the bright rows (``rows``, :class:`BrightRows`). Returns the gradient
    and the rows evaluated.
    ``bound_sum_grad`` is the collapsed bound's gradient at ``q`` if already known. A row
    without a bound (``unbounded``, the state's mask) has weight ``1 / K`` (its entry of
    ``log_lt`` is ``log L_n / K``), and its bound's gradient is 0.
    """
    if bound_sum_grad is None:
        bound_sum_grad = bound.log_bound_sum_grad(q)
    grad = np.asarray(bound_sum_grad, dtype=np.float64) / temperature
    idx = rows.idx
    if idx.size == 0:
        return grad, 0
    weights = _bright_weights(log_lt, temperature, None if unbounded is None else unbounded[idx])
    return grad + rows.weighted_grad(q, weights), idx.size


def _bright_weights(log_lt, temperature: float, unbounded_rows) -> np.ndarray:
    """The weights of the bright rows' gradients in :func:`_data_grad`: ``(1 + exp(-log
    Ltilde_n)) / K``, and ``1 / K`` for a row without a bound (``unbounded_rows``, a mask
    over the rows, or None)."""
    with np.errstate(over="ignore"):  # an infinite weight makes the proposal rejected
        weights = (1.0 + np.exp(-log_lt)) / temperature
    if unbounded_rows is not None:
        weights[unbounded_rows] = 1.0 / temperature
    return weights


def _bright_terms(q, rows, settings, unbounded=None) -> tuple[np.ndarray, np.ndarray]:
    """Tempered ``log Ltilde_n`` of the rows (:class:`BrightRows`) at ``q`` and the gradient
    in ``q`` of their sum (:func:`_data_grad` without the collapsed bound's part).

    Rows that evaluate both from one linear predictor (``rows.values_and_grad``) do; the
    others give their values, then their weighted gradient.
    """
    idx = rows.idx
    if not idx.size:
        return np.empty(0), np.zeros(np.shape(q))
    temperature = settings.temperature
    mask = None if unbounded is None else unbounded[idx]

    def weigh(loglik, logbound):
        log_lt = _tempered_log_tilde(loglik, logbound, idx, settings)
        return log_lt, _bright_weights(log_lt, temperature, mask)

    joint = getattr(rows, "values_and_grad", None)
    if joint is not None:
        return joint(q, weigh)
    log_lt, weights = weigh(*rows.values(q))
    return log_lt, rows.weighted_grad(q, weights)


def _mala_log_density(to, frm, grad_frm, scaling, chol) -> float:
    """``log q(to | frm)`` up to a constant for ``to = frm + h/2 S grad + sqrt(h) L xi``."""
    h = scaling * scaling
    drift = 0.5 * h * (grad_frm if chol is None else chol @ (chol.T @ grad_frm))
    r = to - frm - drift
    if chol is not None:
        r = solve_triangular(chol, r, lower=True)
    return float(-0.5 * (r @ r) / h)


def theta_update(
    rng: np.random.Generator,
    state: FireflyState,
    target: TallTarget,
    bound: CollapsibleBound,
    settings: FireflySettings,
    scaling: float,
    proposal: RandomWalkProposal,
    rows: RowsFactory | None = None,
    gaussian: GaussianFlow | None = None,
) -> tuple[bool, float, int, int]:
    """Metropolis(-adjusted Langevin) update of ``q`` given ``z``, in place.

    With ``theta_update="hmc"`` and a ``gaussian``, the HMC is split around that Gaussian
    (:func:`split_hmc_theta_update`).

    Returns ``(accepted, accept_prob, rows_touched, lik_evals, region_exit)``. When the
    bound holds on a trust region only (``bound.region``), a proposal outside it is
    rejected before any datum is read (``region_exit`` 1): the chain targets the
    posterior restricted to the region.
    """
    if settings.theta_update == "hmc":
        if gaussian is not None:
            return split_hmc_theta_update(
                rng, state, target, bound, settings, scaling, gaussian, rows=rows
            )
        return hmc_theta_update(rng, state, target, bound, settings, scaling, proposal, rows=rows)
    temp = settings.temperature
    bright = np.asarray(state.store.bright_indices(), dtype=np.int64)
    bright_rows = rows_of(target, bound, bright, rows)
    n_evals = 0
    mala = settings.theta_update == "mala"
    if mala:
        if state.prior_grad is None:
            state.prior_grad = np.asarray(target.logprior_grad(state.position), dtype=np.float64)
        if state.data_grad is None:
            state.data_grad, used = _data_grad(
                state.position,
                bright_rows,
                state.log_lt[bright],
                bound,
                temp,
                unbounded=state.unbounded,
            )
            n_evals += used
        grad = state.grad
        chol = proposal.chol
        noise = rng.standard_normal(state.position.shape[0])
        step = noise if chol is None else chol @ noise
        drift = grad if chol is None else chol @ (chol.T @ grad)
        new = state.position + 0.5 * scaling**2 * drift + scaling * step
        log_q_ratio = None
    else:
        new, log_q_ratio = proposal(rng, state.position, scaling)
    log_v = math.log1p(-rng.random())  # log(1 - u), u in [0, 1): never log(0)

    region = getattr(bound, "region", None)
    if region is not None and not region.contains(new):
        return False, 0.0, 0, n_evals, 1
    lp_new = float(target.logprior(new))
    if not math.isfinite(lp_new):
        return False, 0.0, 0, n_evals, 0
    log_lt_new = _bright_log_tilde(new, bright_rows, settings)
    n_evals += bright.size
    lt_sum_new = float(np.sum(log_lt_new))
    if not math.isfinite(lt_sum_new):  # a bright point would have Ltilde = 0 (or NaN)
        return False, 0.0, bright.size, n_evals, 0
    bound_sum_new = float(bound.log_bound_sum(new))
    log_new = lp_new + bound_sum_new / temp + lt_sum_new
    log_ratio = log_new - state.log_density(temp)
    prior_grad_new = data_grad_new = None
    if mala:
        prior_grad_new = np.asarray(target.logprior_grad(new), dtype=np.float64)
        data_grad_new, used = _data_grad(
            new, bright_rows, log_lt_new, bound, temp, unbounded=state.unbounded
        )
        n_evals += used
        log_q_ratio = _mala_log_density(
            state.position, new, prior_grad_new + data_grad_new, scaling, proposal.chol
        ) - _mala_log_density(new, state.position, grad, scaling, proposal.chol)
    log_ratio += log_q_ratio
    if math.isnan(log_ratio):
        return False, 0.0, bright.size, n_evals, 0
    accept_prob = math.exp(min(0.0, log_ratio))
    if log_v <= log_ratio:
        _move(state, new, bright, lp_new, bound_sum_new, log_lt_new, prior_grad_new, data_grad_new)
        return True, accept_prob, bright.size, n_evals, 0
    return False, accept_prob, bright.size, n_evals, 0


def _move(state, q, bright, logprior, bound_sum, log_lt, prior_grad, data_grad) -> None:
    """Accept ``q`` given the bright set: position and everything cached at it, in place."""
    state.position = q
    state.logprior = logprior
    state.bound_sum = bound_sum
    state.log_lt[bright] = log_lt
    state.prior_grad = prior_grad
    state.data_grad = data_grad


def _bright_log_tilde(q, rows, settings) -> np.ndarray:
    """Tempered ``log Ltilde_n`` of the rows (:class:`BrightRows`) at ``q`` (empty without
    rows)."""
    if not rows.idx.size:
        return np.empty(0)
    return _tempered_log_tilde(*rows.values(q), rows.idx, settings)


def _tempered_log_tilde(loglik, logbound, idx, settings) -> np.ndarray:
    """:func:`log_tilde_likelihood` of the rows ``idx`` with the kernel's settings."""
    return log_tilde_likelihood(
        loglik,
        logbound,
        settings.temperature,
        check=settings.check_bound,
        tolerance=settings.bound_tolerance,
        rows=idx,
    )


def _conditional_at(q, rows, target, bound, settings, unbounded=None):
    """``(log density, prior grad, data grad, log Ltilde of the bright rows, bound sum,
    the bright rows' part of the data grad)`` of ``q | z`` at ``q``, or None where it is 0
    (outside the prior support or the trust region, or a bright point with
    ``Ltilde = 0``)."""
    region = getattr(bound, "region", None)
    if region is not None and not region.contains(q):
        return None
    logprior = float(target.logprior(q))
    if not math.isfinite(logprior):
        return None
    temp = settings.temperature
    log_lt, bright_grad = _bright_terms(q, rows, settings, unbounded)
    lt_sum = float(np.sum(log_lt))
    if not math.isfinite(lt_sum):
        return None
    both = getattr(bound, "log_bound_sum_and_grad", None)
    if both is None:
        bound_sum, bound_grad = float(bound.log_bound_sum(q)), bound.log_bound_sum_grad(q)
    else:  # the sum and its gradient share their O(D^2) work
        bound_sum, bound_grad = both(q)
    data_grad = np.asarray(bound_grad, dtype=np.float64) / temp + bright_grad
    prior_grad = np.asarray(target.logprior_grad(q), dtype=np.float64)
    grad = prior_grad + data_grad
    if not np.all(np.isfinite(grad)):
        return None
    value = logprior + bound_sum / temp + lt_sum
    return value, logprior, prior_grad, data_grad, log_lt, bound_sum, bright_grad


def hmc_theta_update(
    rng: np.random.Generator,
    state: FireflyState,
    target: TallTarget,
    bound: CollapsibleBound,
    settings: FireflySettings,
    step_size: float,
    proposal: RandomWalkProposal,
    rows: RowsFactory | None = None,
) -> tuple[bool, float, int, int, int]:
    """One HMC transition of ``q`` given ``z``, in place.

    The target is the augmented density with the bright set fixed,
    ``log p(q) + sum_n log B_n(q) / K + sum_bright log Ltilde_n(q)``: the collapsed
    bound costs ``O(D^2)`` per evaluation and the bright rows one value and one weighted
    gradient pass, so a leapfrog step reads only the bright rows. The dynamics run in
    whitened coordinates ``u`` with ``q = q0 + L u`` (``L = proposal.chol``, the identity if
    None)
    and unit mass; the trajectory length in those units is drawn uniformly from
    :data:`~pymc_minibatch_mh.kernels.surrogate_hmc.TRAJECTORY_RANGE`. A leapfrog point
    where the density is 0 (outside the prior support or the trust region, or a bright
    point with ``Ltilde_n = 0``) ends the trajectory as a rejection, which keeps the
    transition reversible.

    Returns ``(accepted, accept_prob, rows_touched, lik_evals, region_exit)`` as
    :func:`theta_update` (``region_exit`` 1 when the trajectory left the trust region).
    """
    bright = np.asarray(state.store.bright_indices(), dtype=np.int64)
    bright_rows = rows_of(target, bound, bright, rows)
    n_bright = int(bright.size)
    n_evals = _fill_gradient(state, target, bound, settings, bright, bright_rows)
    value0 = state.log_density(settings.temperature)
    dim = state.position.size

    # The momentum lives in q's coordinates, p = L^{-T} m with m the whitened momentum, so
    # a leapfrog step costs one product with the mass's inverse L L^T (a sparse solve with
    # the Laplace precision in a multilevel model) instead of L^T g and L m: the same
    # trajectory as in the whitened coordinates. The momentum's draw and its energy use L
    # itself, once per transition; any constant symmetric positive definite inverse mass
    # in the drift keeps the leapfrog map reversible and volume preserving.
    chol = proposal.chol
    length = rng.uniform(*TRAJECTORY_RANGE)
    n_steps = int(min(max(1, math.ceil(length / step_size)), MAX_LEAPFROG_STEPS))
    whitened = rng.standard_normal(dim)
    energy0 = -value0 + 0.5 * float(whitened @ whitened)
    momentum = whitened if chol is None else solve_triangular(chol, whitened, trans="T", lower=True)
    q = state.position.copy()
    grad = state.grad
    region = getattr(bound, "region", None)
    at = None
    with np.errstate(over="ignore", invalid="ignore"):  # a divergence ends as a reject
        for _ in range(n_steps):
            momentum = momentum + 0.5 * step_size * grad
            q = q + step_size * proposal.covariance_times(momentum)
            at = _conditional_at(q, bright_rows, target, bound, settings, state.unbounded)
            n_evals += 2 * n_bright
            if at is None:
                exit_ = int(region is not None and not region.contains(q))
                return False, 0.0, n_bright, n_evals, exit_
            grad = at[2] + at[3]
            momentum = momentum + 0.5 * step_size * grad
        whitened = momentum if chol is None else chol.T @ momentum
        energy1 = -at[0] + 0.5 * float(whitened @ whitened)
    accepted, accept_prob = _hmc_decision(rng, state, bright, q, at, energy0 - energy1)
    return accepted, accept_prob, n_bright, n_evals, 0


def split_hmc_theta_update(
    rng: np.random.Generator,
    state: FireflyState,
    target: TallTarget,
    bound: CollapsibleBound,
    settings: FireflySettings,
    step_size: float,
    gaussian: GaussianFlow,
    rows: RowsFactory | None = None,
) -> tuple[bool, float, int, int, int]:
    """One HMC transition of ``q`` given ``z`` split around a Gaussian, in place.

    ``gaussian`` should be the prior times the tempered collapsed bounds (a Gaussian
    ``N(m, P^{-1})`` for a Normal prior and a quadratic bound): ``q | z`` is then that
    Gaussian times the bright rows' ``Ltilde_n``. In the Gaussian's whitened coordinates
    ``x = C^T (q - m)`` (``P = C C^T``) its part of the dynamics is a rotation of
    ``(x, momentum)``, solved exactly, and the bright rows act through half-step kicks
    (Strang splitting [3]_): kick ``step_size / 2``, rotate by ``step_size``, kick. A kick
    adds a function of ``x`` alone to the momentum, so the integrator is reversible and
    volume preserving whatever that function is, and the acceptance uses the exact
    ``log pi(q | z)`` at both ends: the transition leaves ``pi(q | z)`` invariant for any
    Gaussian, a good one only makes the steps longer. Along the trajectory only the bright
    rows are read (no prior, no collapsed sum); the end point is evaluated in full. A point
    outside the bound's trust region (where there is one) ends the trajectory as a
    rejection, as in :func:`hmc_theta_update`. The
    total time is drawn from :data:`~pymc_minibatch_mh.kernels.gaussian_flow.ANGLE_RANGE`
    (a quarter to three eighths of the Gaussian's period). Where
    :func:`~pymc_minibatch_mh.kernels.split_kicks.compiled_rows` allows it (logit rows
    with global bounds), the steps up to the end point run compiled, with the same
    arithmetic.

    Returns ``(accepted, accept_prob, rows_touched, lik_evals, region_exit)``.

    References
    ----------
    .. [3] Shahbaba, B., Lan, S., Johnson, W. O., Neal, R. M. "Split Hamiltonian Monte
       Carlo", Statistics and Computing 24, 2014.
    """
    glm = compiled_split_iteration.compiled_glm(rows, bound, target.n_data)
    if glm is not None:
        return _compiled_split_update(
            rng, state, target, bound, settings, step_size, gaussian, glm, rows
        )
    bright = np.asarray(state.store.bright_indices(), dtype=np.int64)
    bright_rows = rows_of(target, bound, bright, rows)
    n_bright = int(bright.size)
    temp = settings.temperature
    inverse, mean = gaussian.inverse_chol, gaussian.mean
    no_bound_grad = np.zeros(mean.size)
    region = getattr(bound, "region", None)

    def force(q, log_lt):
        # d/dx of the bright rows' sum of log Ltilde_n, with q = m + C^-T x
        grad, _ = _data_grad(q, bright_rows, log_lt, bound, temp, no_bound_grad, state.unbounded)
        return inverse @ grad

    n_steps, step_size = _trajectory_steps(rng, step_size)
    cos, sin = math.cos(step_size), math.sin(step_size)
    momentum = rng.standard_normal(mean.size)
    energy0 = -state.log_density(temp) + 0.5 * float(momentum @ momentum)
    q = state.position
    x = gaussian.precision_chol.T @ (q - mean)
    compiled = split_kicks.compiled_rows(bright_rows, region)  # gathers the rows' design
    kick = force(q, state.log_lt[bright])
    n_evals = n_bright
    if compiled is not None:  # the same steps as the loop below, compiled
        status, steps, q = split_kicks.run_split_kicks(
            compiled, x, momentum, kick, mean, inverse, step_size, n_steps, temp,
            settings.check_bound, settings.bound_tolerance,
        )  # fmt: skip
        n_evals += 2 * n_bright * steps  # each step's point read once (the end point too)
        if status == split_kicks.BOUND_VIOLATED:  # raise the numpy path's error there
            _bright_terms(q, bright_rows, settings, state.unbounded)
        if status != split_kicks.AT_END:
            return False, 0.0, n_bright, n_evals, 0
        with np.errstate(over="ignore", invalid="ignore"):
            at = _conditional_at(q, bright_rows, target, bound, settings, state.unbounded)
            if at is None:
                return False, 0.0, n_bright, n_evals, 0
            momentum = momentum + 0.5 * step_size * (inverse @ at[6])
            energy1 = -at[0] + 0.5 * float(momentum @ momentum)
        accepted, accept_prob = _hmc_decision(rng, state, bright, q, at, energy0 - energy1)
        return accepted, accept_prob, n_bright, n_evals, 0
    with np.errstate(over="ignore", invalid="ignore"):  # a divergence ends as a reject
        for step in range(n_steps):
            momentum = momentum + 0.5 * step_size * kick
            x, momentum = cos * x + sin * momentum, cos * momentum - sin * x
            q = mean + inverse.T @ x
            if step < n_steps - 1:
                if region is not None and not region.contains(q):
                    # density 0 there (and the bound may not hold): a rejection, as in
                    # hmc_theta_update, which keeps the transition reversible
                    return False, 0.0, n_bright, n_evals, 1
                _, grad = _bright_terms(q, bright_rows, settings, state.unbounded)
                kick = inverse @ grad
                n_evals += 2 * n_bright
                if not np.all(np.isfinite(kick)):
                    return False, 0.0, n_bright, n_evals, 0
            else:
                at = _conditional_at(q, bright_rows, target, bound, settings, state.unbounded)
                n_evals += 2 * n_bright
                if at is None:
                    exit_ = int(region is not None and not region.contains(q))
                    return False, 0.0, n_bright, n_evals, exit_
                kick = inverse @ at[6]
            momentum = momentum + 0.5 * step_size * kick
        energy1 = -at[0] + 0.5 * float(momentum @ momentum)
    accepted, accept_prob = _hmc_decision(rng, state, bright, q, at, energy0 - energy1)
    return accepted, accept_prob, n_bright, n_evals, 0


def _trajectory_steps(rng: np.random.Generator, step_size: float) -> tuple[int, float]:
    """``(n_steps, step)`` of a split trajectory whose time is drawn from
    :data:`~pymc_minibatch_mh.kernels.gaussian_flow.ANGLE_RANGE`: steps of time / n_steps,
    so that the total angle stays the drawn time (``step_size`` only sets how many steps)
    even when tuning finds the kicks negligible and grows ``step_size``."""
    length = rng.uniform(*ANGLE_RANGE)
    n_steps = int(min(max(1, math.ceil(length / step_size)), MAX_LEAPFROG_STEPS))
    return n_steps, length / n_steps


def _compiled_split_update(rng, state, target, bound, settings, step_size, gaussian, glm, rows):
    """:func:`split_hmc_theta_update` with its trajectory compiled
    (:mod:`~pymc_minibatch_mh.kernels.compiled_split_iteration`): the same draws from
    ``rng``, the same end point up to rounding; the log prior and the collapsed bound at
    the end point and the decision are the same as on the numpy path."""
    n_steps, step_size = _trajectory_steps(rng, step_size)
    momentum = rng.standard_normal(state.position.size)
    status, steps, row, q, log_lt_end, kinetic, lt_sum0, lt_sum1 = (
        compiled_split_iteration.trajectory(
            state, glm, gaussian, step_size, n_steps, momentum, settings
        )
    )
    n_bright = state.store.n_bright
    n_evals = n_bright * (1 + 2 * steps)  # the start's kick, then each point reached
    if status == compiled_split_iteration.BOUND_VIOLATED:
        _raise_violation(q, row, target, bound, settings, rows)
    if status != compiled_split_iteration.AT_END:
        return False, 0.0, n_bright, n_evals, 0
    logprior = float(target.logprior(q))
    if not math.isfinite(logprior):
        return False, 0.0, n_bright, n_evals, 0
    temp = settings.temperature
    bound_sum = float(bound.log_bound_sum(q))
    log_new = logprior + bound_sum / temp + lt_sum1
    log_ratio = log_new - (state.logprior + state.bound_sum / temp + lt_sum0) - kinetic
    if not math.isfinite(log_ratio):
        return False, 0.0, n_bright, n_evals, 0
    accept_prob = math.exp(min(0.0, log_ratio))
    if math.log1p(-rng.random()) > log_ratio:
        return False, accept_prob, n_bright, n_evals, 0
    bright = state.store.arr[:n_bright]
    _move(state, q, bright, logprior, bound_sum, log_lt_end, None, None)
    return True, accept_prob, n_bright, n_evals, 0


def _raise_violation(q, row, target, bound, settings, rows) -> None:
    """Raise the numpy path's :class:`InvalidBoundError` for data row ``row`` at ``q``, where
    a compiled loop found the bound above the likelihood."""
    _bright_log_tilde(q, rows_of(target, bound, np.array([row], dtype=np.int64), rows), settings)
    raise AssertionError(f"the compiled loop and numpy disagree on the bound of row {row}")


def _hmc_decision(rng, state, bright, q, at, log_ratio: float) -> tuple[bool, float]:
    """Accept or reject the end ``q`` of an HMC trajectory (``at``: ``_conditional_at``'s
    values there) with ``log_ratio`` the energy decrease; moves the state if accepted."""
    if not math.isfinite(log_ratio):
        return False, 0.0
    accept_prob = math.exp(min(0.0, log_ratio))
    if math.log1p(-rng.random()) <= log_ratio:
        _, logprior, prior_grad, data_grad, log_lt, bound_sum = at[:6]
        _move(state, q, bright, logprior, bound_sum, log_lt, prior_grad, data_grad)
        return True, accept_prob
    return False, accept_prob


def _fill_gradient(state, target, bound, settings, bright, bright_rows) -> int:
    """Compute the state's stale gradient parts in place; returns the rows evaluated."""
    if state.prior_grad is None:
        state.prior_grad = np.asarray(target.logprior_grad(state.position), dtype=np.float64)
    if state.data_grad is not None:
        return 0
    state.data_grad, used = _data_grad(
        state.position,
        bright_rows,
        state.log_lt[bright],
        bound,
        settings.temperature,
        unbounded=state.unbounded,
    )
    return used


# ------------------------------------------------------------------------ z | q
def brightness_update(
    rng: np.random.Generator,
    state: FireflyState,
    target: TallTarget,
    bound: CollapsibleBound,
    settings: FireflySettings,
    rows: RowsFactory | None = None,
) -> int:
    """Implicit MH update of every ``z_n`` given ``q``, in place; returns rows evaluated.

    Nothing to do for an exact bound (``bound.exact``, ``B_n = L_n``): all data stay dark.

    Each datum gets one MH move from its state at the start of the update:
    bright -> dark proposed always, accepted w.p. ``min(1, q_db / Ltilde_n)``;
    dark -> bright proposed w.p. ``q_db``, accepted w.p. ``min(1, Ltilde_n / q_db)``.
    Rows without a bound stay bright. With ``settings.cell_rates`` each row's own rate
    takes the place of ``q_db`` in both directions.
    """
    if getattr(bound, "exact", False):
        return 0  # B_n = L_n: every L~_n is 0, no datum can turn bright
    store = state.store
    glm = compiled_split_iteration.compiled_glm(rows, bound, target.n_data)
    one_rate = settings.cell_rates is None
    if glm is not None and state.unbounded is None and one_rate:  # same draws, compiled loop
        u_dark = rng.random(store.n_bright)
        offsets = geometric_positions(rng, settings.q_db, store.n_dark)
        u_candidates = rng.random(offsets.size) if offsets.size else np.empty(0)
        row = compiled_split_iteration.brightness_update(
            state, glm, settings, u_dark, offsets, u_candidates
        )
        if row >= 0:
            _raise_violation(state.position, row, target, bound, settings, rows)
        state.data_grad = None
        return int(offsets.size)
    return _numpy_brightness_update(rng, state, target, bound, settings, rows)


def _numpy_brightness_update(rng, state, target, bound, settings, rows) -> int:
    """:func:`brightness_update` in numpy, with ``q_db`` or each row's cell rate ``r_n``:
    bright rows darken with probability ``min(1, r_n / Ltilde_n)``, each dark row proposes
    with probability ``r_n`` and brightens with ``min(1, Ltilde_n / r_n)``."""
    store, rates = state.store, settings.cell_rates
    if rates is None:
        log_q = math.log(settings.q_db)

        def log_rate(_rows):
            return log_q
    else:
        log_rate = rates.log_rates
    bright = np.asarray(store.bright_indices(), dtype=np.int64)
    darken = np.log1p(-rng.random(bright.size)) <= log_rate(bright) - state.log_lt[bright]
    if state.unbounded is not None:
        darken &= ~state.unbounded[bright]  # B_n = 0: p(z_n = 1 | q) = 1
    darken = bright[darken]
    if rates is None:
        offsets = geometric_positions(rng, settings.q_db, store.n_dark)
        candidates = np.asarray(store.arr[bright.size + offsets], dtype=np.int64)
    else:  # every row at its rate; the bright ones move by the other direction
        candidates = rates.proposing(rng, geometric_positions)
        candidates = candidates[~store.is_bright(candidates)]
    brighten = candidates[:0]
    if candidates.size:
        candidate_rows = rows_of(target, bound, candidates, rows)
        log_lt = _bright_log_tilde(state.position, candidate_rows, settings)
        accept = np.log1p(-rng.random(candidates.size)) <= log_lt - log_rate(candidates)
        brighten = candidates[accept]
        state.log_lt[brighten] = log_lt[accept]
    store.darken(darken, validate=False)
    store.brighten(brighten, validate=False)
    if darken.size or brighten.size:
        state.data_grad = None
    return int(candidates.size)


def firefly_kernel(
    rng: np.random.Generator,
    state: FireflyState,
    target: TallTarget,
    bound: CollapsibleBound,
    settings: FireflySettings,
    *,
    scaling: float,
    proposal: RandomWalkProposal | None = None,
    rows: RowsFactory | None = None,
    gaussian: GaussianFlow | None = None,
) -> tuple[FireflyState, FireflyInfo]:
    """One FlyMC iteration: update ``q | z``, then ``z | q`` (implicit scheme), in place.

    Parameters
    ----------
    rng : numpy.random.Generator
        The chain's generator.
    state : FireflyState
        Current augmented state (modified in place and returned).
    target : TallTarget
        Prior and per-datum likelihood. For MALA it must also provide
        ``loglik_weighted_grad(q, idx, weights)`` and ``logprior_grad(q)``.
    bound : CollapsibleBound
        Per-datum lower bounds with a collapsed sum.
    settings : FireflySettings
    scaling : float
        Proposal scale (random-walk step or MALA step size ``sqrt(h)``).
    proposal : RandomWalkProposal, optional
        Supplies the proposal covariance factor (identity if None).
    rows : callable, optional
        ``rows(idx) -> BrightRows``: the likelihood and the bound of a set of rows evaluated
        together (e.g. from one linear predictor); default :class:`SeparateRows`, which
        calls ``target`` and ``bound``. Both give the same values.
    gaussian : GaussianFlow, optional
        With ``theta_update="hmc"``: split the dynamics around this Gaussian (e.g. the prior
        times the collapsed bounds), see :func:`split_hmc_theta_update`; ``scaling`` is then
        the step in its rotation angle.

    Returns
    -------
    (FireflyState, FireflyInfo)
    """
    proposal = proposal if proposal is not None else RandomWalkProposal(None)
    accepted, accept_prob, n_rows, n_evals, region_exit = theta_update(
        rng, state, target, bound, settings, scaling, proposal, rows, gaussian
    )
    proposed = brightness_update(rng, state, target, bound, settings, rows)
    info = FireflyInfo(
        accepted=bool(accepted),
        accept=float(accept_prob),
        batch_size=int(n_rows + proposed),
        n_lik_evals=int(n_evals + proposed),
        n_bright=int(state.store.n_bright),
        region_exits=int(region_exit),
    )
    return state, info
