"""Steps on non-centred models sample the centred twin and hand PyMC the user's variables.

Exactness through the bijection: a Bernoulli model of 8 non-centred group log-odds
``theta_g = 0.2 + 0.8 z_g`` with ``z_g ~ Normal(0, 1)`` and nothing shared. Its posterior
factorises over groups, so every ``z_g``'s mean and sd come from a 1-D grid integral; the
small groups' posteriors are skewed. ``TunaMH()`` and ``FlyMC()`` (exact) sample it in the
twin's coordinates ``theta`` and return ``z``: each mean within 4 Monte Carlo standard
errors and each sd within 10 % of the grid's. Negative control: the same check fails at
temperature 2 (a tempered posterior, too wide).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import special
from step_sampling import QUIET, moment_problems

from pymc_minibatch_mh import FlyMC, MinibatchBarker, TunaMH

GROUPS, LOC, SCALE = 8, 0.2, 0.8
Z_TOL, SD_TOL = 4.0, 0.10


def _grouped_bernoulli(index_inside: bool):
    rng = np.random.default_rng(53)
    sizes = rng.integers(6, 300, size=GROUPS)
    group = np.repeat(np.arange(GROUPS), sizes)
    theta = LOC + SCALE * rng.normal(size=GROUPS)
    y = (rng.random(group.size) < special.expit(theta[group])).astype(np.int8)
    with pm.Model() as model:
        z = pm.Normal("z", 0.0, 1.0, shape=GROUPS)
        if index_inside:  # the effect written per row: LOC + SCALE * z[group]
            pm.Bernoulli("y", logit_p=LOC + SCALE * z[group], observed=y)
        else:
            effect = pm.Deterministic("theta", LOC + SCALE * z)
            pm.Bernoulli("y", logit_p=effect[group], observed=y)
    ones = np.bincount(group, weights=y, minlength=GROUPS)
    return model, _grid_moments(ones, sizes)


@pytest.fixture(scope="module")
def grouped_bernoulli():
    return _grouped_bernoulli(index_inside=False)


@pytest.fixture(scope="module")
def indexed_inside_bernoulli():
    return _grouped_bernoulli(index_inside=True)


def _grid_moments(ones: np.ndarray, sizes: np.ndarray):
    """Mean and sd of every z_g by a 1-D grid integral of its exact posterior."""
    grid = np.linspace(-8.0, 8.0, 20_001)[:, None]
    theta = LOC + SCALE * grid
    log_post = -0.5 * grid**2 + ones * special.log_expit(theta)
    log_post += (sizes - ones) * special.log_expit(-theta)
    weights = np.exp(log_post - log_post.max(axis=0))
    weights /= weights.sum(axis=0)
    mean = (weights * grid).sum(axis=0)
    sd = np.sqrt((weights * (grid - mean) ** 2).sum(axis=0))
    return mean, sd


def _problems(idata, mean: np.ndarray, sd: np.ndarray) -> list[str]:
    return moment_problems(idata, "z", mean, sd, Z_TOL, SD_TOL)


def _sample(model, step):
    with model:
        return pm.sample(
            step=step, draws=3000, tune=1000, chains=2, cores=1, random_seed=531, **QUIET
        )


@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_exact_steps_are_exact_on_a_non_centred_model(grouped_bernoulli, step_class):
    model, (mean, sd) = grouped_bernoulli
    with model:
        step = step_class()
    assert step.centred_effects == ("theta <- z",)
    assert [v.name for v in step.vars] == ["z"]  # PyMC assigns the user's variables
    idata = _sample(model, step)
    problems = _problems(idata, mean, sd)
    assert not problems, problems


@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_exact_steps_are_exact_with_the_index_inside_the_effect(
    indexed_inside_bernoulli, step_class
):
    """``LOC + SCALE * z[group]`` is the same effect, written per row."""
    model, (mean, sd) = indexed_inside_bernoulli
    with model:
        step = step_class()
    assert step.centred_effects == ("z_centred <- z",)
    problems = _problems(_sample(model, step), mean, sd)
    assert not problems, problems


@pytest.mark.parametrize("form", ["grouped_bernoulli", "indexed_inside_bernoulli"])
def test_negative_control_tempered_posterior_fails(form, request):
    model, (mean, sd) = request.getfixturevalue(form)
    with model:
        step = TunaMH(temperature=2.0)
    assert _problems(_sample(model, step), mean, sd)


def test_deterministic_of_the_effect_is_the_users(grouped_bernoulli):
    """PyMC computes the Deterministic from the returned z: theta = 0.2 + 0.8 z, draw by draw."""
    model, _ = grouped_bernoulli
    with model:
        idata = pm.sample(
            step=MinibatchBarker(), draws=50, tune=50, chains=1, cores=1, random_seed=1, **QUIET
        )
    z, theta = np.asarray(idata.posterior["z"]), np.asarray(idata.posterior["theta"])
    np.testing.assert_allclose(theta, LOC + SCALE * z, rtol=1e-10)
    assert np.ptp(z, axis=1).min() > 0  # the chain moved


def _normal_groups(seed: int, groups: int, n: int) -> pm.Model:
    """``y ~ Normal((mu + sigma * z)[group], 1)`` on noise: no spread between groups."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, groups, size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=groups)
        pm.Normal("y", (mu + sigma * z)[group], 1.0, observed=rng.normal(size=n))
    return model


