import numpy as np
import pytest

from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow, ScaleAdaptation, adapt_scale
from pymc_minibatch_mh.kernels.proposals import IndependenceProposal, RandomWalkProposal


def test_scale_adaptation_moves_towards_target():
    state = ScaleAdaptation(0.0)
    up = adapt_scale(state, accept_prob=0.9, target=0.2)
    down = adapt_scale(state, accept_prob=0.0, target=0.2)
    assert up.log_scale > 0 > down.log_scale
    assert adapt_scale(state, float("nan"), 0.2).log_scale == down.log_scale
    assert up.n_updates == 1


def test_scale_adaptation_keeps_a_minimum_gain():
    state = ScaleAdaptation(0.0, n_updates=10**6)
    assert adapt_scale(state, 1.0, 0.0, min_gain=0.02).log_scale == pytest.approx(0.02)
    assert adapt_scale(ScaleAdaptation(0.0), 1.0, 0.0, initial_gain=5.0).log_scale == 5.0


def test_covariance_window_estimates_covariance(rng):
    cov = np.array([[2.0, 0.9], [0.9, 1.0]])
    draws = rng.multivariate_normal([1.0, -1.0], cov, size=100)
    window = CovarianceWindow(2, first_window=100)
    for x in draws:
        window = window.add(x)
    assert window.complete
    np.testing.assert_allclose(window.covariance(), np.cov(draws.T), rtol=0.1)
    nxt = window.next_window()
    assert nxt.count == 0 and nxt.window_length == 200


def test_covariance_window_refuses_a_stuck_chain():
    window = CovarianceWindow(2, first_window=10)
    for _ in range(10):
        window = window.add(np.zeros(2))
    assert window.covariance() is None


def test_random_walk_proposal(rng):
    cov = np.array([[4.0, 1.0], [1.0, 1.0]])
    proposal = RandomWalkProposal.from_covariance(cov, 2)
    steps = np.array([proposal(rng, np.zeros(2), 0.5)[0] for _ in range(20_000)])
    np.testing.assert_allclose(np.cov(steps.T), 0.25 * cov, rtol=0.05, atol=0.01)
    assert proposal(rng, np.zeros(2), 1.0)[1] == 0.0
    assert RandomWalkProposal.from_covariance(np.array([1.0, 2.0]), 2).chol.shape == (2, 2)


def test_random_walk_proposal_rejects_bad_covariance():
    with pytest.raises(ValueError, match="shape"):
        RandomWalkProposal.from_covariance(np.eye(3), 2)
    with pytest.raises(ValueError, match="positive definite"):
        RandomWalkProposal.from_covariance(np.array([[1.0, 2.0], [2.0, 1.0]]), 2)


@pytest.mark.parametrize("df", [7.0, np.inf])
def test_independence_proposal_ratio_is_the_multivariate_t_density_ratio(rng, df):
    """``log q(q) - log q(q')`` against scipy's multivariate t / normal with the same
    location and scale; a wrong scale (negative control) gives another ratio."""
    from scipy import stats

    d, scaling = 3, 1.7
    a = rng.normal(size=(d, d))
    chol = np.linalg.cholesky(a @ a.T + d * np.eye(d))
    centre = rng.normal(size=d)
    proposal = IndependenceProposal(centre=centre, chol=chol, df=df)
    shape = scaling**2 * chol @ chol.T

    def log_q(x, matrix):
        if np.isinf(df):
            return stats.multivariate_normal(centre, matrix).logpdf(x)
        return stats.multivariate_t(centre, matrix, df=df).logpdf(x)

    for _ in range(5):
        position = centre + rng.normal(size=d)
        new, log_ratio = proposal(rng, position, scaling)
        expected = log_q(position, shape) - log_q(new, shape)
        np.testing.assert_allclose(log_ratio, expected, rtol=1e-10, atol=1e-10)
        wrong = log_q(position, 2.0 * shape) - log_q(new, 2.0 * shape)
        assert not np.isclose(log_ratio, wrong, rtol=1e-6)
