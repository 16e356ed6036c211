"""The exact steps on a Bernoulli likelihood with a probit or a complementary log-log link
reproduce a grid-integrated posterior (``slow``).

``TunaMH()`` and ``FlyMC()`` with no arguments must match the posterior moments computed by
quadrature on a fine grid within 4 Monte Carlo standard errors (means and sds). Negative
controls: FlyMC with a bound above the likelihood (the default bound's values raised by
0.1 on the rows with y = 1, on its trust region if it has one, bound checks off) and TunaMH
on a tempered target must fail the same check.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import FlyMC, TunaMH
from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound
from pymc_minibatch_mh.families import bernoulli_cloglog, bernoulli_probit

from .agreement import grid_moments, grid_z_failures
from .test_firefly_posteriors import Z_TOL

N_ROWS, PRIOR_SD = 400, 3.0
#: Per link: the family module, the link as a model writes it, the true p, the grid step.
LINKS = {
    "probit": (bernoulli_probit, pm.math.invprobit, special.ndtr, 0.002),
    "cloglog": (
        bernoulli_cloglog,
        lambda eta: 1 - pm.math.exp(-pm.math.exp(eta)),
        lambda eta: -np.expm1(-np.exp(eta)),
        0.004,
    ),
}


@pytest.fixture(scope="module", params=list(LINKS))
def link_grid(request):
    family, link, true_p, h = LINKS[request.param]
    rng = np.random.default_rng(2026)
    x = rng.normal(size=N_ROWS)
    y = (rng.random(N_ROWS) < true_p(-0.3 + 0.8 * x)).astype(int)
    with pm.Model() as model:
        a = pm.Normal("a", 0, PRIOR_SD)
        b = pm.Normal("b", 0, PRIOR_SD)
        pm.Bernoulli("y", p=link(a + b * x), observed=y)
        map_point = pm.find_MAP(progressbar=False)
    ga = map_point["a"] + h * np.arange(-300, 301)
    gb = map_point["b"] + h * np.arange(-300, 301)
    qa, qb = np.meshgrid(ga, gb, indexing="ij")
    logp = np.empty(qa.shape)
    for i, a_value in enumerate(ga):
        logp[i] = family.loglik(a_value + gb[:, None] * x, y).sum(-1)
    logp -= 0.5 * (qa**2 + qb**2) / PRIOR_SD**2
    mean, sd = grid_moments({"a": ga, "b": gb}, logp)
    return {"model": model, "y": y, "mean": mean, "sd": sd}


def _z_failures(case, step) -> dict:
    return grid_z_failures(case, step, draws=12_000, seed=77, z_tol=Z_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_exact_steps_match_the_grid_posterior(link_grid, step_class):
    with link_grid["model"]:
        step = step_class()
    assert not _z_failures(link_grid, step)


@pytest.mark.slow
def test_negative_control_flymc_with_a_bound_above_the_likelihood_fails(link_grid):
    with link_grid["model"]:
        good = FlyMC().bound
    bad = LinearQuadraticBound.from_coefficients(
        good.design,
        good.offset,
        good.anchor,
        good.value + 0.1 * (link_grid["y"] > 0),
        good.slope,
        good.curvature,
        centre=good.collapsed.centre,
        family=good.family,
        region=good.region,
        unbounded=good.unbounded,
    )
    with link_grid["model"]:
        step = FlyMC(bound=bad, check_bound=False)
    assert _z_failures(link_grid, step)


@pytest.mark.slow
def test_negative_control_tempered_tuna_fails(link_grid):
    with link_grid["model"]:
        step = TunaMH(temperature=1.5)
    assert _z_failures(link_grid, step)
