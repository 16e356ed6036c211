"""FlyMC inside pm.sample: stats, per-chain z and its state, bounds, options, errors."""

import math
import warnings

import numpy as np
import pymc as pm
import pytest
from scipy import special
from step_sampling import N_DATA, QUIET, sample_step

from pymc_minibatch_mh.bounds.bohning import SoftmaxQuadraticBound
from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound
from pymc_minibatch_mh.bounds.jaakkola_jordan import untuned_jaakkola_jordan
from pymc_minibatch_mh.bounds.negative_binomial import NegativeBinomialBound
from pymc_minibatch_mh.bounds.row_cells import CellRegion
from pymc_minibatch_mh.bounds.sum_bound import SumBound
from pymc_minibatch_mh.diagnostics import posterior as _posterior
from pymc_minibatch_mh.diagnostics import sample_stats as _stats
from pymc_minibatch_mh.diagnostics.groups import group
from pymc_minibatch_mh.kernels.adaptation import ScaleAdaptation
from pymc_minibatch_mh.kernels.firefly import FireflyState
from pymc_minibatch_mh.likelihood.linear_predictor import UnsupportedLikelihood
from pymc_minibatch_mh.step_methods.firefly import CELL_RATE_SPEND, FlyMC

N = N_DATA
STATS = {"accepted", "accept", "batch_size", "n_lik_evals", "scaling", "n_bright"}


def _sample(model, map_point, step_kwargs=None, **kwargs):
    return sample_step(model, FlyMC, {"map_point": map_point, **(step_kwargs or {})}, **kwargs)


def test_defaults_run_and_report_stats(logistic_model, logistic_map):
    with logistic_model:
        step = FlyMC(progressbar=False)  # finds the MAP itself
        idata = pm.sample(
            step=step,
            draws=150,
            tune=150,
            chains=1,
            random_seed=1,
            discard_tuned_samples=False,
            **QUIET,
        )
    q_map = np.concatenate([np.ravel(logistic_map[k]) for k in ("alpha", "beta")])
    np.testing.assert_allclose(step.bound.collapsed.centre, q_map, atol=1e-3)
    stats = _stats(idata)
    warmup = group(idata, "warmup_sample_stats")
    assert STATS <= set(stats.data_vars)
    assert np.asarray(warmup["batch_size"])[0, 0] == N  # z drawn exactly at the start
    batch = np.asarray(stats["batch_size"])[0]
    n_bright = np.asarray(stats["n_bright"])[0]
    assert np.all((batch >= 0) & (batch <= N))
    assert np.all(np.asarray(stats["n_lik_evals"]) >= np.asarray(stats["batch_size"]))
    assert np.all((n_bright >= 0) & (n_bright <= N))
    accepted = np.asarray(stats["accepted"])
    assert accepted.dtype == np.float64  # as in pm.Metropolis, for compound steps
    assert set(np.unique(accepted)) <= {0.0, 1.0}
    assert np.issubdtype(np.asarray(stats["n_bright"]).dtype, np.integer)
    assert batch.mean() < 0.05 * N  # MAP-tuned bounds, after tuning
    alpha = np.asarray(_posterior(idata)["alpha"])[0]
    assert abs(alpha.mean() - logistic_map["alpha"]) < 0.2


def test_z_is_per_chain(logistic_model, logistic_map):
    idata = _sample(logistic_model, logistic_map, random_seed=5, chains=2, tune=0, draws=60)
    batch = np.asarray(_stats(idata)["batch_size"])
    # every chain starts by drawing z exactly (N rows), then only touches a few rows
    np.testing.assert_array_equal(batch[:, 0], [N, N])
    assert np.all(batch[:, 1:] < N)
    with logistic_model:
        step = FlyMC(map_point=logistic_map)
    point = logistic_model.initial_point()
    step.set_rng(np.random.default_rng(1))
    point, _ = step.step(point)
    assert step.firefly is not None
    step.set_rng(np.random.default_rng(2))  # a new chain
    assert step.firefly is None


