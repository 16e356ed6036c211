"""Global FlyMC lower bounds for the negative binomial likelihood (log mean), alone,
zero-inflated or with a hurdle; fixed or free dispersion and psi.

Notation: ``eta_n`` the linear predictor (``mu_n = exp(eta_n)``), ``a = log alpha`` the
log dispersion, ``t = logit psi``, ``x_n = a - eta_n``, and ``u_n = alpha log sigmoid(x_n)``
the log probability of a zero under the negative binomial. As
``log(alpha + mu_n) = a - log sigmoid(x_n)``, the negative binomial's log-likelihood is::

    NB_n = lgamma(y_n + alpha) - lgamma(alpha) - lgamma(y_n + 1) + y_n (eta_n - a)
           + (alpha + y_n) log sigmoid(x_n),

and a row's log-likelihood is::

    negative binomial:          NB_n
    hurdle,         y = 0:      log sigmoid(-t)
                    y > 0:      log sigmoid(t) + NB_n + h(u_n),      h(u) = -log(1 - e^u)
    zero-inflated,  y = 0:      log sigmoid(-t) + softplus(t + u_n)
                    y > 0:      log sigmoid(t) + NB_n

(``log(1 - psi + psi e^u) = log sigmoid(-t) + softplus(t + u)``). Three inequalities
give a lower bound that holds everywhere:

1. Jaakkola and Jordan [2]_: ``log sigmoid(x) >= J_n(x) = c_n + x / 2 - lambda_n x^2``, a
   quadratic in ``x`` touching at ``x = +-xi_n`` (``lambda_n = tanh(xi_n / 2) / (4 xi_n)``);
   so ``alpha J_n(x_n) <= u_n`` as ``alpha > 0``.
2. ``h`` and ``softplus`` are increasing and convex, so each is at least its tangent at
   the anchor, evaluated at the smaller argument:
   ``h(u) >= h(u0) + h'(u0) (alpha J - u0)`` with ``h'(u0) = 1 / expm1(-u0)``, and
   ``softplus(t + u) >= softplus(s0) + sigmoid(s0) (t + alpha J - s0)``, ``s0 = t0 + u0``.
3. The terms in ``alpha`` and ``t`` alone (``lgamma``, ``log sigmoid(+-t)``) are kept
   exactly: they are shared by all rows and sum through a histogram of the counts.

Every row's bound then has the one form::

    log B_n = E_n(a, t) + y_n (eta_n - a) + (alpha w_n + y_n) J_n(x_n) + omega_n t + c_n

with ``E_n`` the exact part, and the rows' weights ``w_n`` (1 for a count, and for every
row of a negative binomial alone; hurdle: ``1 + h'(u0)`` for a count, 0 for a zero;
zero-inflated: ``sigmoid(s0)`` for a zero), ``omega_n`` (``sigmoid(s0)`` for a
zero-inflated zero, else 0) and constants ``c_n``. A hurdle's zero is summed exactly
(``log B_n = log L_n``: never bright). With the anchors at the MAP (``xi_n = |x_n|``,
``u0``, ``s0`` there) the bound touches the likelihood there in value and gradient. As
``J_n`` is a quadratic in ``q`` (``eta_n`` and ``a`` are affine in ``q``), the sum over
the rows collapses, as FlyMC needs [1]_::

    sum_n log B_n = sum_k c_k lgamma(k + alpha) - N_+ lgamma(alpha) - sum_n lgamma(y_n + 1)
                    + N_+ log sigmoid(t) + N_0 log sigmoid(-t) + sum_n y_n eta_n - a Y
                    + alpha Q_w(q) + Q_y(q) + t sum_n omega_n + sum_n c_n,

``Q_w = sum_n w_n J_n(x_n)`` and ``Q_y = sum_n y_n J_n(x_n)`` two collapsed quadratics
(O(D^2) each), ``c_k`` the number of counts equal to ``k``, ``N_+`` and ``N_0`` the numbers
of counts and zeros (the terms in ``t`` only with zeros modelled apart). A fixed
dispersion or psi (one value per row) turns the terms in them into constants and one
quadratic ``sum_n (alpha_n w_n + y_n) J_n``. Evaluating the sum costs O(D^2 + K) for K
distinct counts. No trust region: FlyMC is exact for the whole posterior.

Why not each row's Taylor expansion in ``(eta, a, t)`` (what the zero-inflated and hurdle
families used before): a row's curvature in ``a`` is large and of either sign, while the
posterior's, their sum, nearly cancels; a bound has to follow each row's worst curvature,
so its product was 98 (hurdle) to 4,300 (zero-inflated, quasi-separated) times more curved
than the posterior along ``a``. Summing the ``a``-only terms exactly keeps the
cancellation.

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
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import digamma, expit, gammaln, log_expit

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
from pymc_minibatch_mh.families.registry import family_record, names_where

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood

#: Above this log dispersion ``exp`` overflows; the collapsed bound is then -inf.
_LOG_ALPHA_MAX = 700.0


@dataclass(frozen=True)
class HessianAtCentre:
    """The collapsed bound's Hessian in ``q`` at its centre (what
    :func:`~pymc_minibatch_mh.bounds.looseness.collapsed_looseness` reads)."""

    hessian: np.ndarray


@dataclass(frozen=True, eq=False)
class NegativeBinomialBound(OverDesignRows):
    """Global bound of a negative binomial likelihood, alone, zero-inflated or with a
    hurdle (module docstring), collapsed. Build it with :func:`negative_binomial_bound`.

    Attributes
    ----------
    family : str
        A family with ``negative_binomial_counts`` in its record.
    design : ndarray, shape (N, D)
        ``eta = design @ q + offset``.
    offset, observed : ndarray, shape (N,)
    scale_row, odds_row : ndarray, shape (D,) or None
        ``a = scale_row @ q + scale_offset`` and ``t = odds_row @ q + odds_offset`` when
        the dispersion / psi is free; None when fixed (``fixed_log_alpha``,
        ``fixed_log_odds``: one value per row) or, for psi, absent (a negative binomial
        alone: ``fixed_log_odds`` None too).
    scale_offset, odds_offset : float
    fixed_log_alpha, fixed_log_odds : ndarray, shape (N,) or None
    jj_constant, jj_lambda : ndarray, shape (N,)
        ``J_n(x) = jj_constant[n] + x / 2 - jj_lambda[n] x^2``.
    weight, odds_weight, row_constant : ndarray, shape (N,)
        ``w_n``, ``omega_n`` and ``c_n``.
    count_values, counts : ndarray
        Histogram of the positive counts (free dispersion).
    n_positive, n_zero : float
        Rows with a bound that hold a count / a zero.
    lgamma_y1 : float
    fixed_part : float
        The terms in a fixed dispersion and a fixed psi, summed.
    quad_one, quad_weighted : CollapsedQuadratic
        Free dispersion: ``Q_w`` and ``Q_y``; fixed: ``quad_weighted`` is
        ``sum_n (alpha_n w_n + y_n) J_n`` and ``quad_one`` is None.
    y_design : ndarray, shape (D,)
    y_offset, y_total, odds_weight_total, constant_total : float
    tuned : bool
        Whether ``xi_n`` was set at the collapsed sums' centre (the MAP) or is 1.5 (the
        tangents are taken at the centre either way).
    unbounded : ndarray of bool, shape (N,), or None
        Rows without a bound (``log B_n = -inf``), left out of every sum.
    """

    family: str
    design: np.ndarray
    offset: np.ndarray
    observed: np.ndarray
    scale_row: np.ndarray | None
    scale_offset: float
    odds_row: np.ndarray | None
    odds_offset: float
    fixed_log_alpha: np.ndarray | None
    fixed_log_odds: np.ndarray | None
    jj_constant: np.ndarray
    jj_lambda: np.ndarray
    weight: np.ndarray
    odds_weight: np.ndarray
    row_constant: np.ndarray
    count_values: np.ndarray
    counts: np.ndarray
    n_positive: float
    n_zero: float
    lgamma_y1: float
    fixed_part: float
    quad_one: CollapsedQuadratic | None
    quad_weighted: CollapsedQuadratic
    y_design: np.ndarray
    y_offset: float
    y_total: float
    odds_weight_total: float
    constant_total: float
    region: None = None
    tuned: bool = True
    unbounded: np.ndarray | None = None

    # ------------------------------------------------------------ per datum
    def _channels(self, q: np.ndarray, idx):
        q = np.asarray(q, dtype=np.float64)
        sel = slice(None) if idx is None else idx
        rows = self.design if idx is None else self.gathered_rows(idx)
        eta = rows @ q + self.offset[sel]
        a = _shared(self.scale_row, self.scale_offset, self.fixed_log_alpha, q, sel, eta)
        if not family_record(self.family).odds_channel:
            return sel, eta, a, np.zeros(eta.shape)
        t = _shared(self.odds_row, self.odds_offset, self.fixed_log_odds, q, sel, eta)
        return sel, eta, a, t

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-datum ``log B_n(q)`` for rows ``idx`` (all rows if None); O(len(idx) D)."""
        sel, eta, a, t = self._channels(q, idx)
        y = self.observed[sel]
        with np.errstate(over="ignore", invalid="ignore"):
            alpha = np.exp(a)
            x = a - eta
            jj = self.jj_constant[sel] + 0.5 * x - self.jj_lambda[sel] * x * x
            exact = np.where(y > 0, gammaln(y + alpha) - gammaln(alpha), 0.0) - gammaln(y + 1.0)
            if family_record(self.family).odds_channel:
                exact = exact + np.where(y > 0, log_expit(t), log_expit(-t))
            value = (
                exact
                + y * (eta - a)
                + (alpha * self.weight[sel] + y) * jj
                + self.odds_weight[sel] * t
                + self.row_constant[sel]
            )
        value = np.where(np.isnan(value), -np.inf, value)
        if self.unbounded is not None:
            value = np.where(self.unbounded[sel], -np.inf, value)
        return value

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log B_{idx[j]}(q)``, shape ``(D,)``."""
        sel, eta, a, t = self._channels(q, idx)
        y = self.observed[sel]
        alpha = np.exp(a)
        x = a - eta
        lam = self.jj_lambda[sel]
        w = self.weight[sel]
        jj = self.jj_constant[sel] + 0.5 * x - lam * x * x
        jj_slope = 0.5 - 2.0 * lam * x
        d_eta = y - (alpha * w + y) * jj_slope
        if self.unbounded is not None:  # rows without a bound add nothing
            weights = np.where(self.unbounded[sel], 0.0, weights)
        grad = self.gathered_rows(idx).T @ (weights * d_eta)
        if self.scale_row is not None:
            positive = y > 0
            d_lgamma = np.zeros(y.shape)
            d_lgamma[positive] = digamma(y[positive] + alpha[positive]) - digamma(alpha[positive])
            d_a = alpha * (d_lgamma + w * jj) - y + (alpha * w + y) * jj_slope
            grad = grad + float(weights @ d_a) * self.scale_row
        if self.odds_row is not None:
            d_t = np.where(y > 0, expit(-t), -expit(t)) + self.odds_weight[sel]
            grad = grad + float(weights @ d_t) * self.odds_row
        return grad

    def without_bounds_on(self, rows: np.ndarray) -> NegativeBinomialBound:
        """The same bound with no bound on ``rows`` (a boolean mask or indices) as well:
        the sums are collapsed again without them (one pass)."""
        return _collapsed(
            self.family,
            self.design,
            self.offset,
            self.observed,
            (self.scale_row, self.scale_offset, self.fixed_log_alpha),
            (self.odds_row, self.odds_offset, self.fixed_log_odds),
            self.quad_weighted.centre,
            tuned=self.tuned,
            unbounded=self._unbounded_with(rows),
        )

    def row_spreads(self, region) -> np.ndarray:
        """Each row's ``(alpha w_n + y_n) lambda_n reach_n^2`` on ``region`` (``alpha`` at
        the centre, ``reach_n`` how far ``x_n = a - eta_n`` moves there): the size of its
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
        return (alpha * self.weight + self.observed) * self.jj_lambda * reach**2

    # ------------------------------------------------------------ collapsed sum
    def log_bound_sum(self, q: np.ndarray) -> float:
        """``sum_n log B_n(q)`` over all N data in O(D^2 + K)."""
        q = np.asarray(q, dtype=np.float64)
        total = (
            self.fixed_part
            + float(self.y_design @ q)
            + self.y_offset
            - self.lgamma_y1
            + self.constant_total
            + self.quad_weighted(q)
        )
        if self.odds_row is not None:
            t = float(self.odds_row @ q) + self.odds_offset
            total += (
                self.n_positive * _log_sigmoid(t)
                + self.n_zero * _log_sigmoid(-t)
                + self.odds_weight_total * t
            )
        if self.scale_row is not None:
            a = float(self.scale_row @ q) + self.scale_offset
            if a > _LOG_ALPHA_MAX:  # alpha overflows: the bound is -inf there (still valid)
                return -math.inf
            alpha = math.exp(a)
            total += (
                float(self.counts @ gammaln(self.count_values + alpha))
                - self.n_positive * float(gammaln(alpha))
                - a * self.y_total
                + alpha * self.quad_one(q)
            )
        return total if math.isfinite(total) else -math.inf

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`log_bound_sum`, shape ``(D,)``."""
        q = np.asarray(q, dtype=np.float64)
        grad = self.y_design + self.quad_weighted.gradient(q)
        if self.odds_row is not None:
            t = float(self.odds_row @ q) + self.odds_offset
            d_t = self.n_positive * expit(-t) - self.n_zero * expit(t) + self.odds_weight_total
            grad = grad + d_t * self.odds_row
        if self.scale_row is not None:
            a = float(self.scale_row @ q) + self.scale_offset
            alpha = math.exp(min(a, _LOG_ALPHA_MAX))
            d_exact = alpha * (
                float(self.counts @ digamma(self.count_values + alpha))
                - self.n_positive * float(digamma(alpha))
            )
            d_a = d_exact - self.y_total + alpha * self.quad_one(q)
            # Where alpha overflows the bound is -inf and its gradient has no meaning.
            with np.errstate(over="ignore", invalid="ignore"):
                grad = grad + d_a * self.scale_row + alpha * self.quad_one.gradient(q)
        return grad

    @cached_property
    def collapsed(self) -> HessianAtCentre:
        """The collapsed sum's Hessian at the centre, by central differences of its
        gradient (D + D gradient evaluations of O(D^2) each)."""
        centre = self.quad_weighted.centre
        ndim = centre.size
        step = 1e-5 * np.maximum(1.0, np.abs(centre))
        hessian = np.empty((ndim, ndim))
        for i in range(ndim):
            up, down = centre.copy(), centre.copy()
            up[i] += step[i]
            down[i] -= step[i]
            hessian[:, i] = (self.log_bound_sum_grad(up) - self.log_bound_sum_grad(down)) / (
                2.0 * step[i]
            )
        return HessianAtCentre(0.5 * (hessian + hessian.T))


def negative_binomial_bound(
    lp: LinearPredictorLikelihood,
    q_map: np.ndarray | None,
    q_init: np.ndarray,
    *,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> NegativeBinomialBound:
    """The bound of the module docstring for a recognised negative binomial likelihood,
    alone, zero-inflated or with a hurdle.

    Parameters
    ----------
    lp : LinearPredictorLikelihood
        A family with ``negative_binomial_counts`` in its record; dispersion free
        (``lp.scale_row``) or fixed (``lp.params["alpha"]``, one value or one per row);
        for the families with zeros apart, psi free (``lp.odds_row``) or fixed
        (``lp.params["odds"]``, the odds ``psi / (1 - psi)``).
    q_map : ndarray, shape (D,) or None
        Anchors at the MAP (the bound touches the likelihood there); None: tangents at
        ``q_init`` and ``xi_n = 1.5``.
    q_init : ndarray, shape (D,)
        Centre when ``q_map`` is None.
    chunk_entries : int
        Memory knob of the O(N D^2) setup pass.

    Raises
    ------
    UnsupportedBound
        Another family, observations that are not counts, a fixed parameter out of its
        range, or a bound that is not finite at the centre.
    """
    if not family_record(lp.family).negative_binomial_counts:
        served = names_where(negative_binomial_counts=True)
        raise UnsupportedBound(f"negative_binomial_bound serves {served}; got {lp.family!r}.")
    design = as_design(lp.design)
    n_data = design.shape[0]
    offset = per_datum(lp.offset, n_data, "offset")
    y = per_datum(lp.observed, n_data, "observed")
    if np.any(y < 0) or np.any(y != np.round(y)):
        raise UnsupportedBound("Negative binomial observations must be non-negative integers.")
    centre = np.asarray(q_map if q_map is not None else q_init, dtype=np.float64)
    scale = _channel(
        lp.scale_row,
        getattr(lp, "scale_offset", 0.0),
        lp.params.get("alpha"),
        n_data,
        "negative binomial dispersion alpha",
    )
    odds = (None, 0.0, None)  # a negative binomial alone: no zeros apart
    if family_record(lp.family).odds_channel:
        odds = _channel(
            lp.odds_row,
            getattr(lp, "odds_offset", 0.0),
            lp.params.get("odds"),
            n_data,
            "odds psi / (1 - psi)",
        )
    bound = _collapsed(
        lp.family,
        design,
        offset,
        y,
        scale,
        odds,
        centre,
        tuned=q_map is not None,
        chunk_entries=chunk_entries,
    )
    if not math.isfinite(bound.log_bound_sum(centre)):
        raise UnsupportedBound(
            f"The {lp.family} bound is not finite at the MAP. Use TunaMH() or MinibatchBarker()."
        )
    return bound


def _channel(row, offset, fixed, n_data: int, name: str) -> tuple:
    """``(row, offset, fixed_log)`` of a shared parameter: free (``row`` given) or fixed
    (``fixed`` positive, one value or one per row, stored as its log)."""
    if row is not None:
        return np.asarray(row, dtype=np.float64), float(offset), None
    values = per_datum(fixed, n_data, name)
    if not np.all(np.isfinite(values) & (values > 0)):
        raise UnsupportedBound(f"The fixed {name} must be positive and finite.")
    return None, 0.0, np.log(values)


def _shared(row, offset: float, fixed_log, q, sel, eta) -> np.ndarray:
    if row is None:
        return fixed_log[sel]
    return np.full(eta.shape, float(row @ q) + offset)


def _log_sigmoid(t: float) -> float:
    return float(log_expit(t))


def _anchor_weights(family: str, y, u0, t0) -> tuple:
    """Each row's ``(w_n, omega_n, c_n)`` from the tangents at ``u0`` (the negative
    binomial's log probability of zero at the centre) and ``t0`` (module docstring)."""
    positive = y > 0
    if not family_record(family).odds_channel:  # the negative binomial alone: weight 1 everywhere
        return np.ones(y.shape), np.zeros(y.shape), np.zeros(y.shape)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if family == "hurdle_nb_log":
            slope = 1.0 / np.expm1(-u0)  # h'(u0)
            h0 = -np.log(-np.expm1(u0))
            weight = np.where(positive, 1.0 + slope, 0.0)
            constant = np.where(positive, h0 - slope * u0, 0.0)
            return weight, np.zeros(y.shape), constant
        s0 = t0 + u0
        sig = expit(s0)
        weight = np.where(positive, 1.0, sig)
        odds_weight = np.where(positive, 0.0, sig)
        constant = np.where(positive, 0.0, np.logaddexp(0.0, s0) - sig * s0)
        return weight, odds_weight, constant


