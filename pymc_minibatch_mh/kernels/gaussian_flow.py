"""Hamiltonian flow solved in closed form on a Gaussian surrogate posterior, as a proposal.

When the prior is Gaussian, the surrogate of the control variates (prior plus the
second-order Taylor proxy of the log-likelihood) is itself a Gaussian ``N(m, P^{-1})``.
Hamilton's equations with unit mass in coordinates whitened by ``P`` are then a rotation:
after a time ``t`` the position is

    q' = m + cos(t) (q - m) + sin(t) S z,   z ~ N(0, I),  S S^T = P^{-1},

with no leapfrog error and no inner accept/reject [1]_. For a fixed ``t`` this
autoregressive move is reversible with respect to the surrogate (the pair ``(q, q')`` is
jointly Gaussian and exchangeable under it), and so is a mixture over ``t`` drawn
independently of the state. As for
:class:`~pymc_minibatch_mh.kernels.surrogate_hmc.SurrogateHMC`, the MH log density ratio
of the proposal is ``s(q) - s(q')`` with ``s`` the surrogate's log density, and the
minibatch test only has to correct the residuals of the proxy (the surrogate transition
method [2]_).

Times between a quarter and three eighths of the period give antithetic moves
(``E cos t < 0``): on a posterior close to the surrogate, successive draws are negatively
correlated in each coordinate, so a mean's effective sample size exceeds the number of
draws, as with HMC's long trajectories, while the squares stay nearly uncorrelated
(``E cos^2 t`` is small). One move costs two triangular solves and a matrix-vector
product: ``O(D^2)``, no data and no gradient.

References
----------
.. [1] Neal, R. M. "MCMC using Hamiltonian dynamics", Handbook of Markov Chain Monte
   Carlo, 2011 (the exact solution for a Gaussian target, section 5.2).
.. [2] Liu, J. S. *Monte Carlo Strategies in Scientific Computing*, Springer, 2001,
   section 9.4.3 (surrogate transition method).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.linalg import solve_triangular

#: Flow time, drawn uniformly from this range (a full period is ``2 pi``).
ANGLE_RANGE = (0.5 * math.pi, 0.75 * math.pi)


@dataclass(frozen=True)
class GaussianFlow:
    """The exact Hamiltonian flow on the Gaussian ``N(mean, P^{-1})``, as a proposal.

    Parameters
    ----------
    mean : ndarray
        ``m``, the Gaussian's mean.
    precision_chol : ndarray
        Lower Cholesky factor ``C`` of the precision ``P = C C^T``.
    angles : tuple of float
        Range of the flow time ``t`` (drawn uniformly per move).
    """

    mean: np.ndarray
    precision_chol: np.ndarray
    angles: tuple[float, float] = ANGLE_RANGE

    @classmethod
    def from_quadratic(
        cls, precision: np.ndarray, linear: np.ndarray, angles: tuple[float, float] = ANGLE_RANGE
    ) -> GaussianFlow:
        """The flow on ``exp(-q^T P q / 2 + b . q)`` for ``precision=P``, ``linear=b``.

        Raises ``numpy.linalg.LinAlgError`` when ``P`` is not positive definite (the
        surrogate is not a Gaussian).
        """
        precision = 0.5 * (precision + precision.T)
        chol = np.linalg.cholesky(precision)
        mean = solve_triangular(chol.T, solve_triangular(chol, linear, lower=True), lower=False)
        if not np.all(np.isfinite(mean)):
            raise np.linalg.LinAlgError("the surrogate's mean is not finite")
        return cls(mean, chol, angles)

    @cached_property
    def inverse_chol(self) -> np.ndarray:
        """``C^{-1}`` (lower triangular), for callers that map many vectors between ``q``
        and the whitened coordinates ``C^T (q - m)``: a product costs less than a solve."""
        return solve_triangular(self.precision_chol, np.eye(self.mean.size), lower=True)

    def log_density(self, position: np.ndarray) -> float:
        """``-(q - m)^T P (q - m) / 2``: the log density up to a constant."""
        w = self.precision_chol.T @ (position - self.mean)
        return -0.5 * float(w @ w)

    def __call__(
        self, rng: np.random.Generator, position: np.ndarray, scaling: float | None = None
    ) -> tuple[np.ndarray, float]:
        """Return ``(q', log q(q | q') - log q(q' | q))``; the ratio is ``s(q) - s(q')``.

        ``scaling`` is ignored (the flow has no scale): the signature is that of the other
        proposals in :mod:`~pymc_minibatch_mh.kernels.proposals`.
        """
        t = rng.uniform(*self.angles)
        z = rng.standard_normal(position.size)
        # S z with S = C^{-T}: a draw of N(0, P^{-1}) (a product with the cached C^{-1}
        # costs a few microseconds, scipy's triangular solve some forty).
        noise = self.inverse_chol.T @ z
        moved = self.mean + math.cos(t) * (position - self.mean) + math.sin(t) * noise
        return moved, self.log_density(position) - self.log_density(moved)
