"""Proposal distributions in the unconstrained (raveled) parameter space."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import splu


@dataclass(frozen=True)
class RandomWalkProposal:
    """Gaussian random walk ``q' = q + scaling * L z`` with ``z ~ N(0, I)``.

    Parameters
    ----------
    chol : ndarray or None
        Lower Cholesky factor ``L`` of the proposal covariance; ``None`` means
        the identity. The proposal is symmetric, so its log density ratio is 0.
    """

    chol: np.ndarray | None = None
    #: Optional sparse copy of ``(L L^T)^{-1}`` (a multilevel model's Laplace precision):
    #: :meth:`covariance_times` then solves with it instead of a dense product.
    precision: sparse.csr_matrix | None = field(default=None, compare=False, repr=False)

    @cached_property
    def covariance(self) -> np.ndarray | None:
        """``L L^T`` (None for the identity), computed once."""
        return None if self.chol is None else self.chol @ self.chol.T

    def covariance_times(self, vector: np.ndarray) -> np.ndarray:
        """``L L^T vector``: a sparse solve with :attr:`precision` where there is one
        (O(nonzeros) for a multilevel model), else a dense product (O(D^2))."""
        if self.chol is None:
            return vector
        if self.precision is None:
            return self.covariance @ vector
        factor = self.__dict__.get("_precision_lu")
        if factor is None:
            factor = splu(sparse.csc_matrix(self.precision))
            self.__dict__["_precision_lu"] = factor
        return factor.solve(vector)

    def __getstate__(self):
        # SuperLU factors do not pickle; the copy factors again on first use.
        state = dict(self.__dict__)
        state.pop("_precision_lu", None)
        return state

    @classmethod
    def from_covariance(cls, cov: np.ndarray | None, ndim: int) -> RandomWalkProposal:
        """Build from a covariance matrix or a vector of variances (``None``: identity)."""
        if cov is None:
            return cls(None)
        cov = np.asarray(cov, dtype=float)
        if cov.ndim == 1:
            cov = np.diag(cov)
        if cov.shape != (ndim, ndim):
            raise ValueError(
                f"proposal_cov has shape {cov.shape}, but the sampled block has {ndim} "
                f"unconstrained coordinates: pass a ({ndim},) vector of variances or a "
                f"({ndim}, {ndim}) covariance matrix."
            )
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError as err:
            raise ValueError("proposal_cov must be symmetric positive definite.") from err
        return cls(chol)

    def __call__(
        self, rng: np.random.Generator, position: np.ndarray, scaling: float
    ) -> tuple[np.ndarray, float]:
        """Return the proposed position and ``log q(q | q') - log q(q' | q)`` (zero)."""
        z = rng.standard_normal(position.shape[0])
        step = z if self.chol is None else self.chol @ z
        return position + scaling * step, 0.0


@dataclass(frozen=True)
class IndependenceProposal:
    """Independent multivariate Student-t proposals ``q' = centre + scaling * L t``.

    ``t`` has ``df`` degrees of freedom and identity scale; with ``L`` the Cholesky
    factor of a Laplace covariance this proposes near-independent posterior draws.
    Heavier tails than the posterior keep the independence sampler uniformly ergodic
    when the Laplace covariance is not wider than the posterior in some direction.

    Parameters
    ----------
    centre : ndarray
        Location, e.g. the reference (MAP) point.
    chol : ndarray
        Lower Cholesky factor ``L`` of the scale matrix.
    df : float
        Degrees of freedom of the Student-t (``inf`` gives a Gaussian).
    """

    centre: np.ndarray
    chol: np.ndarray
    df: float = 7.0
    #: ``L^{-1}``, computed once: a matrix-vector product per density instead of a solve.
    chol_inv: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chol_inv", np.linalg.inv(np.asarray(self.chol, dtype=float)))

    def log_density(self, position: np.ndarray, scaling: float) -> float:
        """Log density up to a constant that cancels in ratios (same ``scaling``)."""
        z = (self.chol_inv @ (position - self.centre)) / scaling
        return self._log_density_standard(float(z @ z), z.size)

    def _log_density_standard(self, squared_norm: float, ndim: int) -> float:
        """The log density of a point whose standardised coordinates have this norm."""
        if math.isinf(self.df):
            return -0.5 * squared_norm
        return -0.5 * (self.df + ndim) * math.log1p(squared_norm / self.df)

    def __call__(
        self, rng: np.random.Generator, position: np.ndarray, scaling: float
    ) -> tuple[np.ndarray, float]:
        """Return the proposal and ``log q(position) - log q(proposal)``."""
        z = rng.standard_normal(position.shape[0])
        if not math.isinf(self.df):
            z *= math.sqrt(self.df / rng.chisquare(self.df))
        proposal = self.centre + scaling * (self.chol @ z)
        # The proposal's standardised coordinates are z itself.
        log_q_proposal = self._log_density_standard(float(z @ z), z.size)
        return proposal, self.log_density(position, scaling) - log_q_proposal


@dataclass(frozen=True)
class ProposalMixture:
    """A random choice, at every iteration, between an independence and a random-walk move.

    With probability ``p_independent`` the iteration is an MH step with the independence
    proposal, otherwise one with the random walk. Each of the two is an MH kernel
    reversible with respect to the target, and the choice does not depend on the state,
    so the mixture is reversible too (Tierney 1994). The independence moves give nearly
    independent draws where the posterior is close to its Gaussian fit; the random walk
    keeps the chain moving where it is not.

    Parameters
    ----------
    random_walk : RandomWalkProposal
        The local move (scaled by the tuned ``scaling``).
    independent : IndependenceProposal
        The global move (always at scale 1).
    p_independent : float
        Probability of an independence move, in ``[0, 1]``.

    References
    ----------
    .. [1] Tierney, L. "Markov chains for exploring posterior distributions", Annals of
       Statistics 22, 1994.
    """

    random_walk: RandomWalkProposal
    independent: IndependenceProposal
    p_independent: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_independent <= 1.0:
            raise ValueError(f"p_independent must lie in [0, 1]; got {self.p_independent}.")

    def choose(self, rng: np.random.Generator) -> bool:
        """Draw the kind of the next move: True for an independence move."""
        return bool(rng.random() < self.p_independent)
