"""A trust region: the ellipsoid on which a bound without a global version holds.

Some per-datum log-likelihoods have no global bound on the derivatives TunaMH needs
(Poisson with a log link: ``f''' = -exp(eta)``; a free scale ``sigma``: derivatives grow
like ``sigma^-k`` as ``sigma -> 0``). On the ellipsoid

    R = {q : ||L^{-1}(q - q*)|| <= rho}

around the reference point ``q*``, with ``L`` the Cholesky factor of the Laplace
covariance, every affine function ``a . q + b`` stays in the interval
``a . q* + b +- rho ||L^T a||`` (the exact range of an affine map over an ellipsoid),
so per-datum bounds follow from the ranges of the linear predictor and ``log sigma``.
A chain that rejects every proposal outside ``R`` (density 0 there, as outside the
prior's support) is reversible with respect to the posterior restricted to ``R``.

The default radius ``rho = sqrt(D) + 8`` makes the restriction immaterial for any
posterior the Laplace approximation describes roughly: for a Gaussian posterior
``||L^{-1}(q - q*)||^2`` is chi-squared with ``D`` degrees of freedom, and the mass
beyond ``rho^2 = (sqrt(D) + 8)^2`` is below ``1e-15`` for every ``D``. The sampler
reports every proposal outside ``R`` (sample stat ``region_exits``) and warns after
tuning when one occurs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg

#: Added to sqrt(D) for the default radius (in Laplace standard deviations).
RADIUS_MARGIN = 8.0
#: A direction is "wide" when the tuning draws' variance in it exceeds the Laplace fit's
#: by this factor (sampling noise of a near-Gaussian direction stays well below it).
WIDE_VARIANCE_RATIO = 2.0


def default_radius(ndim: int) -> float:
    """``sqrt(D) + 8`` Laplace standard deviations (see the module docstring)."""
    return math.sqrt(ndim) + RADIUS_MARGIN


@dataclass(frozen=True, eq=False)
class TrustRegion:
    """The ellipsoid ``{q : ||L^{-1}(q - centre)|| <= radius}``.

    Parameters
    ----------
    centre : ndarray, shape (D,)
        Its centre (the reference point of the control variates).
    chol : ndarray, shape (D, D)
        Lower-triangular ``L`` (the Cholesky factor of the Laplace covariance).
    radius : float
        ``rho > 0``, in units of ``L`` (Laplace standard deviations).
    """

    centre: np.ndarray
    chol: np.ndarray
    radius: float
    _inverse: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        centre = np.array(self.centre, dtype=np.float64)
        chol = np.array(self.chol, dtype=np.float64)
        if chol.shape != (centre.size, centre.size) or not np.allclose(chol, np.tril(chol)):
            raise ValueError(
                f"chol must be a lower-triangular ({centre.size}, {centre.size}) matrix; got "
                f"shape {chol.shape}."
            )
        if not (np.all(np.isfinite(chol)) and np.all(np.diag(chol) > 0)):
            raise ValueError("chol must be finite with a positive diagonal.")
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise ValueError(f"radius must be positive and finite; got {self.radius!r}.")
        inverse = linalg.solve_triangular(chol, np.eye(centre.size), lower=True)
        for array in (centre, chol, inverse):
            array.setflags(write=False)
        object.__setattr__(self, "centre", centre)
        object.__setattr__(self, "chol", chol)
        object.__setattr__(self, "radius", float(self.radius))
        object.__setattr__(self, "_inverse", inverse)

    def distance(self, q: np.ndarray) -> float:
        """``||L^{-1}(q - centre)||``; O(D^2)."""
        white = self._inverse @ (np.asarray(q, dtype=np.float64) - self.centre)
        return float(math.sqrt(white @ white))

    def contains(self, q: np.ndarray) -> bool:
        """Whether ``q`` lies in the region (boundary included; NaN is outside)."""
        return self.distance(q) <= self.radius

    def margin(self, q: np.ndarray) -> float:
        """How far, in Laplace sds, ``q`` is from the boundary (negative outside)."""
        return self.radius - self.distance(q)

    def row_radii(self) -> float:
        """The radius every row's constants use (one for the whole ellipsoid)."""
        return self.radius

    def half_width(self, direction: np.ndarray) -> float:
        """``rho ||L^T a||``: how far ``a . q`` moves from ``a . centre`` over the region."""
        return self.radius * float(np.linalg.norm(self.chol.T @ np.asarray(direction, float)))


def grown_shape(
    laplace_chol: np.ndarray, spread_chol: np.ndarray | None, factor: float = 1.0
) -> np.ndarray:
    """Shape (lower Cholesky factor) of a trust region grown after tuning; its radius stays
    the default one.

    In the Laplace fit's whitened coordinates, the eigen-directions of the tuning draws'
    covariance ``spread_chol spread_chol^T`` where it is wide (variance ratio above
    :data:`WIDE_VARIANCE_RATIO`, e.g. a quasi-separated category's coefficient) get that
    variance times ``factor**2``; the others keep the Laplace fit's. Only the directions
    where posterior mass can lie beyond the region grow: growing the whole Laplace
    ellipsoid would loosen every row's bound as much as that one direction needs. Without
    a wide direction (or without tuning draws) the Laplace factor is scaled by ``factor``.
    The steps estimate the excluded mass again on every grown region, so a wrong guess
    costs growth steps, not exactness.
    """
    if spread_chol is not None:
        white = linalg.solve_triangular(laplace_chol, spread_chol, lower=True)
        values, vectors = np.linalg.eigh(white @ white.T)
        wide = values > WIDE_VARIANCE_RATIO
        if np.any(wide):
            variances = np.where(wide, values * factor * factor, 1.0)
            shape = laplace_chol @ (vectors * np.sqrt(variances))
            return np.linalg.cholesky(shape @ shape.T)
    return laplace_chol * factor
