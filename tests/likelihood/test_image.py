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
    point = model.initial_point()
    data = build_tall_data(
        model,
        model.value_vars,
        shared=make_shared_replacements(point, model.value_vars, model),
        initial_point=point,
    )
    reference = block_position(find_map(model, point, progressbar=False), model.value_vars)
    image = find_likelihood_image(data, block_position(point, model.value_vars))
    return model, data, image, reference


def _image_target(data, image, reference):
    graphs = data.graphs
    derivatives = compile_sum_derivatives(image.phi, image.batch, graphs.idx, {})
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
