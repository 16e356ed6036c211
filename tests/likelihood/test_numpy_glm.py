"""Recognised GLMs evaluated with numpy (nothing compiled): the same values, derivatives,
residuals, surrogate and draws as the compiled functions of the same model; models
outside the recognised set keep the compiled functions."""

import numpy as np
import pymc as pm
import pytest
from pymc.pytensorf import make_shared_replacements
from tall_builder import tall_data_of

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.compiled_prior import CompiledPrior
from pymc_minibatch_mh.likelihood.numpy_glm import (
    NumpyGLM,
    evaluate_with_numpy,
    numpy_evaluation_enabled,
)
from pymc_minibatch_mh.likelihood.numpy_prior import IndependentPrior
from pymc_minibatch_mh.likelihood.surrogate import compile_surrogate_density
from pymc_minibatch_mh.likelihood.taylor import (
    compile_chunk_derivatives,
    compile_prior_derivatives,
    compile_residual_diff,
)

N, D = 600, 3


def _model(family: str, seed: int = 0) -> pm.Model:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, D))
    eta_true = 0.2 + x @ np.array([0.5, -0.3, 0.2])
    with pm.Model() as model:
        a = pm.StudentT("a", nu=4, mu=0.5, sigma=3)
        beta = pm.Normal("beta", mu=np.array([0.0, 1.0, -1.0]), sigma=np.array([1, 2, 3]))
        eta = a + x @ beta
        if family == "logistic":
            y = (rng.random(N) < 1 / (1 + np.exp(-eta_true))).astype("int64")
            pm.Bernoulli("y", logit_p=eta, observed=y)
        elif family == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=rng.poisson(np.exp(eta_true)))
        elif family == "normal_free":
            sigma = pm.HalfCauchy("sigma", 2)
            pm.Normal("y", mu=eta, sigma=sigma, observed=eta_true + rng.normal(size=N))
        else:  # a fixed scale per row
            scale = 0.5 + rng.random(N)
            pm.Normal("y", mu=eta, sigma=scale, observed=eta_true + scale * rng.normal(size=N))
    return model


def _tall(model: pm.Model, numpy_functions: bool):
    return tall_data_of(model, gradients=True, numpy_functions=numpy_functions)


FAMILIES = ("logistic", "poisson", "normal_free", "normal_rows")


@pytest.mark.parametrize("family", FAMILIES)
def test_numpy_functions_equal_the_compiled_ones(family):
    fast = _assert_numpy_equals_compiled(_model(family), prior_hessian_rtol=1e-8)
    assert isinstance(fast.numpy_glm.prior, IndependentPrior)


