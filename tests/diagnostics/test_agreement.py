"""The agreement verdict: within tolerance with enough effective draws, and not otherwise."""

import numpy as np
import pandas as pd
import pytest

from pymc_minibatch_mh.diagnostics import agreement_summary
from pymc_minibatch_mh.diagnostics.agreement import coordinate_errors, verdict


def _draws(rng, n, shift=0.0, scale=1.0):
    """Independent draws of two coordinates with reference sds 1 and 2."""
    a = shift + scale * rng.normal(size=n)
    b = 2 * (shift + scale * rng.normal(size=n))
    return {"a": a, "b[0]": b}


def test_draws_of_the_same_posterior_agree():
    rng = np.random.default_rng(0)
    errors = coordinate_errors(_draws(rng, 4000), _draws(rng, 4000))
    assert list(errors.index) == ["a", "b[0]"]
    # Independent draws: the noise of a mean difference is sqrt(2 / n) reference sds.
    np.testing.assert_allclose(errors["mc_error_sd"], np.sqrt(2 / 4000), rtol=0.05)
    assert verdict(errors) == "agree"


def test_a_shifted_mean_disagrees():
    rng = np.random.default_rng(1)
    errors = coordinate_errors(_draws(rng, 4000, shift=0.5), _draws(rng, 4000))
    assert errors["mean_err_sd"].min() == pytest.approx(0.5, abs=0.06)
    assert verdict(errors) == "disagree"


def test_a_wrong_spread_disagrees():
    rng = np.random.default_rng(2)
    errors = coordinate_errors(_draws(rng, 4000, scale=1.5), _draws(rng, 4000))
    assert (errors["mean_err_sd"] < 0.1).all()  # the means agree: only the sds flag it
    assert verdict(errors) == "disagree"


def test_too_few_effective_draws_are_inconclusive_not_agreement():
    rng = np.random.default_rng(3)
    draws, reference = _draws(rng, 4000), _draws(rng, 4000)
    # The same draws, but said to be worth 20 independent ones (a sticky chain).
    errors = coordinate_errors(draws, reference, ess=dict.fromkeys(draws, 20.0))
    assert verdict(errors) == "inconclusive"
    # The same errors with the tolerance widened to what 20 draws can resolve: agree.
    assert verdict(errors, mean_tol=1.5) == "agree"


def test_bad_tolerances_and_nothing_to_compare_are_refused():
    errors = coordinate_errors({"a": np.arange(5.0)}, {"a": np.arange(5.0)})
    with pytest.raises(ValueError, match="mean_tol must be a positive number"):
        verdict(errors, mean_tol=0.0)
    with pytest.raises(ValueError, match="sd_tol must be a positive number"):
        verdict(errors, sd_tol=float("nan"))
    empty = coordinate_errors({"a": np.arange(5.0)}, {"other": np.arange(5.0)})
    with pytest.raises(ValueError, match="No coordinate is shared"):
        verdict(empty)


def test_summary_names_who_agrees_and_who_does_not():
    table = pd.DataFrame(
        {
            "verdict": ["reference", "agree", "disagree"],
            "max_mean_err_sd": [0.0, 0.05, 1.7],
            "max_sd_rel_err": [0.0, 0.04, 6.1],
            "mc_error_sd": [0.03, 0.05, 0.3],
        },
        index=["nuts", "good", "hot"],
    )
    text = agreement_summary(table, heading="On 5,000 rows.")
    lines = text.splitlines()
    assert lines[0] == "On 5,000 rows."
    assert "good: agrees" in lines[2] and "hot: DISAGREES" in lines[3]
    assert "largest sd error 610.0 % (tolerance 20 %)" in lines[3]
    assert lines[-1] == "Not shown to agree: hot (disagree)."


def test_an_error_within_its_monte_carlo_noise_is_inconclusive_not_disagreement():
    # 20 draws against 4000 of the same posterior: their errors are noise. Over 200 seeds
    # the familywise rule should almost never say "disagree" (it did about half the time
    # when any error beyond the tolerance counted).
    verdicts = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        errors = coordinate_errors({"x": rng.normal(size=20)}, {"x": rng.normal(size=4000)})
        verdicts.append(verdict(errors))
    assert verdicts.count("disagree") <= 10
    assert verdicts.count("agree") == 0  # 20 draws cannot resolve 0.2 sd
    # negative control: a real shift of 1 sd with the same 20 draws is seen
    rng = np.random.default_rng(0)
    shifted = coordinate_errors({"x": 1.0 + rng.normal(size=200)}, {"x": rng.normal(size=4000)})
    assert verdict(shifted) == "disagree"


def test_non_finite_errors_are_inconclusive():
    rng = np.random.default_rng(1)
    reference = {"x": rng.normal(size=4000)}
    with_nan = rng.normal(size=4000)
    with_nan[5] = np.nan
    assert verdict(coordinate_errors({"x": with_nan}, reference)) == "inconclusive"
    stuck = coordinate_errors({"x": np.zeros(4000)}, reference, ess={"x": 0.0})
    assert verdict(stuck) == "inconclusive"
    assert verdict(coordinate_errors({"x": rng.normal(size=4000)}, reference)) == "agree"
