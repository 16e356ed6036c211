"""HMC on a surrogate as an MH proposal: exact for the real target with its density ratio."""

import numpy as np
import pytest
from mh_chain import gaussian_logp, mh_chain, z_scores

from pymc_minibatch_mh.kernels.surrogate_hmc import SurrogateHMC

# Target: a correlated 2-D Gaussian. Surrogate: a Gaussian with the wrong mean, scales
# and correlation (as a Taylor proxy expanded away from the mode would be).
TARGET_MEAN = np.array([1.0, -2.0])
TARGET_COV = np.array([[1.0, 0.6], [0.6, 2.0]])
SURROGATE_MEAN = np.array([1.5, -1.5])
SURROGATE_COV = np.array([[1.6, 0.0], [0.0, 1.2]])
SURROGATE_PRECISION = np.linalg.inv(SURROGATE_COV)


def _surrogate(q):
    d = q - SURROGATE_MEAN
    return -0.5 * float(d @ SURROGATE_PRECISION @ d), -(SURROGATE_PRECISION @ d)


def _chain(rng, n, transitions, *, use_ratio=True):
    move = SurrogateHMC(np.linalg.cholesky(SURROGATE_COV), transitions)
    logp = gaussian_logp(TARGET_MEAN, TARGET_COV)

    def propose(q):
        return move(rng, q, 0.6, _surrogate)[:2]

    return mh_chain(rng, n, np.zeros(2), propose, logp, use_ratio=use_ratio)


def _z_scores(draws):
    return z_scores(draws, TARGET_MEAN, TARGET_COV)


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
    move = SurrogateHMC(np.linalg.cholesky(SURROGATE_COV), 3)
    q = np.array([0.3, 0.1])
    proposal, log_q_ratio, accept = move(rng, q, 50.0, _surrogate)
    np.testing.assert_array_equal(proposal, q)
    assert log_q_ratio == 0.0
    assert accept < 1e-6
