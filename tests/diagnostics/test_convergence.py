"""The public diagnostics' R-hat and bulk ESS are ArviZ's own numbers, on ArviZ 0.x and 1.x."""

import arviz as az
import numpy as np
import pytest
from chains import ar1_chains

from pymc_minibatch_mh.diagnostics.convergence import coordinate_draws, ess_bulk, rhat


def test_ess_and_rhat_are_arviz_values_coordinate_by_coordinate():
    rng = np.random.default_rng(0)
    draws = ar1_chains(rng, 0.8, (3, 400, 4)) + np.array([0.0, 0.0, 0.5])[:, None, None]
    ess, rhats = ess_bulk(draws), rhat(draws)
    for j in range(4):
        one = draws[:, :, j]  # az.ess / az.rhat take one (chain, draw) array on both versions
        assert ess[j] == pytest.approx(float(az.ess(one, method="bulk")), rel=1e-10)
        assert rhats[j] == pytest.approx(float(az.rhat(one)), rel=1e-10)
    # The chains placed apart are seen as such; the autocorrelated draws as such.
    assert rhats.min() > 1.01 and ess.max() < 0.5 * draws.shape[0] * draws.shape[1]


def test_a_coordinate_that_never_moved_has_no_ess_and_infinite_rhat():
    draws = np.random.default_rng(1).normal(size=(2, 200, 2))
    draws[:, :, 0] = 0.7
    ess, rhats = ess_bulk(draws), rhat(draws)
    assert ess[0] == 0.0 and ess[1] > 100
    assert rhats[0] == np.inf and abs(rhats[1] - 1.0) < 0.05


def test_rhat_of_one_chain_is_refused_and_ess_works():
    draws = np.random.default_rng(2).normal(size=(1, 300))
    with pytest.raises(ValueError, match="at least two chains"):
        rhat(draws)
    assert ess_bulk(draws)[0] > 150


def test_draws_without_a_chain_axis_are_refused():
    with pytest.raises(ValueError, match=r"draws\[None\]"):
        ess_bulk(np.zeros(10))


def test_coordinate_draws_names_every_entry_in_row_major_order():
    post = {"a": np.zeros((2, 5)), "w": np.arange(2 * 5 * 6.0).reshape(2, 5, 2, 3)}
    draws = coordinate_draws(post, ["a", "w"])
    assert list(draws) == ["a", "w[0,0]", "w[0,1]", "w[0,2]", "w[1,0]", "w[1,1]", "w[1,2]"]
    np.testing.assert_array_equal(draws["w[1,0]"], post["w"][:, :, 1, 0])
