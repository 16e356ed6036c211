"""Models written the way PyMC users write them, with their reference posteriors.

Each ``build_<name>(n=None)`` returns a :class:`UserCase`: an ordinary ``pm.Model`` (free
scales with HalfNormal/Exponential priors, ``pm.Data`` covariates, coords and dims,
``pm.Deterministic`` where a user would put one), the variables to compare, the number
of data points N, and :meth:`UserCase.reference` for the reference moments (NUTS on the
same model, or the posteriordb reference draws for the Gaussian mixture). Data are
simulated with seeded numpy Generators; nothing is downloaded.

The acceptance criteria shared by ``test_default_posteriors.py`` and
``benchmarks/defaults_check.py`` (tolerances, batch-size limits, what a clear
construction-time refusal looks like) are defined at the end of this module.

NUTS references are cached on disk, keyed by the model name, N, the PyMC major version
and a fingerprint of the model and its data, under ``$PYMC_MINIBATCH_MH_REF_CACHE`` or
``<tempdir>/pymc_minibatch_mh_refs``. The cache only saves time: a missing or unreadable
entry is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from scipy import special

from pymc_minibatch_mh.diagnostics import posterior as posterior_of
from pymc_minibatch_mh.diagnostics import sample_stats as sample_stats_of
from pymc_minibatch_mh.likelihood.graph_tools import data_value

from .agreement import coordinate_draws, reference_moments
from .posteriordb import POSTERIORDB, _posteriordb, _stan_to_pymc_names

#: NUTS settings of every reference run (2 chains, fixed seed per model).
NUTS_SETTINGS = {"draws": 2000, "tune": 1000, "chains": 2, "cores": 2}
#: A NUTS reference is refused (not used, not cached) beyond these diagnostics.
NUTS_MAX_RHAT, NUTS_MIN_ESS = 1.01, 400.0
#: Bump to invalidate every cached reference.
_CACHE_VERSION = 1


@dataclass(frozen=True)
class Reference:
    """Reference moments of one case.

    Attributes
    ----------
    mean, sd : dict of str to float
        Mean and sd of every scalar coordinate, keyed ``"name"`` or ``"name[j]"`` (0-based
        index into the flattened variable, as in :func:`agreement.coordinate_draws`).
    source : str
        ``"NUTS"`` or ``"posteriordb"``.
    seconds : float
        Wall time of the NUTS run that produced the moments (0 for posteriordb), also
        when they were read from the cache.
    from_cache : bool
        Whether the moments were read from the on-disk cache.
    diagnostics : dict
        For NUTS: ``rhat_max``, ``ess_bulk_min`` and ``divergences``.
    """

    mean: dict[str, float]
    sd: dict[str, float]
    source: str
    seconds: float
    from_cache: bool
    diagnostics: dict = field(default_factory=dict)


@dataclass
class UserCase:
    """A user-written model, what to compare on it, and how to get its reference.

    Attributes
    ----------
    name : str
        Short name (the key of :data:`BUILDERS`).
    model : pymc.Model
        The model, exactly as a user would pass it to ``pm.sample``.
    var_names : list of str
        Variables to compare: free variables, and the Deterministic where there is one.
    n_data : int
        Number of data points N.
    regression : bool
        Whether the case is one of the regressions on which the batch-size criterion
        applies (when ``n_data >= BATCH_CHECK_MIN_N``).
    nuts_seed : int
        ``random_seed`` of the NUTS reference run.
    nuts_kwargs : dict
        Extra ``pm.sample`` arguments of the NUTS reference run (e.g. ``target_accept``),
        or replacements of :data:`NUTS_SETTINGS` (e.g. more ``draws``).
    reference_draws : dict of str to ndarray, optional
        External reference draws (posteriordb); NUTS is not run when given.
    """

    name: str
    model: pm.Model
    var_names: list[str]
    n_data: int
    regression: bool
    nuts_seed: int = 0
    nuts_kwargs: dict = field(default_factory=dict)
    reference_draws: dict[str, np.ndarray] | None = None

    def reference(self, *, use_cache: bool = True, cache_dir: Path | None = None) -> Reference:
        """Reference moments: posteriordb draws, or NUTS on the same model (cached).

        Parameters
        ----------
        use_cache : bool, default True
            Read and write the on-disk cache of NUTS moments.
        cache_dir : path, optional
            Cache directory; default :func:`reference_cache_dir`.

        Returns
        -------
        Reference

        Raises
        ------
        RuntimeError
            If the NUTS run does not converge (r-hat above ``NUTS_MAX_RHAT``, bulk ESS below
            ``NUTS_MIN_ESS``) or diverges: such a reference is not used.
        """
        if self.reference_draws is not None:
            mean, sd = reference_moments(self.reference_draws)
            return Reference(mean, sd, "posteriordb", 0.0, False)
        path = (cache_dir or reference_cache_dir()) / f"{self._cache_key()}.json"
        if use_cache and path.is_file():
            cached = _read_cache(path)
            if cached is not None:
                return cached
        reference = self._nuts_reference()
        if use_cache:
            _write_cache(path, reference)
        return reference

    def _nuts_reference(self) -> Reference:
        start = time.perf_counter()
        with self.model:
            idata = pm.sample(
                **{**NUTS_SETTINGS, **self.nuts_kwargs},
                random_seed=self.nuts_seed,
                progressbar=False,
                compute_convergence_checks=False,
            )
        seconds = time.perf_counter() - start
        draws = coordinate_draws(posterior_of(idata), self.var_names)
        rhat = max(float(az.rhat(v)) for v in draws.values())
        ess = min(float(az.ess(v, method="bulk")) for v in draws.values())
        divergences = int(np.sum(np.asarray(sample_stats_of(idata)["diverging"])))
        diagnostics = {"rhat_max": rhat, "ess_bulk_min": ess, "divergences": divergences}
        if not (rhat <= NUTS_MAX_RHAT and ess >= NUTS_MIN_ESS and divergences == 0):
            raise RuntimeError(
                f"The NUTS reference of {self.name!r} (N = {self.n_data}) is not usable: "
                f"{diagnostics} (need r-hat <= {NUTS_MAX_RHAT}, bulk ESS >= {NUTS_MIN_ESS}, "
                "no divergences). Reparametrise the model or raise target_accept."
            )
        mean, sd = reference_moments({k: v.ravel() for k, v in draws.items()})
        return Reference(mean, sd, "NUTS", seconds, False, diagnostics)

    def _cache_key(self) -> str:
        digest = hashlib.sha256()
        digest.update(repr((_CACHE_VERSION, NUTS_SETTINGS, self.nuts_seed)).encode())
        digest.update(repr(sorted(self.nuts_kwargs.items())).encode())
        digest.update(repr(self.var_names).encode())
        digest.update(self.model.str_repr().encode())
        data = [data_value(self.model.rvs_to_values[rv]) for rv in self.model.observed_RVs]
        data += [data_value(var) for var in self.model.data_vars]
        for value in data:
            if value is not None:
                digest.update(np.ascontiguousarray(value).tobytes())
        major = pm.__version__.split(".")[0]
        return f"{self.name}-n{self.n_data}-pymc{major}-{digest.hexdigest()[:16]}"


def reference_cache_dir() -> Path:
    """Where NUTS reference moments are cached (``$PYMC_MINIBATCH_MH_REF_CACHE`` or a
    directory under the system temp dir)."""
    configured = os.environ.get("PYMC_MINIBATCH_MH_REF_CACHE")
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / "pymc_minibatch_mh_refs"


def _read_cache(path: Path) -> Reference | None:
    """The cached reference, or None (with a printed reason) if the file is unusable."""
    try:
        entry = json.loads(path.read_text())
        return Reference(
            entry["mean"],
            entry["sd"],
            entry["source"],
            float(entry["seconds"]),
            True,
            entry["diagnostics"],
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"Ignoring unreadable reference cache {path}: {type(err).__name__}: {err}")
        return None


def _write_cache(path: Path, reference: Reference) -> None:
    """Write atomically (a concurrent reader sees the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "mean": reference.mean,
        "sd": reference.sd,
        "source": reference.source,
        "seconds": reference.seconds,
        "diagnostics": reference.diagnostics,
    }
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entry, indent=1))
    os.replace(tmp, path)


