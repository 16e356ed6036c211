"""Jaakkola–Jordan lower bound for the Bernoulli-logit (logistic regression) likelihood.

With ``t_n = 2 y_n - 1`` and ``s = t_n eta_n``, the log-likelihood ``log sigmoid(s)``
is bounded below by a quadratic in ``s`` that touches it at ``s = +-xi``:

    log sigmoid(s) >= log sigmoid(xi) + (s - xi) / 2 - lambda(xi) (s^2 - xi^2),
    lambda(xi) = tanh(xi / 2) / (4 xi)   (limit 1/8 at xi = 0).

In the notation of :mod:`pymc_minibatch_mh.bounds.collapsed` the curvature is
``a = -lambda(xi)`` (the coefficient printed as
``a = -(1/(4 xi)) (e^xi - 1)/(e^xi + 1)``). Two constructions are provided:
untuned, one ``xi`` for all data (1.5 in the FlyMC paper), and MAP-tuned,
``xi_n = |eta_n(q_MAP)|`` so that every bound is tight at the MAP.

A Binomial row with ``y`` successes of ``n`` trials has log-likelihood
``log C(n, y) + y log sigmoid(eta) + (n - y) log sigmoid(-eta)``: the sum of the two
bounds (both tight at ``eta = +-xi``) bounds it, a quadratic in ``eta`` with value
``log C(n, y) + y log sigmoid(eta*) + (n - y) log sigmoid(-eta*)``, slope
``y - n sigmoid(eta*)`` and curvature ``-n lambda(xi)`` at the anchor ``eta*``.

References
----------
.. [1] Jaakkola, T. S., Jordan, M. I. "Bayesian parameter estimation via
   variational methods", Statistics and Computing 10, 2000.
.. [2] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Sections 3.1 and 4.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, log_expit

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    CollapsedQuadratic,
    LinearQuadraticBound,
    RowNorms,
    as_design,
    per_datum,
)
from pymc_minibatch_mh.bounds.lipschitz import _norms_of_rows
from pymc_minibatch_mh.data import blocks as data_blocks
from pymc_minibatch_mh.data.chunk_pass import design_map_sum
from pymc_minibatch_mh.data.pass_tally import record_rows

#: xi of the untuned bound in the FlyMC paper.
UNTUNED_XI = 1.5
_SERIES_CUTOFF = 1e-4


def jj_lambda(xi) -> np.ndarray:
    """``lambda(xi) = tanh(xi / 2) / (4 xi)``, even in ``xi``, with the limit 1/8 at 0.

    Below ``|xi| = 1e-4`` the series ``1/8 - xi^2 / 96`` is used (error < 1e-18).
    """
    xi = np.abs(np.asarray(xi, dtype=np.float64))
    small = xi < _SERIES_CUTOFF
    safe = np.where(small, 1.0, xi)
    return np.where(small, 0.125 - xi**2 / 96.0, np.tanh(safe / 2.0) / (4.0 * safe))


def log_sigmoid(s) -> np.ndarray:
    """``log(1 / (1 + exp(-s)))`` without overflow."""
    return -np.logaddexp(0.0, -np.asarray(s, dtype=np.float64))


def bernoulli_logit_loglik(eta, observed) -> np.ndarray:
    """Per-datum Bernoulli log-likelihood with logit ``eta`` and outcomes in {0, 1}."""
    return log_sigmoid((2.0 * np.asarray(observed, dtype=np.float64) - 1.0) * eta)


def _signs(observed, n_data: int) -> np.ndarray:
    y = per_datum(observed, n_data, "observed")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("Bernoulli observations must be 0 or 1 (or False/True).")
    return 2.0 * y - 1.0


def _successes_and_trials(observed, trials, n_data: int) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(per_datum(observed, n_data, "observed"), dtype=np.float64)
    n = np.broadcast_to(np.asarray(trials, dtype=np.float64), (n_data,))
    if not np.all((y >= 0) & (y <= n) & (y == np.round(y)) & (n == np.round(n))):
        raise ValueError("Binomial observations must be integers from 0 to the row's trials.")
    return y, n


def binomial_jaakkola_jordan_coefficients(
    observed, trials, anchor: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(value, slope, curvature)`` at ``eta = anchor`` of the Binomial rows' bound (see
    the module docstring)."""
    y, n = _successes_and_trials(observed, trials, anchor.shape[0])
    log_choose = gammaln(n + 1.0) - gammaln(y + 1.0) - gammaln(n - y + 1.0)
    value = log_choose + y * log_expit(anchor) + (n - y) * log_expit(-anchor)
    slope = y - n * np.exp(log_expit(anchor))
    return value, slope, -n * jj_lambda(anchor)


