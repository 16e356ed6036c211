"""Non-centred effects and their centred twin: found, bijective, same posterior."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

from pymc_minibatch_mh.likelihood.centring import centred_twin

N, GROUPS = 500, 6


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, GROUPS, size=N), rng.normal(size=N), rng


def _noncentred(effect=lambda mu, sigma, z: mu + sigma * z, z_prior=(0.0, 1.0)):
    group, x, rng = _data()
    y = rng.normal(size=N)
    with pm.Model(coords={"group": np.arange(GROUPS)}) as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        z = pm.Normal("z", *z_prior, dims="group")
        a = pm.Deterministic("a", effect(mu, sigma, z), dims="group")
        b = pm.Normal("b", 0.0, 1.0)
        pm.Normal("y", a[group] + b * x, 1.0, observed=y)
    return model


def _lkj():
    group, x, rng = _data(1)
    y = rng.normal(size=N)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True
        )
        pm.Deterministic("L", chol)
        mu = pm.Normal("mu", 0.0, 2.0, shape=2)
        z = pm.Normal("z", 0.0, 1.0, shape=(GROUPS, 2))
        ab = pm.Deterministic("ab", mu + pt.dot(z, chol.T))
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", ab[group, 0] + ab[group, 1] * x, sigma, observed=y)
    return model


def _twin(model):
    return centred_twin(model, [v.name for v in model.value_vars])


def _random_point(model, seed):
    rng = np.random.default_rng(seed)
    return {k: v + rng.normal(0.0, 0.7, np.shape(v)) for k, v in model.initial_point().items()}


def test_scale_effect_twin_has_the_effect_as_a_free_variable():
    twin = _twin(_noncentred())
    assert twin is not None and twin.effects == ("a <- z",)
    names = {v.name for v in twin.model.value_vars}
    assert names == {"mu", "sigma_log__", "a", "b"}
    assert not twin.model.deterministics  # the twin needs none


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scale_twin_log_density_is_the_change_of_variables(seed):
    """logp_twin(a) = logp_user(z) - sum log |d a / d z| (= G log sigma), at random points."""
    model = _noncentred()
    twin = _twin(model)
    point = _random_point(model, seed)
    twin_point = twin.twin_point(point)
    sigma = np.exp(point["sigma_log__"])
    np.testing.assert_allclose(twin_point["a"], point["mu"] + sigma * point["z"], rtol=1e-12)
    user_logp = model.compile_logp()(point)
    twin_logp = twin.model.compile_logp()(twin_point)
    np.testing.assert_allclose(twin_logp, user_logp - GROUPS * np.log(sigma), rtol=1e-10)
    back = twin.user_point(twin_point)
    for name, value in point.items():
        np.testing.assert_allclose(back[name], value, rtol=1e-10, atol=1e-12)


def test_negative_control_log_density_without_the_jacobian_differs():
    """The identity above is not vacuous: without the Jacobian term it fails."""
    model = _noncentred()
    twin = _twin(model)
    point = _random_point(model, 4)
    twin_logp = twin.model.compile_logp()(twin.twin_point(point))
    assert not np.isclose(twin_logp, model.compile_logp()(point), rtol=1e-6)


def test_z_with_another_normal_prior_and_a_negative_scale():
    """z ~ Normal(1, 2) and a = mu - sigma * z: a ~ Normal(mu - sigma, 2 sigma)."""
    model = _noncentred(effect=lambda mu, sigma, z: mu - sigma * z, z_prior=(1.0, 2.0))
    twin = _twin(model)
    point = _random_point(model, 5)
    sigma = np.exp(point["sigma_log__"])
    twin_logp = twin.model.compile_logp()(twin.twin_point(point))
    np.testing.assert_allclose(
        twin_logp, model.compile_logp()(point) - GROUPS * np.log(sigma), rtol=1e-10
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_lkj_effect_twin_is_the_multivariate_normal(seed):
    """ab_g = mu + L z_g: logp_twin = logp_user - G log |det L|; the inverse map is exact."""
    model = _lkj()
    twin = _twin(model)
    assert twin is not None and twin.effects == ("ab <- z",)
    point = _random_point(model, seed)
    twin_point = twin.twin_point(point)
    chol = pytensor.function(
        model.value_vars, model.replace_rvs_by_values([model["L"]])[0], on_unused_input="ignore"
    )(*[point[v.name] for v in model.value_vars])
    np.testing.assert_allclose(twin_point["ab"], point["mu"] + point["z"] @ chol.T, rtol=1e-10)
    log_det = np.sum(np.log(np.abs(np.diag(chol))))
    twin_logp = twin.model.compile_logp()(twin_point)
    np.testing.assert_allclose(twin_logp, model.compile_logp()(point) - GROUPS * log_det, rtol=1e-9)
    back = twin.user_point(twin_point)
    np.testing.assert_allclose(back["z"], point["z"], rtol=1e-9, atol=1e-10)


def test_centred_model_has_no_twin():
    group, x, rng = _data()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        a = pm.Normal("a", mu, sigma, shape=GROUPS)
        pm.Normal("y", a[group], 1.0, observed=rng.normal(size=N))
    assert _twin(model) is None


def test_non_affine_effect_has_no_twin():
    """a = mu + sigma * z**3 is not affine in z: not centred (negative control)."""
    assert _twin(_noncentred(effect=lambda mu, sigma, z: mu + sigma * z**3)) is None


def test_effect_of_another_shape_or_shared_use_has_no_twin():
    group, x, rng = _data()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=GROUPS)
        a = mu + sigma * z
        pm.Normal("y", a[group], 1.0, observed=rng.normal(size=N))
        pm.Potential("pull", -pt.sum(z**2))  # z read elsewhere: not a bijection's only use
    assert _twin(model) is None


def test_part_of_the_model_has_no_twin():
    model = _noncentred()
    assert centred_twin(model, ["mu", "z"]) is None


def _indexed_inside(predictor, group_as_data=False):
    """Non-centred intercepts written with the index inside the effect, as in
    ``mu + sigma * z[group]``, with a per-row covariate term beside it."""
    group, x, rng = _data(2)
    y = rng.normal(size=N)
    with pm.Model() as model:
        g = pm.Data("g", group) if group_as_data else group
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.0, shape=GROUPS)
        z = pm.Normal("z", 0.0, 1.0, shape=GROUPS)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Normal("y", predictor(mu, sigma, z, g, b, x), 1.0, observed=y)
    return model


@pytest.mark.parametrize(
    ("predictor", "group_as_data"),
    [
        (lambda mu, sigma, z, g, b, x: mu + sigma[0] * z[g] + b * x, False),
        (lambda mu, sigma, z, g, b, x: b * x + (mu + sigma[g] * z[g]), True),
    ],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_effect_indexed_inside_has_the_lifted_effect_as_twin(predictor, group_as_data, seed):
    """``mu + sigma * z[g]`` is ``(mu + sigma * z)[g]``: the twin holds that effect, with
    the change of variables' Jacobian, and maps points both ways."""
    model = _indexed_inside(predictor, group_as_data)
    twin = _twin(model)
    assert twin is not None and twin.effects == ("z_centred <- z",)
    point = _random_point(model, seed)
    twin_point = twin.twin_point(point)
    sigma = np.exp(point["sigma_log__"])
    scale = np.full(GROUPS, sigma[0]) if not group_as_data else sigma
    effect = twin_point["z_centred"]
    np.testing.assert_allclose(effect, point["mu"] + scale * point["z"], rtol=1e-12)
    user_logp = model.compile_logp()(point)
    twin_logp = twin.model.compile_logp()(twin_point)
    np.testing.assert_allclose(twin_logp, user_logp - np.sum(np.log(scale)), rtol=1e-10)
    back = twin.user_point(twin_point)
    for name, value in point.items():
        np.testing.assert_allclose(back[name], value, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "predictor",
    [
        # each row's datum multiplies z[g] before anything else: no effect of z's shape
        lambda mu, sigma, z, g, b, x: mu + z[g] * x * sigma[0] + b,
        # the scale indexed by another index than z: not (sigma * z)[g]
        lambda mu, sigma, z, g, b, x: mu + sigma[(g + 1) % GROUPS] * z[g] + b * x,
    ],
)
def test_negative_control_index_that_does_not_lift_has_no_twin(predictor):
    assert _twin(_indexed_inside(predictor)) is None