def _rows_and_sums(
    design,
    rows: slice,
    offset,
    y,
    keep,
    log_alpha,
    log_odds,
    directions,
    centre,
    shared,
    family,
    tuned,
) -> tuple[tuple, tuple]:
    """One block of :func:`_collapsed`'s pass: the rows' coefficients and their parts of
    the sums (``sum y_n d_n``, the fixed parameters' constant, ``sum c_n``,
    ``sum omega_n`` and each quadratic's value, gradient and Hessian)."""
    scale_direction, free_scale, free_odds = directions
    a_centre, t_centre = shared
    d = np.asarray(design[rows], dtype=np.float64)
    v = scale_direction[None, :] - d  # x_n = v_n @ q + const
    a_rows = a_centre if free_scale else log_alpha
    t_rows = t_centre if free_odds else log_odds
    x_centre = a_rows - (d @ centre + offset)
    const, lam, value, slope = jj_anchor(x_centre, tuned)
    alpha = np.exp(a_rows)
    u0 = alpha * log_expit(x_centre)
    weight, odds_weight, row_constant = _anchor_weights(family, y, u0, t_rows)
    finite = np.isfinite(weight) & np.isfinite(row_constant) & np.isfinite(odds_weight)
    keep = keep * finite
    weight, odds_weight, row_constant = (
        np.where(finite, arr, 0.0) for arr in (weight, odds_weight, row_constant)
    )
    positive = y > 0
    fixed = 0.0
    if not free_scale:
        fixed += float(
            keep[positive] @ (gammaln(y[positive] + alpha[positive]) - gammaln(alpha[positive]))
        )
        fixed -= float((keep * y) @ log_alpha)
    if not free_odds and family_record(family).odds_channel:
        fixed += float(
            keep
            @ (np.where(positive, log_expit(t_rows), log_expit(-t_rows)) + odds_weight * t_rows)
        )
    sums = [
        d.T @ (keep * y),
        fixed,
        float(keep @ row_constant),
        float(keep @ odds_weight),
        float(keep @ positive),
        float(keep @ ~positive),
    ]
    weight_sets = (keep * weight, keep * y) if free_scale else (keep * (alpha * weight + y),)
    for w in weight_sets:
        sums += quadratic_sums_in_x(v, w, value, slope, lam)
    return (const, lam, weight, odds_weight, row_constant, ~finite), tuple(sums)


