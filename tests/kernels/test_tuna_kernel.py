"""The TunaMH kernel alone (no PyMC): batch law, thinning, fallback, exactness."""

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy.special import log_expit

from pymc_minibatch_mh.bounds.lipschitz import EuclideanMetric, LipschitzBound
from pymc_minibatch_mh.kernels import tuna
from pymc_minibatch_mh.kernels.target import ArrayTarget, ChainState
from pymc_minibatch_mh.kernels.tuna import (
    BoundViolation,
    ChiAdaptation,
    TunaSettings,
    poisson_log_ratio,
    tuna_kernel,
)
from pymc_minibatch_mh.kernels.weighted_index import CumulativeTable


# ------------------------------------------------------------------ a small logistic target
def _logistic(n=60, seed=7):
    """1-D logistic regression without intercept, N(0, 1) prior (not Lipschitz)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = rng.random(n) < 1 / (1 + np.exp(-x))
    s = np.where(y, 1.0, -1.0) * x

    def loglik(q, idx):
        return log_expit(s[idx] * q[0])

    def logprior(q):
        return -0.5 * float(q[0]) ** 2

    target = ArrayTarget(n, loglik, logprior)
    bound = LipschitzBound.euclidean(np.abs(x))  # |d/d eta log sigmoid| <= 1
    return target, bound, CumulativeTable.from_weights(bound.c)


def _flip_keep_sign(monkeypatch):
    """Negative control: keep points whose energy *falls* more often (wrong sign)."""
    original = tuna._keep_probability

    def flipped(d, c, m, chi, total):
        return original(-d, c, m, chi, total)

    monkeypatch.setattr(tuna, "_keep_probability", flipped)


def _batch_means_z(indicators: np.ndarray, expected: np.ndarray, n_batches: int = 50):
    """z-scores of long-run frequencies, with batch-means standard errors."""
    freq = indicators.mean(axis=0)
    per_batch = np.array([b.mean(axis=0) for b in np.array_split(indicators, n_batches)])
    se = per_batch.std(axis=0, ddof=1) / math.sqrt(n_batches)
    return (freq - expected) / se


# ------------------------------------------------------------------ unit checks
def test_expected_batch_size_is_chi_c2m2_plus_cm(rng):
    target, bound, table = _logistic()
    q, q_new = np.array([0.3]), np.array([0.45])
    for chi, temperature in [(0.05, 1.0), (2.0, 1.0), (0.05, 4.0)]:
        settings = TunaSettings(chi=chi, temperature=temperature)
        cm = bound.C / temperature * 0.15
        rate = chi * cm**2 + cm
        draws = [
            poisson_log_ratio(rng, q, q_new, target, bound, settings, table, 0.15)[1]
            for _ in range(20_000)
        ]
        assert abs(np.mean(draws) - rate) < 4 * math.sqrt(rate / len(draws))


def test_kept_count_has_the_thinned_poisson_mean(rng):
    """E|I| = sum_i lambda_i^+ = chi C^2 M^2 + (C M + sum_i d_i) / 2: fixes the sign."""
    target, bound, table = _logistic()
    q, q_new = np.array([0.2]), np.array([0.5])
    m = 0.3
    settings = TunaSettings(chi=0.01)
    d_all = -target.loglik_full(q_new) + target.loglik_full(q)
    expected = settings.chi * (bound.C * m) ** 2 + 0.5 * (bound.C * m + d_all.sum())
    kept = [
        poisson_log_ratio(rng, q, q_new, target, bound, settings, table, m)[2]
        for _ in range(20_000)
    ]
    assert abs(np.mean(kept) - expected) < 4 * math.sqrt(expected / len(kept))


def test_ratio_estimate_is_unbiased(rng):
    """E[exp(log r_data)] = exp(-sum_i d_i), the exact likelihood ratio (Poisson view)."""
    target, bound, table = _logistic()
    q, q_new = np.array([0.2]), np.array([0.3])
    settings = TunaSettings(chi=0.5)
    exact = math.exp(float(np.sum(target.loglik_full(q_new) - target.loglik_full(q))))
    r = np.array(
        [
            math.exp(poisson_log_ratio(rng, q, q_new, target, bound, settings, table, 0.1)[0])
            for _ in range(40_000)
        ]
    )
    assert abs(r.mean() - exact) < 4 * r.std() / math.sqrt(r.size)


def test_keep_probability_and_artanh_argument_ranges(rng):
    c = rng.uniform(1e-3, 10, size=20_000)
    m = rng.uniform(1e-6, 5, size=c.size)
    total = c + rng.uniform(0, 1e4, size=c.size)
    chi = 10.0 ** rng.uniform(-8, 3, size=c.size)
    u = rng.uniform(-1, 1, size=c.size)
    u[:10], u[10:20] = -1.0, 1.0  # the extremes |d| = c M
    d = u * c * m
    keep = tuna._keep_probability(d, c, m, chi, total)
    x = tuna._artanh_argument(d, c, m, chi, total)
    assert np.all((keep >= 0) & (keep <= 1))
    assert np.all(np.abs(x) < 1)
    assert np.all(np.isfinite(np.arctanh(x)))
    # Points whose energy rises (d > 0) are kept more often.
    assert np.all(np.diff(tuna._keep_probability(np.array([-1.0, 0.0, 1.0]), 1, 1, 0.1, 5)) > 0)


def test_full_data_fallback_when_expected_batch_exceeds_n(rng):
    target, bound, table = _logistic(n=60)
    q, q_new = np.array([0.1]), np.array([0.9])
    settings = TunaSettings(chi=10.0)  # E[B] = 10 (C M)^2 + C M >> 60
    state = ChainState(q, target.logprior(q))
    log_r = float(np.sum(target.loglik_full(q_new) - target.loglik_full(q)))
    log_r += target.logprior(q_new) - target.logprior(q)
    decisions = []
    for _ in range(4000):
        _, info = tuna_kernel(rng, state, q_new, 0.0, target, bound, settings, table)
        assert (info.batch_size, info.n_lik_evals, info.poisson_draws, info.n_kept) == (
            60,
            120,
            0,
            0,
        )
        assert info.accept == pytest.approx(min(1.0, math.exp(log_r)))
        decisions.append(info.accepted)
    p = min(1.0, math.exp(log_r))
    assert abs(np.mean(decisions) - p) < 4 * math.sqrt(p * (1 - p) / 4000) + 1e-9


def test_prior_rejection_reads_no_data(rng):
    target, bound, table = _logistic()
    walled = ArrayTarget(target.n_data, target.loglik, lambda q: 0.0 if q[0] < 1 else -np.inf)
    state = ChainState(np.array([0.5]), 0.0)
    new, info = tuna_kernel(
        rng, state, np.array([1.5]), 0.0, walled, bound, TunaSettings(0.1), table
    )
    assert new is state and not info.accepted
    assert (info.batch_size, info.n_lik_evals, info.poisson_draws) == (0, 0, 0)


def _counting(target):
    """The same target, recording how many rows each likelihood call reads."""
    reads = []

    def loglik(q, idx):
        reads.append(len(idx))
        return target.loglik(q, idx)

    return ArrayTarget(target.n_data, loglik, target.logprior), reads


def test_box_rejects_proposals_outside_it_without_reading_data(rng):
    """The prior (N(0, 1)) is positive everywhere; the bound's box [-0.5, 0.5] is not."""
    target, bound, table = _logistic()
    counted, reads = _counting(target)
    boxed = LipschitzBound(bound.c, EuclideanMetric(), "boxed", box=([-0.5], [0.5]))
    state = ChainState(np.array([0.2]), target.logprior(np.array([0.2])))
    for outside in (0.7, -0.50001, np.nan):
        new, info = tuna_kernel(
            rng, state, np.array([outside]), 0.0, counted, boxed, TunaSettings(10.0), table
        )
        assert new is state and not info.accepted and info.accept == 0.0
        assert (info.batch_size, info.n_lik_evals, info.poisson_draws, info.n_kept) == (0,) * 4
    assert reads == []
    # Without the box the same move is a minibatch (here full-data) test that reads data.
    tuna_kernel(rng, state, np.array([0.7]), 0.0, counted, bound, TunaSettings(10.0), table)
    assert sum(reads) > 0


