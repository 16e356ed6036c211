"""Recognising GLM likelihoods (family + affine linear predictor) in PyMC models."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.pytensorf import make_shared_replacements
from scipy import special, stats

from pymc_minibatch_mh.likelihood import (
    LinearPredictorLikelihood,
    UnsupportedLikelihood,
    build_tall_data,
    recognise_linear_predictor,
)
from pymc_minibatch_mh.likelihood.glm_likelihoods import CompositeLikelihood, family_loglik
from pymc_minibatch_mh.likelihood.linear_predictor import _self_check

N, P, K = 240, 3, 4
FAST = {"mode": "FAST_COMPILE"}  # reference TallData: compile speed over run speed


@pytest.fixture
def data(rng):
    x = rng.normal(size=(N, P))
    return {
        "x": x,
        "binary": rng.integers(0, 2, size=N),
        "counts": rng.poisson(2.0, size=N),
        "real": rng.normal(size=N) + x @ np.array([1.0, -0.5, 0.3]),
        "classes": rng.integers(0, K, size=N),
    }


def _setup(model, value_vars=None):
    point = model.initial_point()
    value_vars = list(value_vars or model.value_vars)
    shared = make_shared_replacements(point, value_vars, model)
    return point, value_vars, shared


def _recognise(model, value_vars=None, tall=True):
    """Recognise the likelihood, self-checked against TallData.loglik when ``tall``."""
    point, value_vars, shared = _setup(model, value_vars)
    reference = None
    if tall:
        reference = build_tall_data(
            model, value_vars, shared=shared, initial_point=point, compile_kwargs=FAST
        )
    found = recognise_linear_predictor(
        model,
        value_vars,
        shared=shared,
        initial_point=point,
        check_against=None if reference is None else reference.loglik,
    )
    return found, reference


def _assert_matches_tall_data(found, tall, rng, rtol=1e-9, atol=1e-7):
    """Same per-datum log-likelihood as the model's compiled graph, random rows and q.

    The absolute tolerance allows for PyMC evaluating float32 constants (``sigma=1.5``)
    in single precision (about 1e-8); the numpy side is float64 throughout.
    """
    for scale in (0.3, 1.0):
        q = scale * rng.normal(size=tall.ndim)
        idx = rng.integers(0, N, size=50)
        np.testing.assert_allclose(found.loglik(q, idx), tall.loglik(q, idx), rtol=rtol, atol=atol)
        np.testing.assert_allclose(found.loglik(q), tall.loglik_full(q), rtol=rtol, atol=atol)


# ------------------------------------------------------------------ scalar families


def _logistic(x, y, form, container):
    coords = {"obs": np.arange(N), "feature": ["a", "b", "c"]} if container == "dims" else None
    with pm.Model(coords=coords) as model:
        if container == "numpy":
            x_in, y_in, obs_dims, coef_dims = x, y, None, None
        else:
            # Observed integer pm.Data reach the model through a Cast, which the datum-axis
            # inspection does not accept yet; the covariates are the interesting container.
            dims = container == "dims"
            x_in = pm.Data("x", x, dims=("obs", "feature") if dims else None)
            y_in = y
            obs_dims, coef_dims = ("obs" if dims else None), ("feature" if dims else None)
        beta = pm.Normal("beta", 0, 2, shape=P, dims=coef_dims)
        alpha = pm.Normal("alpha", 0, 2)
        eta = alpha + x_in @ beta
        if form == "logit_p":
            pm.Bernoulli("y", logit_p=eta, observed=y_in, dims=obs_dims)
        else:
            pm.Bernoulli("y", p=pm.math.invlogit(eta), observed=y_in, dims=obs_dims)
    return model


@pytest.mark.parametrize("container", ["numpy", "pm.Data", "dims"])
@pytest.mark.parametrize("form", ["logit_p", "invlogit"])
def test_bernoulli_logit(data, rng, form, container):
    x, y = data["x"], data["binary"]
    found, tall = _recognise(_logistic(x, y, form, container))
    assert found.family == "bernoulli_logit"
    assert found.design.shape == (N, P + 1) and found.params == {}
    # q = (beta, alpha): the design is [X, 1] and there is no offset.
    np.testing.assert_allclose(found.design, np.column_stack([x, np.ones(N)]), atol=1e-12)
    np.testing.assert_allclose(found.offset, 0.0, atol=1e-12)
    np.testing.assert_array_equal(found.observed, y)
    q = rng.normal(size=P + 1)
    eta = x @ q[:P] + q[P]
    np.testing.assert_allclose(found.linear_predictor(q), eta, rtol=1e-12)
    np.testing.assert_allclose(
        found.loglik(q), stats.bernoulli.logpmf(y, special.expit(eta)), rtol=1e-10
    )
    _assert_matches_tall_data(found, tall, rng)


def test_poisson_log(data, rng):
    x, y = data["x"], data["counts"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        alpha = pm.Normal("alpha", 0, 1)
        pm.Poisson("y", mu=pm.math.exp(alpha + x @ beta), observed=y)
    found, tall = _recognise(model)
    assert found.family == "poisson_log" and found.params == {}
    q = rng.normal(scale=0.5, size=P + 1)
    eta = x @ q[:P] + q[P]
    np.testing.assert_allclose(found.loglik(q), stats.poisson.logpmf(y, np.exp(eta)), rtol=1e-10)
    _assert_matches_tall_data(found, tall, rng)


@pytest.mark.parametrize("family", ["poisson", "negative_binomial"])
@pytest.mark.parametrize("order", ["exposure_first", "exposure_last"])
def test_log_link_with_an_exposure_becomes_an_offset(data, rng, family, order):
    """``mu = exposure * exp(eta)``: the predictor is ``eta`` with offset ``log(exposure)``
    (a rate model as users write it), for the Poisson and the negative binomial."""
    x, y = data["x"], data["counts"]
    exposure = rng.uniform(0.5, 3.0, size=N)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        rate = pm.math.exp(x @ beta)
        mu = exposure * rate if order == "exposure_first" else rate * exposure
        if family == "poisson":
            pm.Poisson("y", mu=mu, observed=y)
        else:
            pm.NegativeBinomial("y", mu=mu, alpha=3.0, observed=y)
    found, tall = _recognise(model)
    assert found.family == ("poisson_log" if family == "poisson" else "negative_binomial")
    np.testing.assert_allclose(found.offset, np.log(exposure), rtol=1e-12)
    q = rng.normal(scale=0.5, size=P)
    np.testing.assert_allclose(found.linear_predictor(q), x @ q + np.log(exposure), rtol=1e-12)
    # PyTensor 3 evaluates the negative binomial of exposure * exp(eta) with rounding of
    # about 1e-8 relative (one row in 240 at 8.6e-9) against log(mu) = eta + log(exposure).
    _assert_matches_tall_data(found, tall, rng, rtol=2e-8)


def test_a_zero_exposure_is_refused_naming_the_rows_and_the_cause(data):
    x, y = data["x"], data["counts"].copy()
    exposure = np.ones(N)
    exposure[[3, 7]] = 0.0
    y[[3, 7]] = 0
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Poisson("y", mu=exposure * pm.math.exp(x @ beta), observed=y)
    message = _refuses(model, r"not finite at the initial point \(2 rows, the first at row 3\)")
    assert "exposure of 0" in message and "Drop the rows" in message


def test_a_product_of_two_exponentials_is_not_taken_for_an_exposure(data):
    """Negative control: ``exp(eta) * exp(x)`` has two exponential factors, so which one is
    the link is not decided; it is refused in words (the user can write ``exp(eta + x)``)."""
    x, y = data["x"], data["counts"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Poisson("y", mu=pm.math.exp(x @ beta) * pm.math.exp(x[:, 0]), observed=y)
    _refuses(model, "Poisson with mu = .* not a log link")


def test_student_t_with_fixed_nu_and_sigma(data, rng):
    x, y = data["x"], data["real"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 3, shape=P)
        alpha = pm.Normal("alpha", 0, 3)
        pm.StudentT("y", nu=4.0, mu=alpha + x @ beta, sigma=0.7, observed=y)
    found, tall = _recognise(model)
    assert found.family == "student_t"
    assert found.params == {"nu": 4.0, "sigma": pytest.approx(0.7)}
    q = rng.normal(size=P + 1)
    expected = stats.t.logpdf(y, 4.0, x @ q[:P] + q[P], 0.7)
    np.testing.assert_allclose(found.loglik(q), expected, rtol=1e-10)
    _assert_matches_tall_data(found, tall, rng)


def test_normal_with_fixed_sigma_per_datum(data, rng):
    """sigma may be a known per-datum data array (heteroscedastic, fixed noise)."""
    x, y = data["x"], data["real"]
    sigma = rng.uniform(0.5, 2.0, size=N)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 3, shape=P)
        alpha = pm.Normal("alpha", 0, 3)
        pm.Normal("y", alpha + x @ beta, pm.Data("sigma", sigma), observed=pm.Data("y_obs", y))
    found, tall = _recognise(model)
    assert found.family == "normal"
    np.testing.assert_allclose(found.params["sigma"], sigma)
    q = rng.normal(size=P + 1)
    expected = stats.norm.logpdf(y, x @ q[:P] + q[P], sigma)
    np.testing.assert_allclose(found.loglik(q), expected, rtol=1e-10)
    _assert_matches_tall_data(found, tall, rng)


def test_normal_scalar_sigma_and_no_covariates(data, rng):
    y = data["real"]
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.5, observed=y)
    found, tall = _recognise(model)
    assert found.params == {"sigma": 1.5}
    np.testing.assert_allclose(found.design, np.ones((N, 1)))
    _assert_matches_tall_data(found, tall, rng)


def _several_coefficients(x, y):
    with pm.Model() as model:
        x_data = pm.Data("x", x)
        b1 = pm.Normal("b1", 0, 1, shape=2)
        b2 = pm.Normal("b2", 0, 1)
        alpha = pm.Normal("alpha", 0, 1)
        centred = x_data[:, :2] - x_data[:, :2].mean(axis=0)
        eta = pm.Deterministic("eta", 0.5 + 2.0 * alpha + centred @ b1 - 3.0 * b2 * x_data[:, 2])
        pm.Bernoulli("y", logit_p=eta, observed=y)
    return model


def test_several_coefficients_centred_covariates_and_deterministic(data, rng):
    """Anything affine in q works: graph-side centring, Deterministics, several blocks."""
    x, y = data["x"], data["binary"]
    found, _ = _recognise(_several_coefficients(x, y), tall=False)
    centred = x[:, :2] - x[:, :2].mean(axis=0)
    expected = np.column_stack([centred, -3.0 * x[:, 2], 2.0 * np.ones(N)])
    np.testing.assert_allclose(found.design, expected, atol=1e-10)
    np.testing.assert_allclose(found.offset, 0.5, atol=1e-10)
    q = rng.normal(size=4)
    eta = expected @ q + 0.5
    np.testing.assert_allclose(
        found.loglik(q), stats.bernoulli.logpmf(y, special.expit(eta)), rtol=1e-10
    )


def test_centred_covariates_are_refused_by_the_likelihood_engine(data):
    """In-graph centring reads a statistic of all rows, which a minibatch cannot see."""
    x, y = data["x"], data["binary"]
    with pytest.raises(ValueError, match="depends on other rows"):
        _recognise(_several_coefficients(x, y))


AFFINE_FORMS = {
    # name: (eta from (x, b), design as a function of x)
    "scaled product": (lambda x, b: -0.5 * (x @ b), lambda x: -0.5 * x),
    "mixed coefficients": (lambda x, b: x @ (2.0 * b + 1.0), lambda x: 2.0 * x),
    "dense coefficient map": (
        lambda x, b: x @ (np.triu(np.ones((P, P))) @ b),
        lambda x: x @ np.triu(np.ones((P, P))),
    ),
    "per-row weights": (
        lambda x, b: np.linspace(0.5, 2.0, N) * (x @ b),
        lambda x: np.linspace(0.5, 2.0, N)[:, None] * x,
    ),
    "transposed product": (lambda x, b: b @ x.T, lambda x: x),
}


@pytest.mark.parametrize("form", list(AFFINE_FORMS))
def test_affine_forms_of_the_linear_predictor(data, rng, form):
    x, y = data["x"], data["real"]
    eta_of, design_of = AFFINE_FORMS[form]
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=P)
        pm.Normal("y", eta_of(x, b), 1.0, observed=y)
    found, tall = _recognise(model)
    np.testing.assert_allclose(found.design, design_of(x), atol=1e-10)
    _assert_matches_tall_data(found, tall, rng)


def test_block_variable_outside_the_likelihood_gets_a_zero_column(data, rng):
    x, y = data["x"], data["binary"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Normal("unrelated", 0, 1)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
    found, tall = _recognise(model)
    assert found.design.shape == (N, P + 1)
    np.testing.assert_array_equal(found.design[:, P], 0.0)
    _assert_matches_tall_data(found, tall, rng)


# ------------------------------------------------------------------------ categorical


def _softmax_regression(x, y, intercept):
    with pm.Model() as model:
        w = pm.Normal("w", 0, 1, shape=(P, K))
        logits = x @ w
        if intercept:
            b = pm.Normal("b", 0, 1, shape=K)
            logits = logits + b
        pm.Categorical("y", logit_p=logits, observed=y)
    return model


@pytest.mark.parametrize("intercept", [False, True])
def test_categorical_logit_closed_form(data, rng, intercept):
    x, y = data["x"], data["classes"]
    found, _ = _recognise(_softmax_regression(x, y, intercept), tall=False)
    assert found.family == "categorical_logit" and found.n_classes == K
    n_features = P + int(intercept)
    n_params = P * K + K * int(intercept)
    assert found.design.shape == (N, n_features)
    assert found.coef_map.shape == (n_features * K, n_params)
    assert found.offset.shape == (N, K) and found.ndim == n_params
    q = rng.normal(size=n_params)
    w = q[: P * K].reshape(P, K)
    b = q[P * K :] if intercept else np.zeros(K)
    logits = x @ w + b
    np.testing.assert_allclose(found.linear_predictor(q), logits, rtol=1e-10, atol=1e-12)
    expected = logits[np.arange(N), y] - special.logsumexp(logits, axis=1)
    np.testing.assert_allclose(found.loglik(q), expected, rtol=1e-10)
    idx = rng.integers(0, N, size=30)
    np.testing.assert_allclose(found.loglik(q, idx), expected[idx], rtol=1e-10)


def test_categorical_logit_matches_tall_data(data, rng):
    x, y = data["x"], data["classes"]
    found, tall = _recognise(_softmax_regression(x, y, intercept=True))
    _assert_matches_tall_data(found, tall, rng)


CATEGORICAL_SCALES = {
    "constant": lambda: 0.5,
    "per class": lambda: np.arange(1.0, K + 1.0),
    "per row": lambda: np.linspace(0.5, 2.0, N)[:, None],
}


@pytest.mark.parametrize("scale", list(CATEGORICAL_SCALES))
def test_categorical_scaled_products(data, rng, scale):
    x, y = data["x"], data["classes"]
    factor = CATEGORICAL_SCALES[scale]()
    with pm.Model() as model:
        w = pm.Normal("w", 0, 1, shape=(P, K))
        b = pm.Normal("b", 0, 1, shape=K)
        pm.Categorical("y", logit_p=factor * (x @ w) + b, observed=y)
    found, _ = _recognise(model, tall=False)
    q = rng.normal(size=P * K + K)
    logits = factor * (x @ q[: P * K].reshape(P, K)) + q[P * K :]
    np.testing.assert_allclose(found.linear_predictor(q), logits, rtol=1e-10, atol=1e-12)


def test_categorical_with_reference_class_in_coefficients(data, rng):
    """W(q) may be any affine function of q, e.g. a zero column for identifiability."""
    x, y = data["x"], data["classes"]
    with pm.Model() as model:
        w_free = pm.Normal("w_free", 0, 1, shape=(P, K - 1))
        w = pm.math.concatenate([pm.math.zeros((P, 1)), w_free], axis=1)
        pm.Categorical("y", logit_p=pm.math.dot(x, w), observed=y)
    found, _ = _recognise(model, tall=False)
    q = rng.normal(size=P * (K - 1))
    w = np.column_stack([np.zeros(P), q.reshape(P, K - 1)])
    np.testing.assert_allclose(found.coefficients(q), w, atol=1e-12)


# --------------------------------------------------------------------------- refusals


def _refuses(model, match, value_vars=None):
    point, value_vars, shared = _setup(model, value_vars)
    with pytest.raises(UnsupportedLikelihood, match=match) as info:
        recognise_linear_predictor(model, value_vars, shared=shared, initial_point=point)
    return str(info.value)


def test_refuses_a_bernoulli_link_it_does_not_know(data):
    """A softplus-based probability is none of the three links: refused, naming how to
    write each (probit and complementary log-log are recognised since the family
    registry, ``tests/families``)."""
    x, y = data["x"], data["binary"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Bernoulli("y", p=1 - pm.math.exp(-pm.math.log1pexp(x @ beta)), observed=y)
    message = _refuses(
        model, "Bernoulli with p = .* not a logistic, probit or complementary log-log link"
    )
    assert "logit_p=" in message and "invprobit" in message
    assert "`bound=` argument of the step" in message


def test_refuses_poisson_without_log_link(data):
    x, y = data["x"], data["counts"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Poisson("y", mu=pm.math.log1pexp(x @ beta), observed=y)
    _refuses(model, "Poisson with mu = .* not a log link")


def test_refuses_unknown_distribution(data):
    with pm.Model() as model:
        mu = pm.HalfNormal("mu")
        pm.Exponential("y", 1 / mu, observed=np.abs(data["real"]))
    message = _refuses(
        model, r"is an Exponential distribution \(pm.Exponential\), for which TunaMH"
    )
    assert "Supported likelihoods" in message


def _free_sigma_model(data, family, sigma_prior="halfnormal"):
    x, y = data["x"], data["real"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        if sigma_prior == "halfnormal":
            sigma = pm.HalfNormal("sigma", 1)
        elif sigma_prior == "uniform":
            sigma = pm.Uniform("sigma", 0, 10)
        else:  # one scale per group: differs between data points
            sigma = pm.HalfNormal("sigma", 1, shape=2)[np.arange(N) % 2]
        if family == "normal":
            pm.Normal("y", x @ beta, sigma, observed=y)
        else:
            pm.StudentT("y", nu=4, mu=x @ beta, sigma=sigma, observed=y)
    return model


@pytest.mark.parametrize("family", ["normal", "student_t"])
def test_recognises_a_free_sigma_on_the_log_scale(data, family):
    model = _free_sigma_model(data, family)
    lp, _ = _recognise(model)  # self-checked against the model's log-likelihood
    assert lp.family == family and lp.free_scale and "sigma" not in lp.params
    # q = (beta[0..2], sigma_log__): log sigma is the last coordinate.
    np.testing.assert_allclose(lp.scale_row, [0.0, 0.0, 0.0, 1.0], atol=1e-12)
    assert lp.scale_offset == pytest.approx(0.0, abs=1e-12)
    q = np.array([0.3, -0.2, 0.1, np.log(0.7)])
    sigma = 0.7
    z = (data["real"] - data["x"] @ q[:3]) / sigma
    if family == "normal":
        expected = -0.5 * np.log(2 * np.pi) - np.log(sigma) - 0.5 * z**2
    else:
        expected = stats.t.logpdf(z, df=4) - np.log(sigma)
    np.testing.assert_allclose(lp.loglik(q), expected, rtol=1e-10)


def test_refuses_a_free_sigma_outside_the_block(data):
    model = _free_sigma_model(data, "normal")
    beta = model["beta"]
    _refuses(
        model, "Log\\(sigma\\) .* not sampled by this step", value_vars=[model.rvs_to_values[beta]]
    )


@pytest.mark.parametrize("family", ["normal", "student_t"])
def test_recognises_one_free_sigma_per_group(data, family, rng):
    """``sigma[group]`` with free group scales: a log-scale design with one coordinate per
    row (the row's group), self-checked against the model's log-likelihood."""
    model = _free_sigma_model(data, family, "groups")
    lp, tall = _recognise(model)
    assert lp.row_scales and not lp.free_scale and "sigma" not in lp.params
    q = rng.normal(size=lp.ndim)
    # q = (beta[0..2], sigma_log__[0..1]): each row reads its group's log sigma.
    np.testing.assert_allclose(lp.log_scales(q), q[3 + np.arange(N) % 2], atol=1e-12)
    _assert_matches_tall_data(lp, tall, rng)


@pytest.mark.parametrize("family", ["normal", "student_t"])
def test_recognises_a_log_linear_scale(data, family, rng):
    """A heteroscedastic regression, ``sigma = exp(c + Z @ g)`` with Z in pm.Data."""
    x, y = data["x"], data["real"]
    z = rng.normal(size=(N, 2))
    with pm.Model() as model:
        Z = pm.Data("Z", z)
        beta = pm.Normal("beta", 0, 1, shape=P)
        c = pm.Normal("c", 0, 1)
        g = pm.Normal("g", 0, 1, shape=2)
        sigma = pm.math.exp(c + Z @ g)
        if family == "normal":
            pm.Normal("y", x @ beta, sigma, observed=y)
        else:
            pm.StudentT("y", nu=4, mu=x @ beta, sigma=sigma, observed=y)
    lp, tall = _recognise(model)
    assert lp.row_scales and lp.family == family
    q = rng.normal(size=lp.ndim)  # (beta[0..2], c, g[0..1])
    np.testing.assert_allclose(lp.log_scales(q), q[3] + z @ q[4:], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lp.linear_predictor(q), x @ q[:3], rtol=1e-10, atol=1e-12)
    _assert_matches_tall_data(lp, tall, rng)


def test_refuses_a_scale_per_row_that_is_not_log_linear(data):
    x, y = data["x"], data["real"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        g = pm.Normal("g", 0, 1)
        pm.Normal("y", x @ beta, 0.5 + pm.math.exp(g * x[:, 0]), observed=y)
    message = _refuses(model, r"Log\(sigma\) of the Normal likelihood of 'y' is not affine")
    assert "'g' enter(s) non-linearly" in message and "MinibatchBarker / Austere" in message
    assert "pm.math.exp(c + Z @ g)" in message


def _beta_model(x, y, precision, written="mu_nu", link="logit"):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        phi = pm.HalfNormal("phi", 10) if precision == "free" else 6.0
        eta = x @ beta
        mu = pm.math.invlogit(eta) if link == "logit" else pm.math.invprobit(eta)
        if written == "mu_nu":
            pm.Beta("y", mu=mu, nu=phi, observed=y)
        else:  # alpha and beta by hand
            pm.Beta("y", alpha=mu * phi, beta=(1 - mu) * phi, observed=y)
    return model


@pytest.mark.parametrize("written", ["mu_nu", "alpha_beta"])
@pytest.mark.parametrize("precision", ["free", "fixed"])
def test_recognises_a_beta_regression(data, rng, precision, written):
    x = data["x"]
    y = rng.beta(2.0, 3.0, size=N)
    y[:2] = [1e-6, 1 - 1e-6]
    lp, tall = _recognise(_beta_model(x, y, precision, written))
    assert lp.family == "beta_logit" and lp.free_scale == (precision == "free")
    q = rng.normal(size=lp.ndim)
    np.testing.assert_allclose(lp.linear_predictor(q), x @ q[:P], rtol=1e-10, atol=1e-12)
    nu = np.exp(q[P]) if precision == "free" else 6.0
    mu = special.expit(x @ q[:P])
    expected = stats.beta.logpdf(y, mu * nu, (1 - mu) * nu)
    np.testing.assert_allclose(lp.loglik(q), expected, rtol=1e-8)
    _assert_matches_tall_data(lp, tall, rng)


def test_refuses_a_beta_regression_without_a_logit_link(data, rng):
    model = _beta_model(data["x"], rng.beta(2.0, 3.0, size=N), "free", link="probit")
    message = _refuses(model, r"is a Beta distribution \(pm.Beta\), but not a regression on")
    assert "mu=pm.math.invlogit(eta), nu=precision" in message


def test_refuses_beta_observations_outside_the_unit_interval(data, rng):
    y = rng.beta(2.0, 3.0, size=N)
    y[7] = 1.0
    _refuses(_beta_model(data["x"], y, "free"), "strictly between 0 and 1; row 7 is 1.0")


def _zip_model(x, y, psi, written="zip"):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        psi = pm.Beta("psi", 2, 2) if psi == "free" else 0.7
        mu = pm.math.exp(x @ beta)
        if written == "zip":
            pm.ZeroInflatedPoisson("y", psi=psi, mu=mu, observed=y)
        elif written == "hurdle":
            pm.HurdlePoisson("y", psi=psi, mu=mu, observed=y)
        else:  # the same mixture by hand, the Poisson component first
            components = [pm.Poisson.dist(mu=mu), pm.DiracDelta.dist(0)]
            pm.Mixture("y", w=pm.math.stack([psi, 1 - psi]), comp_dists=components, observed=y)
    return model


@pytest.mark.parametrize("written", ["zip", "mixture"])
@pytest.mark.parametrize("psi", ["free", "fixed"])
def test_recognises_a_zero_inflated_poisson(data, rng, psi, written):
    x = data["x"]
    y = np.where(rng.uniform(size=N) < 0.6, rng.poisson(2.0, N), 0)
    lp, tall = _recognise(_zip_model(x, y, psi, written))
    assert lp.family == "zip_log" and lp.free_scale == (psi == "free")
    q = rng.normal(size=lp.ndim)
    p = special.expit(q[P]) if psi == "free" else 0.7
    mu = np.exp(x @ q[:P])
    expected = np.where(
        y == 0, np.log((1 - p) + p * np.exp(-mu)), np.log(p) + stats.poisson.logpmf(y, mu)
    )
    np.testing.assert_allclose(lp.loglik(q), expected, rtol=1e-9)
    _assert_matches_tall_data(lp, tall, rng)


def test_refuses_a_zero_inflation_per_row_naming_psi(data, rng):
    """psi as a regression: refused in the user's parameter (psi), not the recogniser's
    (its odds)."""
    x = data["x"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        g = pm.Normal("g", 0, 1)
        pm.ZeroInflatedPoisson(
            "y",
            psi=pm.math.invlogit(g * x[:, 0]),
            mu=pm.math.exp(x @ beta),
            observed=rng.poisson(1.0, N),
        )
    message = _refuses(model, "psi of the ZeroInflatedPoisson likelihood of 'y' depends on")
    assert "pm.Beta('psi', 2, 2)" in message and "odds" not in message


@pytest.mark.parametrize("dist", [pm.ZeroInflatedPoisson, pm.HurdlePoisson])
def test_refuses_a_fixed_psi_of_one_in_words(data, rng, dist):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        dist("y", psi=1.0, mu=pm.math.exp(data["x"] @ beta), observed=rng.poisson(1.0, N))
    message = _refuses(model, "psi of the .* must be strictly between 0 and 1")
    assert "odds" not in message and "pm.Poisson" in message


@pytest.mark.parametrize("psi", ["free", "fixed"])
def test_recognises_a_hurdle_poisson(data, rng, psi):
    x = data["x"]
    y = np.where(rng.uniform(size=N) < 0.6, rng.poisson(2.0, N), 0)
    lp, tall = _recognise(_zip_model(x, y, psi, "hurdle"))
    assert lp.family == "hurdle_poisson_log" and lp.free_scale == (psi == "free")
    q = rng.normal(size=lp.ndim)
    p = special.expit(q[P]) if psi == "free" else 0.7
    mu = np.exp(x @ q[:P])
    positive = np.log(p) + stats.poisson.logpmf(y, mu) - np.log1p(-np.exp(-mu))
    np.testing.assert_allclose(lp.loglik(q), np.where(y == 0, np.log1p(-p), positive), rtol=1e-9)
    _assert_matches_tall_data(lp, tall, rng)


def _negative_binomial_with_zeros(x, y, kind, alpha, psi):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        alpha = pm.Exponential("alpha", 1.0) if alpha == "free" else 2.5
        psi = pm.Beta("psi", 2, 2) if psi == "free" else 0.7
        dist = pm.ZeroInflatedNegativeBinomial if kind == "zinb" else pm.HurdleNegativeBinomial
        dist("y", psi=psi, mu=pm.math.exp(x @ beta), alpha=alpha, observed=y)
    return model


@pytest.mark.parametrize("kind", ["zinb", "hurdle"])
@pytest.mark.parametrize(("alpha", "psi"), [("free", "free"), ("fixed", "free"), ("free", "fixed")])
def test_recognises_a_negative_binomial_with_zeros(data, rng, kind, alpha, psi):
    """pm.ZeroInflatedNegativeBinomial and pm.HurdleNegativeBinomial: three channels, each
    of alpha and psi fixed or free, against scipy's negative binomial."""
    x = data["x"]
    y = np.where(rng.uniform(size=N) < 0.6, rng.negative_binomial(2.0, 0.4, N), 0)
    lp, tall = _recognise(_negative_binomial_with_zeros(x, y, kind, alpha, psi))
    assert lp.family == ("zinb_log" if kind == "zinb" else "hurdle_nb_log")
    assert (lp.free_scale, lp.free_odds) == (alpha == "free", psi == "free")
    q = 0.5 * rng.normal(size=lp.ndim)
    extra = iter(q[P:])
    a = np.exp(next(extra)) if alpha == "free" else 2.5
    p = special.expit(next(extra)) if psi == "free" else 0.7
    mu = np.exp(x @ q[:P])
    counts = stats.nbinom.logpmf(y, a, a / (a + mu))
    if kind == "zinb":
        zero = np.log((1 - p) + p * stats.nbinom.pmf(0, a, a / (a + mu)))
        expected = np.where(y == 0, zero, np.log(p) + counts)
    else:
        truncated = counts - np.log1p(-stats.nbinom.pmf(0, a, a / (a + mu)))
        expected = np.where(y == 0, np.log1p(-p), np.log(p) + truncated)
    np.testing.assert_allclose(lp.loglik(q), expected, rtol=1e-9)
    # PyMC 6 takes log(alpha) of a fixed alpha = 2.5 in single precision (a float32
    # constant), about 3e-8, times counts of up to ~10 in the log-likelihood.
    _assert_matches_tall_data(lp, tall, rng, atol=1e-6 if alpha == "fixed" else 1e-7)


def test_refuses_a_free_dispersion_per_datum(data):
    """A negative-binomial dispersion per group is still refused, in words."""
    x, y = data["x"], data["counts"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        alpha = pm.HalfNormal("alpha", 1, shape=2)[np.arange(N) % 2]
        pm.NegativeBinomial("y", mu=pm.math.exp(x @ beta), alpha=alpha, observed=y)
    message = _refuses(model, "differs between data points")
    assert "TunaMH, FlyMC" in message and "MinibatchBarker or Austere" in message
    assert "TunaMH's bounds" not in message  # a FlyMC user reads this message too


@pytest.mark.parametrize("dist", [pm.OrderedLogistic, pm.OrderedProbit])
def test_ordinal_likelihoods_with_ordered_cutpoints(data, dist, rng):
    """pm.OrderedLogistic / pm.OrderedProbit with free ordered cutpoints: the family, the
    linear predictor, the cutpoints' value variable as the transform's input, and the same
    per-datum log-likelihood as the model's graph."""
    x = data["x"]
    y = np.digitize(x[:, 0] - 0.5 * x[:, 1], [-0.8, 0.1, 0.9])
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        cut = pm.Normal(
            "cut", [-1.0, 0.0, 1.0], 2, shape=3, transform=pm.distributions.transforms.ordered
        )
        dist("y", eta=x @ beta, cutpoints=cut, observed=y)
    found, tall = _recognise(model)
    expected = "ordered_logistic" if dist is pm.OrderedLogistic else "ordered_probit"
    assert found.family == expected and found.n_categories == 4
    np.testing.assert_array_equal(found.cut_rows[:, P:], np.eye(3))
    np.testing.assert_array_equal(found.cut_rows[:, :P], 0.0)
    q = rng.normal(size=P + 3)
    kappa = q[P:]
    np.testing.assert_allclose(found.cutpoints(q), np.cumsum([kappa[0], *np.exp(kappa[1:])]))
    # PyMC's OrderedProbit graph approximates differences of normal cdfs to about 3e-8
    # relative (measured against 60-digit arithmetic; the numpy side is within 1e-13).
    _assert_matches_tall_data(found, tall, rng, rtol=1e-9 if dist is pm.OrderedLogistic else 1e-7)


def test_ordinal_likelihood_with_fixed_cutpoints(data, rng):
    """Fixed cutpoints: no coordinate of q moves them (cut_rows 0)."""
    x = data["x"]
    y = np.digitize(x[:, 0], [-0.5, 0.5])
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.OrderedLogistic("y", eta=x @ beta, cutpoints=np.array([-0.5, 0.7]), observed=y)
    found, tall = _recognise(model)
    assert found.family == "ordered_logistic"
    np.testing.assert_array_equal(found.cut_rows, 0.0)
    np.testing.assert_allclose(found.cutpoints(np.zeros(P)), [-0.5, 0.7])
    _assert_matches_tall_data(found, tall, rng)


def test_refuses_unordered_cutpoints_in_the_users_terms(data):
    """Cutpoints without the ordered transform (here sorted by hand) are refused, naming
    the transform to use and the steps that need no bounds, not PyTensor Ops."""
    x = data["x"][:, 0]
    y = np.digitize(x, [-0.5, 0.5])
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        raw = pm.Normal("raw", [-1.0, 1.0], 1)
        pm.OrderedLogistic("y", eta=b * x, cutpoints=pt.sort(raw), observed=y)
    message = _refuses(model, "not increasing free variables with PyMC's ordered transform")
    assert "transform=pm.distributions.transforms.ordered" in message
    assert "MinibatchBarker() or Austere()" in message
    assert "ViewOp" not in message


def test_refuses_a_free_sigma_that_is_not_log_affine(data):
    # Uniform(0, 10) is sampled on the log-odds scale: log(sigma) is not affine in it.
    _refuses(_free_sigma_model(data, "normal", "uniform"), "not affine")


def test_refuses_a_free_nu(data):
    x, y = data["x"], data["real"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        nu = pm.Gamma("nu", 2, 0.1)
        pm.StudentT("y", nu=nu, mu=x @ beta, sigma=1.0, observed=y)
    _refuses(model, "Parameter 'nu' .* depends on the free variable")


def test_refuses_free_nu(data):
    x, y = data["x"], data["real"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        nu = pm.Gamma("nu", 2, 0.1)
        pm.StudentT("y", nu=nu, mu=x @ beta, sigma=1.0, observed=y)
    _refuses(model, "Parameter 'nu'")


def test_refuses_exp_of_coefficient(data):
    x, y = data["x"], data["binary"]
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        alpha = pm.Normal("alpha", 0, 1)
        pm.Bernoulli("y", logit_p=alpha + pm.math.exp(b) * x[:, 0], observed=y)
    message = _refuses(model, "not affine in the sampled variables: 'b' enter")
    assert "alpha" not in message.split("enter")[0]
    assert "centred" not in message  # control: b is no scale (no transform)


def test_refuses_positive_scale_times_covariate(data):
    x, y = data["x"], data["real"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        scale = pm.HalfNormal("scale", 1)
        pm.Normal("y", scale * (x @ beta), 1.0, observed=y)
    message = _refuses(model, "'scale' \\(sampled on a transformed scale as 'scale_log__'")
    # The usual cause, a non-centred hierarchy, and its affine form come first.
    assert message.index("write it centred") < message.index("Supported likelihoods")


def test_refuses_interaction_of_linear_variables(data):
    x, y = data["x"], data["binary"]
    with pm.Model() as model:
        b1 = pm.Normal("b1", 0, 1)
        b2 = pm.Normal("b2", 0, 1)
        pm.Bernoulli("y", logit_p=b1 * b2 * x[:, 0], observed=y)
    _refuses(model, "they interact")


def test_refuses_linear_predictor_depending_on_variables_outside_the_block(data):
    x, y = data["x"], data["binary"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Normal("alpha", 0, 1)
        pm.Bernoulli("y", logit_p=model["alpha"] + x @ beta, observed=y)
    _refuses(
        model,
        r"depends on free variable\(s\) \['alpha'\] that are not sampled by this step",
        value_vars=[model.rvs_to_values[beta]],
    )


def test_refuses_non_linear_function_of_a_product(data):
    x, y = data["x"], data["real"]
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=P)
        pm.Normal("y", pm.math.tanh(x @ b), 1.0, observed=y)
    _refuses(model, "not affine in the sampled variables: 'b' enter")


def test_two_observed_variables_of_one_family_share_the_parameter(data):
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("y1", mu, 1, observed=data["real"])
        pm.Normal("y2", mu, 1, observed=data["real"])
    found, _ = _recognise(model)
    assert isinstance(found, CompositeLikelihood) and found.families == ("normal", "normal")


def test_refuses_potential_reading_the_data(data):
    x, y = data["x"], data["binary"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
        pm.Potential("extra", -((x @ beta) ** 2).sum())
    _refuses(model, "Potential 'extra' reads per-datum data")


def test_accepts_potential_on_parameters_only(data, rng):
    x, y = data["x"], data["binary"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
        pm.Potential("sum_to_zero", -10.0 * beta.sum() ** 2)
    found, tall = _recognise(model)
    _assert_matches_tall_data(found, tall, rng)


def test_refuses_categorical_without_softmax(data):
    with pm.Model() as model:
        p = pm.Dirichlet("p", np.ones(K))
        pm.Categorical("y", p=p, observed=data["classes"])
    _refuses(model, "Categorical, but its probabilities are not a softmax")


def test_refuses_categorical_per_row_term_outside_a_product(data):
    x, y = data["x"], data["classes"]
    with pm.Model() as model:
        w = pm.Normal("w", 0, 1, shape=(P, K))
        c = pm.Normal("c", 0, 1, shape=K)
        pm.Categorical("y", logit_p=x @ w + x[:, :1] * c, observed=y)
    _refuses(model, "not a product X @ W")


def test_refuses_non_binary_bernoulli_observations(data):
    with pm.Model() as model:
        b = pm.Normal("b")
        pm.Bernoulli("y", logit_p=b, observed=np.arange(N) % 3)
    _refuses(model, "must be 0 or 1")


def test_self_check_catches_a_different_likelihood(data):
    """Negative control for the self-check: a reference that differs slightly must fail."""
    x, y = data["x"], data["binary"]
    model = _logistic(x, y, "logit_p", "numpy")
    point, value_vars, shared = _setup(model)
    tall = build_tall_data(
        model, value_vars, shared=shared, initial_point=point, compile_kwargs=FAST
    )

    def tempered(q, idx):
        return 0.999 * tall.loglik(q, idx)

    with pytest.raises(UnsupportedLikelihood, match="`check_against` disagrees with the full"):
        recognise_linear_predictor(
            model, value_vars, shared=shared, initial_point=point, check_against=tempered
        )


def test_self_check_reports_a_misread_likelihood(data):
    """The check itself: a likelihood that differs from the reference is refused."""
    x, y = data["x"], data["binary"]
    found, tall = _recognise(_logistic(x, y, "logit_p", "numpy"))
    wrong = LinearPredictorLikelihood(
        "bernoulli_logit", found.design, found.offset + 0.01, found.observed, {}
    )
    with pytest.raises(UnsupportedLikelihood, match="does not match the model's"):
        _self_check(wrong, tall.loglik, np.zeros(P + 1), "y")
    _self_check(found, tall.loglik, np.zeros(P + 1), "y")  # and the right one passes


# ------------------------------------------------------------------ numpy side alone


def test_family_loglik_against_scipy(rng):
    eta = rng.normal(scale=3.0, size=200)
    y01 = rng.integers(0, 2, size=200).astype(float)
    counts = rng.poisson(3.0, size=200).astype(float)
    real = rng.normal(size=200)
    np.testing.assert_allclose(
        family_loglik("bernoulli_logit", eta, y01, {}),
        stats.bernoulli.logpmf(y01, special.expit(eta)),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        family_loglik("poisson_log", eta, counts, {}),
        stats.poisson.logpmf(counts, np.exp(eta)),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        family_loglik("normal", eta, real, {"sigma": 0.3}),
        stats.norm.logpdf(real, eta, 0.3),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        family_loglik("student_t", eta, real, {"nu": 2.5, "sigma": 0.3}),
        stats.t.logpdf(real, 2.5, eta, 0.3),
        rtol=1e-12,
    )


def test_family_loglik_is_stable_for_extreme_predictors():
    eta = np.array([-800.0, 800.0, -800.0, 800.0])
    y = np.array([1.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(
        family_loglik("bernoulli_logit", eta, y, {}), [-800.0, -800.0, 0.0, 0.0]
    )
    logits = np.array([[1000.0, 0.0, -1000.0]])
    np.testing.assert_allclose(
        family_loglik("categorical_logit", logits, np.array([1]), {}), [-1000.0]
    )


def test_result_validates_shapes_and_is_read_only():
    design = np.ones((5, 2))
    with pytest.raises(ValueError, match="offset has shape"):
        LinearPredictorLikelihood("normal", design, np.zeros(4), np.zeros(5), {"sigma": 1.0})
    with pytest.raises(ValueError, match="needs params"):
        LinearPredictorLikelihood("student_t", design, np.zeros(5), np.zeros(5), {"sigma": 1.0})
    found = LinearPredictorLikelihood(
        "normal", design, np.zeros(5), np.zeros(5), {"sigma": np.full(5, 2.0)}
    )
    assert found.n_data == 5 and found.ndim == 2
    with pytest.raises(ValueError, match="read-only"):
        found.design[0, 0] = 3.0
    assert design.flags.writeable  # the caller's array is untouched


def test_several_observed_variables_give_a_composite_likelihood(data):
    x = data["x"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        gamma = pm.Normal("gamma", 0, 1, shape=P)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Poisson("counts", mu=pm.math.exp(x @ beta), observed=data["counts"])
        pm.Normal("real", x @ gamma + beta[0], sigma, observed=data["real"])
    found, tall = _recognise(model)  # the sum is self-checked against the model
    assert isinstance(found, CompositeLikelihood)
    assert found.names == ("counts", "real") and found.families == ("poisson_log", "normal")
    assert found.free_scale and found.n_data == N and found.ndim == 2 * P + 1
    q = np.linspace(-0.3, 0.4, 2 * P + 1)
    rows = np.arange(N)
    np.testing.assert_allclose(found.loglik(q, rows), tall.loglik(q, rows), rtol=1e-9)


def test_a_composite_is_refused_when_one_part_is_not_recognised(data):
    x = data["x"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Poisson("counts", mu=pm.math.exp(x @ beta), observed=data["counts"])
        pm.Exponential("wait", 1.0, observed=np.abs(data["real"]))
    _refuses(model, r"'wait' is an Exponential distribution \(pm.Exponential\)")


@pytest.mark.parametrize("free", [True, False])
def test_negative_binomial_with_log_mean(data, free):
    x, y = data["x"], data["counts"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        alpha = pm.Exponential("alpha", 1.0) if free else 2.5
        pm.NegativeBinomial("y", mu=pm.math.exp(x @ beta), alpha=alpha, observed=y)
    found, _ = _recognise(model)  # self-checked against the model's log-likelihood
    assert found.family == "negative_binomial" and found.free_scale == free
    if free:
        np.testing.assert_allclose(found.scale_row, [0.0, 0.0, 0.0, 1.0], atol=1e-12)
    else:
        assert found.params == {"alpha": 2.5}
    q = np.array([0.2, -0.1, 0.3, np.log(1.7)])[: found.ndim]
    alpha_value = 1.7 if free else 2.5
    mu = np.exp(x @ q[:P])
    expected = stats.nbinom.logpmf(y, alpha_value, alpha_value / (alpha_value + mu))
    np.testing.assert_allclose(found.loglik(q), expected, rtol=1e-9)


def test_negative_binomial_in_n_p_form_is_refused(data):
    with pm.Model() as model:
        p = pm.Beta("p", 2, 2)
        pm.NegativeBinomial("y", n=3.0, p=p, observed=data["counts"])
    _refuses(model, "NegativeBinomial, but not with mu = exp")


@pytest.mark.parametrize("form", ["beta_ratio", "beta_product"])
@pytest.mark.parametrize("free", [True, False])
def test_gamma_with_log_mean_and_a_fixed_or_free_shape(data, free, form):
    x, y = data["x"], np.abs(data["real"]) + 0.05
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        shape = pm.Exponential("shape", 1.0) if free else 2.5
        eta = x @ beta
        if form == "beta_ratio":
            rate = shape / pm.math.exp(eta)
        else:
            rate = shape * pm.math.exp(-eta)
        pm.Gamma("y", alpha=shape, beta=rate, observed=y)
    found, _ = _recognise(model)  # self-checked against the model's log-likelihood
    assert found.family == "gamma_log" and found.free_scale == free
    if free:
        np.testing.assert_allclose(found.scale_row, [0.0, 0.0, 0.0, 1.0], atol=1e-12)
        np.testing.assert_allclose(found.design.dot(np.eye(P + 1)[P]), 0.0, atol=1e-12)
    else:
        assert found.params == {"alpha": 2.5}
    q = np.array([0.2, -0.1, 0.3, np.log(1.7)])[: found.ndim]
    shape_value = 1.7 if free else 2.5
    expected = stats.gamma.logpdf(y, shape_value, scale=np.exp(x @ q[:P]) / shape_value)
    np.testing.assert_allclose(found.loglik(q), expected, rtol=1e-9)


def test_gamma_in_mu_sigma_form_is_refused_with_the_form_to_write(data):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Gamma("y", mu=pm.math.exp(data["x"] @ beta), sigma=1.0, observed=data["real"] ** 2)
    _refuses(model, "beta=shape / pm.math.exp")


def _zero_inflated(data):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        psi = pm.Beta("psi", 2, 2)
        pm.ZeroInflatedBinomial(
            "y", psi=psi, n=10, p=pm.math.invlogit(data["x"] @ beta), observed=data["counts"]
        )
    return model


def _hurdle(data):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        psi = pm.Beta("psi", 2, 2)
        y = np.where(data["counts"] > 0, data["counts"] + 0.5, 0.0)
        pm.HurdleGamma(
            "y", psi=psi, alpha=2.0, beta=2.0 / pm.math.exp(data["x"] @ beta), observed=y
        )
    return model


def _lognormal_regression(data):
    y = np.exp(data["real"])
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        sigma = pm.HalfNormal("sigma", 1)
        pm.LogNormal("y", mu=data["x"] @ beta, sigma=sigma, observed=y)
    return model


@pytest.mark.parametrize(
    ("build", "phrase"),
    [
        (
            _zero_inflated,
            r"a mixture \(pm.Mixture, or a zero-inflated .*components: Binomial",
        ),
        (_hurdle, r"a hurdle distribution \(.*pm.HurdleGamma"),
        (_lognormal_regression, r"a LogNormal distribution \(pm.LogNormal\)"),
    ],
)
def test_unsupported_distributions_are_named_as_the_user_wrote_them(data, build, phrase):
    message = _refuses(build(data), phrase)
    assert "MinibatchBarker() or Austere()" in message
    assert "RV" not in message.split(". ")[0]


def test_gamma_observations_must_be_positive(data):
    y = np.abs(data["real"]) + 0.1
    y[7] = 0.0
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        pm.Gamma("y", alpha=2.0, beta=2.0 / pm.math.exp(data["x"] @ beta), observed=y)
    _refuses(model, "Gamma observations of 'y' must be positive; row 7 is")
