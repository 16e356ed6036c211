"""Gaussian-in-the-mean lower bound for the Student-t likelihood (robust regression).

For ``y_n ~ StudentT(nu_n, mu = eta_n, sigma_n)`` with standardised residual
``r = (y_n - eta_n) / sigma_n``, the log density is
``C_n - (nu + 1)/2 log(1 + r^2 / nu)``. The function ``u -> log(1 + u / nu)`` is
concave in ``u = r^2``, so it lies below its tangent at ``u = xi^2``:

    log p(y_n | eta_n) >= C_n - (nu + 1)/2 [log(1 + xi^2/nu) + (r^2 - xi^2) / (nu + xi^2)].

The right side is a Gaussian in ``eta_n`` (curvature
``a_n = -(nu + 1) / (2 sigma^2 (nu + xi^2))``) that touches the density at
``r = +-xi``. Untuned: ``xi = 0`` (the bound is tight at ``eta = y``). MAP-tuned:
``xi_n`` is the standardised residual at the MAP.

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 4 (robust sparse linear regression).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.collapsed import (
    DEFAULT_CHUNK_ENTRIES,
    LinearQuadraticBound,
    as_design,
    per_datum,
)


def student_t_loglik(eta, observed, nu, sigma) -> np.ndarray:
    """Per-datum Student-t log density of ``observed`` with location ``eta``."""
    nu = np.asarray(nu, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    r = (np.asarray(observed, dtype=np.float64) - eta) / sigma
    return _log_normaliser(nu, sigma) - 0.5 * (nu + 1.0) * np.log1p(r * r / nu)


def _log_normaliser(nu, sigma):
    return (
        special.gammaln(0.5 * (nu + 1.0))
        - special.gammaln(0.5 * nu)
        - 0.5 * np.log(nu * np.pi)
        - np.log(sigma)
    )


def student_t_bound(
    design: np.ndarray,
    offset,
    observed,
    nu,
    sigma,
    anchor_eta,
    *,
    centre: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> LinearQuadraticBound:
    """Student-t bounds that touch ``log L_n`` at ``eta_n = anchor_eta[n]``.

    Parameters
    ----------
    design : ndarray, shape (N, D)
        ``eta = design @ q + offset`` is the location of each datum.
    offset : float or ndarray, shape (N,)
    observed : ndarray, shape (N,)
    nu, sigma : float or ndarray, shape (N,)
        Fixed degrees of freedom and scale (positive).
    anchor_eta : float or ndarray, shape (N,)
        Location at which each bound is tight (also tight at the mirror point
        ``2 y_n - anchor_eta[n]``).
    centre : ndarray, shape (D,), optional
        Expansion point of the collapsed sum.
    chunk_entries : int
        Memory knob of the O(N D^2) setup.
    """
    design = as_design(design)
    n_data = design.shape[0]
    y = per_datum(observed, n_data, "observed")
    nu = per_datum(nu, n_data, "nu")
    sigma = per_datum(sigma, n_data, "sigma")
    if not (np.all(nu > 0) and np.all(sigma > 0) and np.all(np.isfinite(nu * sigma))):
        raise ValueError("Student-t nu and sigma must be positive and finite.")
    if not np.all(np.isfinite(y)):
        raise ValueError("Student-t observations must be finite.")
    anchor = per_datum(anchor_eta, n_data, "anchor_eta")
    xi = (y - anchor) / sigma
    denom = nu + xi * xi
    return LinearQuadraticBound.from_coefficients(
        design,
        offset,
        anchor,
        value=student_t_loglik(anchor, y, nu, sigma),
        slope=(nu + 1.0) * xi / (sigma * denom),
        curvature=-(nu + 1.0) / (2.0 * sigma * sigma * denom),
        centre=centre,
        family="student_t",
        chunk_entries=chunk_entries,
    )


def untuned_student_t(
    design: np.ndarray,
    offset,
    observed,
    nu,
    sigma,
    *,
    centre: np.ndarray | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> LinearQuadraticBound:
    """Untuned bounds (``xi = 0``): each touches its density at ``eta_n = y_n``."""
    return student_t_bound(
        design, offset, observed, nu, sigma, observed, centre=centre, chunk_entries=chunk_entries
    )


def map_tuned_student_t(
    design: np.ndarray,
    offset,
    observed,
    nu,
    sigma,
    q_map: np.ndarray,
    *,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> LinearQuadraticBound:
    """MAP-tuned bounds: ``xi_n`` is the standardised residual at ``q_map``."""
    design = as_design(design)
    q_map = np.asarray(q_map, dtype=np.float64)
    eta = design @ q_map + per_datum(offset, design.shape[0], "offset")
    return student_t_bound(
        design, offset, observed, nu, sigma, eta, centre=q_map, chunk_entries=chunk_entries
    )
