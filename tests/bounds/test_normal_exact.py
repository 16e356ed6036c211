"""FlyMC's exact Normal likelihood (free scale): per-row values, the collapsed sum and its
gradients agree with the model's own log-likelihood everywhere, with no trust region."""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import FlyMC
from pymc_minibatch_mh.bounds.normal_exact import ExactNormalLikelihood

N, GROUPS = 4_000, 30


@pytest.fixture(scope="module")
def normal_groups():
    rng = np.random.default_rng(8)
    g = rng.integers(0, GROUPS, N)
    x = rng.normal(size=N)
    y = 1.0 + rng.normal(0, 0.7, GROUPS)[g] + 0.5 * x + rng.normal(0, 1.3, N)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 1)
        a = pm.Normal("a", mu, tau, shape=GROUPS)
        b = pm.Normal("b", 0, 1)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", a[g] + b * x + 0.25, sigma, observed=y)  # with an offset
        step = FlyMC(progressbar=False)
    return model, step


def test_the_normal_bound_is_the_likelihood_itself(normal_groups):
    _, step = normal_groups
    bound, data = step.bound, step.tall_data
    assert isinstance(bound, ExactNormalLikelihood) and bound.region is None
    rng = np.random.default_rng(1)
    rows = rng.choice(N, 300, replace=False)
    for scale in (0.1, 3.0, 30.0):  # far outside any trust region too
        q = bound.centre + scale * rng.normal(size=data.ndim)
        np.testing.assert_allclose(bound.log_bound(q, rows), data.loglik(q, rows), rtol=1e-10)
        total = float(np.sum(data.loglik_full(q)))
        assert bound.log_bound_sum(q) == pytest.approx(total, rel=1e-10)


def test_gradients_match_finite_differences(normal_groups):
    _, step = normal_groups
    bound = step.bound
    rng = np.random.default_rng(2)
    q = bound.centre + 0.5 * rng.normal(size=bound.centre.size)
    rows = rng.choice(N, 50, replace=False)
    weights = rng.random(50)
    grad_sum = bound.log_bound_sum_grad(q)
    grad_rows = bound.log_bound_weighted_grad(q, rows, weights)
    eps = 1e-6
    for j in rng.choice(q.size, 6, replace=False):
        e = np.zeros(q.size)
        e[j] = eps
        fd_sum = (bound.log_bound_sum(q + e) - bound.log_bound_sum(q - e)) / (2 * eps)
        assert grad_sum[j] == pytest.approx(fd_sum, rel=1e-5, abs=1e-4)
        fd_rows = (
            weights @ bound.log_bound(q + e, rows) - weights @ bound.log_bound(q - e, rows)
        ) / (2 * eps)
        assert grad_rows[j] == pytest.approx(fd_rows, rel=1e-5, abs=1e-6)


def test_no_datum_turns_bright_and_no_row_is_read_after_the_start(normal_groups):
    model, step = normal_groups
    with model:
        idata = pm.sample(
            step=step,
            draws=100,
            tune=100,
            chains=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    stats = idata.sample_stats
    assert int(stats["n_bright"].max()) == 0
    assert int(stats["batch_size"].sum()) == 0  # the start's exact draw of z is in tuning


def test_a_student_t_free_scale_keeps_its_trust_region_bound():
    """Negative control: only the Normal has sufficient statistics."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=2_000)
    with pm.Model():
        b = pm.Normal("b", 0, 1)
        sigma = pm.HalfNormal("sigma", 2)
        pm.StudentT("y", nu=4, mu=b * x, sigma=sigma, observed=rng.standard_t(4, 2_000))
        step = FlyMC(progressbar=False)
    assert not isinstance(step.bound, ExactNormalLikelihood)
    assert step.bound.region is not None
