"""The exact steps on a Binomial-logit likelihood (1-10 trials per row) reproduce a
grid-integrated posterior (``slow``).

``TunaMH()`` and ``FlyMC()`` with no arguments must match the posterior moments computed
by quadrature on a fine grid within 4 Monte Carlo standard errors (means and sds). Negative
controls: FlyMC with a bound above the likelihood (its Binomial coefficients shifted up by
0.1 on the rows with successes, bound checks off) and TunaMH on a tempered target must fail
the same check.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import FlyMC, TunaMH
from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound
from pymc_minibatch_mh.bounds.jaakkola_jordan import map_tuned_jaakkola_jordan

from .agreement import grid_moments
from .test_firefly_posteriors import Z_TOL, _mc_z_scores, _sample_grid_case

N_ROWS, PRIOR_SD = 300, 3.0


@pytest.fixture(scope="module")
def binomial_grid():
    rng = np.random.default_rng(2025)
    x = rng.normal(size=N_ROWS)
    trials = rng.integers(1, 11, N_ROWS)
    y = rng.binomial(trials, special.expit(-0.4 + 0.9 * x))
    with pm.Model() as model:
        a = pm.Normal("a", 0, PRIOR_SD)
        b = pm.Normal("b", 0, PRIOR_SD)
        pm.Binomial("y", n=trials, logit_p=a + b * x, observed=y)
        map_point = pm.find_MAP(progressbar=False)
    h = 0.003
    ga = map_point["a"] + h * np.arange(-300, 301)
    gb = map_point["b"] + h * np.arange(-300, 301)
    qa, qb = np.meshgrid(ga, gb, indexing="ij")
    logp = np.empty(qa.shape)
    for i, a_value in enumerate(ga):
        eta = a_value + gb[:, None] * x
        logp[i] = (y * special.log_expit(eta) + (trials - y) * special.log_expit(-eta)).sum(-1)
    logp -= 0.5 * (qa**2 + qb**2) / PRIOR_SD**2
    mean, sd = grid_moments({"a": ga, "b": gb}, logp)
    return {
        "model": model,
        "x": x,
        "y": y,
        "trials": trials,
        "map": map_point,
        "mean": mean,
        "sd": sd,
    }


def _z_failures(case, step):
    z = _mc_z_scores(_sample_grid_case(case, step), case)
    print("z-scores (mean, sd):", z)
    return {k: v for k, v in z.items() if max(abs(v[0]), abs(v[1])) >= Z_TOL}


@pytest.mark.slow
@pytest.mark.parametrize("step_class", [TunaMH, FlyMC])
def test_exact_steps_match_the_grid_posterior(binomial_grid, step_class):
    with binomial_grid["model"]:
        step = step_class()
    assert not _z_failures(binomial_grid, step)


@pytest.mark.slow
def test_negative_control_flymc_with_a_bound_above_the_likelihood_fails(binomial_grid):
    x1 = np.column_stack([np.ones(N_ROWS), binomial_grid["x"]])
    y = binomial_grid["y"]
    q_map = np.array([binomial_grid["map"]["a"], binomial_grid["map"]["b"]])
    good = map_tuned_jaakkola_jordan(x1, 0.0, y, q_map, trials=binomial_grid["trials"])
    bad = LinearQuadraticBound.from_coefficients(
        x1,
        0.0,
        good.anchor,
        good.value + 0.1 * (y > 0),
        good.slope,
        good.curvature,
        centre=q_map,
        family="binomial_logit",
    )
    with binomial_grid["model"]:
        step = FlyMC(bound=bad, check_bound=False)
    assert _z_failures(binomial_grid, step)


@pytest.mark.slow
def test_negative_control_tempered_tuna_fails(binomial_grid):
    with binomial_grid["model"]:
        step = TunaMH(temperature=1.5)
    assert _z_failures(binomial_grid, step)
