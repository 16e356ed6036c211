"""Diagnosing a minibatch MCMC run with ArviZ.

Run ``python examples/diagnostics_with_arviz.py [--quick] [--out DIR]``. It writes four
PNG files to ``DIR`` (default: the current directory), two per run ("good" and "bad"):

* ``rank_plots_good.png``, ``rank_plots_bad.png``: ArviZ's rank plots of the chains;
* ``data_use_good.png``, ``data_use_bad.png``: the rows each draw read and the running
  acceptance rate, per chain (:func:`pymc_minibatch_mh.diagnostics.plot_data_use`).

Minibatch steps return the same ``InferenceData`` (PyMC 5) or ``DataTree`` (PyMC 6) as
any PyMC sampler, so the usual convergence checks apply unchanged: R-hat, effective
sample sizes and rank plots. They also record what each draw cost and decided, as
sample stats:

* ``batch_size``: data rows read in the draw (summed over its MH steps);
* ``accepted``: whether a proposal was accepted (``accept``: the acceptance
  probability where the method has one);
* method-specific ones, e.g. ``clt_error`` for MinibatchBarker: a conservative bound on
  the error of the accept/reject decision caused by the normal approximation of the
  minibatch mean.

This script samples a small logistic regression twice, once well (control variates,
independent proposals) and once badly (plain random walk, no control variates, short
tuning), and shows how each diagnostic tells them apart. Last, it checks both steps
against NUTS the way one would on data too tall for NUTS: on the same random subsample
of the rows (``compare(..., n_rows=...)``), with a verdict per step. Group access is
written as ``idata["posterior"]`` and ``idata["sample_stats"]``, which works for both
``InferenceData`` and ``DataTree``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import arviz as az
import matplotlib
import numpy as np
import pandas as pd
import pymc as pm

from pymc_minibatch_mh import MinibatchBarker, compare
from pymc_minibatch_mh.diagnostics import check_mixing, plot_data_use

matplotlib.use("Agg")  # write files, open no windows

VAR_NAMES = ["alpha", "beta"]


def make_model(n_data: int, seed: int = 0) -> pm.Model:
    """Logistic regression with an intercept and three covariates."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_data, 3))
    y = rng.random(n_data) < 1.0 / (1.0 + np.exp(-(0.5 + x @ np.array([1.0, -0.5, 0.25]))))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 5.0, shape=3)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y.astype(np.int8))
    return model


def convergence_table(idata) -> pd.DataFrame:
    """ESS and R-hat per coordinate (the columns exist in ArviZ 0.x and 1.x)."""
    summary = az.summary(idata, var_names=VAR_NAMES, round_to="none")
    return pd.DataFrame(summary)[["mean", "sd", "ess_bulk", "ess_tail", "r_hat"]].astype(float)


def cost_table(idata, n_data: int) -> pd.DataFrame:
    """Per-chain summaries of the minibatch sample stats."""
    stats = idata["sample_stats"]
    batch = np.asarray(stats["batch_size"])  # shape (chain, draw)
    accepted = np.asarray(stats["accepted"])
    table = pd.DataFrame(
        {
            "mean batch": batch.mean(axis=1),
            "max batch": batch.max(axis=1),
            "draws reading all N (%)": 100 * (batch >= n_data).mean(axis=1),
            # With steps_per_draw > 1, `accepted` is True if any inner step accepted.
            "accept rate": accepted.mean(axis=1),
        }
    )
    if "clt_error" in stats:
        # A conservative (Berry-Esseen type) bound on each decision's error; it is 0 on
        # full-data decisions and often above 1 (vacuous) for batches of a few hundred,
        # which does not mean the decisions are wrong. The empirical check is the
        # comparison against NUTS at the end.
        table["median clt_error"] = np.nanmedian(np.asarray(stats["clt_error"]), axis=1)
    table.index.name = "chain"
    return table