def test_sampling_state_roundtrip_restores_z(logistic_model, logistic_map):
    with logistic_model:
        step = FlyMC(map_point=logistic_map, q_db=0.2, bound="untuned", steps_per_draw=1)
    step.set_rng(np.random.default_rng(4))
    point = logistic_model.initial_point()
    for _ in range(5):
        point, _ = step.step(point)
    state = step.sampling_state
    assert state.firefly is not None and state.firefly.store.n_bright > 0
    z_before = step.firefly.store.mask().copy()
    first, stats_first = step.step(point)
    assert not np.array_equal(step.firefly.store.mask(), z_before)  # z moved
    step.sampling_state = state
    np.testing.assert_array_equal(step.firefly.store.mask(), z_before)
    again, stats_again = step.step(point)
    np.testing.assert_array_equal(first["beta"], again["beta"])
    assert stats_first[0]["batch_size"] == stats_again[0]["batch_size"] < N  # no redraw


def test_handing_another_point_redraws_z(logistic_model, logistic_map):
    with logistic_model:
        step = FlyMC(map_point=logistic_map)
    step.set_rng(np.random.default_rng(4))
    point = logistic_model.initial_point()
    point, stats = step.step(point)
    assert stats[0]["batch_size"] == N
    point, stats = step.step(point)
    assert stats[0]["batch_size"] < N
    moved = {**point, "alpha": point["alpha"] + 0.01}
    _, stats = step.step(moved)
    assert stats[0]["batch_size"] == N


def test_q_db_tunes_to_the_bright_fraction_and_resets(logistic_model, logistic_map):
    with logistic_model:
        step = FlyMC(map_point=logistic_map)
        assert step.q_db == 0.01  # the paper's value before tuning
        idata = pm.sample(step=step, draws=100, tune=300, chains=1, random_seed=2, **QUIET)
    tuned = step.q_db
    n_bright = np.asarray(_stats(idata)["n_bright"]).mean()
    assert 1.0 / N <= tuned < 0.01
    assert tuned == pytest.approx(max(n_bright / N, 1.0 / N), rel=1.0, abs=2.0 / N)
    step.reset_tuning()
    assert step.q_db == 0.01
    with logistic_model:
        fixed = FlyMC(map_point=logistic_map, q_db=0.05)
        pm.sample(step=fixed, draws=20, tune=50, chains=1, random_seed=2, **QUIET)
    assert fixed.q_db == 0.05


def test_q_db_with_hmc_tracks_the_bright_data_likelihood_ratio(logistic_model, logistic_map):
    """With HMC moves q_db follows the mean Ltilde of the bright data (so a typical bright
    datum may turn dark at the next iteration), not the bright fraction; the control is
    the random walk, whose q_db stays at the (smaller) bright fraction."""
    tuned = {}
    for update in ("hmc", "rw"):
        with logistic_model:
            step = FlyMC(map_point=logistic_map, theta_update=update, progressbar=False)
            idata = pm.sample(step=step, draws=50, tune=300, chains=1, random_seed=4, **QUIET)
        tuned[update] = step.q_db
        fly = step.firefly
        bright = np.asarray(fly.store.bright_indices())
        fraction = np.asarray(_stats(idata)["n_bright"]).mean() / N
        if update == "hmc" and bright.size:
            typical = float(np.mean(np.exp(fly.log_lt[bright])))
            assert step.q_db == pytest.approx(min(typical, 1.0), rel=1.0)
        if update == "rw":
            assert step.q_db == pytest.approx(max(fraction, 1.0 / N), rel=1.0, abs=2.0 / N)
    assert tuned["hmc"] > tuned["rw"]


def test_untuned_and_custom_bounds(logistic_model, logistic_map, logistic_data):
    idata = _sample(logistic_model, logistic_map, {"bound": "untuned"}, random_seed=3)
    assert float(np.asarray(_stats(idata)["n_bright"]).mean()) > 0
    x1 = np.column_stack([np.ones(N), logistic_data[0]])
    custom = untuned_jaakkola_jordan(x1, 0.0, logistic_data[1], xi=2.0)
    with logistic_model:
        step = FlyMC(bound=custom)
        assert step.bound is custom and step.q_db == 0.01
        pm.sample(step=step, draws=30, tune=30, chains=1, random_seed=3, **QUIET)


