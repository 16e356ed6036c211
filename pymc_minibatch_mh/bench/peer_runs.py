"""One method of ``bench peers`` on one data file, run in a fresh process.

``python -m pymc_minibatch_mh.bench.peer_runs METHOD DATA OUT [--draws --tune --chains]``
loads the data from ``DATA`` (``.npz`` with ``x``, ``y`` and, for ``--kind
hierarchical``, ``group``), samples the posterior of the case's model with METHOD and
writes the draws and timings to ``OUT`` (``.npz``). The parent process times the whole
run (interpreter start to exit); the timings written here split it into import, setup
and sampling.

Methods: ``numpyro-nuts`` (full data; the accuracy reference of the logistic kind),
``numpyro-hmcecs`` (numpyro's energy-conserving subsampling HMC with a Taylor proxy at an
SVI MAP point, as in its documentation), ``pymc-nuts`` (PyMC's NUTS on the full data) and
our four steps called with no arguments: ``MinibatchBarker``, ``Austere``, ``TunaMH``,
``FlyMC``. The numpyro methods have models of the logistic and hierarchical kinds. Every
method writes its draws as one array of shape (chains, draws, coordinates) whose columns
follow :data:`DRAW_ORDER`, so runs of different methods compare column by column.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from functools import partial

import numpy as np

START = time.perf_counter()

#: numpyro HMCECS settings: subsample size, number of index blocks refreshed per
#: iteration, SVI steps and learning rate of the MAP fit that centres the proxy.
HMCECS_SUBSAMPLE = 1000
HMCECS_BLOCKS = 10
HMCECS_SVI_STEPS = 5000
HMCECS_SVI_LEARNING_RATE = 0.01
PRIOR_SD = 5.0
GROUP_SCALE_SD = 2.0
LKJ_ETA = 2.0
OUR_STEPS = ("MinibatchBarker", "Austere", "TunaMH", "FlyMC")
METHODS = ("numpyro-nuts", "numpyro-hmcecs", "pymc-nuts", *OUR_STEPS)
GROUP_KINDS = ("hierarchical", "users", "users_noncentred", "lkj_slopes")
KINDS = ("logistic", "linear", *GROUP_KINDS)
NUMPYRO_KINDS = ("logistic", *GROUP_KINDS)
#: Free variables of each kind in the order of the draws' columns (vectors flattened).
DRAW_ORDER = {
    "logistic": ("alpha", "beta"),
    "linear": ("alpha", "beta", "sigma"),
    "hierarchical": ("beta", "mu_a", "sigma_a", "a", "sigma"),
    "users": ("beta", "mu_a", "sigma_a", "a"),
    "users_noncentred": ("beta", "mu_a", "sigma_a", "a"),
    "lkj_slopes": ("beta", "mu_ab", "sd_ab", "rho", "ab", "sigma"),
}
#: Bytes HMCECS holds per parameter and squared subsample row per chain: its proxy keeps
#: per-row second derivatives of the whole subsample. Fitted to the peak memory of two
#: chains at once on 100, 200 and 500 group intercepts (5.0, 9.7 and 22.7 GB with 1000
#: rows), about 2.8 times the 8 bytes of one float per entry.
HMCECS_BYTES_PER_ENTRY = 2.8 * 8


def stack_draws(samples: Mapping, kind: str, chains: int, draws: int) -> np.ndarray:
    """One ``(chains, draws, coordinates)`` array of the kind's variables in DRAW_ORDER.

    Parameters
    ----------
    samples
        Mapping from variable name to draws of shape ``(chains, draws, *shape)``.
    kind
        The case's model kind, a key of :data:`DRAW_ORDER`.
    chains, draws
        Number of chains and of draws per chain.
    """
    columns = [np.asarray(samples[name]).reshape(chains, draws, -1) for name in DRAW_ORDER[kind]]
    return np.concatenate(columns, axis=-1)


def _numpyro_model(kind: str, groups: int):
    """The case's model in numpyro, ``model(data, subsample_size=None)``.

    The rows sit in a ``numpyro.plate`` that HMCECS subsamples; ``data`` holds ``x``,
    ``y`` and, for the kinds with groups, ``group`` as jax arrays. Variables that PyMC
    computes as Deterministics (the non-centred effects, the LKJ model's ``rho``) are
    ``numpyro.deterministic`` sites of the same name.
    """
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def logistic(data, subsample_size=None):
        d = data["x"].shape[1]
        alpha = numpyro.sample("alpha", dist.Normal(0.0, PRIOR_SD))
        beta = numpyro.sample("beta", dist.Normal(jnp.zeros(d), PRIOR_SD).to_event(1))
        with numpyro.plate("rows", data["y"].shape[0], subsample_size=subsample_size):
            xb = numpyro.subsample(data["x"], event_dim=1)
            yb = numpyro.subsample(data["y"], event_dim=0)
            numpyro.sample("y", dist.Bernoulli(logits=alpha + xb @ beta), obs=yb)

    def hierarchical(data, subsample_size=None):
        d = data["x"].shape[1]
        beta = numpyro.sample("beta", dist.Normal(jnp.zeros(d), PRIOR_SD).to_event(1))
        mu_a = numpyro.sample("mu_a", dist.Normal(0.0, PRIOR_SD))
        sigma_a = numpyro.sample("sigma_a", dist.HalfNormal(GROUP_SCALE_SD))
        a = numpyro.sample("a", dist.Normal(mu_a, sigma_a).expand([groups]).to_event(1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(PRIOR_SD))
        with numpyro.plate("rows", data["y"].shape[0], subsample_size=subsample_size):
            xb = numpyro.subsample(data["x"], event_dim=1)
            gb = numpyro.subsample(data["group"], event_dim=0)
            yb = numpyro.subsample(data["y"], event_dim=0)
            numpyro.sample("y", dist.Normal(a[gb] + xb @ beta, sigma), obs=yb)

    def users(data, subsample_size=None, centred=True):
        d = data["x"].shape[1]
        beta = numpyro.sample("beta", dist.Normal(jnp.zeros(d), PRIOR_SD).to_event(1))
        mu_a = numpyro.sample("mu_a", dist.Normal(0.0, PRIOR_SD))
        sigma_a = numpyro.sample("sigma_a", dist.HalfNormal(GROUP_SCALE_SD))
        if centred:
            a = numpyro.sample("a", dist.Normal(mu_a, sigma_a).expand([groups]).to_event(1))
        else:
            z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([groups]).to_event(1))
            a = numpyro.deterministic("a", mu_a + sigma_a * z)
        with numpyro.plate("rows", data["y"].shape[0], subsample_size=subsample_size):
            xb = numpyro.subsample(data["x"], event_dim=1)
            gb = numpyro.subsample(data["group"], event_dim=0)
            yb = numpyro.subsample(data["y"], event_dim=0)
            numpyro.sample("y", dist.Bernoulli(logits=a[gb] + xb @ beta), obs=yb)

    def lkj_slopes(data, subsample_size=None):
        d = data["x"].shape[1]
        beta = numpyro.sample("beta", dist.Normal(jnp.zeros(d - 1), PRIOR_SD).to_event(1))
        mu_ab = numpyro.sample("mu_ab", dist.Normal(jnp.zeros(2), PRIOR_SD).to_event(1))
        sd_ab = numpyro.sample("sd_ab", dist.HalfNormal(jnp.full(2, GROUP_SCALE_SD)).to_event(1))
        corr_chol = numpyro.sample("corr_chol", dist.LKJCholesky(2, LKJ_ETA))
        numpyro.deterministic("rho", corr_chol[1, 0])
        z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([groups, 2]).to_event(2))
        ab = numpyro.deterministic("ab", mu_ab + z @ (sd_ab[:, None] * corr_chol).T)
        sigma = numpyro.sample("sigma", dist.HalfNormal(PRIOR_SD))
        with numpyro.plate("rows", data["y"].shape[0], subsample_size=subsample_size):
            xb = numpyro.subsample(data["x"], event_dim=1)
            gb = numpyro.subsample(data["group"], event_dim=0)
            yb = numpyro.subsample(data["y"], event_dim=0)
            mean = ab[gb, 0] + ab[gb, 1] * xb[:, 0] + xb[:, 1:] @ beta
            numpyro.sample("y", dist.Normal(mean, sigma), obs=yb)

    models = {
        "logistic": logistic,
        "hierarchical": hierarchical,
        "users": users,
        "users_noncentred": partial(users, centred=False),
        "lkj_slopes": lkj_slopes,
    }
    if kind not in models:
        raise ValueError(f"No numpyro model of kind {kind!r}; kinds: {NUMPYRO_KINDS}.")
    return models[kind]


def _numpyro(method: str, data: dict, draws: int, tune: int, chains: int, seed: int, kind: str):
    import numpyro

    numpyro.set_host_device_count(chains)
    import jax
    import jax.numpy as jnp
    from numpyro.infer import HMCECS, MCMC, NUTS, SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoDelta

    imported = time.perf_counter()
    n = data["x"].shape[0]
    model = _numpyro_model(kind, _groups(data))
    if method == "numpyro-hmcecs":
        _check_hmcecs_memory(model, data, chains)
    arrays = {key: jnp.asarray(value) for key, value in data.items()}
    key = jax.random.PRNGKey(seed)
    map_s = 0.0
    if method == "numpyro-hmcecs":
        svi_key, key = jax.random.split(key)
        guide = AutoDelta(model)
        svi = SVI(model, guide, numpyro.optim.Adam(HMCECS_SVI_LEARNING_RATE), Trace_ELBO())
        t = time.perf_counter()
        fit = svi.run(svi_key, HMCECS_SVI_STEPS, arrays, HMCECS_SUBSAMPLE, progress_bar=False)
        jax.block_until_ready(fit.params)  # jax returns before it has computed
        map_s = time.perf_counter() - t
        reference = {name.removesuffix("_auto_loc"): value for name, value in fit.params.items()}
        kernel = HMCECS(NUTS(model), num_blocks=HMCECS_BLOCKS, proxy=HMCECS.taylor_proxy(reference))
        args = (arrays, HMCECS_SUBSAMPLE)
    else:
        kernel = NUTS(model)
        args = (arrays,)
    mcmc = MCMC(
        kernel,
        num_warmup=tune,
        num_samples=draws,
        num_chains=chains,
        chain_method=_chain_method(method, _groups(data)),
        progress_bar=False,
    )
    t = time.perf_counter()
    mcmc.run(key, *args)
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    sampling_s = time.perf_counter() - t
    in_process_s = time.perf_counter() - imported
    return {
        "draws": stack_draws(samples, kind, chains, draws),
        "import_s": imported - START,
        "setup_s": map_s,
        "sampling_s": sampling_s,
        "in_process_s": in_process_s,
        "rows_per_draw": float(HMCECS_SUBSAMPLE if method == "numpyro-hmcecs" else n),
    }


#: Above this many group intercepts HMCECS runs its chains one after the other: its
#: second-order proxy holds a D x D Hessian per subsampled row, and two chains at once
#: with 500 groups (505 parameters) were killed at 22.7 GB on a 24 GB machine (100
#: groups: 5.0 GB, 200: 9.7 GB).
HMCECS_SEQUENTIAL_ABOVE_GROUPS = 200


def _check_hmcecs_memory(model, data: dict, chains: int) -> None:
    """Refuse an HMCECS run that cannot fit in this machine's memory (MemoryError, whose
    message the benchmark reports in the method's row) instead of being killed by it."""
    import jax
    from numpyro.infer.util import initialize_model

    init = initialize_model(jax.random.PRNGKey(0), model, model_args=(data,))
    size = sum(int(np.size(v)) for v in init.param_info.z.values())
    at_once = 1 if _chain_method("numpyro-hmcecs", _groups(data)) == "sequential" else chains
    need = HMCECS_BYTES_PER_ENTRY * size * HMCECS_SUBSAMPLE**2 * at_once
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        raise MemoryError(
            f"not run: HMCECS's proxy holds second derivatives of all {HMCECS_SUBSAMPLE} "
            f"subsampled rows in each of {size} parameters, about {need / 1e9:.0f} GB, "
            f"more than this machine's {have / 1e9:.0f} GB"
        )


def _chain_method(method: str, groups: int) -> str:
    """numpyro's ``chain_method``: "parallel" except for HMCECS on many groups."""
    if method == "numpyro-hmcecs" and groups > HMCECS_SEQUENTIAL_ABOVE_GROUPS:
        return "sequential"
    return "parallel"


def _groups(data: dict) -> int:
    """Number of group intercepts: every group has rows, so the largest label plus one."""
    return int(data["group"].max()) + 1 if "group" in data else 0


def _pymc_model(kind: str, data: dict):
    """The case's model as a PyMC user writes it."""
    import pymc as pm

    if kind == "lkj_slopes":
        return _pymc_lkj_slopes(data)
    x, y = data["x"], data["y"]
    d = x.shape[1]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, PRIOR_SD, shape=d)
        if kind == "logistic":
            alpha = pm.Normal("alpha", 0.0, PRIOR_SD)
            pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
        elif kind == "linear":
            alpha = pm.Normal("alpha", 0.0, PRIOR_SD)
            sigma = pm.HalfNormal("sigma", PRIOR_SD)
            pm.Normal("y", alpha + x @ beta, sigma, observed=y)
        elif kind in ("users", "users_noncentred"):
            mu_a = pm.Normal("mu_a", 0.0, PRIOR_SD)
            sigma_a = pm.HalfNormal("sigma_a", GROUP_SCALE_SD)
            if kind == "users":
                a = pm.Normal("a", mu_a, sigma_a, shape=_groups(data))
            else:
                z = pm.Normal("z", 0.0, 1.0, shape=_groups(data))
                a = pm.Deterministic("a", mu_a + sigma_a * z)
            pm.Bernoulli("y", logit_p=a[data["group"]] + x @ beta, observed=y)
        elif kind == "hierarchical":
            mu_a = pm.Normal("mu_a", 0.0, PRIOR_SD)
            sigma_a = pm.HalfNormal("sigma_a", GROUP_SCALE_SD)
            a = pm.Normal("a", mu_a, sigma_a, shape=_groups(data))
            sigma = pm.HalfNormal("sigma", PRIOR_SD)
            pm.Normal("y", a[data["group"]] + x @ beta, sigma, observed=y)
        else:
            raise ValueError(f"Unknown case kind {kind!r}.")
    return model


