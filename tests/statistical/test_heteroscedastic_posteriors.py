"""TunaMH and FlyMC on heteroscedastic regressions (``sigma = exp(c + g x)``, Normal and
Student-t) reproduce grid-integrated posteriors (``slow``).

The model has a mean ``a + b x`` and a log scale ``c + g x`` over the same covariate, with
an outlying row and rows far out in ``x`` (|x| = 5). ``TunaMH()`` and ``FlyMC()`` with no
arguments must match the posterior means and sds of a 4-D grid in ``(a, b, c, g)`` within 4
Monte Carlo standard errors. Negative control: each step at ``temperature=1.5`` (sds about
22 % too large) must fail the same check; FlyMC with ``bound="untuned"`` is refused in
words (fast).
"""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import FlyMC, TunaMH

from .agreement import grid_z_failures

N_ROWS, NU = 300, 4.0
PRIOR_SD = {"a": 3.0, "b": 3.0, "c": 2.0, "g": 1.0}
Z_TOL = 4.0
#: Grid points per axis and the half-widths in Laplace sds of (a, b, c, g) (faces checked
#: to hold no mass): the slope's posterior has a long tail (rows at |x| = 5 may be read as
#: outliers by the Student-t).
GRID_POINTS, GRID_HALF_WIDTH = 51, np.array([9.0, 14.0, 9.0, 9.0])


def _data(family: str):
    rng = np.random.default_rng(2031)
    x = rng.normal(size=N_ROWS)
    x[:2] = [5.0, -5.0]
    noise = rng.normal(size=N_ROWS) if family == "normal" else rng.standard_t(NU, N_ROWS)
    y = 0.5 - 0.7 * x + np.exp(-0.4 + 0.3 * x) * noise
    y[2] += 6.0  # an outlier
    return x, y


def _model(family: str) -> pm.Model:
    x, y = _data(family)
    with pm.Model() as model:
        a = pm.Normal("a", 0, PRIOR_SD["a"])
        b = pm.Normal("b", 0, PRIOR_SD["b"])
        c = pm.Normal("c", 0, PRIOR_SD["c"])
        g = pm.Normal("g", 0, PRIOR_SD["g"])
        sigma = pm.math.exp(c + g * x)
        if family == "normal":
            pm.Normal("y", a + b * x, sigma, observed=y)
        else:
            pm.StudentT("y", nu=NU, mu=a + b * x, sigma=sigma, observed=y)
    return model


def _log_posterior(family, a, b, c, g, x, y):
    """Unnormalised, summed over rows; parameters broadcast against a trailing row axis."""
    log_sigma = c + g * x
    z = (y - a - b * x) * np.exp(-log_sigma)
    if family == "normal":
        loglik = -0.5 * z * z - log_sigma
    else:
        loglik = -0.5 * (NU + 1.0) * np.log1p(z * z / NU) - log_sigma
    prior = sum(-0.5 * (v / PRIOR_SD[k]) ** 2 for k, v in zip("abcg", (a, b, c, g), strict=True))
    return loglik.sum(-1) + prior[..., 0]


@pytest.fixture(scope="module", params=["normal", "student_t"])
def grid_case(request):
    family = request.param
    x, y = _data(family)
    model = _model(family)
    with model:
        map_point = pm.find_MAP(progressbar=False)
    centre = np.array([float(map_point[k]) for k in "abcg"])
    hessian = model.compile_d2logp(jacobian=False)(map_point)
    sd = np.sqrt(np.diag(np.linalg.inv(hessian)))
    axes = [
        m + s * np.linspace(-1, 1, GRID_POINTS)
        for m, s in zip(centre, GRID_HALF_WIDTH * sd, strict=True)
    ]
    ga, gb, gc, gg = axes
    logp = np.empty((GRID_POINTS,) * 4)
    for i, a_value in enumerate(ga):
        logp[i] = _log_posterior(
            family,
            a_value,
            gb[:, None, None, None],
            gc[None, :, None, None],
            gg[None, None, :, None],
            x,
            y,
        )
    w = np.exp(logp - logp.max())
    w /= w.sum()
    faces = sum(np.take(w, k, axis=axis).sum() for axis in range(4) for k in (0, -1))
    assert faces < 1e-10, faces
    mean, sd_out = {}, {}
    for axis, name in enumerate("abcg"):
        marginal = w.sum(axis=tuple(k for k in range(4) if k != axis))
        mean[name] = float(marginal @ axes[axis])
        sd_out[name] = float(np.sqrt(marginal @ (axes[axis] - mean[name]) ** 2))
    return {"model": model, "mean": mean, "sd": sd_out, "label": family}


def _z_failures(case, step) -> dict:
    return grid_z_failures(case, step, draws=8000, seed=79, z_tol=Z_TOL)


STEPS = {"TunaMH": TunaMH, "FlyMC": FlyMC}


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_step_matches_the_grid_posterior(grid_case, step_name):
    with grid_case["model"]:
        step = STEPS[step_name]()
    assert not _z_failures(grid_case, step)


@pytest.mark.slow
@pytest.mark.parametrize("step_name", list(STEPS))
def test_negative_control_tempered_step_fails(grid_case, step_name):
    with grid_case["model"]:
        step = STEPS[step_name](temperature=1.5)
    assert _z_failures(grid_case, step)


@pytest.mark.parametrize("family", ["normal", "student_t"])
def test_flymc_untuned_bound_is_refused_in_words(family):
    with _model(family), pytest.raises(ValueError) as info:
        FlyMC(bound="untuned")
    message = str(info.value)
    assert "whose sigma differs between rows" in message
    assert "bound='map' (the default)" in message and "TunaMH()" in message