def test_mala_option_runs(logistic_model, logistic_map):
    idata = _sample(
        logistic_model,
        logistic_map,
        {"theta_update": "mala", "steps_per_draw": 1},
        random_seed=6,
        draws=200,
        tune=600,
    )
    stats = _stats(idata)
    acc = float(np.asarray(stats["accepted"]).mean())
    assert 0.2 < acc < 0.95
    # MALA evaluates gradients over the bright points too
    assert np.all(np.asarray(stats["n_lik_evals"]) >= np.asarray(stats["batch_size"]))
    beta = np.asarray(_posterior(idata)["beta"])[0]
    assert np.all(np.abs(beta.mean(0) - logistic_map["beta"]) < 0.2)


def test_steps_per_draw_accumulates_and_reports_last_n_bright(logistic_model, logistic_map):
    one = _stats(
        _sample(
            logistic_model,
            logistic_map,
            {"bound": "untuned", "q_db": 0.1, "steps_per_draw": 1},
            random_seed=1,
        )
    )
    five = _stats(
        _sample(
            logistic_model,
            logistic_map,
            {"bound": "untuned", "q_db": 0.1, "steps_per_draw": 5},
            random_seed=1,
        )
    )
    assert np.mean(five["batch_size"]) > 3 * np.mean(one["batch_size"])
    assert np.all(np.asarray(five["n_bright"]) <= N)


@pytest.fixture(scope="module")
def hierarchical_model(logistic_data):
    """``beta ~ Normal(0, tau)``: tau enters FlyMC's prior, not the likelihood."""
    x, y = logistic_data
    with pm.Model() as model:
        tau = pm.HalfNormal("tau", 1.0)
        beta = pm.Normal("beta", 0, tau, shape=2)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
    return model


@pytest.mark.parametrize("theta_update", ["rw", "mala"])
def test_cached_prior_follows_variables_moved_by_other_steps(hierarchical_model, theta_update):
    """In a compound step PyMC writes tau into the shared variables before each draw;
    the log prior (and MALA prior gradient) cached in the FlyMC state must follow it.

    Huge proposals are rejected, so the state keeps its cached values: before the fix
    they stayed at the tau of the last accepted move.
    """
    model = hierarchical_model
    with model:
        step = FlyMC(
            [model["beta"]],
            theta_update=theta_update,
            map_point={"beta": np.array([1.0, -0.5])},
            proposal="rw",
            scaling=100.0,
            tune=False,
        )
    step.set_rng(np.random.default_rng(3))
    point, _ = step.step(model.initial_point())  # draws z
    for log_tau in (-2.0, 1.0, -0.5):
        point = {**point, "tau_log__": np.array(log_tau)}  # another step moved tau
        point, stats = step.step(point)
        assert stats[0]["accepted"] == 0.0
        fly = step.firefly
        assert fly.logprior == pytest.approx(step.tall_data.logprior(fly.position), rel=1e-12)
        if theta_update == "mala":
            np.testing.assert_allclose(
                fly.prior_grad, step.tall_data.logprior_grad(fly.position), rtol=1e-12
            )


def test_prior_is_refreshed_once_per_draw(hierarchical_model, monkeypatch):
    calls = []
    refresh = FireflyState.refresh_prior

    def counting(self, target):
        calls.append(self.position.copy())
        refresh(self, target)

    monkeypatch.setattr(FireflyState, "refresh_prior", counting)
    model = hierarchical_model
    with model:
        step = FlyMC([model["beta"]], map_point={"beta": np.array([1.0, -0.5])}, steps_per_draw=4)
    step.set_rng(np.random.default_rng(3))
    point = model.initial_point()
    for _ in range(5):
        point, _ = step.step(point)
    assert len(calls) == 4  # every draw but the first, which builds the state afresh


