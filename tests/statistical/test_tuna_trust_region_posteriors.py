"""TunaMH() and FlyMC() are exact on models whose bounds need a trust region (``slow``).

Three two-parameter models with N = 300, each with a posterior integrated on a grid:

* Normal regression through the origin with a free scale (slope, log sigma);
* Poisson regression with a log link (intercept, slope);
* Student-t regression (nu = 4) through the origin with a free scale (slope, log sigma).

``TunaMH()`` with no arguments (control variates, trust region of the default radius)
and ``FlyMC()`` (MAP-tuned bounds on the same trust region; for the Normal, its exact
likelihood from sufficient statistics) must match the grid moments:
|mean error| < 4 Monte Carlo standard errors (ESS-based) and sds within 8 %. Negative
controls: with a trust region of radius 0.3 Laplace sds each chain samples the posterior
restricted to a tiny ellipsoid, and the same check must fail (FlyMC on the Normal: a
corrupted collapsed sum instead); TunaMH constants a hundred
times too small must stop sampling with a ``BoundViolation`` instead of biasing the chain.

On the Normal, every step with control variates sums the likelihood exactly from its
sufficient statistics (no datum read after construction): ``MinibatchBarker()`` and
``Austere()`` are checked against the grid there too, with the same corrupted-sum control.
"""

from __future__ import annotations

import dataclasses
import math

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import special, stats

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.bounds.lipschitz import LipschitzBound
from pymc_minibatch_mh.bounds.normal_exact import ExactNormalLikelihood
from pymc_minibatch_mh.kernels.tuna import BoundViolation

from .agreement import posterior_of

N = 300
PRIOR_SD, SIGMA_PRIOR_SD, NU = 3.0, 2.0, 4.0
Z_TOL, SD_TOL = 4.0, 0.08
DRAWS, TUNE, SEED = 10_000, 1000, 20261124
SAMPLE = {"progressbar": False, "compute_convergence_checks": False}
KINDS = ("normal", "poisson", "student_t")


def _data(kind: str):
    rng = np.random.default_rng({"normal": 1, "poisson": 2, "student_t": 3}[kind])
    x = rng.normal(size=N)
    if kind == "poisson":
        return x, rng.poisson(np.exp(0.4 + 0.7 * x)).astype(float)
    noise = rng.normal(size=N) if kind == "normal" else rng.standard_t(NU, size=N)
    return x, 0.8 * x + 0.6 * noise


def _model(kind: str, x, y) -> pm.Model:
    with pm.Model() as model:
        if kind == "poisson":
            a = pm.Normal("a", 0, PRIOR_SD)
            b = pm.Normal("b", 0, PRIOR_SD)
            pm.Poisson("y", mu=pm.math.exp(a + b * x), observed=y)
        else:
            b = pm.Normal("b", 0, PRIOR_SD)
            sigma = pm.HalfNormal("sigma", SIGMA_PRIOR_SD)
            if kind == "normal":
                pm.Normal("y", b * x, sigma, observed=y)
            else:
                pm.StudentT("y", nu=NU, mu=b * x, sigma=sigma, observed=y)
    return model


def _log_posterior(kind: str, x, y, first: np.ndarray, second: float) -> np.ndarray:
    """Unnormalised log density on the sampler's (unconstrained) scale, for a vector of
    first coordinates and one second coordinate: (a, b) for Poisson, (b, log sigma) else."""
    if kind == "poisson":
        eta = first[:, None] + second * x
        loglik = (y * eta - np.exp(eta) - special.gammaln(y + 1)).sum(-1)
        return (
            loglik + stats.norm.logpdf(first, 0, PRIOR_SD) + stats.norm.logpdf(second, 0, PRIOR_SD)
        )
    sigma = math.exp(second)
    z = (y - first[:, None] * x) / sigma
    if kind == "normal":
        loglik = stats.norm.logpdf(z).sum(-1)
    else:
        loglik = stats.t.logpdf(z, df=NU).sum(-1)
    loglik -= N * second
    # HalfNormal prior on sigma, plus the log-Jacobian log sigma of the log transform.
    log_prior_sigma = stats.halfnorm.logpdf(sigma, scale=SIGMA_PRIOR_SD) + second
    return loglik + stats.norm.logpdf(first, 0, PRIOR_SD) + log_prior_sigma


