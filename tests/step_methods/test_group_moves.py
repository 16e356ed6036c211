"""The steps' sweeps over the groups of a multilevel model (group_moves).

Exactness: 30 groups of Bernoulli rows, each group's log-odds ``a_g ~ Normal(0, 0.5)`` and
nothing shared, so the posterior factorises over groups and every ``a_g``'s mean and sd
come from a 1-D grid integral. ``TunaMH()`` sweeps the groups after every move; each mean
lies within 4.5 Monte Carlo standard errors and each sd within 10 % of the grid's.
Negative control: a sweep that leaves out the groups' prior terms fails the same check
(the prior is strong: the posterior means move by about a posterior sd without it).
MinibatchBarker's and Austere's sweeps (approximate tests on a few rows per group) are held
to the same grid, with and without a shared slope; their negative control is tempered.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from scipy import special
from step_sampling import QUIET, moment_problems

from pymc_minibatch_mh import Austere, MinibatchBarker, TunaMH
from pymc_minibatch_mh.likelihood import group_priors
from pymc_minibatch_mh.likelihood.group_priors import group_prior_terms

GROUPS, PRIOR_SD = 30, 0.5
Z_TOL, SD_TOL = 4.5, 0.10


@pytest.fixture(scope="module")
def independent_groups():
    rng = np.random.default_rng(530)
    sizes = rng.integers(10, 80, size=GROUPS)
    group = np.repeat(np.arange(GROUPS), sizes)
    truth = rng.normal(0.0, 1.2, size=GROUPS)
    y = (rng.random(group.size) < special.expit(truth[group])).astype(np.int8)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, PRIOR_SD, shape=GROUPS)
        pm.Bernoulli("y", logit_p=a[group], observed=y)
    ones = np.bincount(group, weights=y, minlength=GROUPS)
    grid = np.linspace(-6.0, 6.0, 20_001)[:, None]
    log_post = -0.5 * (grid / PRIOR_SD) ** 2 + ones * special.log_expit(grid)
    log_post += (sizes - ones) * special.log_expit(-grid)
    w = np.exp(log_post - log_post.max(axis=0))
    w /= w.sum(axis=0)
    mean = (w * grid).sum(axis=0)
    sd = np.sqrt((w * (grid - mean) ** 2).sum(axis=0))
    return model, mean, sd


def _problems(idata, mean: np.ndarray, sd: np.ndarray) -> list[str]:
    return moment_problems(idata, "a", mean, sd, Z_TOL, SD_TOL)


def _sample(model, step):
    with model:
        return pm.sample(
            step=step, draws=2000, tune=1000, chains=2, cores=1, random_seed=532, **QUIET
        )


def test_sweeps_are_exact_on_independent_groups(independent_groups):
    model, mean, sd = independent_groups
    with model:
        step = TunaMH()
    assert step.group_moves, step.group_moves_unavailable
    assert step._group_blocks.n_groups == GROUPS
    idata = _sample(model, step)
    problems = _problems(idata, mean, sd)
    assert not problems, problems
    stats = idata.sample_stats
    assert 0.2 < float(stats["group_accept"].mean()) < 0.7  # tuned towards 0.4
    n_rows = model.rvs_to_values[model["y"]].data.size
    assert float(stats["batch_size"].mean()) < 0.5 * n_rows  # a sweep reads few of the rows


def test_negative_control_a_sweep_without_the_group_priors_fails(independent_groups, monkeypatch):
    model, mean, sd = independent_groups
    with model:
        step = TunaMH()
    assert step.group_moves
    real = step._group_prior
    monkeypatch.setattr(step, "_group_prior", lambda q: 0.0 * real(q))
    assert _problems(_sample(model, step), mean, sd)


def test_a_potential_on_the_effects_turns_the_sweep_off(independent_groups):
    model, _, _ = independent_groups
    with model.copy() as penalised:
        pm.Potential("pull", -2.0 * penalised["a"][0] ** 2)
        step = TunaMH()
    assert not step.group_moves
    assert "Potential" in step.group_moves_unavailable


def test_the_sweep_can_be_turned_off(independent_groups):
    model, _, _ = independent_groups
    with model:
        step = TunaMH(group_moves=False)
    assert not step.group_moves
    assert step.group_moves_unavailable == "turned off (group_moves=False)"


def test_correlated_effects_split_into_one_term_per_group():
    """Rows of an MvNormal (LKJ-correlated intercepts and slopes): one term per row, and
    the terms add up to the variable's log density; the hyperparameters are shared."""
    groups = 5
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True
        )
        ab = pm.MvNormal("ab", mu=np.zeros(2), chol=chol, shape=(groups, 2))
    point = model.initial_point()
    block = [model.rvs_to_values[rv] for rv in model.free_RVs]
    sizes = [int(np.size(point[v.name])) for v in block]
    owner = np.concatenate([np.full(sizes[0], -1), np.repeat(np.arange(groups), 2)])
    terms, reason = group_prior_terms(model, block, point, owner, {})
    assert terms is not None, reason
    rng = np.random.default_rng(1)
    q = rng.normal(size=sum(sizes)) * 0.3
    values = terms(q)
    assert values.shape == (groups,)
    chol_part = dict(zip([v.name for v in block], np.split(q, np.cumsum(sizes)[:-1]), strict=True))
    logp = model.compile_logp(vars=[ab], sum=False)(
        {**{k: v.reshape(point[k].shape) for k, v in chol_part.items()}}
    )[0]
    np.testing.assert_allclose(values, logp, rtol=1e-10)