def test_compound_step_with_metropolis_runs(hierarchical_model):
    model = hierarchical_model
    with model:
        flymc = FlyMC([model["beta"]], map_point={"beta": np.array([1.0, -0.5])})
        idata = pm.sample(
            step=[flymc, pm.Metropolis([model["tau"]])],
            draws=100,
            tune=100,
            chains=1,
            random_seed=4,
            **QUIET,
        )
    stats = _stats(idata)
    assert {"n_bright", "batch_size", "accepted"} <= set(stats.data_vars)
    assert np.all(np.isfinite(np.asarray(_posterior(idata)["beta"])))
    assert np.unique(np.asarray(_posterior(idata)["tau"])).size > 5  # tau moves


def test_student_t_model_is_recognised():
    rng = np.random.default_rng(9)
    n = 1500
    x = rng.normal(size=(n, 2))
    y = x @ np.array([1.0, -2.0]) + 0.5 * rng.standard_t(4, size=n)
    with pm.Model():
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.StudentT("y", nu=4, mu=x @ beta, sigma=0.5, observed=y)
        step = FlyMC(map_point={"beta": np.array([1.0, -2.0])})
        assert isinstance(step.bound, LinearQuadraticBound)
        assert step.bound.family == "student_t"
        idata = pm.sample(step=step, draws=50, tune=50, chains=1, random_seed=1, **QUIET)
    assert np.all(np.isfinite(np.asarray(_posterior(idata)["beta"])))


def test_categorical_model_is_recognised():
    rng = np.random.default_rng(9)
    n = 1500
    x = rng.normal(size=(n, 2))
    k = 3
    w = rng.normal(size=(2, k))
    probs = special.softmax(x @ w, axis=1)
    cls = (rng.random(n)[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
    with pm.Model():
        coef = pm.Normal("coef", 0, 3, shape=(2, k))
        pm.Categorical("c", logit_p=x @ coef, observed=cls)
        step = FlyMC(bound="untuned")
        assert isinstance(step.bound, SoftmaxQuadraticBound)
        pm.sample(step=step, draws=30, tune=30, chains=1, random_seed=1, **QUIET)


def test_unsupported_likelihoods_give_clear_errors():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 2))
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = np.linspace(0.3, 0.9, 300)  # fixed, but one per row
        pm.Normal("y", mu=x @ beta, sigma=sigma, observed=rng.normal(size=300))
        with pytest.raises(UnsupportedLikelihood, match="bound=") as err:
            FlyMC(bound="untuned")
    message = str(err.value)
    assert "the Normal likelihood" in message and "differs between rows" in message
    assert "bernoulli_logit" not in message  # families named as PyMC users write them
    with pm.Model():  # control: one fixed sigma is summed exactly
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", mu=x @ beta, sigma=0.5, observed=rng.normal(size=300))
        assert FlyMC(bound="untuned", progressbar=False).bound.region is None
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.StudentT("y", nu=4, mu=x @ beta, sigma=sigma, observed=rng.normal(size=300))
        with pytest.raises(ValueError, match="every free variable of the likelihood"):
            FlyMC([beta], bound="untuned")  # sigma would be sampled by another step
        with pytest.raises(UnsupportedLikelihood, match="sigma"):
            FlyMC(bound="untuned")  # sigma in the block: the bound would not be quadratic


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"q_db": 0.0}, ValueError, "q_db"),
        ({"q_db": 1.5}, ValueError, "q_db"),
        ({"theta_update": "nuts"}, ValueError, "theta_update"),
        ({"bound": "tight"}, ValueError, "bound"),
        ({"bound": object()}, TypeError, "log_bound"),
        ({"map_point": np.zeros(5)}, ValueError, "map_point"),
        ({"temperature": 0}, ValueError, "temperature"),
    ],
)
def test_bad_arguments(logistic_model, kwargs, error, match):
    with logistic_model, pytest.raises(error, match=match):
        FlyMC(**kwargs)


def test_custom_bound_with_wrong_size_is_refused(logistic_model, logistic_data):
    x1 = np.column_stack([np.ones(N), logistic_data[0]])
    small = untuned_jaakkola_jordan(x1[:10], 0.0, logistic_data[1][:10])
    with logistic_model, pytest.raises(ValueError, match="10 data points"):
        FlyMC(bound=small)