def test_points_given_by_the_user_are_read_in_the_users_coordinates():
    """initial_point and reference_point name z; the step converts them to the twin's."""
    with _normal_groups(2, 4, 400):
        point = {"mu": np.array(0.1), "sigma_log__": np.array(-0.5), "z": np.full(4, 0.3)}
        step = MinibatchBarker(initial_point=point, reference_point=point)
    assert step.centred_effects == ("z_centred <- z",)
    expected = 0.1 + np.exp(-0.5) * 0.3
    reference = step.reference.reference  # in the twin's coordinates (mu, sigma, z_centred)
    assert reference.size == 6
    assert np.isclose(reference, expected).sum() == 4


def test_user_chosen_block_is_sampled_as_written():
    with _normal_groups(3, 4, 400) as model:
        step = MinibatchBarker(vars=[model["mu"], model["sigma"], model["z"]])
    assert step.centred_effects == ()


def test_lkj_slopes_model_is_accepted_by_the_exact_steps():
    """Correlated slopes through LKJCholeskyCov: a Normal linear model in the twin, whose
    sum the exact steps know without reading a datum per draw."""
    rng = np.random.default_rng(4)
    groups, n = 8, 1_200
    group, x = rng.integers(0, groups, size=n), rng.normal(size=n)
    spread = np.linalg.cholesky(np.array([[0.5, 0.2], [0.2, 0.3]]))
    effects = np.array([1.0, -0.5]) + rng.normal(size=(groups, 2)) @ spread.T
    y = effects[group, 0] + effects[group, 1] * x + rng.normal(size=n)
    with pm.Model():
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True
        )
        mu = pm.Normal("mu", 0.0, 1.0, shape=2)
        z = pm.Normal("z", 0.0, 1.0, shape=(groups, 2))
        ab = mu + pt.dot(z, chol.T)
        pm.Normal("y", ab[group, 0] + ab[group, 1] * x, 1.0, observed=y)
        for step_class in (TunaMH, FlyMC):
            step = step_class()
            assert step.centred_effects == ("z_centred <- z",)
            idata = pm.sample(
                step=step, draws=20, tune=20, chains=1, cores=1, random_seed=4, **QUIET
            )
            assert int(np.asarray(idata.sample_stats["batch_size"]).sum()) == 0


def test_a_twin_without_a_joint_mode_is_expanded_at_its_marginal_mode():
    """No spread between groups in the data: the twin's joint density grows without bound
    as sigma -> 0, but the marginal mode of its scale exists and has a Laplace fit, so
    the step samples the twin."""
    with _normal_groups(5, 6, 600):
        step = MinibatchBarker()
    assert step.centred_effects == ("z_centred <- z",)
    assert step._marginal_scales is not None and step._laplace_chol is not None


def test_without_a_laplace_fit_in_the_twin_the_model_is_sampled_as_written(monkeypatch):
    """Neither the twin's reference (its marginal search made to fail) nor the image of a
    degenerate user mode (sigma = e^-30) has a Laplace fit: the step keeps the user's
    form."""
    from pymc_minibatch_mh.step_methods import centred_coordinates, construction
    from pymc_minibatch_mh.step_methods.reference import NoLaplaceFit

    def degenerate_mode(model, start, progressbar):
        return {**start, "sigma_log__": np.array(-30.0)}

    def no_marginal_fit(*args, **kwargs):
        raise NoLaplaceFit("no marginal fit (made to fail by the test)")

    monkeypatch.setattr(centred_coordinates, "find_map", degenerate_mode)
    monkeypatch.setattr(construction, "marginal_scale_mode", no_marginal_fit)
    with _normal_groups(5, 6, 600):
        step = MinibatchBarker()
    assert step.centred_effects == ()
    assert [v.name for v in step.vars] == ["mu", "sigma_log__", "z"]


def test_one_chain_in_one_process_records_the_users_variables():
    """PyMC's sequential sampler passes a point's values to its trace by position: the
    step returns the user's point in the order it was given, although the twin lists the
    non-centred ``z`` after ``b``, declared after it (z's draws are z's)."""
    rng = np.random.default_rng(2)
    group = rng.integers(0, 4, size=400)
    x = rng.normal(size=400)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=4)
        b = pm.Normal("b", 0.0, 1.0)
        y = rng.normal(size=400) + 0.5 * x
        pm.Normal("y", (mu + sigma * z)[group] + b * x, 1.0, observed=y)
        step = MinibatchBarker(progressbar=False)
        assert step.centred_effects == ("z_centred <- z",)
        idata = pm.sample(
            step=step,
            draws=30,
            tune=30,
            chains=1,
            cores=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    posterior = idata.posterior
    assert posterior["z"].shape == (1, 30, 4) and posterior["b"].shape == (1, 30)
    assert [v.name for v in model.value_vars] == ["mu", "sigma_log__", "z", "b"]
    assert abs(float(posterior["b"].mean()) - 0.5) < 0.3


def test_flymc_on_non_centred_effects_keeps_its_brightness_variables():
    """The step continues from its own twin position: the round trip through the user's
    z would change it by rounding, and FlyMC would then redraw every brightness variable
    (read every row) at every draw."""
    rng = np.random.default_rng(7)
    groups, n = 20, 6_000
    group = rng.integers(0, groups, size=n)
    x = rng.normal(size=n)
    effects = rng.normal(-0.3, 0.8, size=groups)
    y = (rng.random(n) < special.expit(effects[group] + 0.5 * x)).astype(np.int8)
    with pm.Model():
        mu = pm.Normal("mu", 0.0, 2.0)
        tau = pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=groups)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=(mu + tau * z)[group] + b * x, observed=y)
        step = FlyMC(progressbar=False)
        assert step.centred_effects == ("z_centred <- z",)
        idata = pm.sample(
            step=step,
            draws=60,
            tune=60,
            chains=1,
            cores=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    rows = idata.sample_stats["batch_size"].values
    assert rows.mean() < 0.25 * n, rows.mean()