def test_effects_whose_prior_reads_other_effects_are_refused():
    """A random walk over groups couples neighbours in the prior: no split by group."""
    with pm.Model() as model:
        a = pm.GaussianRandomWalk("a", sigma=1.0, init_dist=pm.Normal.dist(0, 1), shape=6)
        _ = a
    point = model.initial_point()
    block = list(model.value_vars)
    terms, reason = group_prior_terms(model, block, point, np.arange(6), {})
    assert terms is None
    assert "spans two groups" in reason or "reads group effects" in reason


def test_split_check_sees_a_term_outside_the_group_priors():
    """split_holds is the numerical guard: a prior with an extra term in the effects fails."""
    groups = 4
    with pm.Model() as model:
        pm.Normal("a", 0.0, 1.0, shape=groups)
    point = model.initial_point()
    block = list(model.value_vars)
    owner = np.arange(groups)
    terms, _ = group_prior_terms(model, block, point, owner, {})
    logprior = model.compile_logp(sum=True)
    plain = lambda q: float(logprior({"a": q}))  # noqa: E731
    coupled = lambda q: plain(q) - q[0] * q[1]  # noqa: E731
    rng = np.random.default_rng(0)
    assert group_priors.split_holds(terms, plain, np.zeros(groups), owner, rng)
    assert not group_priors.split_holds(terms, coupled, np.zeros(groups), owner, rng)


SHARED_GROUPS = 6


@pytest.fixture(scope="module")
def groups_and_a_slope():
    """Six groups' intercepts ``a_g ~ Normal(0, 1)`` and a shared slope ``b ~ Normal(0, 1)``
    of a covariate: given ``b`` the groups are independent, so every marginal is a 2-D grid
    integral (over ``b``, and each ``a_g`` given ``b``)."""
    rng = np.random.default_rng(533)
    sizes = rng.integers(15, 60, size=SHARED_GROUPS)
    group = np.repeat(np.arange(SHARED_GROUPS), sizes)
    x = rng.normal(size=group.size)
    truth = rng.normal(0.0, 1.0, size=SHARED_GROUPS)
    y = (rng.random(group.size) < special.expit(truth[group] + 0.8 * x)).astype(np.int8)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 1.0, shape=SHARED_GROUPS)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=a[group] + b * x, observed=y)
    b_grid = np.linspace(-2.5, 4.0, 651)
    a_grid = np.linspace(-6.0, 6.0, 1201)
    sign = 2.0 * y - 1.0
    log_z = np.zeros((SHARED_GROUPS, b_grid.size))
    a_mean = np.zeros_like(log_z)
    a_second = np.zeros_like(log_z)
    for g in range(SHARED_GROUPS):
        rows = group == g
        eta = a_grid[:, None, None] + b_grid[None, :, None] * x[rows][None, None, :]
        log_lik = special.log_expit(sign[rows] * eta).sum(axis=2) - 0.5 * a_grid[:, None] ** 2
        top = log_lik.max(axis=0)
        w = np.exp(log_lik - top)
        log_z[g] = np.log(w.sum(axis=0)) + top
        w /= w.sum(axis=0)
        a_mean[g] = (w * a_grid[:, None]).sum(axis=0)
        a_second[g] = (w * a_grid[:, None] ** 2).sum(axis=0)
    log_post_b = log_z.sum(axis=0) - 0.5 * b_grid**2
    pb = np.exp(log_post_b - log_post_b.max())
    pb /= pb.sum()
    mean = np.append(a_mean @ pb, pb @ b_grid)
    second = np.append(a_second @ pb, pb @ b_grid**2)
    return model, mean, np.sqrt(second - mean**2)


