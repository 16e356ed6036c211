"""The Austerity sequential t-test and its without-replacement row sampler (no PyMC)."""

import copy
import itertools
import math
import pickle

import numpy as np
import pytest
from scipy import special, stats

from pymc_minibatch_mh.kernels.austere import (
    AustereSettings,
    austere_kernel,
    critical_t,
    student_t_tail,
    t_statistic,
)
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget, TaylorProxy
from pymc_minibatch_mh.kernels.subsample import UsedRows
from pymc_minibatch_mh.kernels.target import ArrayTarget, ChainState


# ---------------------------------------------------------------- a small logistic regression
def _logistic_target(n_data=57, seed=0):
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n_data), rng.normal(size=n_data)])
    y = rng.random(n_data) < special.expit(x @ np.array([-0.3, 1.2]))
    sign = np.where(y, 1.0, -1.0)

    def loglik(q, idx):
        return special.log_expit(sign[idx] * (x[idx] @ q))

    def logprior(q):
        return float(-0.5 * np.sum(q**2) / 4.0)

    return ArrayTarget(n_data, loglik, logprior)


def _with_control_variates(base, seed=1):
    """``base`` seen through arbitrary per-datum quadratic proxies (their sum is exact)."""
    rng = np.random.default_rng(seed)
    n, d = base.n_data, 2
    centre = rng.normal(size=d)
    grads = rng.normal(size=(n, d))
    hessians = rng.normal(size=(n, d, d))
    hessians = hessians + hessians.transpose(0, 2, 1)

    def proxy_diff(q_new, q_old, idx):
        a_new, a_old = q_new - centre, q_old - centre
        quad = np.einsum("i,nij,j->n", a_new, hessians[idx], a_new) - np.einsum(
            "i,nij,j->n", a_old, hessians[idx], a_old
        )
        return grads[idx] @ (q_new - q_old) + 0.5 * quad

    def residual_diff(q_new, q_old, q_ref, idx):
        return base.loglik_diff(q_new, q_old, idx) - proxy_diff(q_new, q_old, idx)

    proxy = TaylorProxy(centre, 0.0, grads.sum(axis=0), hessians.sum(axis=0))
    return ControlVariateTarget(base, proxy, residual_diff)


def _compare_with_exact_mh(rng, settings, n_trials=500, target=None):
    """Kernel decisions vs exact MH on the 57-row logistic target, u replayed.

    Returns ``(agreements, exact acceptances, infos)``.
    """
    target = _logistic_target() if target is None else target
    rows = UsedRows(target.n_data)
    n_agree = n_accept = 0
    infos = []
    for _ in range(n_trials):
        position = rng.normal(size=2)
        proposal = position + rng.normal(scale=0.3, size=2)
        log_q_ratio = float(rng.normal(scale=0.3))
        state = ChainState(position, target.logprior(position))
        # The kernel's first use of the generator is u = 1 - rng.random(): replay it.
        log_u = math.log(1.0 - copy.deepcopy(rng).random())
        log_lik_ratio = np.sum(target.loglik_full(proposal) - target.loglik_full(position))
        log_ratio = (
            float(log_lik_ratio) / settings.temperature
            + target.logprior(proposal)
            - state.logprior
            + log_q_ratio
        )
        exact = log_u < log_ratio
        new_state, info = austere_kernel(rng, state, proposal, log_q_ratio, target, settings, rows)
        assert info.accepted == (new_state.position is proposal)
        n_agree += info.accepted == exact
        n_accept += exact
        infos.append(info)
    return n_agree, n_accept, infos


