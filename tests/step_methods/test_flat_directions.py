"""The independence proposal widened at the end of tuning where the posterior is flat
(:func:`pymc_minibatch_mh.step_methods.region_check.cover_flat_directions`).

Its effect on a chain is tested among the slow tests (FlyMC on the ordinal
quasi-separation case, with a negative control without it); here, what it changes."""

from types import SimpleNamespace

import numpy as np

from pymc_minibatch_mh.kernels.proposals import (
    IndependenceProposal,
    ProposalMixture,
    RandomWalkProposal,
)
from pymc_minibatch_mh.step_methods.region_check import cover_flat_directions


def _mixture(p_independent: float = 0.4) -> ProposalMixture:
    walk = RandomWalkProposal(chol=np.diag([0.1, 0.2, 0.3]))
    independent = IndependenceProposal(centre=np.array([1.0, -2.0, 0.5]), chol=np.eye(3), df=7.0)
    return ProposalMixture(walk, independent, p_independent)


def test_the_independence_moves_take_the_widened_shape_and_nothing_else_changes():
    shape = np.diag([1.0, 40.0, 1.0])
    step = SimpleNamespace(proposal=_mixture())
    before = step.proposal
    cover_flat_directions(step, shape)
    after = step.proposal
    np.testing.assert_array_equal(after.independent.chol, shape)
    np.testing.assert_array_equal(after.independent.chol_inv, np.diag([1.0, 1 / 40, 1.0]))
    np.testing.assert_array_equal(after.independent.centre, before.independent.centre)
    assert after.independent.df == before.independent.df
    assert after.random_walk is before.random_walk
    assert after.p_independent == before.p_independent
    # A draw along the flat axis now reaches tens of units from the centre.
    rng = np.random.default_rng(0)
    far = [after.independent(rng, before.independent.centre, 1.0)[0][1] for _ in range(200)]
    assert np.std(far) > 20.0


def test_negative_control_steps_without_independence_moves_keep_their_proposal():
    shape = np.diag([1.0, 40.0, 1.0])
    walk = RandomWalkProposal(chol=np.eye(3))
    only_walk = SimpleNamespace(proposal=walk)
    cover_flat_directions(only_walk, shape)
    assert only_walk.proposal is walk
    exact_hmc = SimpleNamespace(proposal=_mixture(p_independent=0.0))
    before = exact_hmc.proposal
    cover_flat_directions(exact_hmc, shape)
    assert exact_hmc.proposal is before
