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
import sys
import time
from collections.abc import Mapping

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
OUR_STEPS = ("MinibatchBarker", "Austere", "TunaMH", "FlyMC")
METHODS = ("numpyro-nuts", "numpyro-hmcecs", "pymc-nuts", *OUR_STEPS)
KINDS = ("logistic", "linear", "hierarchical")
NUMPYRO_KINDS = ("logistic", "hierarchical")
#: Free variables of each kind in the order of the draws' columns (vectors flattened).
DRAW_ORDER = {
    "logistic": ("alpha", "beta"),
    "linear": ("alpha", "beta", "sigma"),
    "hierarchical": ("beta", "mu_a", "sigma_a", "a", "sigma"),
}


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
    ``y`` and, for the hierarchical kind, ``group`` as jax arrays.
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

    models = {"logistic": logistic, "hierarchical": hierarchical}
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
        elif kind == "hierarchical":
            mu_a = pm.Normal("mu_a", 0.0, PRIOR_SD)
            sigma_a = pm.HalfNormal("sigma_a", GROUP_SCALE_SD)
            a = pm.Normal("a", mu_a, sigma_a, shape=_groups(data))
            sigma = pm.HalfNormal("sigma", PRIOR_SD)
            pm.Normal("y", a[data["group"]] + x @ beta, sigma, observed=y)
        else:
            raise ValueError(f"Unknown case kind {kind!r}.")
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