# ============================================================================ models
N_LOGISTIC = 50_000
N_TALL = 20_000
N_LKJ = 5_000
N_GROUPS = 20


def build_logistic(n: int | None = None) -> UserCase:
    """Logistic regression on three ``pm.Data`` covariates with coords/dims (N = 50,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 50,000.

    Returns
    -------
    UserCase
    """
    n = N_LOGISTIC if n is None else n
    rng = np.random.default_rng(5101)
    x = rng.normal(size=(n, 3))
    p = 1 / (1 + np.exp(-(-0.4 + x @ np.array([0.8, -0.5, 0.2]))))
    y = (rng.random(n) < p).astype(int)
    coords = {"feature": ["age", "income", "score"], "obs": np.arange(n)}
    with pm.Model(coords=coords) as model:
        X = pm.Data("X", x, dims=("obs", "feature"))
        intercept = pm.Normal("intercept", 0.0, 2.5)
        beta = pm.Normal("beta", 0.0, 1.0, dims="feature")
        pm.Bernoulli("y", logit_p=intercept + pm.math.dot(X, beta), observed=y, dims="obs")
    return UserCase("logistic", model, ["intercept", "beta"], n, True, nuts_seed=6101)


def build_linear(n: int | None = None) -> UserCase:
    """Linear regression with a free noise scale, ``pm.Data`` covariates (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5102)
    x = rng.normal(size=(n, 2))
    y = 1.5 + x @ np.array([0.7, -1.2]) + rng.normal(0.0, 2.0, size=n)
    with pm.Model() as model:
        X = pm.Data("X", x)
        alpha = pm.Normal("alpha", 0.0, 10.0)
        beta = pm.Normal("beta", 0.0, 5.0, shape=2)
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.Normal("y", mu=alpha + X @ beta, sigma=sigma, observed=y)
    return UserCase("linear", model, ["alpha", "beta", "sigma"], n, True, nuts_seed=6102)


def build_poisson(n: int | None = None) -> UserCase:
    """Poisson regression with a log link (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5103)
    x = rng.normal(size=(n, 2))
    y = rng.poisson(np.exp(0.5 + x @ np.array([0.3, -0.2])))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        eta = alpha + x @ beta
        pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
    return UserCase("poisson", model, ["alpha", "beta"], n, True, nuts_seed=6103)


