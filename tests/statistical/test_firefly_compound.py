"""FlyMC in a compound step whose other sampler moves a variable of FlyMC's prior.

Model: ``y_n ~ Bernoulli(logit_p = x_n @ beta)``, N = 3000, two standard-normal
covariates without effect, ``beta ~ Normal(0, tau)``, ``tau ~ HalfNormal(0.015)``.
The data alone give each coefficient an sd of about 0.037, so the hierarchical prior
sets beta's posterior and tau's posterior reaches deep into the funnel. FlyMC
samples ``beta``, ``pm.Metropolis`` samples ``tau``, so each FlyMC draw starts after
``tau`` may have moved: the prior (and, for MALA, its gradient) cached in the FlyMC
state must be recomputed (``FireflyState.refresh_prior``, called by ``FlyMC.astep``).

Reference: NUTS on the non-centred form ``beta = tau * z`` of the same model (the
same posterior; NUTS on the centred form diverges in the funnel). Compared: beta,
tau and log tau (the funnel coordinate), means within 0.15 reference sd and sds
within 15%, with the ESS power check of :func:`failures_against`. Measured on the
3.11 stack (4 x 30000 draws): errors at most 0.04 sd in the means and 5% in the sds,
for random-walk and MALA updates.

Negative control: with the prior cache left stale (the code before the fix,
emulated by a monkeypatched ``refresh_prior``) MALA fails the same check: measured
log tau mean off by 1.4 sd and its sd by 104%, tau mean by 0.57 sd, beta sds 31% and
23% too small (chains drawn into tau -> 0). With the kernel and step of the code
before the fix themselves, both parametrisations of the main test fail (MALA: log tau
mean off by 1.3 sd; random walk: tau and log tau means off by 0.18 and 0.23 sd, log
tau sd by 16%, and too few effective draws for the power check).

With the emulated stale cache, the random-walk update is biased more weakly (tau
mean 0.13 sd, beta[0] sd 12%: within the tolerances): its stale error is the change of
``log p(tau | beta)`` made by tau's own reversible Metropolis moves, of mean zero at
equilibrium, whereas the stale MALA gradient biases every proposal. The deterministic
tests in ``tests/step_methods/test_firefly_step.py`` check that the cached prior
follows tau.
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import optimize, special

from pymc_minibatch_mh.kernels.firefly import FireflyState
from pymc_minibatch_mh.step_methods.firefly import FlyMC

from .agreement import failures_against, moments_of

N, TAU_SD = 3000, 0.015
NAMES = ["beta", "tau", "log_tau"]
MEAN_TOL, SD_TOL = 0.15, 0.15
QUIET = {"progressbar": False, "compute_convergence_checks": False}
DRAWS, TUNE, CHAINS = 30_000, 2000, 4


def _data():
    rng = np.random.default_rng(31)
    x = rng.normal(size=(N, 2))
    y = (rng.random(N) < 0.5).astype(int)  # the covariates have no effect
    return x, y


def _likelihood_mode(x, y):
    """Maximum-likelihood beta: where FlyMC's bounds are tuned and its chains start.

    The joint MAP does not exist (the density grows without bound as tau -> 0 with
    beta = 0), and a chain started at exactly beta = 0 can be drawn into tau -> 0.
    """
    t = 2 * y - 1
    fit = optimize.minimize(lambda b: -special.log_expit(t * (x @ b)).sum(), np.zeros(2))
    assert fit.success
    return fit.x


@pytest.fixture(scope="module")
def hierarchical():
    x, y = _data()
    with pm.Model() as model:
        tau = pm.HalfNormal("tau", TAU_SD)
        pm.Deterministic("log_tau", pt.log(tau))
        beta = pm.Normal("beta", 0, tau, shape=2)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
    with pm.Model():  # the same posterior, non-centred for NUTS
        tau = pm.HalfNormal("tau", TAU_SD)
        pm.Deterministic("log_tau", pt.log(tau))
        z = pm.Normal("z", 0, 1, shape=2)
        beta = pm.Deterministic("beta", tau * z)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
        nuts = pm.sample(
            draws=2000, tune=1000, chains=2, cores=2, target_accept=0.9, random_seed=1, **QUIET
        )
    assert int(np.asarray(nuts.sample_stats["diverging"]).sum()) == 0
    return model, _likelihood_mode(x, y), *moments_of(nuts, NAMES)


def _sample_compound(model, beta_mode, theta_update, *, cores=2):
    with model:
        flymc = FlyMC(
            [model["beta"]],
            theta_update=theta_update,
            map_point={"beta": beta_mode},
            proposal="rw",  # pinned, as the numbers in the module docstring
            steps_per_draw=1,
            progressbar=False,
        )
        return pm.sample(
            step=[flymc, pm.Metropolis([model["tau"]])],
            draws=DRAWS,
            tune=TUNE,
            chains=CHAINS,
            cores=cores,
            random_seed=5,
            **QUIET,
        )


@pytest.mark.slow
@pytest.mark.parametrize("theta_update", ["rw", "mala"])
def test_flymc_with_metropolis_on_the_prior_scale_matches_nuts(hierarchical, theta_update):
    model, beta_mode, ref_mean, ref_sd = hierarchical
    idata = _sample_compound(model, beta_mode, theta_update)
    failures = failures_against(idata, NAMES, ref_mean, ref_sd, mean_tol=MEAN_TOL, sd_tol=SD_TOL)
    assert not failures, failures


def _stale_refresh(self, target):
    """The FlyMC state before the fix: the cached log prior is never recomputed when
    another step moves tau (only an accepted move refreshes it), and the MALA prior
    gradient is recomputed only together with the data part, when ``z`` changed."""
    if self.data_grad is None:
        self.prior_grad = None


@pytest.mark.slow
def test_negative_control_stale_prior_fails(hierarchical, monkeypatch):
    """MALA with the prior cached at an old tau misses the posterior (see module doc)."""
    model, beta_mode, ref_mean, ref_sd = hierarchical
    monkeypatch.setattr(FireflyState, "refresh_prior", _stale_refresh)
    idata = _sample_compound(model, beta_mode, "mala", cores=1)  # keeps the monkeypatch
    failures = failures_against(
        idata, NAMES, ref_mean, ref_sd, mean_tol=MEAN_TOL, sd_tol=SD_TOL, check_power=False
    )
    assert failures