def bernoulli_jaakkola_jordan_coefficients(
    signs: np.ndarray, anchor: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(value, slope, curvature)`` at ``eta = anchor`` of the Bernoulli rows' bound, with
    ``signs = 2 y - 1`` (see the module docstring)."""
    s = signs * anchor
    # d/d eta log sigmoid(t eta) = t sigmoid(-t eta); the bound shares it at both +-xi.
    return log_sigmoid(s), signs * np.exp(log_sigmoid(-s)), -jj_lambda(s)


def jaakkola_jordan_bound(
    design: np.ndarray,
    offset,
    observed,
    anchor_eta,
    *,
    centre: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
    trials=None,
) -> LinearQuadraticBound:
    """Jaakkola–Jordan bounds that touch ``log L_n`` at ``eta_n = anchor_eta[n]``.

    Each bound is tight at ``s = +-xi_n`` with ``xi_n = |anchor_eta[n]|``.

    Parameters
    ----------
    design : ndarray, shape (N, D)
        ``eta = design @ q + offset``.
    offset : float or ndarray, shape (N,)
    observed : ndarray, shape (N,)
        Outcomes 0/1.
    anchor_eta : float or ndarray, shape (N,)
        A linear-predictor value per datum where the bound is tight.
    centre : ndarray, shape (D,), optional
        Expansion point of the collapsed sum (see :class:`LinearQuadraticBound`).
    chunk_entries : int
        Memory knob of the O(N D^2) setup.
    trials : float or ndarray, shape (N,), optional
        Binomial likelihood: trials per row, ``observed`` the successes. None: Bernoulli.
    """
    design = as_design(design)
    n_data = design.shape[0]
    anchor = per_datum(anchor_eta, n_data, "anchor_eta")
    if trials is not None:
        value, slope, curvature = binomial_jaakkola_jordan_coefficients(observed, trials, anchor)
        return LinearQuadraticBound.from_coefficients(
            design,
            offset,
            anchor,
            value=value,
            slope=slope,
            curvature=curvature,
            centre=centre,
            family="binomial_logit",
            chunk_entries=chunk_entries,
        )
    value, slope, curvature = bernoulli_jaakkola_jordan_coefficients(
        _signs(observed, n_data), anchor
    )
    return LinearQuadraticBound.from_coefficients(
        design,
        offset,
        anchor,
        value=value,
        slope=slope,
        curvature=curvature,
        centre=centre,
        family="bernoulli_logit",
        chunk_entries=chunk_entries,
    )


def untuned_jaakkola_jordan(
    design: np.ndarray,
    offset,
    observed,
    *,
    xi: float = UNTUNED_XI,
    centre: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
    trials=None,
) -> LinearQuadraticBound:
    """Untuned bounds: the same ``xi`` (default 1.5) for every datum (Binomial rows:
    anchored at ``+xi`` where most trials succeeded, else at ``-xi``).

    With ``xi = 1.5`` a Bernoulli datum is bright with probability below 0.0201 wherever
    ``0.1 < L_n < 0.9``.
    """
    if not np.isfinite(xi) or xi < 0:
        raise ValueError(f"xi must be a finite non-negative number; got {xi}.")
    design = as_design(design)
    if trials is None:
        signs = _signs(observed, design.shape[0])
    else:
        y, n = _successes_and_trials(observed, trials, design.shape[0])
        signs = np.where(2.0 * y >= n, 1.0, -1.0)
    return jaakkola_jordan_bound(
        design,
        offset,
        observed,
        signs * xi,
        centre=centre,
        chunk_entries=chunk_entries,
        trials=trials,
    )


def map_tuned_jaakkola_jordan(
    design: np.ndarray,
    offset,
    observed,
    q_map: np.ndarray,
    *,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
    trials=None,
    row_norms_chol: np.ndarray | None = None,
) -> LinearQuadraticBound:
    """MAP-tuned bounds: ``xi_n = |eta_n(q_MAP)|``, so ``B_n(q_MAP) = L_n(q_MAP)`` for all n
    (``trials``: Binomial rows, see :func:`jaakkola_jordan_bound`). Bernoulli rows are
    bounded in one pass, which with ``row_norms_chol`` (a ``(D, D)`` factor ``L``) also
    computes every row's ``||L' x_n||`` (the bound's ``row_norms``)."""
    design = as_design(design)
    q_map = np.asarray(q_map, dtype=np.float64)
    if trials is None:
        return _map_tuned_bernoulli(design, offset, observed, q_map, chunk_entries, row_norms_chol)
    eta = design @ q_map + per_datum(offset, design.shape[0], "offset")
    return jaakkola_jordan_bound(
        design, offset, observed, eta, centre=q_map, chunk_entries=chunk_entries, trials=trials
    )


def _map_tuned_bernoulli(
    design, offset, observed, q_map, chunk_entries, chol=None
) -> LinearQuadraticBound:
    """The Bernoulli rows' MAP-tuned bound in one pass: each block's anchors ``eta_n(q_MAP)``,
    coefficients and collapsed sums together (what :func:`jaakkola_jordan_bound` at
    ``eta(q_MAP)`` computes in two passes, a product for the anchors and the collapse), and
    with ``chol`` the rows' norms ``||chol' x_n||``. At the centre ``q_MAP`` every row's
    residual ``eta_n - anchor_n`` is zero, so the sums are those of the values, of the
    slopes times the rows and of ``2 a_n x_n x_n'``."""
    n_data, ndim = design.shape
    offset = per_datum(offset, n_data, "offset")
    if chol is not None:
        chol = np.array(chol, dtype=np.float64)
    rows, (total, grad, hess) = design_map_sum(
        design,
        _bernoulli_block_at,
        per_row=(offset, _signs(observed, n_data)),
        args=(q_map, chol),
        # Blocks of at most the passes' usual size: a block's six (rows, D) temporaries stay
        # in cache (with 2^21 entries per block the pass took 0.30-0.41 s at N = 10^6, D =
        # 11, against 0.19 s with 2^19).
        block_rows=max(1, min(chunk_entries, data_blocks.CHUNK_ENTRIES) // max(1, ndim)),
    )
    record_rows(n_data, n_data)
    anchor, value, slope, curvature = rows[:4]
    if not np.all(np.isfinite(value)):
        raise ValueError("The bound's values at its anchors must be finite.")
    collapsed = CollapsedQuadratic(q_map.copy(), float(total), grad, 0.5 * (hess + hess.T))
    norms = None if chol is None else RowNorms(chol, rows[4])
    return LinearQuadraticBound(
        design, offset, anchor, value, slope, curvature, collapsed, "bernoulli_logit",
        row_norms=norms,
    )  # fmt: skip


def _bernoulli_block_at(design, rows: slice, offset, signs, q, chol) -> tuple[tuple, tuple]:
    """One block of :func:`_map_tuned_bernoulli`: ``((anchor, value, slope, curvature[,
    norms]), (sum of values, gradient, Hessian))`` of its rows' bounds tight at ``q``."""
    x = design[rows]
    anchor = x @ q + offset
    value, slope, curvature = bernoulli_jaakkola_jordan_coefficients(signs, anchor)
    scaled = x * np.sqrt(-2.0 * curvature)[:, None]
    sums = (float(np.sum(value)), x.T @ slope, -(scaled.T @ scaled))
    per_row = (anchor, value, slope, curvature)
    if chol is not None:
        per_row += (_norms_of_rows(x, slice(None), chol),)
    return per_row, sums
