"""The exact Normal likelihood (free scale): per-row values, the collapsed sum and its
gradients agree with the model's own log-likelihood everywhere, with no trust region.
FlyMC uses it as its bound; MinibatchBarker, Austere and TunaMH as their control
variates' proxy, after which none of them reads a datum."""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.bounds.normal_exact import ExactNormalLikelihood

N, GROUPS = 4_000, 30


def _normal_groups_model() -> pm.Model:
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
    return model


@pytest.fixture(scope="module")
def normal_groups():
    model = _normal_groups_model()
    with model:
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


def _sample_keeping_tuning(model, step, draws: int, seed: int):
    with model:
        return pm.sample(
            step=step,
            draws=draws,
            tune=draws,
            chains=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            discard_tuned_samples=False,
        )


def test_no_datum_turns_bright_and_no_row_is_ever_read(normal_groups):
    model, step = normal_groups
    idata = _sample_keeping_tuning(model, step, 100, 3)
    for stats in (idata.warmup_sample_stats, idata.sample_stats):
        assert int(stats["n_bright"].max()) == 0
        # Not even the start's draw of z reads a row: every datum is dark under B_n = L_n.
        assert int(stats["batch_size"].sum()) == 0


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


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere, TunaMH])
def test_steps_with_control_variates_sum_the_normal_exactly_and_read_no_row(step_class):
    model = _normal_groups_model()
    with model:
        step = step_class(progressbar=False)
    target = step.target
    assert target.exact_sum and step.exact_sum_unavailable is None
    # The proxy is the likelihood itself: no image, one HMC transition per draw, no
    # independence moves.
    assert step._image_maps is None and step.steps_per_draw == 1
    assert step.proposal.p_independent == 0.0 and step.proposal.random_walk.transitions == 1
    rng = np.random.default_rng(2)
    q_map = step.reference.reference
    for _ in range(3):
        q_new, q_old = (q_map + 0.05 * rng.normal(size=q_map.size) for _ in range(2))
        full = step.tall_data.loglik_full(q_new).sum() - step.tall_data.loglik_full(q_old).sum()
        assert target.diff_offset(q_new, q_old) == pytest.approx(full, rel=1e-8, abs=1e-8)
    idata = _sample_keeping_tuning(model, step, 60, 4)
    for stats in (idata.warmup_sample_stats, idata.sample_stats):
        assert int(stats["batch_size"].sum()) == 0
        assert float(stats["accepted"].mean()) > 0.3


def test_other_likelihoods_keep_the_taylor_proxy_and_say_why():
    """Negative control: a Bernoulli likelihood has no closed-form sum."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=2000)
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * x, observed=rng.random(2000) < 0.4)
        step = MinibatchBarker(progressbar=False)
    assert not getattr(step.target, "exact_sum", False)
    assert "bernoulli" in step.exact_sum_unavailable.lower()


def _fixed_sigma_regression():
    """``y ~ Normal(a + b x, 0.7)`` with Normal(0, 2) priors: a Gaussian posterior in
    closed form."""
    rng = np.random.default_rng(12)
    x = rng.normal(size=500)
    y = 0.4 - 0.8 * x + rng.normal(0, 0.7, 500)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        pm.Normal("y", a + b * x, 0.7, observed=y)
    design = np.column_stack([np.ones(500), x])
    cov = np.linalg.inv(design.T @ design / 0.49 + np.eye(2) / 4.0)
    return model, cov @ (design.T @ y / 0.49), np.sqrt(np.diag(cov))


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_flymc_with_one_fixed_sigma_is_exact_and_reads_no_data(temperature):
    """Exact against the closed-form posterior (means within 4 MCSE, sds within 10 %);
    negative control: at temperature 2 the sds are sqrt(2) too large and the check fails."""
    model, mean, sd = _fixed_sigma_regression()
    with model:
        step = FlyMC(progressbar=False, temperature=temperature)
        idata = pm.sample(
            step=step,
            draws=1500,
            tune=500,
            chains=2,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert isinstance(step.bound, ExactNormalLikelihood)
    assert int(np.asarray(idata.sample_stats["batch_size"]).max()) == 0
    draws = np.column_stack([np.asarray(idata.posterior[v]).ravel() for v in ("a", "b")])
    mcse = sd / np.sqrt(draws.shape[0] / 10.0)  # ESS of at least a tenth of the draws
    ok = np.all(np.abs(draws.mean(0) - mean) < 4 * mcse) and np.all(
        np.abs(draws.std(0) / sd - 1.0) < 0.10
    )
    assert ok == (temperature == 1.0), (draws.mean(0), mean, draws.std(0), sd)


def test_flymc_on_the_exact_bound_keeps_one_move_per_draw_in_every_chain(normal_groups):
    """One HMC move per draw on the exact posterior, also after each chain's tuning restarts
    (``reset_tuning``, called by ``pm.sample``; it once restored the HMC default of 5);
    steps given by the user are kept as given (control)."""
    model, step = normal_groups
    assert step.steps_per_draw == 1
    step.reset_tuning()
    assert step.steps_per_draw == 1
    with model:
        idata = pm.sample(
            step=step,
            draws=5,
            tune=5,
            chains=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert step.steps_per_draw == 1
    assert int(np.asarray(idata.sample_stats["batch_size"]).max()) == 0
    with model:
        given = FlyMC(progressbar=False, steps_per_draw=3)
    given.reset_tuning()
    assert given.steps_per_draw == 3


def test_auto_moves_by_hmc_on_the_exact_normal_likelihood(normal_groups):
    """Below 20 dimensions too: on the likelihood summed exactly FlyMC's chain is HMC on
    the posterior itself, one move per draw (a 3-dimensional regression with a free sigma
    and the fixed-sigma regression). Control: a Student-t likelihood with a free scale
    (a trust-region bound, data bright at times) keeps the random walk."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=300)
    with pm.Model():
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", a + b * x, sigma, observed=1.0 + 0.5 * x + rng.normal(size=300))
        free = FlyMC(progressbar=False)
    fixed_model, _, _ = _fixed_sigma_regression()
    with fixed_model:
        fixed = FlyMC(progressbar=False)
    for step in (free, fixed):
        assert isinstance(step.bound, ExactNormalLikelihood)
        assert step.theta_update == "hmc" and step.steps_per_draw == 1
    with pm.Model():
        a = pm.Normal("a", 0, 5)
        sigma = pm.HalfNormal("sigma", 2)
        pm.StudentT("y", nu=4, mu=a + 0.5 * x, sigma=sigma, observed=rng.standard_t(4, 300))
        student = FlyMC(progressbar=False)
    assert student.theta_update == "rw"