def test_a_free_scale_with_untuned_bounds_is_refused_before_the_map(no_map_search):
    rng = np.random.default_rng(4)
    x = rng.normal(size=200)
    with pm.Model():
        b = pm.Normal("b", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.StudentT("y", nu=4, mu=b * x, sigma=sigma, observed=x + rng.normal(size=200))
        with pytest.raises(UnsupportedLikelihood, match="free scale sigma.*bound='map'"):
            FlyMC(bound="untuned")


def test_poisson_bound_on_a_trust_region_keeps_the_chain_inside(rng):
    x = rng.normal(size=300)
    with pm.Model():
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3)
        pm.Poisson("y", mu=pm.math.exp(a + b * x), observed=rng.poisson(np.exp(0.2 + 0.5 * x)))
        step = FlyMC(trust_radius=0.5, progressbar=False)
        idata = pm.sample(step=step, draws=200, tune=100, chains=1, random_seed=2, **QUIET)
    region = step.bound.region
    assert region is not None and region.radius == 0.5
    post = group(idata, "posterior")
    points = np.column_stack([np.asarray(post[v]).ravel() for v in ("a", "b")])
    assert max(region.distance(p) for p in points) <= region.radius
    assert int(np.asarray(group(idata, "sample_stats")["region_exits"]).sum()) > 0


def test_poisson_refuses_untuned_bounds_before_the_map(rng, no_map_search):
    x = rng.normal(size=100)
    with pm.Model():
        b = pm.Normal("b", 0, 3)
        pm.Poisson("y", mu=pm.math.exp(b * x), observed=rng.poisson(1.0, size=100))
        with pytest.raises(UnsupportedLikelihood, match="bound='map'"):
            FlyMC(bound="untuned")


def test_poisson_multilevel_model_gets_a_bound_per_row_cell(rng):
    """Group-indexed coefficients in a Poisson-log predictor: accepted, each group's rows
    bounded on their own cell's ellipsoid (the multilevel model the suite samples)."""
    group, x = rng.integers(0, 12, size=600), rng.normal(size=600)
    with pm.Model():
        a = pm.Normal("a", 0, 1, shape=12)
        b = pm.Normal("b", 0, 1)
        pm.Poisson("y", mu=pm.math.exp(a[group] + b * x), observed=rng.poisson(1.0, size=600))
        step = FlyMC(progressbar=False)
    assert isinstance(step.bound.region, CellRegion)
    assert step.bound.region.row_radii().shape == (600,)


def test_gamma_refuses_untuned_bounds_before_the_map_in_the_users_terms(rng, no_map_search):
    x = rng.normal(size=100)
    with pm.Model():
        b = pm.Normal("b", 0, 3)
        pm.Gamma("y", alpha=2.0, beta=2.0 / pm.math.exp(b * x), observed=rng.gamma(2.0, 1.0, 100))
        with pytest.raises(UnsupportedLikelihood, match="FlyMC's Gamma bound.*bound='map'"):
            FlyMC(bound="untuned")


def test_several_observed_variables_multiply_their_bounds(rng):
    x = rng.normal(size=200)
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("won", logit_p=b[0] * x, observed=rng.integers(0, 2, size=200))
        pm.Poisson("goals", mu=pm.math.exp(b[1] * x), observed=rng.poisson(1.0, size=200))
        step = FlyMC(progressbar=False)
        with pytest.raises(UnsupportedLikelihood, match="bound='map'"):
            FlyMC(bound="untuned")  # the Poisson part needs its trust region
    bound = step.bound
    assert isinstance(bound, SumBound) and bound.family == "bernoulli_logit+poisson_log"
    assert bound.region is not None and bound.parts[1].region is bound.region
    q = np.array([0.3, -0.2])
    rows = np.arange(200)
    np.testing.assert_allclose(
        bound.log_bound(q, rows),
        bound.parts[0].log_bound(q, rows) + bound.parts[1].log_bound(q, rows),
    )
    np.testing.assert_allclose(bound.log_bound_sum(q), bound.log_bound(q, rows).sum(), rtol=1e-9)
    loglik = step.tall_data.loglik(q, rows)
    assert np.all(bound.log_bound(q, rows) <= loglik + 1e-9)


