"""The exactly-summed Taylor proxy and the independence proposal (pure numpy)."""

import numpy as np
import pytest
from scipy import stats

from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget, TaylorProxy
from pymc_minibatch_mh.kernels.proposals import IndependenceProposal
from pymc_minibatch_mh.kernels.target import ArrayTarget


def _proxy(rng, d=3):
    a = rng.normal(size=(d, d))
    return TaylorProxy(
        reference=rng.normal(size=d),
        value=1.5,
        gradient=rng.normal(size=d),
        hessian=-(a @ a.T + np.eye(d)),
    )


def test_proxy_difference_equals_difference_of_totals(rng):
    proxy = _proxy(rng)
    for _ in range(5):
        q_new, q_old = rng.normal(size=3), rng.normal(size=3)
        assert proxy.diff(q_new, q_old) == pytest.approx(
            proxy.total(q_new) - proxy.total(q_old), rel=1e-12, abs=1e-12
        )
    assert proxy.total(proxy.reference) == proxy.value


def test_control_variate_target_reads_residuals_and_passes_the_rest_through(rng):
    values = rng.normal(size=40)
    base = ArrayTarget(
        n_data=40, loglik=lambda q, idx: q[0] * values[idx], logprior=lambda q: -q @ q
    )
    calls = []

    def residual_diff(q_new, q_old, q_ref, idx):
        calls.append(q_ref)
        return np.full(idx.size, 0.25)

    proxy = _proxy(rng, d=1)
    target = ControlVariateTarget(base, proxy, residual_diff)
    q_new, q_old, idx = np.array([2.0]), np.array([1.0]), np.arange(5)
    np.testing.assert_array_equal(target.loglik_diff(q_new, q_old, idx), np.full(5, 0.25))
    assert calls[0] is proxy.reference
    assert target.diff_offset(q_new, q_old) == proxy.diff(q_new, q_old)
    np.testing.assert_array_equal(target.loglik(q_new, idx), base.loglik(q_new, idx))
    np.testing.assert_array_equal(target.loglik_full(q_new), base.loglik_full(q_new))
    assert target.logprior(q_new) == -4.0 and target.n_data == 40
    assert base.diff_offset(q_new, q_old) == 0.0


@pytest.mark.parametrize("df", [5.0, np.inf])
def test_independence_proposal_draws_and_density(rng, df):
    cov = np.array([[2.0, 0.6], [0.6, 0.5]])
    proposal = IndependenceProposal(
        centre=np.array([1.0, -1.0]), chol=np.linalg.cholesky(cov), df=df
    )
    draws = np.array([proposal(rng, np.zeros(2), 1.5)[0] for _ in range(20_000)])
    white = np.linalg.solve(1.5 * proposal.chol, (draws - proposal.centre).T).T
    reference = stats.t(df) if np.isfinite(df) else stats.norm()
    for k in range(2):
        assert stats.kstest(white[:, k], reference.cdf).pvalue > 1e-3
    # Log ratio: log q(current) - log q(proposed), against scipy's density.
    current = np.array([0.3, 0.2])
    new, log_ratio = proposal(rng, current, 1.5)
    if np.isfinite(df):
        dist = stats.multivariate_t(proposal.centre, 1.5**2 * cov, df=df)
    else:
        dist = stats.multivariate_normal(proposal.centre, 1.5**2 * cov)
    assert log_ratio == pytest.approx(dist.logpdf(current) - dist.logpdf(new), rel=1e-10)
