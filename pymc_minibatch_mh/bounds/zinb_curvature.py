"""Bounds on the third derivatives of the zero-inflated and hurdle negative binomial.

A row reads three channels: ``eta`` (the log mean ``mu = e^eta`` of the negative binomial
part), ``a = log alpha`` (its dispersion) and ``t = logit psi`` (the log-odds of the
count part). With ``s = eta - a``, ``p = sigmoid(s) = mu / (alpha + mu)`` and
``q = 1 - p``, the log-probability of a zero under the negative binomial is

    g(eta, a) = log NB(0) = -alpha softplus(s),

whose derivatives are (``alpha = e^a``; ``dp/d eta = p q``, ``dp/da = -p q``)

    g_e = -alpha p,          g_a = alpha (p - softplus(s)),
    g_ee = -alpha p q,       g_ea = -alpha p^2,          g_aa = alpha (p + p^2 - softplus(s)),
    g_eee = -alpha p q (q - p),   g_eea = -2 alpha p^2 q,   g_eaa = alpha p^2 (q - p),
    g_aaa = alpha (2 p + p^2 - softplus(s) - p q - 2 p^2 q).

``alpha p = mu q`` is at most ``min(alpha, mu)`` and ``alpha softplus(s) <= alpha e^s = mu``,
so every one of them is at most a small multiple of ``min(alpha, mu)`` or of
``alpha softplus(s)``.

**Zero-inflated.** A zero has ``f = log sigmoid(-t) + softplus(v)`` with ``v = t + g``
(``P(0) = 1 - psi + psi e^g``); a positive count ``f = log sigmoid(t) + log NB(y)``, whose
channels separate (the negative binomial's bounds in ``(eta, a)``,
:func:`negative_binomial_third_derivatives`, and ``|d^3 log sigmoid| <= sqrt(3)/18`` in
``t``). For a zero, with ``v``'s derivatives those of ``g`` (and ``v_t = 1``),

    f_ijk = s''(v) v_i v_j v_k + s'(v) (v_ij v_k + v_ik v_j + v_jk v_i) + s(v) v_ijk

(``s`` the sigmoid, the derivative of softplus), plus ``-s''(-t)`` in ``f_ttt``. On a
region where ``t <= t_hi``, ``s, s', s''`` are at most 1, 1/4, sqrt(3)/18 and at most
``e^v <= exp(t_hi + g_hi)``, ``g_hi = -alpha_lo softplus(eta_lo - a_lo)`` the largest ``g``
(``alpha softplus(eta - a)`` grows with ``eta`` and with ``alpha``): a zero explained by the
inflation (a large mean on the whole region) gets a small bound, as for the Poisson.

**Hurdle.** A zero has ``f = log sigmoid(-t)``; a positive count
``f = log sigmoid(t) + log NB(y) + k(eta, a)`` with ``k = -log(1 - e^g)`` the truncation
term. ``k``'s third derivatives are bounded (``k`` behaves like ``-eta`` as ``mu -> 0`` and
vanishes as ``mu`` grows) and their suprema over the rows' box of ``(eta, a)`` are found
numerically (:func:`~pymc_minibatch_mh.bounds.box_suprema.box_suprema`); with
``K(g) = -log(1 - e^g)``, ``K' = r = 1 / (e^{-g} - 1)``, ``K'' = r + r^2`` and
``K''' = (r + r^2)(1 + 2 r)``, and the chain rule as above.

Entries are returned in the order of :data:`ENTRIES`; the Frobenius norm of the symmetric
tensor counts each entry as often as its index permutations (:data:`MULTIPLICITY`).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from pymc_minibatch_mh.bounds.box_suprema import box_suprema
from pymc_minibatch_mh.bounds.sigmoid_derivatives import SIGMOID_D1, SIGMOID_D2

#: The distinct entries of a symmetric third-derivative tensor in ``(e, a, t)``.
ENTRIES = ("eee", "eea", "eet", "eaa", "eat", "ett", "aaa", "aat", "att", "ttt")
#: How often each entry appears in the full tensor (its index permutations).
MULTIPLICITY = np.array([1, 3, 3, 3, 6, 3, 1, 3, 3, 1], dtype=np.float64)
#: Grid points per axis (eta, log alpha) for the truncation term's suprema.
_GRID = (801, 101)
#: Below this log mean the truncation term is ``-eta`` to double precision (its third
#: derivatives vanish there), so its box starts no lower.
_ETA_FLOOR = -40.0


def negative_binomial_third_derivatives(y, mu_lo, mu_hi, alpha_lo, alpha_hi) -> tuple:
    """Bounds on ``|f_eee|, |f_eea|, |f_eaa|, |f_aaa|`` of ``log NB(y | e^eta, e^a)`` for
    ``mu`` in ``[mu_lo, mu_hi]`` and ``alpha`` in ``[alpha_lo, alpha_hi]`` (per row).

    ``f_eee = -(alpha + y) p q (q - p)``; ``f_eea = p q (q - p) y - 2 alpha p^2 q`` with
    ``p^2 q <= 4/27``; ``|f_eaa| <= sqrt(3)/18 |y - mu|``; ``f_aaa`` is the polygamma sum
    ``sum_{k < y} h(alpha / (alpha + k))`` with ``|h(r)| <= r`` (at most
    ``alpha (psi(alpha + y) - psi(alpha)) - 1``, increasing in ``alpha``) plus terms at most
    ``alpha log(1 + mu / alpha) + 3 alpha + sqrt(3)/18 y``.
    """
    y = np.asarray(y, dtype=np.float64)
    k = SIGMOID_D2  # sup |p q (q - p)|
    eee = (alpha_hi + y) * k
    eea = k * y + 8.0 / 27.0 * alpha_hi
    eaa = k * np.maximum(np.abs(y - mu_lo), np.abs(y - mu_hi))
    polygamma_part = np.where(
        y >= 1.0, alpha_hi * (special.digamma(alpha_hi + y) - special.digamma(alpha_hi)) - 1.0, 0.0
    )
    with np.errstate(over="ignore"):
        aaa = (
            np.maximum(polygamma_part, 0.0)
            + alpha_hi * np.log1p(mu_hi / alpha_lo)
            + 3.0 * alpha_hi
            + k * y
        )
    return eee, eea, eaa, aaa


def _zero_link_bounds(mu_hi, eta_hi, a_lo, alpha_hi) -> tuple:
    """Upper bounds on ``|g_e|, |g_a|, |g_ee|, |g_ea|, |g_aa|, |g_eee|, |g_eea|, |g_eaa|,
    |g_aaa|`` (module docstring) for ``eta <= eta_hi``, ``a >= a_lo``, ``alpha <=
    alpha_hi`` (``p`` and ``softplus(s)`` grow with ``s = eta - a``)."""
    s_hi = eta_hi - a_lo
    big_p = special.expit(s_hi)
    with np.errstate(over="ignore"):
        softplus = np.logaddexp(0.0, s_hi)
        a1 = np.minimum(np.minimum(alpha_hi * big_p, mu_hi), alpha_hi)  # alpha p
        asp = np.minimum(alpha_hi * softplus, mu_hi)  # alpha softplus(s)
        ve = a1
        va = np.minimum(alpha_hi * (softplus - big_p), mu_hi)
        vee = np.minimum(a1, 0.25 * alpha_hi)
        vea = a1 * big_p
        vaa = np.maximum(a1 * (1.0 + big_p), asp)
        veee = np.minimum(a1, SIGMOID_D2 * alpha_hi)
        veea = np.minimum(2.0 * a1 * big_p, 8.0 / 27.0 * alpha_hi)
        veaa = a1 * big_p
        vaaa = 3.5 * a1 + asp
    return ve, va, vee, vea, vaa, veee, veea, veaa, vaaa


def zinb_third_derivatives(y, mu_lo, mu_hi, alpha_range: tuple[float, float], t_hi: float) -> tuple:
    """Per-row bounds on the ten entries of :data:`ENTRIES` for the zero-inflated negative
    binomial over a region (module docstring): ``mu_lo``, ``mu_hi`` each row's range of the
    mean there, ``alpha_range`` the dispersion's, ``t_hi`` the largest ``logit psi``."""
    y = np.asarray(y)
    zero = y == 0
    alpha_lo, alpha_hi = alpha_range
    a_lo = np.log(alpha_lo)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        eta_lo, eta_hi = np.log(mu_lo), np.log(mu_hi)
        g_hi = -alpha_lo * np.logaddexp(0.0, eta_lo - a_lo)
        e_v = np.exp(t_hi + g_hi)
    s0, s1, s2 = np.minimum(1.0, e_v), np.minimum(SIGMOID_D1, e_v), np.minimum(SIGMOID_D2, e_v)
    ve, va, vee, vea, vaa, veee, veea, veaa, vaaa = _zero_link_bounds(mu_hi, eta_hi, a_lo, alpha_hi)
    with np.errstate(over="ignore", invalid="ignore"):  # inf: the row gets no bound
        zeros = (
            s2 * ve**3 + 3.0 * s1 * vee * ve + s0 * veee,
            s2 * ve * ve * va + s1 * (vee * va + 2.0 * vea * ve) + s0 * veea,
            s2 * ve * ve + s1 * vee,
            s2 * ve * va * va + s1 * (2.0 * vea * va + vaa * ve) + s0 * veaa,
            s2 * ve * va + s1 * vea,
            s2 * ve,
            s2 * va**3 + 3.0 * s1 * vaa * va + s0 * vaaa,
            s2 * va * va + s1 * vaa,
            s2 * va,
            s2 + SIGMOID_D2,
        )
    eee, eea, eaa, aaa = negative_binomial_third_derivatives(y, mu_lo, mu_hi, alpha_lo, alpha_hi)
    nothing = np.zeros(np.shape(y))
    counts = (eee, eea, nothing, eaa, nothing, nothing, aaa, nothing, nothing, SIGMOID_D2)
    return tuple(np.where(zero, z, c) for z, c in zip(zeros, counts, strict=True))


