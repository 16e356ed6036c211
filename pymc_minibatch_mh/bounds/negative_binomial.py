"""FlyMC lower bound for the negative binomial likelihood (log mean), fixed or free dispersion.

With mean ``mu_n = exp(eta_n)``, dispersion ``alpha = exp(t)`` and ``x_n = t - eta_n``,
the per-datum log-likelihood splits as

    log L_n = lgamma(y_n + alpha) - lgamma(alpha) - lgamma(y_n + 1)
              + y_n (eta_n - t) + (alpha + y_n) log sigmoid(x_n),

because ``log(alpha + mu_n) = t - log sigmoid(x_n)``. Only the last term needs a bound:
the Jaakkola–Jordan inequality ``log sigmoid(x) >= J(x)`` with

    J(x) = log sigmoid(xi) + (x - xi) / 2 - lambda(xi) (x^2 - xi^2),
    lambda(xi) = tanh(xi / 2) / (4 xi),

holds for every real ``x`` and equality holds at ``x = +-xi``. As ``alpha + y_n > 0``,

    log B_n = lgamma(y_n + alpha) - lgamma(alpha) - lgamma(y_n + 1)
              + y_n (eta_n - t) + (alpha + y_n) J_n(x_n)  <=  log L_n

everywhere (no trust region), with equality at the MAP when ``xi_n = |x_n(MAP)|``. Both
``eta_n`` and ``t`` are affine in the sampled vector ``q``, so ``J_n(x_n)`` is a quadratic
in ``q`` and the sum over all data collapses:

    sum_n log B_n(q) = sum_k c_k lgamma(k + alpha) - N lgamma(alpha) - sum_n lgamma(y_n + 1)
                       + sum_n y_n eta_n - t sum_n y_n
                       + alpha Q_1(q) + Q_y(q),

with ``c_k`` the number of data equal to ``k`` (the dispersion-only part is exact, from a
histogram of the counts), and ``Q_1 = sum_n J_n(x_n)``, ``Q_y = sum_n y_n J_n(x_n)`` two
collapsed quadratics in ``q`` (O(D^2) each). With a fixed dispersion (``alpha_n`` may
differ by datum) the first line is a constant and one quadratic ``sum_n (alpha_n + y_n)
J_n(x_n)`` remains. Evaluating the sum costs O(D^2 + K) for K distinct counts.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1 (collapsible bounds).
.. [2] Jaakkola, T. S., Jordan, M. I. "Bayesian parameter estimation via
   variational methods", Statistics and Computing 10, 2000.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import digamma, gammaln

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    CollapsedQuadratic,
    OverDesignRows,
    as_design,
    per_datum,
)
from pymc_minibatch_mh.bounds.jaakkola_jordan import UNTUNED_XI, jj_lambda, log_sigmoid
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.data.chunk_pass import design_map, design_map_sum
from pymc_minibatch_mh.data.pass_tally import record_rows

#: Above this log dispersion ``exp`` overflows; the collapsed bound is then -inf.
_LOG_ALPHA_MAX = 700.0

if TYPE_CHECKING:  # pragma: no cover - typing only (kept out of the import path)
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood


@dataclass(frozen=True, eq=False)
class NegativeBinomialBound(OverDesignRows):
    """Per-datum Jaakkola–Jordan bound of the negative binomial likelihood, collapsed.

    Build it with :func:`negative_binomial_bound`. Untempered, like every bound here;
    global (``region`` is None).

    Attributes
    ----------
    design : ndarray, shape (N, D)
        ``eta = design @ q + offset``.
    offset, observed : ndarray, shape (N,)
    scale_row : ndarray, shape (D,) or None
        ``t = log alpha = scale_row @ q + scale_offset`` when the dispersion is free; None
        when it is fixed (then ``fixed_log_alpha`` holds ``log alpha_n``).
    scale_offset : float
    fixed_log_alpha : ndarray, shape (N,) or None
    jj_constant, jj_lambda : ndarray, shape (N,)
        ``J_n(x) = jj_constant[n] + x / 2 - jj_lambda[n] x^2``.
    counts, count_values : ndarray
        Histogram of the observations (free dispersion).
    lgamma_y1 : float
        ``sum_n lgamma(y_n + 1)``.
    fixed_part : float
        Fixed dispersion: ``sum_n lgamma(y_n + alpha_n) - lgamma(alpha_n) - y_n log alpha_n``.
    quad_one, quad_weighted : CollapsedQuadratic
        Free dispersion: ``Q_1`` and ``Q_y``; fixed: ``quad_weighted`` is
        ``sum_n (alpha_n + y_n) J_n`` and ``quad_one`` is None.
    y_design : ndarray, shape (D,)
        ``sum_n y_n design[n]``.
    y_offset, y_total : float
        ``sum_n y_n offset[n]`` and ``sum_n y_n``.
    tuned : bool
        Whether ``xi_n`` was tuned at the collapsed sums' centre (the MAP) or is 1.5.
    unbounded : ndarray of bool, shape (N,), or None
        Rows without a bound (``log B_n = -inf``), left out of every sum above.
    """

    design: np.ndarray
    offset: np.ndarray
    observed: np.ndarray
    scale_row: np.ndarray | None
    scale_offset: float
    fixed_log_alpha: np.ndarray | None
    jj_constant: np.ndarray
    jj_lambda: np.ndarray
    count_values: np.ndarray
    counts: np.ndarray
    lgamma_y1: float
    fixed_part: float
    quad_one: CollapsedQuadratic | None
    quad_weighted: CollapsedQuadratic
    y_design: np.ndarray
    y_offset: float
    y_total: float
    family: str = "negative_binomial"
    region: None = None
    tuned: bool = True
    unbounded: np.ndarray | None = None

    # ------------------------------------------------------------ per datum
    def _channels(self, q: np.ndarray, idx):
        q = np.asarray(q, dtype=np.float64)
        sel = slice(None) if idx is None else idx
        rows = self.design if idx is None else self.gathered_rows(idx)
        eta = rows @ q + self.offset[sel]
        if self.scale_row is None:
            t = self.fixed_log_alpha[sel]
        else:
            t = np.full(eta.shape, float(self.scale_row @ q) + self.scale_offset)
        return sel, eta, t

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-datum ``log B_n(q)`` for rows ``idx`` (all rows if None); O(len(idx) D)."""
        sel, eta, t = self._channels(q, idx)
        y = self.observed[sel]
        alpha = np.exp(t)
        x = t - eta
        jj = self.jj_constant[sel] + 0.5 * x - self.jj_lambda[sel] * x * x
        with np.errstate(over="ignore", invalid="ignore"):
            value = (
                gammaln(y + alpha)
                - gammaln(alpha)
                - gammaln(y + 1.0)
                + y * (eta - t)
                + (alpha + y) * jj
            )
        value = np.where(np.isnan(value), -np.inf, value)
        if self.unbounded is not None:
            value = np.where(self.unbounded[sel], -np.inf, value)
        return value

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log B_{idx[j]}(q)``, shape ``(D,)``."""
        sel, eta, t = self._channels(q, idx)
        y = self.observed[sel]
        alpha = np.exp(t)
        x = t - eta
        lam = self.jj_lambda[sel]
        jj = self.jj_constant[sel] + 0.5 * x - lam * x * x
        jj_slope = 0.5 - 2.0 * lam * x
        d_eta = y - (alpha + y) * jj_slope
        if self.unbounded is not None:  # rows without a bound add nothing
            weights = np.where(self.unbounded[sel], 0.0, weights)
        grad = self.gathered_rows(idx).T @ (weights * d_eta)
        if self.scale_row is not None:
            d_t = alpha * (digamma(y + alpha) - digamma(alpha) + jj) - y + (alpha + y) * jj_slope
            grad = grad + float(weights @ d_t) * self.scale_row
        return grad

    @property
    def _n_kept(self) -> float:
        """Rows with a bound (those the count histogram holds)."""
        return float(np.sum(self.counts))

    def without_bounds_on(self, rows: np.ndarray) -> NegativeBinomialBound:
        """The same bound with no bound on ``rows`` (a boolean mask or indices) as well:
        the sums are collapsed again without them (one pass)."""
        return _collapsed(
            self.design,
            self.offset,
            self.observed,
            self.scale_row,
            self.scale_offset,
            self.fixed_log_alpha,
            self.quad_weighted.centre,
            tuned=self.tuned,
            unbounded=self._unbounded_with(rows),
        )

    def row_spreads(self, region) -> np.ndarray:
        """Each row's ``(alpha + y_n) lambda_n reach_n^2`` on ``region`` (``alpha`` at the
        centre, ``reach_n`` how far ``x_n = t - eta_n`` moves there): the size of its
        quadratic term where the bound is loosest."""
        centre = self.quad_weighted.centre
        if self.scale_row is None:
            alpha = np.exp(self.fixed_log_alpha)
            direction = np.zeros(centre.size)
        else:
            alpha = math.exp(float(self.scale_row @ centre) + self.scale_offset)
            direction = self.scale_row
        reach = design_map(self.design, whitened_reach, args=(direction, region.chol))
        record_rows(self.n_data, self.n_data)
        reach *= region.row_radii()
        return (alpha + self.observed) * self.jj_lambda * reach**2

    # ------------------------------------------------------------ collapsed sum
    def log_bound_sum(self, q: np.ndarray) -> float:
        """``sum_n log B_n(q)`` over all N data in O(D^2 + K)."""
        q = np.asarray(q, dtype=np.float64)
        linear = float(self.y_design @ q) + self.y_offset - self.lgamma_y1
        if self.scale_row is None:
            return self.fixed_part + linear + self.quad_weighted(q)
        t = float(self.scale_row @ q) + self.scale_offset
        if t > _LOG_ALPHA_MAX:  # alpha overflows: the bound is -inf there (still valid)
            return -math.inf
        alpha = math.exp(t)
        exact = float(self.counts @ gammaln(self.count_values + alpha)) - self._n_kept * float(
            gammaln(alpha)
        )
        total = exact + linear - t * self.y_total + alpha * self.quad_one(q) + self.quad_weighted(q)
        return total if math.isfinite(total) else -math.inf

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`log_bound_sum`, shape ``(D,)``."""
        q = np.asarray(q, dtype=np.float64)
        grad = self.y_design + self.quad_weighted.gradient(q)
        if self.scale_row is None:
            return grad
        t = float(self.scale_row @ q) + self.scale_offset
        alpha = math.exp(min(t, _LOG_ALPHA_MAX))
        d_exact = alpha * (
            float(self.counts @ digamma(self.count_values + alpha))
            - self._n_kept * float(digamma(alpha))
        )
        d_t = d_exact - self.y_total + alpha * self.quad_one(q)
        # Where alpha overflows the bound is -inf and its gradient has no meaning.
        with np.errstate(over="ignore", invalid="ignore"):
            return grad + d_t * self.scale_row + alpha * self.quad_one.gradient(q)


