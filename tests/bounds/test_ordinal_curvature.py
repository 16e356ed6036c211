"""Derivatives of the ordinal log-likelihood ``log(F(a) - F(b))`` and their suprema on a
box (:mod:`pymc_minibatch_mh.bounds.ordinal_curvature`)."""

import numpy as np
import pytest
from scipy import special

from pymc_minibatch_mh.bounds.ordinal_curvature import (
    _norms,
    ordinal_derivatives,
    ordinal_suprema,
)

FAMILIES = ("ordered_logistic", "ordered_probit")


def _h(family, a, b):
    cdf = special.expit if family == "ordered_logistic" else special.ndtr
    if a + b > 0:  # the upper tails, where the cdfs round to 1
        return np.log(cdf(-b) - cdf(-a))
    return np.log(cdf(a) - cdf(b))


def _finite_differences(family, a, b, h=1e-3):
    """All nine derivatives of ``h`` by central differences (``b = -inf`` or ``a = +inf``
    allowed: that channel's entries are 0)."""

    def f(da, db):
        return _h(family, a + da, b + db)

    def d(order_a, order_b):
        # Central differences of the mixed partial derivative of the given orders.
        weights = {0: [(0, 1.0)], 1: [(1, 0.5), (-1, -0.5)], 2: [(1, 1.0), (0, -2.0), (-1, 1.0)]}
        weights[3] = [(2, 0.5), (1, -1.0), (-1, 1.0), (-2, -0.5)]
        total = 0.0
        for i, wa in weights[order_a]:
            for j, wb in weights[order_b]:
                if (order_b and not np.isfinite(b)) or (order_a and not np.isfinite(a)):
                    return 0.0
                total += wa * wb * f(i * h, j * h)
        return total / h ** (order_a + order_b)

    orders = [(1, 0), (0, 1), (2, 0), (1, 1), (0, 2), (3, 0), (2, 1), (1, 2), (0, 3)]
    return np.array([d(i, j) for i, j in orders])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["interior", "lowest", "highest"])
def test_derivatives_match_finite_differences(family, kind, rng):
    """At random channels the closed forms agree with central differences (to 2e-4
    relative); the same formulas at a channel off by 0.05 do not (negative control)."""
    worst, shifted = 0.0, 0.0
    for _ in range(60):
        a = rng.uniform(-5.0, 5.0)
        b = a - rng.uniform(0.2, 3.0)
        if kind == "lowest":
            b = -np.inf
        elif kind == "highest":
            b, a = a, np.inf
        numeric = _finite_differences(family, a, b)
        exact = np.array([float(v) for v in ordinal_derivatives(family, a, b)])
        scale = 1.0 + np.abs(exact)
        worst = max(worst, float(np.max(np.abs(numeric - exact) / scale)))
        moved = np.array(
            [float(v) for v in ordinal_derivatives(family, a + 0.05, b + 0.05 * (kind != "lowest"))]
        )
        shifted = max(shifted, float(np.max(np.abs(numeric - moved) / scale)))
    assert worst < 2e-4
    assert shifted > 1e-3


@pytest.mark.parametrize("family", FAMILIES)
def test_suprema_bound_every_value_in_the_box(family, rng):
    """The suprema over random boxes are at least the norms at 2000 random points of the
    box, and within 0.2 % of the largest on a grid five times finer than the search's (the
    search finds the maximum, it does not overshoot)."""
    for _ in range(4):
        a_lo = rng.uniform(-6.0, 2.0)
        a_range = (a_lo, a_lo + rng.uniform(0.5, 5.0))
        g_lo = rng.uniform(0.05, 1.5)
        gap_range = (g_lo, g_lo * rng.uniform(1.0, 1.5))
        sup = ordinal_suprema(family, "interior", a_range, gap_range)
        a = rng.uniform(*a_range, size=2000)
        g = rng.uniform(*gap_range, size=2000)
        values = np.array([np.max(v) for v in _norms(family, a, a - g)])
        assert np.all(sup >= values)
        fine_a, fine_g = np.meshgrid(
            np.linspace(*a_range, 2001), np.linspace(*gap_range, 101), indexing="ij"
        )
        fine = np.array([np.max(v) for v in _norms(family, fine_a, fine_a - fine_g)])
        assert np.all(sup >= fine)
        assert np.all(sup <= 1.002 * fine)


def test_third_derivative_grows_as_the_gap_closes():
    """An interior category's third derivative grows like 2 / g^3 as the gap g shrinks:
    the bound needs a gap bounded away from 0 (why the cutpoints' region matters)."""
    small = ordinal_suprema("ordered_logistic", "interior", (-1.0, 1.0), (0.01, 0.01))[2]
    large = ordinal_suprema("ordered_logistic", "interior", (-1.0, 1.0), (1.0, 1.0))[2]
    assert small > 1e5 and small > 1e4 * large
