"""Hamiltonian moves on a cheap surrogate posterior, used as an MH proposal.

A surrogate ``s(q) = log p0(q) + P(q) / K`` (prior plus the control variates' Taylor
proxy of the log-likelihood, tempered like it) costs ``O(D^2)`` per evaluation and reads
no data. A kernel ``k`` that leaves ``exp(s)`` invariant and is reversible with respect
to it (here: one HMC transition, with its own accept/reject on ``s``) is a valid MH
proposal for the real posterior ``pi`` with the density ratio

    log q(q | q') - log q(q' | q) = s(q) - s(q'),

so the MH log-ratio of ``q -> q'`` reduces to ``log pi(q') - s(q') - log pi(q) + s(q)``:
with the same proxy in the control variates, exactly the residual sum that the minibatch
test estimates (the surrogate transition method [1]_, delayed acceptance [2]_). Where
the proxy fits, the residuals are small, the minibatch test accepts nearly every move
and reads few rows, and the moves follow the posterior's curvature as HMC does.

References
----------
.. [1] Liu, J. S. *Monte Carlo Strategies in Scientific Computing*, Springer, 2001,
   section 9.4.3 (surrogate transition method).
.. [2] Christen, J. A., Fox, C. "Markov chain Monte Carlo using an approximation",
   Journal of Computational and Graphical Statistics 14, 2005.
.. [3] Neal, R. M. "MCMC using Hamiltonian dynamics", Handbook of Markov Chain Monte
   Carlo, 2011.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Trajectory length in whitened units is drawn uniformly from this range: about a
#: quarter period of a unit-variance Gaussian, jittered against periodicity.
TRAJECTORY_RANGE = (1.0, 3.0)
MAX_LEAPFROG_STEPS = 100


@dataclass(frozen=True)
class SurrogateHMC:
    """One HMC transition on a surrogate density, as a proposal.

    Parameters
    ----------
    chol : ndarray
        Lower Cholesky factor ``L`` of the metric (an estimate of the posterior
        covariance): the dynamics run in ``u`` with ``q = L u`` and unit mass.
    transitions : int
        HMC transitions on the surrogate per proposal. A power of a reversible kernel is
        reversible, so any number keeps the proposal valid; more of them move further
        from the current point at no data cost, and the minibatch test then corrects
        the surrogate's error once.
    """

    chol: np.ndarray
    transitions: int = 1

    def __call__(
        self,
        rng: np.random.Generator,
        position: np.ndarray,
        step_size: float,
        density: Callable[[np.ndarray], tuple[float, np.ndarray]],
    ) -> tuple[np.ndarray, float, float]:
        """Return ``(q', log q(q | q') - log q(q' | q), inner acceptance probability)``.

        ``density(q) -> (s(q), grad s(q))``. The inner acceptance probability (the mean
        over the HMC transitions on the surrogate) is for tuning ``step_size``. When
        every inner transition rejects, ``q' = q`` and the log ratio is 0.
        """
        value, grad = density(position)
        if not math.isfinite(value):
            raise ValueError("The surrogate density is not finite at the current point.")
        q, q_value, total = position, value, 0.0
        for _ in range(self.transitions):
            q, q_value, grad, accept_prob = self._transition(
                rng, q, q_value, grad, step_size, density
            )
            total += accept_prob
        return q, value - q_value, total / self.transitions

    def _transition(self, rng, position, value, grad, step_size, density):
        """One HMC transition on the surrogate: ``(q, s(q), grad s(q), accept prob)``."""
        chol = self.chol
        length = rng.uniform(*TRAJECTORY_RANGE)
        n_steps = int(min(max(1, math.ceil(length / step_size)), MAX_LEAPFROG_STEPS))
        momentum = rng.standard_normal(position.size)
        energy0 = -value + 0.5 * float(momentum @ momentum)
        q = position.copy()
        g_u = chol.T @ grad
        new_value = value
        with np.errstate(over="ignore", invalid="ignore"):  # a divergence ends as a reject
            for _ in range(n_steps):
                momentum = momentum + 0.5 * step_size * g_u
                q = q + step_size * (chol @ momentum)
                new_value, new_grad = density(q)
                if not math.isfinite(new_value):
                    return position, value, grad, 0.0
                g_u = chol.T @ new_grad
                momentum = momentum + 0.5 * step_size * g_u
            energy1 = -new_value + 0.5 * float(momentum @ momentum)
        log_accept = energy0 - energy1
        if not math.isfinite(log_accept):
            return position, value, grad, 0.0
        accept_prob = 1.0 if log_accept >= 0 else math.exp(log_accept)
        if math.log(1.0 - rng.random()) <= log_accept:
            return q, new_value, new_grad, accept_prob
        return position, value, grad, accept_prob