def build_negbin(n: int | None = None) -> UserCase:
    """Negative binomial regression with a free dispersion ``alpha`` (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5104)
    x = rng.normal(size=(n, 2))
    mu, dispersion = np.exp(1.0 + x @ np.array([0.4, -0.3])), 2.0
    y = rng.negative_binomial(dispersion, dispersion / (dispersion + mu))
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        alpha = pm.Exponential("alpha", 1.0)
        eta = intercept + x @ beta
        pm.NegativeBinomial("y", mu=pm.math.exp(eta), alpha=alpha, observed=y)
    names = ["intercept", "beta", "alpha"]
    return UserCase("negbin", model, names, n, True, nuts_seed=6104)


def build_binomial(n: int | None = None) -> UserCase:
    """Binomial regression with a logit link: successes of 1-20 trials per row, the
    trials a ``pm.Data`` array (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5105)
    x = rng.normal(size=(n, 2))
    trials = rng.integers(1, 21, n)
    y = rng.binomial(trials, 1.0 / (1.0 + np.exp(-(-0.7 + x @ np.array([0.5, -0.8])))))
    with pm.Model() as model:
        n_trials = pm.Data("trials", trials)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        pm.Binomial("y", n=n_trials, logit_p=intercept + x @ beta, observed=y)
    return UserCase("binomial", model, ["intercept", "beta"], n, True, nuts_seed=6105)


def build_gamma(n: int | None = None) -> UserCase:
    """Gamma regression with a log-link mean and a free shape, the covariates a
    ``pm.Data`` array (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5106)
    x = rng.normal(size=(n, 2))
    y = rng.gamma(2.0, np.exp(0.8 + x @ np.array([0.4, -0.3])) / 2.0)
    with pm.Model() as model:
        x_data = pm.Data("x", x)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        shape = pm.HalfNormal("shape", 5.0)
        mean = pm.math.exp(intercept + pm.math.dot(x_data, beta))
        pm.Gamma("y", alpha=shape, beta=shape / mean, observed=y)
    return UserCase("gamma", model, ["intercept", "beta", "shape"], n, True, nuts_seed=6106)


def build_beta(n: int | None = None) -> UserCase:
    """Beta regression: logit-link mean, free precision, ``pm.Data`` covariates and some
    observations near 0 and 1 (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5112)
    x = rng.normal(size=(n, 2))
    mean = 1.0 / (1.0 + np.exp(-(-0.3 + x @ np.array([0.7, 0.4]))))
    y = np.clip(rng.beta(10.0 * mean, 10.0 * (1.0 - mean)), 1e-6, 1.0 - 1e-6)
    with pm.Model() as model:
        X = pm.Data("X", x)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        precision = pm.HalfNormal("precision", 30.0)
        pm.Beta("y", mu=pm.math.invlogit(intercept + X @ beta), nu=precision, observed=y)
    return UserCase("beta", model, ["intercept", "beta", "precision"], n, True, nuts_seed=6112)