@pytest.mark.parametrize(
    ("batch_size", "epsilon", "temperature"),
    [(10, 0.0, 1.0), (10, 0.0, 2.5), (2, 0.0, 1.0), (500, 0.3, 1.0)],  # 500 > N: one batch of N
)
def test_full_data_decision_is_exact_mh(rng, batch_size, epsilon, temperature):
    """epsilon = 0 (or a first batch of all N rows) reproduces exact MH for every (q, q', u)."""
    n_agree, n_accept, infos = _compare_with_exact_mh(
        rng, AustereSettings(batch_size, epsilon, temperature)
    )
    assert n_agree == len(infos)
    assert 0.2 < n_accept / len(infos) < 0.8  # both decisions were exercised
    assert all(info.batch_size == 57 and info.n_lik_evals == 2 * 57 for info in infos)
    assert all(math.isinf(info.t_stat) for info in infos)  # s = 0 at n = N


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_full_data_decision_with_control_variates_is_exact_mh(rng, temperature):
    """The proxy's exact part moves the threshold; at n = N the decision is exact MH."""
    target = _with_control_variates(_logistic_target())
    n_agree, _, infos = _compare_with_exact_mh(
        rng, AustereSettings(10, 0.0, temperature), target=target
    )
    assert n_agree == len(infos)
    # Negative control: dropping the exact part changes some decisions.
    broken = ControlVariateTarget(target.base, target.proxy, target.residual_diff)
    object.__setattr__(broken, "diff_offset", lambda q_new, q_old: 0.0)
    n_agree_broken, _, infos = _compare_with_exact_mh(
        rng, AustereSettings(10, 0.0, temperature), target=broken
    )
    assert n_agree_broken < len(infos)


def test_negative_control_early_decisions_are_not_exact(rng):
    """The same comparison catches a test that may stop before N (epsilon = 0.3)."""
    n_agree, _, infos = _compare_with_exact_mh(rng, AustereSettings(10, 0.3, 1.0))
    assert any(info.batch_size < 57 for info in infos)
    assert n_agree < len(infos)


# ---------------------------------------------------------------- the t statistic
def test_t_statistic_matches_direct_formula(rng):
    population = rng.gamma(2.0, size=3000)
    sample = rng.choice(population, size=700, replace=False)
    n, big_n, mu0 = sample.size, population.size, 1.9
    t, s = t_statistic(sample.mean(), np.mean(sample**2), n, big_n, mu0)
    s_direct = sample.std(ddof=1) / math.sqrt(n) * math.sqrt(1 - (n - 1) / (big_n - 1))
    assert s == pytest.approx(s_direct, rel=1e-12)
    assert t == pytest.approx((sample.mean() - mu0) / s_direct, rel=1e-12)
    # Shifting values and threshold together leaves t unchanged (used by the kernel).
    shifted = sample - 1000.0
    t2, _ = t_statistic(shifted.mean(), np.mean(shifted**2), n, big_n, mu0 - 1000.0)
    assert t2 == pytest.approx(t, rel=1e-6)


def test_standard_error_is_zero_at_full_data(rng):
    values = rng.normal(size=400)
    t, s = t_statistic(values.mean(), np.mean(values**2), 400, 400, values.mean() - 0.01)
    assert s == 0.0 and t == math.inf
    t, s = t_statistic(values.mean(), np.mean(values**2), 400, 400, values.mean() + 0.01)
    assert s == 0.0 and t == -math.inf
    _, s = t_statistic(values[:399].mean(), np.mean(values[:399] ** 2), 399, 400, 0.0)
    assert s > 0.0
    with pytest.raises(ValueError, match="n <= n_data"):
        t_statistic(0.0, 1.0, 401, 400, 0.0)


def test_critical_value_agrees_with_tail_probability():
    for df, eps in [(99, 0.05), (499, 0.01), (4999, 1e-4)]:
        c = critical_t(df, eps)
        assert student_t_tail(c * (1 + 1e-9), df) < eps < student_t_tail(c * (1 - 1e-9), df)
    assert critical_t(499, 0.0) == math.inf


def _null_t_values(rng, population, n, n_draws, n_data_for_fpc=None):
    """t statistics of without-replacement samples of size n, at mu0 = population mean."""
    rows = UsedRows(population.size)
    mu0 = population.mean()
    out = np.empty(n_draws)
    for i in range(n_draws):
        sample = population[rows.draw(rng, n)]
        rows.release()
        fpc_n = n_data_for_fpc or population.size
        out[i], _ = t_statistic(sample.mean(), np.mean(sample**2), n, fpc_n, mu0)
    return out


