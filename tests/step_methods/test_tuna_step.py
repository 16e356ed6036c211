"""TunaMH inside pm.sample: stats, chi tuning, bounds, control variates, errors."""

import numpy as np
import pymc as pm
import pytest
from scipy import special
from step_sampling import N_DATA, QUIET, sample_step

from pymc_minibatch_mh.bounds.lipschitz import (
    EuclideanMetric,
    LipschitzBound,
    UnsupportedBound,
    WhitenedMetric,
)
from pymc_minibatch_mh.bounds.taylor_remainder import taylor_remainder_bound
from pymc_minibatch_mh.diagnostics import posterior as _posterior
from pymc_minibatch_mh.diagnostics import sample_stats as _stats
from pymc_minibatch_mh.diagnostics.groups import group
from pymc_minibatch_mh.kernels.tuna import BoundViolation
from pymc_minibatch_mh.likelihood.linear_predictor import UnsupportedLikelihood
from pymc_minibatch_mh.step_methods.tuna import TunaMH

N = N_DATA
STATS = {
    "accepted",
    "accept",
    "batch_size",
    "n_lik_evals",
    "scaling",
    "poisson_draws",
    "n_kept",
    "chi",
}
SAMPLE = {"chains": 1, "cores": 1, "progressbar": False, "compute_convergence_checks": False}
# The Lipschitz-bound path whatever the defaults: no control variates, random-walk proposal.
LIPSCHITZ = {"control_variates": False, "proposal": "rw"}


def _sample(model, step_kwargs=None, **kwargs):
    return sample_step(model, TunaMH, step_kwargs, **kwargs)


def test_defaults_run_and_report_stats(logistic_model):
    idata = _sample(logistic_model, random_seed=1)
    stats = _stats(idata)
    assert STATS <= set(stats.data_vars)
    assert np.asarray(_posterior(idata)["beta"]).shape == (1, 100, 2)
    batch = np.asarray(stats["batch_size"])
    draws = np.asarray(stats["poisson_draws"])
    kept = np.asarray(stats["n_kept"])
    assert np.all((batch >= 0) & (batch <= N))
    assert np.all(np.asarray(stats["n_lik_evals"]) == 2 * batch)
    poisson_steps = draws > 0
    assert np.array_equal(batch[poisson_steps], draws[poisson_steps])
    assert np.all((kept >= 0) & (kept <= draws))
    accepted = np.asarray(stats["accepted"])
    assert accepted.dtype == np.float64  # as PyMC's Metropolis (compound steps)
    assert set(np.unique(accepted)) <= {0.0, 1.0}
    accept = np.asarray(stats["accept"])
    assert np.all((accept >= 0) & (accept <= 1))


def test_the_bound_is_found_by_inspecting_the_model(logistic_model, logistic_data):
    x, _ = logistic_data
    with logistic_model:
        step = TunaMH(precondition=False, **LIPSCHITZ)
    design = np.column_stack([np.ones(N), x])  # q = (alpha, beta): intercept column first
    np.testing.assert_allclose(step.bound.c, np.linalg.norm(design, axis=1))
    assert isinstance(step.bound.metric, EuclideanMetric)
    assert step.index_table.size == N


def test_automatic_chi_is_tuned_then_fixed(logistic_model):
    with logistic_model:
        step = TunaMH()
        assert step.chi is None
        idata = pm.sample(
            step=step, draws=200, tune=300, discard_tuned_samples=False, random_seed=3, **SAMPLE
        )
    warm = group(idata, "warmup_sample_stats")
    chi_tune = np.asarray(warm["chi"]).ravel()
    chi_draws = np.asarray(_stats(idata)["chi"]).ravel()
    assert np.unique(chi_tune).size > 10  # follows the proposals while tuning
    assert np.unique(chi_draws).size == 1  # fixed afterwards: the chain is exact
    assert chi_draws[0] == pytest.approx(step.chi)
    # The heuristic: chi C^2 M^2 <= 1 for about 90% of the last window of proposals.
    assert np.mean(step.chi_adaptation.values * step.chi <= 1.0 + 1e-12) == pytest.approx(0.9)
    step.reset_tuning()
    assert step.chi is None
    assert step.bound is step._untuned_bound


