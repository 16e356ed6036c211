"""Demo: minibatch MH against NUTS on a synthetic tall logistic regression.

Run with ``python -m pymc_minibatch_mh.demo [--n-data N] [--draws D] [--tune T]``.

Every step runs with its defaults (``MinibatchBarker()``, the recommended default step,
``TunaMH()``, ...): control variates (a second-order Taylor expansion around the MAP
whose full-data sum enters exactly) and moves that read no data (on this model, with a
Normal prior on every coefficient, the exact Hamiltonian flow of the Gaussian made of the
prior and the Taylor proxy; FlyMC moves by HMC given its bright rows), so each MH step
reads a handful of rows at temperature 1. The demo runs NUTS, the approximate
MinibatchBarker and Austere and the exact TunaMH and FlyMC in one process and prints the
compare() table: time, ESS/s, data per draw and the error of every posterior mean and sd
against NUTS.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH, compare
from pymc_minibatch_mh.bench.problems import logistic_model


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-data", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=5)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    print(
        f"Synthetic logistic regression: N = {args.n_data:,}, {args.features} covariates + "
        "intercept, temperature 1; 2 chains each."
    )
    model = logistic_model(args.n_data, args.features, seed=args.seed)
    start = time.perf_counter()
    table = compare(
        model,
        {
            "TunaMH() (exact)": TunaMH,
            "FlyMC() (exact)": FlyMC,
            "MinibatchBarker() (approx.)": MinibatchBarker,
            "Austere() (approx.)": Austere,
        },
        draws=args.draws,
        tune=args.tune,
        chains=2,
        cores=2,
        random_seed=args.seed,
    )
    table["ess_per_s_vs_nuts"] = table["ess_per_s"] / table.loc["nuts", "ess_per_s"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(3).to_string())
    print(
        "\nmean_batch_size: data points read per draw (N for NUTS); setup_s: the MAP search, "
        "whose last pass over the data gives the Taylor sums; max_mean_err_sd / max_sd_rel_err: "
        "largest error of a posterior mean (in NUTS sds) / sd (relative) against NUTS.\n"
        f"Total time {time.perf_counter() - start:.0f} s."
    )
    return table


if __name__ == "__main__":
    main()