def _truncation_derivatives(eta, a) -> tuple:
    """``(k_eee, k_eea, k_eaa, k_aaa)`` of ``k = -log(1 - e^g)`` (module docstring)."""
    alpha = np.exp(a)
    s = eta - a
    p = special.expit(s)
    q = special.expit(-s)
    softplus = np.logaddexp(0.0, s)
    g = -alpha * softplus
    ge, ga = -alpha * p, alpha * (p - softplus)
    gee, gea, gaa = -alpha * p * q, -alpha * p * p, alpha * (p + p * p - softplus)
    geee, geea = -alpha * p * q * (q - p), -2.0 * alpha * p * p * q
    geaa = alpha * p * p * (q - p)
    gaaa = alpha * (2.0 * p + p * p - softplus - p * q - 2.0 * p * p * q)
    r = 1.0 / np.expm1(-g)
    k1, k2 = r, r + r * r
    k3 = k2 * (1.0 + 2.0 * r)
    return (
        k3 * ge**3 + 3.0 * k2 * gee * ge + k1 * geee,
        k3 * ge * ge * ga + k2 * (gee * ga + 2.0 * gea * ge) + k1 * geea,
        k3 * ge * ga * ga + k2 * (2.0 * gea * ga + gaa * ge) + k1 * geaa,
        k3 * ga**3 + 3.0 * k2 * gaa * ga + k1 * gaaa,
    )


