"""Small models with extreme rows for the trust-region bound checks in this directory:
two coefficients (plus the family's second parameter), N = 400, and the MAP."""

import numpy as np
import pymc as pm
from scipy import special

N = 400


def region_model(kind: str):
    """Two coefficients (plus log sigma for the free scales), N = 400, and its MAP."""
    rng = np.random.default_rng(21)
    x = rng.normal(size=N)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3)
        if kind == "poisson":
            y = rng.poisson(np.exp(0.3 + 0.6 * x))
            pm.Poisson("y", mu=pm.math.exp(a + b * x), observed=y)
        elif kind.startswith("gamma"):
            # Extreme rows among ordinary ones: tiny and outlying observations, |x| = 12.
            x[:4] = [12.0, -12.0, 6.0, -6.0]
            y = rng.gamma(4.0, np.exp(0.5 + 0.2 * x) / 4.0)
            y[4:8] = [1e-4, 1e-3, 40.0 * np.exp(0.5), 1e-6]
            shape = pm.Gamma("shape", 2.0, 0.5) if kind == "gamma_free_shape" else 4.0
            pm.Gamma("y", alpha=shape, beta=shape / pm.math.exp(a + b * x), observed=y)
        elif kind == "negbin_free_dispersion":
            mu = np.exp(1.0 + 0.5 * x)
            y = rng.negative_binomial(2.0, 2.0 / (2.0 + mu))
            alpha = pm.Exponential("alpha", 1.0)
            pm.NegativeBinomial("y", mu=pm.math.exp(a + b * x), alpha=alpha, observed=y)
        elif kind.startswith(("zinb", "hurdle_nb")):
            # Extreme rows: large counts, zeros where the mean is large, |x| = 12.
            x[:4] = [12.0, -12.0, 6.0, -6.0]
            mu = np.exp(1.5 + 0.3 * x)  # zeros of the counts rare: psi well identified
            counts = rng.negative_binomial(4.0, 4.0 / (4.0 + mu))
            y = np.where(rng.uniform(size=N) < 0.7, counts, 0)
            y[4:8] = [0, 0, 60, 1]
            free_alpha = kind.endswith(("_free", "_fixed_psi"))
            free_psi = kind.endswith(("_free", "_fixed_alpha"))
            alpha = pm.Exponential("alpha", 0.25) if free_alpha else 4.0
            psi = pm.Beta("psi", 2.0, 2.0) if free_psi else 0.7
            dist = (
                pm.ZeroInflatedNegativeBinomial
                if kind.startswith("zinb")
                else (pm.HurdleNegativeBinomial)
            )
            dist("y", psi=psi, mu=pm.math.exp(a + b * x), alpha=alpha, observed=y)
        elif kind.startswith(("zip", "hurdle")):
            # Extreme rows: large counts, zeros where the Poisson mean is large, |x| = 12.
            x[:4] = [12.0, -12.0, 6.0, -6.0]
            y = np.where(rng.uniform(size=N) < 0.7, rng.poisson(np.exp(0.4 + 0.3 * x)), 0)
            y[4:8] = [0, 0, 60, 1]
            psi = pm.Beta("psi", 2.0, 2.0) if kind.endswith("free_psi") else 0.7
            dist = pm.ZeroInflatedPoisson if kind.startswith("zip") else pm.HurdlePoisson
            dist("y", psi=psi, mu=pm.math.exp(a + b * x), observed=y)
        elif kind.startswith("ordered"):
            # Four categories with free ordered cutpoints; extreme rows: |x| = 12 in the
            # lowest and highest categories and against them (an outlier each way).
            x[:4] = [12.0, -12.0, 12.0, -12.0]
            latent = 0.8 * x + (
                rng.logistic(size=N) if kind.endswith("logistic") else rng.normal(size=N)
            )
            y = np.searchsorted(np.array([-1.0, 0.2, 1.1]), latent)
            y[:4] = [3, 0, 0, 3]
            cutpoints = pm.Normal(
                "cutpoints",
                mu=[-1.0, 0.0, 1.0],
                sigma=3.0,
                shape=3,
                transform=pm.distributions.transforms.ordered,
            )
            dist = pm.OrderedLogistic if kind.endswith("logistic") else pm.OrderedProbit
            x2 = rng.normal(size=N)  # a second slope: an intercept would duplicate c_1
            dist("y", eta=a * x2 + b * x, cutpoints=cutpoints, observed=y)
        elif kind.startswith("beta"):
            # Extreme rows: observations 1e-6 and 1 - 1e-6 (also where the mean is far
            # from them), |x| = 12.
            x[:4] = [12.0, -12.0, 6.0, -6.0]
            mean = special.expit(0.3 + 0.5 * x)
            y = rng.beta(6.0 * mean, 6.0 * (1.0 - mean))
            y[4:8] = [1e-6, 1.0 - 1e-6, 1e-6, 1.0 - 1e-6]
            y = np.clip(y, 1e-9, 1.0 - 1e-9)
            nu = pm.HalfNormal("nu", 20.0) if kind == "beta_free_precision" else 6.0
            pm.Beta("y", mu=pm.math.invlogit(a + b * x), nu=nu, observed=y)
        elif kind.endswith("row_scale"):
            # Heteroscedastic: log sigma = c + g z, with extreme rows (|x| = 12, |z| = 8,
            # outlying observations).
            x[:4] = [12.0, -12.0, 6.0, -6.0]
            z = rng.normal(size=N)
            z[4:8] = [8.0, -8.0, 4.0, -4.0]
            noise = rng.normal(size=N) if kind == "normal_row_scale" else rng.standard_t(3, N)
            y = 1.0 - 0.5 * x + np.exp(-0.2 + 0.3 * z) * noise
            y[8:10] += [25.0, -40.0]
            c = pm.Normal("c", 0, 2)
            g = pm.Normal("g", 0, 1)
            sigma = pm.math.exp(c + g * z)
            if kind == "normal_row_scale":
                pm.Normal("y", a + b * x, sigma, observed=y)
            else:
                pm.StudentT("y", nu=3, mu=a + b * x, sigma=sigma, observed=y)
        else:
            sigma = pm.HalfNormal("sigma", 2)
            noise = rng.normal(size=N) if kind == "normal_free_scale" else rng.standard_t(3, N)
            y = 1.0 - 0.5 * x + 0.8 * noise
            if kind == "normal_free_scale":
                pm.Normal("y", a + b * x, sigma, observed=y)
            else:
                pm.StudentT("y", nu=3, mu=a + b * x, sigma=sigma, observed=y)
        map_point = pm.find_MAP(progressbar=False)
    return model, map_point


def laplace_setup(model, map_point):
    """``(lp, q_map, region)``: the model's recognised likelihood, its MAP as a vector and
    the default trust region around it shaped by the likelihood's Laplace fit (a numeric
    Hessian of the summed log-likelihood)."""
    from finite_differences import numeric_hessian
    from pymc.pytensorf import make_shared_replacements

    from pymc_minibatch_mh.bounds.trust_region import TrustRegion, default_radius
    from pymc_minibatch_mh.likelihood import recognise_linear_predictor

    point = model.initial_point()
    shared = make_shared_replacements(point, model.value_vars, model)
    lp = recognise_linear_predictor(model, model.value_vars, shared=shared, initial_point=point)
    q_map = np.concatenate(
        [np.atleast_1d(map_point[v.name]).astype(float) for v in model.value_vars]
    )
    hess = numeric_hessian(lambda q: float(lp.loglik(q).sum()), q_map)
    chol = np.linalg.cholesky(np.linalg.inv(-hess))
    return lp, q_map, TrustRegion(q_map, chol, default_radius(q_map.size))
