"""Bounds on Taylor-remainder differences (TunaMH with control variates)."""

import numpy as np
import pymc as pm
import pytest
from pymc.pytensorf import make_shared_replacements
from region_models import region_model
from region_points import points_in_region
from scipy import special

from pymc_minibatch_mh.bounds.lipschitz import LipschitzBound, UnsupportedBound
from pymc_minibatch_mh.bounds.taylor_remainder import (
    LOGISTIC_THIRD_DERIVATIVE,
    SOFTMAX_THIRD_DERIVATIVE,
    RemainderMetric,
    student_t_scale_constants,
    taylor_remainder_bound,
    third_derivative_bound,
)
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget
from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.linear_predictor import recognise_linear_predictor
from pymc_minibatch_mh.likelihood.taylor import compile_residual_diff, full_data_taylor

N = 400


def _third_derivative(f, eta, h=1e-3):
    return (f(eta + 2 * h) - 2 * f(eta + h) + 2 * f(eta - h) - f(eta - 2 * h)) / (2 * h**3)


def test_logistic_constant_is_the_supremum_of_the_third_derivative():
    eta = np.linspace(-8, 8, 20_001)
    sig = special.expit(eta)
    assert np.max(np.abs(sig * (1 - sig) * (1 - 2 * sig))) == pytest.approx(
        LOGISTIC_THIRD_DERIVATIVE, rel=1e-6
    )


def _setup(model):
    point = model.initial_point()
    value_vars = model.value_vars
    shared = make_shared_replacements(point, value_vars, model)
    data = build_tall_data(model, value_vars, shared=shared, initial_point=point)
    lp = recognise_linear_predictor(
        model, value_vars, shared=shared, initial_point=point, check_against=data.loglik
    )
    return data, lp


def test_student_t_constant_is_the_supremum_of_the_third_derivative(rng):
    nu, sigma = 4.0, 0.7
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.StudentT("y", nu=nu, mu=b * np.ones(5), sigma=sigma, observed=np.zeros(5))
    _, lp = _setup(model)
    r = np.linspace(-20, 20, 400_001)

    def logdens(res):
        return -(nu + 1) / 2 * np.log1p(res**2 / (nu * sigma**2))

    numeric = np.max(np.abs(_third_derivative(logdens, r)))
    np.testing.assert_allclose(third_derivative_bound(lp), numeric, rtol=1e-4)


def _moves(rng, centre, scales, n_pairs=40):
    for scale in scales:
        for _ in range(n_pairs):
            q = centre + scale * rng.standard_normal(centre.size)
            yield q, q + scale * rng.standard_normal(centre.size)


@pytest.fixture(scope="module")
def logistic_case():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(N, 2))
    y = rng.random(N) < special.expit(0.5 + x @ np.array([1.0, -1.5]))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3, shape=2)
        pm.Bernoulli("y", logit_p=a + x @ b, observed=y.astype(int))
    data, lp = _setup(model)
    reference = np.array([0.45, 0.9, -1.4])
    proxy = full_data_taylor(data, reference)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    chol = np.linalg.cholesky(np.linalg.inv(-proxy.hessian))
    return target, lp, reference, chol


def _assert_bounded_and_not_vacuous(target, bound, reference, rng):
    """Every datum's residual difference is within ``c_i M`` over moves of four sizes
    (rows evaluated exactly, ``exact_rows``, need none), and the largest ratio is not tiny
    (the bound is not vacuous)."""
    bounded = np.setdiff1d(np.arange(N), () if bound.exact_rows is None else bound.exact_rows)
    worst = 0.0
    for q, q_new in _moves(rng, reference, scales=[0.01, 0.1, 0.5, 2.0]):
        residual = np.abs(target.loglik_diff(q_new, q, bounded))
        allowed = bound.c[bounded] * bound.metric(q, q_new)
        assert np.all(residual <= allowed * (1 + 1e-9) + 1e-12)
        worst = max(worst, float(np.max(residual / allowed)))
    assert worst > 0.01