def test_chi_is_frozen_when_the_proposal_changes_on_the_last_tuning_step(logistic_model):
    """Covariance windows close after 100 and 300 tuning steps: with tune=300 the proposal
    (and the whitened bound) change on the very last one, which empties the chi window.
    chi after tuning is the one of the window filled while tuning, not a re-seed."""
    with logistic_model:
        step = TunaMH(**LIPSCHITZ, steps_per_draw=1)  # one tuning step per draw
        idata = pm.sample(
            step=step, draws=60, tune=300, discard_tuned_samples=False, random_seed=7, **SAMPLE
        )
    assert step.cov_window.window == 2 and step.cov_window.count == 0  # closed at step 300
    assert isinstance(step.bound.metric, WhitenedMetric)
    chi_tune = np.asarray(group(idata, "warmup_sample_stats")["chi"]).ravel()
    chi_draws = np.asarray(_stats(idata)["chi"]).ravel()
    assert np.all(chi_draws == chi_draws[0])  # fixed after tuning
    assert chi_draws[0] == chi_tune[-1]  # the chi of the last tuning step's (full) window
    assert step.chi == chi_draws[0]
    assert step.chi_adaptation.count >= step.chi_adaptation.window


def test_zero_bound_needs_no_pilot_proposals(gaussian_model, monkeypatch):
    """Normal likelihood, fixed sigma: the Taylor remainders vanish, C = 0, chi is
    irrelevant. Each step makes one proposal (no 100 pseudo-proposals per step)."""
    with gaussian_model:
        step = TunaMH(control_variates=True, progressbar=False)
    assert step.bound.C == 0.0
    n_proposals = 0
    propose = step._propose

    def counting(state):
        nonlocal n_proposals
        n_proposals += 1
        return propose(state)

    monkeypatch.setattr(step, "_propose", counting)
    with gaussian_model:
        idata = pm.sample(step=step, draws=25, tune=25, random_seed=1, **SAMPLE)
    assert n_proposals == 50 * step.steps_per_draw
    assert np.all(np.asarray(_stats(idata)["chi"]) == 1.0)
    assert np.all(np.asarray(_stats(idata)["batch_size"]) == 0)


def test_without_tuning_chi_is_set_once(logistic_model):
    idata = _sample(logistic_model, {"tune": False, "scaling": 0.01}, tune=0, random_seed=2)
    chi = np.asarray(_stats(idata)["chi"]).ravel()
    assert np.unique(chi).size == 1 and chi[0] > 0
    assert np.allclose(np.asarray(_stats(idata)["scaling"]), 0.01)


def test_fixed_chi_is_used(logistic_model):
    idata = _sample(logistic_model, {"chi": 0.05}, random_seed=2)
    assert np.all(np.asarray(_stats(idata)["chi"]) == 0.05)


def test_preconditioned_bound_follows_the_tuned_proposal(logistic_model, logistic_data):
    with logistic_model:
        step = TunaMH(**LIPSCHITZ)
        pm.sample(step=step, draws=20, tune=400, random_seed=4, **SAMPLE)
    assert step.proposal.chol is not None  # the covariance was adapted
    assert isinstance(step.bound.metric, WhitenedMetric)
    np.testing.assert_array_equal(step.bound.metric.chol, step.proposal.chol)
    x, _ = logistic_data
    design = np.column_stack([np.ones(N), x])
    np.testing.assert_allclose(step.bound.c, np.linalg.norm(design @ step.proposal.chol, axis=1))
    np.testing.assert_allclose(step.index_table.masses(), step.bound.c / step.bound.C, atol=1e-12)
    step.reset_tuning()
    assert isinstance(step.bound.metric, EuclideanMetric)


def test_steps_per_draw_accumulates_work(logistic_model):
    one = _stats(_sample(logistic_model, {"chi": 0.01, "steps_per_draw": 1}, random_seed=1))
    five = _stats(_sample(logistic_model, {"chi": 0.01, "steps_per_draw": 5}, random_seed=1))
    assert np.mean(five["poisson_draws"]) > 3 * np.mean(one["poisson_draws"])
    assert np.all(np.asarray(five["n_kept"]) <= np.asarray(five["poisson_draws"]))


def test_explicit_constants_and_metric(logistic_model, logistic_data):
    x, _ = logistic_data
    c = 2.0 * np.linalg.norm(np.column_stack([np.ones(N), x]), axis=1)  # valid, loose
    idata = _sample(logistic_model, {"c": c, "metric": EuclideanMetric()}, random_seed=5)
    assert np.asarray(_stats(idata)["poisson_draws"]).sum() > 0
    with logistic_model:
        step = TunaMH(bound=LipschitzBound.euclidean(c))
    assert step.bound.C == pytest.approx(c.sum())
    assert not step.precondition


