"""The likelihood's image: found in the graph, chain rule exact, proxy accurate where q's is not."""

import numpy as np
import pymc as pm
import pytest
from pymc.pytensorf import make_shared_replacements

from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget
from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.image import find_likelihood_image
from pymc_minibatch_mh.likelihood.taylor import (
    chunked_taylor_sums,
    compile_residual_diff,
    compile_sum_derivatives,
    full_data_taylor,
)
from pymc_minibatch_mh.step_methods.reference import block_position, find_map

N, GROUPS = 4_000, 6


def _tall_data_at_map(model):
    """The model's TallData, its initial point and its MAP (as the block vector)."""
    point = model.initial_point()
    data = build_tall_data(
        model,
        model.value_vars,
        shared=make_shared_replacements(point, model.value_vars, model),
        initial_point=point,
    )
    reference = block_position(find_map(model, point, progressbar=False), model.value_vars)
    return data, point, reference


@pytest.fixture(scope="module")
def noncentred():
    rng = np.random.default_rng(3)
    group = rng.integers(0, GROUPS, size=N)
    x = rng.normal(size=N)
    y = 0.5 + rng.normal(0, 0.4, GROUPS)[group] + 0.7 * x + rng.normal(0, 1.0, N)
    with pm.Model() as model:
        mu_a = pm.Normal("mu_a", 0, 5)
        sigma_a = pm.HalfNormal("sigma_a", 1)
        z = pm.Normal("z", 0, 1, shape=GROUPS)
        a = pm.Deterministic("a", mu_a + sigma_a * z)
        b = pm.Normal("b", 0, 1)
        sigma = pm.Exponential("sigma", 1)
        pm.Normal("y", a[group] + b * x, sigma, observed=y)
    data, point, reference = _tall_data_at_map(model)
    image = find_likelihood_image(data, block_position(point, model.value_vars))
    return model, data, image, reference


def _image_target(data, image, reference):
    graphs = data.graphs
    derivatives = compile_sum_derivatives(image.phi, image.batch, graphs.idx, {}, size=image.size)
    proxy = chunked_taylor_sums(derivatives, image.to_image(reference), data.n_data)
    from pymc_minibatch_mh.likelihood.taylor import _compile_residual_diff

    residual = _compile_residual_diff(image.phi, image.batch, graphs.idx, {}, exclude_fusion=False)
    return ControlVariateTarget(data, proxy, residual, coordinates=image.to_image), derivatives


def test_image_holds_what_the_likelihood_reads(noncentred):
    """Group intercepts, slope and noise scale: not the 6 z's, mu_a and sigma_a apart."""
    _, data, image, _ = noncentred
    assert image is not None
    assert data.ndim == GROUPS + 4
    # a (6 intercepts), b, and sigma (in one or two forms, e.g. sigma and log sigma).
    assert GROUPS + 2 <= image.size <= GROUPS + 4


def test_chain_rule_gives_the_derivative_sums_in_q(noncentred, rng):
    _, data, image, reference = noncentred
    target, derivatives = _image_target(data, image, reference)
    q = reference + 0.1 * rng.standard_normal(data.ndim)
    in_image = chunked_taylor_sums(derivatives, image.to_image(q), data.n_data)
    gradient, hessian = image.pull_back(q, in_image.gradient, in_image.hessian)
    direct = full_data_taylor(data, q)
    np.testing.assert_allclose(gradient, direct.gradient, rtol=1e-8, atol=1e-6)
    np.testing.assert_allclose(hessian, direct.hessian, rtol=1e-8, atol=1e-6)


def test_image_control_variates_are_exact_and_far_less_noisy(noncentred, rng):
    """Offset + residuals over all rows is the exact ratio in both coordinate systems;
    for a move of the group scale the image's proxy is exact (the likelihood is
    quadratic in the intercepts) while q's leaves residuals of third order."""
    _, data, image, reference = noncentred
    image_target, _ = _image_target(data, image, reference)
    q_target = ControlVariateTarget(
        data, full_data_taylor(data, reference), compile_residual_diff(data)
    )
    rows = np.arange(N)
    spreads = {}
    for name, target in (("image", image_target), ("q", q_target)):
        spread = []
        for _ in range(5):
            # Move the hierarchy only (mu_a, log sigma_a, z): the likelihood is exactly
            # quadratic in the intercepts a at fixed slope and noise scale.
            q_old = reference.copy()
            q_old[: GROUPS + 2] += 0.05 * rng.standard_normal(GROUPS + 2)
            q_new = q_old.copy()
            q_new[1] += 0.4  # log sigma_a: the direction in which a = mu_a + sigma_a z bends
            exact = float(np.sum(data.loglik_full(q_new) - data.loglik_full(q_old)))
            residuals = target.loglik_diff(q_new, q_old, rows)
            total = target.diff_offset(q_new, q_old) + float(residuals.sum())
            assert total == pytest.approx(exact, rel=1e-9, abs=1e-6), name
            spread.append(float(np.std(residuals)))
        spreads[name] = np.mean(spread)
    assert spreads["q"] > 1e-3, spreads
    assert spreads["image"] < 1e-6 * spreads["q"], spreads