@pytest.mark.parametrize("whitened", [False, True])
def test_remainder_differences_are_bounded_for_every_datum(logistic_case, rng, whitened):
    target, lp, reference, chol = logistic_case
    bound = taylor_remainder_bound(lp, reference, chol=chol if whitened else None)
    _assert_bounded_and_not_vacuous(target, bound, reference, rng)


def test_negative_control_a_too_small_constant_is_violated(logistic_case, rng):
    target, lp, reference, _ = logistic_case
    bound = taylor_remainder_bound(lp, reference)
    everything = np.arange(N)
    violated = any(
        np.any(
            np.abs(target.loglik_diff(q_new, q, everything))
            > 0.05 * bound.c * bound.metric(q, q_new)
        )
        for q, q_new in _moves(rng, reference, scales=[0.5, 2.0])
    )
    assert violated


def test_metric_is_symmetric_and_centred(rng):
    metric = RemainderMetric(np.array([1.0, 2.0]), np.array([[2.0, 0.0], [0.5, 1.0]]))
    q, q_new = rng.normal(size=2), rng.normal(size=2)
    assert metric(q, q_new) == pytest.approx(metric(q_new, q))
    assert metric(q, q) == 0.0


def test_normal_likelihood_has_an_exact_proxy(rng):
    x = rng.normal(size=(N, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 3, shape=2)
        pm.Normal("y", x @ b, 1.5, observed=x @ np.array([1.0, 2.0]) + rng.normal(size=N))
    data, lp = _setup(model)
    bound = taylor_remainder_bound(lp, np.zeros(2))
    assert bound.C == 0.0
    target = ControlVariateTarget(
        data, full_data_taylor(data, np.zeros(2)), compile_residual_diff(data)
    )
    residual = target.loglik_diff(np.array([3.0, -1.0]), np.array([0.5, 0.2]), np.arange(N))
    np.testing.assert_allclose(residual, 0.0, atol=1e-9)


def test_poisson_remainder_bound_needs_a_trust_region(rng):
    x = rng.normal(size=N)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.Poisson("y", mu=pm.math.exp(b * x), observed=rng.poisson(1.0, size=N))
    _, lp = _setup(model)
    with pytest.raises(UnsupportedBound, match="trust region"):
        taylor_remainder_bound(lp, np.zeros(1))
    bound = taylor_remainder_bound(lp, np.zeros(1), chol=np.eye(1), radius=2.0)
    assert bound.region is not None and bound.region.radius == 2.0
    assert bound.contains(np.array([1.99])) and not bound.contains(np.array([2.01]))


# ------------------------------------------------------------ trust-region bounds
REGION_KINDS = (
    "poisson",
    "normal_free_scale",
    "student_t_free_scale",
    "negbin_free_dispersion",
    "gamma_fixed_shape",
    "gamma_free_shape",
    "normal_row_scale",
    "student_t_row_scale",
    "beta_fixed_precision",
    "beta_free_precision",
    "zip_fixed_psi",
    "zip_free_psi",
    "hurdle_fixed_psi",
    "hurdle_free_psi",
    "zinb_free",
    "zinb_fixed",
    "zinb_fixed_alpha",
    "hurdle_nb_free",
    "hurdle_nb_fixed_psi",
    "ordered_logistic",
    "ordered_probit",
)
#: Kinds whose bound needs a region because of a free parameter (the others: exp(eta)).
FREE_KINDS = (
    "normal_free_scale",
    "student_t_free_scale",
    "negbin_free_dispersion",
    "gamma_free_shape",
    "normal_row_scale",
    "student_t_row_scale",
    "beta_free_precision",
    "zip_free_psi",
    "hurdle_free_psi",
    "zinb_free",
    "zinb_fixed_alpha",
    "hurdle_nb_free",
    "hurdle_nb_fixed_psi",
)


def _remainder_case(model, map_point):
    """``(lp, target, reference, chol)`` at the MAP: the recognised likelihood, the
    control-variate target, the expansion point and the Laplace covariance's factor."""
    data, lp = _setup(model)
    reference = np.concatenate(
        [np.atleast_1d(map_point[v.name]).astype(float) for v in model.value_vars]
    )
    proxy = full_data_taylor(data, reference)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    chol = np.linalg.cholesky(np.linalg.inv(-proxy.hessian))
    return lp, target, reference, chol


def _cell_pairs(rng, region):
    """Points of a cell region (inside every cell's ellipsoid) and random pairs of them."""
    points = [
        q
        for q in _points_in_region(rng, region, fractions=(0.05, 0.3, 0.7, 0.999))
        if region.contains(q)
    ]
    pairs = [(q, points[rng.integers(len(points))]) for q in points]
    assert len(pairs) > 50
    return points, pairs


@pytest.fixture(scope="module", params=REGION_KINDS)
def region_case(request):
    model, map_point = region_model(request.param)
    lp, target, reference, chol = _remainder_case(model, map_point)
    bound = taylor_remainder_bound(lp, reference, chol=chol)
    return request.param, target, lp, bound


def _points_in_region(rng, region, fractions, n_points=30):
    return points_in_region(rng, region, fractions, n_points)


def _worst_ratio(target, bound, pairs) -> float:
    """max over pairs and data of |R_i(q') - R_i(q)| / (c_i M(q, q')), with each row's
    cell metric ``M_cell(i)`` when the bound has row cells (what the kernel uses). Rows
    evaluated exactly (``bound.exact_rows``) need no bound and are left out."""
    exact = () if bound.exact_rows is None else bound.exact_rows
    rows = np.setdiff1d(np.arange(bound.n_data), exact)
    cells = getattr(bound, "cells", None)
    worst = 0.0
    for q, q_new in pairs:
        if np.array_equal(q, q_new):
            continue  # both sides are 0 up to rounding
        residual = np.abs(target.loglik_diff(q_new, q, rows))
        if cells is None:
            allowed = bound.c[rows] * bound.metric(q, q_new)
        else:
            allowed = bound.c[rows] * cells.metrics(q, q_new)[cells.cell_of_row[rows]]
        # Rounding of the residuals (~1e-13) is not a violation.
        worst = max(worst, float(np.max((residual - 1e-12) / np.maximum(allowed, 1e-12))))
    return worst


def test_trust_region_bounds_hold_for_every_datum_on_the_region(region_case, rng):
    """Dense pairs in the region: short moves anywhere, long moves across it, and moves
    between points near its boundary; every datum's remainder difference is bounded."""
    kind, target, lp, bound = region_case
    region = bound.region
    assert region is not None and lp.scale_is_free == (kind in FREE_KINDS)
    assert lp.row_scales == kind.endswith("row_scale")
    points = list(_points_in_region(rng, region, fractions=(0.05, 0.3, 0.7, 0.999)))
    pairs = []
    for q in points:
        pairs.append((q, q + region.chol @ (0.3 * rng.standard_normal(q.size))))
        pairs.append((q, points[rng.integers(len(points))]))
    pairs = [(q, q_new) for q, q_new in pairs if region.contains(q_new)]
    assert len(pairs) > 150
    worst = _worst_ratio(target, bound, pairs)
    print(f"{kind}: worst |dR| / (c M) on the region = {worst:.3g}")
    assert worst <= 1.0 + 1e-9
    assert worst > 1e-3  # not vacuous


def test_negative_control_too_small_constants_fail_on_the_region(region_case, rng):
    """Constants a hundredth of the derived ones are violated on the same kind of pairs: the
    check above has power (the derived bounds are 1.3-25x above the worst pair here)."""
    _, target, _, bound = region_case
    region = bound.region
    invalid = LipschitzBound(0.01 * bound.c, bound.metric, region=region)
    points = list(_points_in_region(rng, region, fractions=(0.3, 0.7, 0.999)))
    pairs = [(q, points[rng.integers(len(points))]) for q in points]
    assert _worst_ratio(target, invalid, pairs) > 1.0


def test_negative_control_poisson_constants_of_a_small_region_fail_on_a_large_one(rng):
    """Poisson: constants for a region of radius 0.3 fail across the default region (the
    region's size is what makes them valid)."""
    model, map_point = region_model("poisson")
    data, lp = _setup(model)
    reference = np.array([float(map_point["a"]), float(map_point["b"])])
    proxy = full_data_taylor(data, reference)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    chol = np.linalg.cholesky(np.linalg.inv(-proxy.hessian))
    region = taylor_remainder_bound(lp, reference, chol=chol).region
    small = taylor_remainder_bound(lp, reference, chol=chol, radius=0.3)
    points = list(_points_in_region(rng, region, fractions=(0.7, 0.999)))
    pairs = [(q, points[rng.integers(len(points))]) for q in points]
    assert _worst_ratio(target, small, pairs) > 1.0


def test_student_t_scale_constants_bound_the_scaled_third_derivatives():
    """B_1..B_4 against finite differences of f(eta, s) = -s + g((y - eta) e^{-s}) on a
    dense grid (at s = s* = 0, so the scaled and plain derivatives coincide)."""
    nu = 3.0
    b = student_t_scale_constants(nu)

    def f(eta, s):
        u = -eta * np.exp(-s)  # y = 0
        return -s - (nu + 1) / 2 * np.log1p(u * u / nu)

    eta = np.linspace(-30, 30, 6001)
    h = 1e-3

    # Third derivatives by central differences of order 2 in each argument.
    def d3(f_eta, f_s):
        total = 0.0
        for i in (-1, 1):
            for j in (-1, 1):
                for k in (-1, 1):
                    total = total + i * j * k * f(
                        eta + h * (f_eta[0] * i + f_eta[1] * j + f_eta[2] * k),
                        h * (f_s[0] * i + f_s[1] * j + f_s[2] * k),
                    )
        return total / (8 * h**3)

    eee = d3((1, 1, 1), (0, 0, 0))
    ees = d3((1, 1, 0), (0, 0, 1))
    ess = d3((1, 0, 0), (0, 1, 1))
    sss = d3((0, 0, 0), (1, 1, 1))
    for numeric, bound in zip((eee, ees, ess, sss), b, strict=True):
        peak = float(np.max(np.abs(numeric)))
        assert peak <= bound * (1 + 1e-4)
        assert peak >= bound / 1.01  # tight: the supremum is attained near the grid


def test_negative_binomial_with_a_fixed_dispersion_has_a_global_bound(rng):
    """The third derivative in eta is -(alpha + y) p q (q - p), at most (alpha + y) sqrt(3)/18
    everywhere: no trust region. Checked on moves of every size, with a negative control."""
    x = rng.normal(size=N)
    mu = np.exp(0.8 + 0.5 * x)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3)
        y = rng.negative_binomial(3.0, 3.0 / (3.0 + mu))
        pm.NegativeBinomial("y", mu=pm.math.exp(a + b * x), alpha=3.0, observed=y)
    data, lp = _setup(model)
    reference = np.array([0.8, 0.5])
    proxy = full_data_taylor(data, reference)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    bound = taylor_remainder_bound(lp, reference)
    assert bound.region is None
    pairs = list(_moves(rng, reference, scales=[0.01, 0.1, 0.5, 2.0]))
    worst = _worst_ratio(target, bound, pairs)
    assert 1e-3 < worst <= 1.0 + 1e-9
    small = LipschitzBound(0.1 * bound.c, bound.metric)
    assert _worst_ratio(target, small, pairs) > 1.0


