"""TunaMH() and FlyMC() with their default moves are exact in 24 dimensions (``slow``).

TunaMH's bound there has a metric per group of rows (row cells); a Poisson version of the
model checks the cells' trust region too.

A logistic model with 24 group log-odds and nothing shared: ``theta_g ~ Normal(0, 1.5)``,
``y_i ~ Bernoulli(logit_p=theta[g_i])`` with groups of 8 to 400 rows (N about 5,000), so
the small groups have skewed posteriors far from their Laplace fit. The posterior factorises
over the groups, so each coordinate's mean and sd come from a 1-D grid integral (closed form
up to quadrature), and both steps run with no arguments: TunaMH's moves on the surrogate
posterior (with these Normal priors a Gaussian, moved by its exact Hamiltonian flow)
corrected by its Poisson test on the Taylor residuals, FlyMC's HMC on ``theta`` given the
bright set with the collapsed Jaakkola–Jordan bound.

Check: every coordinate's mean within 4 Monte Carlo standard errors (ESS-based) and its sd
within 10 % of the grid's. TunaMH is checked with its default flow moves, and with HMC
moves on the surrogate only (its moves under other priors). Negative controls, which must
fail the same check: TunaMH with the flow's or the HMC moves' density ratio dropped (the
proposal treated as symmetric, so the chain targets about posterior x surrogate, too
narrow), and FlyMC at temperature 2 (a tempered posterior, too wide).
"""

from __future__ import annotations

import math

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import FlyMC, TunaMH
from pymc_minibatch_mh.bounds.row_cells import CellRegion
from pymc_minibatch_mh.kernels.gaussian_flow import GaussianFlow
from pymc_minibatch_mh.kernels.proposals import ProposalMixture
from pymc_minibatch_mh.kernels.surrogate_hmc import SurrogateHMC
from pymc_minibatch_mh.step_methods.proposal_mixture import ProposalMoves

from .agreement import posterior_of

GROUPS, PRIOR_SD = 24, 1.5
Z_TOL, SD_TOL = 4.0, 0.10
DRAWS, TUNE, SEED = 3000, 1000, 20261125
SAMPLE = {"progressbar": False, "compute_convergence_checks": False}


@pytest.fixture(scope="module")
def case():
    return _case("bernoulli")


@pytest.fixture(scope="module")
def poisson_case():
    return _case("poisson")


def _case(family: str):
    rng = np.random.default_rng(24)
    sizes = rng.integers(8, 400, size=GROUPS)
    group = np.repeat(np.arange(GROUPS), sizes)
    truth = rng.normal(0.0, 1.2, size=GROUPS)
    with pm.Model(coords={"group": np.arange(GROUPS)}) as model:
        theta = pm.Normal("theta", 0.0, PRIOR_SD, dims="group")
        if family == "bernoulli":
            y = (rng.random(group.size) < special.expit(truth[group])).astype(np.int8)
            pm.Bernoulli("y", logit_p=theta[group], observed=y)
        else:  # small counts: rates around exp(-1.5 .. 1.5)
            y = rng.poisson(np.exp(truth[group] - 0.5))
            pm.Poisson("y", mu=pm.math.exp(theta[group]), observed=y)
    # One 1-D grid integral per group, Normal(0, PRIOR_SD) prior: k successes of n, or a
    # count total k over n rows (log-likelihood k theta - n exp(theta) + const).
    successes = np.bincount(group, weights=y, minlength=GROUPS)
    grid = np.linspace(-12.0, 12.0, 24_001)
    mean, sd = np.empty(GROUPS), np.empty(GROUPS)
    for g in range(GROUPS):
        if family == "bernoulli":
            loglik = successes[g] * special.log_expit(grid) + (
                sizes[g] - successes[g]
            ) * special.log_expit(-grid)
        else:
            loglik = successes[g] * grid - sizes[g] * np.exp(grid)
        logp = loglik - 0.5 * (grid / PRIOR_SD) ** 2
        w = np.exp(logp - logp.max())
        w /= w.sum()
        assert w[0] + w[-1] < 1e-12  # the grid covers the posterior
        mean[g] = np.sum(w * grid)
        sd[g] = math.sqrt(np.sum(w * (grid - mean[g]) ** 2))
    return {"model": model, "mean": mean, "sd": sd, "n": group.size}


def _errors(idata, case) -> tuple[np.ndarray, np.ndarray]:
    """Per group: mean error in Monte Carlo standard errors, and sd / grid sd - 1."""
    draws = np.asarray(posterior_of(idata)["theta"])  # (chain, draw, group)
    ess = az.ess(az.convert_to_dataset(draws), method="mean")["x"].values
    flat = draws.reshape(-1, GROUPS)
    mcse = flat.std(0) / np.sqrt(ess)
    return (flat.mean(0) - case["mean"]) / mcse, flat.std(0) / case["sd"] - 1.0


def _bad(z, sd_err) -> bool:
    return bool(np.any(np.abs(z) >= Z_TOL) or np.any(np.abs(sd_err) >= SD_TOL))


