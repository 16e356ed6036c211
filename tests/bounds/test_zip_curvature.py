"""Bounds on the third derivatives of the zero-inflated Poisson log-likelihood
(:mod:`pymc_minibatch_mh.bounds.zip_curvature`)."""

import numpy as np
from finite_differences import channel_third_derivatives
from scipy import special

from pymc_minibatch_mh.bounds.zip_curvature import zip_third_derivatives


def _loglik(eta, t, y):
    """ZIP log-density; t the log-odds of the Poisson component."""
    mu = np.exp(eta)
    if y == 0:
        return np.logaddexp(0.0, t - mu) - np.logaddexp(0.0, t)
    return -np.logaddexp(0.0, -t) + y * eta - mu - special.gammaln(y + 1.0)


def test_bounds_hold_on_boxes_of_eta_and_log_odds(rng):
    """At random points of random boxes, for zero and positive counts, every third
    derivative is within its bound (up to the finite differences' error, 1e-4); the bound
    is attained to within a factor 3 somewhere (not vacuous), and a bound one tenth as
    large is violated (the negative control)."""
    worst, ratios = 0.0, []
    for _ in range(150):
        centre = rng.uniform(-3.0, 2.5)
        half = rng.uniform(0.05, 1.5)
        t_lo, t_hi = sorted(rng.uniform(-4.0, 4.0, 2))
        y = int(rng.choice([0, 0, 1, 3, 12]))
        bound = np.array(
            [
                b[0]
                for b in zip_third_derivatives(
                    np.array([y]),
                    np.exp(np.array([centre - half])),
                    np.exp(np.array([centre + half])),
                    t_hi,
                )
            ]
        )
        for _ in range(5):
            eta, t = rng.uniform(centre - half, centre + half), rng.uniform(t_lo, t_hi)
            actual = np.abs(channel_third_derivatives(lambda e, tt, y=y: _loglik(e, tt, y), eta, t))
            ratio = np.maximum(actual - 1e-4, 0.0) / np.maximum(bound, 1e-300)
            worst = max(worst, float(np.max(ratio)))
            ratios.append(float(np.max(actual / np.maximum(0.1 * bound, 1e-300))))
    assert worst <= 1.0
    assert worst > 1.0 / 3.0
    assert max(ratios) > 1.0


def test_a_zero_explained_by_the_inflation_gets_a_small_constant():
    """A zero count whose Poisson mean is at least 20 on the region: its bound carries the
    factor e^(t_hi - mu_lo), far below the Poisson rows' e^eta."""
    eee, eet, ett, ttt = zip_third_derivatives(
        np.array([0, 5]), np.array([20.0, 20.0]), np.array([30.0, 30.0]), 1.0
    )
    assert eee[0] < 1e-3 * eee[1] and eet[0] < 1e-3 and ett[0] < 1e-5
