"""Derivatives of the Beta-regression log-likelihood, and suprema of the third on a box.

A Beta likelihood with logit-link mean ``mu = sigmoid(eta)`` and precision ``phi = e^t``
(``alpha = mu phi``, ``beta = (1 - mu) phi``) is, per row,

    f(eta, t) = A(eta, t) + e^t (sigmoid(eta) log y + sigmoid(-eta) log(1 - y)) + const,
    A(eta, t) = lgamma(e^t) - lgamma(e^t sigmoid(eta)) - lgamma(e^t sigmoid(-eta)).

``A`` does not depend on the observation. With ``F(eta, t) = lgamma(e^w)``,
``w = t + log sigmoid(eta)``, and ``x = e^w``, the derivatives of ``L(w) = lgamma(e^w)``
are ``L1 = x psi(x)``, ``L2 = x psi(x) + x^2 psi'(x)``,
``L3 = x psi(x) + 3 x^2 psi'(x) + x^3 psi''(x)``; those of ``w`` in ``eta`` are
``w1 = sigmoid(-eta)``, ``w2 = -s (1 - s)``, ``w3 = -s (1 - s)(1 - 2 s)`` with
``s = sigmoid(eta)``. Then ``F_eee = L3 w1^3 + 3 L2 w1 w2 + L1 w3``,
``F_eet = L3 w1^2 + L2 w2``, ``F_ett = L3 w1``, ``F_ttt = L3``, and, the second lgamma
term being ``F(-eta, t)``,

    A_eee = F_eee(-eta) - F_eee(eta),   A_eet = -F_eet(eta) - F_eet(-eta),
    A_ett = F_ett(-eta) - F_ett(eta),   A_ttt = L3(t) - F_ttt(eta) - F_ttt(-eta).

The observation's part ``e^t (log(1 - y) + sigmoid(eta) logit(y))`` has third derivatives
``e^t sigmoid'''(eta) logit y``, ``e^t sigmoid''(eta) logit y``,
``e^t sigmoid'(eta) logit y`` and ``e^t (sigmoid(eta) log y + sigmoid(-eta) log(1 - y))``,
at most ``e^t |logit y|`` times 1/8, sqrt(3)/18 and 1/4, and ``e^t max(|log y|,
|log(1 - y)|)``.

The first and second derivatives follow the same way: ``F_e = L1 w1``, ``F_t = L1``,
``F_ee = L2 w1^2 + L1 w2``, ``F_et = L2 w1``, ``F_tt = L2``; ``A_e = F_e(-eta) - F_e(eta)``,
``A_t = L1(t) - F_t(eta) - F_t(-eta)``, ``A_ee = -F_ee(eta) - F_ee(-eta)``,
``A_et = F_et(-eta) - F_et(eta)``, ``A_tt = L2(t) - F_tt(eta) - F_tt(-eta)``; the
observation's part adds ``e^t sigmoid'(eta) logit y`` to ``f_e`` and ``f_et``,
``e^t sigmoid''(eta) logit y`` to ``f_ee``, and ``e^t (sigmoid(eta) log y +
sigmoid(-eta) log(1 - y))`` to ``f_t`` and ``f_tt``.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.box_suprema import box_suprema

#: Grid points per axis of the box searched for the suprema.
_GRID = (401, 101)


def _lgamma_exp_derivatives(w):
    """``(L1, L2, L3)``: derivatives of ``lgamma(e^w)`` in ``w``."""
    x = np.exp(w)
    psi0, psi1, psi2 = special.digamma(x), special.polygamma(1, x), special.polygamma(2, x)
    return x * psi0, x * psi0 + x * x * psi1, x * psi0 + 3.0 * x * x * psi1 + x**3 * psi2


def _f_derivatives(eta, t):
    """``(F_eee, F_eet, F_ett, F_ttt)`` of ``F = lgamma(e^t sigmoid(eta))``."""
    s = special.expit(eta)
    w1 = special.expit(-eta)
    w2 = -s * w1
    w3 = w2 * (1.0 - 2.0 * s)
    l1, l2, l3 = _lgamma_exp_derivatives(t + special.log_expit(eta))
    return (l3 * w1**3 + 3.0 * l2 * w1 * w2 + l1 * w3, l3 * w1 * w1 + l2 * w2, l3 * w1, l3)


def beta_a_derivatives(eta, t) -> tuple:
    """``(A_eee, A_eet, A_ett, A_ttt)`` at ``(eta, t)`` (module docstring); broadcasts."""
    eta, t = np.asarray(eta, dtype=np.float64), np.asarray(t, dtype=np.float64)
    here, mirror = _f_derivatives(eta, t), _f_derivatives(-eta, t)
    return (
        mirror[0] - here[0],
        -here[1] - mirror[1],
        mirror[2] - here[2],
        _lgamma_exp_derivatives(t)[2] - here[3] - mirror[3],
    )


def beta_a_suprema(eta_lo: float, eta_hi: float, t_lo: float, t_hi: float) -> np.ndarray:
    """``sup |A_eee|, sup |A_eet|, sup |A_ett|, sup |A_ttt|`` over the box
    ``[eta_lo, eta_hi] x [t_lo, t_hi]``: the largest values on a grid, each refined by a
    bounded optimiser from its grid maximum, times a small safety margin
    (:func:`~pymc_minibatch_mh.bounds.box_suprema.box_suprema`)."""
    return box_suprema(beta_a_derivatives, (eta_lo, eta_hi), (t_lo, t_hi), _GRID)


def beta_row_terms(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``|logit y|`` and ``max(|log y|, |log(1 - y)|)`` per row (module docstring)."""
    y = np.asarray(y, dtype=np.float64)
    log_y, log_1my = np.log(y), np.log1p(-y)
    return np.abs(log_y - log_1my), np.maximum(np.abs(log_y), np.abs(log_1my))


def _f_low_derivatives(eta, t):
    """``(F_e, F_t, F_ee, F_et, F_tt)`` of ``F = lgamma(e^t sigmoid(eta))``."""
    s = special.expit(eta)
    w1 = special.expit(-eta)
    w2 = -s * w1
    l1, l2, _ = _lgamma_exp_derivatives(t + special.log_expit(eta))
    return l1 * w1, l1, l2 * w1 * w1 + l1 * w2, l2 * w1, l2


def beta_channel_derivatives(y: np.ndarray, eta: np.ndarray, t) -> tuple:
    """``(f_e, f_t, f_ee, f_et, f_tt)`` per row at ``(eta, t = log nu)`` (module
    docstring)."""
    y = np.asarray(y, dtype=np.float64)
    eta = np.asarray(eta, dtype=np.float64)
    t = np.broadcast_to(np.asarray(t, dtype=np.float64), eta.shape)
    here, mirror = _f_low_derivatives(eta, t), _f_low_derivatives(-eta, t)
    l1_t, l2_t, _ = _lgamma_exp_derivatives(t)
    s, s_minus = special.expit(eta), special.expit(-eta)
    s1 = s * s_minus
    log_y, log_1my = np.log(y), np.log1p(-y)
    nu = np.exp(t)
    slope_obs = nu * s1 * (log_y - log_1my)
    level_obs = nu * (s * log_y + s_minus * log_1my)
    f_e = mirror[0] - here[0] + slope_obs
    f_t = l1_t - here[1] - mirror[1] + level_obs
    f_ee = -here[2] - mirror[2] + slope_obs * (1.0 - 2.0 * s)
    f_et = mirror[3] - here[3] + slope_obs
    f_tt = l2_t - here[4] - mirror[4] + level_obs
    return f_e, f_t, f_ee, f_et, f_tt