def _assert_numpy_equals_compiled(model: pm.Model, *, prior_hessian_rtol: float):
    """Every function of the numpy TallData equals the compiled one; returns the former."""
    fast, compiled = _tall(model, True), _tall(model, False)
    assert isinstance(fast.numpy_glm, NumpyGLM) and compiled.numpy_glm is None
    rng = np.random.default_rng(1)
    q_ref, q_old, q_new = (0.3 * rng.standard_normal(fast.ndim) for _ in range(3))
    idx = rng.choice(N, size=50, replace=False).astype(np.int64)
    weights = rng.random(idx.size)
    close = dict(rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.loglik(q_new, idx), compiled.loglik(q_new, idx), **close)
    np.testing.assert_allclose(
        fast.loglik_diff(q_new, q_old, idx), compiled.loglik_diff(q_new, q_old, idx), **close
    )
    np.testing.assert_allclose(fast.loglik_full(q_new), compiled.loglik_full(q_new), **close)
    np.testing.assert_allclose(fast.logprior(q_new), compiled.logprior(q_new), **close)
    np.testing.assert_allclose(fast.logprior_grad(q_new), compiled.logprior_grad(q_new), **close)
    np.testing.assert_allclose(
        fast.loglik_weighted_grad(q_new, idx, weights),
        compiled.loglik_weighted_grad(q_new, idx, weights),
        **close,
    )
    for got, want in zip(
        compile_chunk_derivatives(fast)(q_new, idx),
        compile_chunk_derivatives(compiled)(q_new, idx),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8)
    value, grad, hessian = compile_prior_derivatives(fast)(q_new)
    want_value, want_grad, want_hessian = compile_prior_derivatives(compiled)(q_new)
    np.testing.assert_allclose([value, *grad], [want_value, *want_grad], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(hessian, want_hessian, rtol=prior_hessian_rtol, atol=1e-8)
    residual = compile_residual_diff(fast, reference=q_ref)(q_new, q_old, q_ref, idx)
    want = compile_residual_diff(compiled, reference=q_ref)(q_new, q_old, q_ref, idx)
    np.testing.assert_allclose(residual, want, rtol=1e-7, atol=1e-9)
    g, h = rng.standard_normal(fast.ndim), -np.eye(fast.ndim)
    for got, want in zip(
        compile_surrogate_density(fast)(q_new, g, h, q_ref),
        compile_surrogate_density(compiled)(q_new, g, h, q_ref),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    return fast


def test_a_changed_numpy_model_is_told_apart():
    """Negative control of the comparison above: the numpy functions of a likelihood whose
    observations differ by one row, and of a prior with another scale, differ from the
    compiled ones."""
    model = _model("logistic")
    fast, compiled = _tall(model, True), _tall(model, False)
    likelihood = fast.numpy_glm.likelihood
    observed = np.array(likelihood.observed)
    observed[7] = 1 - observed[7]
    changed = type(likelihood)(
        family=likelihood.family,
        design=likelihood.design,
        offset=likelihood.offset,
        observed=observed,
        params=likelihood.params,
    )
    q = 0.3 * np.ones(fast.ndim)
    idx = np.arange(20, dtype=np.int64)
    other = NumpyGLM(changed, fast.numpy_glm.prior)
    assert not np.allclose(other.loglik(q, idx), compiled.loglik(q, idx), rtol=1e-9)
    terms = fast.numpy_glm.prior.terms
    wider = IndependentPrior(
        ndim=fast.ndim,
        terms=tuple(
            type(t)(t.kind, t.start, t.stop, tuple(2.0 * p for p in t.params)) for t in terms
        ),
    )
    assert not np.isclose(wider.value(q), compiled.logprior(q), rtol=1e-9)


def test_prior_hessian_matches_finite_differences():
    """Every distribution of the numpy prior: the Hessian's diagonal is the derivative of
    the gradient (the comparison with PyMC checks values and gradients only)."""
    with pm.Model() as model:
        pm.Normal("n", 1, 2, shape=2)
        pm.StudentT("t", nu=3, mu=-1, sigma=2)
        pm.Cauchy("c", 0.5, 1.5)
        pm.HalfNormal("h", 2)
        pm.HalfCauchy("hc", 0.7)
        pm.Exponential("e", 3.0)
        x = np.linspace(-1, 1, 40)
        pm.Normal("y", mu=x, sigma=1, observed=x)
    tall = _tall(model, True)
    prior = tall.numpy_glm.prior
    assert sorted({t.kind for t in prior.terms}) == sorted(
        ["Normal", "StudentT", "Cauchy", "HalfNormal", "HalfCauchy", "Exponential"]
    )
    q = np.random.default_rng(3).standard_normal(prior.ndim)
    _, grad, hess = prior.value_grad_hessian(q)
    step = 1e-6
    for k in range(prior.ndim):
        e = np.zeros(prior.ndim)
        e[k] = step
        numeric = (prior.grad(q + e) - prior.grad(q - e)) / (2 * step)
        np.testing.assert_allclose(hess[:, k], numeric, rtol=1e-5, atol=1e-6)
        value_diff = (prior.value(q + e) - prior.value(q - e)) / (2 * step)
        np.testing.assert_allclose(grad[k], value_diff, rtol=1e-5, atol=1e-6)


def _hierarchy() -> pm.Model:
    rng = np.random.default_rng(0)
    group = rng.integers(0, 4, size=N)
    with pm.Model() as model:
        tau = pm.HalfNormal("tau", 1)
        a = pm.Normal("a", 0, tau, shape=4)
        pm.Normal("y", mu=a[group], sigma=1, observed=rng.normal(size=N))
    return model


def _student_t_likelihood() -> pm.Model:
    x = np.linspace(-1, 1, N)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.StudentT("y", nu=4, mu=b * x, sigma=1, observed=x)
    return model


def _uniform_prior() -> pm.Model:
    x = np.linspace(-1, 1, N)
    with pm.Model() as model:
        b = pm.Uniform("b", -3, 3)
        pm.Normal("y", mu=b * x, sigma=1, observed=x)
    return model


def _gamma_scale_prior() -> pm.Model:
    x = np.linspace(-1, 1, N)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        sigma = pm.Gamma("sigma", 2, 2)
        pm.Normal("y", mu=b * x, sigma=sigma, observed=x + np.sin(7 * x))
    return model


def _potential() -> pm.Model:
    x = np.linspace(-1, 1, N)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.Potential("shrink", -(b**2))
        pm.Normal("y", mu=b * x, sigma=1, observed=x)
    return model


@pytest.mark.parametrize(
    "build", [_hierarchy, _gamma_scale_prior, _potential], ids=lambda f: f.__name__
)
def test_a_prior_pymc_computes_is_compiled_beside_the_numpy_likelihood(build):
    """A recognised likelihood under a prior the numpy prior does not read (a hierarchy,
    a distribution it does not know, a potential): the likelihood's functions are numpy's,
    the prior is PyMC's in one compiled function, its Hessian from central differences
    (to 1e-6 of the compiled Hessian)."""
    fast = _assert_numpy_equals_compiled(build(), prior_hessian_rtol=1e-6)
    assert isinstance(fast.numpy_glm.prior, CompiledPrior)


@pytest.mark.parametrize("build", [_student_t_likelihood, _uniform_prior], ids=lambda f: f.__name__)
def test_other_models_keep_the_compiled_functions(build):
    """A likelihood of another family, or one whose coefficient is sampled on an interval
    transform (its linear predictor is not affine in the sampled value)."""
    tall = _tall(build(), True)
    assert tall.numpy_glm is None
    q = np.zeros(tall.ndim)
    assert np.all(np.isfinite(tall.loglik(q, np.arange(5, dtype=np.int64))))


def test_a_partial_block_keeps_the_compiled_functions():
    # A block of some free variables: the others are shared values the numpy likelihood
    # would not read.
    model = _hierarchy()
    point = model.initial_point()
    block = [model.rvs_to_values[model["a"]]]
    shared = make_shared_replacements(point, block, model)
    tall = build_tall_data(model, block, shared=shared, initial_point=point)
    assert tall.numpy_glm is None
    # Control: the whole model's block of the same model is evaluated with numpy.
    assert _tall(model, True).numpy_glm is not None


def test_a_step_draws_the_same_with_and_without_compiling():
    model = _model("logistic")
    assert numpy_evaluation_enabled()
    draws = {}
    try:
        for enabled in (True, False):
            evaluate_with_numpy(enabled)
            with model:
                step = MinibatchBarker(progressbar=False)
                assert (step.tall_data.numpy_glm is not None) is enabled
                idata = pm.sample(
                    100,
                    tune=100,
                    chains=1,
                    step=step,
                    random_seed=5,
                    progressbar=False,
                    compute_convergence_checks=False,
                )
            draws[enabled] = idata.posterior["beta"].values
    finally:
        evaluate_with_numpy(True)
    np.testing.assert_allclose(draws[True], draws[False], rtol=1e-6, atol=1e-8)
    # Negative control: the chain moves (equal draws are not those of a stuck chain).
    assert np.unique(draws[True][0, :, 0]).size > 10


def test_priors_with_pymc_float32_constants_are_read():
    """PyMC keeps ``sigma=5.0`` as a float32 constant and computes ``log(sigma)`` in float32;
    the numpy prior is accepted all the same (the bench's model, where it was not at first)
    and takes PyMC's constant, so its values equal the compiled prior's."""
    x = np.linspace(-1, 1, N)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 5.0, shape=2)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * x, observed=(x > 0.1).astype("int64"))
    fast, compiled = _tall(model, True), _tall(model, False)
    assert fast.numpy_glm is not None
    points = np.random.default_rng(2).standard_normal((3, 2))
    gaps = [fast.logprior(q) - compiled.logprior(q) for q in points]
    np.testing.assert_allclose(gaps, 0.0, atol=1e-9)


