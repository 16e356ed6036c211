"""The zero-inflated and hurdle negative binomial in three channels (eta, log alpha,
logit psi), as TunaMH's constants read them: closed-form first and second derivatives and
the third-derivative bounds against finite differences, with negative controls."""

import itertools

import numpy as np
import pytest

from pymc_minibatch_mh.bounds.zinb_curvature import (
    ENTRIES,
    channel_derivatives,
    hurdle_nb_third_derivatives,
    truncation_suprema,
    zinb_third_derivatives,
)
from pymc_minibatch_mh.likelihood.glm_likelihoods import family_loglik

FAMILIES = ("zinb_log", "hurdle_nb_log")


def _loglik(family, y, u):
    eta, a, t = u
    params = {"alpha": np.exp(a), "odds": np.exp(t)}
    return float(family_loglik(family, np.array([eta]), np.array([y]), params)[0])


def _low_derivatives(family, y, u, h=1e-4):
    """Gradient and Hessian in ``(eta, a, t)`` by central differences."""
    eye = h * np.eye(3)
    grad = np.array(
        [(_loglik(family, y, u + e) - _loglik(family, y, u - e)) / (2 * h) for e in eye]
    )
    hess = np.empty((3, 3))
    for i, j in itertools.product(range(3), repeat=2):
        ei, ej = eye[i], eye[j]
        hess[i, j] = (
            _loglik(family, y, u + ei + ej)
            - _loglik(family, y, u + ei - ej)
            - _loglik(family, y, u - ei + ej)
            + _loglik(family, y, u - ei - ej)
        ) / (4 * h * h)
    return grad, hess


def _closed_form(family, y, u):
    d = [float(np.ravel(v)[0]) for v in channel_derivatives(family, np.array([y]), *u[:1], *u[1:])]
    hess = np.array([[d[3], d[4], d[5]], [d[4], d[6], d[7]], [d[5], d[7], d[8]]])
    return np.array(d[:3]), hess


@pytest.mark.parametrize("family", FAMILIES)
def test_derivatives_match_finite_differences(family, rng):
    """At random points and observations the closed-form gradient and Hessian agree with
    central differences to 1e-4 (relative to 1 + |value|); at a linear predictor off by
    0.05 they do not (negative control)."""
    worst, shifted = 0.0, 0.0
    for _ in range(150):
        y = float(rng.choice([0, 0, 1, 3, 12]))
        u = np.array([rng.uniform(-4.0, 3.0), rng.uniform(-2.0, 3.0), rng.uniform(-3.0, 3.0)])
        grad, hess = _low_derivatives(family, y, u)
        exact = _closed_form(family, y, np.array([u[0], u[1], u[2]]))
        wrong = _closed_form(family, y, np.array([u[0] + 0.05, u[1], u[2]]))
        for numeric, closed, off in ((grad, exact[0], wrong[0]), (hess, exact[1], wrong[1])):
            scale = 1.0 + np.abs(closed)
            worst = max(worst, float(np.max(np.abs(numeric - closed) / scale)))
            shifted = max(shifted, float(np.max(np.abs(numeric - off) / scale)))
    assert worst < 1e-4
    assert shifted > 1e-3


def _third_derivatives(family, y, u, h=2e-3):
    """The ten distinct third derivatives (:data:`ENTRIES`) by central differences."""
    axis = {"e": 0, "a": 1, "t": 2}
    out = []
    for name in ENTRIES:
        steps = [h * np.eye(3)[axis[c]] for c in name]
        total = 0.0
        for signs in itertools.product((-1, 1), repeat=3):
            point = u + sum(s * step for s, step in zip(signs, steps, strict=True))
            total += np.prod(signs) * _loglik(family, y, point)
        out.append(total / (8 * h**3))
    return np.array(out)


@pytest.mark.parametrize("family", FAMILIES)
def test_third_derivative_bounds_hold_on_random_boxes(family, rng):
    """On random boxes of the mean, the dispersion and the odds, the ten third derivatives
    at random points inside are within the bounds (up to the differences' error); bounds
    a tenth as large are exceeded somewhere (negative control)."""
    worst, tenth = 0.0, 0.0
    for _ in range(60):
        y = float(rng.choice([0, 0, 1, 4, 30]))
        eta_lo = rng.uniform(-3.0, 2.5)
        eta_hi = eta_lo + rng.uniform(0.1, 1.5)
        a_lo = rng.uniform(-1.5, 2.5)
        a_hi = a_lo + rng.uniform(0.0, 1.0)
        t_lo = rng.uniform(-3.0, 2.0)
        t_hi = t_lo + rng.uniform(0.0, 1.5)
        mu = (np.array([np.exp(eta_lo)]), np.array([np.exp(eta_hi)]))
        alphas = (np.exp(a_lo), np.exp(a_hi))
        if family == "zinb_log":
            bound = zinb_third_derivatives(np.array([y]), *mu, alphas, t_hi)
        else:
            truncation = truncation_suprema((eta_lo, eta_hi), (a_lo, a_hi))
            bound = hurdle_nb_third_derivatives(np.array([y]), *mu, alphas, truncation)
        bound = np.array([float(np.ravel(b)[0]) for b in bound])
        for _ in range(4):
            u = np.array(
                [rng.uniform(eta_lo, eta_hi), rng.uniform(a_lo, a_hi), rng.uniform(t_lo, t_hi)]
            )
            third = np.abs(_third_derivatives(family, y, u))
            slack = 1e-4 * (1.0 + np.max(third))  # the differences' error
            worst = max(worst, float(np.max((third - slack) / np.maximum(bound, 1e-300))))
            tenth = max(tenth, float(np.max(third / np.maximum(0.1 * bound, 1e-300))))
    assert worst <= 1.0
    assert tenth > 1.0
