"""Bernoulli rows with a probit link, ``p = Phi(eta)``: density, derivatives and bounds.

With ``s = eta`` for ``y = 1`` and ``s = -eta`` for ``y = 0`` the row's log-likelihood is
``f(s) = log Phi(s)``. Its derivatives are written with the Mills ratio
``lambda(s) = phi(s) / Phi(s)``:

    f'(s) = lambda(s),   f''(s) = -lambda(s) (s + lambda(s)),
    f'''(s) = -f''(s) (s + lambda(s)) - lambda(s) (1 + f''(s)).

``-f''`` lies in ``(0, 1)`` for every ``s`` (the variance of a normal truncated above ``s``,
relative to the untruncated one, is ``1 + f''``), so

* **FlyMC**: ``log Phi(s) >= log Phi(m) + lambda(m) (s - m) - (s - m)^2 / 2`` at every ``s``
  for any anchor ``m`` (a quadratic with curvature 1 below a function whose curvature is
  above -1, touching at ``m``): a global bound, tight at the MAP's predictor when ``m``
  is taken there, collapsed like the Jaakkola–Jordan bound of the logistic link;
* **TunaMH**: ``|f'''|`` is bounded on the whole line (it vanishes in both tails), so its
  Taylor remainders need no trust region. :func:`third_derivative_supremum` finds the
  supremum on a dense grid, refines it and adds a margin; the grid covers the tails
  because ``|f'''| <= 2 / |s|^3 + O(|s|^-5)`` beyond it.

This module imports neither PyMC nor PyTensor (the recogniser, in
:mod:`pymc_minibatch_mh.likelihood.glm_families`, finds ``pm.math.invprobit``); the
bound's collapsed sum is the generic
:class:`~pymc_minibatch_mh.bounds.collapsed.LinearQuadraticBound`.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets of
   Data", UAI 2014 (a collapsible lower bound per datum).
.. [2] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact Minibatch
   Metropolis-Hastings", NeurIPS 2020 (bounds on the energy differences).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.special import log_ndtr

from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound, as_design, per_datum
from pymc_minibatch_mh.bounds.grid_supremum import supremum_on_grid

#: The bound's curvature: ``-f'' <= 1`` everywhere.
CURVATURE = 1.0
#: Half-width of the grid on which ``|f'''|`` is searched (beyond it ``|f'''| < 1e-4``).
_GRID_HALF_WIDTH = 30.0


def signed_predictor(eta, observed) -> np.ndarray:
    """``s = eta`` where ``y = 1`` and ``-eta`` where ``y = 0``."""
    eta = np.asarray(eta, dtype=np.float64)
    return np.where(np.asarray(observed) > 0.5, eta, -eta)


def loglik(eta, y, params=None) -> np.ndarray:
    """Per-row ``log p(y | eta) = log Phi(s)``, stable in both tails."""
    return log_ndtr(signed_predictor(eta, y))


def mills_ratio(s) -> np.ndarray:
    """``lambda(s) = phi(s) / Phi(s)``, computed in logs (``~ -s`` as ``s -> -inf``)."""
    s = np.asarray(s, dtype=np.float64)
    return np.exp(-0.5 * s * s - 0.5 * np.log(2.0 * np.pi) - log_ndtr(s))


def derivatives(s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f', f'', f''')`` of ``f = log Phi`` at ``s``."""
    lam = mills_ratio(s)
    d2 = -lam * (s + lam)
    d3 = -d2 * (s + lam) - lam * (1.0 + d2)
    return lam, d2, d3


@lru_cache(maxsize=1)
def third_derivative_supremum() -> float:
    """``sup_s |f'''(s)|`` (about 0.296, attained near ``s = 1``), with a small margin."""
    grid = np.linspace(-_GRID_HALF_WIDTH, _GRID_HALF_WIDTH, 120_001)
    return supremum_on_grid(lambda s: derivatives(s)[2], grid)


def bound_coefficients(eta_anchor, observed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(value, slope, curvature)`` in ``eta`` of each row's lower bound, tight at
    ``eta = eta_anchor``: ``value + slope (eta - m) + curvature (eta - m)^2``."""
    signs = np.where(np.asarray(observed) > 0.5, 1.0, -1.0)
    s = signs * np.asarray(eta_anchor, dtype=np.float64)
    value = log_ndtr(s)
    slope = signs * mills_ratio(s)
    curvature = np.full_like(value, -0.5 * CURVATURE)
    return value, slope, curvature


def collapsed_bound(design, offset, observed, q_anchor: np.ndarray) -> LinearQuadraticBound:
    """FlyMC's bound of every row, tight where ``eta = design @ q_anchor + offset`` (the
    MAP's predictor, or the initial point's for an untuned bound), with its collapsed sum.
    It holds on the whole space (no trust region). Two passes over the rows: the anchors,
    then the collapse."""
    design = as_design(design)
    q_anchor = np.asarray(q_anchor, dtype=np.float64)
    anchor = design @ q_anchor + per_datum(offset, design.shape[0], "offset")
    value, slope, curvature = bound_coefficients(anchor, observed)
    return LinearQuadraticBound.from_coefficients(
        design,
        offset,
        anchor,
        value=value,
        slope=slope,
        curvature=curvature,
        centre=q_anchor,
        family="bernoulli_probit",
    )


def third_derivative_bounds(lp, eta_range) -> np.ndarray:
    """TunaMH's per-row constant: the global supremum for every row (``eta_range`` is not
    needed)."""
    return np.full(lp.n_data, third_derivative_supremum())


def firefly_bound(lp, q_map, q_init, region) -> LinearQuadraticBound:
    """FlyMC's bound (:func:`collapsed_bound`), tight at ``q_map`` (``q_init`` untuned); it
    holds everywhere, so ``region`` is not used."""
    anchor = q_init if q_map is None else q_map
    return collapsed_bound(lp.design, lp.offset, lp.observed, anchor)
