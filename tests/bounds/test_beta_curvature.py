"""Third derivatives of the Beta-regression log-likelihood and their suprema on a box
(:mod:`pymc_minibatch_mh.bounds.beta_curvature`)."""

import numpy as np
import pytest
from finite_differences import channel_third_derivatives
from scipy import special

from pymc_minibatch_mh.bounds.beta_curvature import (
    beta_a_derivatives,
    beta_a_suprema,
    beta_row_terms,
)
from pymc_minibatch_mh.bounds.sigmoid_derivatives import SIGMOID_D1, SIGMOID_D2, SIGMOID_D3


def _loglik(eta, t, y):
    """The Beta log-density with mean sigmoid(eta) and precision e^t."""
    nu = np.exp(t)
    a, b = nu * special.expit(eta), nu * special.expit(-eta)
    return (
        special.gammaln(nu)
        - special.gammaln(a)
        - special.gammaln(b)
        + (a - 1) * np.log(y)
        + (b - 1) * np.log1p(-y)
    )


@pytest.mark.parametrize(("eta", "t"), [(0.3, 0.5), (-2.0, 2.0), (3.0, -1.0), (-6.0, 1.0)])
def test_observation_free_derivatives_match_finite_differences(eta, t):
    def a_part(e, tt):
        nu = np.exp(tt)
        return (
            special.gammaln(nu)
            - special.gammaln(nu * special.expit(e))
            - special.gammaln(nu * special.expit(-e))
        )

    expected = channel_third_derivatives(a_part, eta, t)
    np.testing.assert_allclose(beta_a_derivatives(eta, t), expected, rtol=1e-4, atol=1e-4)


def test_the_row_bound_covers_the_whole_third_derivative(rng):
    """|f_xyz| <= sup |A_xyz| + the observation's term, at random points of a box and
    observations from 1e-8 to 1 - 1e-8; the observation's term alone is not enough (the
    negative control)."""
    box = (-4.0, 3.0, -0.5, 3.0)
    sup = beta_a_suprema(*box)
    y = np.array([1e-8, 1e-3, 0.2, 0.5, 0.9, 1 - 1e-8])
    logit_y, log_extreme = beta_row_terms(y)
    nu_hi = np.exp(box[3])
    obs_terms = np.stack(
        [
            nu_hi * logit_y * SIGMOID_D3,
            nu_hi * logit_y * SIGMOID_D2,
            nu_hi * logit_y * SIGMOID_D1,
            nu_hi * log_extreme,
        ]
    )
    worst, worst_without_a = 0.0, 0.0
    for _ in range(60):
        eta, t = rng.uniform(box[0], box[1]), rng.uniform(box[2], box[3])
        for i, y_i in enumerate(y):
            actual = np.abs(
                channel_third_derivatives(lambda e, tt, y_i=y_i: _loglik(e, tt, y_i), eta, t)
            )
            # Finite differences are accurate to ~1e-4 relative here.
            worst = max(worst, float(np.max(actual / (sup + obs_terms[:, i]) - 1e-4)))
            worst_without_a = max(worst_without_a, float(np.max(actual / obs_terms[:, i])))
    assert worst <= 1.0
    assert worst > 0.2  # not vacuous
    assert worst_without_a > 1.0


def test_suprema_are_attained_on_the_box(rng):
    """The suprema are at least the largest value at random points and at most 0.2 %
    above the largest value on a much finer grid."""
    box = (-1.0, 5.0, 1.0, 2.5)
    sup = beta_a_suprema(*box)
    etas, ts = np.meshgrid(np.linspace(-1, 5, 1201), np.linspace(1, 2.5, 301), indexing="ij")
    fine = np.abs(np.stack(beta_a_derivatives(etas, ts))).reshape(4, -1).max(axis=1)
    points = np.abs(
        np.stack(beta_a_derivatives(rng.uniform(-1, 5, 5000), rng.uniform(1, 2.5, 5000)))
    ).max(axis=1)
    assert np.all(sup >= points) and np.all(sup >= fine * (1 - 1e-9))
    assert np.all(sup <= fine * 1.002)
