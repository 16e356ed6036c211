"""HMC on a surrogate as an MH proposal: exact for the real target with its density ratio."""

import math

import arviz as az
import numpy as np
import pytest

from pymc_minibatch_mh.kernels.surrogate_hmc import SurrogateHMC

# Target: a correlated 2-D Gaussian. Surrogate: a Gaussian with the wrong mean, scales
# and correlation (as a Taylor proxy expanded away from the mode would be).
TARGET_MEAN = np.array([1.0, -2.0])
TARGET_COV = np.array([[1.0, 0.6], [0.6, 2.0]])
SURROGATE_MEAN = np.array([1.5, -1.5])
SURROGATE_COV = np.array([[1.6, 0.0], [0.0, 1.2]])


def _gaussian(mean, cov):
    precision = np.linalg.inv(cov)

    def logp(q):
        d = q - mean
        return -0.5 * float(d @ precision @ d)

    def density(q):
        d = q - mean
        return -0.5 * float(d @ precision @ d), -(precision @ d)

    return logp, density


def _chain(rng, n, transitions, *, use_ratio=True):
    logp, _ = _gaussian(TARGET_MEAN, TARGET_COV)
    _, surrogate = _gaussian(SURROGATE_MEAN, SURROGATE_COV)
    move = SurrogateHMC(np.linalg.cholesky(SURROGATE_COV), transitions)
    q = np.zeros(2)
    draws = np.empty((n, 2))
    for i in range(n):
        proposal, log_q_ratio, _ = move(rng, q, 0.6, surrogate)
        log_ratio = logp(proposal) - logp(q) + (log_q_ratio if use_ratio else 0.0)
        if math.log(1.0 - rng.random()) <= log_ratio:
            q = proposal
        draws[i] = q
    return draws


def _z_scores(draws):
    """ESS-scaled errors of the means and of the variances (delta method)."""
    out = []
    for j in range(2):
        x = draws[:, j]
        ess = float(az.ess(x[None, :]))
        sd = math.sqrt(TARGET_COV[j, j])
        out.append(abs(x.mean() - TARGET_MEAN[j]) / (sd / math.sqrt(ess)))
        # var of the sample variance of a Gaussian: 2 sigma^4 / ess
        out.append(abs(x.var() - sd**2) / (sd**2 * math.sqrt(2.0 / ess)))
    return np.array(out)


@pytest.mark.parametrize("transitions", [1, 4])
def test_surrogate_moves_are_exact_for_the_target(transitions, rng):
    draws = _chain(rng, 20_000, transitions)
    assert np.all(_z_scores(draws) < 4.0), _z_scores(draws)


def test_negative_control_without_the_density_ratio_fails(rng):
    """Ignoring the proposal's density ratio samples a mixture of target and surrogate."""
    draws = _chain(rng, 20_000, 4, use_ratio=False)
    assert np.any(_z_scores(draws) > 4.0)


def test_rejected_inner_transitions_return_the_same_point(rng):
    """A diverging step size rejects every inner transition: no move, ratio 0."""
    _, surrogate = _gaussian(SURROGATE_MEAN, SURROGATE_COV)
    move = SurrogateHMC(np.linalg.cholesky(SURROGATE_COV), 3)
    q = np.array([0.3, 0.1])
    proposal, log_q_ratio, accept = move(rng, q, 50.0, surrogate)
    np.testing.assert_array_equal(proposal, q)
    assert log_q_ratio == 0.0
    assert accept < 1e-6