@pytest.mark.parametrize("n_data", [20_000, 1_000])
def test_null_statistic_follows_student_t(rng, n_data):
    """Under mu = mu0 the corrected statistic is Student-t with n - 1 df (n = 500)."""
    population = rng.uniform(-1.0, 3.0, size=n_data)
    t = _null_t_values(rng, population, 500, 4000)
    assert stats.kstest(t, stats.t(df=499).cdf).pvalue > 1e-3
    # Negative control: the same draws do not look like a t with scale 1.5.
    assert stats.kstest(t, stats.t(df=499, scale=1.5).cdf).pvalue < 1e-6


def test_negative_control_without_finite_population_correction(rng):
    """Half the population sampled: dropping the correction makes t too narrow to pass."""
    population = rng.uniform(-1.0, 3.0, size=1_000)
    t = _null_t_values(rng, population, 500, 4000, n_data_for_fpc=10**12)
    assert stats.kstest(t, stats.t(df=499).cdf).pvalue < 1e-6


# ---------------------------------------------------------------- kernel behaviour
def _gaussian_target(y, prior_sd=10.0):
    return ArrayTarget(
        y.size,
        lambda q, idx: -0.5 * (y[idx] - q[0]) ** 2,
        lambda q: float(-0.5 * (q[0] / prior_sd) ** 2),
    )


def _algorithm_1(rng, values, mu0, batch_size, epsilon, correct=True):
    """Algorithm 1 of the paper written out directly: a permutation read in batches."""
    n_data = values.size
    order = rng.permutation(n_data)
    n = 0
    while True:
        n = min(n + batch_size, n_data)
        sample = values[order[:n]]
        if n == n_data:
            return sample.mean() > mu0, n
        fpc = 1 - (n - 1) / (n_data - 1) if correct else 1.0
        s = sample.std(ddof=1) / math.sqrt(n) * math.sqrt(fpc)
        if special.stdtr(n - 1, -abs(sample.mean() - mu0) / s) < epsilon:
            return sample.mean() > mu0, n


def test_kernel_matches_a_direct_implementation_of_algorithm_1(rng):
    """Same acceptance rate and data use as a plain re-implementation, for a fixed (q, q')."""
    n_data, batch_size, epsilon, n_runs = 2_000, 100, 0.05, 1_000
    y = rng.normal(size=n_data)
    target = _gaussian_target(y, prior_sd=1e6)
    start = np.array([y.mean()])
    proposal = start + 0.03  # exact log ratio about -0.9: many borderline tests
    state = ChainState(start, target.logprior(start))
    settings = AustereSettings(batch_size, epsilon, 1.0)
    rows = UsedRows(n_data)
    ours = [
        austere_kernel(rng, state, proposal, 0.0, target, settings, rows)[1] for _ in range(n_runs)
    ]
    values = target.loglik_diff(proposal, start, np.arange(n_data))
    prior_part = target.logprior(proposal) - state.logprior

    def direct(correct):
        out = []
        for _ in range(n_runs):
            mu0 = (math.log(1.0 - rng.random()) - prior_part) / n_data
            out.append(_algorithm_1(rng, values, mu0, batch_size, epsilon, correct))
        return np.array(out, dtype=float)

    reference = direct(correct=True)
    acc_ours = np.mean([info.accepted for info in ours])
    used_ours = np.array([info.batch_size for info in ours], dtype=float)
    se_acc = math.sqrt(2 * 0.25 / n_runs)
    assert abs(acc_ours - reference[:, 0].mean()) < 4 * se_acc
    se_used = math.sqrt((used_ours.var() + reference[:, 1].var()) / n_runs)
    assert abs(used_ours.mean() - reference[:, 1].mean()) < 4 * se_used
    assert 0.1 < used_ours.mean() / n_data < 0.9  # the test really stops early, and not always
    # Negative control: without the finite-population correction far more data is read.
    uncorrected = direct(correct=False)
    se_control = math.sqrt((used_ours.var() + uncorrected[:, 1].var()) / n_runs)
    assert uncorrected[:, 1].mean() - used_ours.mean() > 4 * se_control