def test_wrong_user_bound_is_caught_at_construction(logistic_model):
    with logistic_model, pytest.raises(ValueError, match=r"does not hold.*datum \d+.*`c=`"):
        TunaMH(c=np.full(N, 1e-4))


def test_user_bound_is_checked_on_every_row_at_construction(monkeypatch):
    """One too-small c_i among 100,000 rows (a 2,000-row spot check misses it with
    probability 0.98) is refused at construction; the check streams over row chunks."""
    n, bad_row = 100_000, 98_765
    rng = np.random.default_rng(8)
    x = rng.normal(size=n)
    y = (rng.random(n) < special.expit(0.3 + x)).astype(int)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5)
        pm.Bernoulli("y", logit_p=alpha + beta * x, observed=y)
    c = np.sqrt(1.0 + x**2)  # ||(1, x_i)||: the logistic bound, valid for every row
    too_small = c.copy()
    too_small[bad_row] *= 1e-3
    message = rf"does not hold.*datum {bad_row} .*all {n} data points.*c\[{bad_row}\]"
    with model, pytest.raises(ValueError, match=message):
        TunaMH(c=too_small, proposal="rw")
    with model, pytest.raises(ValueError, match=rf"datum {bad_row} "):
        TunaMH(bound=LipschitzBound.euclidean(too_small), proposal="rw")
    with model:
        step = TunaMH(c=c, proposal="rw")
    assert step.bound.C == pytest.approx(c.sum())  # the user's bound is the one used

    # One pass over the data per probe pair (3 pairs): each block of at most 65,536 rows
    # is read once per pair, block after block; never more rows than one block at a time.
    calls = []
    original = step.tall_data._loglik_diff_fn

    def recording(q_new, q_old, idx):
        calls.append(np.asarray(idx).copy())
        return original(q_new, q_old, idx)

    monkeypatch.setattr(step.tall_data, "_loglik_diff_fn", recording)
    step._probe_bound(step.bound, np.zeros(2), all_rows=True)
    assert [(int(idx[0]), idx.size) for idx in calls] == [(0, 65_536), (65_536, n - 65_536)] * 3
    assert all(np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)) for idx in calls)


def _exponential_model(y):
    """``y ~ Exponential(exp(mu))``, ``mu ~ Uniform(-1, 1)`` untransformed: no automatic
    bound; ``|d/dmu log p(y_i | mu)| = |1 - exp(mu) y_i| <= 1 + exp(hi) y_i`` for mu <= hi."""
    with pm.Model() as model:
        mu = pm.Uniform("mu", -1.0, 1.0, default_transform=None)
        pm.Exponential("y", lam=pm.math.exp(mu), observed=y)
    return model


def test_user_box_narrower_than_the_prior_keeps_the_chain_inside(rng, monkeypatch):
    """The bound holds on [-0.1, 0.25] only; the prior allows [-1, 1]. Proposals outside
    the box are rejected without reading data, and the chain never leaves the box."""
    y = rng.exponential(1.0, size=300)
    lo, hi = -0.1, 0.25
    bound = LipschitzBound(
        1.0 + np.exp(hi) * y, EuclideanMetric(), "test box bound", box=([lo], [hi])
    )
    with _exponential_model(y) as model:
        step = TunaMH(
            bound=bound, chi=0.1, tune=False, scaling=0.3, proposal="rw", steps_per_draw=1
        )
    proposed = []
    propose = step._propose

    def recording(state):
        out = propose(state)
        proposed.append(float(out[0][0]))
        return out

    monkeypatch.setattr(step, "_propose", recording)
    with model:
        idata = pm.sample(step=step, draws=300, tune=0, random_seed=2, **SAMPLE)
    mu = np.asarray(_posterior(idata)["mu"]).ravel()
    assert np.all((mu >= lo) & (mu <= hi))
    proposed = np.asarray(proposed)
    assert proposed.size == mu.size  # one proposal per draw (fixed chi: no pilots)
    outside = (proposed < lo) | (proposed > hi)
    assert 30 < outside.sum() < mu.size - 30
    stats = _stats(idata)
    batch = np.asarray(stats["batch_size"]).ravel()
    accepted = np.asarray(stats["accepted"]).ravel()
    assert np.all(batch[outside] == 0) and np.all(accepted[outside] == 0)
    assert np.all(np.asarray(stats["n_lik_evals"]).ravel()[outside] == 0)
    assert accepted[~outside].mean() > 0.2  # inside the box the chain moves


