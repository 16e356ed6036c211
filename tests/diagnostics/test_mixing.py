"""check_mixing reads all chains of a result and says, in words, when they disagree or
barely move, with ArviZ's R-hat and bulk ESS (the numbers az.summary shows)."""

import arviz as az
import numpy as np
import pytest

from pymc_minibatch_mh.diagnostics import MixingWarning, check_mixing


def _result(**draws):
    return {"posterior": draws}


def test_independent_chains_pass_without_a_warning(recwarn):
    rng = np.random.default_rng(0)
    result = _result(a=rng.normal(size=(2, 1000)), b=rng.normal(size=(2, 1000, 3)))
    assert check_mixing(result) == {}
    assert not [w for w in recwarn if issubclass(w.category, MixingWarning)]


def test_chains_in_different_places_are_reported():
    rng = np.random.default_rng(1)
    apart = rng.normal(size=(2, 1000)) + np.array([[0.0], [2.0]])
    with pytest.warns(MixingWarning, match="not to be trusted.*apart: split R-hat"):
        problems = check_mixing(_result(apart=apart, fine=rng.normal(size=(2, 1000))))
    assert list(problems) == ["apart"] and "disagree" in problems["apart"]
    # The R-hat reported is ArviZ's.
    assert f"split R-hat {float(az.rhat(apart)):.3g} >" in problems["apart"]


def test_a_crawling_chain_is_reported_by_its_ess():
    rng = np.random.default_rng(2)
    # A random walk of tiny steps around a fixed point: both chains overlap, but each
    # coordinate takes hundreds of draws to move one sd.
    walk = np.cumsum(rng.normal(scale=0.02, size=(2, 1000)), axis=1)
    problems = check_mixing(_result(w=walk), warn=False)
    assert "barely move" in problems["w"]
    # The ESS reported is ArviZ's bulk ESS.
    assert f"bulk ESS {float(az.ess(walk, method='bulk')):.1f} from 2 x 1000" in problems["w"]


def test_a_stuck_coordinate_is_reported_and_a_single_chain_is_not_given_an_rhat():
    rng = np.random.default_rng(3)
    draws = np.zeros((1, 300, 2))
    draws[0, :, 1] = rng.normal(size=300)
    problems = check_mixing(_result(v=draws, fine=rng.normal(size=(1, 300))), warn=False)
    assert list(problems) == ["v"]
    assert "bulk ESS 0.0" in problems["v"] and "R-hat" not in problems["v"]