def test_clear_decisions_stop_at_the_first_batch(rng):
    y = rng.normal(0.0, 1.0, size=10_000)
    target = _gaussian_target(y)
    settings = AustereSettings(200, 0.01, 1.0)
    here = ChainState(np.array([0.0]), target.logprior(np.array([0.0])))
    far = ChainState(np.array([1.0]), target.logprior(np.array([1.0])))
    # A move towards the data mean from far away is accepted at once, and back rejected.
    state, info = austere_kernel(rng, far, here.position, 0.0, target, settings)
    assert info.accepted and state.position is here.position and info.batch_size == 200
    assert info.t_stat > critical_t(199, 0.01)
    state, info = austere_kernel(rng, here, far.position, 0.0, target, settings)
    assert not info.accepted and state is here and info.batch_size == 200
    assert np.isnan(info.accept)


def test_temperature_divides_the_log_likelihood_ratio(rng):
    """A move with log ratio -40 is rejected at K = 1 and accepted w.p. ~exp(-0.1) at K = 400."""
    y = rng.normal(0.0, 1.0, size=2_000)
    target = _gaussian_target(y, prior_sd=1e6)
    start = np.array([y.mean()])
    state = ChainState(start, target.logprior(start))
    proposal = start + 0.2
    cold = [austere_kernel(rng, state, proposal, 0.0, target, AustereSettings(100, 0.01, 1.0))]
    hot = [
        austere_kernel(rng, state, proposal, 0.0, target, AustereSettings(100, 0.01, 400.0))
        for _ in range(200)
    ]
    assert not cold[0][1].accepted
    rate = np.mean([info.accepted for _, info in hot])
    assert abs(rate - math.exp(-0.5 * 0.2**2 * y.size / 400)) < 0.12


def test_prior_wall_rejects_without_reading_data(rng):
    def loglik(q, idx):
        raise AssertionError("no data should be read")

    target = ArrayTarget(100, loglik, lambda q: 0.0 if q[0] > 0 else -math.inf)
    state = ChainState(np.array([1.0]), 0.0)
    new, info = austere_kernel(
        rng, state, np.array([-1.0]), 0.0, target, AustereSettings(10, 0.01, 1.0)
    )
    assert new is state and not info.accepted and info.batch_size == 0 and info.n_lik_evals == 0
    assert math.isnan(info.t_stat)


@pytest.mark.parametrize(
    ("at_proposal", "at_current", "accepted"),
    [(np.nan, 0.0, False), (-np.inf, 0.0, False), (0.0, -np.inf, True)],
)
def test_non_finite_rows(rng, at_proposal, at_current, accepted):
    def loglik(q, idx):  # row 7 takes the given values at q = 1 (proposal) and q = 0
        special_value = at_proposal if q[0] == 1.0 else at_current
        return np.where(idx == 7, special_value, q[0])

    target = ArrayTarget(20, loglik, lambda q: 0.0)
    state = ChainState(np.array([0.0]), 0.0)
    settings = AustereSettings(20, 0.01, 1.0)  # one batch: row 7 is always read
    new, info = austere_kernel(rng, state, np.array([1.0]), 0.0, target, settings)
    assert info.accepted == accepted and info.batch_size == 20 and math.isnan(info.t_stat)


def test_equal_log_ratios_before_full_data(rng):
    """A batch with zero spread: epsilon = 0 keeps reading, epsilon > 0 stops (documented)."""
    n_data = 1_000
    target = ArrayTarget(
        n_data, lambda q, idx: q[0] * np.where(idx == 0, 5.0, 1.0), lambda q: 0.0
    )  # all ratios equal 1e-3 except row 0
    state = ChainState(np.array([0.0]), 0.0)
    proposal = np.array([1e-3])
    _, exact = austere_kernel(rng, state, proposal, 0.0, target, AustereSettings(50, 0.0, 1.0))
    assert exact.batch_size == n_data
    early = [
        austere_kernel(rng, state, proposal, 0.0, target, AustereSettings(50, 0.01, 1.0))[1]
        for _ in range(20)
    ]
    assert min(info.batch_size for info in early) == 50


