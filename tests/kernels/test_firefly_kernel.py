"""FlyMC kernel: brightness store, z update, numerics, cost accounting and exactness.

The exactness tests run the pure-numpy kernel on a 2-D logistic regression whose
posterior is integrated on a fine grid, and compare means, variances and CDF
values with tolerances of 4 Monte Carlo standard errors (batch means). A
deliberately invalid bound (negative control) must fail the same comparison.
"""

import copy
import math
import pickle
from dataclasses import replace

import numpy as np
import pytest
from scipy import optimize, sparse, special

from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound
from pymc_minibatch_mh.bounds.glm_bright_rows import GLMBrightRows
from pymc_minibatch_mh.bounds.jaakkola_jordan import (
    map_tuned_jaakkola_jordan,
    untuned_jaakkola_jordan,
)
from pymc_minibatch_mh.kernels import compiled_cache, compiled_split_iteration, split_kicks
from pymc_minibatch_mh.kernels.brightening_rates import CellRates, RowsByCell
from pymc_minibatch_mh.kernels.firefly import (
    BrightFractionAverage,
    BrightnessStore,
    FireflySettings,
    FireflyState,
    InvalidBoundError,
    SeparateRows,
    brightness_update,
    draw_brightness,
    firefly_kernel,
    geometric_positions,
    log_tilde_likelihood,
    new_firefly_state,
    split_hmc_theta_update,
    theta_update,
)
from pymc_minibatch_mh.kernels.gaussian_flow import GaussianFlow
from pymc_minibatch_mh.kernels.proposals import RandomWalkProposal
from pymc_minibatch_mh.kernels.target import ArrayTarget

N, PRIOR_SD = 200, 3.0
Z_TOL = 4.0


# ---------------------------------------------------------------- brightness store
def test_store_matches_a_reference_set_under_random_operations():
    rng = np.random.default_rng(0)
    n = 1000
    store = BrightnessStore(n)
    mask = np.zeros(n, dtype=bool)
    for _ in range(300):
        bright, dark = np.flatnonzero(mask), np.flatnonzero(~mask)
        off = rng.choice(bright, size=rng.integers(0, bright.size + 1), replace=False)
        on = rng.choice(dark, size=rng.integers(0, min(dark.size, 50) + 1), replace=False)
        store.darken(off)
        store.brighten(on)
        mask[off] = False
        mask[on] = True
        assert store.n_bright == mask.sum()
        np.testing.assert_array_equal(np.sort(store.bright_indices()), np.flatnonzero(mask))
        np.testing.assert_array_equal(np.sort(store.dark_indices()), np.flatnonzero(~mask))
        store.check_consistency()
    np.testing.assert_array_equal(store.mask(), mask)
    i = np.arange(store.n_bright)
    np.testing.assert_array_equal(store.ith_bright(i), store.bright_indices())
    np.testing.assert_array_equal(store.ith_dark(np.arange(store.n_dark)), store.dark_indices())
    np.testing.assert_array_equal(store.is_bright(np.arange(n)), mask)


def test_store_single_operations_and_construction():
    store = BrightnessStore(5, np.array([True, False, True, False, False]))
    assert store.n_bright == 2 and store.n_dark == 3
    store.check_consistency()
    store.brighten([4])
    assert set(store.bright_indices()) == {0, 2, 4}
    store.darken([0])
    assert set(store.bright_indices()) == {2, 4}
    assert set(store.dark_indices()) == {0, 1, 3}
    store.check_consistency()
    assert BrightnessStore(5, [2, 4]) == store  # from indices
    assert BrightnessStore(5).n_bright == 0


def test_store_rejects_invalid_operations():
    store = BrightnessStore(6, [1, 2])
    with pytest.raises(ValueError, match="dark"):
        store.brighten([1])
    with pytest.raises(ValueError, match="bright"):
        store.darken([3])
    with pytest.raises(ValueError, match="distinct"):
        store.brighten([3, 3])
    with pytest.raises(IndexError):
        store.darken([6])
    with pytest.raises(IndexError):
        store.ith_bright(2)
    store.check_consistency()


def test_store_consistency_check_catches_corruption():
    store = BrightnessStore(10, [1, 5])
    store.tab[3] = 0
    with pytest.raises(AssertionError):
        store.check_consistency()


def test_store_pickles_and_copies():
    store = BrightnessStore(50, np.arange(0, 50, 3))
    again = pickle.loads(pickle.dumps(store))
    again.check_consistency()
    assert again == store
    other = store.copy()
    other.darken([0])
    assert other != store and store.is_bright([0])[0]


# ---------------------------------------------------------------- geometric skips
def test_geometric_positions_are_independent_coin_flips():
    rng = np.random.default_rng(1)
    length, prob, reps = 40, 0.15, 20000
    counts = np.zeros(length)
    sizes = np.empty(reps)
    for r in range(reps):
        pos = geometric_positions(rng, prob, length)
        assert np.all(np.diff(pos) > 0) and (pos.size == 0 or (pos[0] >= 0 and pos[-1] < length))
        counts[pos] += 1
        sizes[r] = pos.size
    sd = math.sqrt(reps * prob * (1 - prob))
    assert np.all(np.abs(counts - reps * prob) < 5 * sd)
    assert abs(sizes.mean() - length * prob) < 5 * math.sqrt(length * prob * (1 - prob) / reps)
    assert abs(sizes.var() - length * prob * (1 - prob)) < 0.1 * length * prob


def test_geometric_positions_edge_cases():
    rng = np.random.default_rng(2)
    np.testing.assert_array_equal(geometric_positions(rng, 1.0, 7), np.arange(7))
    assert geometric_positions(rng, 0.5, 0).size == 0
    assert geometric_positions(rng, 1e-12, 10**9).size <= 5
    big = geometric_positions(rng, 0.3, 10**6)  # several chunks are never needed, but allowed
    assert abs(big.size - 3e5) < 5 * math.sqrt(3e5 * 0.7)


# ---------------------------------------------------------------- numerics
def test_log_tilde_likelihood_is_accurate_and_stable():
    gaps = np.array([1e-300, 1e-14, 1e-8, 0.5, 3.0, 40.0, 800.0])
    out = log_tilde_likelihood(gaps, np.zeros_like(gaps))
    # reference: log(exp(g) - 1) = log(expm1(g)), or g + log1p(-exp(-g)) for large g
    ref = np.where(
        gaps < 30, np.log(np.expm1(np.minimum(gaps, 30))), gaps + np.log1p(-np.exp(-gaps[-1]))
    )
    np.testing.assert_allclose(out, ref, rtol=1e-13)
    # temperature divides the gap
    np.testing.assert_allclose(
        log_tilde_likelihood([2.0], [0.0], temperature=4.0), np.log(np.expm1(0.5)), rtol=1e-14
    )
    # touching points (within rounding) have Ltilde = 0; -inf log L gives -inf
    assert np.all(log_tilde_likelihood([0.0, -1e-15, -np.inf], [0.0, 0.0, 0.0]) == -np.inf)


def test_log_tilde_likelihood_detects_invalid_bounds():
    with pytest.raises(InvalidBoundError, match="row 7"):
        log_tilde_likelihood([-1.0], [-0.9], rows=np.array([7]))
    # with the check off a violation is treated as Ltilde = 0
    assert log_tilde_likelihood([-1.0], [-0.9], check=False)[0] == -np.inf


def test_bright_fraction_average_forgets_burn_in():
    avg = BrightFractionAverage(0.01)
    for _ in range(200):
        avg = avg.update(500, 1000)
    assert avg.mean == pytest.approx(0.5)
    for _ in range(1000):
        avg = avg.update(1, 1000)
    assert avg.mean == pytest.approx(1e-3, rel=1e-3)


