"""Lipschitz constants for TunaMH: validity on random and adversarial pairs, chi(kappa)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import special

from pymc_minibatch_mh.bounds.lipschitz import (
    EuclideanMetric,
    LipschitzBound,
    UnsupportedBound,
    WhitenedMetric,
    chi_from_kappa,
    expected_batch_size,
)

N, D = 400, 3


def _lp(family, rng, **params):
    """Duck-typed LinearPredictorLikelihood (only numeric attributes are read)."""
    design = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1)) * [1.0, 30.0][: D - 1]])
    offset = rng.normal(size=N)
    observed = {
        "bernoulli_logit": (rng.random(N) < 0.5).astype(float),
        "poisson_log": rng.poisson(3.0, size=N).astype(float),
    }.get(family, rng.normal(size=N) * 3)
    return SimpleNamespace(
        family=family, design=design, offset=offset, observed=observed, params=params
    )


def _loglik(lp, q):
    eta = lp.design @ q + lp.offset
    y = lp.observed
    if lp.family == "bernoulli_logit":
        return special.log_expit(np.where(y > 0.5, eta, -eta))
    if lp.family == "student_t":
        nu, sigma = lp.params["nu"], lp.params["sigma"]
        return -0.5 * (nu + 1) * np.log1p(((y - eta) / sigma) ** 2 / nu)
    if lp.family == "poisson_log":
        return y * eta - np.exp(eta)
    if lp.family == "normal":
        return -0.5 * ((y - eta) / lp.params["sigma"]) ** 2
    raise AssertionError(lp.family)


def _pairs(rng, scale, n_pairs=200, box=None):
    for _ in range(n_pairs):
        if box is None:
            q = rng.normal(size=D) * scale
            q_new = q + rng.normal(size=D) * scale * 10.0 ** rng.uniform(-4, 0)
        else:
            lo, hi = box
            q = rng.uniform(lo, hi)
            q_new = (
                rng.uniform(lo, hi)
                if rng.random() < 0.5
                else np.clip(q + rng.normal(size=D) * 0.01, lo, hi)
            )
        yield q, q_new


def _max_ratio(lp, bound, pairs):
    """max over pairs and data of |Delta l_i| / (c_i M): must be <= 1."""
    worst = 0.0
    for q, q_new in pairs:
        m = bound.metric(q, q_new)
        diff = np.abs(_loglik(lp, q_new) - _loglik(lp, q))
        limit = bound.c * m
        assert np.all(diff <= limit * (1 + 1e-9) + 1e-12)
        worst = max(worst, float(np.max(diff / np.maximum(limit, 1e-300))))
    return worst


@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize(
    ("family", "params"),
    [("bernoulli_logit", {}), ("student_t", {"nu": 4.0, "sigma": 0.7})],
)
def test_global_bounds_hold_for_any_pair(rng, family, params, whiten):
    lp = _lp(family, rng, **params)
    chol = np.linalg.cholesky(np.diag([0.5, 2.0, 0.01]) + 0.001) if whiten else None
    bound = LipschitzBound.from_linear_predictor(lp, chol=chol)
    assert bound.C == pytest.approx(bound.c.sum())
    assert _max_ratio(lp, bound, _pairs(rng, 3.0)) <= 1.0


def test_bernoulli_constants_are_row_norms_including_the_intercept(rng):
    lp = _lp("bernoulli_logit", rng)
    bound = LipschitzBound.from_linear_predictor(lp)
    np.testing.assert_allclose(bound.c, np.linalg.norm(lp.design, axis=1))
    assert np.all(bound.c >= 1.0)  # the intercept column contributes 1


def test_bernoulli_bound_is_tight_in_the_tails():
    """One datum, y = 1, far on the wrong side: the slope of log sigmoid approaches 1."""
    lp = SimpleNamespace(
        family="bernoulli_logit",
        design=np.array([[2.0]]),
        offset=np.zeros(1),
        observed=np.ones(1),
        params={},
    )
    bound = LipschitzBound.from_linear_predictor(lp)
    q, q_new = np.array([-20.0]), np.array([-19.0])
    ratio = abs(_loglik(lp, q_new) - _loglik(lp, q))[0] / (bound.c[0] * bound.metric(q, q_new))
    assert 0.999 < ratio <= 1.0


def test_student_t_constant_and_its_tightness():
    nu, sigma = 4.0, 0.5
    lp = SimpleNamespace(
        family="student_t",
        design=np.array([[1.0]]),
        offset=np.zeros(1),
        observed=np.zeros(1),
        params={"nu": nu, "sigma": sigma},
    )
    bound = LipschitzBound.from_linear_predictor(lp)
    assert bound.c[0] == pytest.approx((nu + 1) / (2 * math.sqrt(nu) * sigma))  # 1.25 / sigma
    r = math.sqrt(nu) * sigma  # where the slope peaks
    q, q_new = np.array([r - 1e-6]), np.array([r + 1e-6])
    ratio = abs(_loglik(lp, q_new) - _loglik(lp, q))[0] / (bound.c[0] * 2e-6)
    assert ratio == pytest.approx(1.0, abs=1e-6)


def test_per_datum_sigma_is_used(rng):
    sigma = rng.uniform(0.2, 3.0, size=N)
    lp = _lp("student_t", rng, nu=3.0, sigma=sigma)
    bound = LipschitzBound.from_linear_predictor(lp)
    np.testing.assert_allclose(
        bound.c, 4.0 / (2 * math.sqrt(3.0) * sigma) * np.linalg.norm(lp.design, axis=1)
    )
    assert _max_ratio(lp, bound, _pairs(rng, 2.0)) <= 1.0


def test_whitened_metric_for_random_walk_moves(rng):
    chol = np.linalg.cholesky(np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]]))
    metric = WhitenedMetric(chol)
    q = rng.normal(size=3)
    z = rng.normal(size=3)
    assert metric(q, q + 0.1 * chol @ z) == pytest.approx(0.1 * np.linalg.norm(z))
    assert metric(q, q + z) == pytest.approx(metric(q + z, q))  # symmetric
    assert EuclideanMetric()(q, q + z) == pytest.approx(np.linalg.norm(z))


def test_whitening_shrinks_cm_for_badly_scaled_covariates(rng):
    """Columns of scale 1 and 30: Euclidean C*M pays for the mismatch, whitened does not."""
    lp = _lp("bernoulli_logit", rng)
    # Proposal covariance shaped like a posterior: small where the covariate is large.
    chol = np.diag([0.05, 0.05, 0.05 / 30])
    steps = [chol @ rng.normal(size=D) for _ in range(200)]
    eucl = LipschitzBound.from_linear_predictor(lp)
    white = LipschitzBound.from_linear_predictor(lp, chol=chol)
    q = np.zeros(D)
    cm_e = np.mean([eucl.C * eucl.metric(q, q + s) for s in steps])
    cm_w = np.mean([white.C * white.metric(q, q + s) for s in steps])
    assert cm_w < 0.5 * cm_e


def test_categorical_bound_holds(rng):
    n, p, k = 300, 3, 4
    x = np.column_stack([np.ones(n), rng.normal(size=(n, p - 1))])
    y = rng.integers(0, k, size=n)
    coef_map = rng.normal(size=(p * k, 5))  # W = reshape(A q + w0), q of length 5
    coef_offset = rng.normal(size=p * k)
    lp = SimpleNamespace(
        family="categorical_logit",
        design=x,
        offset=rng.normal(size=(n, k)),
        observed=y,
        params={},
        coef_map=coef_map,
        coef_offset=coef_offset,
        n_classes=k,
    )

    def loglik(q):
        logits = x @ (coef_map @ q + coef_offset).reshape(p, k) + lp.offset
        return logits[np.arange(n), y] - special.logsumexp(logits, axis=1)

    for chol in (None, np.linalg.cholesky(np.diag(rng.uniform(0.1, 3, 5)))):
        bound = LipschitzBound.from_linear_predictor(lp, chol=chol)
        for _ in range(100):
            q = rng.normal(size=5) * 2
            q_new = q + rng.normal(size=5) * 10.0 ** rng.uniform(-3, 0.5)
            diff = np.abs(loglik(q_new) - loglik(q))
            assert np.all(diff <= bound.c * bound.metric(q, q_new) * (1 + 1e-9))


@pytest.mark.parametrize(("family", "params"), [("poisson_log", {}), ("normal", {"sigma": 0.8})])
def test_box_families_hold_on_the_box_and_need_one(rng, family, params):
    lp = _lp(family, rng, **params)
    with pytest.raises(UnsupportedBound, match="bounded prior support"):
        LipschitzBound.from_linear_predictor(lp)
    box = (np.array([-0.5, -0.2, -0.01]), np.array([0.5, 0.3, 0.02]))
    bound = LipschitzBound.from_linear_predictor(lp, box=box)
    assert bound.box is not None
    worst = _max_ratio(lp, bound, _pairs(rng, None, 300, box))
    assert worst <= 1.0


def test_box_that_overflows_is_refused(rng):
    lp = _lp("poisson_log", rng)
    with pytest.raises(UnsupportedBound, match="overflow"):
        LipschitzBound.from_linear_predictor(lp, box=(np.full(D, -500.0), np.full(D, 500.0)))
    with pytest.raises(UnsupportedBound, match="finite"):
        LipschitzBound.from_linear_predictor(lp, box=(np.full(D, -np.inf), np.zeros(D)))


@pytest.mark.parametrize(
    ("c", "match"),
    [
        (np.array([1.0, -1.0]), "non-negative"),
        (np.array([np.nan]), "finite"),
        (np.ones((2, 2)), "1-D"),
        (np.array([]), "1-D"),
    ],
)
def test_bad_constants_are_refused(c, match):
    with pytest.raises(ValueError, match=match):
        LipschitzBound.euclidean(c)


def test_box_is_validated_and_contains_checks_it():
    bound = LipschitzBound(np.ones(3), EuclideanMetric(), box=([-1, 0], [1, np.inf]))
    lo, hi = bound.box
    assert lo.dtype == hi.dtype == np.float64 and not lo.flags.writeable
    assert bound.contains(np.array([0.0, 5.0])) and bound.contains(np.array([-1.0, 0.0]))
    assert not bound.contains(np.array([1.5, 0.0]))
    assert not bound.contains(np.array([0.0, -1e-12]))
    assert not bound.contains(np.array([np.nan, 1.0]))
    assert LipschitzBound.euclidean(np.ones(3)).contains(np.array([1e300, np.nan]))
    with pytest.raises(ValueError, match="shape"):
        bound.contains(np.zeros(3))


@pytest.mark.parametrize(
    ("box", "match"),
    [
        ((np.zeros(2), np.ones(3)), "same non-zero length"),
        (([], []), "same non-zero length"),
        (([0.0, 1.0], [1.0, 0.5]), "lo <= hi"),
        (([np.nan], [1.0]), "NaN"),
        (np.zeros(3), "pair"),
    ],
)
def test_bad_boxes_are_refused(box, match):
    with pytest.raises(ValueError, match=match):
        LipschitzBound(np.ones(3), EuclideanMetric(), box=box)


def test_metric_must_be_callable():
    with pytest.raises(TypeError, match="metric"):
        LipschitzBound(np.ones(3), metric=2.0)


@pytest.mark.parametrize(("kappa", "chi"), [(0.5, 11.54), (0.1, 1.930), (0.9, 379.6)])
def test_chi_from_kappa(kappa, chi):
    assert chi_from_kappa(kappa) == pytest.approx(chi, rel=5e-4)


@pytest.mark.parametrize("kappa", [0.0, 1.0, -0.5, 2.0])
def test_chi_from_kappa_refuses_out_of_range(kappa):
    with pytest.raises(ValueError, match="kappa"):
        chi_from_kappa(kappa)


def test_expected_batch_size():
    assert expected_batch_size(0.5, 10.0, 0.2) == pytest.approx(0.5 * 4 + 2)
