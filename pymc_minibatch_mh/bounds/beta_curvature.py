"""Third derivatives of the Beta-regression log-likelihood, and their suprema on a box.

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
"""

from __future__ import annotations

import numpy as np
from scipy import special

#: Safety factor on the numerically found suprema (refined to ~1e-8 relative).
_MARGIN = 1.001
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
    bounded optimiser from its grid maximum, times a small safety margin."""
    from scipy import optimize  # imported when needed: 0.3 s of every step's setup

    etas = np.linspace(eta_lo, eta_hi, _GRID[0])
    ts = np.linspace(t_lo, t_hi, _GRID[1] if t_hi > t_lo else 1)
    grid_eta, grid_t = np.meshgrid(etas, ts, indexing="ij")
    values = np.abs(np.stack(beta_a_derivatives(grid_eta, grid_t)))
    if not np.all(np.isfinite(values)):
        return np.full(4, np.inf)
    out = np.empty(4)
    box = [(eta_lo, eta_hi), (t_lo, t_hi)]
    for k in range(4):
        i, j = np.unravel_index(int(np.argmax(values[k])), values[k].shape)
        best = float(values[k, i, j])
        found = optimize.minimize(
            lambda p, k=k: -abs(float(beta_a_derivatives(p[0], p[1])[k])),
            x0=np.array([grid_eta[i, j], grid_t[i, j]]),
            bounds=box,
            method="L-BFGS-B",
        )
        out[k] = _MARGIN * max(best, -float(found.fun))
    return out


def beta_row_terms(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``|logit y|`` and ``max(|log y|, |log(1 - y)|)`` per row (module docstring)."""
    y = np.asarray(y, dtype=np.float64)
    log_y, log_1my = np.log(y), np.log1p(-y)
    return np.abs(log_y - log_1my), np.maximum(np.abs(log_y), np.abs(log_1my))