@pytest.fixture(scope="module", params=KINDS)
def grid_case(request):
    return _grid_case(request.param)


def _grid_case(kind: str) -> dict:
    """Model and grid moments (the named variables: a, b or b, sigma)."""
    x, y = _data(kind)
    model = _model(kind, x, y)
    with model:
        start = pm.find_MAP(progressbar=False)
    if kind == "poisson":
        centre = np.array([float(start["a"]), float(start["b"])])
    else:
        centre = np.array([float(start["b"]), math.log(float(start["sigma"]))])
    # Laplace-ish widths from the curvature of the grid's own log density at the centre.
    width = []
    for k in range(2):
        h = 1e-3
        step = np.eye(2)[k] * h
        values = [
            _log_posterior(kind, x, y, np.array([p[0]]), p[1])[0]
            for p in (centre - step, centre, centre + step)
        ]
        curvature = (values[0] - 2 * values[1] + values[2]) / h**2
        width.append(1.0 / math.sqrt(-curvature))
    g1 = centre[0] + width[0] * np.linspace(-9, 9, 721)
    g2 = centre[1] + width[1] * np.linspace(-9, 9, 721)
    logp = np.stack([_log_posterior(kind, x, y, g1, value) for value in g2], axis=1)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    assert w[0].sum() + w[-1].sum() + w[:, 0].sum() + w[:, -1].sum() < 1e-10  # grid wide enough
    first, second = np.meshgrid(g1, g2, indexing="ij")
    if kind == "poisson":
        values = {"a": first, "b": second}
    else:
        values = {"b": first, "sigma": np.exp(second)}
    mean = {k: float(np.sum(w * v)) for k, v in values.items()}
    sd = {k: float(np.sqrt(np.sum(w * (v - mean[k]) ** 2))) for k, v in values.items()}
    return {"kind": kind, "model": model, "mean": mean, "sd": sd}


def _sample(case, step, cores: int = 2, **extra):
    with case["model"]:
        return pm.sample(
            step=step,
            draws=DRAWS,
            tune=TUNE,
            chains=2,
            cores=cores,
            random_seed=SEED,
            **SAMPLE,
            **extra,
        )


def _errors(idata, case) -> dict[str, tuple[float, float]]:
    """Per variable: (mean error in Monte Carlo s.e., sd / grid sd - 1)."""
    post = posterior_of(idata)
    out = {}
    for name in case["mean"]:
        draws = np.asarray(post[name])
        mcse = draws.std() / math.sqrt(float(az.ess(draws, method="mean")))
        out[name] = (
            (draws.mean() - case["mean"][name]) / mcse,
            draws.std() / case["sd"][name] - 1.0,
        )
    return out


def _corrupted(exact: ExactNormalLikelihood) -> ExactNormalLikelihood:
    """The Normal's exact sum with its Gram matrix scaled by 0.7: the chain then targets
    a posterior about 20 % too wide in the slope."""
    return dataclasses.replace(exact, gram=0.7 * exact.gram)


def _bad(errors) -> dict:
    return {k: v for k, v in errors.items() if abs(v[0]) >= Z_TOL or abs(v[1]) >= SD_TOL}


@pytest.mark.slow
def test_default_tuna_matches_the_grid_posterior(grid_case):
    """Poisson and Student-t: remainder bounds on a trust region; Normal: its likelihood
    summed exactly from sufficient statistics (c = 0, no region, no datum read)."""
    with grid_case["model"]:
        step = TunaMH(progressbar=False)
    if grid_case["kind"] == "normal":
        assert step.target.exact_sum and step.bound.C == 0 and step.bound.region is None
    else:
        assert step.bound.region is not None
    idata = _sample(grid_case, step)
    errors = _errors(idata, grid_case)
    stats_ = idata.sample_stats
    print(
        f"\n{grid_case['kind']}: (mean z, sd rel err) {errors}; rows per draw "
        f"{float(stats_['batch_size'].mean()):.2f}; region exits "
        f"{int(stats_['region_exits'].sum())}"
    )
    assert not _bad(errors), errors