def _pymc_lkj_slopes(data: dict):
    """Intercepts and slopes of the first covariate by group, correlated through
    ``pm.LKJCholeskyCov`` and written non-centred, as PyMC's examples teach."""
    import pymc as pm

    x, y, group = data["x"], data["y"], data["group"]
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, PRIOR_SD, shape=x.shape[1] - 1)
        mu_ab = pm.Normal("mu_ab", 0.0, PRIOR_SD, shape=2)
        chol, corr, sd_ab = pm.LKJCholeskyCov(
            "chol", n=2, eta=LKJ_ETA, sd_dist=pm.HalfNormal.dist(GROUP_SCALE_SD, shape=2)
        )
        pm.Deterministic("sd_ab", sd_ab)
        pm.Deterministic("rho", corr[0, 1])
        z = pm.Normal("z", 0.0, 1.0, shape=(_groups(data), 2))
        ab = pm.Deterministic("ab", mu_ab + z @ chol.T)
        sigma = pm.HalfNormal("sigma", PRIOR_SD)
        mean = ab[group, 0] + ab[group, 1] * x[:, 0] + x[:, 1:] @ beta
        pm.Normal("y", mean, sigma, observed=y)
    return model


def _pymc(method: str, data: dict, draws: int, tune: int, chains: int, seed: int, kind: str):
    import pymc as pm

    import pymc_minibatch_mh as mm

    imported = time.perf_counter()
    n = data["x"].shape[0]
    model = _pymc_model(kind, data)
    extra = {}
    with model:
        t = time.perf_counter()
        step = None if method == "pymc-nuts" else getattr(mm, method)(progressbar=False)
        setup_s = time.perf_counter() - t
        t = time.perf_counter()
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=chains,
            step=step,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        sampling_s = time.perf_counter() - t
    in_process_s = time.perf_counter() - imported
    values = stack_draws(idata.posterior, kind, chains, draws)
    rows = float(n)
    if step is not None:
        rows = float(np.mean(np.asarray(idata.sample_stats["batch_size"])))
        extra["n_data_passes"] = float(getattr(step, "n_data_passes", -1))
        extra["setup_cache"] = str(getattr(step, "setup_cache", ""))
    return {
        "draws": values,
        "import_s": imported - START,
        "setup_s": setup_s,
        "sampling_s": sampling_s,
        "in_process_s": in_process_s,
        "rows_per_draw": rows,
        **extra,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pymc_minibatch_mh.bench.peer_runs")
    parser.add_argument("method", choices=METHODS)
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kind", default="logistic", choices=KINDS)
    args = parser.parse_args(argv)
    with np.load(args.data) as stored:
        data = {key: stored[key] for key in stored.files}
    if args.method.startswith("numpyro"):
        if args.kind not in NUMPYRO_KINDS:
            parser.error(f"the numpyro methods have models of kinds {NUMPYRO_KINDS} only")
        run = _numpyro
    else:
        run = _pymc
    result = run(args.method, data, args.draws, args.tune, args.chains, args.seed, args.kind)
    result["process_s"] = time.perf_counter() - START
    np.savez(args.out, **result)


if __name__ == "__main__":
    main(sys.argv[1:])
