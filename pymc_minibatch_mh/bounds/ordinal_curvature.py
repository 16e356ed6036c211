"""Derivatives of the ordinal log-likelihood in its two channels, and their suprema on a box.

A row of category ``k`` of an ordinal regression (``pm.OrderedLogistic``,
``pm.OrderedProbit``) has log-likelihood ``h(a, b) = log(F(a) - F(b))`` in the channels
``a = c_{k+1} - eta`` and ``b = c_k - eta`` (``a = +inf`` for the highest category,
``b = -inf`` for the lowest), ``F`` the logistic or the standard normal cdf with density
``phi``. With ``D = F(a) - F(b)``, the ratios ``r_a = phi(a) / D`` and ``r_b = phi(b) / D``
(0 at an infinite channel; computed as ``exp(log phi - h)``, so no cancellation) and
``psi1 = phi' / phi``, ``psi2 = phi'' / phi`` (logistic: ``1 - 2 s`` and
``1 - 6 s + 6 s^2`` with ``s = F``; normal: ``-x`` and ``x^2 - 1``):

    h_a = r_a,   h_b = -r_b,
    h_aa = r_a psi1(a) - r_a^2,   h_ab = r_a r_b,   h_bb = -r_b psi1(b) - r_b^2,
    h_aaa = t psi1(a) + r_a (psi2(a) - psi1(a)^2) - 2 r_a t,   t = r_a psi1(a) - r_a^2,
    h_aab = r_a r_b (psi1(a) - 2 r_a),   h_abb = r_a r_b (psi1(b) + 2 r_b),
    h_bbb = -u psi1(b) - r_b (psi2(b) - psi1(b)^2) - 2 r_b u,   u = r_b psi1(b) + r_b^2,

(using ``d r_a / da = t``, ``d r_a / db = r_a r_b``, ``d r_b / db = u`` and
``psi1' = psi2 - psi1^2``). For an interior category they blow up as the gap
``g = a - b = c_{k+1} - c_k`` shrinks to 0 and are bounded for ``g >= g_lo > 0``;
:func:`ordinal_suprema` bounds the norms of the first, second and third derivatives over
a box of ``a`` and ``g``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.box_suprema import box_suprema

#: Grid points per axis (``a``, then the gap) of the box searched for the suprema.
_GRID = (801, 41)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _link(family: str, x):
    """``(log phi, psi1, psi2)`` at ``x`` (0 for the ratios at infinite ``x``)."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    if family == "ordered_logistic":
        log_phi = special.log_expit(xf) + special.log_expit(-xf)
        s = special.expit(xf)
        psi1, psi2 = 1.0 - 2.0 * s, 1.0 - 6.0 * s + 6.0 * s * s
    else:
        log_phi = -0.5 * xf * xf - _LOG_SQRT_2PI
        psi1, psi2 = -xf, xf * xf - 1.0
    log_phi = np.where(finite, log_phi, -np.inf)
    return log_phi, np.where(finite, psi1, 0.0), np.where(finite, psi2, 0.0)


def _log_mass(family: str, a, b):
    """``log(F(a) - F(b))`` for ``a > b`` without cancellation."""
    log_cdf = special.log_expit if family == "ordered_logistic" else special.log_ndtr
    right = a + b > 0
    big, small = np.where(right, -b, a), np.where(right, -a, b)
    log_big, log_small = log_cdf(big), log_cdf(small)
    return log_big + np.log1p(-np.exp(log_small - log_big))


def ordinal_derivatives(family: str, a, b) -> tuple:
    """``(h_a, h_b, h_aa, h_ab, h_bb, h_aaa, h_aab, h_abb, h_bbb)`` of
    ``h = log(F(a) - F(b))`` (module docstring); ``a`` may be ``+inf``, ``b`` ``-inf``."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    h = _log_mass(family, a, b)
    log_phi_a, p1a, p2a = _link(family, a)
    log_phi_b, p1b, p2b = _link(family, b)
    r_a, r_b = np.exp(log_phi_a - h), np.exp(log_phi_b - h)
    t = r_a * p1a - r_a * r_a
    u = r_b * p1b + r_b * r_b
    return (
        r_a,
        -r_b,
        t,
        r_a * r_b,
        -u,
        t * p1a + r_a * (p2a - p1a * p1a) - 2.0 * r_a * t,
        r_a * r_b * (p1a - 2.0 * r_a),
        r_a * r_b * (p1b + 2.0 * r_b),
        -u * p1b - r_b * (p2b - p1b * p1b) - 2.0 * r_b * u,
    )


def _norms(family: str, a, b) -> tuple:
    """Euclidean norm of the gradient and Frobenius norms of the second and third
    derivative tensors (mixed entries counted as often as they appear)."""
    ha, hb, haa, hab, hbb, haaa, haab, habb, hbbb = ordinal_derivatives(family, a, b)
    return (
        np.sqrt(ha * ha + hb * hb),
        np.sqrt(haa * haa + 2.0 * hab * hab + hbb * hbb),
        np.sqrt(haaa * haaa + 3.0 * haab * haab + 3.0 * habb * habb + hbbb * hbbb),
    )


def ordinal_suprema(
    family: str, kind: str, a_range: tuple[float, float], gap_range: tuple[float, float]
) -> np.ndarray:
    """Suprema ``(T1, T2, T3)`` of the three norms of :func:`_norms` over a box.

    ``kind`` is ``"interior"`` (channels ``a`` in ``a_range`` and ``b = a - g`` with the gap
    ``g`` in ``gap_range``), ``"lowest"`` (``h = log F(a)``, ``a`` in ``a_range``) or
    ``"highest"`` (``h = log(1 - F(b))``, ``b`` in ``a_range``; ``gap_range`` unused).
    """
    if kind == "interior":

        def functions(a, g):
            return _norms(family, a, a - g)

        return box_suprema(functions, a_range, gap_range, _GRID)
    if kind == "lowest":

        def functions(a, _):
            return _norms(family, a, np.full(np.shape(a), -np.inf))

    else:

        def functions(b, _):
            return _norms(family, np.full(np.shape(b), np.inf), b)

    return box_suprema(functions, a_range, (0.0, 0.0), _GRID)
