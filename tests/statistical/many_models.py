"""Models with many parameters, written the way PyMC users write them.

The models of the many-parameter acceptance suite (``test_many_parameters.py``): crossed
non-centred random intercepts, 200 groups of unbalanced sizes (centred and non-centred),
varying intercepts and slopes (independent, and correlated through LKJCholeskyCov with a
Normal and a Bernoulli outcome), Bernoulli and Poisson multilevel models (100 centred
groups; 200 groups with non-centred intercepts and slopes), negative binomial counts of
300 stores, Bernoulli outcomes of 2,000 users, and a logistic regression with 100
features. Each
``build_<name>()`` returns a :class:`.user_models.UserCase` (NUTS reference cached as for
the defaults suite). Data are simulated with seeded numpy Generators; nothing is
downloaded.

Group sizes are unbalanced as in real data: the share of each group is drawn from a
Dirichlet(1) law, so the largest groups hold several times the mean and the smallest a
handful of rows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pymc as pm

from .user_models import UserCase

#: Rows of every many-parameter model.
N_MANY = 50_000
#: Groups of the Normal hierarchies (centred and non-centred).
N_GROUPS_MANY = 200
#: Groups of the varying-slopes model and of the Bernoulli / Poisson multilevel models.
N_GROUPS_GLM = 100
#: Levels of the two crossed factors.
CROSSED_LEVELS = (30, 20)
#: Features of the wide logistic regression.
N_FEATURES = 100


def unbalanced_groups(rng: np.random.Generator, n: int, groups: int) -> np.ndarray:
    """Group index of ``n`` rows, group shares from a Dirichlet(1) law, every group present."""
    shares = rng.dirichlet(np.ones(groups))
    index = rng.choice(groups, size=n, p=shares)
    index[:groups] = np.arange(groups)  # every group has at least one row
    return index


def build_crossed_noncentred(n: int | None = None) -> UserCase:
    """Two crossed non-centred random intercepts (30 x 20 levels), one covariate, free
    noise scale (N = 20,000): ``mu + sigma_a * z_a[i] + sigma_b * z_b[j] + b * x``."""
    n = 20_000 if n is None else n
    levels_a, levels_b = CROSSED_LEVELS
    rng = np.random.default_rng(7301)
    ia = rng.integers(0, levels_a, size=n)
    ib = rng.integers(0, levels_b, size=n)
    x = rng.normal(size=n)
    y = (
        0.5
        + rng.normal(0.0, 0.8, levels_a)[ia]
        + rng.normal(0.0, 0.5, levels_b)[ib]
        + 0.3 * x
        + rng.normal(size=n)
    )
    coords = {"store": np.arange(levels_a), "week": np.arange(levels_b)}
    with pm.Model(coords=coords) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        sigma_store = pm.HalfNormal("sigma_store", 1.0)
        sigma_week = pm.HalfNormal("sigma_week", 1.0)
        z_store = pm.Normal("z_store", 0.0, 1.0, dims="store")
        z_week = pm.Normal("z_week", 0.0, 1.0, dims="week")
        b = pm.Normal("b", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        eta = mu + sigma_store * z_store[ia] + sigma_week * z_week[ib] + b * x
        pm.Normal("y", eta, sigma, observed=y)
    names = ["mu", "sigma_store", "sigma_week", "z_store", "z_week", "b", "sigma"]
    # NUTS mixes slowly on this model (bulk ESS about 150 of 2 x 1000 draws for mu and
    # the effects): a longer reference run reaches the reference's ESS floor of 400.
    nuts_kwargs = {"draws": 8000, "target_accept": 0.9}
    return UserCase(
        "crossed_noncentred", model, names, n, False, nuts_seed=7401, nuts_kwargs=nuts_kwargs
    )


def _normal_groups(seed: int, n: int, *, noise_sd: float, group_sd: float):
    rng = np.random.default_rng(seed)
    group = unbalanced_groups(rng, n, N_GROUPS_MANY)
    x = rng.normal(size=n)
    y = rng.normal(1.0, group_sd, N_GROUPS_MANY)[group] - 0.6 * x + rng.normal(0, noise_sd, n)
    return group, x, y


def build_groups_centred(n: int | None = None) -> UserCase:
    """Centred Normal hierarchy, 200 groups of unbalanced sizes, free group and noise
    scales, ``pm.Data`` covariate (N = 50,000)."""
    n = N_MANY if n is None else n
    group, x, y = _normal_groups(7302, n, noise_sd=1.0, group_sd=0.5)
    with pm.Model(coords={"group": np.arange(N_GROUPS_MANY)}) as model:
        x_data = pm.Data("x", x)
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        a = pm.Normal("a", mu_a, sigma_a, dims="group")
        b = pm.Normal("b", 0.0, 1.0)
        sigma = pm.Exponential("sigma", 1.0)
        pm.Normal("y", a[group] + b * x_data, sigma, observed=y)
    names = ["mu_a", "sigma_a", "a", "b", "sigma"]
    return UserCase("groups_centred", model, names, n, False, nuts_seed=7402)


def build_groups_noncentred(n: int | None = None) -> UserCase:
    """Non-centred Normal hierarchy, 200 groups of unbalanced sizes, in the noisy regime
    where users pick that form (noise sd 4, group sd 0.3), with a Deterministic of the
    group intercepts (N = 50,000)."""
    n = N_MANY if n is None else n
    group, x, y = _normal_groups(7303, n, noise_sd=4.0, group_sd=0.3)
    with pm.Model(coords={"group": np.arange(N_GROUPS_MANY)}) as model:
        x_data = pm.Data("x", x)
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        z = pm.Normal("z", 0.0, 1.0, dims="group")
        a = pm.Deterministic("a", mu_a + sigma_a * z, dims="group")
        b = pm.Normal("b", 0.0, 1.0)
        sigma = pm.Exponential("sigma", 1.0)
        pm.Normal("y", a[group] + b * x_data, sigma, observed=y)
    names = ["mu_a", "sigma_a", "z", "b", "sigma", "a"]
    return UserCase("groups_noncentred", model, names, n, False, nuts_seed=7403)


def build_varying_slopes(n: int | None = None) -> UserCase:
    """Varying intercepts and slopes (100 groups, centred, independent scales), free noise
    scale (N = 50,000)."""
    n = N_MANY if n is None else n
    rng = np.random.default_rng(7304)
    group = unbalanced_groups(rng, n, N_GROUPS_GLM)
    x = rng.normal(size=n)
    a_true = rng.normal(1.0, 0.5, N_GROUPS_GLM)
    b_true = rng.normal(-0.6, 0.3, N_GROUPS_GLM)
    y = a_true[group] + b_true[group] * x + rng.normal(size=n)
    with pm.Model(coords={"group": np.arange(N_GROUPS_GLM)}) as model:
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        mu_b = pm.Normal("mu_b", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        sigma_b = pm.HalfNormal("sigma_b", 1.0)
        a = pm.Normal("a", mu_a, sigma_a, dims="group")
        b = pm.Normal("b", mu_b, sigma_b, dims="group")
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("y", a[group] + b[group] * x, sigma, observed=y)
    names = ["mu_a", "mu_b", "sigma_a", "sigma_b", "a", "b", "sigma"]
    return UserCase("varying_slopes", model, names, n, False, nuts_seed=7404)


def _glm_groups(seed: int, n: int, groups: int = N_GROUPS_GLM, spread: float = 0.6):
    rng = np.random.default_rng(seed)
    group = unbalanced_groups(rng, n, groups)
    x = rng.normal(size=(n, 2))
    eta = rng.normal(-0.3, spread, groups)[group] + x @ np.array([0.5, -0.3])
    return rng, group, x, eta


def _bernoulli_intercepts(
    name: str,
    seed: int,
    nuts_seed: int,
    n: int,
    groups: int,
    spread: float,
    dim: str,
    nuts_kwargs: dict | None = None,
) -> UserCase:
    """Bernoulli-logit outcomes with one centred intercept per group and two covariates."""
    rng, group, x, eta = _glm_groups(seed, n, groups, spread)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int8)
    with pm.Model(coords={dim: np.arange(groups), "feature": ["u", "v"]}) as model:
        mu_a = pm.Normal("mu_a", 0.0, 2.5)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        a = pm.Normal("a", mu_a, sigma_a, dims=dim)
        beta = pm.Normal("beta", 0.0, 1.0, dims="feature")
        pm.Bernoulli("y", logit_p=a[group] + pm.math.dot(x, beta), observed=y)
    names = ["mu_a", "sigma_a", "a", "beta"]
    return UserCase(
        name, model, names, n, False, nuts_seed=nuts_seed, nuts_kwargs=nuts_kwargs or {}
    )


def build_bernoulli_groups(n: int | None = None) -> UserCase:
    """Bernoulli-logit multilevel model: 100 centred group intercepts of unbalanced sizes,
    two covariates (N = 50,000)."""
    n = N_MANY if n is None else n
    return _bernoulli_intercepts("bernoulli_groups", 7305, 7405, n, N_GROUPS_GLM, 0.6, "group")


def build_poisson_groups(n: int | None = None) -> UserCase:
    """Poisson-log multilevel model: 100 centred group intercepts of unbalanced sizes, two
    covariates (N = 50,000)."""
    n = N_MANY if n is None else n
    rng, group, x, eta = _glm_groups(7306, n)
    y = rng.poisson(np.exp(eta))
    with pm.Model(coords={"group": np.arange(N_GROUPS_GLM), "feature": ["u", "v"]}) as model:
        mu_a = pm.Normal("mu_a", 0.0, 2.5)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        a = pm.Normal("a", mu_a, sigma_a, dims="group")
        beta = pm.Normal("beta", 0.0, 1.0, dims="feature")
        pm.Poisson("y", mu=pm.math.exp(a[group] + pm.math.dot(x, beta)), observed=y)
    names = ["mu_a", "sigma_a", "a", "beta"]
    return UserCase("poisson_groups", model, names, n, False, nuts_seed=7406)


def build_wide_logistic(n: int | None = None) -> UserCase:
    """Logistic regression with 100 features and an intercept, ``pm.Data`` design matrix
    (N = 50,000)."""
    n = N_MANY if n is None else n
    rng = np.random.default_rng(7307)
    x = rng.normal(size=(n, N_FEATURES))
    beta_true = rng.normal(0.0, 0.3, N_FEATURES)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.3 + x @ beta_true)))).astype(np.int8)
    with pm.Model(coords={"feature": np.arange(N_FEATURES)}) as model:
        X = pm.Data("X", x)
        intercept = pm.Normal("intercept", 0.0, 2.5)
        beta = pm.Normal("beta", 0.0, 1.0, dims="feature")
        pm.Bernoulli("y", logit_p=intercept + pm.math.dot(X, beta), observed=y)
    return UserCase("wide_logistic", model, ["intercept", "beta"], n, True, nuts_seed=7407)


#: Every many-parameter case by name.
def _lkj_effects(groups: int) -> pm.Model:
    """A model holding every group's intercept and slope ``ab``, correlated through
    ``pm.LKJCholeskyCov`` and written non-centred (``ab = mu + z @ chol.T``); the caller
    adds the outcome inside ``with``."""
    with pm.Model(coords={"group": np.arange(groups), "coef": ["a", "b"]}) as model:
        chol, corr, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True
        )
        pm.Deterministic("rho", corr[0, 1])
        mu = pm.Normal("mu", 0.0, 2.0, dims="coef")
        z = pm.Normal("z", 0.0, 1.0, dims=("group", "coef"))
        pm.Deterministic("ab", mu + pm.math.dot(z, chol.T), dims=("group", "coef"))
    return model


def build_lkj_slopes(n: int | None = None) -> UserCase:
    """Intercepts and slopes correlated through ``pm.LKJCholeskyCov``, written non-centred
    (``ab = mu + z @ chol.T``), 40 groups, Normal outcome with a free noise scale
    (N = 20,000, 86 parameters): the steps sample it through its centred twin, a Normal
    linear model in ``ab`` whose likelihood they sum exactly."""
    n = 20_000 if n is None else n
    groups = 40
    rng = np.random.default_rng(7308)
    group = rng.integers(0, groups, size=n)
    x = rng.normal(size=n)
    spread = np.linalg.cholesky(np.array([[0.5, 0.2], [0.2, 0.3]]))
    effects = np.array([1.0, -0.5]) + rng.normal(size=(groups, 2)) @ spread.T
    y = effects[group, 0] + effects[group, 1] * x + rng.normal(size=n)
    with _lkj_effects(groups) as model:
        eta = model["ab"][group, 0] + model["ab"][group, 1] * x
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("y", eta, sigma, observed=y)
    names = ["mu", "chol_stds", "rho", "z", "ab", "sigma"]
    # NUTS mixes slowly on the non-centred form when each group's rows pin its effects
    # down (2 x 2000 draws: smallest bulk ESS 217, r-hat 1.013): a longer reference run.
    long_run = {"chains": 4, "draws": 4000}
    return UserCase("lkj_slopes", model, names, n, False, nuts_seed=7408, nuts_kwargs=long_run)


#: Groups of the non-centred varying-slopes GLMs, stores of the negative binomial model and
#: users of the large Bernoulli model.
N_GROUPS_SLOPES = 200
N_STORES = 300
N_USERS = 2_000


def _noncentred_slopes(seed: int, n: int):
    """Data of 200 groups of unbalanced sizes with their own intercept and slope of x."""
    rng = np.random.default_rng(seed)
    group = unbalanced_groups(rng, n, N_GROUPS_SLOPES)
    x = rng.normal(size=n)
    a = rng.normal(-0.3, 0.5, N_GROUPS_SLOPES)
    b = rng.normal(0.4, 0.3, N_GROUPS_SLOPES)
    return rng, group, x, a[group] + b[group] * x


def _noncentred_slopes_model(group, x, y, family: str) -> pm.Model:
    coords = {"group": np.arange(N_GROUPS_SLOPES)}
    with pm.Model(coords=coords) as model:
        mu_a = pm.Normal("mu_a", 0.0, 2.0)
        mu_b = pm.Normal("mu_b", 0.0, 2.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        sigma_b = pm.HalfNormal("sigma_b", 1.0)
        z_a = pm.Normal("z_a", 0.0, 1.0, dims="group")
        z_b = pm.Normal("z_b", 0.0, 1.0, dims="group")
        a = pm.Deterministic("a", mu_a + sigma_a * z_a, dims="group")
        b = pm.Deterministic("b", mu_b + sigma_b * z_b, dims="group")
        eta = a[group] + b[group] * x
        if family == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=y)
        else:
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
    return model


def build_bernoulli_slopes_noncentred(n: int | None = None) -> UserCase:
    """Bernoulli outcome, 200 groups of unbalanced sizes with their own intercept and
    slope, both written non-centred (``a = mu_a + sigma_a * z_a``), N = 50,000 (404
    parameters)."""
    n = N_MANY if n is None else n
    rng, group, x, eta = _noncentred_slopes(7309, n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int8)
    model = _noncentred_slopes_model(group, x, y, "bernoulli")
    names = ["mu_a", "mu_b", "sigma_a", "sigma_b", "a", "b"]
    return UserCase("bernoulli_slopes_noncentred", model, names, n, False, nuts_seed=7409)


def build_poisson_slopes_noncentred(n: int | None = None) -> UserCase:
    """As :func:`build_bernoulli_slopes_noncentred` with a Poisson outcome, log link."""
    n = N_MANY if n is None else n
    rng, group, x, eta = _noncentred_slopes(7310, n)
    model = _noncentred_slopes_model(group, x, rng.poisson(np.exp(eta)), "poisson")
    names = ["mu_a", "mu_b", "sigma_a", "sigma_b", "a", "b"]
    # NUTS mixes slowly on the non-centred form of counts that pin every group down
    # (2 x 2000 draws: r-hat 1.035, smallest bulk ESS 164): a longer reference run.
    long_run = {"chains": 4, "draws": 4000}
    return UserCase(
        "poisson_slopes_noncentred", model, names, n, False, nuts_seed=7410, nuts_kwargs=long_run
    )


def build_lkj_bernoulli(n: int | None = None) -> UserCase:
    """Intercepts and slopes of 40 groups correlated through ``pm.LKJCholeskyCov``,
    non-centred, Bernoulli outcome (N = 20,000, 85 parameters)."""
    n = 20_000 if n is None else n
    groups = 40
    rng = np.random.default_rng(7311)
    group = rng.integers(0, groups, size=n)
    x = rng.normal(size=n)
    spread = np.linalg.cholesky(np.array([[0.4, 0.1], [0.1, 0.2]]))
    effects = np.array([-0.2, 0.5]) + rng.normal(size=(groups, 2)) @ spread.T
    eta = effects[group, 0] + effects[group, 1] * x
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int8)
    with _lkj_effects(groups) as model:
        ab = model["ab"]
        pm.Bernoulli("y", logit_p=ab[group, 0] + ab[group, 1] * x, observed=y)
    names = ["mu", "chol_stds", "rho", "ab"]
    long_run = {"chains": 4, "draws": 4000}
    return UserCase("lkj_bernoulli", model, names, n, False, nuts_seed=7411, nuts_kwargs=long_run)


def build_negbin_stores(n: int | None = None) -> UserCase:
    """Negative binomial counts of 300 stores of unbalanced sizes, centred store
    intercepts, one covariate and a free dispersion (N = 30,000, 304 parameters)."""
    n = 30_000 if n is None else n
    rng = np.random.default_rng(7312)
    store = unbalanced_groups(rng, n, N_STORES)
    x = rng.normal(size=n)
    mu = np.exp(rng.normal(1.0, 0.5, N_STORES)[store] + 0.3 * x)
    y = rng.negative_binomial(4.0, 4.0 / (4.0 + mu))
    with pm.Model(coords={"store": np.arange(N_STORES)}) as model:
        mu_a = pm.Normal("mu_a", 0.0, 2.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        a = pm.Normal("a", mu_a, sigma_a, dims="store")
        beta = pm.Normal("beta", 0.0, 1.0)
        alpha = pm.Exponential("alpha", 0.2)
        pm.NegativeBinomial("y", mu=pm.math.exp(a[store] + beta * x), alpha=alpha, observed=y)
    names = ["mu_a", "sigma_a", "a", "beta", "alpha"]
    return UserCase("negbin_stores", model, names, n, False, nuts_seed=7412)


def build_bernoulli_users(n: int | None = None) -> UserCase:
    """Bernoulli outcomes of 2,000 users of unbalanced sizes (about 25 rows each on
    average), centred user intercepts, two covariates (N = 50,000, 2,004 parameters)."""
    n = N_MANY if n is None else n
    # 2 chains x 2000 draws: largest r-hat over the 2,004 coordinates 1.012: four chains.
    return _bernoulli_intercepts(
        "bernoulli_users", 7313, 7413, n, N_USERS, 0.8, "user", nuts_kwargs={"chains": 4}
    )


MANY_BUILDERS: dict[str, Callable[..., UserCase]] = {
    "crossed_noncentred": build_crossed_noncentred,
    "groups_centred": build_groups_centred,
    "groups_noncentred": build_groups_noncentred,
    "varying_slopes": build_varying_slopes,
    "bernoulli_groups": build_bernoulli_groups,
    "poisson_groups": build_poisson_groups,
    "wide_logistic": build_wide_logistic,
    "lkj_slopes": build_lkj_slopes,
    "bernoulli_slopes_noncentred": build_bernoulli_slopes_noncentred,
    "poisson_slopes_noncentred": build_poisson_slopes_noncentred,
    "lkj_bernoulli": build_lkj_bernoulli,
    "negbin_stores": build_negbin_stores,
    "bernoulli_users": build_bernoulli_users,
}