def test_scratch_rows_are_released_and_checked(rng):
    y = rng.normal(size=3_000)
    target = _gaussian_target(y)
    rows = UsedRows(target.n_data)
    state = ChainState(np.array([0.0]), target.logprior(np.array([0.0])))
    for _ in range(20):
        state, _ = austere_kernel(
            rng, state, state.position + 0.02 * rng.normal(size=1), 0.0, target,
            AustereSettings(100, 0.05, 1.0), rows,
        )  # fmt: skip
        assert rows.count == 0
    assert np.sort(rows.draw(rng, 3_000)).tolist() == list(range(3_000))  # nothing left marked
    with pytest.raises(ValueError, match="released UsedRows"):
        austere_kernel(
            rng, state, state.position, 0.0, target, AustereSettings(100, 0.05, 1.0), rows
        )
    with pytest.raises(ValueError, match="released UsedRows"):
        austere_kernel(
            rng, state, state.position, 0.0, target, AustereSettings(100, 0.05, 1.0), UsedRows(10)
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 1, "epsilon": 0.01, "temperature": 1.0}, "batch_size"),
        ({"batch_size": 2.5, "epsilon": 0.01, "temperature": 1.0}, "batch_size"),
        ({"batch_size": 10, "epsilon": 0.5, "temperature": 1.0}, "epsilon"),
        ({"batch_size": 10, "epsilon": -0.1, "temperature": 1.0}, "epsilon"),
        ({"batch_size": 10, "epsilon": 0.01, "temperature": 0.0}, "temperature"),
    ],
)
def test_settings_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AustereSettings(**kwargs)


# ---------------------------------------------------------------- UsedRows
def test_used_rows_are_disjoint_and_exhaustive(rng):
    rows = UsedRows(1_037)
    batches = [rows.draw(rng, 100) for _ in range(11)]
    assert [b.size for b in batches] == [100] * 10 + [37]
    # Each batch comes in increasing order (both the early and the listed draws).
    assert all(np.all(np.diff(b) > 0) for b in batches)
    everything = np.concatenate(batches)
    assert np.array_equal(np.sort(everything), np.arange(1_037))
    assert rows.count == 1_037 and rows.remaining == 0
    assert rows.draw(rng, 5).size == 0


def test_used_rows_first_half_never_lists_all_rows(rng):
    """While fewer than half the rows are drawn, batches cost O(batch) (no list of N rows)."""
    rows = UsedRows(1_000_000)
    for _ in range(4):
        rows.draw(rng, 100_000)
    assert rows._pool is None
    rows.draw(rng, 200_000)  # past half: the undrawn rows are listed once
    assert rows._pool is not None
    rows.release()
    assert rows._pool is None and rows.count == 0


def test_used_rows_batches_are_uniform(rng):
    """N = 6 in batches of 2: all 90 ordered partitions into pairs are equally likely."""
    rows = UsedRows(6)
    labels = {}
    for a, b, c in itertools.permutations(itertools.combinations(range(6), 2), 3):
        if len(set(a + b + c)) == 6:
            labels[(a, b, c)] = len(labels)
    assert len(labels) == 90
    counts = np.zeros(90)
    for _ in range(18_000):
        key = tuple(tuple(sorted(rows.draw(rng, 2).tolist())) for _ in range(3))
        rows.release()
        counts[labels[key]] += 1
    assert stats.chisquare(counts).pvalue > 1e-3


def test_used_rows_inclusion_is_uniform_on_a_larger_population(rng):
    rows = UsedRows(40)
    counts = np.zeros(40)
    for _ in range(4_000):
        rows.draw(rng, 3)
        counts[rows.draw(rng, 5)] += 1  # second batch, given the first
        rows.release()
    assert stats.chisquare(counts).pvalue > 1e-3
    # Negative control: the same counts are far from a skewed expectation.
    skewed = np.linspace(0.5, 1.5, 40)
    assert stats.chisquare(counts, skewed / skewed.sum() * counts.sum()).pvalue < 1e-6


def test_release_clears_the_mask_and_pickling_gives_a_fresh_one(rng):
    rows = UsedRows(50)
    first = rows.draw(rng, 30)
    rows.release()
    assert rows.count == 0 and rows.remaining == 50
    again = np.concatenate([rows.draw(rng, 30), rows.draw(rng, 30)])
    assert again.size == 50 and np.intersect1d(first, again).size == 30
    clone = pickle.loads(pickle.dumps(rows))
    assert clone.count == 0 and clone.draw(rng, 50).size == 50
    with pytest.raises(ValueError, match="n_data"):
        UsedRows(0)