def test_a_chain_never_leaves_the_box(rng):
    target, bound, table = _logistic()
    lo, hi = -0.3, 0.5
    boxed = LipschitzBound(bound.c, EuclideanMetric(), "boxed", box=([lo], [hi]))
    state = ChainState(np.array([0.0]), target.logprior(np.array([0.0])))
    positions, rejected_outside = [], 0
    for _ in range(3000):
        prop = state.position + 0.4 * rng.standard_normal(1)
        new, info = tuna_kernel(rng, state, prop, 0.0, target, boxed, TunaSettings(0.1), table)
        if not lo <= prop[0] <= hi:
            rejected_outside += 1
            assert new is state and info.batch_size == 0
        state = new
        positions.append(state.position[0])
    positions = np.asarray(positions)
    assert np.all((positions >= lo) & (positions <= hi))
    assert rejected_outside > 300
    assert positions.min() < lo + 0.05 and positions.max() > hi - 0.05  # it explores the box


def test_a_chain_outside_the_box_moves_in_without_reading_data(rng):
    """Outside the box counts as zero density (like outside the prior support): the first
    proposal inside is accepted without data, proposals outside are rejected."""
    target, bound, table = _logistic()
    counted, reads = _counting(target)
    boxed = LipschitzBound(bound.c, EuclideanMetric(), "boxed", box=([-0.5], [0.5]))
    state = ChainState(np.array([0.8]), target.logprior(np.array([0.8])))
    settings = TunaSettings(0.1)
    new, info = tuna_kernel(rng, state, np.array([0.9]), 0.0, counted, boxed, settings, table)
    assert new is state and not info.accepted and info.batch_size == 0
    new, info = tuna_kernel(rng, state, np.array([0.4]), 0.0, counted, boxed, settings, table)
    assert info.accepted and info.batch_size == 0 and new.position[0] == 0.4
    assert new.logprior == target.logprior(np.array([0.4]))
    assert reads == []