def _collapsed(
    family: str,
    design,
    offset: np.ndarray,
    y: np.ndarray,
    scale: tuple,
    odds: tuple,
    centre: np.ndarray,
    *,
    tuned: bool,
    unbounded: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> NegativeBinomialBound:
    """The bound's per-row coefficients and its sums over the rows with a bound (one
    pass); rows whose tangents overflow at the centre get none."""
    n_data, ndim = design.shape
    scale_row, scale_offset, fixed_log_alpha = scale
    odds_row, odds_offset, fixed_log_odds = odds
    free_scale, free_odds = scale_row is not None, odds_row is not None
    keep = np.ones(n_data) if unbounded is None else (~unbounded).astype(np.float64)
    direction = np.zeros(ndim) if scale_row is None else scale_row
    a_centre = float(direction @ centre) + scale_offset
    t_centre = float(odds_row @ centre) + odds_offset if free_odds else 0.0
    zeros = np.zeros(n_data)
    (jj_const, lam, weight, odds_weight, row_constant, overflow), sums = design_map_sum(
        design,
        _rows_and_sums,
        per_row=(
            offset,
            y,
            keep,
            zeros if free_scale else fixed_log_alpha,
            zeros if free_odds or fixed_log_odds is None else fixed_log_odds,
        ),
        args=(
            (direction, free_scale, free_odds),
            centre,
            (a_centre, t_centre),
            family,
            tuned,
        ),
        block_rows=chunk_entries // max(1, ndim),
    )
    record_rows(n_data, n_data)
    y_design, fixed_part, constant_total, odds_weight_total, n_positive, n_zero = sums[:6]
    names = ("one", "weighted") if free_scale else ("weighted",)
    stats = {name: list(sums[6 + 3 * i : 9 + 3 * i]) for i, name in enumerate(names)}

    def quadratic(name: str) -> CollapsedQuadratic:
        value, grad, hess = stats[name]
        return CollapsedQuadratic(centre.copy(), float(value), grad, 0.5 * (hess + hess.T))

    unbounded = overflow if unbounded is None else (unbounded | overflow)
    kept = ~unbounded
    values, counts = np.unique(y[kept & (y > 0)], return_counts=True)
    return NegativeBinomialBound(
        family=family,
        design=design,
        offset=offset,
        observed=y,
        scale_row=scale_row,
        scale_offset=scale_offset,
        odds_row=odds_row,
        odds_offset=odds_offset,
        fixed_log_alpha=fixed_log_alpha,
        fixed_log_odds=fixed_log_odds,
        jj_constant=jj_const,
        jj_lambda=lam,
        weight=weight,
        odds_weight=odds_weight,
        row_constant=row_constant,
        count_values=values.astype(np.float64),
        counts=counts.astype(np.float64),
        n_positive=float(n_positive),
        n_zero=float(n_zero),
        lgamma_y1=float(np.sum(gammaln(y[kept] + 1.0))),
        fixed_part=float(fixed_part),
        quad_one=quadratic("one") if free_scale else None,
        quad_weighted=quadratic("weighted"),
        y_design=y_design,
        y_offset=float(y[kept] @ offset[kept]),
        y_total=float(np.sum(y[kept])),
        odds_weight_total=float(odds_weight_total),
        constant_total=float(constant_total),
        tuned=tuned,
        unbounded=unbounded if unbounded.any() else None,
    )


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


def whitened_reach(design, rows: slice, direction, chol) -> np.ndarray:
    """``||L^T (direction - d_n)||`` for the rows ``rows`` of the design."""
    block = (direction[None, :] - np.asarray(design[rows], dtype=np.float64)) @ chol
    return np.sqrt(np.einsum("ij,ij->i", block, block))
