"""The numpy split R-hat and bulk ESS, used by the steps' own per-chain check inside the
worker processes, agree with ArviZ's (the reference implementation)."""

import arviz as az
import numpy as np
import pytest
from chains import ar1_chains

from pymc_minibatch_mh.diagnostics.chain_statistics import (
    average_ranks,
    bulk_ess,
    chain_diagnostics,
    split_rhat,
)


def _cases():
    rng = np.random.default_rng(0)
    return {
        "independent": rng.normal(size=(2, 1000, 3)),
        "correlated": ar1_chains(rng, 0.9, (2, 1000, 3)),
        "antithetic": ar1_chains(rng, -0.5, (4, 500, 2)),
        "chains apart": rng.normal(size=(2, 1000, 2)) + np.array([0.0, 0.5])[:, None, None],
        "ties, odd length": np.round(ar1_chains(rng, 0.7, (2, 801, 2)), 1),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_matches_arviz(name):
    draws = _cases()[name]
    dataset = az.convert_to_dataset(draws)
    np.testing.assert_allclose(
        bulk_ess(draws), np.asarray(az.ess(dataset, method="bulk")["x"].values), rtol=0.02
    )
    np.testing.assert_allclose(
        split_rhat(draws), np.asarray(az.rhat(dataset)["x"].values), rtol=1e-6
    )


def test_disagreeing_chains_have_large_rhat_and_small_ess():
    rng = np.random.default_rng(1)
    apart = rng.normal(size=(2, 500, 1)) + np.array([0.0, 3.0])[:, None, None]
    assert split_rhat(apart)[0] > 1.5
    assert bulk_ess(apart)[0] < 0.05 * bulk_ess(rng.normal(size=(2, 500, 1)))[0]


def test_average_ranks_share_ties():
    ranks = average_ranks(np.array([[2.0], [1.0], [2.0], [5.0]]))
    np.testing.assert_array_equal(ranks[:, 0], [2.5, 1.0, 2.5, 4.0])


def test_a_constant_coordinate_has_no_ess():
    draws = np.zeros((1, 100, 2))
    draws[0, :, 1] = np.random.default_rng(3).normal(size=100)
    ess, rhat = chain_diagnostics(draws)
    assert ess[0] == 0.0 and ess[1] > 30
    assert rhat[0] == np.inf and rhat[1] == 1.0