def test_softmax_constant_bounds_the_cubic_form_of_the_third_derivative(rng):
    """|D^3 f [a, a, a]| = |third central moment of a_C|, C ~ softmax(eta), is at most
    SOFTMAX_THIRD_DERIVATIVE ||a||^3 for random logits and directions (K = 2..5), and the
    constant is within a factor 2 of the largest ratio found."""
    worst = 0.0
    for k in (2, 3, 5):
        eta = 3.0 * rng.standard_normal((4000, k))
        a = rng.standard_normal((4000, k))
        prob = special.softmax(eta, axis=1)
        centred = a - np.sum(prob * a, axis=1, keepdims=True)
        third = np.abs(np.sum(prob * centred**3, axis=1)) / np.linalg.norm(a, axis=1) ** 3
        worst = max(worst, float(third.max()))
    assert worst <= SOFTMAX_THIRD_DERIVATIVE
    assert worst > 0.5 * SOFTMAX_THIRD_DERIVATIVE


@pytest.mark.parametrize("whitened", [False, True])
def test_softmax_remainder_differences_are_bounded_for_every_datum(rng, whitened):
    """Categorical-softmax (K = 3, two covariates and class intercepts): global bound,
    checked on moves of every size, with a negative control (a tenth of the constants)."""
    x = rng.normal(size=(N, 2))
    logits = x @ np.array([[0.5, -0.3, 0.0], [0.2, 0.4, -0.6]]) + np.array([0.3, -0.2, 0.0])
    y = np.array([rng.choice(3, p=row) for row in special.softmax(logits, axis=1)])
    with pm.Model() as model:
        w = pm.Normal("w", 0, 2, shape=(2, 3))
        b = pm.Normal("b", 0, 2, shape=3)
        pm.Categorical("y", logit_p=x @ w + b, observed=y)
    data, lp = _setup(model)
    reference = np.concatenate([[0.5, -0.3, 0.0, 0.2, 0.4, -0.6], [0.3, -0.2, 0.0]])
    proxy = full_data_taylor(data, reference)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    # The class-invariant direction makes the Hessian singular: regularise for the metric.
    chol = np.linalg.cholesky(np.linalg.inv(-proxy.hessian + 0.25 * np.eye(reference.size)))
    bound = taylor_remainder_bound(lp, reference, chol=chol if whitened else None)
    assert bound.region is None
    pairs = list(_moves(rng, reference, scales=[0.01, 0.1, 0.5, 2.0]))
    if whitened:  # moves shaped like the metric, as the sampler's are
        pairs = [
            (reference + chol @ (q - reference), reference + chol @ (q_new - reference))
            for q, q_new in pairs
        ]
    worst = _worst_ratio(target, bound, pairs)
    print(f"softmax: worst |dR| / (c M) = {worst:.3g}")
    assert 1e-3 < worst <= 1.0 + 1e-9
    small = LipschitzBound(0.1 * bound.c, bound.metric)
    assert _worst_ratio(target, small, pairs) > 1.0


