"""Derivatives of the hurdle Poisson log-likelihood, and bounds on the third.

With ``mu = e^eta`` the mean of the Poisson before truncation at zero and ``t`` the
log-odds of a count above zero (``psi = sigmoid(t)``), a row's log-likelihood is

    y = 0:  f = log sigmoid(-t),
    y > 0:  f = log sigmoid(t) + y eta - mu - log(1 - e^{-mu}) - lgamma(y + 1).

The channels separate (no mixed derivatives): ``f_ttt = -sigmoid''(t)`` or
``+sigmoid''(-t)``, at most sqrt(3)/18; a zero does not depend on ``eta``; a positive
count has ``f_eee = -mu - k'''(eta)`` with ``k(eta) = log(1 - exp(-e^eta))``. With
``r(mu) = 1 / (e^mu - 1)``, ``k' = mu r``, ``k'' = mu r + mu^2 r'`` and
``k''' = mu r + 3 mu^2 r' + mu^3 r''``, where ``r' = -e^mu r^2`` and
``r'' = e^mu (e^mu + 1) r^3``. ``k`` behaves like ``eta`` for small ``mu`` and like
``-e^{-mu}`` for large, so ``k'''`` is bounded; its supremum over the rows' range of
``eta`` on the region is found on a grid (refined, times a small margin).

At a point: a zero has ``f_t = -sigmoid(t)`` and ``f_tt = -s'(t)``; a positive count
``f_t = sigmoid(-t)``, ``f_tt = -s'(t)``, ``f_e = y - mu - k'`` and ``f_ee = -mu - k''``, with
``k' = mu r`` and ``k'' = mu r - mu^2 / (4 sinh^2(mu / 2))`` (as ``e^mu r^2`` is
``1 / (4 sinh^2(mu / 2))``).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.sigmoid_derivatives import SIGMOID_D2


def truncation_third_derivative(eta):
    """``k'''(eta)`` for ``k(eta) = log(1 - exp(-e^eta))`` (module docstring)."""
    eta = np.asarray(eta, dtype=np.float64)
    mu = np.exp(eta)
    with np.errstate(over="ignore", invalid="ignore"):
        r = 1.0 / np.expm1(mu)
        e_mu = np.exp(mu)
        r1 = -e_mu * r * r
        r2 = e_mu * (e_mu + 1.0) * r**3
        value = mu * r + 3.0 * mu * mu * r1 + mu**3 * r2
    # Far in either tail k''' is 0 to double precision (and the terms overflow).
    return np.where(np.isfinite(value), value, 0.0)


def hurdle_third_derivatives(
    y: np.ndarray, mu_hi: np.ndarray, truncation_sup: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row bounds on ``|f_eee|`` and ``|f_ttt|`` on a region (module docstring);
    ``mu_hi`` the row's largest Poisson mean there, ``truncation_sup`` the supremum of
    ``|k'''|`` over the rows' range of ``eta``. The mixed derivatives are 0."""
    positive = np.asarray(y) > 0
    eee = np.where(positive, mu_hi + truncation_sup, 0.0)
    return eee, np.full(eee.shape, SIGMOID_D2)


def hurdle_channel_derivatives(y: np.ndarray, eta: np.ndarray, t) -> tuple:
    """``(f_e, f_t, f_ee, f_et, f_tt)`` per row at ``(eta, t)`` (module docstring)."""
    y = np.asarray(y)
    eta = np.asarray(eta, dtype=np.float64)
    t = np.broadcast_to(np.asarray(t, dtype=np.float64), eta.shape)
    positive = y > 0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mu = np.exp(eta)
        k1 = np.where(mu < 1e-300, 1.0, mu / np.expm1(mu))  # mu r -> 1 as mu -> 0
        k1 = np.where(np.isfinite(k1), k1, 0.0)
        half = np.sinh(0.5 * mu)
        tail = np.where(mu < 1e-8, 1.0 - mu * mu / 12.0, (0.5 * mu / half) ** 2)
        tail = np.where(np.isfinite(tail), tail, 0.0)
    s1_t = special.expit(t) * special.expit(-t)
    f_e = np.where(positive, y - mu - k1, 0.0)
    f_t = np.where(positive, special.expit(-t), -special.expit(t))
    f_ee = np.where(positive, -mu - (k1 - tail), 0.0)
    return f_e, f_t, f_ee, np.zeros_like(f_e), -s1_t