def test_box_must_contain_the_initial_point_and_match_the_block(rng):
    y = rng.exponential(1.0, size=100)
    c = 1.0 + np.e * y
    with _exponential_model(y):  # initial point mu = 0
        with pytest.raises(ValueError, match=r"initial point lies outside the box.*mu"):
            TunaMH(bound=LipschitzBound(c, EuclideanMetric(), box=([0.2], [0.5])), **LIPSCHITZ)
        with pytest.raises(ValueError, match=r"box has 2 coordinates.*has 1"):
            TunaMH(bound=LipschitzBound(c, EuclideanMetric(), box=([-1, -1], [1, 1])), **LIPSCHITZ)


def test_wrong_user_bound_is_caught_while_sampling(logistic_model, logistic_data):
    """A bound that only holds near the start: the kernel stops instead of biasing."""
    x, _ = logistic_data
    c = np.linalg.norm(np.column_stack([np.ones(N), x]), axis=1)

    def short_range(q, q_new):  # ||dq|| capped at 5: wrong for larger moves
        return min(float(np.linalg.norm(q_new - q)), 5.0)

    with logistic_model, pytest.raises(BoundViolation, match="bound violated"):
        pm.sample(
            step=TunaMH(
                c=c, metric=short_range, scaling=10.0, tune=False, chi=1e-6, temperature=1e3
            ),
            draws=50,
            tune=0,
            random_seed=1,
            **SAMPLE,
        )


def test_unsupported_likelihood_says_what_to_pass(rng):
    y = rng.weibull(2.0, size=300)
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        pm.Weibull("y", alpha=2.0, beta=pm.math.exp(mu), observed=y)
        with pytest.raises(UnsupportedLikelihood, match=r"`c=`.*`metric=`") as info:
            TunaMH()
    assert isinstance(info.value.__cause__, UnsupportedLikelihood)
    assert "mu" in str(info.value)


def test_unsupported_model_works_with_explicit_bound(rng):
    """log p = log(b) - b y with b = exp(mu): |d/dmu| = |1 - b y| <= 1 + b y, bounded on a box."""
    y = rng.exponential(1.0, size=300)
    with pm.Model() as model:
        mu = pm.Uniform("mu", -1.0, 1.0, default_transform=None)
        pm.Exponential("y", lam=pm.math.exp(mu), observed=y)
    c = 1.0 + np.e * y  # sup over |mu| <= 1 of |1 - exp(mu) y|
    idata = _sample(model, {"c": c}, draws=200, tune=200, random_seed=3)
    mu = np.asarray(_posterior(idata)["mu"])
    assert np.all(np.abs(mu) <= 1.0)


def test_poisson_needs_a_bounded_box(rng):
    x = rng.normal(size=(500, 1))
    y = rng.poisson(np.exp(0.5 + 0.3 * x[:, 0]))
    with pm.Model():
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        pm.Poisson("y", mu=pm.math.exp(a + b * x[:, 0]), observed=y)
        with pytest.raises(UnsupportedBound, match=r"pm.Uniform.*`c=`"):
            TunaMH(**LIPSCHITZ)
    with pm.Model() as boxed:
        a = pm.Uniform("a", -2, 2, default_transform=None)
        b = pm.Uniform("b", -1, 1, default_transform=None)
        pm.Poisson("y", mu=pm.math.exp(a + b * x[:, 0]), observed=y)
        step = TunaMH(precondition=False, **LIPSCHITZ)
    lo, hi = step.bound.box
    np.testing.assert_array_equal(lo, [-2, -1])
    np.testing.assert_array_equal(hi, [2, 1])
    idata = _sample(boxed, LIPSCHITZ, draws=100, tune=200, random_seed=1)
    assert np.asarray(_stats(idata)["poisson_draws"]).sum() > 0


def test_transformed_uniform_is_not_a_box(rng):
    x = rng.normal(size=300)
    y = rng.poisson(np.exp(0.2 * x))
    with pm.Model():
        b = pm.Uniform("b", -1, 1)  # interval transform: unbounded, non-linear sampling scale
        pm.Poisson("y", mu=pm.math.exp(b * x), observed=y)
        with pytest.raises(UnsupportedLikelihood, match=r"transformed.*`c=`"):
            TunaMH()


