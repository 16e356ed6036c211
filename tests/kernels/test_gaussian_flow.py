"""The exact Hamiltonian flow on a Gaussian surrogate as an MH proposal: the right
Gaussian, reversible for it, and exact for another target with its density ratio."""

import math

import arviz as az
import numpy as np
import pytest
from mh_chain import gaussian_logp, mh_chain, z_scores
from scipy.stats import multivariate_normal

from pymc_minibatch_mh.kernels.gaussian_flow import GaussianFlow

SURROGATE_MEAN = np.array([1.5, -1.5])
SURROGATE_COV = np.array([[1.6, 0.3], [0.3, 1.2]])
SURROGATE_PRECISION = np.linalg.inv(SURROGATE_COV)
# The target (not the surrogate): a correlated Gaussian with another mean and shape.
TARGET_MEAN = np.array([1.0, -2.0])
TARGET_COV = np.array([[1.0, 0.6], [0.6, 2.0]])


def _flow(angles=(0.5 * math.pi, 0.75 * math.pi)) -> GaussianFlow:
    return GaussianFlow.from_quadratic(
        SURROGATE_PRECISION, SURROGATE_PRECISION @ SURROGATE_MEAN, angles
    )


def test_the_quadratic_gives_the_gaussian():
    flow = _flow()
    np.testing.assert_allclose(flow.mean, SURROGATE_MEAN, rtol=1e-12)
    chol = flow.precision_chol
    np.testing.assert_allclose(chol @ chol.T, SURROGATE_PRECISION, rtol=1e-12)
    # The log density differs from the Gaussian's by a constant.
    points = np.random.default_rng(3).normal(size=(5, 2))
    gaps = [
        flow.log_density(p) - multivariate_normal(SURROGATE_MEAN, SURROGATE_COV).logpdf(p)
        for p in points
    ]
    np.testing.assert_allclose(gaps, gaps[0], atol=1e-12)


def test_the_inverse_factor_is_lower_triangular_and_inverts_the_factor():
    """FlyMC's compiled kicks read only the lower triangle of ``inverse_chol``."""
    rng = np.random.default_rng(4)
    a = rng.normal(size=(7, 7))
    flow = GaussianFlow.from_quadratic(a @ a.T + 7 * np.eye(7), rng.normal(size=7))
    inverse = flow.inverse_chol
    assert np.all(np.triu(inverse, 1) == 0.0)
    np.testing.assert_allclose(inverse @ flow.precision_chol, np.eye(7), atol=1e-12)


def test_a_quadratic_that_curves_upwards_is_refused():
    with pytest.raises(np.linalg.LinAlgError):
        GaussianFlow.from_quadratic(np.diag([1.0, -0.5]), np.zeros(2))


def test_moves_at_a_fixed_time_are_the_rotation_and_reversible(rng):
    """At time t the move is ``N(m + cos t (q - m), sin^2 t S)``; that kernel satisfies
    detailed balance with the surrogate (checked at random pairs), and the draws have its
    mean and covariance."""
    t = 0.6 * math.pi
    flow = _flow((t, t))
    q = np.array([2.5, 0.0])
    moved = np.array([flow(rng, q)[0] for _ in range(20_000)])
    centre = SURROGATE_MEAN + math.cos(t) * (q - SURROGATE_MEAN)
    cov = math.sin(t) ** 2 * SURROGATE_COV
    se = np.sqrt(np.diag(cov) / moved.shape[0])
    assert np.all(np.abs(moved.mean(axis=0) - centre) < 4 * se)
    np.testing.assert_allclose(np.cov(moved.T), cov, atol=0.05)

    def log_kernel(frm, to):
        return multivariate_normal(
            SURROGATE_MEAN + math.cos(t) * (frm - SURROGATE_MEAN), cov
        ).logpdf(to)

    surrogate = multivariate_normal(SURROGATE_MEAN, SURROGATE_COV)
    for a, b in rng.normal(size=(5, 2, 2)) * 2.0:
        forward = surrogate.logpdf(a) + log_kernel(a, b)
        backward = surrogate.logpdf(b) + log_kernel(b, a)
        assert forward == pytest.approx(backward, abs=1e-10)
        # The returned ratio is the surrogate's: log q(a | b) - log q(b | a).
        ratio = flow.log_density(a) - flow.log_density(b)
        assert ratio == pytest.approx(log_kernel(b, a) - log_kernel(a, b), abs=1e-10)


def _chain(rng, n, *, use_ratio=True):
    flow = _flow()
    logp = gaussian_logp(TARGET_MEAN, TARGET_COV)
    return mh_chain(rng, n, np.zeros(2), lambda q: flow(rng, q), logp, use_ratio=use_ratio)


def _z_scores(draws):
    return z_scores(draws, TARGET_MEAN, TARGET_COV)


def test_flow_moves_are_exact_for_another_target(rng):
    draws = _chain(rng, 20_000)
    assert np.all(_z_scores(draws) < 4.0), _z_scores(draws)


def test_negative_control_without_the_density_ratio_fails(rng):
    """Ignoring the ratio samples the product of target and surrogate."""
    draws = _chain(rng, 20_000, use_ratio=False)
    assert np.any(_z_scores(draws) > 4.0)


def test_draws_on_the_surrogate_itself_are_antithetic(rng):
    """With the target equal to the surrogate every move is accepted, and successive draws
    are negatively correlated: a mean's ESS exceeds the number of draws."""
    flow = _flow()
    q = SURROGATE_MEAN.copy()
    draws = np.empty((4000, 2))
    for i in range(draws.shape[0]):
        q = flow(rng, q)[0]
        draws[i] = q
    ess = az.ess(draws[None, :, 0])
    assert float(ess) > 1.5 * draws.shape[0]