def test_stats_are_consistent(rng):
    target, bound, table = _logistic()
    state = ChainState(np.array([0.4]), target.logprior(np.array([0.4])))
    for _ in range(500):
        prop = state.position + 0.2 * rng.standard_normal(1)
        state, info = tuna_kernel(rng, state, prop, 0.0, target, bound, TunaSettings(0.1), table)
        if info.poisson_draws == 0 and info.batch_size == target.n_data:
            continue  # a full-data fallback step (big proposal)
        assert info.batch_size == info.poisson_draws
        assert info.n_lik_evals == 2 * info.poisson_draws
        assert 0 <= info.n_kept <= info.poisson_draws
        assert 0.0 <= info.accept <= 1.0 and info.chi == 0.1


def test_exactly_known_offset_enters_the_ratio(rng):
    class WithOffset(ArrayTarget):
        def diff_offset(self, q_new, q_old):
            return float(q_new[0] - q_old[0])  # "likelihood" exp(q), no per-datum terms

    target = WithOffset(5, lambda q, idx: np.zeros(len(idx)), lambda q: 0.0)
    bound = LipschitzBound.euclidean(np.full(5, 1e-3))
    table = CumulativeTable.from_weights(bound.c)
    state = ChainState(np.array([0.0]), 0.0)
    _, info = tuna_kernel(rng, state, np.array([-0.5]), 0.0, target, bound, TunaSettings(1), table)
    assert info.accept == pytest.approx(math.exp(-0.5))


def test_temperature_divides_the_energies(rng):
    """At temperature 2 the rate uses C/2 and the ratio estimates exp(-sum d / 2)."""
    target, bound, table = _logistic()
    q, q_new = np.array([0.2]), np.array([0.35])
    settings = TunaSettings(chi=0.5, temperature=2.0)
    exact = math.exp(0.5 * float(np.sum(target.loglik_full(q_new) - target.loglik_full(q))))
    out = [
        poisson_log_ratio(rng, q, q_new, target, bound, settings, table, 0.15)
        for _ in range(40_000)
    ]
    r = np.exp([o[0] for o in out])
    assert abs(r.mean() - exact) < 4 * r.std() / math.sqrt(r.size)
    rate = 0.5 * (bound.C / 2 * 0.15) ** 2 + bound.C / 2 * 0.15
    assert abs(np.mean([o[1] for o in out]) - rate) < 4 * math.sqrt(rate / len(out))


def test_violated_bound_raises_and_names_the_datum(rng):
    target, bound, _ = _logistic()
    too_small = LipschitzBound.euclidean(0.1 * bound.c, description="a test bound")
    table = CumulativeTable.from_weights(too_small.c)
    state = ChainState(np.array([0.0]), 0.0)
    with pytest.raises(BoundViolation, match=r"datum \d+.*c_i \* M.*a test bound.*`c=`"):
        for _ in range(100):
            prop = np.array([3.0])
            tuna_kernel(rng, state, prop, 0.0, target, too_small, TunaSettings(1e-3), table)