def test_student_t_regression_bound(rng):
    x = rng.normal(size=(400, 2))
    y = x @ np.array([1.0, -1.0]) + 0.5 * rng.standard_t(4, size=400)
    with pm.Model():
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.StudentT("y", nu=4, mu=x @ beta, sigma=0.5, observed=y)
        step = TunaMH(precondition=False, **LIPSCHITZ)
    np.testing.assert_allclose(step.bound.c, 1.25 / 0.5 * np.linalg.norm(x, axis=1))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chi": 0.0}, "chi"),
        ({"chi": -1.0}, "chi"),
        ({"chi": float("inf")}, "chi"),
        ({"c": np.ones(N), "bound": LipschitzBound.euclidean(np.ones(N))}, "either"),
        ({"metric": EuclideanMetric()}, "metric"),
        ({"c": np.ones(N - 1)}, "constants"),
        ({"c": -np.ones(N)}, "non-negative"),
        ({"control_variates": True, "c": np.ones(N)}, "control_variates"),
        ({"temperature": 0}, "temperature"),
        ({"target_accept": 1.5}, "target_accept"),
    ],
)
def test_bad_arguments(logistic_model, kwargs, match):
    with logistic_model, pytest.raises(ValueError, match=match):
        TunaMH(**kwargs)


def test_bound_must_be_a_lipschitz_bound(logistic_model):
    with logistic_model, pytest.raises(TypeError, match="LipschitzBound"):
        TunaMH(bound=np.ones(N))