# ---------------------------------------------------------------- logistic problem
class CountingTarget:
    """Logistic-regression target (with gradients) that counts likelihood rows evaluated."""

    def __init__(self, x, y, prior_sd):
        self.x, self.t, self.prior_sd = x, 2.0 * y - 1.0, prior_sd
        self.n_data = x.shape[0]
        self.rows = 0
        self.grad_rows = 0

    def loglik(self, q, idx):
        self.rows += len(idx)
        return special.log_expit(self.t[idx] * (self.x[idx] @ q))

    def loglik_full(self, q):
        return self.loglik(q, np.arange(self.n_data))

    def loglik_diff(self, q_new, q_old, idx):
        return self.loglik(q_new, idx) - self.loglik(q_old, idx)

    def logprior(self, q):
        return float(-0.5 * np.sum(q**2) / self.prior_sd**2)

    def loglik_weighted_grad(self, q, idx, weights):
        self.grad_rows += len(idx)
        s = self.t[idx] * (self.x[idx] @ q)
        return self.x[idx].T @ (weights * self.t[idx] * special.expit(-s))

    def logprior_grad(self, q):
        return -q / self.prior_sd**2


@pytest.fixture(scope="module")
def logistic():
    rng = np.random.default_rng(11)
    x = np.column_stack([np.ones(N), rng.normal(size=N)])
    y = (rng.random(N) < special.expit(x @ np.array([0.5, -1.0]))).astype(float)
    target = CountingTarget(x, y, PRIOR_SD)
    full = np.arange(N)
    q_map = optimize.minimize(
        lambda q: -(target.loglik(q, full).sum() + target.logprior(q)), np.zeros(2)
    ).x
    return {"x": x, "y": y, "target": target, "q_map": q_map}


_GRID_CACHE = {}


def _grid_moments(logistic, temperature):
    """Exact posterior expectations of the test statistics by 2-D quadrature (cached)."""
    if temperature not in _GRID_CACHE:
        _GRID_CACHE[temperature] = _integrate(logistic, temperature)
    return _GRID_CACHE[temperature]


def _integrate(logistic, temperature):
    x, t = logistic["x"], 2.0 * logistic["y"] - 1.0
    centre = logistic["q_map"]
    half = 7.0 * 0.3 * math.sqrt(temperature)  # > 7 posterior sd in each direction
    h = half / 200
    g0 = centre[0] + h * np.arange(-200, 201)
    g1 = centre[1] + h * np.arange(-200, 201)
    q = np.stack(np.meshgrid(g0, g1, indexing="ij"), axis=-1).reshape(-1, 2)
    logp = special.log_expit(t[None, :] * (q @ x.T)).sum(1) / temperature
    logp -= 0.5 * np.sum(q**2, axis=1) / PRIOR_SD**2
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = w @ q
    var = w @ (q - mean) ** 2
    # CDF at cell boundaries (midpoint rule is then second-order accurate)
    cuts = []
    for j, grid in enumerate((g0, g1)):
        marg = np.bincount(np.searchsorted(grid, q[:, j]), weights=w, minlength=grid.size)
        cdf = np.cumsum(marg)
        picks = [int(np.searchsorted(cdf, p)) for p in (0.1, 0.5, 0.9)]
        cuts.append([(grid[i] + h / 2, cdf[i]) for i in picks])
    return mean, var, cuts


def _statistics(draws, mean, cuts):
    cols, exact = [], []
    for j in range(2):
        cols.append(draws[:, j])
        cols.append((draws[:, j] - mean[j]) ** 2)
        for cut, prob in cuts[j]:
            cols.append((draws[:, j] <= cut).astype(float))
            exact.append(prob)
    return np.column_stack(cols), exact


