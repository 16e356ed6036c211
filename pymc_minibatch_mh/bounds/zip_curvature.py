"""Derivatives of the zero-inflated Poisson log-likelihood, and bounds on the third.

With ``mu = e^eta`` the Poisson component's mean and ``t = log(psi / (1 - psi))`` the
log-odds of that component, a row's log-likelihood is

    y > 0:  f = log sigmoid(t) + y eta - e^eta - lgamma(y + 1),
    y = 0:  f = softplus(t - e^eta) - softplus(t).

For ``y > 0`` the two channels separate: ``f_eee = -e^eta``, ``f_ttt = -sigmoid''(t)``,
the mixed derivatives are 0. For ``y = 0``, with ``u = t - mu`` (``u_t = 1`` and every
``eta``-derivative of ``u`` equal to ``-mu``),

    f_eee = -mu s(u) + 3 mu^2 s'(u) - mu^3 s''(u),   f_eet = -mu s'(u) + mu^2 s''(u),
    f_ett = -mu s''(u),                              f_ttt = s''(u) - s''(t),

``s`` the sigmoid. On a region where ``mu <= mu_hi``, ``mu >= mu_lo`` and
``t <= t_hi``, ``u <= t_hi - mu_lo``; and ``|s|, |s'|, |s''|`` are at most 1, 1/4 and
sqrt(3)/18 and, for every ``u``, at most ``e^u`` (``s'' <= s' <= s <= e^u``), so a row whose
Poisson mean is large on the whole region (its zero is explained by the inflation) gets a
small constant.

At a point the first and second derivatives are, for ``y > 0``, ``f_e = y - mu``,
``f_t = sigmoid(-t)``, ``f_ee = -mu``, ``f_et = 0``, ``f_tt = -s'(t)``; for ``y = 0``,
``f_e = -mu s(u)``, ``f_t = s(u) - s(t)``, ``f_ee = -mu s(u) + mu^2 s'(u)``,
``f_et = -mu s'(u)`` and ``f_tt = s'(u) - s'(t)``.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.sigmoid_derivatives import SIGMOID_D1, SIGMOID_D2


def zip_third_derivatives(
    y: np.ndarray, mu_lo: np.ndarray, mu_hi: np.ndarray, t_hi: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-row bounds on ``|f_eee|, |f_eet|, |f_ett|, |f_ttt|`` over a region (module
    docstring); ``mu_lo``, ``mu_hi`` the row's smallest and largest Poisson mean there and
    ``t_hi`` the largest log-odds of the Poisson component."""
    y = np.asarray(y)
    zero = y == 0
    with np.errstate(over="ignore"):
        e_u = np.exp(t_hi - mu_lo)
    s0 = np.minimum(1.0, e_u)
    s1 = np.minimum(SIGMOID_D1, e_u)
    s2 = np.minimum(SIGMOID_D2, e_u)
    with np.errstate(over="ignore", invalid="ignore"):  # inf: no bound on that row
        eee = np.where(zero, mu_hi * s0 + 3.0 * mu_hi**2 * s1 + mu_hi**3 * s2, mu_hi)
        eet = np.where(zero, mu_hi * s1 + mu_hi**2 * s2, 0.0)
    ett = np.where(zero, mu_hi * s2, 0.0)
    ttt = np.where(zero, s2 + SIGMOID_D2, SIGMOID_D2)
    return eee, eet, ett, ttt


def _sigmoid_d1(x):
    return special.expit(x) * special.expit(-x)


def zip_channel_derivatives(y: np.ndarray, eta: np.ndarray, t) -> tuple:
    """``(f_e, f_t, f_ee, f_et, f_tt)`` per row at ``(eta, t)`` (module docstring)."""
    y = np.asarray(y)
    eta = np.asarray(eta, dtype=np.float64)
    t = np.broadcast_to(np.asarray(t, dtype=np.float64), eta.shape)
    zero = y == 0
    with np.errstate(over="ignore"):
        mu = np.exp(eta)
    u = t - mu
    s_u, s1_u, s1_t = special.expit(u), _sigmoid_d1(u), _sigmoid_d1(t)
    f_e = np.where(zero, -mu * s_u, y - mu)
    f_t = np.where(zero, s_u - special.expit(t), special.expit(-t))
    f_ee = np.where(zero, -mu * s_u + mu * mu * s1_u, -mu)
    f_et = np.where(zero, -mu * s1_u, 0.0)
    f_tt = np.where(zero, s1_u - s1_t, -s1_t)
    return f_e, f_t, f_ee, f_et, f_tt