def _shared_problems(idata, mean, sd) -> list[str]:
    problems = moment_problems(idata, "a", mean[:-1], sd[:-1], Z_TOL, SD_TOL)
    idata.posterior["b_vector"] = idata.posterior["b"].expand_dims("one", axis=-1)
    return problems + moment_problems(idata, "b_vector", mean[-1:], sd[-1:], Z_TOL, SD_TOL)


def test_sweeps_and_shared_moves_are_exact_together(groups_and_a_slope):
    """The shared slope moves by HMC on the surrogate in its own coordinate, the groups by
    sweeps: both exact, so every marginal matches the grid."""
    model, mean, sd = groups_and_a_slope
    with model:
        step = TunaMH()
    assert step.group_moves, step.group_moves_unavailable
    assert step._shared_coordinates.size == 1
    problems = _shared_problems(_sample(model, step), mean, sd)
    assert not problems, problems


def test_negative_control_tempered_shared_model_fails(groups_and_a_slope):
    model, mean, sd = groups_and_a_slope
    with model:
        step = TunaMH(temperature=2.0)
    assert step.group_moves
    assert _shared_problems(_sample(model, step), mean, sd)


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere])
def test_approximate_sweeps_alone_match_the_grid(independent_groups, step_class):
    """Nothing shared: the step's moves are its sweeps, each group decided by the step's
    own test on a few of its rows."""
    model, mean, sd = independent_groups
    with model:
        step = step_class()
    assert step.group_moves, step.group_moves_unavailable
    idata = _sample(model, step)
    problems = _problems(idata, mean, sd)
    assert not problems, problems
    n_rows = model.rvs_to_values[model["y"]].data.size
    assert float(idata.sample_stats["batch_size"].mean()) < 0.5 * n_rows


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere])
def test_approximate_sweeps_and_shared_moves_match_the_grid(groups_and_a_slope, step_class):
    model, mean, sd = groups_and_a_slope
    with model:
        step = step_class()
    assert step.group_moves, step.group_moves_unavailable
    assert step._shared_coordinates.size == 1
    problems = _shared_problems(_sample(model, step), mean, sd)
    assert not problems, problems


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere])
def test_negative_control_tempered_approximate_sweeps_fail(groups_and_a_slope, step_class):
    model, mean, sd = groups_and_a_slope
    with model:
        step = step_class(temperature=2.0)
    assert step.group_moves
    assert _shared_problems(_sample(model, step), mean, sd)


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere])
def test_several_observed_variables_over_the_same_rows_are_sampled(step_class):
    """A likelihood of several parts has no single design: no sweep, no crash (it raised
    AttributeError while looking for the rows' supports)."""
    rng = np.random.default_rng(3)
    n = 2000
    x = rng.normal(size=n)
    with pm.Model():
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        pm.Bernoulli("y", logit_p=a + b * x, observed=(rng.random(n) < special.expit(0.3 + x)))
        pm.StudentT("z", nu=4, mu=a - b * x, sigma=1.0, observed=rng.standard_t(4, n))
        step = step_class()
        assert not step.group_moves
        idata = pm.sample(step=step, draws=50, tune=50, chains=1, cores=1, random_seed=2, **QUIET)
    assert np.isfinite(idata["posterior"]["a"].values).all()