def test_control_variates_use_the_taylor_remainder_bound(logistic_model):
    with logistic_model:
        map_point = pm.find_MAP(progressbar=False)
        step = TunaMH(
            control_variates=True,
            proposal="independent",
            reference_point=map_point,
            progressbar=False,
        )
        idata = pm.sample(
            step=step,
            draws=200,
            tune=100,
            chains=1,
            random_seed=5,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert "Taylor remainder" in step.bound.description
    stats = group(idata, "sample_stats")
    # Near the mode C M is small: most steps read (almost) no data, and the chain moves.
    assert float(np.mean(stats["batch_size"])) < 50
    assert float(np.mean(stats["accepted"])) > 0.3


def test_softmax_regression_gets_control_variates_and_a_remainder_bound(rng):
    """Categorical-softmax: control variates on by default, the Taylor-remainder bound on
    the K logits (global, no trust region); near the mode most steps read no data."""
    x = rng.normal(size=(2000, 2))
    probs = special.softmax(x @ np.array([[0.5, -0.3, 0.0], [0.2, 0.4, -0.6]]), axis=1)
    y = np.array([rng.choice(3, p=row) for row in probs])
    with pm.Model():
        w = pm.Normal("w", 0, 1, shape=(2, 3))
        pm.Categorical("y", logit_p=x @ w, observed=y)
        step = TunaMH(progressbar=False)
        idata = pm.sample(step=step, draws=300, tune=300, chains=1, random_seed=4, **QUIET)
    assert step.control_variates
    assert "categorical_logit" in step.bound.description and step.bound.region is None
    stats = group(idata, "sample_stats")
    assert float(np.mean(stats["batch_size"])) < 0.05 * 2000
    assert float(np.mean(stats["accepted"])) > 0.2


def _free_sigma_model(rng, n=200, likelihood="normal"):
    """A regression with a free scale. The Normal is summed exactly from sufficient
    statistics (no bound, no region); a Student-t gets remainder bounds on a trust region."""
    x = rng.normal(size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        y = x + rng.normal(size=n)
        if likelihood == "normal":
            pm.Normal("y", b * x, sigma, observed=y)
        else:
            pm.StudentT("y", nu=4, mu=b * x, sigma=sigma, observed=y)
    return model


def test_a_free_scale_without_control_variates_is_refused_before_the_map(rng, no_map_search):
    with _free_sigma_model(rng), pytest.raises(UnsupportedBound, match="free sigma"):
        TunaMH(control_variates=False, progressbar=False)


def test_a_gamma_likelihood_without_control_variates_is_refused_in_words(rng, no_map_search):
    x = rng.normal(size=200)
    with pm.Model():
        b = pm.Normal("b", 0, 1)
        pm.Gamma("y", alpha=2.0, beta=2.0 / pm.math.exp(b * x), observed=rng.gamma(2.0, 1.0, 200))
        with pytest.raises(UnsupportedBound, match="no Lipschitz bound for a Gamma likelihood"):
            TunaMH(control_variates=False, progressbar=False)


def test_a_free_scale_gets_a_trust_region_bound(rng):
    with _free_sigma_model(rng, likelihood="student_t"):
        step = TunaMH(progressbar=False)
    region = step.bound.region
    assert region is not None and "free scale" in step.bound.description
    assert region.radius == pytest.approx(np.sqrt(2) + 8)
    np.testing.assert_allclose(region.centre, step.reference.reference)
    with _free_sigma_model(rng, likelihood="student_t"):
        wider = TunaMH(trust_radius=20.0, progressbar=False)
    assert wider.bound.region.radius == 20.0 and wider.bound.C > step.bound.C


def _heteroscedastic_model(rng, n=300):
    """sigma = exp(c + g x): a scale per row whose log is affine in (c, g)."""
    x = rng.normal(size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        c = pm.Normal("c", 0, 1)
        g = pm.Normal("g", 0, 1)
        y = x + np.exp(0.2 * x) * rng.normal(size=n)
        pm.Normal("y", b * x, pm.math.exp(c + g * x), observed=y)
    return model


def test_a_scale_per_row_gets_a_trust_region_bound_and_samples(rng):
    with _heteroscedastic_model(rng):
        step = TunaMH(progressbar=False)
        idata = pm.sample(step=step, draws=200, tune=200, chains=1, random_seed=5, **QUIET)
    assert step._exact_sum is None  # no closed-form sum: sigma differs between rows
    assert "sigma differs between rows" in step.exact_sum_unavailable
    assert step.bound.region is not None
    assert "log-linear scale per row" in step.bound.description
    stats = group(idata, "sample_stats")
    assert float(np.mean(stats["accepted"])) > 0.2


def test_a_scale_per_row_without_control_variates_is_refused(rng, no_map_search):
    with _heteroscedastic_model(rng), pytest.raises(UnsupportedBound, match="free sigma"):
        TunaMH(control_variates=False, progressbar=False)


def test_proposals_outside_the_trust_region_are_rejected_without_data(rng):
    with _free_sigma_model(rng, likelihood="student_t"):
        step = TunaMH(trust_radius=0.5, steps_per_draw=1, progressbar=False)
        idata = pm.sample(
            step=step,
            draws=300,
            tune=100,  # tuning starts near the reference, and the chain enters the region
            chains=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    stats = group(idata, "sample_stats")
    exits = np.asarray(stats["region_exits"]).ravel()
    rows = np.asarray(stats["batch_size"]).ravel()
    assert exits.sum() > 0 and np.all(rows[exits > 0] == 0)
    post = group(idata, "posterior")
    region = step.bound.region
    q = np.column_stack([np.asarray(post["b"]).ravel(), np.log(np.asarray(post["sigma"]).ravel())])
    assert max(region.distance(point) for point in q) <= region.radius


@pytest.mark.parametrize("radius", [0.0, -1.0, np.inf, np.nan])
def test_trust_radius_must_be_positive_and_finite(rng, radius):
    with (
        _free_sigma_model(rng, likelihood="student_t"),
        pytest.raises(ValueError, match="trust_radius"),
    ):
        TunaMH(trust_radius=radius, progressbar=False)


def test_several_observed_variables_sum_their_remainder_bounds(rng):
    x = rng.normal(size=300)
    with pm.Model():
        a = pm.Normal("a", 0, 3, shape=2)
        b = pm.Normal("b", 0, 3, shape=2)
        pm.Bernoulli("won", logit_p=a[0] + a[1] * x, observed=rng.integers(0, 2, size=300))
        pm.Poisson("goals", mu=pm.math.exp(b[0] + b[1] * x), observed=rng.poisson(1.0, 300))
        step = TunaMH(progressbar=False)
        with pytest.raises(UnsupportedBound, match="several observed variables"):
            TunaMH(control_variates=False, progressbar=False)
    assert "bernoulli_logit, poisson_log" in step.bound.description
    assert step.bound.region is not None  # the Poisson part needs the trust region
    parts = step._lp.parts
    separate = [
        taylor_remainder_bound(
            part, step.reference.reference, chol=step._laplace_chol, radius=step.bound.region.radius
        ).c
        for part in parts
    ]
    np.testing.assert_allclose(step.bound.c, separate[0] + separate[1])