@pytest.fixture
def compiled_residual_loop(monkeypatch, compiled_loops_on):
    """The compiled residuals, compiled in this process if numba's cache lacks them."""
    from pymc_minibatch_mh.kernels import compiled_residuals

    monkeypatch.setattr(compiled_residuals, "_BUILT", {})
    return compiled_residuals


def test_compiled_residuals_equal_numpy_ones(compiled_residual_loop, monkeypatch):
    """A Bernoulli-logit likelihood's residuals from the compiled loop equal numpy's (and
    the residuals at another reference point, a negative control, do not); Poisson and
    Normal likelihoods have no compiled loop."""
    fast = _tall(_model("logistic"), True)
    glm = fast.numpy_glm
    rng = np.random.default_rng(3)
    q_ref, q_old, q_new = (0.3 * rng.standard_normal(fast.ndim) for _ in range(3))
    idx = rng.integers(0, N, size=80)
    assert compiled_residual_loop.compiled_residuals(glm.likelihood) is not None
    compiled = glm.residual_diff(q_new, q_old, q_ref, idx)
    monkeypatch.setattr(compiled_residual_loop, "ENABLED", False)
    numpy = glm.residual_diff(q_new, q_old, q_ref, idx)
    np.testing.assert_allclose(compiled, numpy, rtol=1e-10, atol=1e-12)
    assert np.max(np.abs(numpy)) > 1e-3
    monkeypatch.setattr(compiled_residual_loop, "ENABLED", True)
    elsewhere = glm.residual_diff(q_new, q_old, q_ref + 0.2, idx)
    assert np.max(np.abs(elsewhere - numpy)) > 1e-3
    for family in ("poisson", "normal_free"):
        other = _tall(_model(family), True).numpy_glm
        assert compiled_residual_loop.compiled_residuals(other.likelihood) is None


