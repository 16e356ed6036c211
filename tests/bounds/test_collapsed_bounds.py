"""FlyMC lower bounds: validity on dense grids, tightness, and the collapsed sums.

The reference log-likelihoods come from scipy (``expit``, ``stats.t``,
``logsumexp``), not from the bound modules.
"""

import pickle

import numpy as np
import pytest
from scipy import special, stats

from pymc_minibatch_mh.bounds.bohning import (
    SoftmaxQuadraticBound,
    bohning_curvature,
    map_tuned_bohning,
    untuned_bohning,
)
from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound
from pymc_minibatch_mh.bounds.jaakkola_jordan import (
    jaakkola_jordan_bound,
    jj_lambda,
    map_tuned_jaakkola_jordan,
    untuned_jaakkola_jordan,
)
from pymc_minibatch_mh.bounds.student_t import (
    map_tuned_student_t,
    student_t_bound,
    untuned_student_t,
)

N, D = 3000, 4
NU, SIGMA = 4.0, 0.7
P, K = 3, 4
REL_TOL = 1e-8
GRID = np.linspace(-40.0, 40.0, 40001)


def _jj_loglik(eta, y):
    return special.log_expit((2 * y - 1) * eta)


def _t_loglik(eta, y, nu=NU, sigma=SIGMA):
    return stats.t.logpdf(y, nu, loc=eta, scale=sigma)