def negative_binomial_bound(
    lp: LinearPredictorLikelihood,
    q_map: np.ndarray | None,
    q_init: np.ndarray,
    *,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> NegativeBinomialBound:
    """The bound of the module docstring for a recognised negative binomial likelihood.

    Parameters
    ----------
    lp : LinearPredictorLikelihood
        ``family == "negative_binomial"``, with a free (``lp.scale_row``) or fixed
        (``lp.params["alpha"]``) dispersion.
    q_map : ndarray, shape (D,) or None
        MAP-tuned bound (``xi_n = |x_n(q_map)|``, tight at the MAP); None: untuned
        (``xi_n = 1.5``).
    q_init : ndarray, shape (D,)
        Expansion point of the collapsed sums when ``q_map`` is None.
    chunk_entries : int
        Memory knob of the O(N D^2) setup pass.
    """
    if lp.family != "negative_binomial":
        raise UnsupportedBound(f"negative_binomial_bound needs that family; got {lp.family!r}.")
    design = as_design(lp.design)
    n_data = design.shape[0]
    offset = per_datum(lp.offset, n_data, "offset")
    y = per_datum(lp.observed, n_data, "observed")
    if np.any(y < 0) or np.any(y != np.round(y)):
        raise UnsupportedBound("Negative binomial observations must be non-negative integers.")
    centre = np.asarray(q_map if q_map is not None else q_init, dtype=np.float64)
    if lp.scale_row is not None:
        scale_row = np.asarray(lp.scale_row, dtype=np.float64)
        scale_offset = float(lp.scale_offset)
        fixed_log_alpha = None
    else:
        scale_row, scale_offset = None, 0.0
        alpha_n = per_datum(lp.params["alpha"], n_data, "alpha")
        if not np.all(np.isfinite(alpha_n) & (alpha_n > 0)):
            raise UnsupportedBound("The negative binomial dispersion alpha must be positive.")
        fixed_log_alpha = np.log(alpha_n)
    bound = _collapsed(
        design,
        offset,
        y,
        scale_row,
        scale_offset,
        fixed_log_alpha,
        centre,
        tuned=q_map is not None,
        chunk_entries=chunk_entries,
    )
    if not math.isfinite(bound.log_bound_sum(centre)):
        raise UnsupportedBound("The negative binomial bound is not finite at the MAP.")
    return bound


def whitened_reach(design, rows: slice, direction, chol) -> np.ndarray:
    """``||L^T (direction - d_n)||`` for the rows ``rows`` of the design."""
    block = (direction[None, :] - np.asarray(design[rows], dtype=np.float64)) @ chol
    return np.sqrt(np.einsum("ij,ij->i", block, block))


def _nb_rows_and_sums(
    design, rows: slice, offset, y, keep, log_alpha, direction, centre, t_centre, free, tuned
) -> tuple[tuple, tuple]:
    """One block of :func:`_collapsed`'s pass: the rows' JJ constants and curvatures, and
    their parts of ``sum y_n d_n``, of the fixed-alpha constant and of each quadratic's
    value, gradient and Hessian (``Q_1`` and ``Q_y`` with a free alpha, one quadratic with
    weights ``alpha_n + y_n`` with a fixed one)."""
    d = np.asarray(design[rows], dtype=np.float64)
    v = direction[None, :] - d  # x_n = v_n @ q + c_n
    t_rows = t_centre if free else log_alpha
    x_centre = t_rows - (d @ centre + offset)
    const, lam, value, slope = jj_anchor(x_centre, tuned)
    sums = [d.T @ (keep * y)]
    if free:
        sums.append(0.0)
        weight_sets = (keep, keep * y)
    else:
        alpha = np.exp(log_alpha)
        sums.append(float(keep @ (gammaln(y + alpha) - gammaln(alpha)) - (keep * y) @ log_alpha))
        weight_sets = (keep * (alpha + y),)
    for w in weight_sets:
        sums += quadratic_sums_in_x(v, w, value, slope, lam)
    return (const, lam), tuple(sums)


def jj_anchor(x_centre: np.ndarray, tuned: bool) -> tuple:
    """``(constant, lambda, J(x_centre), J'(x_centre))`` of each row's Jaakkola-Jordan
    bound of ``log sigmoid``, touching at ``xi = |x_centre|`` (tuned) or ``xi = 1.5``."""
    xi = np.abs(x_centre) if tuned else np.full(x_centre.shape, UNTUNED_XI)
    lam = jj_lambda(xi)
    const = log_sigmoid(xi) - 0.5 * xi + lam * xi * xi
    value = const + 0.5 * x_centre - lam * x_centre * x_centre
    slope = 0.5 - 2.0 * lam * x_centre
    return const, lam, value, slope


def quadratic_sums_in_x(v: np.ndarray, w: np.ndarray, value, slope, lam) -> list:
    """The rows' part of ``sum_n w_n J_n(x_n)`` collapsed at the centre, with
    ``x_n = v_n @ q + const``: its value, gradient and Hessian in ``q``."""
    return [float(w @ value), v.T @ (w * slope), -(v.T @ (v * (2.0 * w * lam)[:, None]))]


def _collapsed(
    design,
    offset: np.ndarray,
    y: np.ndarray,
    scale_row: np.ndarray | None,
    scale_offset: float,
    fixed_log_alpha: np.ndarray | None,
    centre: np.ndarray,
    *,
    tuned: bool,
    unbounded: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> NegativeBinomialBound:
    """The bound's per-row coefficients and its sums over the rows not ``unbounded``
    (one pass)."""
    n_data, ndim = design.shape
    free = scale_row is not None
    keep = np.ones(n_data) if unbounded is None else (~unbounded).astype(np.float64)
    direction = np.zeros(ndim) if scale_row is None else scale_row
    t_centre = float(direction @ centre) + scale_offset

    # Free: Q_1 (weights 1) and Q_y (weights y); fixed: one quadratic, weights alpha_n + y_n.
    names = ("one", "weighted") if free else ("weighted",)
    log_alpha = np.zeros(n_data) if free else fixed_log_alpha
    # One pass (Dask tasks for a design over chunked data): the rows' JJ coefficients and
    # the sums of the quadratics.
    (jj_const, lam_all), sums = design_map_sum(
        design,
        _nb_rows_and_sums,
        per_row=(offset, y, keep, log_alpha),
        args=(direction, centre, t_centre, free, tuned),
        block_rows=chunk_entries // max(1, ndim),
    )
    record_rows(n_data, n_data)
    y_design, fixed_part = sums[0], float(sums[1])
    stats = {name: list(sums[2 + 3 * i : 5 + 3 * i]) for i, name in enumerate(names)}

    def quadratic(name: str) -> CollapsedQuadratic:
        value, grad, hess = stats[name]
        return CollapsedQuadratic(centre.copy(), float(value), grad, 0.5 * (hess + hess.T))

    kept = keep > 0
    values, counts = np.unique(y[kept], return_counts=True)
    return NegativeBinomialBound(
        design=design,
        offset=offset,
        observed=y,
        scale_row=scale_row,
        scale_offset=scale_offset,
        fixed_log_alpha=fixed_log_alpha,
        jj_constant=jj_const,
        jj_lambda=lam_all,
        count_values=values.astype(np.float64),
        counts=counts.astype(np.float64),
        lgamma_y1=float(np.sum(gammaln(y[kept] + 1.0))),
        fixed_part=fixed_part,
        quad_one=quadratic("one") if free else None,
        quad_weighted=quadratic("weighted"),
        y_design=y_design,
        y_offset=float(y[kept] @ offset[kept]),
        y_total=float(np.sum(y[kept])),
        tuned=tuned,
        unbounded=None if unbounded is None or not unbounded.any() else unbounded,
    )
