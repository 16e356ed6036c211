"""Bounds on differences of second-order Taylor remainders, for TunaMH with control variates.

With control variates the energies TunaMH subsamples are the remainders
``R_i(q) = l_i(q) - p_i(q)`` of the second-order Taylor proxy ``p_i`` around ``q*``.
For a likelihood that depends on ``q`` through ``eta_i = x_i . q + o_i``,
``l_i(q) = f_i(eta_i)`` and ``R_i = rho_i(eta_i)`` with ``rho_i`` the remainder of ``f_i``
at ``eta_i* = x_i . q* + o_i``, so ``|rho_i'(eta)| <= L3_i (eta - eta_i*)^2 / 2`` where
``L3_i = sup |f_i'''|``. Integrating along the segment from ``q`` to ``q'``:

    |R_i(q') - R_i(q)| <= L3_i / 2 |x_i . d| ((x_i . m)^2 + (x_i . d)^2 / 12)

with ``d = q' - q`` and ``m = (q + q')/2 - q*``. Cauchy–Schwarz with any invertible ``L``
(``|x . v| <= ||L^T x|| ||L^{-1} v||``) gives ``|R_i(q') - R_i(q)| <= c_i M(q, q')`` with

    c_i = L3_i ||L^T x_i||^3 / 2,   M(q, q') = ||L^{-1} d|| (||L^{-1} m||^2 + ||L^{-1} d||^2 / 12).

``M`` is symmetric in ``(q, q')``. Near ``q*`` and for posterior-scale moves, ``C M`` is of
order ``N^{-1/2}``: TunaMH then reads almost no data per step and stays exact.

Third-derivative bounds ``L3`` (untempered):

* Bernoulli, logit link: ``sup |sigma (1 - sigma) (1 - 2 sigma)| = sqrt(3) / 18``;
* Normal with fixed ``sigma``: 0 (the proxy is exact; no data is ever read);
* Student-t with fixed ``nu``, ``sigma``: ``2 (nu + 1) sup_t |t (3 - t^2)| / (1 + t^2)^3 /
  (nu^{3/2} sigma^3)`` (the supremum over ``t`` is found numerically once);
* Poisson (log link) and Categorical: not provided (``f'''`` is unbounded, or the softmax
  case needs a matrix bound) — use TunaMH without control variates there.

References
----------
.. [1] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact Minibatch
   Metropolis-Hastings", NeurIPS 2020.
.. [2] Cornish, R., Vanetti, P., Bouchard-Côté, A., Deligiannidis, G., Doucet, A.
   "Scalable Metropolis-Hastings for exact Bayesian inference with large datasets",
   ICML 2019.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from scipy import linalg, optimize

from pymc_minibatch_mh.bounds.lipschitz import LipschitzBound, UnsupportedBound, _row_norms

if TYPE_CHECKING:  # pragma: no cover - typing only (that module imports PyMC)
    from pymc_minibatch_mh.likelihood.linear_predictor import LinearPredictorLikelihood

LOGISTIC_THIRD_DERIVATIVE = math.sqrt(3.0) / 18.0


@lru_cache(maxsize=1)
def _student_t_shape_constant() -> float:
    """``sup_t |t (3 - t^2)| / (1 + t^2)^3`` (attained near ``t = 0.41``)."""

    def shape(t):
        return np.abs(t * (3.0 - t * t)) / (1.0 + t * t) ** 3

    grid = np.linspace(0.0, 5.0, 5_001)
    t0 = float(grid[np.argmax(shape(grid))])
    best = optimize.minimize_scalar(
        lambda t: -shape(t),
        bounds=(max(t0 - 0.01, 0.0), t0 + 0.01),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(shape(best.x))


#: Families whose per-datum third derivative in the linear predictor is bounded.
REMAINDER_FAMILIES = ("bernoulli_logit", "normal", "student_t")


def third_derivative_bound(lp: LinearPredictorLikelihood) -> np.ndarray:
    """``L3_i = sup_eta |d^3/d eta^3 log p(y_i | eta)|`` per datum (untempered).

    Raises
    ------
    UnsupportedBound
        For families without a finite global bound (Poisson) or not covered here
        (Categorical).
    """
    n = lp.n_data
    if lp.family == "bernoulli_logit":
        return np.full(n, LOGISTIC_THIRD_DERIVATIVE)
    if lp.family == "normal":
        return np.zeros(n)
    if lp.family == "student_t":
        nu = np.broadcast_to(np.asarray(lp.params["nu"], dtype=np.float64), (n,))
        sigma = np.broadcast_to(np.asarray(lp.params["sigma"], dtype=np.float64), (n,))
        return 2.0 * (nu + 1.0) * _student_t_shape_constant() / (nu**1.5 * sigma**3)
    raise UnsupportedBound(
        f"No bound on the third derivative of a {lp.family} log-likelihood is available, "
        "so TunaMH cannot use control variates on this model. Use TunaMH without "
        "control_variates (with its Lipschitz bound), or MinibatchBarker/Austere with "
        "control variates."
    )


@dataclass(frozen=True)
class RemainderMetric:
    """``M(q, q') = ||W d|| (||W m||^2 + ||W d||^2 / 12)`` with ``W = L^{-1}``,
    ``d = q' - q`` and ``m = (q + q') / 2 - centre``; symmetric in ``(q, q')``, O(D^2)."""

    centre: np.ndarray
    chol: np.ndarray | None = None
    _inverse: np.ndarray | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        centre = np.array(self.centre, dtype=np.float64)
        centre.setflags(write=False)
        object.__setattr__(self, "centre", centre)
        inverse = None
        if self.chol is not None:
            inverse = linalg.solve_triangular(
                np.asarray(self.chol, dtype=np.float64), np.eye(centre.size), lower=True
            )
        object.__setattr__(self, "_inverse", inverse)

    def __call__(self, q: np.ndarray, q_new: np.ndarray) -> float:
        d = np.asarray(q_new, dtype=np.float64) - q
        m = 0.5 * (np.asarray(q_new, dtype=np.float64) + q) - self.centre
        if self._inverse is not None:
            d = self._inverse @ d
            m = self._inverse @ m
        dd = float(d @ d)
        return math.sqrt(dd) * (float(m @ m) + dd / 12.0)


def taylor_remainder_bound(
    lp: LinearPredictorLikelihood, reference: np.ndarray, *, chol: np.ndarray | None = None
) -> LipschitzBound:
    """TunaMH bound for the Taylor-remainder differences around ``reference``.

    Parameters
    ----------
    lp : LinearPredictorLikelihood
        The recognised likelihood (design rows ``x_i``, family and parameters).
    reference : ndarray
        The expansion point ``q*`` of the control variates.
    chol : ndarray, optional
        Lower-triangular ``L`` for the whitened norms (e.g. the Cholesky factor of the
        Laplace covariance); ``None`` for Euclidean norms. Must stay fixed while a chain
        that has to be exact uses the bound.
    """
    if lp.family == "categorical_logit":
        third_derivative_bound(lp)  # raises with the explanation
    l3 = third_derivative_bound(lp)
    c = 0.5 * l3 * _row_norms(lp.design, chol) ** 3
    return LipschitzBound(
        c,
        RemainderMetric(np.asarray(reference, dtype=np.float64), chol),
        description=f"second-order Taylor remainder of a {lp.family} likelihood",
    )