@pytest.mark.parametrize("theta_update", ["rw", "mala", "hmc"])
def test_negative_binomial_gets_a_global_bound_and_samples(rng, theta_update):
    """Free dispersion: the Jaakkola-Jordan bound of the negative binomial holds everywhere
    (no trust region), is tight at the MAP and keeps few points bright."""
    x = rng.normal(size=2000)
    y = rng.negative_binomial(2.0, 2.0 / (2.0 + np.exp(0.5 + 0.3 * x)))
    with pm.Model():
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1)
        alpha = pm.Exponential("alpha", 1.0)
        pm.NegativeBinomial("y", mu=pm.math.exp(a + b * x), alpha=alpha, observed=y)
        step = FlyMC(theta_update=theta_update, progressbar=False)
        idata = pm.sample(step=step, draws=300, tune=300, chains=1, random_seed=3, **QUIET)
    bound = step.bound
    assert isinstance(bound, NegativeBinomialBound) and bound.region is None
    stats = _stats(idata)
    assert float(np.mean(stats["n_bright"])) < 0.01 * 2000
    assert 0.05 < float(np.mean(stats["accept"])) <= 1.0
    draws = _posterior(idata)
    assert abs(float(np.mean(draws["a"])) - 0.5) < 0.15
    assert abs(float(np.mean(draws["alpha"])) - 2.0) < 0.6


def _wide_logistic_model(rng, ndim: int) -> pm.Model:
    x = rng.normal(size=(200, ndim))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=ndim)
        pm.Bernoulli("y", logit_p=x @ beta, observed=rng.integers(0, 2, size=200))
    return model


def test_a_block_above_a_given_max_dim_is_refused_before_the_map(rng, no_map_search):
    with _wide_logistic_model(rng, 21), pytest.raises(ValueError, match="21 dimensions"):
        FlyMC(max_dim=20, progressbar=False)


def test_wide_blocks_are_admitted_by_default(rng):
    """Negative control of the refusal: no limit unless one is given."""
    with _wide_logistic_model(rng, 21):
        step = FlyMC(progressbar=False)
    assert step.tall_data.ndim == 21
    assert step.max_dim is None and step.theta_update == "hmc"


def test_max_dim_must_be_a_positive_integer(rng):
    with _wide_logistic_model(rng, 2):
        for bad in (0, 2.5, True):
            with pytest.raises(ValueError, match="max_dim must be a positive integer"):
                FlyMC(max_dim=bad, progressbar=False)


# ---------------------------------------------------------------- split HMC
def _glm(rng, *, prior="normal", family="bernoulli"):
    x = rng.normal(size=(N, 2))
    with pm.Model() as model:
        if prior == "normal":
            beta = pm.Normal("beta", 0.0, 2.0, shape=2)
        else:  # a scale-mixture prior: not a Gaussian
            beta = pm.StudentT("beta", nu=3, mu=0.0, sigma=2.0, shape=2)
        eta = x @ beta
        if family == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=rng.random(N) < special.expit(x[:, 0]))
        elif family == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=rng.poisson(np.exp(0.3 * x[:, 0])))
        else:
            g = pm.Normal("g", 0.0, 1.0)  # a log-linear scale per row
            pm.Normal("y", mu=eta, sigma=pm.math.exp(g * x[:, 1]), observed=x[:, 0])
    return model


@pytest.mark.parametrize(
    ("prior", "family", "split"),
    [
        ("normal", "bernoulli", True),
        ("normal", "poisson", False),  # a bound on a trust region: unsplit moves
        ("student_t", "bernoulli", False),  # the prior is not Normal
        ("normal", "hetero", False),  # a scale per row: the bound is not quadratic
    ],
)
def test_auto_splits_hmc_around_the_prior_times_the_bounds(rng, prior, family, split):
    """With a Normal prior and a quadratic bound, theta moves by split HMC in 2 dimensions;
    otherwise the random walk stays below 20 dimensions."""
    with _glm(rng, prior=prior, family=family):
        step = FlyMC(progressbar=False)
    assert step.theta_update == ("hmc" if split else "rw")
    gaussian = step._theta_gaussian()
    assert (gaussian is not None) is split
    if split:  # the Gaussian is the prior times the bounds: its log density matches theirs
        q0 = step.bound.collapsed.centre
        rng_q = np.random.default_rng(0)
        for q in q0 + 0.1 * rng_q.normal(size=(3, 2)):
            exact = step.tall_data.logprior(q) + step.bound.log_bound_sum(q)
            exact0 = step.tall_data.logprior(q0) + step.bound.log_bound_sum(q0)
            np.testing.assert_allclose(
                gaussian.log_density(q) - gaussian.log_density(q0), exact - exact0, rtol=1e-8
            )