def test_nan_loglik_is_a_violation(rng):
    target = ArrayTarget(1000, lambda q, idx: np.full(len(idx), np.nan), lambda q: 0.0)
    bound = LipschitzBound.euclidean(np.ones(1000))
    state = ChainState(np.array([0.0]), 0.0)
    with pytest.raises(BoundViolation):
        tuna_kernel(
            rng,
            state,
            np.array([0.05]),
            0.0,
            target,
            bound,
            TunaSettings(1e-3),
            CumulativeTable.from_weights(bound.c),
        )


@pytest.mark.parametrize(("chi", "temperature"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0)])
def test_bad_settings(chi, temperature):
    with pytest.raises(ValueError, match="chi|temperature"):
        TunaSettings(chi=chi, temperature=temperature)


def test_chi_adaptation_uses_a_quantile_of_recent_c2m2():
    adapt = ChiAdaptation(window=4, quantile=0.75, target=1.0)
    assert adapt.chi is None
    for v in [100.0, 1.0, 4.0, 16.0]:
        adapt = adapt.add(v)
    assert adapt.chi == pytest.approx(1 / 16.0)  # 3rd smallest of {100, 1, 4, 16}
    adapt = adapt.add(1.0)  # overwrites 100 in the ring buffer
    assert adapt.chi == pytest.approx(1 / 4.0)
    assert ChiAdaptation().add(0.0).chi is None
    assert ChiAdaptation(target=2.0).add(4.0).chi == pytest.approx(0.5)


# ------------------------------------------------------------------ exactness
def _run_six_states(rng, n_iter, exact_rows=None, forget_exact=False):
    """Random walk on {0..5}; 40 data with known Lipschitz constants a_i * omega.
    ``exact_rows``: those rows get ``c_i = 0`` and are evaluated at every step (with
    ``forget_exact``, the negative control, they get ``c_i = 0`` and nothing else)."""
    n, omega = 40, 0.8
    a = rng.uniform(0.05, 0.3, n)
    phi = rng.uniform(0, 2 * np.pi, n)

    def loglik(q, idx):
        return a[idx] * np.cos(omega * q[0] + phi[idx])

    target = ArrayTarget(n, loglik, lambda q: 0.0 if 0 <= q[0] <= 5 else -np.inf)
    energies = np.array([loglik(np.array([s]), np.arange(n)).sum() for s in range(6)])
    exact = np.exp(energies - energies.max())
    exact /= exact.sum()
    c = a * omega
    if exact_rows is None:
        bound = LipschitzBound.euclidean(c)
    else:
        c = np.where(np.isin(np.arange(n), exact_rows), 0.0, c)
        rows = None if forget_exact else exact_rows
        bound = LipschitzBound(c, EuclideanMetric(), exact_rows=rows)
    table = CumulativeTable.from_weights(bound.c)
    settings = TunaSettings(chi=0.01)
    state = ChainState(np.array([0.0]), 0.0)
    visits = np.empty(n_iter, dtype=int)
    for k in range(n_iter):
        prop = state.position + (1.0 if rng.random() < 0.5 else -1.0)
        state, _ = tuna_kernel(rng, state, prop, 0.0, target, bound, settings, table)
        visits[k] = int(state.position[0])
    return np.eye(6)[visits], exact


SIX_STATE_ITERS = 40_000
Z_MAX = 4.0  # max |z| over 6 (resp. 5) frequencies; P(false alarm) ~ 1e-3 under exactness


def test_six_state_walk_matches_the_target():
    indicators, exact = _run_six_states(np.random.default_rng(5), SIX_STATE_ITERS)
    z = _batch_means_z(indicators, exact)
    tv = 0.5 * np.abs(indicators.mean(0) - exact).sum()
    assert np.max(np.abs(z)) < Z_MAX, (z, tv)


def test_six_state_negative_control_flipped_sign_fails(monkeypatch):
    _flip_keep_sign(monkeypatch)
    indicators, exact = _run_six_states(np.random.default_rng(5), SIX_STATE_ITERS)
    z = _batch_means_z(indicators, exact)
    assert np.max(np.abs(z)) > Z_MAX, z