def truncation_suprema(eta_range: tuple[float, float], a_range: tuple[float, float]):
    """``sup |k_eee|, |k_eea|, |k_eaa|, |k_aaa|`` of the hurdle's truncation term over the
    box ``eta_range x a_range`` (``a = log alpha``); below ``eta = -40`` the term is
    ``-eta`` to double precision, so the box is cut there."""
    eta_lo, eta_hi = eta_range
    eta_lo = max(eta_lo, _ETA_FLOOR)
    eta_hi = max(eta_hi, eta_lo)
    return box_suprema(_truncation_derivatives, (eta_lo, eta_hi), a_range, _GRID)


def hurdle_nb_third_derivatives(
    y, mu_lo, mu_hi, alpha_range: tuple[float, float], truncation: np.ndarray
) -> tuple:
    """Per-row bounds on the ten entries of :data:`ENTRIES` for the hurdle negative
    binomial; ``truncation`` holds :func:`truncation_suprema` over the positive rows'
    box."""
    y = np.asarray(y)
    positive = y > 0
    alpha_lo, alpha_hi = alpha_range
    eee, eea, eaa, aaa = negative_binomial_third_derivatives(y, mu_lo, mu_hi, alpha_lo, alpha_hi)
    nothing = np.zeros(np.shape(y))
    t_eee, t_eea, t_eaa, t_aaa = (float(v) for v in truncation)
    return (
        np.where(positive, eee + t_eee, 0.0),
        np.where(positive, eea + t_eea, 0.0),
        nothing,
        np.where(positive, eaa + t_eaa, 0.0),
        nothing,
        nothing,
        np.where(positive, aaa + t_aaa, 0.0),
        nothing,
        nothing,
        np.full(np.shape(y), SIGMOID_D2),
    )


def frobenius(entries, free: tuple[bool, bool] = (True, True)) -> np.ndarray:
    """Frobenius norm of the symmetric tensor from its :data:`ENTRIES`; entries with an
    index of a fixed channel (``free`` for ``a`` and ``t``) are left out: the move does
    not change that channel."""
    free_a, free_t = free
    total = 0.0
    with np.errstate(over="ignore"):  # inf: the row is evaluated exactly (exact_rows)
        for name, value, count in zip(ENTRIES, entries, MULTIPLICITY, strict=True):
            if ("a" in name and not free_a) or ("t" in name and not free_t):
                continue
            total = total + count * np.asarray(value, dtype=np.float64) ** 2
    return np.sqrt(total)