def test_split_hmc_step_stays_within_the_trajectory_while_tuning(rng):
    """Split moves with negligible kicks accept any step; tuning then holds the step at the
    longest time (one step per transition) instead of growing it without end. Control: a
    step below it is left to the tuning."""
    with _glm(rng):
        step = FlyMC(progressbar=False)
    assert step._theta_gaussian() is not None
    q = step.bound.collapsed.centre
    step.adaptation = ScaleAdaptation(40.0, 50)
    step._adapt(q, 1.0)
    assert step.adaptation.scaling == pytest.approx(0.75 * np.pi)
    step.adaptation = ScaleAdaptation(math.log(0.3), 50)
    step._adapt(q, 0.8)
    assert step.adaptation.scaling < 0.75 * np.pi


# ---------------------------------------------------------------- loose bounds
def _binomial_with_an_all_zero_category(rng) -> pm.Model:
    """Binomial-logit (1-20 trials), 2,000 rows, whose category 4 (200 rows) has no
    success, under Normal(0, 100) priors: the category's Jaakkola-Jordan bounds, tight at
    a very negative ``eta``, are far more curved than its likelihood there."""
    category = rng.integers(0, 4, 2000)
    category[:200] = 4
    x = rng.normal(size=2000)
    eta = np.array([0.0, 0.3, -0.2, 0.1, -9.0])[category] + 0.4 * x
    trials = rng.integers(1, 21, 2000)
    y = rng.binomial(trials, 1.0 / (1.0 + np.exp(-eta)))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 100)
        b = pm.Normal("b", 0, 100)
        g = pm.Normal("g", 0, 100, shape=4)
        logit = a + b * x + pm.math.concatenate([[0.0], g])[category]
        pm.Binomial("y", n=trials, logit_p=logit, observed=y)
    return model


def _hurdle_negative_binomial(rng, n: int) -> pm.Model:
    """A hurdle negative binomial regression with a free dispersion."""
    x = rng.normal(size=(n, 2))
    mean = np.exp(0.7 + x @ np.array([0.4, -0.3]))
    counts = rng.negative_binomial(3.0, 3.0 / (3.0 + mean))
    while np.any(counts == 0):  # zero-truncated: redraw the zeros
        zeros = counts == 0
        counts[zeros] = rng.negative_binomial(3.0, 3.0 / (3.0 + mean[zeros]))
    y = np.where(rng.uniform(size=n) < 0.6, counts, 0)
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        alpha = pm.HalfNormal("alpha", 5.0)
        psi = pm.Beta("psi", 2.0, 2.0)
        pm.HurdleNegativeBinomial(
            "y", psi=psi, mu=pm.math.exp(intercept + x @ beta), alpha=alpha, observed=y
        )
    return model


def test_bounds_far_more_curved_than_the_posterior_warn_naming_the_variable(
    rng, logistic_model, logistic_map
):
    """An all-zero category under a diffuse prior: a LooseBoundWarning that names its
    coefficient ``g``; the logistic regression's bounds are about as curved as its
    posterior and construct silently (negative control)."""
    from pymc_minibatch_mh.bounds.looseness import LOOSE_BOUND_RATIO, LooseBoundWarning

    with _binomial_with_an_all_zero_category(rng):
        with pytest.warns(LooseBoundWarning, match=r"more curved than the posterior along g"):
            step = FlyMC(progressbar=False)
    assert step.bound_looseness > LOOSE_BOUND_RATIO
    with logistic_model:
        with warnings.catch_warnings():
            warnings.simplefilter("error", LooseBoundWarning)
            quiet = FlyMC(map_point=logistic_map, progressbar=False)
    assert 1.0 <= quiet.bound_looseness < 2.0


