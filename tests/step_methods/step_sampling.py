"""Models and a ``pm.sample`` wrapper shared by the step-method tests (fixtures in conftest)."""

import numpy as np
import pymc as pm
from scipy import special

N_DATA = 2_000
QUIET = {"progressbar": False, "compute_convergence_checks": False}


def gaussian_mean_model(n: int = N_DATA, seed: int = 3) -> pm.Model:
    """``y ~ N(mu, 1)`` with ``mu ~ N(0, 10^2)``."""
    y = np.random.default_rng(seed).normal(1.0, 1.0, size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.0, observed=y)
    return model


def logistic_design(n: int = N_DATA, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Two standard-normal covariates and labels from ``logit p = 0.3 + x @ (1, -0.5)``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = (rng.random(n) < special.expit(0.3 + x @ np.array([1.0, -0.5]))).astype(int)
    return x, y


def logistic_regression_model(x: np.ndarray, y: np.ndarray) -> pm.Model:
    """``y ~ Bernoulli(logit_p = alpha + x @ beta)`` with N(0, 5^2) priors."""
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    return model


def sample_step(model: pm.Model, step_class, step_kwargs=None, **sample_kwargs):
    """``pm.sample`` with a fresh ``step_class(**step_kwargs)``: one chain, one core, 100
    tuning steps and 100 draws unless ``sample_kwargs`` says otherwise, no progress bar."""
    sample_kwargs = {"draws": 100, "tune": 100, "chains": 1, "cores": 1, **QUIET, **sample_kwargs}
    with model:
        return pm.sample(step=step_class(**(step_kwargs or {})), **sample_kwargs)


def moment_problems(idata, name: str, mean, sd, z_tol: float, sd_tol: float) -> list[str]:
    """Coordinates of ``name`` (a vector) whose posterior mean is more than ``z_tol`` Monte
    Carlo standard errors (ESS-scaled) from ``mean``, or whose sd is more than ``sd_tol``
    (relative) from ``sd``: one message each."""
    import arviz as az

    size = len(mean)
    flat = np.asarray(idata.posterior[name]).reshape(-1, size)
    ess = np.asarray(az.ess(idata, var_names=[name])[name])
    problems = []
    for g in range(size):
        z = (flat[:, g].mean() - mean[g]) / (sd[g] / np.sqrt(ess[g]))
        ratio = flat[:, g].std() / sd[g]
        if abs(z) > z_tol or abs(ratio - 1.0) > sd_tol:
            problems.append(f"{name}[{g}]: mean off by {z:.1f} MCSE, sd ratio {ratio:.3f}")
    return problems