def _sample(case, step):
    with case["model"]:
        return pm.sample(
            step=step, draws=DRAWS, tune=TUNE, chains=2, cores=1, random_seed=SEED, **SAMPLE
        )


def _report(label, idata, z, sd_err, n):
    rows = float(np.asarray(idata.sample_stats["batch_size"]).mean())
    print(
        f"\n{label}: max |mean z| {np.abs(z).max():.2f}, max |sd err| {np.abs(sd_err).max():.3f},"
        f" rows per draw {rows:.1f} ({rows / n:.2%} of N)"
    )


@pytest.mark.slow
def test_default_tuna_is_exact_in_24_dimensions(case):
    with case["model"]:
        step = TunaMH(progressbar=False)
    assert isinstance(step.proposal.random_walk, GaussianFlow)
    assert step.bound.cells is not None and step.bound.cells.n_cells == GROUPS
    idata = _sample(case, step)
    z, sd_err = _errors(idata, case)
    _report("TunaMH", idata, z, sd_err, case["n"])
    assert not _bad(z, sd_err), (z, sd_err)


def _flow_without_ratio(monkeypatch) -> None:
    """The default flow moves with their density ratio dropped (the negative control)."""
    original = GaussianFlow.__call__

    def symmetric(self, *args, **kwargs):
        return original(self, *args, **kwargs)[0], 0.0

    monkeypatch.setattr(GaussianFlow, "__call__", symmetric)


@pytest.mark.slow
def test_negative_control_tuna_without_the_flow_ratio_fails(case, monkeypatch):
    _flow_without_ratio(monkeypatch)
    with case["model"]:
        step = TunaMH(progressbar=False)
    idata = _sample(case, step)
    z, sd_err = _errors(idata, case)
    _report("TunaMH, flow without its ratio", idata, z, sd_err, case["n"])
    assert _bad(z, sd_err), (z, sd_err)


def _hmc_moves_only(monkeypatch, *, drop_ratio: bool) -> None:
    """Every move of the mixture an HMC move on the surrogate (the flow switched off, as
    for other priors); optionally with the proposal's density ratio dropped (the negative
    control)."""
    monkeypatch.setattr(ProposalMoves, "_surrogate_flow", lambda self: None)
    monkeypatch.setattr(ProposalMixture, "choose", lambda self, rng: False)
    if drop_ratio:
        original = SurrogateHMC.__call__

        def symmetric(self, *args, **kwargs):
            moved, _, inner = original(self, *args, **kwargs)
            return moved, 0.0, inner

        monkeypatch.setattr(SurrogateHMC, "__call__", symmetric)


@pytest.mark.slow
def test_tuna_with_surrogate_hmc_moves_only_is_exact_in_24_dimensions(case, monkeypatch):
    _hmc_moves_only(monkeypatch, drop_ratio=False)
    with case["model"]:
        step = TunaMH(progressbar=False)
    assert isinstance(step.proposal.random_walk, SurrogateHMC)
    idata = _sample(case, step)
    z, sd_err = _errors(idata, case)
    _report("TunaMH, HMC moves only", idata, z, sd_err, case["n"])
    assert not _bad(z, sd_err), (z, sd_err)


@pytest.mark.slow
def test_negative_control_tuna_without_the_proposal_ratio_fails(case, monkeypatch):
    _hmc_moves_only(monkeypatch, drop_ratio=True)
    with case["model"]:
        step = TunaMH(progressbar=False)
    idata = _sample(case, step)
    z, sd_err = _errors(idata, case)
    _report("TunaMH, HMC moves only, without the proposal ratio", idata, z, sd_err, case["n"])
    assert _bad(z, sd_err), (z, sd_err)


@pytest.mark.slow
def test_default_tuna_is_exact_on_cells_with_a_cell_trust_region(poisson_case):
    """Poisson: the remainder bound needs a trust region, here every cell's ellipsoid."""
    with poisson_case["model"]:
        step = TunaMH(progressbar=False)
    assert isinstance(step.bound.region, CellRegion) and step.bound.cells.n_cells == GROUPS
    idata = _sample(poisson_case, step)
    z, sd_err = _errors(idata, poisson_case)
    _report("TunaMH, Poisson", idata, z, sd_err, poisson_case["n"])
    assert not _bad(z, sd_err), (z, sd_err)


@pytest.mark.slow
def test_flymc_with_hmc_is_exact_in_24_dimensions(case):
    with case["model"]:
        step = FlyMC(progressbar=False)
    assert step.theta_update == "hmc"
    idata = _sample(case, step)
    z, sd_err = _errors(idata, case)
    _report("FlyMC", idata, z, sd_err, case["n"])
    assert not _bad(z, sd_err), (z, sd_err)


@pytest.mark.slow
def test_negative_control_tempered_flymc_fails(case):
    with case["model"]:
        step = FlyMC(temperature=2.0, progressbar=False)
    idata = _sample(case, step)
    z, sd_err = _errors(idata, case)
    _report("FlyMC at temperature 2", idata, z, sd_err, case["n"])
    assert _bad(z, sd_err), (z, sd_err)
