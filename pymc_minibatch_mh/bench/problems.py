"""Synthetic tall-data problems, generated in code (no downloads)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm


def logistic_model(n_data: int, n_features: int = 10, seed: int = 0) -> pm.Model:
    """Logistic regression with an intercept and standard-normal covariates.

    True coefficients are drawn from N(0, 0.5^2) (intercept 0.3); priors are N(0, 5^2).
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_data, n_features))
    true_beta = rng.normal(0.0, 0.5, size=n_features)
    y = rng.random(n_data) < 1.0 / (1.0 + np.exp(-(0.3 + x @ true_beta)))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 5.0, shape=n_features)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y.astype(np.int8))
    return model


# ----------------------------------------------------------------------------- robust
def robust_model(
    n_data: int, n_features: int = 10, seed: int = 0, nu: float = 4.0, sigma: float = 1.0
) -> pm.Model:
    """Robust linear regression: Student-t likelihood with fixed ``nu`` and ``sigma``.

    Covariates are standard normal; true coefficients are drawn from N(0, 0.5^2)
    (intercept 0.3) and the noise is ``sigma`` times a Student-t(``nu``) draw, so the
    data have heavy tails (a few residuals of 10 sigma or more at N = 10^5). Priors
    are N(0, 5^2). The likelihood is ``StudentT(nu, mu=alpha + X beta, sigma)``, which
    TunaMH (Lipschitz bound) and FlyMC (Gaussian lower bound) recognise.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_data, n_features))
    true_beta = rng.normal(0.0, 0.5, size=n_features)
    y = 0.3 + x @ true_beta + sigma * rng.standard_t(nu, size=n_data)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 5.0, shape=n_features)
        pm.StudentT("y", nu=nu, mu=alpha + x @ beta, sigma=sigma, observed=y)
    return model


# ------------------------------------------------------------- Gaussian mixture (Seita)
#: Seita et al.'s mixture: prior variances of theta and the variance of each component.
GMM_PRIOR_VAR = (10.0, 1.0)
GMM_SIGMA_X2 = 2.0
GMM_TRUE_THETA = (0.0, 1.0)


def gmm_data(n_data: int, seed: int = 0) -> np.ndarray:
    """Draws ``x_i ~ 1/2 N(theta1, 2) + 1/2 N(theta1 + theta2, 2)`` at ``theta = (0, 1)``."""
    rng = np.random.default_rng(seed)
    second = rng.random(n_data) < 0.5
    means = GMM_TRUE_THETA[0] + np.where(second, GMM_TRUE_THETA[1], 0.0)
    return rng.normal(means, np.sqrt(GMM_SIGMA_X2))


def gmm_model(x: np.ndarray, prior: str = "normal") -> pm.Model:
    """Seita et al.'s two-component mixture with shared ``theta1`` (one vector ``theta``).

    ``prior="normal"``: ``theta ~ N(0, diag(10, 1))`` (the paper's model).
    ``prior="box"``: ``theta ~ Uniform([-3, 3]^2)`` without a transform (TunaMH's
    truncated variant: the sampler works on ``theta`` itself and proposals outside the
    box are rejected by the prior before any data are read).
    """
    import pytensor.tensor as pt

    with pm.Model() as model:
        if prior == "normal":
            theta = pm.Normal("theta", 0.0, np.sqrt(GMM_PRIOR_VAR), shape=2)
        elif prior == "box":
            theta = pm.Uniform("theta", -3.0, 3.0, shape=2, default_transform=None)
        else:
            raise ValueError(f"prior must be 'normal' or 'box'; got {prior!r}.")
        means = pt.stack([theta[0], theta[0] + theta[1]])
        pm.NormalMixture(
            "x", w=np.array([0.5, 0.5]), mu=means, sigma=np.sqrt(GMM_SIGMA_X2), observed=x
        )
    return model


def gmm_tuna_constants(x: np.ndarray, half_width: float = 3.0) -> np.ndarray:
    """Per-datum Lipschitz constants of the (untempered) mixture log-likelihood on a box.

    On ``[-w, w]^2`` the gradient of ``log p(x_i | theta)`` has norm at most
    ``sqrt(2) (|x_i| + 2 w) / sigma_x^2`` (both component means lie in ``[-2w, 2w]``), so
    ``|log p(x_i | theta) - log p(x_i | theta')| <= c_i ||theta - theta'||`` on the box.
    TunaMH divides the constants by the temperature (``beta = 1 / K``).
    """
    return np.sqrt(2.0) * (np.abs(x) + 2.0 * half_width) / GMM_SIGMA_X2


@dataclass(frozen=True)
class BinnedData:
    """A histogram of 1-D data: per-bin mean of the data (``centres``) and ``counts``.

    A sum ``sum_i f(x_i)`` becomes ``sum_b counts[b] f(centres[b])``; with the bin
    *means* the first-order error cancels, leaving at most
    ``1/2 max|f''| sum_i (x_i - centre)^2 <= 1/2 max|f''| N width^2 / 4``.
    """

    centres: np.ndarray
    counts: np.ndarray
    width: float
    within_ss: float  # sum_i (x_i - mean of its bin)^2

    @property
    def n_bins(self) -> int:
        return int(self.counts.size)


def bin_data(x: np.ndarray, n_bins: int) -> BinnedData:
    """Histogram ``x`` into ``n_bins`` equal bins; keep only non-empty bins."""
    edges = np.linspace(x.min(), x.max(), n_bins + 1)
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, n_bins - 1)
    counts = np.bincount(which, minlength=n_bins).astype(np.float64)
    sums = np.bincount(which, weights=x, minlength=n_bins)
    keep = counts > 0
    centres = sums[keep] / counts[keep]
    within_ss = float(np.sum((x - (sums / np.maximum(counts, 1))[which]) ** 2))
    return BinnedData(centres, counts[keep], float(edges[1] - edges[0]), within_ss)


def gmm_loglik(x: np.ndarray, theta1, theta2) -> np.ndarray:
    """Per-datum mixture log-likelihood; broadcasts ``x`` against ``theta1``, ``theta2``."""
    var = GMM_SIGMA_X2
    a = -((x - theta1) ** 2) / (2 * var)
    b = -((x - theta1 - theta2) ** 2) / (2 * var)
    return np.logaddexp(a, b) - np.log(2.0) - 0.5 * np.log(2 * np.pi * var)


def gmm_binned_model(binned: BinnedData, temperature: float) -> pm.Model:
    """The tempered mixture posterior with the histogram as (weighted) data.

    Each bin is one observation whose log-likelihood is ``counts[b] / K`` times the
    mixture log density at the bin mean, so the model's log density is the tempered
    posterior of the full data up to the binning error. NUTS samples it in
    O(n_bins) per gradient.
    """
    import pytensor.tensor as pt

    weights = binned.counts / float(temperature)
    var = GMM_SIGMA_X2

    def logp(value, mu1, mu2, w):
        a = -((value - mu1) ** 2) / (2 * var)
        b = -((value - mu2) ** 2) / (2 * var)
        return w * (pt.logaddexp(a, b) - np.log(2.0) - 0.5 * np.log(2 * np.pi * var))

    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, np.sqrt(GMM_PRIOR_VAR), shape=2)
        mu1, mu2 = theta[0], theta[0] + theta[1]
        pm.CustomDist("x_binned", mu1, mu2, weights, logp=logp, observed=binned.centres)
    return model


@dataclass(frozen=True)
class GridPosterior:
    """A 2-D posterior tabulated on a regular grid of cell centres."""

    theta1: np.ndarray
    theta2: np.ndarray
    log_density: np.ndarray  # (len(theta1), len(theta2)), normalised to max 0

    @property
    def cell(self) -> tuple[float, float]:
        return float(self.theta1[1] - self.theta1[0]), float(self.theta2[1] - self.theta2[0])

    @property
    def mass(self) -> np.ndarray:
        p = np.exp(self.log_density - self.log_density.max())
        return p / p.sum()

    def edge_mass(self) -> float:
        """Probability of the outermost ring of cells (should be negligible)."""
        p = self.mass
        return float(p[0].sum() + p[-1].sum() + p[1:-1, 0].sum() + p[1:-1, -1].sum())

    def moments(self) -> dict[str, tuple[float, float]]:
        """``{"theta[j]": (mean, sd)}`` of the grid posterior."""
        p = self.mass
        out = {}
        for j, (values, marginal) in enumerate(
            [(self.theta1, p.sum(axis=1)), (self.theta2, p.sum(axis=0))]
        ):
            mean = float(values @ marginal)
            var = float(((values - mean) ** 2) @ marginal) + self.cell[j] ** 2 / 12
            out[f"theta[{j}]"] = (mean, float(np.sqrt(var)))
        return out

    def sample(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        """``n`` independent draws: a cell by its mass, then uniform within the cell."""
        p = self.mass.ravel()
        flat = rng.choice(p.size, size=n, p=p)
        i, j = np.unravel_index(flat, self.log_density.shape)
        h1, h2 = self.cell
        return {
            "theta[0]": self.theta1[i] + h1 * (rng.random(n) - 0.5),
            "theta[1]": self.theta2[j] + h2 * (rng.random(n) - 0.5),
        }


def gmm_log_posterior_grid(
    binned: BinnedData,
    temperature: float,
    theta1: np.ndarray,
    theta2: np.ndarray,
    prior: str = "normal",
    chunk_entries: int = 2_000_000,
) -> GridPosterior:
    """Tempered log posterior ``log p(theta) + sum_b counts_b loglik(centre_b) / K`` on a grid.

    ``prior="box"`` is the flat prior of the truncated variant (the grid should then
    cover the box).
    """
    var = GMM_SIGMA_X2
    x, w = binned.centres, binned.counts / float(temperature)
    out = np.empty((theta1.size, theta2.size))
    rows = max(1, chunk_entries // x.size)
    for i, t1 in enumerate(theta1):
        a = np.exp(-((x - t1) ** 2) / (2 * var))  # shared by every theta2
        for start in range(0, theta2.size, rows):
            t2 = theta2[start : start + rows, None]
            b = np.exp(-((x - t1 - t2) ** 2) / (2 * var))
            out[i, start : start + rows] = np.log(a + b) @ w
    # The constant -log 2 - log(2 pi var)/2 per datum cancels in the normalisation.
    if prior == "normal":
        out += -(theta1[:, None] ** 2) / (2 * GMM_PRIOR_VAR[0])
        out += -(theta2[None, :] ** 2) / (2 * GMM_PRIOR_VAR[1])
    elif prior != "box":
        raise ValueError(f"prior must be 'normal' or 'box'; got {prior!r}.")
    return GridPosterior(theta1, theta2, out - out.max())


def gmm_binning_error(
    x: np.ndarray,
    binned: BinnedData,
    temperature: float,
    thetas: np.ndarray,
) -> float:
    """Largest error of the binned tempered log-likelihood over ``thetas``, relative to
    the first point (constants cancel in the normalisation), computed on the full data."""
    exact = np.array([gmm_loglik(x, t1, t2).sum() for t1, t2 in thetas]) / temperature
    approx = (
        np.array([binned.counts @ gmm_loglik(binned.centres, t1, t2) for t1, t2 in thetas])
        / temperature
    )
    err = (exact - exact[0]) - (approx - approx[0])
    return float(np.max(np.abs(err)))
