"""One method of ``bench peers`` on one data file, run in a fresh process.

``python -m pymc_minibatch_mh.bench.peer_runs METHOD DATA OUT [--draws --tune --chains]``
loads the data from ``DATA`` (``.npz`` with ``x``, ``y`` and, for ``--kind
hierarchical``, ``group``), samples the posterior of the case's model with METHOD and
writes the draws and timings to ``OUT`` (``.npz``). The parent process times the whole
run (interpreter start to exit); the timings written here split it into import, setup
and sampling.

Methods: ``numpyro-nuts`` (full data, the accuracy reference), ``numpyro-hmcecs``
(numpyro's energy-conserving subsampling HMC with a Taylor proxy at an SVI MAP point,
as in its documentation), ``pymc-nuts`` (PyMC's NUTS on the full data) and our four
steps called with no arguments: ``MinibatchBarker``, ``Austere``, ``TunaMH``, ``FlyMC``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

START = time.perf_counter()

#: numpyro HMCECS settings: subsample size, number of index blocks refreshed per
#: iteration, SVI steps and learning rate of the MAP fit that centres the proxy.
HMCECS_SUBSAMPLE = 1000
HMCECS_BLOCKS = 10
HMCECS_SVI_STEPS = 5000
HMCECS_SVI_LEARNING_RATE = 0.01
PRIOR_SD = 5.0
OUR_STEPS = ("MinibatchBarker", "Austere", "TunaMH", "FlyMC")
METHODS = ("numpyro-nuts", "numpyro-hmcecs", "pymc-nuts", *OUR_STEPS)
KINDS = ("logistic", "linear", "hierarchical")


def _numpyro(method: str, x, y, draws: int, tune: int, chains: int, seed: int) -> dict:
    import numpyro

    numpyro.set_host_device_count(chains)
    import jax
    import jax.numpy as jnp
    import numpyro.distributions as dist
    from numpyro.infer import HMCECS, MCMC, NUTS, SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoDelta

    imported = time.perf_counter()
    n, d = x.shape
    x, y = jnp.asarray(x), jnp.asarray(y)

    def model(x, y, subsample_size=None):
        alpha = numpyro.sample("alpha", dist.Normal(0.0, PRIOR_SD))
        beta = numpyro.sample("beta", dist.Normal(jnp.zeros(d), PRIOR_SD).to_event(1))
        with numpyro.plate("rows", n, subsample_size=subsample_size):
            xb = numpyro.subsample(x, event_dim=1)
            yb = numpyro.subsample(y, event_dim=0)
            numpyro.sample("y", dist.Bernoulli(logits=alpha + xb @ beta), obs=yb)

    key = jax.random.PRNGKey(seed)
    map_s = 0.0
    if method == "numpyro-hmcecs":
        svi_key, key = jax.random.split(key)
        guide = AutoDelta(model)
        svi = SVI(model, guide, numpyro.optim.Adam(HMCECS_SVI_LEARNING_RATE), Trace_ELBO())
        t = time.perf_counter()
        fit = svi.run(svi_key, HMCECS_SVI_STEPS, x, y, HMCECS_SUBSAMPLE, progress_bar=False)
        map_s = time.perf_counter() - t
        reference = {name.removesuffix("_auto_loc"): value for name, value in fit.params.items()}
        kernel = HMCECS(NUTS(model), num_blocks=HMCECS_BLOCKS, proxy=HMCECS.taylor_proxy(reference))
        args = (x, y, HMCECS_SUBSAMPLE)
    else:
        kernel = NUTS(model)
        args = (x, y)
    mcmc = MCMC(
        kernel,
        num_warmup=tune,
        num_samples=draws,
        num_chains=chains,
        chain_method="parallel",
        progress_bar=False,
    )
    t = time.perf_counter()
    mcmc.run(key, *args)
    sampling_s = time.perf_counter() - t
    samples = mcmc.get_samples(group_by_chain=True)
    alpha = np.asarray(samples["alpha"])[..., None]
    return {
        "draws": np.concatenate([alpha, np.asarray(samples["beta"])], axis=-1),
        "import_s": imported - START,
        "setup_s": map_s,
        "sampling_s": sampling_s,
        "rows_per_draw": float(HMCECS_SUBSAMPLE if method == "numpyro-hmcecs" else n),
    }


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
            sigma_a = pm.HalfNormal("sigma_a", 2.0)
            a = pm.Normal("a", mu_a, sigma_a, shape=int(data["group"].max()) + 1)
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
    posterior = idata.posterior
    names = [v.name for v in model.free_RVs]  # alpha before beta, as numpyro's draws
    names = sorted(names, key=lambda name: name != "alpha")
    values = np.concatenate(
        [np.asarray(posterior[name]).reshape(chains, draws, -1) for name in names], axis=-1
    )
    rows = float(n)
    if step is not None:
        rows = float(np.mean(np.asarray(idata.sample_stats["batch_size"])))
        extra["n_data_passes"] = float(getattr(step, "n_data_passes", -1))
    return {
        "draws": values,
        "import_s": imported - START,
        "setup_s": setup_s,
        "sampling_s": sampling_s,
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
        if args.kind != "logistic":
            parser.error("the numpyro methods run the logistic case only")
        result = _numpyro(
            args.method, data["x"], data["y"], args.draws, args.tune, args.chains, args.seed
        )
    else:
        result = _pymc(args.method, data, args.draws, args.tune, args.chains, args.seed, args.kind)
    result["process_s"] = time.perf_counter() - START
    np.savez(args.out, **result)


if __name__ == "__main__":
    main(sys.argv[1:])
