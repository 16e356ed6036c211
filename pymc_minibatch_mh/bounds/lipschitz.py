"""Per-datum Lipschitz constants and a metric for TunaMH (pure numpy).

TunaMH needs constants ``c_i >= 0`` and a symmetric function ``M(q, q') >= 0``,
cheap to evaluate, such that for every datum and every pair of states the
chain can visit

    |log p(y_i | q) - log p(y_i | q')| <= c_i * M(q, q').

The constants here bound the **untempered** per-datum log-likelihood; at
temperature ``K`` the kernel uses ``c_i / K`` for the energies
``U_i = -log p(y_i | q) / K`` (so ``C = sum(c) / K``).

For a likelihood that depends on ``q`` only through a linear predictor
``eta_i = x_i . q + o_i`` with ``|d/d eta log p(y_i | eta)| <= s_i``, the mean
value theorem and Cauchy–Schwarz give, for any invertible ``L``,

    |Delta log p_i| <= s_i |x_i . (q - q')| = s_i |(L^T x_i) . L^{-1}(q - q')|
                    <= s_i ||L^T x_i|| * ||L^{-1}(q - q')||,

so ``c_i = s_i ||L^T x_i||`` with ``M = ||L^{-1}(q - q')||`` (``L = I``: the
Euclidean recipe ``c_i = s_i ||x_i||``, ``M = ||q - q'||``). The slopes are

* Bernoulli, logit link: ``s_i = 1`` (``|sigmoid(eta) - y| < 1``);
* Student-t with fixed ``nu`` and ``sigma``: ``s_i = (nu + 1) / (2 sqrt(nu) sigma)``
  (the largest slope of ``(nu + 1)/2 log(1 + r^2 / (nu sigma^2))``, at ``r = sqrt(nu) sigma``);
* Categorical, softmax link: the gradient of the log-likelihood in the logits
  is ``e_y - p`` with norm at most ``sqrt(2)``, and ``||Delta logits_i|| <=
  ||x_i|| ||A L|| M`` for the coefficient map ``A``, so ``c_i = sqrt(2) ||x_i|| ||A L||_2``;
* Poisson, log link, and Normal with fixed ``sigma``: not globally Lipschitz.
  On a bounded box ``lo <= q <= hi`` (the support of the prior; TunaMH rejects
  moves outside the box before any datum is read) ``eta_i`` stays in
  ``[eta_min_i, eta_max_i]`` and ``s_i`` is the largest slope there:
  ``max(|exp(eta) - y_i|)`` and ``max(|eta - y_i|) / sigma_i^2`` over the two ends.

References
----------
.. [1] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact
   Minibatch Metropolis-Hastings", NeurIPS 2020 (Assumption 1, Eq. 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from scipy import linalg

from pymc_minibatch_mh.bounds.row_cells import RowCells
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.data.chunk_pass import design_map
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.data.row_design import design_rows
from pymc_minibatch_mh.families.registry import family_record

if TYPE_CHECKING:  # pragma: no cover - typing only (kept out of the import path)
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood


class UnsupportedBound(ValueError):
    """No sound Lipschitz bound can be built for this likelihood (the message says why)."""


# ---------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class EuclideanMetric:
    """``M(q, q') = ||q - q'||_2``."""

    def __call__(self, q: np.ndarray, q_new: np.ndarray) -> float:
        diff = np.asarray(q_new, dtype=np.float64) - np.asarray(q, dtype=np.float64)
        return float(math.sqrt(diff @ diff))


@dataclass(frozen=True, eq=False)
class WhitenedMetric:
    """``M(q, q') = ||L^{-1}(q - q')||_2`` for a fixed lower-triangular ``L``.

    With ``L`` the Cholesky factor of the proposal covariance, a random-walk move
    ``q' = q + s L z`` has ``M = s ||z||`` exactly. Cost O(D^2) (``L^{-1}`` is formed once).
    """

    chol: np.ndarray
    _inverse: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        chol = np.array(self.chol, dtype=np.float64)
        if chol.ndim != 2 or chol.shape[0] != chol.shape[1]:
            raise ValueError(f"chol must be a square matrix; got shape {chol.shape}.")
        if not np.allclose(chol, np.tril(chol)):
            raise ValueError("chol must be lower triangular.")
        if not np.all(np.isfinite(chol)) or np.any(np.diag(chol) <= 0):
            raise ValueError("chol must be finite with a positive diagonal.")
        inverse = linalg.solve_triangular(chol, np.eye(chol.shape[0]), lower=True)
        chol.setflags(write=False)
        inverse.setflags(write=False)
        object.__setattr__(self, "chol", chol)
        object.__setattr__(self, "_inverse", inverse)

    def __call__(self, q: np.ndarray, q_new: np.ndarray) -> float:
        diff = np.asarray(q_new, dtype=np.float64) - np.asarray(q, dtype=np.float64)
        white = self._inverse @ diff
        return float(math.sqrt(white @ white))


# ---------------------------------------------------------------------------- the bound


@dataclass(frozen=True, eq=False)
class LipschitzBound:
    """Constants ``c_i`` and metric ``M`` with ``|l_i(q) - l_i(q')| <= c_i M(q, q')``.

    ``l_i`` is the untempered per-datum log-likelihood; see the module docstring.

    Parameters
    ----------
    c : array_like, shape (N,)
        Non-negative finite per-datum constants.
    metric : callable
        ``metric(q, q_new) -> float``, symmetric and non-negative, O(D) or O(D^2)
        to evaluate. It must be picklable for multiprocess sampling (a module-level
        function or a callable object; ``cloudpickle`` also handles lambdas).
    description : str
        Where the bound came from (shown in error messages).
    box : tuple of array_like, optional
        ``(lo, hi)`` in ``q`` space (1-D, one entry per coordinate, ``lo <= hi``; infinite
        ends allowed) when the bound only holds on that box. TunaMH rejects every
        proposal outside the box before reading any datum, so the chain samples the
        posterior restricted to the box: the full posterior when the box contains the
        prior support (the automatic Poisson-log / Normal bounds use the support of
        Uniform priors), a truncated one when a user-given box is narrower.
    region : TrustRegion, optional
        An ellipsoid on which the bound holds (see
        :mod:`pymc_minibatch_mh.bounds.trust_region`); treated like the box.
    cells : RowCells, optional
        Rows grouped by the coordinates they touch, each cell with its own metric
        (:mod:`pymc_minibatch_mh.bounds.row_cells`): the bound of row ``i`` is then
        ``c_i M_cell(i)(q, q')`` and ``metric`` is not used by TunaMH.
    exact_rows : array_like of int, optional
        Rows without a constant (their ``c_i`` is 0): TunaMH evaluates their terms exactly
        at every step instead of drawing them (a row whose constant overflows on the
        trust region, or is so large that it would be drawn many times per step).

    Attributes
    ----------
    C : float
        ``sum(c)``.

    References
    ----------
    .. [1] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact
       Minibatch Metropolis-Hastings", NeurIPS 2020 (Assumption 1).

    Examples
    --------
    Logistic regression: ``|d log sigmoid(s) / ds| <= 1``, so ``c_i = ||x_i||``:

    >>> import numpy as np
    >>> from pymc_minibatch_mh import LipschitzBound
    >>> x = np.array([[3.0, 4.0], [1.0, 0.0]])
    >>> bound = LipschitzBound.euclidean(np.linalg.norm(x, axis=1))
    >>> bound.C, bound.metric(np.zeros(2), np.array([0.0, 0.5]))
    (6.0, 0.5)
    """

    c: np.ndarray
    metric: Callable[[np.ndarray, np.ndarray], float]
    description: str = "user-supplied constants"
    box: tuple[np.ndarray, np.ndarray] | None = None
    region: TrustRegion | None = None
    cells: RowCells | None = None
    exact_rows: np.ndarray | None = None
    C: float = field(init=False)

    def __deepcopy__(self, memo) -> LipschitzBound:
        # Immutable (frozen, read-only constants): PyMC deep-copies a step's sampling
        # state for every chain, and a copy of c would cost 8 N bytes each time.
        return self

    def __post_init__(self) -> None:
        c = np.asarray(self.c, dtype=np.float64)
        if c.flags.writeable:  # an array someone can still write: keep a private copy
            c = c.copy()
        if c.ndim != 1 or c.size == 0:
            raise ValueError(
                f"c must be a 1-D array with one constant per data point; got shape {c.shape}."
            )
        bad = ~np.isfinite(c) | (c < 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"c must be finite and non-negative; c[{i}] = {c[i]!r} "
                f"({int(bad.sum())} bad entries)."
            )
        if not callable(self.metric):
            raise TypeError(f"metric must be callable as metric(q, q_new); got {self.metric!r}.")
        c.setflags(write=False)
        object.__setattr__(self, "c", c)
        object.__setattr__(self, "C", float(math.fsum(c)))
        if self.box is not None:
            object.__setattr__(self, "box", _validated_box(self.box))
        if self.exact_rows is not None:
            rows = np.unique(np.asarray(self.exact_rows, dtype=np.int64))
            if rows.size and (rows[0] < 0 or rows[-1] >= c.size or np.any(c[rows] != 0)):
                raise ValueError("exact_rows must be rows of the data whose c is 0.")
            rows.setflags(write=False)
            object.__setattr__(self, "exact_rows", rows if rows.size else None)

    def contains(self, q: np.ndarray) -> bool:
        """Whether ``q`` lies in :attr:`box` (ends included) and in :attr:`region`;
        always True without either.

        A NaN coordinate is outside. Cost O(D) (O(D^2) with a region).
        """
        if self.region is not None and not self.region.contains(q):
            return False
        if self.box is None:
            return True
        lo, hi = self.box
        q = np.asarray(q, dtype=np.float64)
        if q.shape != lo.shape:
            raise ValueError(f"q has shape {q.shape} but the bound's box has shape {lo.shape}.")
        return bool(np.all(lo <= q) and np.all(q <= hi))

    @property
    def n_data(self) -> int:
        return int(self.c.size)

    @classmethod
    def euclidean(cls, c: np.ndarray, description: str = "user-supplied constants"):
        """Bound with ``M(q, q') = ||q - q'||_2``."""
        return cls(c, EuclideanMetric(), description)

    @classmethod
    def from_linear_predictor(
        cls,
        lp: LinearPredictorLikelihood,
        *,
        chol: np.ndarray | None = None,
        box: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> LipschitzBound:
        """Bound for a recognised linear-predictor likelihood.

        Parameters
        ----------
        lp : LinearPredictorLikelihood
            From :func:`pymc_minibatch_mh.likelihood.linear_predictor.recognise_linear_predictor`
            (only its numeric attributes are read).
        chol : ndarray, optional
            Lower-triangular ``L`` of a :class:`WhitenedMetric`; ``None`` for Euclidean.
            Must stay fixed while the bound is used by a chain that has to be exact.
        box : (lo, hi), optional
            Bounded support of the prior in ``q`` space. Required for ``poisson_log``
            and ``normal``; ignored by the other families (their bound is global).

        Raises
        ------
        UnsupportedBound
            ``poisson_log`` or ``normal`` without a finite box, or a box so wide that
            the constants overflow.
        """
        family = lp.family
        if getattr(lp, "scale_is_free", False):
            raise UnsupportedBound(
                f"The {family} likelihood has a free scale sigma: the log-likelihood is not "
                "Lipschitz in log(sigma) on an unbounded space, so TunaMH without control "
                "variates has no bound. Use TunaMH with control variates (the default), which "
                "bounds the Taylor remainders on a trust region, or fix sigma."
            )
        lipschitz = family_record(family).lipschitz
        if lipschitz == "global":
            box = None
        elif lipschitz == "box":
            if box is None:
                raise UnsupportedBound(
                    f"A {family} likelihood is not Lipschitz in the parameters on an unbounded "
                    "space, so no TunaMH bound exists without a bounded prior support. Give "
                    "every variable of the block a bounded prior without a transform (e.g. "
                    "pm.Uniform(..., default_transform=None)), or pass your own `c=` and "
                    "`metric=` valid on the region the chain can reach."
                )
            box = _check_box(box, lp.design.shape[1])
        else:
            raise UnsupportedBound(f"No Lipschitz bound is implemented for family {family!r}.")

        if family == "categorical_logit":
            coef = np.asarray(lp.coef_map, dtype=np.float64)
            if chol is not None:
                coef = coef @ np.asarray(chol, dtype=np.float64)
            op_norm = float(np.linalg.norm(coef, 2)) if coef.size else 0.0
            c = math.sqrt(2.0) * op_norm * _row_norms(lp.design, None)
        else:
            c = _slopes(lp, box) * _row_norms(lp.design, chol)
        if not np.all(np.isfinite(c)):
            raise UnsupportedBound(
                f"The {family} Lipschitz constants overflow on the prior box {box}: narrow the "
                "prior support, or pass your own `c=` and `metric=`."
            )
        metric = EuclideanMetric() if chol is None else WhitenedMetric(chol)
        where = "Euclidean" if chol is None else "whitened"
        return cls(c, metric, f"{family} linear predictor, {where} metric", box)


def chi_from_kappa(kappa: float) -> float:
    """TunaMH's ``chi`` that guarantees a spectral-gap ratio of at least ``kappa``.

    ``chi = 4 / ((1 - kappa) log(1 / kappa))`` (Eq. 2 of Zhang et al.): with it, the
    spectral gap of TunaMH is at least ``kappa`` times that of standard MH with the
    same proposal, at expected cost ``chi C^2 M^2 + C M`` per step. The guarantee is a
    worst case; in practice much smaller ``chi`` mixes almost as well (see
    :class:`~pymc_minibatch_mh.step_methods.tuna.TunaMH`).

    Parameters
    ----------
    kappa : float
        In (0, 1).

    Examples
    --------
    >>> round(chi_from_kappa(0.5), 2)
    11.54
    """
    kappa = float(kappa)
    if not 0.0 < kappa < 1.0:
        raise ValueError(f"kappa must lie in (0, 1); got {kappa}.")
    return 4.0 / ((1.0 - kappa) * math.log(1.0 / kappa))


def expected_batch_size(chi: float, total: float, metric_value: float) -> float:
    """``E[B] = chi C^2 M^2 + C M`` for energy constants summing to ``C``."""
    cm = total * metric_value
    return chi * cm * cm + cm


# ---------------------------------------------------------------------------- helpers


def _row_norms(design: np.ndarray, chol: np.ndarray | None) -> np.ndarray:
    """``||L^T x_i||_2`` (``||x_i||_2`` without ``L``) for every row, in chunks (as Dask
    tasks when the design's features are chunked data)."""
    design = design_rows(design)
    record_rows(design.shape[0], design.shape[0])
    if chol is not None:
        chol = np.asarray(chol, dtype=np.float64)
        if chol.shape != (design.shape[1], design.shape[1]):
            raise ValueError(
                f"chol has shape {chol.shape}, expected ({design.shape[1]}, {design.shape[1]})."
            )
    return design_map(design, _norms_of_rows, args=(chol,))


def _norms_of_rows(design, rows: slice, chol: np.ndarray | None) -> np.ndarray:
    """``||L^T x_i||_2`` of the rows ``rows`` of the design."""
    block = design[rows] if chol is None else design[rows] @ chol
    return np.sqrt(np.einsum("ij,ij->i", block, block))


def _validated_box(box) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` as read-only 1-D float arrays of one length, no NaN, ``lo <= hi``."""
    try:
        lo, hi = box
    except (TypeError, ValueError) as err:
        raise ValueError(f"box must be a pair (lo, hi) of arrays; got {box!r}.") from err
    lo = np.array(lo, dtype=np.float64).ravel()
    hi = np.array(hi, dtype=np.float64).ravel()
    if lo.shape != hi.shape or lo.size == 0:
        raise ValueError(
            f"box bounds lo and hi must have the same non-zero length; got {lo.size} and {hi.size}."
        )
    if np.isnan(lo).any() or np.isnan(hi).any() or not np.all(lo <= hi):
        raise ValueError(
            f"box bounds must not be NaN and need lo <= hi in every coordinate; got lo={lo}, "
            f"hi={hi}."
        )
    lo.setflags(write=False)
    hi.setflags(write=False)
    return lo, hi


def _check_box(box, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = (np.asarray(b, dtype=np.float64).ravel() for b in box)
    if lo.shape != (ndim,) or hi.shape != (ndim,):
        raise ValueError(f"box bounds must have shape ({ndim},); got {lo.shape} and {hi.shape}.")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo <= hi)):
        raise UnsupportedBound(
            f"The prior box must be finite with lo <= hi in every coordinate; got lo={lo}, "
            f"hi={hi}. Unbounded coordinates give no Lipschitz constant for this likelihood."
        )
    return lo, hi


def _eta_range(lp, box) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest linear predictor of every row over the box."""
    lo, hi = box
    design = design_rows(lp.design)
    offset = np.asarray(lp.offset, dtype=np.float64)
    record_rows(design.shape[0], design.shape[0])
    offset = np.broadcast_to(offset, (design.shape[0],))
    both = design_map(design, _eta_extremes, per_row=(offset,), args=(lo, hi))
    return both[:, 0], both[:, 1]


def _eta_extremes(design, rows: slice, offset, lo, hi) -> np.ndarray:
    """``(smallest, largest)`` linear predictor over the box ``[lo, hi]`` of the rows
    ``rows``, as two columns."""
    x = design[rows]
    pos, neg = np.maximum(x, 0.0), np.minimum(x, 0.0)
    return np.column_stack([offset + pos @ lo + neg @ hi, offset + pos @ hi + neg @ lo])


def _slopes(lp, box) -> np.ndarray:
    """``s_i >= |d/d eta log p(y_i | eta)|`` (over the box's eta range where needed)."""
    n = lp.design.shape[0]
    family = lp.family
    if family == "bernoulli_logit":
        return np.ones(n)
    if family == "binomial_logit":  # |y - n sigmoid(eta)| <= n
        return np.broadcast_to(np.asarray(lp.params["n"], dtype=np.float64), (n,)).copy()
    if family == "student_t":
        nu = np.asarray(lp.params["nu"], dtype=np.float64)
        sigma = np.asarray(lp.params["sigma"], dtype=np.float64)
        return np.broadcast_to((nu + 1.0) / (2.0 * np.sqrt(nu) * sigma), (n,)).copy()
    y = np.asarray(lp.observed, dtype=np.float64)
    eta_min, eta_max = _eta_range(lp, box)
    if family == "poisson_log":
        # d/d eta (y eta - exp(eta)) = y - exp(eta): monotone, extreme at the ends.
        with np.errstate(over="ignore"):
            return np.maximum(np.abs(np.exp(eta_max) - y), np.abs(np.exp(eta_min) - y))
    # normal: d/d eta of -(y - eta)^2 / (2 sigma^2) is (y - eta) / sigma^2.
    sigma = np.asarray(lp.params["sigma"], dtype=np.float64)
    return np.maximum(np.abs(eta_max - y), np.abs(eta_min - y)) / sigma**2