def test_compiled_taylor_sums_equal_numpy_ones(compiled_residual_loop, monkeypatch):
    """A Bernoulli-logit likelihood's Taylor sums (value, gradient, Hessian over a block of
    rows) from the compiled loop equal numpy's; at another point (negative control) they
    do not."""
    glm = _tall(_model("logistic"), True).numpy_glm
    q = 0.3 * np.random.default_rng(4).standard_normal(glm.likelihood.design.shape[1])
    idx = np.arange(7, N - 5, dtype=np.int64)
    assert compiled_residual_loop.compiled_residuals(glm.likelihood) is not None
    compiled = glm.chunk_derivatives(q, idx)
    monkeypatch.setattr(compiled_residual_loop, "ENABLED", False)
    numpy = glm.chunk_derivatives(q, idx)
    for fast, slow in zip(compiled, numpy, strict=True):
        np.testing.assert_allclose(fast, slow, rtol=1e-11, atol=1e-11 * np.max(np.abs(slow)))
    elsewhere = glm.chunk_derivatives(q + 0.1, idx)
    assert abs(elsewhere[0] - numpy[0]) > 1e-3
    assert np.max(np.abs(elsewhere[2] - numpy[2])) > 1e-3


def test_a_step_draws_the_same_with_the_compiled_residuals(compiled_residual_loop, monkeypatch):
    model = _model("logistic")
    draws = {}
    for enabled in (True, False):
        monkeypatch.setattr(compiled_residual_loop, "ENABLED", enabled)
        with model:
            idata = pm.sample(
                100,
                tune=100,
                chains=1,
                step=MinibatchBarker(progressbar=False),
                random_seed=5,
                progressbar=False,
                compute_convergence_checks=False,
            )
        draws[enabled] = idata.posterior["beta"].values
    np.testing.assert_allclose(draws[True], draws[False], rtol=1e-6, atol=1e-8)
    assert np.unique(draws[True][0, :, 0]).size > 10  # a chain that moves