def test_hurdle_negative_binomial_bounds_are_global_and_about_as_curved_as_the_posterior(rng):
    """The dispersion's own terms are summed exactly, so the bounds no longer follow each
    row's curvature in log alpha (98 times the posterior's with the per-row Taylor bounds
    used before): no trust region, no warning, looseness below 10."""
    from pymc_minibatch_mh.bounds.looseness import LooseBoundWarning

    with _hurdle_negative_binomial(rng, 5_000):
        with warnings.catch_warnings():
            warnings.simplefilter("error", LooseBoundWarning)
            step = FlyMC(progressbar=False)
    assert step.bound.region is None
    assert 1.0 <= step.bound_looseness < 10.0


def test_many_groups_move_through_sparse_matrices(rng):
    """A Bernoulli model of 150 centred group intercepts with a free scale (HMC not split:
    the prior is not a fixed Gaussian): the collapsed bound's Hessian and the Laplace
    precision are kept sparse, HMC's drift solves with the precision, and the chain runs."""
    groups, n = 150, 6000
    group, x = rng.integers(0, groups, size=n), rng.normal(size=n)
    y = rng.random(n) < special.expit(0.5 * rng.normal(size=groups)[group] + 0.7 * x)
    with pm.Model():
        sigma = pm.HalfNormal("sigma", 1.0)
        a = pm.Normal("a", 0, sigma, shape=groups)
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("y", logit_p=a[group] + b * x, observed=y.astype(int))
        step = FlyMC(progressbar=False)
        assert step.theta_update == "hmc" and step._theta_gaussian() is None
        assert step.bound.collapsed._sparse_hessian is not None
        assert step.proposal.precision is not None
        idata = pm.sample(step=step, draws=60, tune=60, chains=1, random_seed=3, **QUIET)
    assert np.all(np.isfinite(idata.posterior["a"].values))
    assert float(idata.sample_stats["accept"].mean()) > 0.3


def _poisson_groups_model(n_groups=24, seed=6):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 300, n_groups)
    g = np.repeat(np.arange(n_groups), sizes)
    x = rng.normal(size=g.size)
    y = rng.poisson(np.exp(0.2 + rng.normal(0, 0.7, n_groups)[g] + 0.3 * x))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        sigma = pm.HalfNormal("sigma", 1)
        a = pm.Normal("a", mu, sigma, shape=n_groups)
        b = pm.Normal("b", 0, 1)
        pm.Poisson("y", pm.math.exp(a[g] + b * x), observed=y)
    return model, sizes


def test_hmc_on_groups_tunes_one_brightening_rate_per_group():
    """Each group's rows get their own rate (rounded to powers of two, each at most the spend
    rule's and at least the bright fraction's); a given ``q_db`` keeps one rate for all."""
    model, sizes = _poisson_groups_model()
    with model:
        step = FlyMC(progressbar=False)
        assert step.theta_update == "hmc" and step.cell_rates is None and step.q_db == 0.01
        pm.sample(step=step, draws=50, tune=200, chains=1, random_seed=5, **QUIET)
    rates = step.cell_rates
    assert rates is not None and rates.cell_rates.size == sizes.size
    assert step.q_db == rates.largest == step.settings.q_db
    assert step.settings.cell_rates is rates
    evidence = step._cell_evidence
    floor = max(1.0 / sizes.sum(), evidence.bright.sum() / sizes.sum())
    spend = np.maximum(CELL_RATE_SPEND * evidence.bright / sizes, floor)
    assert np.all(rates.cell_rates <= np.sqrt(2.0) * np.minimum(spend, 1.0) * (1 + 1e-9))
    assert np.all(rates.cell_rates >= floor / np.sqrt(2.0) * (1 - 1e-9))
    step.reset_tuning()
    assert step.cell_rates is None and step.q_db == 0.01
    with model:
        fixed = FlyMC(q_db=0.02, progressbar=False)
        pm.sample(step=fixed, draws=20, tune=50, chains=1, random_seed=5, **QUIET)
    assert fixed.cell_rates is None and fixed.q_db == 0.02
