"""Kinks of the per-row log-likelihood in the parameters: found in the graph, and such
models refused by every step with what to do (a pm.Laplace regression gave posterior
means 8-25 posterior sds off NUTS with the defaults)."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.likelihood.smoothness import kinks

q = pt.vector("q")
y = pt.vector("y")


@pytest.mark.parametrize(
    "graph",
    [
        pytest.param(-pt.abs(y - q[0]) / pt.exp(q[1]), id="laplace"),
        pytest.param(pt.sign(y - q[0]) * q[1], id="sign"),
    ],
)
def test_an_abs_or_sign_of_data_and_parameters_is_a_kink(graph):
    assert len(kinks([graph], q, [y])) == 1


@pytest.mark.parametrize(
    "graph",
    [
        pytest.param(-((y - q[0]) ** 2), id="smooth"),
        pytest.param(-pt.abs(q[0]) * y, id="abs-of-parameters-only"),
        pytest.param(-pt.abs(y) * q[0], id="abs-of-data-only"),
        pytest.param(-pt.log(pt.abs(y * q[0])), id="log-abs-of-a-scale"),
    ],
)
def test_negative_controls_are_no_kinks(graph):
    assert kinks([graph], q, [y]) == []


def _laplace_regression():
    rng = np.random.default_rng(9)
    x = rng.normal(size=2000)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        scale = pm.HalfNormal("scale", 2)
        pm.Laplace("y", mu=a + b * x, b=scale, observed=0.5 + x + rng.laplace(0, 1, 2000))
    return model


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere, TunaMH, FlyMC])
def test_every_step_refuses_a_laplace_likelihood_and_says_what_to_do(step_class):
    with _laplace_regression():
        with pytest.raises(ValueError, match="kink") as refusal:
            step_class(progressbar=False)
    message = str(refusal.value)
    assert "pm.Laplace" in message and "NUTS" in message and "pm.StudentT" in message


def test_plain_random_walk_tests_without_control_variates_are_not_refused():
    """Control: the refusal is about the Taylor proxy and the fitted proposals."""
    with _laplace_regression():
        step = MinibatchBarker(progressbar=False, control_variates=False, proposal="rw")
    assert not step.control_variates


def test_negative_control_a_student_t_regression_is_not_refused():
    rng = np.random.default_rng(9)
    x = rng.normal(size=2000)
    with pm.Model():
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        pm.StudentT("y", nu=3, mu=a + b * x, sigma=1.0, observed=x + rng.standard_t(3, 2000))
        step = MinibatchBarker(progressbar=False)
    assert step.control_variates


def test_negative_control_a_kink_inside_a_parameter_check_is_no_kink():
    """PyMC's Categorical checks ``abs(sum(p) - 1) < tol``: only a condition reads it."""
    p = pt.sigmoid(y - q[0])
    checked = pt.switch(pt.abs(p - q[1]) < 1e-6, pt.log(p), -np.inf)
    assert kinks([checked], q, [y]) == []
    assert len(kinks([checked + pt.abs(y - q[0])], q, [y])) == 1  # control


def test_negative_control_a_kink_of_a_positive_term_is_never_crossed():
    """PyMC's Student-t writes sigma = abs(tau) ** -0.5 * sign(tau); with a scale per row,
    tau = exp(...) ** -2 depends on the data and the parameters but is positive."""
    tau = pt.exp(q[0] + q[1] * y) ** -2
    sigma = pt.abs(tau) ** -0.5 * pt.sign(tau)
    assert kinks([-pt.log(sigma) - (y / sigma) ** 2], q, [y]) == []
    shifted = tau - 1.0  # control: no longer positive by construction
    assert len(kinks([pt.sign(shifted) * y], q, [y])) == 1