def _negative_binomial_low(y, eta, a) -> tuple:
    """``(f_e, f_a, f_ee, f_ea, f_aa)`` of ``log NB(y | e^eta, e^a)`` (with ``p``, ``q`` of the
    module docstring): ``f_e = y q - alpha p``, ``f_ee = -(alpha + y) p q``,
    ``f_a = alpha (psi(y + alpha) - psi(alpha) + log q) + alpha p - y q``,
    ``f_ea = p f_e`` and ``f_aa = f_a + alpha^2 (psi'(y + alpha) - psi'(alpha)) + y q +
    (mu - y) p q``."""
    alpha = np.exp(a)
    s = eta - a
    p, q = special.expit(s), special.expit(-s)
    log_q = special.log_expit(-s)
    with np.errstate(over="ignore"):
        mu = np.exp(eta)
    f_e = y * q - alpha * p
    f_ee = -(alpha + y) * p * q
    digammas = special.digamma(y + alpha) - special.digamma(alpha)
    f_a = alpha * (digammas + log_q) + alpha * p - y * q
    trigammas = special.polygamma(1, y + alpha) - special.polygamma(1, alpha)
    f_aa = alpha * (digammas + log_q) + alpha * alpha * trigammas + alpha * p
    f_aa = f_aa + np.where(np.isfinite(mu), (mu - y) * p * q, alpha * q)  # mu p q -> alpha q
    return f_e, f_a, f_ee, p * f_e, f_aa


def _zero_link_low(eta, a) -> tuple:
    """``(g, g_e, g_a, g_ee, g_ea, g_aa)`` of ``g = log NB(0) = -alpha softplus(eta - a)``."""
    alpha = np.exp(a)
    s = eta - a
    p, q = special.expit(s), special.expit(-s)
    log_q = special.log_expit(-s)
    g = alpha * log_q
    return (
        g,
        -alpha * p,
        alpha * (p + log_q),
        -alpha * p * q,
        -alpha * p * p,
        (alpha * (p + p * p + log_q)),
    )


def channel_derivatives(family: str, y, eta, a, t) -> tuple:
    """Value-free derivatives of a row's log-likelihood in ``(eta, a, t)`` for
    ``"zinb_log"`` or ``"hurdle_nb_log"``: ``(f_e, f_a, f_t, f_ee, f_ea, f_et, f_aa, f_at,
    f_tt)`` per row (module docstring; ``a``, ``t`` scalars or per row)."""
    y = np.asarray(y, dtype=np.float64)
    eta = np.asarray(eta, dtype=np.float64)
    a = np.broadcast_to(np.asarray(a, dtype=np.float64), eta.shape)
    t = np.broadcast_to(np.asarray(t, dtype=np.float64), eta.shape)
    zero = y == 0
    nb_e, nb_a, nb_ee, nb_ea, nb_aa = _negative_binomial_low(y, eta, a)
    s_t, s_mt = special.expit(t), special.expit(-t)
    curv_t = -s_t * s_mt  # second derivative of log sigmoid(+-t)
    nothing = np.zeros(eta.shape)
    if family == "zinb_log":
        g, ge, ga, gee, gea, gaa = _zero_link_low(eta, a)
        v = t + g
        s1, s2 = special.expit(v), special.expit(v) * special.expit(-v)
        zeros = (
            s1 * ge,
            s1 * ga,
            s1 - s_t,
            s2 * ge * ge + s1 * gee,
            s2 * ge * ga + s1 * gea,
            s2 * ge,
            s2 * ga * ga + s1 * gaa,
            s2 * ga,
            s2 + curv_t,
        )
        counts = (nb_e, nb_a, s_mt, nb_ee, nb_ea, nothing, nb_aa, nothing, curv_t)
        return tuple(np.where(zero, z, c) for z, c in zip(zeros, counts, strict=True))
    # Hurdle: the counts add k = -log(1 - e^g), k_i = r g_i, k_ij = (r + r^2) g_i g_j + r g_ij.
    g, ge, ga, gee, gea, gaa = _zero_link_low(eta, a)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        r = 1.0 / np.expm1(-g)
        r2 = r + r * r
        k = (r * ge, r * ga, r2 * ge * ge + r * gee, r2 * ge * ga + r * gea, r2 * ga * ga + r * gaa)
    # Where mu underflows next to alpha, k = -eta to double precision.
    k = tuple(
        np.where(np.isfinite(part), part, fallback)
        for part, fallback in zip(k, (-1.0, 0.0, 0.0, 0.0, 0.0), strict=True)
    )
    positive = (
        nb_e + k[0],
        nb_a + k[1],
        s_mt,
        nb_ee + k[2],
        nb_ea + k[3],
        nothing,
        nb_aa + k[4],
        nothing,
        curv_t,
    )
    zeros = (nothing, nothing, -s_t, nothing, nothing, nothing, nothing, nothing, curv_t)
    return tuple(np.where(zero, z, c) for z, c in zip(zeros, positive, strict=True))
