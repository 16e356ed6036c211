"""The prior PyMC computes, compiled as value and gradient, its Hessian from differences of
the gradient: equal to the Hessian's own graph, which serves where the differences do not
settle."""

import numpy as np
import pymc as pm
from pymc.pytensorf import make_shared_replacements

from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.compiled_prior import compile_prior


def _prior(model: pm.Model):
    point = model.initial_point()
    shared = make_shared_replacements(point, model.value_vars, model)
    data = build_tall_data(
        model, model.value_vars, shared=shared, initial_point=point, numpy_functions=False
    )
    return compile_prior(
        data.graphs.q, data.graphs.prior, data.ndim, data.graphs.compile_kwargs, data.graphs.shapes
    )


def _products(prior):
    """The prior's products (differences of its gradient, or the graph's)."""
    return prior._derivatives.function


def _agrees_with_graph(prior, points):
    for q in points:
        value, grad, hess = prior.value_grad_hessian(q)
        want = _products(prior).compile_exact()(q, np.eye(q.size), None)
        np.testing.assert_allclose(value, want[0], rtol=1e-12)
        np.testing.assert_allclose(grad, want[1], rtol=1e-12)
        np.testing.assert_allclose(hess, want[2].T, rtol=1e-8, atol=1e-8)
        # Negative control: the Hessian is not diagonal (mu, tau and a meet).
        assert abs(hess[0, 2]) > 1e-3


def test_a_hierarchical_prior_hessian_equals_its_graph():
    group = np.arange(300) % 6
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        tau = pm.Gamma("tau", 2, 2)
        a = pm.Normal("a", mu, tau, shape=6)
        pm.Poisson("y", mu=pm.math.exp(a[group]), observed=group % 3)
    prior = _prior(model)
    _agrees_with_graph(prior, 0.5 * np.random.default_rng(0).standard_normal((3, prior.ndim)))
    assert _products(prior).exact is None  # the differences settled at every point


def test_many_group_effects_cost_a_few_products_and_keep_the_hessian():
    """400 intercepts and slopes of 200 groups, correlated per group through an LKJ
    prior: the group axis is compressed (2 colours for the 400 effects), and the Hessian
    recovered from the colours equals the graph's (which the first call checks)."""
    groups = 200
    group = np.arange(2000) % groups
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2, shape=2)
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0, shape=2), compute_corr=True
        )
        ab = pm.MvNormal("ab", mu, chol=chol, shape=(groups, 2))
        pm.Poisson("y", mu=pm.math.exp(ab[group, 0] + ab[group, 1]), observed=group % 3)
    prior = _prior(model)
    colouring = prior._derivatives.colouring
    assert colouring.n_colours == prior.ndim - 2 * groups + 2
    _agrees_with_graph(prior, 0.3 * np.random.default_rng(1).standard_normal((2, prior.ndim)))
    assert prior._derivatives.colouring is colouring  # the check kept the compression


def test_a_prior_coupling_the_groups_falls_back_to_the_dense_colouring():
    """Negative control: a random walk over 40 groups couples neighbours, which the
    group-axis colouring assumes apart; the first call's check finds that and the
    Hessian is still the graph's."""
    group = np.arange(400) % 40
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        sigma = pm.HalfNormal("sigma", 1.0)
        walk = pm.GaussianRandomWalk(
            "walk", mu=0.0, sigma=sigma, init_dist=pm.Normal.dist(0, 1), shape=40
        )
        pm.Poisson("y", mu=pm.math.exp(mu + walk[group]), observed=group % 3)
    prior = _prior(model)
    q = 0.3 * np.random.default_rng(2).standard_normal(prior.ndim)
    hess = prior.value_grad_hessian(q)[2]
    assert prior._derivatives.colouring.n_colours == prior.ndim  # switched to dense
    want = _products(prior).compile_exact()(q, np.eye(q.size), None)[2].T
    np.testing.assert_allclose(hess, want, rtol=1e-8, atol=1e-8)


def test_a_prior_with_a_kink_at_the_point_gets_the_hessians_graph():
    """A Laplace prior at its centre: the gradient jumps, no step settles, the Hessian's
    graph is compiled and gives its curvature there (0), not a difference across the jump
    (about 1 / step)."""
    x = np.linspace(-1, 1, 200)
    with pm.Model() as model:
        b = pm.Laplace("b", 0.0, 1.0, shape=2)
        pm.Normal("y", mu=b[0] + b[1] * x, sigma=1, observed=x)
    prior = _prior(model)
    smooth = prior.value_grad_hessian(np.array([0.5, -0.7]))[2]
    assert _products(prior).exact is None
    np.testing.assert_allclose(smooth, 0.0, atol=1e-8)
    hess = prior.value_grad_hessian(np.array([0.0, -0.7]))[2]
    assert _products(prior).exact is not None
    np.testing.assert_allclose(hess, 0.0, atol=1e-12)