def build_zip(n: int | None = None) -> UserCase:
    """Zero-inflated Poisson regression: a free inflation ``psi`` (Beta prior) and a
    log-link mean, ``pm.Data`` covariates (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5113)
    x = rng.normal(size=(n, 2))
    mean = np.exp(0.4 + x @ np.array([0.5, -0.3]))
    y = np.where(rng.uniform(size=n) < 0.75, rng.poisson(mean), 0)
    with pm.Model() as model:
        X = pm.Data("X", x)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        psi = pm.Beta("psi", 2.0, 2.0)
        pm.ZeroInflatedPoisson("y", psi=psi, mu=pm.math.exp(intercept + X @ beta), observed=y)
    return UserCase("zip", model, ["intercept", "beta", "psi"], n, True, nuts_seed=6113)


def build_ordinal(n: int | None = None) -> UserCase:
    """Ordinal logistic regression: four categories, free cutpoints with PyMC's ordered
    transform, two ``pm.Data`` covariates (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5115)
    x = rng.normal(size=(n, 2))
    latent = x @ np.array([0.8, -0.5]) + rng.logistic(size=n)
    y = np.searchsorted(np.array([-1.0, 0.3, 1.2]), latent)
    with pm.Model() as model:
        X = pm.Data("X", x)
        beta = pm.Normal("beta", 0.0, 2.0, shape=2)
        cutpoints = pm.Normal(
            "cutpoints",
            mu=[-1.0, 0.0, 1.0],
            sigma=3.0,
            shape=3,
            transform=pm.distributions.transforms.ordered,
        )
        pm.OrderedLogistic("y", eta=X @ beta, cutpoints=cutpoints, observed=y)
    return UserCase("ordinal", model, ["beta", "cutpoints"], n, True, nuts_seed=6115)