@pytest.mark.slow
def test_default_flymc_matches_the_grid_posterior(grid_case):
    """Poisson and Student-t: bounds on a trust region; Normal: its exact likelihood from
    sufficient statistics (no region, no bright data)."""
    with grid_case["model"]:
        step = FlyMC(progressbar=False)
    if grid_case["kind"] == "normal":
        assert isinstance(step.bound, ExactNormalLikelihood) and step.bound.region is None
    else:
        assert step.bound.region is not None
    errors = _errors(_sample(grid_case, step), grid_case)
    print(f"\nFlyMC {grid_case['kind']}: (mean z, sd rel err) {errors}")
    assert not _bad(errors), errors


@pytest.mark.slow
def test_negative_control_flymc_with_a_tiny_trust_region_fails_the_grid_check(grid_case):
    """A trust region of 0.3 Laplace sds must fail the check; the Normal has no region, so
    there its collapsed sum is corrupted instead (the Gram matrix scaled by 0.7: the
    chain then targets a posterior about 20 % too wide in the slope)."""
    with grid_case["model"]:
        if grid_case["kind"] == "normal":
            step = FlyMC(progressbar=False)
            step.bound = _corrupted(step.bound)
        else:
            step = FlyMC(trust_radius=0.3, progressbar=False)
    errors = _errors(_sample(grid_case, step), grid_case)
    print(f"\nFlyMC {grid_case['kind']} negative control: {errors}")
    assert _bad(errors), errors


@pytest.mark.slow
def test_negative_control_a_tiny_trust_region_fails_the_grid_check(grid_case):
    """The Normal has no region: its exact sum is corrupted instead (Gram matrix x 0.7)."""
    with grid_case["model"]:
        if grid_case["kind"] == "normal":
            step = TunaMH(progressbar=False)
            step._exact_sum = _corrupted(step._exact_sum)
        else:
            step = TunaMH(trust_radius=0.3, progressbar=False)
    idata = _sample(grid_case, step)
    errors = _errors(idata, grid_case)
    print(f"\n{grid_case['kind']} with trust_radius=0.3: {errors}")
    assert _bad(errors), errors


@pytest.mark.slow
def test_negative_control_constants_too_small_stop_sampling():
    x, y = _data("student_t")
    model = _model("student_t", x, y)
    with model:
        step = TunaMH(progressbar=False)
    bound = step.bound
    invalid = LipschitzBound(0.01 * bound.c, bound.metric, region=bound.region)
    step._untuned_bound = invalid
    step._set_bound(invalid)
    step.recentre = False  # keep the invalid constants (recentring would rebuild them)
    with pytest.raises(BoundViolation, match="bound violated"):
        _sample({"model": model}, step, cores=1)


@pytest.fixture(scope="module")
def normal_case():
    return _grid_case("normal")


@pytest.mark.slow
@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere])
def test_approximate_steps_are_exact_on_the_normal_from_its_sufficient_statistics(
    normal_case, step_class
):
    """MinibatchBarker and Austere use the same exact sum: their tests become the exact MH
    test, they read no datum after construction and match the grid; the corrupted sum
    (negative control) must fail."""
    with normal_case["model"]:
        step = step_class(progressbar=False)
        broken = step_class(progressbar=False)
    assert step.target.exact_sum
    idata = _sample(normal_case, step, discard_tuned_samples=False)
    for stats_ in (idata.warmup_sample_stats, idata.sample_stats):
        assert int(stats_["batch_size"].sum()) == 0
    errors = _errors(idata, normal_case)
    print(f"\n{step_class.__name__} normal: {errors}")
    assert not _bad(errors), errors
    broken._exact_sum = _corrupted(broken._exact_sum)
    errors = _errors(_sample(normal_case, broken), normal_case)
    print(f"{step_class.__name__} normal, corrupted sum: {errors}")
    assert _bad(errors), errors
