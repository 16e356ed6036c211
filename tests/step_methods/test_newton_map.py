"""The Newton search for the posterior mode whose passes are the Taylor passes."""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.kernels.control_variates import TaylorProxy
from pymc_minibatch_mh.step_methods.reference import block_position, find_map, newton_map


def _gaussian_pieces(mean, precision, prior_sd=10.0):
    """A quadratic log-likelihood and a N(0, prior_sd^2) prior, as the step sees them."""
    calls = []

    def taylor_at(q):
        calls.append(q.copy())
        d = q - mean
        return TaylorProxy(q.copy(), float(-0.5 * d @ precision @ d), -(precision @ d), -precision)

    def prior_at(q):
        return (
            float(-0.5 * q @ q / prior_sd**2),
            -q / prior_sd**2,
            -np.eye(q.size) / prior_sd**2,
        )

    return taylor_at, prior_at, calls


def test_quadratic_posterior_takes_one_step():
    precision = np.array([[4.0, 1.0], [1.0, 2.0]])
    mean = np.array([1.0, -3.0])
    taylor_at, prior_at, calls = _gaussian_pieces(mean, precision)
    result = newton_map(taylor_at, prior_at, np.zeros(2))
    exact = np.linalg.solve(precision + np.eye(2) / 100.0, precision @ mean)
    assert result.converged
    np.testing.assert_allclose(result.position, exact, rtol=1e-10)
    assert result.passes == len(calls) == 2  # start, one Newton step (then converged)
    np.testing.assert_allclose(result.proxy.reference, result.position)


def test_non_concave_start_is_damped_and_converges():
    """A Student-t log-likelihood is convex far from its centre: the plain Newton step
    points the wrong way there, the damped one does not."""
    y = np.array([-0.5, 0.2, 0.4, 0.9])

    def taylor_at(q):
        r = y - q[0]
        value = float(-2.5 * np.sum(np.log1p(r**2 / 4.0)))
        grad = float(np.sum(5.0 * r / (4.0 + r**2)))
        hess = float(np.sum(5.0 * (r**2 - 4.0) / (4.0 + r**2) ** 2))
        return TaylorProxy(q.copy(), value, np.array([grad]), np.array([[hess]]))

    def prior_at(q):
        return float(-0.5 * q[0] ** 2 / 100.0), -q / 100.0, -np.eye(1) / 100.0

    start = np.array([40.0])
    assert taylor_at(start).hessian[0, 0] > 0  # convex where the search starts
    result = newton_map(taylor_at, prior_at, start)
    assert result.converged
    grid = np.linspace(-3, 3, 600001)
    values = [taylor_at(np.array([g])).value + prior_at(np.array([g]))[0] for g in grid[::100]]
    assert result.position[0] == pytest.approx(grid[::100][int(np.argmax(values))], abs=2e-3)


def test_too_few_passes_report_no_convergence():
    """Negative control: a search cut off after its first pass is not reported converged."""
    taylor_at, prior_at, _ = _gaussian_pieces(np.array([5.0]), np.eye(1))
    result = newton_map(taylor_at, prior_at, np.zeros(1), max_passes=1)
    assert not result.converged and result.passes == 1


def test_step_reference_is_the_mode_pymc_finds(rng):
    x = rng.normal(size=(4000, 3))
    y = rng.random(4000) < 1 / (1 + np.exp(-(0.2 + x @ np.array([1.0, -0.5, 0.3]))))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=a + x @ b, observed=y.astype(int))
        step = MinibatchBarker(progressbar=False)
    theirs = block_position(find_map(model, model.initial_point(), progressbar=False), step.vars)
    # The step's search stops at a Newton decrement of 1e-2: within ~0.15 posterior sd.
    sds = np.sqrt(np.diag(step._laplace_chol @ step._laplace_chol.T))
    np.testing.assert_array_less(np.abs(step.reference.reference - theirs), 0.15 * sds)
    # Newton passes are the Taylor passes: a few of them, all counted (plus the data
    # validation pass and the self-check's two full evaluations).
    assert 4 <= step.n_data_passes <= 10


def test_a_saddle_is_not_taken_for_the_mode():
    """At a saddle the damped step is tiny and so is its decrement (as where the scale of
    a non-centred effect meets zero): the search must climb on to a mode, where the
    Hessian is negative definite, instead of stopping there."""

    def taylor_at(q):
        value = float(-0.5 * q[0] ** 2 + 0.5 * q[1] ** 2 - 0.25 * q[1] ** 4)
        gradient = np.array([-q[0], q[1] - q[1] ** 3])
        hessian = np.diag([-1.0, 1.0 - 3.0 * q[1] ** 2])
        return TaylorProxy(q.copy(), value, gradient, hessian)

    def prior_at(q):
        return 0.0, np.zeros(2), np.zeros((2, 2))

    start = np.array([1e-4, 1e-4])  # next to the saddle at the origin
    assert taylor_at(start).hessian[1, 1] > 0
    result = newton_map(taylor_at, prior_at, start, tolerance=1e-10)
    assert result.converged
    assert abs(result.position[1]) == pytest.approx(1.0, abs=1e-4)  # a mode at q1 = +-1
    assert np.all(np.linalg.eigvalsh(result.proxy.hessian) < 0)


@pytest.mark.parametrize("error", [OverflowError, ValueError])
def test_a_trial_point_where_the_likelihood_overflows_shortens_the_step(error):
    """A first Newton step that lands where a pass fails (e.g. ``math.exp`` of a huge
    precision) is halved until a pass succeeds; the mode is still found."""
    precision = np.array([[4.0, 1.0], [1.0, 2.0]])
    mean = np.array([1.0, -3.0])
    quadratic, prior_at, _ = _gaussian_pieces(mean, precision)
    start = np.zeros(2)
    exact = np.linalg.solve(precision + np.eye(2) / 100.0, precision @ mean)
    failed = []

    def taylor_at(q):
        if np.allclose(q, exact):  # the full step: made to fail
            failed.append(q.copy())
            raise error("math range error")
        return quadratic(q)

    result = newton_map(taylor_at, prior_at, start, tolerance=1e-12)
    assert failed  # the full step was tried and failed
    np.testing.assert_allclose(result.position, exact, rtol=1e-4)