def save_rank_plots(idata, path: Path) -> None:
    """Rank plots: for well-mixed chains each chain's ranks are uniform."""
    plot = az.plot_rank(idata, var_names=VAR_NAMES)
    if hasattr(plot, "savefig"):  # ArviZ 1.x returns a PlotCollection
        plot.savefig(path)
    else:  # ArviZ 0.x returns matplotlib axes
        np.ravel(plot)[0].figure.savefig(path)
    import matplotlib.pyplot as plt

    plt.close("all")


def save_data_use_plot(idata, n_data: int, path: Path) -> None:
    """Rows read per draw and running acceptance rate, per chain."""
    axes = plot_data_use(idata, n_data=n_data)
    axes[0].figure.savefig(path)
    import matplotlib.pyplot as plt

    plt.close(axes[0].figure)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller N and fewer draws")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for the PNGs")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    pd.set_option("display.width", 160)

    n_data = 5_000 if args.quick else 20_000
    draws, tune = (500, 500) if args.quick else (1000, 1000)
    model = make_model(n_data)

    # 1. Sample: four chains, so that R-hat and rank plots can compare them.
    def good_step():
        return MinibatchBarker(progressbar=False)  # the defaults

    def bad_step():
        # Plain random walk without control variates, and hardly any tuning: at
        # temperature 1 its minibatch test needs nearly all the data, and the step size
        # has no time to adapt.
        return MinibatchBarker(proposal="rw", control_variates=False, progressbar=False)

    runs = {}
    for label, factory, n_tune in [("good", good_step, tune), ("bad", bad_step, 20)]:
        with model:
            runs[label] = pm.sample(
                draws=draws,
                tune=n_tune,
                chains=4,
                cores=1,
                step=factory(),
                random_seed=1,
                progressbar=False,
                compute_convergence_checks=False,
            )

    for label, idata in runs.items():
        print(f"\n=== {label} run ===")
        # 2. R-hat and ESS. Rules of thumb (Vehtari et al. 2021): r_hat below 1.01 and
        #    ess_bulk / ess_tail above about 100 per chain before trusting means,
        #    quantiles and intervals.
        conv = convergence_table(idata)  # unrounded: 1.006 is below 1.01
        print(conv.round(3).to_string())
        ok = bool((conv["r_hat"] < 1.01).all() and (conv["ess_bulk"] > 100 * 4).all())
        print(f"R-hat < 1.01 and bulk ESS > 400 everywhere: {ok}")
        # The package's own check reads the same ArviZ numbers against looser limits
        # (R-hat 1.05, bulk ESS 10 per chain) and says in words what is wrong.
        problems = check_mixing(idata, VAR_NAMES, warn=False)
        print(f"check_mixing: {problems or 'no problem found'}")

        # 3. The cost and decisions recorded by the step method. A mean batch close to N
        #    means the minibatch test fell back to (nearly) the full data: no saving. A
        #    very low acceptance rate with tiny batches means the step size collapsed.
        print(cost_table(idata, n_data).round(4).to_string())

        # 4. Rank plots: the ranks of each chain's draws among all draws. Flat
        #    histograms mean the chains agree; slopes or humps mean they do not.
        path = args.out / f"rank_plots_{label}.png"
        save_rank_plots(idata, path)
        print(f"rank plots written to {path}")

        # 5. Data use: rows read per draw (spikes towards N mean the minibatch test
        #    needed most of the data) and the running acceptance rate of each chain.
        path = args.out / f"data_use_{label}.png"
        save_data_use_plot(idata, n_data, path)
        print(f"data use plot written to {path}")

    # 6. Accuracy and cost against NUTS in one table. On tall data NUTS cannot read all
    #    the rows, so compare() samples NUTS and both steps on the same random quarter of
    #    the rows (with the same seed) and says whether each step agrees with NUTS there.
    table = compare(
        model,
        {"MinibatchBarker()": good_step, "barker rw, no cv": bad_step},
        n_rows=n_data // 4,
        draws=draws,
        tune=tune,
        chains=2,
        cores=1,
        random_seed=1,
    )
    print("\n=== compare() against NUTS on a subsample ===")
    print(table.drop(columns=["verdict", "agrees"]).round(4).to_string())
    print(table.attrs["summary"])
    return table


if __name__ == "__main__":
    main()
