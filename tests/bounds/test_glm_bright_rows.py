"""FlyMC's joint evaluation of a GLM's rows and their quadratic bound gives the values and
gradients of the target and the bound asked separately."""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import FlyMC
from pymc_minibatch_mh.bounds.glm_bright_rows import GLMBrightRows, glm_rows_factory
from pymc_minibatch_mh.kernels.firefly import SeparateRows

N = 400


def _model(family: str) -> pm.Model:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(N, 3))
    eta = 0.3 + x @ np.array([0.5, -0.4, 0.2])
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 2.0, shape=3)
        lin = a + x @ beta
        if family == "bernoulli_logit":
            pm.Bernoulli("y", logit_p=lin, observed=rng.random(N) < 1 / (1 + np.exp(-eta)))
        elif family == "binomial_logit":
            trials = rng.integers(1, 12, size=N)
            pm.Binomial("y", n=trials, logit_p=lin, observed=rng.binomial(trials, 0.5))
        elif family == "poisson_log":
            pm.Poisson("y", mu=pm.math.exp(lin), observed=rng.poisson(np.exp(eta)))
        elif family == "student_t":
            pm.StudentT("y", nu=4, mu=lin, sigma=0.7, observed=eta + rng.standard_t(4, N))
        else:  # free negative-binomial dispersion: not read jointly
            alpha = pm.Exponential("alpha", 1.0)
            pm.NegativeBinomial("y", mu=pm.math.exp(lin), alpha=alpha, observed=rng.poisson(2, N))
    return model


@pytest.mark.parametrize(
    "family", ["bernoulli_logit", "binomial_logit", "poisson_log", "student_t"]
)
def test_joint_rows_match_the_target_and_the_bound(family):
    with _model(family):
        step = FlyMC(theta_update="hmc", progressbar=False)  # gradients of the target
    factory = step._joint_rows()
    assert factory is not None
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(N, size=37, replace=False))
    for _ in range(3):
        q = step.bound.collapsed.centre + 0.1 * rng.normal(size=step.tall_data.ndim)
        joint, separate = factory(idx), SeparateRows(step.tall_data, step.bound, idx)
        assert isinstance(joint, GLMBrightRows)
        for got, want in zip(joint.values(q), separate.values(q), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8)  # compiled vs numpy
        weights = rng.uniform(0.5, 3.0, size=idx.size)
        np.testing.assert_allclose(
            joint.weighted_grad(q, weights), separate.weighted_grad(q, weights), rtol=1e-9
        )

        # values and weighted gradient from one linear predictor (FlyMC's leapfrog steps)
        def weigh(lik, bnd, weights=weights):
            return lik - bnd, weights

        gap, grad = factory(idx).values_and_grad(q, weigh)
        lik, bnd = separate.values(q)
        np.testing.assert_allclose(gap, lik - bnd, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(grad, separate.weighted_grad(q, weights), rtol=1e-9)
        # read once (eta from the source) and read again (gathered rows): the same values
        again = joint.values(q + 0.01)
        np.testing.assert_allclose(again[0], separate.values(q + 0.01)[0], rtol=1e-8)


def test_other_likelihoods_and_bounds_are_read_separately():
    with _model("negative_binomial"):
        step = FlyMC(progressbar=False)
    assert step._joint_rows() is None
    with _model("bernoulli_logit"):
        step = FlyMC(progressbar=False)
    lp = step._lp
    assert glm_rows_factory(lp, step.bound) is not None
    assert glm_rows_factory(lp, object()) is None
    # a bound over other rows than the likelihood's
    shifted = type(step.bound).from_coefficients(
        np.asarray(lp.design[:], dtype=np.float64),
        step.bound.offset,
        step.bound.anchor,
        step.bound.value,
        step.bound.slope,
        step.bound.curvature,
    )
    assert glm_rows_factory(lp, shifted) is None
