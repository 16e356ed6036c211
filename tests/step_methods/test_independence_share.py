"""The share of independence moves of ``proposal="auto"`` after a tuning window: in many
dimensions a poor Gaussian fit may drop to 2 % of the moves, and a refitted one starts at
20 % (in few dimensions: at least 20 %, and a refit restarts at 50 %)."""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow
from pymc_minibatch_mh.step_methods.proposal_mixture import (
    HIGH_DIM,
    HIGH_DIM_P_FLOOR,
    INITIAL_P_INDEPENDENT,
    P_INDEPENDENT_RANGE,
)


def _step(ndim: int) -> MinibatchBarker:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, ndim))
    y = x @ rng.normal(size=ndim) * 0.3 + rng.normal(size=2000)
    with pm.Model():
        # A Student-t prior: with a Normal one the surrogate is a Gaussian, whose exact
        # flow replaces the mixture's independence moves.
        beta = pm.StudentT("beta", nu=4, mu=0, sigma=1, shape=ndim)
        pm.Normal("y", x @ beta, 1.0, observed=y)
        return MinibatchBarker(progressbar=False)


def _after_window(step, proposed: int, accepted: float) -> float:
    """Close a tuning window whose independence moves had this acceptance rate (relative
    to the method's best)."""
    ndim = step.tall_data.ndim
    window = CovarianceWindow(ndim)
    rng = np.random.default_rng(1)
    for _ in range(window.window_length):
        window = window.add(step.reference.reference + rng.normal(size=ndim) * 1e-3)
    step.cov_window = window
    step.independent_tally = (proposed, accepted * step.best_independent_rate * proposed)
    step._refit_mixture(window.mean, window.covariance())
    return step.proposal.p_independent


@pytest.mark.parametrize("ndim", [3, HIGH_DIM + 5])
def test_the_share_follows_the_acceptance_down_to_its_floor(ndim):
    step = _step(ndim)
    floor = HIGH_DIM_P_FLOOR if ndim > HIGH_DIM else P_INDEPENDENT_RANGE[0]
    # Accepted at 12 % of the best rate: no refit, share 1.6 x 0.12, clipped at the floor.
    assert _after_window(step, 100, 0.12) == pytest.approx(max(floor, 1.6 * 0.12))
    # Accepted well: the share rises to its ceiling.
    assert _after_window(step, 100, 0.9) == pytest.approx(P_INDEPENDENT_RANGE[1])


@pytest.mark.parametrize("ndim", [3, HIGH_DIM + 5])
def test_a_refitted_proposal_starts_lower_in_many_dimensions(ndim):
    step = _step(ndim)
    expected = P_INDEPENDENT_RANGE[0] if ndim > HIGH_DIM else INITIAL_P_INDEPENDENT
    assert _after_window(step, 100, 0.01) == pytest.approx(expected)