def build_hurdle(n: int | None = None) -> UserCase:
    """Hurdle Poisson regression: a free probability ``psi`` of a positive count (Beta
    prior) and a log-link mean of the zero-truncated counts, ``pm.Data`` covariates
    (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5114)
    x = rng.normal(size=(n, 2))
    mean = np.exp(0.6 + x @ np.array([0.4, -0.3]))
    counts = rng.poisson(mean)
    while np.any(counts == 0):  # zero-truncated: redraw the zeros
        zeros = counts == 0
        counts[zeros] = rng.poisson(mean[zeros])
    y = np.where(rng.uniform(size=n) < 0.6, counts, 0)
    with pm.Model() as model:
        X = pm.Data("X", x)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        psi = pm.Beta("psi", 2.0, 2.0)
        pm.HurdlePoisson("y", psi=psi, mu=pm.math.exp(intercept + X @ beta), observed=y)
    return UserCase("hurdle", model, ["intercept", "beta", "psi"], n, True, nuts_seed=6114)


def _negative_binomial_with_zeros(kind: str, n: int | None) -> UserCase:
    """Zero-inflated (``kind="zinb"``) or hurdle (``"hurdle_nb"``) negative binomial
    regression: a free dispersion ``alpha``, a free ``psi`` (the probability of the count
    part, or of a positive count), a log-link mean, ``pm.Data`` covariates."""
    n = N_TALL if n is None else n
    zero_inflated = kind == "zinb"
    rng = np.random.default_rng(5117 if zero_inflated else 5118)
    x = rng.normal(size=(n, 2))
    alpha_true = 2.0 if zero_inflated else 3.0
    slopes = np.array([0.5, -0.3]) if zero_inflated else np.array([0.4, -0.3])
    mean = np.exp((0.8 if zero_inflated else 0.7) + x @ slopes)
    counts = rng.negative_binomial(alpha_true, alpha_true / (alpha_true + mean))
    while not zero_inflated and np.any(counts == 0):  # zero-truncated: redraw the zeros
        zeros = counts == 0
        counts[zeros] = rng.negative_binomial(alpha_true, alpha_true / (alpha_true + mean[zeros]))
    y = np.where(rng.uniform(size=n) < (0.75 if zero_inflated else 0.6), counts, 0)
    dist = pm.ZeroInflatedNegativeBinomial if zero_inflated else pm.HurdleNegativeBinomial
    with pm.Model() as model:
        X = pm.Data("X", x)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        alpha = pm.HalfNormal("alpha", 5.0)
        psi = pm.Beta("psi", 2.0, 2.0)
        dist("y", psi=psi, mu=pm.math.exp(intercept + X @ beta), alpha=alpha, observed=y)
    names = ["intercept", "beta", "alpha", "psi"]
    return UserCase(kind, model, names, n, True, nuts_seed=6117 if zero_inflated else 6118)


def build_zinb(n: int | None = None) -> UserCase:
    """Zero-inflated negative binomial regression, free ``alpha`` and ``psi``
    (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    return _negative_binomial_with_zeros("zinb", n)


def build_hurdle_nb(n: int | None = None) -> UserCase:
    """Hurdle negative binomial regression, free ``alpha`` and ``psi`` (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    return _negative_binomial_with_zeros("hurdle_nb", n)


def build_hetero(n: int | None = None) -> UserCase:
    """Heteroscedastic linear regression: the mean and ``log sigma`` both linear in the
    same ``pm.Data`` covariates, ``sigma = pm.math.exp(c + X @ g)`` (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5111)
    x = rng.normal(size=(n, 2))
    sigma = np.exp(-0.2 + x @ np.array([0.3, -0.15]))
    y = 1.0 + x @ np.array([0.8, -0.4]) + sigma * rng.normal(size=n)
    with pm.Model() as model:
        X = pm.Data("X", x)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        log_sigma_0 = pm.Normal("log_sigma_0", 0.0, 1.0)
        gamma = pm.Normal("gamma", 0.0, 0.5, shape=2)
        pm.Normal(
            "y",
            mu=intercept + X @ beta,
            sigma=pm.math.exp(log_sigma_0 + X @ gamma),
            observed=y,
        )
    names = ["intercept", "beta", "log_sigma_0", "gamma"]
    return UserCase("hetero", model, names, n, True, nuts_seed=6111)


def build_two_outcomes(n: int | None = None) -> UserCase:
    """Two observed variables per row (N = 20,000): a count ``visits ~ Poisson`` and a
    Normal ``spend`` with a free scale, sharing the covariates and one coefficient.

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5110)
    x = rng.normal(size=(n, 2))
    visits = rng.poisson(np.exp(0.2 + x @ np.array([0.5, -0.3])))
    spend = 1.0 + x @ np.array([0.5, 0.8]) + 0.7 * rng.normal(size=n)
    with pm.Model(coords={"row": np.arange(n)}) as model:
        features = pm.Data("features", x, dims=("row", "feature"))
        shared = pm.Normal("shared", 0.0, 1.0)
        rate = pm.Normal("rate", 0.0, 1.0, shape=2)
        level = pm.Normal("level", 0.0, 2.0, shape=2)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Poisson(
            "visits",
            mu=pm.math.exp(rate[0] + shared * features[:, 0] + rate[1] * features[:, 1]),
            observed=visits,
            dims="row",
        )
        pm.Normal(
            "spend",
            level[0] + shared * features[:, 0] + level[1] * features[:, 1],
            sigma,
            observed=spend,
            dims="row",
        )
    names = ["shared", "rate", "level", "sigma"]
    return UserCase("two_outcomes", model, names, n, True, nuts_seed=6110)


def build_data_sets(n: int | None = None, *, sets: int = 2) -> UserCase:
    """Data sets of different lengths sharing coefficients, as a user writes them: counts of
    ``n`` visits (Poisson), yes/no answers of ``2n/5`` other people (Bernoulli) and, with
    ``sets=3``, ``n/4`` amounts (Normal with a free scale), each with its own covariates
    and intercept, one pair of slopes shared by all.

    Parameters
    ----------
    n : int, optional
        Rows of the first data set; default 20,000.
    sets : {2, 3}
        Number of data sets.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5120 + sets)
    slopes = np.array([0.5, -0.3])
    x1, x2, x3 = (rng.normal(size=(m, 2)) for m in (n, 2 * n // 5, n // 4))
    counts = rng.poisson(np.exp(0.2 + x1 @ slopes))
    answers = (rng.random(len(x2)) < special.expit(-0.4 + x2 @ slopes)).astype(int)
    amounts = 1.0 + x3 @ slopes + 0.8 * rng.normal(size=len(x3))
    with pm.Model() as model:
        slope = pm.Normal("slope", 0.0, 1.0, shape=2)
        level = pm.Normal("level", 0.0, 2.0, shape=sets)
        pm.Poisson("visits", mu=pm.math.exp(level[0] + x1 @ slope), observed=counts)
        pm.Bernoulli("answer", logit_p=level[1] + pm.Data("x2", x2) @ slope, observed=answers)
        names = ["slope", "level"]
        if sets == 3:
            sigma = pm.HalfNormal("sigma", 1.0)
            pm.Normal("amount", level[2] + x3 @ slope, sigma, observed=amounts)
            names.append("sigma")
    rows = len(x1) + len(x2) + (len(x3) if sets == 3 else 0)
    return UserCase(f"data_sets_{sets}", model, names, rows, True, nuts_seed=6120 + sets)


def _grouped_data(n: int, seed: int, *, noise_sd: float, group_sd: float):
    """Radon-like data: 20 groups of unequal size, one covariate, group intercepts drawn
    from ``N(1, group_sd^2)``, slope -0.6 and Gaussian noise of sd ``noise_sd``."""
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(N_GROUPS, 5.0))
    group = rng.choice(N_GROUPS, size=n, p=weights)
    x = rng.normal(size=n)
    a_true = rng.normal(1.0, group_sd, size=N_GROUPS)
    y = a_true[group] - 0.6 * x + rng.normal(0.0, noise_sd, size=n)
    coords = {"group": [f"g{j:02d}" for j in range(N_GROUPS)], "obs": np.arange(n)}
    return group, x, y, coords


def build_hier_centred(n: int | None = None) -> UserCase:
    """Centred hierarchical linear model: group intercepts ``a ~ N(mu_a, sigma_a)``.

    Twenty groups, coords/dims, ``pm.Data`` for the group index and the covariate, a free
    noise scale and a ``pm.Deterministic`` of the group effects ``a - mu_a`` (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    group, x, y, coords = _grouped_data(n, 5105, noise_sd=1.0, group_sd=0.5)
    with pm.Model(coords=coords) as model:
        group_idx = pm.Data("group_idx", group, dims="obs")
        x_data = pm.Data("x", x, dims="obs")
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        a = pm.Normal("a", mu_a, sigma_a, dims="group")
        pm.Deterministic("group_effect", a - mu_a, dims="group")
        b = pm.Normal("b", 0.0, 1.0)
        sigma = pm.Exponential("sigma", 1.0)
        pm.Normal("y", mu=a[group_idx] + b * x_data, sigma=sigma, observed=y, dims="obs")
    names = ["mu_a", "sigma_a", "a", "b", "sigma", "group_effect"]
    return UserCase("hier_centred", model, names, n, False, nuts_seed=6105)


def build_hier_noncentred(n: int | None = None) -> UserCase:
    """Non-centred hierarchical linear model: ``a = mu_a + sigma_a * z`` (a Deterministic).

    Same structure as :func:`build_hier_centred` (20 groups, coords/dims, ``pm.Data``,
    free noise scale) on its own simulated data (N = 20,000), in the regime where a user
    picks the non-centred form: noise sd 4 and group sd 0.3, so each group's ~1,000 rows
    pin its intercept down only to about a third of the group sd. (With the centred
    case's data, sd 1 and 0.5, the group intercepts are pinned to a tenth of the group sd,
    and NUTS on the non-centred form mixes badly: bulk ESS ~300 of 4,000 draws, r-hat
    1.01-1.02 even at target_accept 0.9; a user would switch to the centred form there.)

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    group, x, y, coords = _grouped_data(n, 5106, noise_sd=4.0, group_sd=0.3)
    with pm.Model(coords=coords) as model:
        group_idx = pm.Data("group_idx", group, dims="obs")
        x_data = pm.Data("x", x, dims="obs")
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        z = pm.Normal("z", 0.0, 1.0, dims="group")
        a = pm.Deterministic("a", mu_a + sigma_a * z, dims="group")
        b = pm.Normal("b", 0.0, 1.0)
        sigma = pm.Exponential("sigma", 1.0)
        pm.Normal("y", mu=a[group_idx] + b * x_data, sigma=sigma, observed=y, dims="obs")
    names = ["mu_a", "sigma_a", "z", "b", "sigma", "a"]
    return UserCase("hier_noncentred", model, names, n, False, nuts_seed=6106)


def build_lkj_mvnormal(n: int | None = None) -> UserCase:
    """Three-dimensional MvNormal rows with an LKJ prior on the Cholesky factor (N = 5,000).

    ``pm.LKJCholeskyCov(..., sd_dist=pm.Exponential.dist(1.0), compute_corr=True)`` and a
    Deterministic ``rho`` of the three correlations above the diagonal (the correlation
    matrix itself has constant diagonal entries, which no sd comparison can use).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 5,000.

    Returns
    -------
    UserCase
    """
    n = N_LKJ if n is None else n
    rng = np.random.default_rng(5107)
    corr = np.array([[1.0, 0.5, -0.3], [0.5, 1.0, 0.2], [-0.3, 0.2, 1.0]])
    sds = np.array([1.0, 2.0, 0.5])
    data = rng.multivariate_normal([0.5, -1.0, 2.0], corr * np.outer(sds, sds), size=n)
    upper = np.triu_indices(3, k=1)
    coords = {"axis": ["u", "v", "w"], "pair": ["u-v", "u-w", "v-w"], "obs": np.arange(n)}
    with pm.Model(coords=coords) as model:
        chol, corr_rv, _ = pm.LKJCholeskyCov(
            "chol", n=3, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True
        )
        pm.Deterministic("rho", corr_rv[upper], dims="pair")
        mu = pm.Normal("mu", 0.0, 5.0, dims="axis")
        pm.MvNormal("y", mu=mu, chol=chol, observed=data, dims=("obs", "axis"))
    names = ["mu", "chol", "chol_stds", "rho"]
    return UserCase("lkj_mvnormal", model, names, n, False, nuts_seed=6107)


def build_student_t(n: int | None = None) -> UserCase:
    """Robust (Student-t, nu = 4) regression with a free scale, ``pm.Data`` covariates
    (N = 20,000).

    Parameters
    ----------
    n : int, optional
        Number of data points; default 20,000.

    Returns
    -------
    UserCase
    """
    n = N_TALL if n is None else n
    rng = np.random.default_rng(5108)
    x = rng.normal(size=(n, 2))
    y = 0.3 + x @ np.array([1.0, -0.5]) + 0.8 * rng.standard_t(4.0, size=n)
    with pm.Model() as model:
        X = pm.Data("X", x)
        alpha = pm.Normal("alpha", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 5.0, shape=2)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.StudentT("y", nu=4.0, mu=alpha + X @ beta, sigma=sigma, observed=y)
    return UserCase("student_t", model, ["alpha", "beta", "sigma"], n, True, nuts_seed=6108)


def build_gauss_mix(n: int | None = None) -> UserCase:
    """posteriordb ``low_dim_gauss_mix``: two normal components, ordered means (N = 1,000).

    Stan: ``ordered[2] mu ~ N(0, 2)``, ``sigma ~ N+(0, 2)``, ``theta ~ Beta(5, 5)``,
    ``y_n ~ theta N(mu[1], sigma[1]) + (1 - theta) N(mu[2], sigma[2])``. The reference is
    posteriordb's 10 x 1000 draws (renamed to 0-based ``mu[0]`` ...).

    Parameters
    ----------
    n : int, optional
        Must be None or 1,000: the data and reference draws are fixed.

    Returns
    -------
    UserCase
    """
    if not POSTERIORDB.is_dir():
        raise FileNotFoundError(
            f"posteriordb data not found at {POSTERIORDB} (../shared must sit beside the repo)"
        )
    data, draws = _posteriordb("low_dim_gauss_mix", "low_dim_gauss_mix-low_dim_gauss_mix")
    y = np.asarray(data["y"], dtype=np.float64)
    if n is not None and n != y.size:
        raise ValueError(f"gauss_mix has fixed data (N = {y.size}); got n = {n}.")
    with pm.Model(coords={"component": ["low", "high"]}) as model:
        mu = pm.Normal(
            "mu",
            0.0,
            2.0,
            dims="component",
            transform=pm.distributions.transforms.ordered,
            initval=np.array([-1.0, 1.0]),
        )
        sigma = pm.HalfNormal("sigma", 2.0, dims="component")
        theta = pm.Beta("theta", 5.0, 5.0)
        weights = pm.math.stack([theta, 1.0 - theta])
        pm.NormalMixture("y", w=weights, mu=mu, sigma=sigma, observed=y)
    return UserCase(
        "gauss_mix",
        model,
        ["mu", "sigma", "theta"],
        int(y.size),
        False,
        reference_draws=_stan_to_pymc_names(draws),
    )


#: Every case by name, in the order the suite and the harness run them.
BUILDERS: dict[str, Callable[..., UserCase]] = {
    "logistic": build_logistic,
    "linear": build_linear,
    "poisson": build_poisson,
    "negbin": build_negbin,
    "binomial": build_binomial,
    "gamma": build_gamma,
    "hetero": build_hetero,
    "beta": build_beta,
    "zip": build_zip,
    "hurdle": build_hurdle,
    "zinb": build_zinb,
    "hurdle_nb": build_hurdle_nb,
    "ordinal": build_ordinal,
    "hier_centred": build_hier_centred,
    "hier_noncentred": build_hier_noncentred,
    "lkj_mvnormal": build_lkj_mvnormal,
    "student_t": build_student_t,
    "two_outcomes": build_two_outcomes,
    "data_sets_2": build_data_sets,
    "data_sets_3": partial(build_data_sets, sets=3),
    "gauss_mix": build_gauss_mix,
}
#: Cases whose data size is fixed (``n`` cannot be chosen).
FIXED_SIZE = frozenset({"gauss_mix"})


# ========================================================================== criteria
#: Step classes under test, by name.
STEP_NAMES = ("MinibatchBarker", "Austere", "TunaMH", "FlyMC")
#: Means within 0.15 reference sd and sds within 15 %.
MEAN_TOL, SD_TOL = 0.15, 0.15
#: Largest mean batch per draw, as a fraction of N, on the regressions.
BATCH_LIMITS = {"MinibatchBarker": 0.05, "Austere": 0.05, "TunaMH": 0.01, "FlyMC": 0.01}
#: Larger limits of the exact steps where issue 24 allows them: 5 % of N per draw on the
#: ordinal and zero-inflated (or hurdle) regressions.
BATCH_LIMIT_EXCEPTIONS = {
    (case, step): 0.05
    for case in ("ordinal", "zip", "hurdle", "zinb", "hurdle_nb")
    for step in ("TunaMH", "FlyMC")
}
#: The batch criterion applies to regressions with at least this many data points.
BATCH_CHECK_MIN_N = 20_000
#: Steps that refuse unsupported models; a refusal must name the step or an alternative.
REFUSAL_NAMES = ("MinibatchBarker", "Austere", "TunaMH", "FlyMC")


def step_pairs(
    model_names, refusals: dict, known_failures: dict
) -> tuple[list, list[tuple[str, str]]]:
    """Parameters of an acceptance suite: ``(accepted, refused)`` (model, step) pairs.

    Every model with every step of :data:`STEP_NAMES`; pairs in ``refusals`` must be
    refused, the others sampled, those in ``known_failures`` as strict xfails with the
    recorded reason (a fix makes the test fail until the entry is removed).
    """
    import pytest

    pairs = [(model, step) for model in model_names for step in STEP_NAMES]
    accepted = [
        pytest.param(*pair, marks=pytest.mark.xfail(reason=known_failures[pair], strict=True))
        if pair in known_failures
        else pair
        for pair in pairs
        if pair not in refusals
    ]
    return accepted, [pair for pair in pairs if pair in refusals]


def step_class(name: str):
    """The step class ``pymc_minibatch_mh.<name>``."""
    import pymc_minibatch_mh

    return getattr(pymc_minibatch_mh, name)


def mean_batch_fraction(idata, n_data: int) -> float:
    """Mean ``batch_size`` stat per draw divided by N (NaN if the stat is absent).

    Parameters
    ----------
    idata : InferenceData or DataTree
        Result of ``pm.sample`` (PyMC 5 or 6).
    n_data : int
        Number of data points N.

    Returns
    -------
    float
    """
    stats = sample_stats_of(idata)
    if "batch_size" not in stats:
        return float("nan")
    return float(np.mean(np.asarray(stats["batch_size"]))) / n_data


def batch_limit(case: UserCase, step_name: str) -> float | None:
    """The batch-size limit (fraction of N) that applies to ``step_name`` on ``case``, or
    None when the criterion does not apply (not a regression, or N below
    :data:`BATCH_CHECK_MIN_N`)."""
    if not (case.regression and case.n_data >= BATCH_CHECK_MIN_N):
        return None
    return BATCH_LIMIT_EXCEPTIONS.get((case.name, step_name), BATCH_LIMITS[step_name])


def batch_problem(fraction: float, limit: float | None) -> str | None:
    """Why a measured batch fraction breaks ``limit`` (None if it does not, or no limit)."""
    if limit is None:
        return None
    if not fraction <= limit:  # NaN (no batch_size stat) fails too
        return f"mean batch per draw {fraction:.4f} N > {limit} N"
    return None


def refusal_problem(err: BaseException, step_name: str, phrase: str | None = None) -> str | None:
    """Why ``err`` is not a clear construction-time refusal by ``step_name`` (None if it is).

    A clear refusal is a ``ValueError`` or ``NotImplementedError`` (subclasses included)
    whose message names the step class or a step to use instead, and contains ``phrase``
    (case-insensitive) when one is given.

    Parameters
    ----------
    err : BaseException
        What the constructor raised.
    step_name : str
        Name of the step class that was constructed.
    phrase : str, optional
        A key phrase the message must contain.

    Returns
    -------
    str or None
    """
    if not isinstance(err, ValueError | NotImplementedError):
        return f"{step_name} raised {type(err).__name__}, not a ValueError/NotImplementedError"
    message = str(err)
    if not any(name in message for name in REFUSAL_NAMES):
        return (
            f"{step_name}'s refusal names neither the step nor an alternative "
            f"({', '.join(REFUSAL_NAMES)}): {message[:200]!r}"
        )
    if phrase is not None and phrase.lower() not in message.lower():
        return f"{step_name}'s refusal lacks the phrase {phrase!r}: {message[:200]!r}"
    return None