def _z_scores(draws, reference, n_batches=50):
    mean, var, cuts = reference
    stats, probs = _statistics(draws, mean, cuts)
    targets = []
    p = iter(probs)
    for j in range(2):
        targets += [mean[j], var[j], next(p), next(p), next(p)]
    batches = stats[: len(stats) // n_batches * n_batches].reshape(n_batches, -1, stats.shape[1])
    mcse = batches.mean(axis=1).std(axis=0, ddof=1) / math.sqrt(n_batches)
    return (stats.mean(axis=0) - np.array(targets)) / mcse


def _run(logistic, bound, settings, *, scaling, iters, seed, start=None, **kernel_kw):
    rng = np.random.default_rng(seed)
    target = logistic["target"]
    start = logistic["q_map"] if start is None else start
    state = new_firefly_state(rng, start, target, bound, settings)
    draws = np.empty((iters, 2))
    n_bright = np.empty(iters)
    accepted = 0
    for i in range(iters):
        state, info = firefly_kernel(
            rng, state, target, bound, settings, scaling=scaling, **kernel_kw
        )
        draws[i] = state.position
        n_bright[i] = info.n_bright
        accepted += info.accepted
    state.store.check_consistency()
    return draws[iters // 20 :], n_bright, accepted / iters


ITERS = 20_000


@pytest.mark.parametrize(
    ("kind", "theta_update", "temperature", "q_db", "scaling"),
    [
        ("untuned", "rw", 1.0, 0.1, 0.35),
        ("map", "rw", 1.0, 0.01, 0.35),
        ("map", "rw", 3.0, 0.05, 0.6),
        ("untuned", "mala", 1.0, 0.1, 0.2),
    ],
)
def test_flymc_matches_grid_posterior(logistic, kind, theta_update, temperature, q_db, scaling):
    x, y = logistic["x"], logistic["y"]
    if kind == "untuned":
        bound = untuned_jaakkola_jordan(x, 0.0, y)
    else:
        bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    settings = FireflySettings(q_db=q_db, temperature=temperature, theta_update=theta_update)
    draws, n_bright, acc = _run(logistic, bound, settings, scaling=scaling, iters=ITERS, seed=3)
    assert 0.1 < acc < 0.9
    z = _z_scores(draws, _grid_moments(logistic, temperature))
    print("z-scores", z.round(2))
    assert np.all(np.abs(z) < Z_TOL), z.round(2)
    if kind == "map" and temperature == 1.0:
        assert n_bright.mean() < 0.05 * N  # tight bounds: few bright points


def test_negative_control_invalid_bound_fails(logistic):
    """A "bound" that exceeds L near its anchors for the y = 1 data biases the chain."""
    x, y = logistic["x"], logistic["y"]
    good = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    bad = LinearQuadraticBound.from_coefficients(
        x,
        0.0,
        good.anchor,
        good.value + 0.1 * (y == 1),
        good.slope,
        good.curvature,
        centre=logistic["q_map"],
    )
    settings = FireflySettings(q_db=0.05, check_bound=False)
    draws, _, _ = _run(logistic, bad, settings, scaling=0.35, iters=ITERS, seed=3)
    z = _z_scores(draws, _grid_moments(logistic, 1.0))
    print("z-scores", z.round(2))
    assert np.any(np.abs(z) >= Z_TOL), z.round(2)
    # and with the check on (the default) the violation is reported
    with pytest.raises(InvalidBoundError, match="exceeds the likelihood"):
        _run(logistic, bad, FireflySettings(q_db=0.05), scaling=0.35, iters=10, seed=3)


# ---------------------------------------------------------------- z | theta
def test_brightness_update_keeps_the_conditional_of_z(logistic):
    """From all-dark, repeated implicit updates at fixed theta converge to p(z_n | theta)."""
    x, y, target = logistic["x"], logistic["y"], logistic["target"]
    bound = untuned_jaakkola_jordan(x, 0.0, y)
    q = logistic["q_map"] + np.array([0.3, -0.2])
    settings = FireflySettings(q_db=0.2)
    rng = np.random.default_rng(5)
    state = new_firefly_state(rng, q, target, bound, settings)
    state.store.darken(state.store.bright_indices().copy())
    reps, burn = 6000, 200
    freq = np.zeros(N)
    for r in range(reps + burn):
        brightness_update(rng, state, target, bound, settings)
        if r >= burn:
            freq += state.store.mask()
    freq /= reps
    log_l = target.loglik(q, np.arange(N))
    p = -np.expm1(bound.log_bound(q, np.arange(N)) - log_l)
    # successive z are correlated; 6 binomial sd is a loose but meaningful band
    assert np.all(np.abs(freq - p) < 6 * np.sqrt(p * (1 - p) / reps) + 2e-3)
    # the exact draw has the same frequencies
    counts = np.zeros(N)
    for _ in range(2000):
        store, _ = draw_brightness(rng, q, target, bound, settings)
        counts += store.mask()
    assert np.all(np.abs(counts / 2000 - p) < 5 * np.sqrt(p * (1 - p) / 2000) + 1e-3)


# ---------------------------------------------------------------- cost accounting
def test_stats_count_the_likelihood_rows_actually_evaluated(logistic):
    x, y = logistic["x"], logistic["y"]
    target = CountingTarget(x, y, PRIOR_SD)
    bound = untuned_jaakkola_jordan(x, 0.0, y)
    for update in ("rw", "mala"):
        settings = FireflySettings(q_db=0.1, theta_update=update)
        rng = np.random.default_rng(8)
        state = new_firefly_state(rng, logistic["q_map"], target, bound, settings)
        for _ in range(200):
            before, before_grad, n_bright = target.rows, target.grad_rows, state.store.n_bright
            state, info = firefly_kernel(rng, state, target, bound, settings, scaling=0.3)
            used = target.rows - before
            assert info.batch_size == used  # bright rows at the proposal + proposed dark rows
            assert info.n_lik_evals == used + target.grad_rows - before_grad
            assert info.batch_size >= n_bright
            assert info.n_bright == state.store.n_bright
            assert 0.0 <= info.accept <= 1.0


def test_proposal_outside_prior_support_is_rejected_without_data(logistic):
    x, y = logistic["x"], logistic["y"]

    class Walled(CountingTarget):
        def logprior(self, q):
            return -np.inf if q[0] > 0.9 else super().logprior(q)

        def loglik(self, q, idx):
            assert q[0] <= 0.9, "likelihood evaluated outside the prior support"
            return super().loglik(q, idx)

    target = Walled(x, y, PRIOR_SD)
    bound = untuned_jaakkola_jordan(x, 0.0, y)
    settings = FireflySettings(q_db=0.1)
    rng = np.random.default_rng(9)
    state = new_firefly_state(rng, np.array([0.85, -1.0]), target, bound, settings)
    walls = 0
    for _ in range(300):
        state, info = firefly_kernel(rng, state, target, bound, settings, scaling=0.3)
        assert state.position[0] <= 0.9
        walls += info.accept == 0.0
    assert walls > 0


def test_preconditioned_proposal_and_reproducibility(logistic):
    x, y, target = logistic["x"], logistic["y"], logistic["target"]
    bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    proposal = RandomWalkProposal.from_covariance(np.array([[0.03, -0.01], [-0.01, 0.05]]), 2)
    for update in ("rw", "mala"):
        settings = FireflySettings(q_db=0.02, theta_update=update)
        paths = []
        for _ in range(2):
            rng = np.random.default_rng(21)
            state = new_firefly_state(rng, logistic["q_map"], target, bound, settings)
            path = []
            for _ in range(100):
                state, _ = firefly_kernel(
                    rng, state, target, bound, settings, scaling=1.0, proposal=proposal
                )
                path.append(state.position.copy())
            paths.append(np.array(path))
        np.testing.assert_array_equal(paths[0], paths[1])
        assert np.unique(paths[0][:, 0]).size > 10  # the chain moves


def test_settings_validation():
    with pytest.raises(ValueError, match="q_db"):
        FireflySettings(q_db=0.0)
    with pytest.raises(ValueError, match="temperature"):
        FireflySettings(q_db=0.1, temperature=0.0)
    with pytest.raises(ValueError, match="theta_update"):
        FireflySettings(q_db=0.1, theta_update="nuts")


def test_array_target_works_for_random_walk(logistic):
    """The kernel needs no gradients for random-walk updates (plain ArrayTarget)."""
    x, y = logistic["x"], logistic["y"]
    t = 2 * y - 1
    target = ArrayTarget(
        N,
        lambda q, idx: special.log_expit(t[idx] * (x[idx] @ q)),
        lambda q: float(-0.5 * np.sum(q**2) / PRIOR_SD**2),
    )
    bound = untuned_jaakkola_jordan(x, 0.0, y)
    settings = FireflySettings(q_db=0.1)
    rng = np.random.default_rng(4)
    state = new_firefly_state(rng, np.zeros(2), target, bound, settings)
    for _ in range(50):
        state, info = firefly_kernel(rng, state, target, bound, settings, scaling=0.3)
    assert np.isfinite(state.log_density(1.0))


# ---------------------------------------------------------------- compound steps: refresh_prior
def _moves(state, target, bound, settings, seed, iters=30):
    """Positions and acceptance probabilities of ``iters`` kernel iterations."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(iters):
        state, info = firefly_kernel(rng, state, target, bound, settings, scaling=0.2)
        out.append([*state.position, info.accept])
    return np.array(out)


@pytest.mark.parametrize("update", ["rw", "mala"])
def test_refreshed_state_moves_like_a_fresh_state_after_the_prior_changes(logistic, update):
    """Another step method of a compound step changes the prior (here its scale).

    After ``refresh_prior`` (which reads no data) the chain makes exactly the moves of
    a state built afresh at the same ``(q, z)``; with the cached log prior (and MALA
    gradient) left stale, as before the fix, the moves differ.
    """
    x, y = logistic["x"], logistic["y"]
    target = CountingTarget(x, y, PRIOR_SD)
    bound = untuned_jaakkola_jordan(x, 0.0, y)
    settings = FireflySettings(q_db=0.1, theta_update=update)
    rng = np.random.default_rng(31)
    state = new_firefly_state(rng, logistic["q_map"], target, bound, settings)
    for _ in range(20):
        state, _ = firefly_kernel(rng, state, target, bound, settings, scaling=0.2)
    # a last q update caches the log prior (and MALA gradients) under the old prior
    theta_update(rng, state, target, bound, settings, 0.2, RandomWalkProposal(None))
    assert state.store.n_bright > 0
    if update == "mala":
        assert state.prior_grad is not None and state.data_grad is not None

    target.prior_sd = 0.3  # the other step moved the prior scale
    stale = copy.deepcopy(state)
    fresh = FireflyState(
        position=state.position.copy(),
        logprior=float(target.logprior(state.position)),
        bound_sum=state.bound_sum,
        store=state.store.copy(),
        log_lt=state.log_lt.copy(),
    )
    rows, grad_rows = target.rows, target.grad_rows
    state.refresh_prior(target)
    assert (target.rows, target.grad_rows) == (rows, grad_rows)  # O(D): no data read
    assert state.logprior == fresh.logprior
    assert state.prior_grad is None  # recomputed (O(D)) by the next MALA update
    if update == "mala":
        assert state.data_grad is not None  # the data part is kept

    refreshed = _moves(state, target, bound, settings, seed=32)
    np.testing.assert_allclose(refreshed, _moves(fresh, target, bound, settings, seed=32))
    assert not np.allclose(refreshed, _moves(stale, target, bound, settings, seed=32))


# ---------------------------------------------------------------- u = 0
class ZeroUniforms:
    """Generator stand-in whose ``random`` returns exactly 0.0, the smallest value
    ``Generator.random`` can return; other draws come from a real Generator."""

    def __init__(self, seed):
        self._rng = np.random.default_rng(seed)

    def random(self, size=None):
        return 0.0 if size is None else np.zeros(size)

    def __getattr__(self, name):
        return getattr(self._rng, name)


class Jump:
    """Random-walk proposal stub that always proposes ``to`` (log q ratio 0)."""

    chol = None

    def __init__(self, to):
        self.to = np.asarray(to, dtype=np.float64)

    def __call__(self, rng, position, scaling):
        return self.to.copy(), 0.0


def test_a_zero_uniform_gives_the_right_decisions(logistic):
    """``u = 0.0`` once meant ``log(0)``: ``math.log`` raised and ``np.log`` gave -inf.

    Every test now accepts when ``log1p(-u) <= log r``: ``u = 0`` accepts exactly the
    moves with ``r >= 1``, the right decision for any ``r``.
    """
    x, y, target = logistic["x"], logistic["y"], logistic["target"]
    bound = untuned_jaakkola_jordan(x, 0.0, y)
    settings = FireflySettings(q_db=0.1)
    zero = ZeroUniforms(0)
    q_map = logistic["q_map"]
    far = q_map + np.array([1.0, -1.0])
    with np.errstate(divide="raise"):  # np.log(0.0) would raise FloatingPointError
        # exact draw of z: with v = 1 - u = 1, only points with p(bright) = 1 are bright
        state = new_firefly_state(zero, q_map, target, bound, settings)
        assert state.store.n_bright == 0
        for start, to, accept in [(far, q_map, True), (q_map, q_map, True), (q_map, far, False)]:
            state = new_firefly_state(zero, start, target, bound, settings)
            accepted, prob, *_ = theta_update(zero, state, target, bound, settings, 1.0, Jump(to))
            assert accepted is accept
            np.testing.assert_array_equal(state.position, to if accept else start)
            assert (prob == 1.0) if accept else (prob < 1e-6)

        # z | q: bright points darken iff Ltilde <= q_db, dark ones brighten iff >= q_db
        # (loose bounds and a large q_db, so that both outcomes occur)
        loose, settings = untuned_jaakkola_jordan(x, 0.0, y, xi=5.0), FireflySettings(q_db=0.6)
        state = new_firefly_state(np.random.default_rng(1), q_map, target, loose, settings)
        was_bright = state.store.mask()
        log_q = math.log(settings.q_db)
        stays = state.log_lt > log_q
        assert 0 < np.sum(stays & was_bright) < np.sum(was_bright)
        proposed = brightness_update(zero, state, target, loose, settings)
    now = state.store.mask()
    np.testing.assert_array_equal(now[was_bright], stays[was_bright])
    brightened = now & ~was_bright
    assert proposed > np.sum(brightened) > 0
    assert np.all(state.log_lt[brightened] >= log_q)


# ---------------------------------------------------------------- rows without a bound
UNBOUNDED = np.arange(0, N, 5)  # every fifth row


def _without_bounds(logistic):
    x, y = logistic["x"], logistic["y"]
    tight = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    return tight.without_bounds_on(UNBOUNDED)


def test_a_bound_without_rows_sums_only_the_others(logistic):
    """The collapsed sum leaves the unbounded rows out; their log-bound is -inf; their
    log Ltilde entry is log L / K and they start bright."""
    x, y, target = logistic["x"], logistic["y"], logistic["target"]
    tight = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    bound = _without_bounds(logistic)
    np.testing.assert_array_equal(bound.unbounded_rows, UNBOUNDED)
    q = logistic["q_map"] + np.array([0.4, -0.3])
    kept = np.setdiff1d(np.arange(N), UNBOUNDED)
    assert bound.log_bound_sum(q) == pytest.approx(tight.log_bound(q, kept).sum(), rel=1e-12)
    grad = bound.log_bound_weighted_grad(q, UNBOUNDED, np.ones(UNBOUNDED.size))
    np.testing.assert_array_equal(grad, 0.0)
    assert np.all(np.isneginf(bound.log_bound(q, UNBOUNDED)))
    log_l = target.loglik(q, UNBOUNDED)
    np.testing.assert_allclose(
        log_tilde_likelihood(log_l, bound.log_bound(q, UNBOUNDED), 2.0), log_l / 2.0
    )
    rng = np.random.default_rng(0)
    state = new_firefly_state(rng, q, target, bound, FireflySettings(q_db=0.5))
    assert np.all(state.store.is_bright(UNBOUNDED))
    assert state.store.n_bright >= UNBOUNDED.size


@pytest.mark.parametrize(("theta_update", "scaling"), [("rw", 0.35), ("mala", 0.2), ("hmc", 0.1)])
def test_rows_without_a_bound_keep_flymc_exact(logistic, theta_update, scaling):
    """A fifth of the rows without a bound: the chain still matches the grid posterior,
    and those rows stay bright throughout."""
    bound = _without_bounds(logistic)
    settings = FireflySettings(q_db=0.05, theta_update=theta_update)
    rng = np.random.default_rng(3)
    target = logistic["target"]
    state = new_firefly_state(rng, logistic["q_map"], target, bound, settings)
    iters = ITERS if theta_update != "hmc" else ITERS // 4
    draws = np.empty((iters, 2))
    for i in range(iters):
        state, _ = firefly_kernel(rng, state, target, bound, settings, scaling=scaling)
        draws[i] = state.position
        if i % 997 == 0:
            assert np.all(state.store.is_bright(UNBOUNDED))
    state.store.check_consistency()
    z = _z_scores(draws[iters // 20 :], _grid_moments(logistic, 1.0))
    print("z-scores", z.round(2))
    assert np.all(np.abs(z) < Z_TOL), z.round(2)


def test_negative_control_rows_without_a_bound_treated_as_bounded_fail(logistic):
    """The same bound with the kernel's care for those rows removed (they may darken and
    are then weighted as if bounded): the chain is biased."""
    bound = _without_bounds(logistic)
    settings = FireflySettings(q_db=0.05)
    rng = np.random.default_rng(3)
    target = logistic["target"]
    state = new_firefly_state(rng, logistic["q_map"], target, bound, settings)
    state.unbounded = None
    draws = np.empty((ITERS, 2))
    for i in range(ITERS):
        state, _ = firefly_kernel(rng, state, target, bound, settings, scaling=0.35)
        draws[i] = state.position
    z = _z_scores(draws[ITERS // 20 :], _grid_moments(logistic, 1.0))
    print("z-scores", z.round(2))
    assert np.any(np.abs(z) >= Z_TOL), z.round(2)


# ---------------------------------------------------------------- HMC split around a Gaussian
def _prior_times_bounds(bound, temperature=1.0, *, shift=0.0, squeeze=1.0):
    """The Gaussian prior x tempered collapsed bounds (``q | z`` without bright rows); with
    ``shift`` / ``squeeze`` a deliberately different Gaussian."""
    c = bound.collapsed
    h = c.hessian / temperature
    precision = np.eye(2) / PRIOR_SD**2 - h
    linear = (c.gradient_at_centre - c.hessian @ c.centre) / temperature
    return GaussianFlow.from_quadratic(squeeze * precision, squeeze * linear + shift)


@pytest.mark.parametrize(
    ("kind", "temperature", "gaussian_kw"),
    [
        ("map", 1.0, {}),
        ("untuned", 1.0, {}),
        ("untuned", 1.0, {"step": 1.0}),  # long steps
        ("map", 3.0, {}),
        ("map", 1.0, {"shift": 3.0, "squeeze": 0.6}),  # a poorer Gaussian: still exact
        ("map", 1.0, {"compiled": "kicks"}),  # the kicks compiled (split_kicks)
        ("untuned", 3.0, {"compiled": "kicks"}),
        ("map", 1.0, {"compiled": "iteration"}),  # the whole iteration compiled
        ("untuned", 3.0, {"compiled": "iteration"}),
        ("map", 1.0, {"shift": 3.0, "squeeze": 0.6, "compiled": "iteration"}),
    ],
)
def test_split_hmc_matches_grid_posterior(logistic, monkeypatch, kind, temperature, gaussian_kw):
    x, y = logistic["x"], logistic["y"]
    if kind == "untuned":
        bound = untuned_jaakkola_jordan(x, 0.0, y)
    else:
        bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    kw = dict(gaussian_kw)
    step = kw.pop("step", 0.4)
    compiled = kw.pop("compiled", False)
    gaussian = _prior_times_bounds(bound, temperature, **kw)
    calls = _counting_compiled_runs(monkeypatch, compiled)
    settings = FireflySettings(q_db=0.05, temperature=temperature, theta_update="hmc")
    draws, _, acc = _run(
        logistic,
        bound,
        settings,
        scaling=step,
        iters=ITERS // 4,
        seed=5,
        gaussian=gaussian,
        rows=_glm_rows(logistic, bound) if compiled else None,
    )
    if compiled:
        assert calls[compiled] > ITERS // 40  # trajectories with bright rows ran compiled
    assert calls["kicks" if compiled != "kicks" else "iteration"] == 0
    assert 0.05 < acc < 1.0
    z = _z_scores(draws, _grid_moments(logistic, temperature))
    print("acceptance", round(acc, 3), "z-scores", z.round(2))
    assert np.all(np.abs(z) < Z_TOL), z.round(2)


@pytest.mark.parametrize("compiled", [False, "kicks", "iteration"])
def test_negative_control_split_hmc_without_the_bright_rows_fails(logistic, monkeypatch, compiled):
    """The same transitions with the bright rows left out of ``q | z``'s density (and, on
    the numpy path and with compiled kicks, of the first kick), numpy loop, compiled kicks
    or compiled iteration: the chain does not sample the posterior."""
    from pymc_minibatch_mh.kernels import firefly

    x, y = logistic["x"], logistic["y"]
    bound = untuned_jaakkola_jordan(x, 0.0, y)
    no_rows = SeparateRows(None, None, np.empty(0, dtype=np.int64))
    data_grad, conditional = firefly._data_grad, firefly._conditional_at

    def at_without_bright_rows(q, rows, *args):
        at = conditional(q, rows, *args)
        return None if at is None else (at[0] - float(np.sum(at[4])), *at[1:])

    monkeypatch.setattr(firefly, "_data_grad", lambda q, rows, *a: data_grad(q, no_rows, *a))
    monkeypatch.setattr(firefly, "_conditional_at", at_without_bright_rows)
    monkeypatch.setattr(
        FireflyState, "log_density", lambda self, k: self.logprior + self.bound_sum / k
    )
    calls = _counting_compiled_runs(monkeypatch, compiled)
    if compiled == "iteration":
        counted = compiled_split_iteration.trajectory

        def without_bright_rows(*args):
            *out, _, _ = counted(*args)
            return (*out, 0.0, 0.0)  # no bright row's log Ltilde in the acceptance

        monkeypatch.setattr(compiled_split_iteration, "trajectory", without_bright_rows)
    rows = _glm_rows(logistic, bound) if compiled else None
    settings = FireflySettings(q_db=0.05, theta_update="hmc")
    draws, _, _ = _run(
        logistic,
        bound,
        settings,
        scaling=0.4,
        iters=ITERS // 4,
        seed=5,
        gaussian=_prior_times_bounds(bound),
        rows=rows,
    )
    if compiled:
        assert calls[compiled] > 0
    z = _z_scores(draws, _grid_moments(logistic, 1.0))
    print("z-scores", z.round(2))
    assert np.any(np.abs(z) >= Z_TOL), z.round(2)


def test_split_hmc_reads_only_the_bright_rows_along_the_trajectory(logistic):
    """Between the ends of a trajectory the prior and the collapsed sum are not evaluated."""
    x, y = logistic["x"], logistic["y"]
    bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    target = logistic["target"]
    calls = {"prior": 0}
    counting = copy.copy(target)

    def logprior(q):
        calls["prior"] += 1
        return target.logprior(q)

    counting.logprior = logprior
    settings = FireflySettings(q_db=0.05, theta_update="hmc")
    rng = np.random.default_rng(0)
    state = new_firefly_state(rng, logistic["q_map"], counting, bound, settings)
    calls["prior"] = 0
    firefly_kernel(
        rng, state, counting, bound, settings, scaling=0.05, gaussian=_prior_times_bounds(bound)
    )
    # at least 32 steps (time >= pi / 2), one full evaluation at the end
    assert calls["prior"] == 1


# ---------------------------------------------------------------- compiled split-HMC kicks
def _glm_rows(logistic, bound, family="bernoulli_logit", trials=None):
    """FlyMC's joint rows of the logistic fixture (a rows factory), which lets the split
    trajectory run compiled (:mod:`pymc_minibatch_mh.kernels.split_kicks`)."""
    x, y = logistic["x"], logistic["y"]

    def factory(idx):
        idx = np.asarray(idx, dtype=np.int64)
        return GLMBrightRows(
            idx=idx,
            family=family,
            source=x,
            offset=bound.offset[idx],
            observed=y[idx],
            params={} if trials is None else {"n": trials[idx]},
            anchor=bound.anchor[idx],
            value=bound.value[idx],
            slope=bound.slope[idx],
            curvature=bound.curvature[idx],
            unbounded=None,
        )

    return factory


def _counting_compiled_runs(monkeypatch, mode="kicks"):
    """Count the compiled trajectories: ``calls["kicks"]`` of the compiled kicks (the
    fixture's 2 coordinates are let through), ``calls["iteration"]`` of the compiled
    iteration's; ``mode`` "kicks" switches the compiled iteration off, "iteration" keeps
    it (it takes precedence), None or False switches both off."""
    monkeypatch.setattr(split_kicks, "MIN_DIM", 2)
    monkeypatch.setattr(split_kicks, "ENABLED", bool(mode))
    monkeypatch.setattr(compiled_split_iteration, "ENABLED", mode == "iteration")
    # compiled in this process where numba's disk cache does not hold the loops yet
    monkeypatch.setenv(compiled_cache.SWITCH, "1")
    monkeypatch.setattr(compiled_cache, "cached", lambda types: True)
    calls = {"kicks": 0, "iteration": 0}
    for module, name, key in (
        (split_kicks, "run_split_kicks", "kicks"),
        (compiled_split_iteration, "trajectory", "iteration"),
    ):
        run = getattr(module, name)

        def counted(*args, _run=run, _key=key, **kwargs):
            calls[_key] += 1
            return _run(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


def _chain(logistic, bound, rows, *, iters=300, temperature=1.0, theta_update="hmc"):
    """Draws, (acceptance rate, rows read) and the number of bright rows after each
    iteration of a FlyMC chain (split HMC, or ``theta_update``) from a fixed seed."""
    settings = FireflySettings(q_db=0.05, temperature=temperature, theta_update=theta_update)
    rng = np.random.default_rng(9)
    target = logistic["target"]
    state = new_firefly_state(rng, logistic["q_map"], target, bound, settings, rows)
    gaussian = _prior_times_bounds(bound, temperature)
    draws, bright, accepted, evals = np.empty((iters, 2)), np.empty(iters, int), 0, 0
    for i in range(iters):
        state, info = firefly_kernel(
            rng, state, target, bound, settings, scaling=0.3, gaussian=gaussian, rows=rows
        )
        draws[i], accepted, evals = (
            state.position,
            accepted + info.accepted,
            evals + info.n_lik_evals,
        )
        bright[i] = info.n_bright
    state.store.check_consistency()
    assert state.store.n_bright == np.sum(state.store.mask())
    return draws, (accepted / iters, evals), bright


@pytest.mark.parametrize("family", ["bernoulli_logit", "binomial_logit"])
def test_compiled_and_numpy_split_trajectories_give_the_same_chain(logistic, monkeypatch, family):
    """The same seed with the whole iteration compiled, with the compiled kicks and with
    the numpy loop: the same draws up to rounding, the same acceptance, rows read and
    bright sets; a compiled trajectory or kick loop that tempers differently (negative
    controls) does not give them."""
    x, y = logistic["x"], logistic["y"]
    trials = None
    if family == "binomial_logit":
        trials = np.random.default_rng(2).integers(1, 6, size=N).astype(float)
        y = np.floor(trials * np.random.default_rng(3).random(N))
        logistic = {**logistic, "y": y}
    bound = untuned_jaakkola_jordan(x, 0.0, y, trials=trials)  # bright rows at most steps
    rows = _glm_rows(logistic, bound, family, trials)
    if family == "binomial_logit":  # the fixture's target is Bernoulli: this one's own
        logistic = {**logistic, "target": _BinomialTarget(x, y, trials)}
    for temperature in (1.0, 2.0):
        chains = {}
        for mode in ("iteration", "kicks", None):
            calls = _counting_compiled_runs(monkeypatch, mode)
            chains[mode] = _chain(logistic, bound, rows, temperature=temperature)
            if mode:
                assert calls[mode] > 100
            assert calls["kicks" if mode != "kicks" else "iteration"] == 0
        numpy_loop, acc_numpy, bright_numpy = chains[None]
        assert 0.3 < acc_numpy[0] < 1.0
        for mode in ("iteration", "kicks"):
            compiled, acc, bright = chains[mode]
            assert acc == acc_numpy  # acceptance and rows read
            np.testing.assert_array_equal(bright, bright_numpy)
            np.testing.assert_allclose(compiled, numpy_loop, rtol=0, atol=1e-9)

    # a random walk on q: its brightness updates and first draw of z compiled or not
    chains = {}
    for mode in ("iteration", None):
        _counting_compiled_runs(monkeypatch, mode)
        chains[mode] = _chain(logistic, bound, rows, theta_update="rw")
    (compiled, acc, bright), (walk, acc_walk, bright_walk) = chains["iteration"], chains[None]
    assert acc == acc_walk and np.array_equal(bright, bright_walk) and bright.max() > 0
    np.testing.assert_allclose(compiled, walk, rtol=0, atol=1e-9)
    update = compiled_split_iteration.brightness_update

    def brightness_tempered_wrongly(state, glm, settings, *draws):
        return update(state, glm, replace(settings, temperature=1.5), *draws)

    _counting_compiled_runs(monkeypatch, "iteration")
    monkeypatch.setattr(compiled_split_iteration, "brightness_update", brightness_tempered_wrongly)
    wrong, _, _ = _chain(logistic, bound, rows, theta_update="rw")
    assert np.max(np.abs(wrong - walk)) > 1e-3
    monkeypatch.setattr(compiled_split_iteration, "brightness_update", update)

    _counting_compiled_runs(monkeypatch, "kicks")
    run = split_kicks.run_split_kicks

    def tempered_wrongly(rows, x, momentum, kick, mean, inverse, step, n, temp, *rest):
        return run(rows, x, momentum, kick, mean, inverse, step, n, 1.5 * temp, *rest)

    monkeypatch.setattr(split_kicks, "run_split_kicks", tempered_wrongly)
    wrong, _, _ = _chain(logistic, bound, rows)
    assert np.max(np.abs(wrong - numpy_loop)) > 1e-3

    _counting_compiled_runs(monkeypatch, "iteration")
    trajectory = compiled_split_iteration.trajectory

    def trajectory_tempered_wrongly(*args):
        *args, settings = args
        return trajectory(*args, replace(settings, temperature=1.5))

    monkeypatch.setattr(compiled_split_iteration, "trajectory", trajectory_tempered_wrongly)
    wrong, _, _ = _chain(logistic, bound, rows)
    assert np.max(np.abs(wrong - numpy_loop)) > 1e-3


class _BinomialTarget(CountingTarget):
    """Binomial-logit rows ``y`` successes of ``trials`` on the fixture's design."""

    def __init__(self, x, y, trials):
        super().__init__(x, y, PRIOR_SD)
        self.y, self.trials = y, trials

    def loglik(self, q, idx):
        self.rows += len(idx)
        eta = self.x[idx] @ q
        n, y = self.trials[idx], self.y[idx]
        log_choose = special.gammaln(n + 1) - special.gammaln(y + 1) - special.gammaln(n - y + 1)
        return log_choose + y * eta - n * np.logaddexp(0.0, eta)

    def loglik_weighted_grad(self, q, idx, weights):
        eta = self.x[idx] @ q
        return self.x[idx].T @ (weights * (self.y[idx] - self.trials[idx] * special.expit(eta)))


def test_compiled_kicks_stop_at_a_bound_above_the_likelihood_or_touching_it(logistic, monkeypatch):
    calls = _counting_compiled_runs(monkeypatch, "kicks")
    x, y = logistic["x"], logistic["y"]
    bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    idx = np.arange(5)
    rows = _glm_rows(logistic, bound)(idx)
    compiled = split_kicks.compiled_rows(rows, None)
    dim = x.shape[1]

    def run(value):
        flat = replace(compiled, design=np.zeros((5, dim)), anchor=np.zeros(5), value=value)
        flat = replace(flat, slope=np.zeros(5), curvature=np.zeros(5), offset=np.zeros(5))
        args = (np.zeros(dim), np.ones(dim), np.zeros(dim), np.zeros(dim), np.eye(dim))
        return split_kicks.run_split_kicks(flat, *args, 0.1, 3, 1.0, True, 1e-8)[:2]

    log_half = math.log(0.5)  # log L of every row at eta = 0
    assert run(np.full(5, log_half - 0.1)) == (split_kicks.AT_END, 3)
    assert run(np.full(5, log_half)) == (split_kicks.REJECT, 1)  # touching: Ltilde = 0
    above = np.full(5, log_half - 0.1)
    above[3] = log_half + 0.5
    assert run(above) == (split_kicks.BOUND_VIOLATED, 1)

    # through the kernel: the numpy path's error, naming the row
    _raises_through_the_kernel(logistic, bound, calls, "kicks")


def _raises_through_the_kernel(logistic, bound, calls, mode):
    """A bound above the likelihood on the bright rows 7 and 11 raises the numpy path's
    error naming the row, through the compiled loops of ``mode``."""
    settings = FireflySettings(q_db=0.05, theta_update="hmc")
    rng = np.random.default_rng(0)
    state = new_firefly_state(rng, logistic["q_map"], logistic["target"], bound, settings)
    state.store.brighten(np.array([7, 11]))
    state.log_lt[[7, 11]] = -1.0
    raised = replace(bound, value=bound.value + 0.5)  # every bound above its likelihood
    with pytest.raises(InvalidBoundError, match="data row (7|11)"):
        for _ in range(20):
            split_hmc_theta_update(
                rng,
                state,
                logistic["target"],
                bound,
                settings,
                0.3,
                _prior_times_bounds(bound),
                rows=_glm_rows(logistic, raised),
            )
    assert calls[mode] > 0  # raised through the compiled loop


def test_compiled_iteration_raises_where_a_bound_is_above_the_likelihood(logistic, monkeypatch):
    """In the trajectory (bright rows) and in the brightness update (a dark row proposed),
    the compiled iteration raises the numpy path's error, naming the row."""
    calls = _counting_compiled_runs(monkeypatch, "iteration")
    x, y = logistic["x"], logistic["y"]
    bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    _raises_through_the_kernel(logistic, bound, calls, "iteration")

    settings = FireflySettings(q_db=1.0, theta_update="hmc")  # every dark row proposed
    rng = np.random.default_rng(0)
    state = new_firefly_state(rng, logistic["q_map"], logistic["target"], bound, settings)
    value = bound.value.copy()
    dark = int(state.store.dark_indices()[3])
    value[dark] += 0.5
    raised = replace(bound, value=value)
    with pytest.raises(InvalidBoundError, match=f"data row {dark}:"):
        rows = _glm_rows(logistic, raised)
        brightness_update(rng, state, logistic["target"], bound, settings, rows)
    with pytest.raises(InvalidBoundError, match=f"data row {dark}:"):  # the first draw of z
        new_firefly_state(rng, logistic["q_map"], logistic["target"], bound, settings, rows)


def test_compiled_first_draw_of_z_is_the_numpy_draw(logistic, monkeypatch):
    """The compiled first draw of every ``z_n`` gives the numpy draw's store (bright rows in
    the same order), ``log Ltilde`` and generator state; with another seed (negative
    control) the bright set differs."""
    _counting_compiled_runs(monkeypatch, "iteration")
    x, y = logistic["x"], logistic["y"]
    bound = untuned_jaakkola_jordan(x, 0.0, y)
    settings = FireflySettings(q_db=0.05)
    rows, target, q = _glm_rows(logistic, bound), logistic["target"], np.array([1.5, 1.0])
    draws = {}
    for name, enabled, seed in (("compiled", True, 4), ("numpy", False, 4), ("other", True, 5)):
        monkeypatch.setattr(compiled_split_iteration, "ENABLED", enabled)
        rng = np.random.default_rng(seed)
        store, log_lt = draw_brightness(rng, q, target, bound, settings, rows)
        store.check_consistency()
        draws[name] = (store, log_lt, rng.random())
    (compiled, lt_c, after_c), (numpy, lt_n, after_n) = draws["compiled"], draws["numpy"]
    assert 3 <= compiled.n_bright < N - 5, compiled.n_bright
    np.testing.assert_array_equal(compiled.arr, numpy.arr)
    # log Ltilde = g + log(-expm1(-g)) with the gap g = log L - log B, a difference of
    # nearly equal numbers where the bound is tight: an ulp of difference between the
    # compiled and the numpy log-densities becomes a relative error of order 1e-16 / g in
    # log Ltilde (1.5e-11 seen on one machine type, at the previous commit as well).
    np.testing.assert_allclose(lt_c, lt_n, rtol=1e-9)
    assert after_c == after_n  # the same number of draws taken from the generator
    assert draws["other"][0] != numpy


def test_compiled_kicks_only_where_they_apply(logistic, monkeypatch):
    x, y = logistic["x"], logistic["y"]
    bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    factory = _glm_rows(logistic, bound)
    idx = np.arange(4)
    assert split_kicks.compiled_rows(factory(idx), None) is None  # 2 < MIN_DIM coordinates
    monkeypatch.setattr(split_kicks, "MIN_DIM", 2)
    assert split_kicks.compiled_rows(factory(idx), None) is not None
    assert split_kicks.compiled_rows(factory(idx), region=object()) is None
    assert split_kicks.compiled_rows(factory(idx[:0]), None) is None
    assert split_kicks.compiled_rows(SeparateRows(None, bound, idx), None) is None
    assert split_kicks.compiled_rows(replace(factory(idx), family="poisson_log"), None) is None
    unbounded = replace(factory(idx), unbounded=np.array([False, True, False, False]))
    assert split_kicks.compiled_rows(unbounded, None) is None
    monkeypatch.setattr(split_kicks, "ENABLED", False)
    assert split_kicks.compiled_rows(factory(idx), None) is None


def test_compiled_iteration_only_where_it_applies(logistic, monkeypatch, compiled_loops_on):
    from pymc_minibatch_mh.data.row_design import FeatureBlock, IndexedColumns, RowDesign

    x, y = logistic["x"], logistic["y"]
    bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    factory = _glm_rows(logistic, bound)

    def built(rows=factory, bound=bound):
        return compiled_split_iteration.compiled_glm(rows, bound, N)

    glm = built()
    assert glm is not None and glm.family == 0 and built() is glm  # built once
    np.testing.assert_array_equal(glm.features, x)
    assert built(rows=None) is None
    assert built(bound=replace(bound, region=object())) is None
    assert built(bound=replace(bound, unbounded=np.zeros(N, bool))) is None

    def with_rows(**changes):
        return lambda idx: replace(factory(idx), **changes)

    assert built(rows=with_rows(family="poisson_log")) is None
    assert built(rows=with_rows(source=x.astype(complex))) is None
    # a design held as one product plus an intercept's column: compiled, same predictor
    slope = np.ascontiguousarray(x[:, 1:])
    product = RowDesign(N, 2, [FeatureBlock(slope, np.array([[0.0, 1.0]]))], np.array([1, 0]))
    glm = built(rows=with_rows(source=product))
    q = np.array([0.3, -0.7])
    eta = glm.weight * glm.features @ (glm.coef_map @ q) + glm.constant_row @ q + glm.offset
    np.testing.assert_allclose(eta, x @ q + bound.offset, rtol=1e-12)
    indexed = IndexedColumns(np.array([0, 1]), np.zeros(N, np.int32), 1.0)
    grouped = RowDesign(N, 2, [FeatureBlock(x[:, 1:], np.array([[0.0, 1.0]]))], indexed=[indexed])
    assert built(rows=with_rows(source=grouped)) is None  # group-indexed columns: numpy
    strided = RowDesign(N, 2, [FeatureBlock(x[:, 1:], np.array([[0.0, 1.0]]))], np.array([1, 0]))
    assert built(rows=with_rows(source=strided)) is None  # not in C order: no copy of the data
    assert built(rows=with_rows(source=np.asfortranarray(x))) is None
    monkeypatch.setattr(compiled_split_iteration, "ENABLED", False)
    assert built(rows=with_rows()) is None


def test_compiled_loops_only_once_numbas_cache_holds_them(tmp_path):
    """In a process whose numba cache is empty the loops are not cached (the numpy
    iteration runs) and their compilation is started in the background; once it has
    written the cache, a new process reads them from it and starts none. A family without
    compiled loops starts none."""
    import os
    import subprocess
    import sys
    import time

    code = """
import sys
import numpy as np
from pymc_minibatch_mh.bounds.glm_bright_rows import GLMBrightRows
from pymc_minibatch_mh.kernels import compiled_cache as c, compiled_split_iteration as s

n, x = 10, np.ones((10, 3))
def rows(idx, family=sys.argv[1]):
    z = np.zeros(len(idx))
    return GLMBrightRows(idx, family, x, z, z, {}, z, z - 1, z, z, None)
cached = c.cached(s.loop_types(0, x, np.eye(3), n))
glm = s.compiled_glm(rows, None, n)  # compiles in the background where not cached
print(cached, c._start.cache_info().currsize == 1, glm is not None)
"""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    env[compiled_cache.SWITCH] = "1"

    def run(family="bernoulli_logit"):
        out = subprocess.run(
            [sys.executable, "-c", code, family], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert run("poisson_log") == ["False", "False", "False"]  # no loops for that family
    assert run() == ["False", "True", "False"]  # cold: started; the numpy iteration runs
    deadline = time.monotonic() + 900  # at the lowest priority: slow on a loaded machine
    while any(tmp_path.rglob("compiling-*")) and time.monotonic() < deadline:
        time.sleep(0.5)  # the background compilation removes its marker when done
    loops = ("split_trajectory", "brightness_update", "draw_brightness", "bernoulli_residuals")
    assert all(any(tmp_path.rglob(f"*{loop}*.nbc")) for loop in loops)
    assert run() == ["True", "False", "True"]  # read from the cache; nothing started
    env[compiled_cache.SWITCH] = "0"
    assert run() == ["True", "False", "False"]  # switched off: not used


def test_no_compiled_loops_where_numba_hides_its_cache_index(monkeypatch):
    """A numba whose dispatchers do not expose the disk cache's index: the loops are
    neither used nor compiled in the background (the numpy paths run)."""
    from types import SimpleNamespace

    monkeypatch.setenv(compiled_cache.SWITCH, "1")
    assert compiled_cache._index_readable()
    hidden = SimpleNamespace(split_trajectory=SimpleNamespace())
    monkeypatch.setattr(split_kicks, "compiled_loops", lambda: hidden)
    started = []
    monkeypatch.setattr(compiled_cache, "compile_in_background", started.append)
    assert not compiled_cache.ready((0, "<f8", 2, 2, "<i4")) and started == []


def _distorted_factor(logistic) -> np.ndarray:
    """A Cholesky factor of the posterior's scales, correlated 0.8 and stretched 3:1."""
    sd = np.sqrt(_grid_moments(logistic, 1.0)[1]) * np.array([3.0, 1.0])
    return np.linalg.cholesky(np.array([[1.0, 0.8], [0.8, 1.0]]) * np.outer(sd, sd))


def _z_scores_with_mass(logistic, proposal):
    """Unsplit HMC on the MAP-tuned bound with ``proposal``'s mass: grid z-scores and the
    acceptance rate."""
    bound = map_tuned_jaakkola_jordan(logistic["x"], 0.0, logistic["y"], logistic["q_map"])
    settings = FireflySettings(q_db=0.05, theta_update="hmc")
    draws, _, accept = _run(
        logistic, bound, settings, scaling=0.4, iters=ITERS // 4, seed=8, proposal=proposal
    )
    z = _z_scores(draws, _grid_moments(logistic, 1.0))
    print("z-scores", z.round(2), "accept", accept)
    return z, accept


@pytest.mark.parametrize("sparse_precision", [False, True])
def test_hmc_with_a_correlated_mass_matches_grid_posterior(logistic, sparse_precision):
    """Unsplit HMC whose leapfrog runs with the inverse mass ``L L^T`` of a correlated,
    anisotropic factor (the step's Laplace-whitened moves), as a dense product or as a
    solve with the sparse precision: the chain matches the grid posterior."""
    chol = _distorted_factor(logistic)
    precision = sparse.csr_matrix(np.linalg.inv(chol @ chol.T)) if sparse_precision else None
    proposal = RandomWalkProposal(chol, precision)
    np.testing.assert_allclose(proposal.covariance, chol @ chol.T)
    vector = np.array([0.3, -1.2])
    np.testing.assert_allclose(proposal.covariance_times(vector), chol @ chol.T @ vector)
    again = pickle.loads(pickle.dumps(proposal))  # PyMC sends steps to other processes
    np.testing.assert_allclose(again.covariance_times(vector), chol @ chol.T @ vector)
    z, accept = _z_scores_with_mass(logistic, proposal)
    assert 0.3 < accept < 1.0
    assert np.all(np.abs(z) < Z_TOL), z.round(2)


def test_negative_control_hmc_momentum_drawn_with_the_wrong_factor_fails(logistic, monkeypatch):
    """The same chain with the momentum drawn as ``L^{-1} xi`` instead of ``L^{-T} xi`` (its
    law no longer the kinetic energy's): biased."""
    from pymc_minibatch_mh.kernels import firefly as kernel

    solve = kernel.solve_triangular
    monkeypatch.setattr(
        kernel,
        "solve_triangular",
        lambda a, b, trans="N", lower=False: solve(a, b, trans="N", lower=lower),
    )
    z, _ = _z_scores_with_mass(logistic, RandomWalkProposal(_distorted_factor(logistic)))
    assert np.any(np.abs(z) >= Z_TOL), z.round(2)


# ---------------------------------------------------------------- brightening rates per cell
def _four_cells(requested=(0.5, 0.05, 0.01, 0.2)):
    cell_of_row = np.random.default_rng(3).integers(0, len(requested), N)
    return CellRates.build(RowsByCell.build(cell_of_row, len(requested)), np.array(requested))


def test_cell_rates_are_powers_of_two_below_the_largest():
    rates = _four_cells()
    assert rates.largest == 0.5
    ratio = np.log2(rates.largest / rates.cell_rates)
    np.testing.assert_allclose(ratio, np.rint(ratio))
    requested = np.array([0.5, 0.05, 0.01, 0.2])
    assert np.all(np.abs(np.log2(rates.cell_rates / requested)) <= 0.5 + 1e-12)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        CellRates.build(RowsByCell.build(np.zeros(3, dtype=np.int32), 1), np.array([0.0]))
    with pytest.raises(ValueError, match="largest"):
        FireflySettings(q_db=0.1, cell_rates=rates)


def test_cell_rates_propose_each_row_with_its_cells_rate():
    rates = _four_cells()
    rng = np.random.default_rng(4)
    reps = 4000
    counts = np.zeros(N)
    for _ in range(reps):
        rows = rates.proposing(rng, geometric_positions)
        assert np.unique(rows).size == rows.size
        counts[rows] += 1
    expected = reps * rates.cell_rates[rates.rows.cell_of_row]
    sd = np.sqrt(expected * (1 - expected / reps))
    assert np.all(np.abs(counts - expected) < 5 * sd)
    assert abs(rates.expected_proposals() - expected.sum() / reps) < 1e-9
    # negative control: one rate for every row (their mean) does not describe the counts
    flat = np.full(N, expected.mean())
    assert np.any(np.abs(counts - flat) > 5 * np.sqrt(flat))


class _RatesIgnoredInTheTests(CellRates):
    """Proposes with each cell's rate but accepts as if every row had the largest one."""

    def log_rates(self, rows):
        return np.full(np.size(rows), math.log(self.largest))


def _z_frequencies(logistic, settings, reps=6000, burn=200, seed=5):
    target = logistic["target"]
    bound = untuned_jaakkola_jordan(logistic["x"], 0.0, logistic["y"])
    q = logistic["q_map"] + np.array([0.3, -0.2])
    rng = np.random.default_rng(seed)
    state = new_firefly_state(rng, q, target, bound, settings)
    state.store.darken(state.store.bright_indices().copy())
    freq = np.zeros(N)
    for r in range(reps + burn):
        brightness_update(rng, state, target, bound, settings)
        if r >= burn:
            freq += state.store.mask()
    state.store.check_consistency()
    log_l = target.loglik(q, np.arange(N))
    p = -np.expm1(bound.log_bound(q, np.arange(N)) - log_l)
    return freq / reps, p, reps


def test_brightness_update_with_cell_rates_keeps_the_conditional_of_z(logistic):
    rates = _four_cells()
    settings = FireflySettings(q_db=rates.largest, cell_rates=rates)
    freq, p, reps = _z_frequencies(logistic, settings)
    assert np.all(np.abs(freq - p) < 6 * np.sqrt(p * (1 - p) / reps) + 2e-3)


def test_negative_control_cell_rates_ignored_in_the_tests_bias_z(logistic):
    base = _four_cells()
    wrong = _RatesIgnoredInTheTests(
        base.rows,
        base.cell_rates,
        base.level_rates,
        base.level_cells,
        base.cell_starts,
        base.row_starts,
    )
    settings = FireflySettings(q_db=wrong.largest, cell_rates=wrong)
    freq, p, reps = _z_frequencies(logistic, settings)
    assert np.any(np.abs(freq - p) >= 6 * np.sqrt(p * (1 - p) / reps) + 2e-3)


def test_flymc_with_cell_rates_matches_grid_posterior(logistic):
    x, y = logistic["x"], logistic["y"]
    bound = map_tuned_jaakkola_jordan(x, 0.0, y, logistic["q_map"])
    rates = _four_cells((0.1, 0.002, 0.03, 0.01))
    settings = FireflySettings(q_db=rates.largest, cell_rates=rates)
    draws, _, acc = _run(logistic, bound, settings, scaling=0.35, iters=ITERS, seed=3)
    assert 0.1 < acc < 0.9
    z = _z_scores(draws, _grid_moments(logistic, 1.0))
    print("z-scores", z.round(2))
    assert np.all(np.abs(z) < Z_TOL), z.round(2)