@pytest.fixture(scope="module")
def binomial_case():
    """Binomial-logit rows with 1-20 trials each (a pm.Data array of trials)."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(N, 2))
    trials = rng.integers(1, 21, N)
    y = rng.binomial(trials, special.expit(-0.3 + x @ np.array([0.8, -1.1])))
    with pm.Model() as model:
        n = pm.Data("trials", trials)
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3, shape=2)
        pm.Binomial("y", n=n, logit_p=a + x @ b, observed=y)
    data, lp = _setup(model)
    reference = np.array([-0.3, 0.8, -1.1])
    proxy = full_data_taylor(data, reference)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    return target, lp, reference, trials


def test_binomial_is_recognised_with_its_trials(binomial_case):
    _, lp, _, trials = binomial_case
    assert lp.family == "binomial_logit"
    np.testing.assert_array_equal(lp.params["n"], trials)
    np.testing.assert_allclose(third_derivative_bound(lp), trials * LOGISTIC_THIRD_DERIVATIVE)


def test_binomial_remainder_differences_are_bounded_for_every_datum(binomial_case, rng):
    target, lp, reference, _ = binomial_case
    bound = taylor_remainder_bound(lp, reference)
    _assert_bounded_and_not_vacuous(target, bound, reference, rng)
    # Negative control: the Bernoulli constant (trials ignored) is too small.
    everything = np.arange(N)
    too_small = bound.c / np.asarray(lp.params["n"], dtype=float)
    assert any(
        np.any(
            np.abs(target.loglik_diff(q_new, q, everything)) > too_small * bound.metric(q, q_new)
        )
        for q, q_new in _moves(rng, reference, scales=[0.5, 2.0])
    )


def test_gamma_free_shape_bounds_hold_on_row_cells(rng):
    """A Gamma multilevel model with a free shape: the trust region is every row cell's
    ellipsoid (one radius per row); the remainder differences stay bounded on it."""
    from pymc_minibatch_mh.bounds.row_cells import CellRegion, row_cells_for
    from pymc_minibatch_mh.data.row_design import row_supports

    data_rng = np.random.default_rng(22)
    group = data_rng.integers(0, 6, N)
    x = data_rng.normal(size=N)
    y = data_rng.gamma(3.0, np.exp(0.3 * group / 6 + 0.4 * x) / 3.0)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2, shape=6)
        b = pm.Normal("b", 0, 2)
        shape = pm.Exponential("shape", 0.5)
        pm.Gamma("y", alpha=shape, beta=shape / pm.math.exp(a[group] + b * x), observed=y)
        map_point = pm.find_MAP(progressbar=False)
    lp, target, reference, chol = _remainder_case(model, map_point)
    cells = row_cells_for(lp, reference, chol, row_supports(lp.design))
    assert cells is not None
    bound = taylor_remainder_bound(lp, reference, chol=chol, cells=cells)
    region = bound.region
    assert isinstance(region, CellRegion)
    points, pairs = _cell_pairs(rng, region)
    worst = _worst_ratio(target, bound, pairs)
    print(f"gamma free shape on cells: worst |dR| / (c M) = {worst:.3g}")
    assert 1e-3 < worst <= 1.0 + 1e-9


def test_one_sigma_per_group_bounds_hold_on_row_cells(rng):
    """A Normal multilevel model with one free sigma per group: each row touches its
    group's intercept and log sigma, so the cells join both supports; the remainder
    differences stay bounded on every cell's ellipsoid. Negative control: the cells of
    the linear predictor alone (without the scale's coordinates) give a bound that fails
    on the same pairs."""
    from pymc_minibatch_mh.bounds.row_cells import (
        CellRegion,
        likelihood_row_supports,
        row_cells_for,
    )
    from pymc_minibatch_mh.data.row_design import row_supports

    data_rng = np.random.default_rng(23)
    group = data_rng.integers(0, 6, N)
    x = data_rng.normal(size=N)
    x[:2] = [8.0, -8.0]
    y = 0.2 * group + 0.5 * x + np.exp(0.1 * group - 0.3) * data_rng.normal(size=N)
    y[2] += 9.0  # an outlier
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2, shape=6)
        b = pm.Normal("b", 0, 2)
        sigma = pm.HalfNormal("sigma", 2, shape=6)
        pm.Normal("y", a[group] + b * x, sigma[group], observed=y)
        map_point = pm.find_MAP(progressbar=False)
    lp, target, reference, chol = _remainder_case(model, map_point)
    assert lp.row_scales
    supports = likelihood_row_supports(lp)
    assert supports is not None and supports[0].shape[1] == 3  # a[g], b and log sigma[g]
    cells = row_cells_for(lp, reference, chol, supports)
    bound = taylor_remainder_bound(lp, reference, chol=chol, cells=cells)
    region = bound.region
    assert isinstance(region, CellRegion) and region.cells.sizes.max() == 3
    points, pairs = _cell_pairs(rng, region)
    worst = _worst_ratio(target, bound, pairs)
    print(f"one sigma per group on cells: worst |dR| / (c M) = {worst:.3g}")
    assert 1e-3 < worst <= 1.0 + 1e-9
    # Cells that ignore the scale's coordinates: the metric misses log-sigma moves.
    wrong_cells = row_cells_for(lp, reference, chol, row_supports(lp.design))
    wrong = taylor_remainder_bound(lp, reference, chol=chol, cells=wrong_cells)
    moves = []
    for q in points:
        q_new = q.copy()
        q_new[7:] += 0.5 * rng.standard_normal(6)  # only the log sigmas move
        moves.append((q, q_new))
    assert _worst_ratio(target, wrong, moves) > 1.0
