"""Derivatives of the Normal and Student-t log-likelihoods in ``(eta, s = log sigma)``,
and bounds on the third on a region.

With ``r = y - eta``, ``u = r e^{-s}`` and ``f = -s + g(u)`` (``g(u) = -u^2 / 2`` for the
Normal, ``-(nu + 1)/2 log(1 + u^2 / nu)`` for Student-t), using ``du/d eta = -e^{-s}`` and
``du/ds = -u``:

    f_e = -g'(u) e^{-s},  f_s = -1 - u g'(u),
    f_ee = g''(u) e^{-2s},  f_es = (g' + u g'') e^{-s},  f_ss = u g' + u^2 g'',
    f_eee = -g''' e^{-3s},  f_ees = -(u g''' + 2 g'') e^{-2s},
    f_ess = -(g' + 3 u g'' + u^2 g''') e^{-s},  f_sss = -(u g' + 3 u^2 g'' + u^3 g''').

On a region where ``s >= s_lo`` and ``|r| <= R``: for the Normal (``g' = -u``, ``g'' = -1``,
``g''' = 0``) the third derivatives are at most ``0``, ``2 e^{-2 s_lo}``,
``4 R e^{-2 s_lo}`` and ``4 R^2 e^{-2 s_lo}``; for Student-t the four functions of ``u`` in
brackets are bounded over the real line, by ``B_1..B_4``
(:func:`~pymc_minibatch_mh.bounds.taylor_remainder.student_t_scale_constants`), so the
bounds are ``B_1 e^{-3 s_lo}``, ``B_2 e^{-2 s_lo}``, ``B_3 e^{-s_lo}`` and ``B_4``.
"""

from __future__ import annotations

import numpy as np

from pymc_minibatch_mh.bounds.taylor_remainder import student_t_g_derivatives


def _g_derivatives(family: str, nu, u):
    """``(g', g'')`` at ``u``."""
    if family == "normal":
        return -u, -np.ones_like(u)
    return student_t_g_derivatives(nu, u)[:2]


def location_scale_derivatives(family: str, nu, y, eta, s) -> tuple:
    """``(f_e, f_s, f_ee, f_es, f_ss)`` per row at ``(eta, s)`` (module docstring);
    ``nu`` is ignored for the Normal."""
    y = np.asarray(y, dtype=np.float64)
    scale = np.exp(-np.asarray(s, dtype=np.float64))
    u = (y - eta) * scale
    g1, g2 = _g_derivatives(family, nu, u)
    return (
        -g1 * scale,
        -1.0 - u * g1,
        g2 * scale * scale,
        (g1 + u * g2) * scale,
        u * g1 + u * u * g2,
    )


def location_scale_third_derivatives(
    family: str, residual_max: np.ndarray, s_lo: np.ndarray, constants=None
) -> tuple:
    """Per-row bounds on ``|f_eee|, |f_ees|, |f_ess|, |f_sss|`` where ``|y - eta| <=
    residual_max`` and ``s >= s_lo`` (module docstring); ``constants`` are ``B_1..B_4``
    for Student-t."""
    big = np.exp(-np.asarray(s_lo, dtype=np.float64))
    if family == "normal":
        r = np.asarray(residual_max, dtype=np.float64)
        return np.zeros_like(r * big), 2.0 * big**2, 4.0 * r * big**2, 4.0 * r * r * big**2
    b1, b2, b3, b4 = constants
    shape = np.broadcast(np.asarray(residual_max), big).shape
    return (
        np.broadcast_to(b1 * big**3, shape),
        np.broadcast_to(b2 * big**2, shape),
        np.broadcast_to(b3 * big, shape),
        np.full(shape, float(b4)),
    )
