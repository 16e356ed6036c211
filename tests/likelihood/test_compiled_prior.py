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
    return compile_prior(data.graphs.q, data.graphs.prior, data.ndim)


def test_a_hierarchical_prior_hessian_equals_its_graph():
    group = np.arange(300) % 6
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        tau = pm.Gamma("tau", 2, 2)
        a = pm.Normal("a", mu, tau, shape=6)
        pm.Poisson("y", mu=pm.math.exp(a[group]), observed=group % 3)
    prior = _prior(model)
    rng = np.random.default_rng(0)
    for q in 0.5 * rng.standard_normal((3, prior.ndim)):
        value, grad, hess = prior.value_grad_hessian(q)
        want = prior._products.compile_exact()(q, np.eye(q.size), None)
        np.testing.assert_allclose(value, want[0], rtol=1e-12)
        np.testing.assert_allclose(grad, want[1], rtol=1e-12)
        np.testing.assert_allclose(hess, want[2].T, rtol=1e-8, atol=1e-8)
        # Negative control: the Hessian is not diagonal (mu, tau and a meet).
        assert abs(hess[0, 2]) > 1e-3
    assert prior._products.exact is None  # the differences settled at every point


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
    assert prior._products.exact is None
    np.testing.assert_allclose(smooth, 0.0, atol=1e-8)
    hess = prior.value_grad_hessian(np.array([0.0, -0.7]))[2]
    assert prior._products.exact is not None
    np.testing.assert_allclose(hess, 0.0, atol=1e-12)
