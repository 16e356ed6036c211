"""How much more curved a collapsed bound is than the posterior: FlyMC's mixing in advance.

FlyMC samples ``theta`` given the brightness variables ``z``; with every datum dark,
``theta | z`` is the prior times the product of the bounds. A bound must hold for every row
on its own, so its curvature follows each row's worst case, while the posterior's
curvature is the rows' sum, in which the rows' curvatures partly cancel (a free dispersion
or a shared scale, whose rows pull both ways). Where the collapsed bound is ``r`` times
more curved than the posterior, ``theta | z`` is about ``sqrt(r)`` times narrower in that
direction: the chain crosses the posterior there only as fast as the bright rows let it,
and its autocorrelation time grows roughly with ``r``.

:func:`collapsed_looseness` returns the largest ``r`` over directions: the largest
generalised eigenvalue of the collapsed bound's negative Hessian against the posterior's
precision, both at the MAP (the precision from its Laplace fit, ``Sigma = L L^T``), i.e.
the largest eigenvalue of ``L^T H L``. Measured (FlyMC, 2026-11-29, models of the test
suite, N = 2,000-20,000): logistic and binomial regressions 1.1-1.6, Poisson 1.1-3,
Gamma, Beta, heteroscedastic Normal, zero-inflated and hurdle Poisson 1.1-9, ordinal 18,
zero-inflated negative binomial 56 (alpha's ESS 126 of 2 x 1000 draws) and hurdle
negative binomial 98 (alpha's ESS 34-68 of 2,000 draws, where the other coordinates
reach 200-800).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

#: FlyMC warns at construction when its collapsed bound is more than this many times as
#: curved as the posterior in some direction (its chain then needs several times the draws
#: of a well-bounded model for the same Monte Carlo error; see the module docstring).
LOOSE_BOUND_RATIO = 20.0


class LooseBoundWarning(UserWarning):
    """FlyMC's bounds are much more curved than the posterior: its chain will mix slowly."""


@dataclass(frozen=True)
class Looseness:
    """The largest curvature ratio of a collapsed bound to the posterior, and where.

    Attributes
    ----------
    ratio : float
        Largest generalised eigenvalue of the bound's negative Hessian against the
        posterior precision (1: as curved as the posterior).
    coordinate : int
        Coordinate of the block that the direction of ``ratio`` moves most, in posterior
        standard deviations.
    """

    ratio: float
    coordinate: int


def collapsed_looseness(
    bound, laplace_chol: np.ndarray | None, temperature: float = 1.0
) -> Looseness | None:
    """:class:`Looseness` of ``bound`` (its ``collapsed.hessian``, tempered by
    ``temperature``) against the Laplace covariance ``laplace_chol @ laplace_chol.T``;
    None for an exact bound, a bound without a collapsed quadratic, or without a fit."""
    collapsed = getattr(bound, "collapsed", None)
    hessian = getattr(collapsed, "hessian", None)
    if hessian is None or laplace_chol is None or getattr(bound, "exact", False):
        return None
    chol = np.asarray(laplace_chol, dtype=np.float64)
    whitened = chol.T @ (-np.asarray(hessian, dtype=np.float64) / temperature) @ chol
    whitened = 0.5 * (whitened + whitened.T)
    if not np.all(np.isfinite(whitened)):
        return None
    # Only the largest eigenpair: at construction, where D may be in the thousands (at
    # D = 2000 the full decomposition took 0.85 s, this 0.35 s).
    last = whitened.shape[0] - 1
    values, vectors = linalg.eigh(whitened, subset_by_index=[last, last])
    # The direction chol @ v in q, in units of each coordinate's posterior sd.
    sds = np.sqrt(np.einsum("ij,ij->i", chol, chol))
    moved = np.abs(chol @ vectors[:, 0]) / sds
    return Looseness(float(values[0]), int(np.argmax(moved)))