def test_rows_evaluated_exactly_keep_the_walk_exact():
    """Half the rows without a constant, evaluated at every step: still the target; the
    same rows with c = 0 and not evaluated (negative control) are not. (With a quarter of
    the rows the control's bias is real but its z over seeds 0-5 ranged 3.2-23: too
    weak a control at this chain length.)"""
    exact = np.arange(0, 40, 2)
    indicators, target = _run_six_states(np.random.default_rng(5), SIX_STATE_ITERS, exact)
    z = _batch_means_z(indicators, target)
    assert np.max(np.abs(z)) < Z_MAX, z
    indicators, target = _run_six_states(
        np.random.default_rng(5), SIX_STATE_ITERS, exact, forget_exact=True
    )
    z = _batch_means_z(indicators, target)
    assert np.max(np.abs(z)) > Z_MAX, z


def test_exact_rows_are_counted_and_checked():
    target, _, _ = _logistic()
    c = np.ones(target.n_data)
    c[:3] = 0.0
    bound = LipschitzBound(c, EuclideanMetric(), exact_rows=[0, 1, 2])
    table = CumulativeTable.from_weights(bound.c)
    state = ChainState(np.array([0.2]), target.logprior(np.array([0.2])))
    _, info = tuna_kernel(
        np.random.default_rng(0),
        state,
        np.array([0.25]),
        0.0,
        target,
        bound,
        TunaSettings(chi=0.01),
        table,
    )
    assert info.batch_size == info.poisson_draws + 3
    with pytest.raises(ValueError, match="exact_rows"):
        LipschitzBound(np.ones(5), EuclideanMetric(), exact_rows=[1])


def _run_logistic_1d(rng, n_iter):
    target, bound, table = _logistic()
    grid = np.linspace(-4, 6, 20_001)
    log_post = np.array([target.loglik_full(np.array([g])).sum() for g in grid]) - 0.5 * grid**2
    w = np.exp(log_post - log_post.max())
    cdf = np.cumsum(w) / w.sum()
    levels = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    cuts = np.interp(levels, cdf, grid)
    settings = TunaSettings(chi=0.01)
    start = np.array([float(np.interp(0.5, cdf, grid))])
    state = ChainState(start, target.logprior(start))
    draws = np.empty(n_iter)
    for k in range(n_iter):
        prop = state.position + 0.3 * rng.standard_normal(1)
        state, _ = tuna_kernel(rng, state, prop, 0.0, target, bound, settings, table)
        draws[k] = state.position[0]
    return (draws[:, None] <= cuts[None, :]).astype(float), levels


LOGISTIC_ITERS = 30_000


def test_continuous_logistic_posterior_matches_grid():
    """Gaussian prior (no Lipschitz bound) enters exactly; CDF at 5 quantiles."""
    indicators, levels = _run_logistic_1d(np.random.default_rng(11), LOGISTIC_ITERS)
    z = _batch_means_z(indicators, levels)
    assert np.max(np.abs(z)) < Z_MAX, z


def test_continuous_negative_control_flipped_sign_fails(monkeypatch):
    _flip_keep_sign(monkeypatch)
    indicators, levels = _run_logistic_1d(np.random.default_rng(11), LOGISTIC_ITERS)
    z = _batch_means_z(indicators, levels)
    assert np.max(np.abs(z)) > Z_MAX, z


def test_tuna_kernel_bound_and_index_table_modules_do_not_import_pymc():
    code = (
        "import sys\n"
        "import pymc_minibatch_mh.kernels.tuna, pymc_minibatch_mh.kernels.weighted_index\n"
        "import pymc_minibatch_mh.data.row_design\n"
        "import pymc_minibatch_mh.bounds.lipschitz\n"
        "print(','.join(m for m in ('pymc', 'pytensor') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_large_batches_reach_the_target_in_blocks_of_bounded_size(monkeypatch):
    """A Poisson batch larger than BLOCK_ROWS is evaluated block by block: every
    call sees at most that many rows, and the values are those of one call."""
    from pymc_minibatch_mh.data import blocks as data_blocks
    from pymc_minibatch_mh.kernels.target import per_row_in_blocks

    monkeypatch.setattr(data_blocks, "BLOCK_ROWS", 100)
    values = np.random.default_rng(2).normal(size=1000)
    sizes = []

    def per_row(scale, idx):
        sizes.append(len(idx))
        return scale * values[idx]

    idx = np.random.default_rng(3).integers(0, 1000, size=1050)
    np.testing.assert_array_equal(per_row_in_blocks(per_row, 2.0, idx=idx), 2.0 * values[idx])
    assert sizes == [100] * 10 + [50]
    sizes.clear()
    assert per_row_in_blocks(per_row, 1.0, idx=idx[:80]).shape == (80,) and sizes == [80]
