"""With a Normal prior on every coordinate and a recognised GLM, the surrogate posterior is
a Gaussian, and the local move of ``proposal="auto"`` is its exact flow (no independence
moves, one MH step per draw but for Barker's three); any other prior keeps HMC on the
surrogate with independence moves."""

from functools import cache

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import Austere, MinibatchBarker, TunaMH
from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow
from pymc_minibatch_mh.kernels.gaussian_flow import GaussianFlow
from pymc_minibatch_mh.kernels.surrogate_hmc import SurrogateHMC

STEPS_PER_DRAW = {MinibatchBarker: 3, Austere: 1, TunaMH: 1}
SAMPLE = dict(chains=2, cores=1, tune=500, progressbar=False, random_seed=7)


def _logistic(prior: str) -> pm.Model:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3000, 3))
    y = (rng.random(3000) < 1.0 / (1.0 + np.exp(-(x @ [0.5, -0.3, 0.2])))).astype(int)
    with pm.Model() as model:
        if prior == "normal":
            beta = pm.Normal("beta", 0, 2, shape=3)
        else:
            beta = pm.StudentT("beta", nu=4, mu=0, sigma=2, shape=3)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
    return model


@pytest.mark.parametrize("step_class", list(STEPS_PER_DRAW))
def test_a_normal_prior_moves_by_the_exact_flow(step_class):
    with _logistic("normal"):
        step = step_class(progressbar=False)
    assert step.uses_gaussian_flow
    assert isinstance(step.proposal.random_walk, GaussianFlow)
    assert step.proposal.p_independent == 0.0
    assert step.steps_per_draw == STEPS_PER_DRAW[step_class]
    # The flow's Gaussian is the surrogate: their log densities differ by a constant.
    flow = step._surrogate_flow()
    points = step.reference.reference + np.random.default_rng(0).normal(size=(4, 3)) * 0.05
    gaps = [flow.log_density(p) - step._surrogate_density(p)[0] for p in points]
    np.testing.assert_allclose(gaps, gaps[0], atol=1e-8 * abs(gaps[0]) + 1e-8)


@pytest.mark.parametrize("step_class", list(STEPS_PER_DRAW))
def test_other_priors_keep_hmc_on_the_surrogate(step_class):
    with _logistic("student_t"):
        step = step_class(progressbar=False)
    assert not step.uses_gaussian_flow
    assert isinstance(step.proposal.random_walk, SurrogateHMC)
    assert step.proposal.p_independent > 0.0


def test_the_flow_follows_a_recentred_proxy():
    """A new expansion point gives a new surrogate, and the flow is rebuilt for it."""
    with _logistic("normal"):
        step = TunaMH(progressbar=False)
    before = step._surrogate_flow()
    step._recentre(step.reference.reference + 0.02)
    after = step._surrogate_flow()
    assert after is not before
    points = step.reference.reference + np.random.default_rng(1).normal(size=(3, 3)) * 0.05
    gaps = [after.log_density(p) - step._surrogate_density(p)[0] for p in points]
    np.testing.assert_allclose(gaps, gaps[0], atol=1e-8 * abs(gaps[0]) + 1e-8)


@cache
def _nuts_draws() -> np.ndarray:
    with _logistic("normal"):
        idata = pm.sample(draws=4000, **SAMPLE)
    return idata.posterior["beta"].values.reshape(-1, 3)


def _tuna_errors() -> tuple[np.ndarray, np.ndarray, float]:
    """TunaMH's errors against NUTS: of the means in posterior sds, of the sds relative,
    and the share of draws that moved."""
    with _logistic("normal"):
        idata = pm.sample(step=TunaMH(progressbar=False), draws=2000, **SAMPLE)
    got, want = idata.posterior["beta"].values.reshape(-1, 3), _nuts_draws()
    sd = want.std(axis=0)
    moved = float(np.mean(np.any(np.diff(got[:2000], axis=0) != 0, axis=1)))
    return np.abs(got.mean(axis=0) - want.mean(axis=0)) / sd, got.std(axis=0) / sd - 1.0, moved


def test_sampling_with_the_flow_matches_nuts():
    """TunaMH (exact) with the flow against NUTS on the same small model: means within
    0.15 posterior sd and sds within 15 %; the draws are not frozen."""
    mean_err, sd_err, moved = _tuna_errors()
    assert np.all(mean_err < 0.15) and np.all(np.abs(sd_err) < 0.15), (mean_err, sd_err)
    assert moved > 0.5


def test_negative_control_without_the_flow_ratio_fails(monkeypatch):
    """Dropping the flow's density ratio samples posterior x surrogate (about the
    posterior squared here): the sds come out about 1 / sqrt(2) of NUTS's."""
    move = GaussianFlow.__call__

    def without_ratio(self, rng, position, scaling=None):
        return move(self, rng, position)[0], 0.0

    monkeypatch.setattr(GaussianFlow, "__call__", without_ratio)
    mean_err, sd_err, _ = _tuna_errors()
    assert np.any(mean_err >= 0.15) or np.any(np.abs(sd_err) >= 0.15)


def _close_window(step, flow_accepted: float) -> None:
    """End a tuning window in which the flow's moves were accepted at this rate."""
    window = CovarianceWindow(3)
    rng = np.random.default_rng(2)
    for _ in range(window.window_length):
        window = window.add(step.reference.reference + rng.normal(size=3) * 1e-3)
    step.cov_window = window
    step.flow_tally = (100, 100 * flow_accepted * step.best_independent_rate)
    step._refit_mixture(window.mean, window.covariance())


@pytest.mark.parametrize("step_class", [TunaMH, MinibatchBarker])
def test_a_flow_that_is_rarely_accepted_gives_way_to_the_mixture(step_class):
    """A Gaussian surrogate that does not fit the posterior (its flow's moves accepted at
    20 % of the best rate) is left for HMC on the surrogate with independence moves, and
    those moves' steps per draw; reset_tuning restores the flow for the next chain.
    Control: at 90 % the flow stays."""
    with _logistic("normal"):
        kept, left = step_class(progressbar=False), step_class(progressbar=False)
    _close_window(kept, 0.9)
    _close_window(left, 0.2)
    assert isinstance(kept.proposal.random_walk, GaussianFlow)
    assert kept.steps_per_draw == STEPS_PER_DRAW[step_class]
    assert isinstance(left.proposal.random_walk, SurrogateHMC)
    assert left.proposal.p_independent > 0.0
    assert left.steps_per_draw == left._default_steps()
    left.reset_tuning()
    assert isinstance(left.proposal.random_walk, GaussianFlow)
    assert left.steps_per_draw == STEPS_PER_DRAW[step_class]