def _softmax_loglik(logits, y):
    return logits[np.arange(len(y)), y] - special.logsumexp(logits, axis=1)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(42)
    x = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1))])
    offset = 0.3 * rng.normal(size=N)
    q_true = np.array([0.3, 1.0, -2.0, 0.5])
    eta = x @ q_true + offset
    y_bern = (rng.random(N) < special.expit(eta)).astype(int)
    y_t = eta + SIGMA * rng.standard_t(NU, size=N)
    w_true = rng.normal(size=(P, K))
    feats = np.column_stack([np.ones(N), rng.normal(size=(N, P - 1))])
    offset_k = 0.2 * rng.normal(size=(N, K))
    probs = special.softmax(feats @ w_true + offset_k, axis=1)
    y_cat = (rng.random(N)[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
    return {
        "x": x,
        "offset": offset,
        "q_true": q_true,
        "y_bern": y_bern,
        "y_t": y_t,
        "feats": feats,
        "offset_k": offset_k,
        "w_true": w_true.ravel(),
        "y_cat": y_cat,
        "rng": rng,
    }


def _scalar_cases(data):
    """(name, bound, loglik(eta) for all rows, expansion point q or None)."""
    x, off, q_map = data["x"], data["offset"], data["q_true"] + 0.05
    yb, yt = data["y_bern"], data["y_t"]
    return [
        ("jj-untuned", untuned_jaakkola_jordan(x, off, yb), lambda e: _jj_loglik(e, yb), None),
        (
            "jj-map",
            map_tuned_jaakkola_jordan(x, off, yb, q_map),
            lambda e: _jj_loglik(e, yb),
            q_map,
        ),
        ("t-untuned", untuned_student_t(x, off, yt, NU, SIGMA), lambda e: _t_loglik(e, yt), None),
        (
            "t-map",
            map_tuned_student_t(x, off, yt, NU, SIGMA, q_map),
            lambda e: _t_loglik(e, yt),
            q_map,
        ),
    ]


def _softmax_cases(data):
    f, off, y, w = data["feats"], data["offset_k"], data["y_cat"], data["w_true"] + 0.05
    return [
        ("bohning-untuned", untuned_bohning(f, off, y, K), None),
        ("bohning-map", map_tuned_bohning(f, off, y, K, w), w),
    ]


def _random_points(centre, rng, scales=(0.0, 0.01, 0.3, 3.0, 30.0), reps=4):
    return [centre + s * rng.normal(size=centre.size) for s in scales for _ in range(reps)]


# ---------------------------------------------------------------- validity on dense grids
@pytest.mark.parametrize("xi", [0.0, 1e-9, 1e-3, 0.5, 1.5, 4.0, 30.0])
def test_jaakkola_jordan_below_loglik_on_dense_grid(xi):
    # One datum per (outcome, sign of anchor); eta = q (design = 1, offset = 0).
    y = np.array([0, 1, 0, 1])
    anchor = np.array([xi, xi, -xi, -xi])
    bound = jaakkola_jordan_bound(np.ones((4, 1)), 0.0, y, anchor)
    for n in range(4):
        log_b = bound.value[n] + (GRID - anchor[n]) * (
            bound.slope[n] + bound.curvature[n] * (GRID - anchor[n])
        )
        log_l = _jj_loglik(GRID, y[n])
        assert np.all(log_b <= log_l + 1e-12 * (1 + np.abs(log_l)))
        # the same through the per-datum API
        per_datum = np.array(
            [bound.log_bound(np.array([g]), np.array([n]))[0] for g in GRID[::997]]
        )
        np.testing.assert_allclose(per_datum, log_b[::997], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("xi", [0.0, 0.3, 1.0, 2.0, 10.0, 300.0])
@pytest.mark.parametrize("nu", [1.0, 4.0, 30.0])
def test_student_t_below_loglik_on_dense_grid(xi, nu):
    sigma, y = 0.7, 1.3
    anchor = y - xi * sigma
    bound = student_t_bound(np.ones((1, 1)), 0.0, [y], nu, sigma, anchor)
    grid = y + sigma * np.linspace(-1e3, 1e3, 200001)
    e = grid - anchor
    log_b = bound.value[0] + e * (bound.slope[0] + bound.curvature[0] * e)
    log_l = _t_loglik(grid, y, nu, sigma)
    assert np.all(log_b <= log_l + 1e-12 * (1 + np.abs(log_l)))


@pytest.mark.parametrize("psi_scale", [0.0, 1.0, 5.0])
def test_bohning_below_loglik_on_dense_grid(psi_scale):
    # K = 3 classes, logits on a dense 2-D grid (the first logit fixed at 0: log-softmax
    # is invariant to common shifts, and so is the bound).
    rng = np.random.default_rng(7)
    k = 3
    g = np.linspace(-25, 25, 301)
    g1, g2 = np.meshgrid(g, g, indexing="ij")
    logits = np.stack([np.zeros(g1.size), g1.ravel(), g2.ravel()], axis=1)
    for y in range(k):
        if psi_scale == 0.0:
            psi = np.zeros(k)
            bound = untuned_bohning(np.ones((1, 1)), 0.0, np.array([y]), k)
        else:  # one feature equal to 1, so the logits at q are q itself
            psi = psi_scale * rng.normal(size=k)
            bound = map_tuned_bohning(np.ones((1, 1)), 0.0, np.array([y]), k, psi)
        np.testing.assert_allclose(bound.anchor[0], psi)
        e = logits - psi
        log_b = (
            bound.value[0]
            + e @ bound.slope[0]
            - 0.5 * np.einsum("nk,kl,nl->n", e, bound.curvature, e)
        )
        log_l = _softmax_loglik(logits, np.full(len(logits), y))
        assert np.all(log_b <= log_l + 1e-12 * (1 + np.abs(log_l)))


def test_bohning_curvature_dominates_softmax_hessian():
    rng = np.random.default_rng(3)
    a = bohning_curvature(5)
    for _ in range(200):
        p = special.softmax(3 * rng.normal(size=5))
        hess = np.diag(p) - np.outer(p, p)
        assert np.linalg.eigvalsh(a - hess).min() >= -1e-12


def test_bounds_below_loglik_at_random_parameters(data):
    rng = data["rng"]
    for name, bound, loglik, _ in _scalar_cases(data):
        for q in _random_points(data["q_true"], rng):
            log_l = loglik(data["x"] @ q + data["offset"])
            gap = log_l - bound.log_bound(q)
            assert np.all(gap >= -1e-10 * (1 + np.abs(log_l))), name
    for name, bound, _ in _softmax_cases(data):
        for q in _random_points(data["w_true"], rng):
            log_l = _softmax_loglik(bound.linear_predictor(q), data["y_cat"])
            gap = log_l - bound.log_bound(q)
            assert np.all(gap >= -1e-10 * (1 + np.abs(log_l))), name


# ---------------------------------------------------------------- tightness
def test_tight_at_the_expansion_point(data):
    for _, bound, loglik, centre in _scalar_cases(data):
        if centre is None:
            # untuned: each bound touches at its anchor eta = m_n
            np.testing.assert_allclose(bound.value, loglik(bound.anchor), rtol=1e-13, atol=1e-14)
            continue
        log_l = loglik(data["x"] @ centre + data["offset"])
        np.testing.assert_allclose(bound.log_bound(centre), log_l, rtol=1e-12, atol=1e-13)
        assert bound.log_bound_sum(centre) == pytest.approx(log_l.sum(), rel=1e-12)
    for _, bound, centre in _softmax_cases(data):
        if centre is None:
            np.testing.assert_allclose(bound.value, -np.log(K), rtol=1e-14)
            continue
        log_l = _softmax_loglik(bound.linear_predictor(centre), data["y_cat"])
        np.testing.assert_allclose(bound.log_bound(centre), log_l, rtol=1e-12, atol=1e-13)


def test_tangent_at_the_expansion_point(data):
    """Value and gradient in eta match the log-likelihood where the bound touches."""
    h = 1e-6
    for name, bound, loglik, _ in _scalar_cases(data):
        m = bound.anchor
        numeric = (loglik(m + h) - loglik(m - h)) / (2 * h)
        np.testing.assert_allclose(bound.slope, numeric, rtol=1e-6, atol=1e-8, err_msg=name)


def test_jaakkola_jordan_constants():
    xi = np.array([1e-8, 1e-5, 1e-3, 0.1, 1.5, 10.0])
    printed = -(np.exp(xi) - 1) / (np.exp(xi) + 1) / (4 * xi)  # the paper's a(xi)
    np.testing.assert_allclose(-jj_lambda(xi), printed, rtol=1e-7)
    assert -jj_lambda(0.0) == -0.125  # the xi -> 0 limit
    assert jj_lambda(-1.5) == jj_lambda(1.5)
    # untuned xi = 1.5: P(bright) = 1 - B/L < 0.0201 wherever 0.1 < L < 0.9
    s = special.logit(np.linspace(0.1, 0.9, 100001))
    bound = untuned_jaakkola_jordan(np.ones((1, 1)), 0.0, [1])
    e = s - bound.anchor[0]
    log_b = bound.value[0] + e * (bound.slope[0] + bound.curvature[0] * e)
    p_bright = -np.expm1(log_b - special.log_expit(s))
    assert p_bright.max() == pytest.approx(0.0201, abs=5e-5)
    # tight at both s = +-1.5
    for s0 in (1.5, -1.5):
        e0 = s0 - bound.anchor[0]
        val = bound.value[0] + e0 * (bound.slope[0] + bound.curvature[0] * e0)
        assert val == pytest.approx(special.log_expit(s0), abs=1e-14)


def test_untuned_student_t_is_the_log1p_bound():
    y = np.array([0.5, -2.0, 7.0])
    bound = untuned_student_t(np.ones((3, 1)), 0.0, y, NU, SIGMA)
    q = np.array([1.7])
    r = (y - q[0]) / SIGMA
    expected = _t_loglik(y, y) - (NU + 1) / (2 * NU) * r**2
    np.testing.assert_allclose(bound.log_bound(q), expected, rtol=1e-13)


# ---------------------------------------------------------------- collapsed sums
def test_collapsed_sum_equals_explicit_sum(data):
    rng = data["rng"]
    cases = [(n, b, data["q_true"]) for n, b, _, _ in _scalar_cases(data)]
    cases += [(n, b, data["w_true"]) for n, b, _ in _softmax_cases(data)]
    for name, bound, q0 in cases:
        for q in _random_points(q0, rng):
            explicit = bound.log_bound(q, np.arange(N))
            total = bound.log_bound_sum(q)
            scale = np.sum(np.abs(explicit))
            assert abs(total - explicit.sum()) <= REL_TOL * scale, name
            assert abs(total - explicit.sum()) <= REL_TOL * abs(explicit.sum()), name


def test_collapsed_gradients(data):
    rng = data["rng"]
    cases = [(n, b, data["q_true"]) for n, b, _, _ in _scalar_cases(data)]
    cases += [(n, b, data["w_true"]) for n, b, _ in _softmax_cases(data)]
    idx = np.arange(N)
    for _, bound, q0 in cases:
        q = q0 + 0.5 * rng.normal(size=q0.size)
        grad = bound.log_bound_sum_grad(q)
        np.testing.assert_allclose(
            grad, bound.log_bound_weighted_grad(q, idx, np.ones(N)), rtol=1e-9, atol=1e-9
        )
        h = 1e-5
        numeric = np.array(
            [
                (bound.log_bound_sum(q + h * e) - bound.log_bound_sum(q - h * e)) / (2 * h)
                for e in np.eye(q.size)
            ]
        )
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-4 * np.abs(grad).max())
        # weighted per-datum gradient on a subset
        sub = rng.choice(N, size=40, replace=False)
        w = rng.random(40)
        numeric_sub = np.array(
            [
                w @ (bound.log_bound(q + h * e, sub) - bound.log_bound(q - h * e, sub)) / (2 * h)
                for e in np.eye(q.size)
            ]
        )
        np.testing.assert_allclose(
            bound.log_bound_weighted_grad(q, sub, w), numeric_sub, rtol=1e-6, atol=1e-6
        )


def test_collapse_is_independent_of_chunking(data):
    x, off, y = data["x"], data["offset"], data["y_bern"]
    big = map_tuned_jaakkola_jordan(x, off, y, data["q_true"])
    small = map_tuned_jaakkola_jordan(x, off, y, data["q_true"], chunk_entries=37)
    q = data["q_true"] + 0.2
    assert small.log_bound_sum(q) == pytest.approx(big.log_bound_sum(q), rel=1e-13)
    f, offk, yc = data["feats"], data["offset_k"], data["y_cat"]
    big = untuned_bohning(f, offk, yc, K)
    small = untuned_bohning(f, offk, yc, K, chunk_entries=11)
    w = data["w_true"]
    assert small.log_bound_sum(w) == pytest.approx(big.log_bound_sum(w), rel=1e-13)


def test_bohning_with_a_coefficient_map(data):
    """Reference-class parameterisation: class 0 fixed at zero, q holds the other K - 1."""
    f, offk, yc = data["feats"], data["offset_k"], data["y_cat"]
    ndim = P * (K - 1)
    coef_map = np.zeros((P * K, ndim))
    for p in range(P):
        for k in range(1, K):
            coef_map[p * K + k, p * (K - 1) + k - 1] = 1.0
    rng = data["rng"]
    q_map = rng.normal(size=ndim)
    bound = map_tuned_bohning(f, offk, yc, K, q_map, coef_map=coef_map)
    assert isinstance(bound, SoftmaxQuadraticBound) and bound.ndim == ndim
    for q in _random_points(q_map, rng, reps=2):
        explicit = bound.log_bound(q, np.arange(N))
        assert abs(bound.log_bound_sum(q) - explicit.sum()) <= REL_TOL * abs(explicit.sum())
        log_l = _softmax_loglik(bound.linear_predictor(q), yc)
        assert np.all(explicit <= log_l + 1e-10 * (1 + np.abs(log_l)))
    np.testing.assert_allclose(
        bound.log_bound(q_map), _softmax_loglik(bound.linear_predictor(q_map), yc), rtol=1e-12
    )


def test_bounds_pickle(data):
    for _, bound, _, _ in _scalar_cases(data):
        again = pickle.loads(pickle.dumps(bound))
        q = data["q_true"]
        assert again.log_bound_sum(q) == bound.log_bound_sum(q)


# ---------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_errors(data):
    x, off = data["x"], data["offset"]
    with pytest.raises(ValueError, match="0 or 1"):
        untuned_jaakkola_jordan(x, off, np.full(N, 2))
    with pytest.raises(ValueError, match="shape"):
        untuned_jaakkola_jordan(x, off, np.zeros(N - 1))
    with pytest.raises(ValueError, match="positive"):
        untuned_student_t(x, off, data["y_t"], -1.0, SIGMA)
    with pytest.raises(ValueError, match="class indices"):
        untuned_bohning(data["feats"], 0.0, np.full(N, K), K)
    with pytest.raises(ValueError, match="curvature"):
        LinearQuadraticBound.from_coefficients(x, 0.0, 0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="2-D"):
        untuned_jaakkola_jordan(np.ones(N), 0.0, data["y_bern"])


def test_gathered_rows_are_reused_only_for_the_same_indices(data):
    """The bounds keep the last gathered rows (a FlyMC trajectory reads the same bright
    rows at every leapfrog step); an index array changed in place must not be served the
    old rows, and the kept rows cannot be written to."""
    x, off, yb = data["x"], data["offset"], data["y_bern"]
    bound = map_tuned_jaakkola_jordan(x, off, yb, data["q_true"])
    q = data["q_true"] + 0.1
    idx = np.array([5, 17, 2999, 0])
    first = bound.gathered_rows(idx)
    assert bound.gathered_rows(idx.copy()) is first
    np.testing.assert_array_equal(first, x[idx])
    with pytest.raises(ValueError):
        first[0, 0] = 1.0
    idx[1] = 18  # the caller's array changes in place
    np.testing.assert_array_equal(bound.gathered_rows(idx), x[idx])
    np.testing.assert_allclose(
        bound.log_bound(q, idx), bound.log_bound(q, np.arange(N))[idx], rtol=1e-12
    )
    assert pickle.loads(pickle.dumps(bound)).gathered_rows(idx).shape == (4, D)


def _binomial_loglik(eta, y, n):
    log_choose = special.gammaln(n + 1) - special.gammaln(y + 1) - special.gammaln(n - y + 1)
    return log_choose + y * special.log_expit(eta) + (n - y) * special.log_expit(-eta)


@pytest.mark.parametrize("anchor", [-6.0, -1.3, 0.0, 0.4, 2.5, 9.0])
def test_binomial_jaakkola_jordan_below_loglik_on_dense_grid(anchor):
    """The Binomial bound (a sum of n Jaakkola-Jordan bounds) lies below the Binomial
    log-pmf for every eta, touches it at the anchor with the same slope, for rows with
    1-20 trials and every number of successes (scipy's binom.logpmf as reference)."""
    from pymc_minibatch_mh.bounds.jaakkola_jordan import jaakkola_jordan_bound

    trials = np.repeat(np.arange(1, 21), np.arange(2, 22))
    successes = np.concatenate([np.arange(n + 1) for n in range(1, 21)])
    rows = trials.size
    bound = jaakkola_jordan_bound(
        np.ones((rows, 1)), 0.0, successes, np.full(rows, anchor), trials=trials
    )
    eta = GRID[::20]
    e = eta[None, :] - anchor
    quadratic = bound.value[:, None] + e * (bound.slope[:, None] + bound.curvature[:, None] * e)
    # binom.logpmf rounds expit(eta) to 1 beyond |eta| ~ 37: the same pmf with log_expit
    exact = _binomial_loglik(eta[None, :], successes[:, None], trials[:, None])
    np.testing.assert_allclose(
        exact[:, 800:1200],
        stats.binom.logpmf(successes[:, None], trials[:, None], special.expit(eta[800:1200])),
        rtol=1e-9,
    )
    assert np.all(quadratic <= exact + REL_TOL * (1 + np.abs(exact)))
    # Negative control: half the curvature crosses above the pmf somewhere.
    loose = bound.value[:, None] + e * (bound.slope[:, None] + 0.5 * bound.curvature[:, None] * e)
    assert not np.all(loose <= exact + REL_TOL * (1 + np.abs(exact)))
    for q in (-3.0, 0.7):  # log_bound evaluates that quadratic
        np.testing.assert_allclose(
            bound.log_bound(np.array([q])),
            bound.value + (q - anchor) * (bound.slope + bound.curvature * (q - anchor)),
            rtol=1e-12,
        )
    at = bound.log_bound(np.array([anchor]))
    np.testing.assert_allclose(
        at, stats.binom.logpmf(successes, trials, special.expit(anchor)), rtol=1e-10, atol=1e-10
    )
    np.testing.assert_allclose(bound.slope, successes - trials * special.expit(anchor), atol=1e-12)


def test_binomial_of_one_trial_is_the_bernoulli_bound(data):
    from pymc_minibatch_mh.bounds.jaakkola_jordan import jaakkola_jordan_bound

    x, off, yb = data["x"], data["offset"], data["y_bern"]
    anchor = x @ data["q_true"] + off
    bern = jaakkola_jordan_bound(x, off, yb, anchor)
    binom = jaakkola_jordan_bound(x, off, yb, anchor, trials=1)
    q = data["q_true"] + 0.3
    np.testing.assert_allclose(binom.log_bound(q), bern.log_bound(q), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(binom.log_bound_sum(q), bern.log_bound_sum(q), rtol=1e-10)


def test_map_tuned_jaakkola_jordan_in_one_pass_equals_two_passes(data):
    """The MAP-tuned Bernoulli bound, built in one pass (anchors, coefficients and collapsed
    sums together), is the bound anchored at ``eta(q_MAP)`` and collapsed there in a second
    pass; the same construction at another point (negative control) is not."""
    x, off, yb = data["x"], data["offset"], data["y_bern"]
    q_map = data["q_true"] + 0.05
    fused = map_tuned_jaakkola_jordan(x, off, yb, q_map, chunk_entries=97 * D)
    two_pass = jaakkola_jordan_bound(x, off, yb, x @ q_map + off, centre=q_map)
    for name in ("anchor", "value", "slope", "curvature"):
        np.testing.assert_allclose(getattr(fused, name), getattr(two_pass, name), rtol=1e-13)
    points = _random_points(q_map, np.random.default_rng(4))
    for q in points:
        np.testing.assert_allclose(
            fused.log_bound_sum(q), two_pass.log_bound_sum(q), rtol=1e-11, atol=1e-9
        )
    elsewhere = map_tuned_jaakkola_jordan(x, off, yb, q_map + 0.1)
    assert abs(elsewhere.log_bound_sum(q_map) - two_pass.log_bound_sum(q_map)) > 1e-3


def test_map_tuned_jaakkola_jordan_row_norms_are_those_of_the_design(data):
    """The row norms the one-pass construction computes for a factor ``L`` are
    ``||L' x_n||`` of the design's rows (as FlyMC's separate pass finds them), held for that
    factor only: another factor gets None (negative control)."""
    from pymc_minibatch_mh.bounds.lipschitz import _row_norms

    x, off, yb = data["x"], data["offset"], data["y_bern"]
    chol = np.linalg.cholesky(np.cov(data["rng"].normal(size=(50, D)), rowvar=False))
    bound = map_tuned_jaakkola_jordan(x, off, yb, data["q_true"], row_norms_chol=chol)
    np.testing.assert_allclose(bound.row_norms.of(chol), _row_norms(x, chol), rtol=1e-13)
    assert bound.row_norms.of(2.0 * chol) is None
    assert map_tuned_jaakkola_jordan(x, off, yb, data["q_true"]).row_norms is None
