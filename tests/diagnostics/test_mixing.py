"""check_mixing reads all chains of a result and says, in words, when they disagree or
barely move; the step's own per-chain check shares its ESS computation."""

import numpy as np
import pytest

from pymc_minibatch_mh.diagnostics import MixingWarning, check_mixing
from pymc_minibatch_mh.diagnostics.mixing import chain_diagnostics


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


def test_a_crawling_chain_is_reported_by_its_ess():
    rng = np.random.default_rng(2)
    # A random walk of tiny steps around a fixed point: both chains overlap, but each
    # coordinate takes hundreds of draws to move one sd.
    walk = np.cumsum(rng.normal(scale=0.02, size=(2, 1000)), axis=1)
    problems = check_mixing(_result(w=walk), warn=False)
    assert "barely move" in problems["w"]


def test_a_constant_coordinate_has_no_ess():
    draws = np.zeros((1, 100, 2))
    draws[0, :, 1] = np.random.default_rng(3).normal(size=100)
    ess, rhat = chain_diagnostics(draws)
    assert ess[0] == 0.0 and ess[1] > 30
    assert rhat[0] == np.inf and rhat[1] == 1.0
