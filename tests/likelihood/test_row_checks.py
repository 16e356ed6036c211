"""PyMC's parameter checks taken row by row in the per-datum log-likelihood
(:mod:`pymc_minibatch_mh.likelihood.row_checks`)."""

import numpy as np
import pymc as pm
import pytest
from tall_builder import tall_data_of

from pymc_minibatch_mh.likelihood import stacked_rows as stacked_rows_module


def _tall(model):
    return tall_data_of(model)


def _log_linear_scale_model():
    """A Normal whose ``sigma = exp(c + d z_n)``: at ``d = 800`` the last row's
    ``z = -1`` makes its ``sigma`` underflow to 0 (outside PyMC's ``sigma > 0``), every
    other row (``|z| <= 0.5``) keeps a positive one."""
    rng = np.random.default_rng(0)
    z = np.concatenate([rng.uniform(-0.5, 0.5, 99), [-1.0]])
    y = rng.normal(size=100)
    with pm.Model() as model:
        c = pm.Normal("c", 0, 1)
        d = pm.Normal("d", 0, 1000)
        pm.Normal("y", 0, sigma=pm.math.exp(c + d * z), observed=y)
    return model, z, y


def _q(c: float, d: float) -> np.ndarray:
    return np.array([c, d])


def test_a_row_outside_its_parameter_domain_leaves_the_others_alone():
    model, z, y = _log_linear_scale_model()
    data = _tall(model)
    q = _q(0.0, 800.0)
    alone = data.loglik(q, np.arange(99))
    with_bad = data.loglik(q, np.arange(100))
    np.testing.assert_allclose(with_bad[:99], alone, rtol=1e-12)
    sigma = np.exp(800.0 * z[:99])
    expected = -0.5 * (y[:99] / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(alone, expected, rtol=1e-9)
    assert with_bad[99] == -np.inf
    assert data.loglik_full(q)[99] == -np.inf
    np.testing.assert_allclose(data.loglik_full(q)[:99], alone, rtol=1e-12)


def test_negative_control_with_pymc_checks_one_row_sets_the_whole_batch(monkeypatch):
    """PyMC's own check, reduced over the batch: the bad row takes every row with it."""
    monkeypatch.setattr(
        stacked_rows_module, "checks_per_row", lambda outputs, rows, **_: list(outputs)
    )
    model, _, _ = _log_linear_scale_model()
    data = _tall(model)
    values = data.loglik(_q(0.0, 800.0), np.arange(100))
    assert np.all(values == -np.inf)


@pytest.mark.parametrize("check_bounds", [True, False])
def test_zero_inflated_row_keeps_its_value_beside_an_underflowing_mean(check_bounds):
    """A zero-inflated negative binomial whose ``mu = exp(eta)`` underflows to 0 on one
    row (``eta = -800.7``): the other row (``mu = e^-0.7``) keeps its own value, with
    PyMC's checks (PyMC 5 checks ``mu > 0``, and every row of the batch became
    ``log(1 - psi)``) and without them (``check_bounds=False``: the checks removed, as
    PyMC does for such a model)."""
    x = np.array([0.0, -1.0, 0.0, 0.001])
    with pm.Model(check_bounds=check_bounds) as model:
        g = pm.Normal("g", 0, 100)
        pm.ZeroInflatedNegativeBinomial(
            "y", psi=0.75, mu=pm.math.exp(g * x - 0.7), alpha=2.9, observed=np.array([0, 0, 1, 2])
        )
    data = _tall(model)
    q = np.array([800.0])
    assert np.exp(q[0] * x[1] - 0.7) == 0.0
    together = data.loglik(q, np.array([0, 1]))
    alone = data.loglik(q, np.array([0]))[0]
    assert together[0] == pytest.approx(alone, rel=1e-12)
    zero_prob = 0.25 + 0.75 * (2.9 / (2.9 + np.exp(-0.7))) ** 2.9
    assert alone == pytest.approx(np.log(zero_prob), rel=1e-6)  # psi, alpha in float32
