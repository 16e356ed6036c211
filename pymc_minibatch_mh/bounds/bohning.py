"""Böhning's quadratic lower bound for the categorical likelihood with a softmax link.

For logits ``eta`` (K classes), ``log L = eta_y - logsumexp(eta)``. The Hessian of
``logsumexp`` is ``diag(p) - p p^T``, which is dominated by the fixed matrix
``A = 1/2 (I_K - 1 1^T / K)``. Expanding ``logsumexp`` about ``psi`` with that
curvature gives a lower bound that matches the value and gradient of ``log L``
at ``eta = psi``:

    log L(eta) >= log L(psi) + (e_y - softmax(psi)) . (eta - psi)
                  - 1/2 (eta - psi)^T A (eta - psi).

With ``eta_n = W^T x_n + o_n`` and ``vec(W) = C q + w0`` the sum over the data is
quadratic in ``q`` and collapses to ``S = sum_n x_n x_n^T`` (P x P) and a P x K
matrix; each evaluation costs O(P^2 K + P K^2 + P K D), i.e. O(K D^2) at most.
Untuned: ``psi = 0`` for every datum. MAP-tuned: ``psi_n`` is the logit vector
of datum n at the MAP.

References
----------
.. [1] Böhning, D. "Multinomial logistic regression algorithm", Annals of the
   Institute of Statistical Mathematics 44, 1992.
.. [2] Murphy, K. P. "Machine Learning: A Probabilistic Perspective", MIT Press
   2012, Section 21.8.
.. [3] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 4 (softmax classification).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    OverDesignRows,
    as_design,
)
from pymc_minibatch_mh.data.chunk_pass import design_sum
from pymc_minibatch_mh.data.pass_tally import record_rows


def bohning_curvature(n_classes: int) -> np.ndarray:
    """``A = 1/2 (I_K - 1 1^T / K)``."""
    k = int(n_classes)
    return 0.5 * (np.eye(k) - np.full((k, k), 1.0 / k))


def categorical_logit_loglik(logits: np.ndarray, observed) -> np.ndarray:
    """Per-datum ``log softmax(logits)[y]`` for ``logits`` of shape ``(n, K)``."""
    logits = np.asarray(logits, dtype=np.float64)
    y = np.asarray(observed, dtype=np.int64)
    return logits[np.arange(logits.shape[0]), y] - special.logsumexp(logits, axis=1)


@dataclass(frozen=True, eq=False)
class SoftmaxQuadraticBound(OverDesignRows):
    """Böhning bounds for a categorical-logit likelihood and their collapsed sum.

    ``logits = design @ (coef_map @ q + coef_offset).reshape(P, K) + offset``.
    Build instances with :func:`bohning_bound`, :func:`untuned_bohning` or
    :func:`map_tuned_bohning`. All outputs are untempered.

    Attributes
    ----------
    design : ndarray, shape (N, P)
    offset : ndarray, shape (N, K)
    observed : ndarray, shape (N,)
        Class indices ``0..K-1``.
    coef_map : ndarray, shape (P K, D)
    coef_offset : ndarray, shape (P K,)
    anchor : ndarray, shape (N, K)
        ``psi_n``, the logits where each bound is tight.
    value : ndarray, shape (N,)
        ``log L_n(psi_n)``.
    slope : ndarray, shape (N, K)
        ``e_y - softmax(psi_n)``.
    curvature : ndarray, shape (K, K)
        Böhning's ``A``.
    centre : ndarray, shape (D,)
    sum_at_centre : float
    coef_grad : ndarray, shape (P, K)
        Gradient of the sum in ``W`` at the centre.
    feature_gram : ndarray, shape (P, P)
        ``sum_n x_n x_n^T``.
    """

    design: np.ndarray
    offset: np.ndarray
    observed: np.ndarray
    coef_map: np.ndarray
    coef_offset: np.ndarray
    anchor: np.ndarray
    value: np.ndarray
    slope: np.ndarray
    curvature: np.ndarray
    centre: np.ndarray
    sum_at_centre: float
    coef_grad: np.ndarray
    feature_gram: np.ndarray
    family: str = "categorical_logit"

    @property
    def n_data(self) -> int:
        return self.design.shape[0]

    @property
    def n_classes(self) -> int:
        return self.curvature.shape[0]

    @property
    def ndim(self) -> int:
        return self.coef_map.shape[1]

    def coefficients(self, q: np.ndarray) -> np.ndarray:
        """The ``(P, K)`` coefficient matrix ``W`` at ``q``."""
        w = self.coef_map @ np.asarray(q, dtype=np.float64) + self.coef_offset
        return w.reshape(self.design.shape[1], self.n_classes)

    def linear_predictor(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Logits ``(len(idx), K)`` for rows ``idx`` (all rows if None)."""
        w = self.coefficients(q)
        if idx is None:
            return self.design @ w + self.offset
        return self.gathered_rows(idx) @ w + self.offset[idx]

    def _residual(self, q, idx):
        anchor = self.anchor if idx is None else self.anchor[idx]
        return self.linear_predictor(q, idx) - anchor

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-datum ``log B_n(q)`` for rows ``idx`` (all rows if None)."""
        e = self._residual(q, idx)
        sel = slice(None) if idx is None else idx
        quad = np.einsum("nk,kl,nl->n", e, self.curvature, e)
        return self.value[sel] + np.einsum("nk,nk->n", self.slope[sel], e) - 0.5 * quad

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] log B_{idx[j]}(q)``, shape ``(D,)``."""
        e = self._residual(q, idx)
        d_eta = self.slope[idx] - e @ self.curvature
        d_w = self.gathered_rows(idx).T @ (weights[:, None] * d_eta)
        return self.coef_map.T @ d_w.ravel()

    def _delta(self, q):
        d = self.coef_map @ (np.asarray(q, dtype=np.float64) - self.centre)
        return d.reshape(self.design.shape[1], self.n_classes)

    def log_bound_sum(self, q: np.ndarray) -> float:
        """``sum_n log B_n(q)`` over all N data from the sufficient statistics."""
        delta = self._delta(q)
        quad = np.sum((self.feature_gram @ delta) * (delta @ self.curvature))
        return float(self.sum_at_centre + np.sum(delta * self.coef_grad) - 0.5 * quad)

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`log_bound_sum`, shape ``(D,)``."""
        delta = self._delta(q)
        d_w = self.coef_grad - self.feature_gram @ delta @ self.curvature
        return self.coef_map.T @ d_w.ravel()


def _check_shapes(design, offset, observed, coef_map, coef_offset, n_classes):
    design = as_design(design)
    n_data, n_features = design.shape
    k = int(n_classes)
    if k < 2:
        raise ValueError(f"A categorical likelihood needs at least 2 classes; got {k}.")
    offset = np.broadcast_to(np.asarray(offset, dtype=np.float64), (n_data, k))
    y = np.asarray(observed)
    if y.shape != (n_data,) or not np.all((y >= 0) & (y < k) & (y == np.round(y))):
        raise ValueError(f"observed must hold N = {n_data} class indices in 0..{k - 1}.")
    width = n_features * k
    coef_map = np.eye(width) if coef_map is None else np.asarray(coef_map, dtype=np.float64)
    if coef_map.ndim != 2 or coef_map.shape[0] != width:
        raise ValueError(f"coef_map must have shape ({width}, D); got {coef_map.shape}.")
    coef_offset = (
        np.zeros(width) if coef_offset is None else np.asarray(coef_offset, dtype=np.float64)
    )
    if coef_offset.shape != (width,):
        raise ValueError(f"coef_offset must have shape ({width},); got {coef_offset.shape}.")
    return design, offset, y.astype(np.int64), coef_map, coef_offset, k


def _softmax_sums(design, rows: slice, shift, value, slope, w0, curvature) -> tuple:
    """The rows' part of the Böhning bound's sums at the centre's coefficients ``w0``:
    the bound's value, its gradient in the coefficient matrix and the feature Gram matrix
    (``shift`` = offset minus anchor)."""
    x = design[rows]
    e = x @ w0 + shift
    quad = np.einsum("nk,kl,nl->n", e, curvature, e)
    return (
        float(np.sum(value + np.einsum("nk,nk->n", slope, e) - 0.5 * quad)),
        x.T @ (slope - e @ curvature),
        x.T @ x,
    )


def bohning_bound(
    design: np.ndarray,
    offset,
    observed,
    n_classes: int,
    anchor_logits,
    *,
    coef_map: np.ndarray | None = None,
    coef_offset: np.ndarray | None = None,
    centre: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> SoftmaxQuadraticBound:
    """Böhning bounds tight at ``logits_n = anchor_logits[n]``; O(N P^2) setup in chunks.

    Parameters
    ----------
    design : ndarray, shape (N, P)
        Features.
    offset : float or ndarray, broadcastable to (N, K)
    observed : ndarray, shape (N,)
        Class indices.
    n_classes : int
        K.
    anchor_logits : float or ndarray, broadcastable to (N, K)
    coef_map, coef_offset : ndarray, optional
        ``vec(W) = coef_map @ q + coef_offset`` (row-major ``(P, K)``); default the identity.
    centre : ndarray, shape (D,), optional
        Expansion point of the collapsed sum (default the origin).
    chunk_entries : int
        Memory knob of the setup.
    """
    design, offset, y, coef_map, coef_offset, k = _check_shapes(
        design, offset, observed, coef_map, coef_offset, n_classes
    )
    n_data, n_features = design.shape
    ndim = coef_map.shape[1]
    anchor = np.ascontiguousarray(
        np.broadcast_to(np.asarray(anchor_logits, dtype=np.float64), (n_data, k))
    )
    probs = special.softmax(anchor, axis=1)
    slope = -probs
    slope[np.arange(n_data), y] += 1.0
    value = categorical_logit_loglik(anchor, y)
    curvature = bohning_curvature(k)
    centre = np.zeros(ndim) if centre is None else np.asarray(centre, dtype=np.float64)
    if centre.shape != (ndim,):
        raise ValueError(f"centre must have shape ({ndim},); got {centre.shape}.")
    w0 = (coef_map @ centre + coef_offset).reshape(n_features, k)

    # One pass (Dask tasks for a design over chunked data): the sums at the centre.
    total, coef_grad, gram = design_sum(
        design,
        _softmax_sums,
        per_row=(offset - anchor, value, slope),
        args=(w0, curvature),
        block_rows=chunk_entries // (n_features + k),
    )
    record_rows(n_data, n_data)
    total = float(total)
    gram = 0.5 * (gram + gram.T)
    return SoftmaxQuadraticBound(
        design=design,
        offset=np.ascontiguousarray(offset),
        observed=y,
        coef_map=coef_map,
        coef_offset=coef_offset,
        anchor=anchor,
        value=value,
        slope=slope,
        curvature=curvature,
        centre=centre.copy(),
        sum_at_centre=total,
        coef_grad=coef_grad,
        feature_gram=gram,
    )


def untuned_bohning(
    design: np.ndarray,
    offset,
    observed,
    n_classes: int,
    *,
    coef_map: np.ndarray | None = None,
    coef_offset: np.ndarray | None = None,
    centre: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> SoftmaxQuadraticBound:
    """Untuned bounds: ``psi = 0`` for every datum."""
    return bohning_bound(
        design,
        offset,
        observed,
        n_classes,
        0.0,
        coef_map=coef_map,
        coef_offset=coef_offset,
        centre=centre,
        chunk_entries=chunk_entries,
    )


def map_tuned_bohning(
    design: np.ndarray,
    offset,
    observed,
    n_classes: int,
    q_map: np.ndarray,
    *,
    coef_map: np.ndarray | None = None,
    coef_offset: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> SoftmaxQuadraticBound:
    """MAP-tuned bounds: ``psi_n`` are the logits of datum n at ``q_map``."""
    design, offset, y, coef_map, coef_offset, k = _check_shapes(
        design, offset, observed, coef_map, coef_offset, n_classes
    )
    q_map = np.asarray(q_map, dtype=np.float64)
    w = (coef_map @ q_map + coef_offset).reshape(design.shape[1], k)
    anchor = design @ w + offset
    return bohning_bound(
        design,
        offset,
        y,
        k,
        anchor,
        coef_map=coef_map,
        coef_offset=coef_offset,
        centre=q_map,
        chunk_entries=chunk_entries,
    )