def test_crossed_non_centred_effects_are_read_as_group_effects(rng):
    """``s_a * z_a[i] + s_b * z_b[j]`` reads the rows through gathers of ``z_a`` and
    ``z_b``; moved inside the gathers, the image holds the 5 + 4 effects ``s_a * z_a`` and
    ``s_b * z_b`` (not the z's and scales apart), the likelihood's values are unchanged, and
    the image's proxy is exact for a move of a scale (negative control: the proxy in ``q``
    is not)."""
    levels_a, levels_b, n = 5, 4, 2_000
    ia, ib = rng.integers(0, levels_a, n), rng.integers(0, levels_b, n)
    y = 0.3 + rng.normal(0, 0.7, levels_a)[ia] + rng.normal(0, 0.5, levels_b)[ib]
    y = y + rng.normal(size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        s_a, s_b = pm.HalfNormal("s_a", 1), pm.HalfNormal("s_b", 1)
        z_a = pm.Normal("z_a", 0, 1, shape=levels_a)
        z_b = pm.Normal("z_b", 0, 1, shape=levels_b)
        pm.Normal("y", mu + s_a * z_a[ia] + s_b * z_b[ib], 1.0, observed=y)
    data, point, reference = _tall_data_at_map(model)
    image = find_likelihood_image(data, reference)
    assert image is not None
    assert levels_a + levels_b <= image.size <= levels_a + levels_b + 1  # (+ mu, or folded)
    target, _ = _image_target(data, image, reference)
    q_target = ControlVariateTarget(
        data, full_data_taylor(data, reference), compile_residual_diff(data)
    )
    rows = np.arange(n)
    q_old = reference.copy()
    q_new = reference.copy()
    q_new[1] += 0.3  # log s_a
    exact = float(np.sum(data.loglik_full(q_new) - data.loglik_full(q_old)))
    spreads = {}
    for name, t in (("image", target), ("q", q_target)):
        residuals = t.loglik_diff(q_new, q_old, rows)
        assert t.diff_offset(q_new, q_old) + residuals.sum() == pytest.approx(exact, abs=1e-6)
        spreads[name] = float(np.std(residuals))
    assert spreads["q"] > 1e-3, spreads
    assert spreads["image"] < 1e-6 * spreads["q"], spreads


def test_lift_leaves_values_and_skips_row_dependent_operands(rng):
    """``c * z[i]`` becomes ``(c * z)[i]`` with the same values; ``x_row * z[i]`` (an
    operand that reads the rows) and ``exp(z[i])`` (not affine) are left as they are."""
    import pytensor
    import pytensor.tensor as pt

    from pymc_minibatch_mh.likelihood.image import lift_row_gathers

    q = pt.vector("q")
    idx = pt.vector("idx", dtype="int64")
    group = pt.as_tensor(rng.integers(0, 3, 50))
    x = pt.as_tensor(rng.normal(size=50))
    gathered = q[1:4][group[idx]]
    scaled = pt.exp(q[0]) * gathered
    lifted = lift_row_gathers(scaled, q, idx)
    assert lifted.owner.op is gathered.owner.op or type(lifted.owner.op) is type(gathered.owner.op)
    fn = pytensor.function([q, idx], [scaled, lifted])
    before, after = fn(rng.normal(size=4), np.arange(50))
    np.testing.assert_allclose(after, before)
    mixed = x[idx] * gathered
    assert lift_row_gathers(mixed, q, idx) is mixed
    curved = pt.exp(gathered)  # not affine: the image stays the effects themselves
    assert lift_row_gathers(curved, q, idx) is curved
