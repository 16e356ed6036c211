"""Average data per draw of ``Austere`` against N, for a Gaussian-mean model.

Usage: ``python benchmarks/austere_data_use.py [--sizes 10000 100000 1000000]
[--epsilons 0.01 0.001] [--design-tolerances 0.02] [--draws 400] [--tune 300]
[--batch-size 500]``

For each N it samples ``y_i ~ N(mu, 1)`` with a N(0, 10^2) prior on ``mu`` (one
chain, temperature 1, random walk tuned to 0.234 acceptance), once per epsilon (with
``--batch-size``) and once per tolerance with ``(batch_size, epsilon)`` chosen by
:func:`pymc_minibatch_mh.design_austere_test`. It reports the mean and median rows
read per draw, that as a fraction of N, the share of draws that read all N rows, the
acceptance rate, the posterior sd relative to the exact one (the method's bias shows
up as a ratio above 1) with the bulk ESS behind it, the worst-case error and data
fraction of the test (dynamic program), and the wall time. The table goes to stdout
and to ``benchmarks/results/austere_data_use.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from single_chain import timed_single_chain

from pymc_minibatch_mh import Austere, design_austere_test
from pymc_minibatch_mh.kernels.austere_design import worst_case_error

RESULTS = Path(__file__).resolve().parent / "results" / "austere_data_use.md"
PRIOR_SD = 10.0


def _run(
    n_data: int, epsilon: float, batch_size: int, draws: int, tune: int, seed: int, chosen_by: str
) -> dict:
    rng = np.random.default_rng(seed)
    y = rng.normal(0.7, 1.0, size=n_data)
    precision = 1 / PRIOR_SD**2 + n_data
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, PRIOR_SD)
        pm.Normal("y", mu, 1.0, observed=y)
        step = Austere(
            batch_size=batch_size, epsilon=epsilon, proposal="rw", control_variates=False
        )
    posterior, stats, wall = timed_single_chain(
        model,
        step,
        draws=draws,
        tune=tune,
        seed=seed,
        initvals={"mu": float(y.sum() / precision)},
    )
    batch = np.asarray(stats["batch_size"]).ravel()
    draws_mu = np.asarray(posterior["mu"])
    worst_error, worst_fraction = worst_case_error(n_data, batch_size, epsilon)
    return {
        "N": n_data,
        "batch_size": batch_size,
        "epsilon": epsilon,
        "chosen_by": chosen_by,
        "mean_rows": float(batch.mean()),
        "median_rows": float(np.median(batch)),
        "fraction": float(batch.mean() / n_data),
        "full_share": float(np.mean(batch == n_data)),
        "accept_rate": float(np.asarray(stats["accepted"]).mean()),
        "sd_ratio": float(draws_mu.std() * np.sqrt(precision)),
        "ess": float(az.ess(draws_mu, method="bulk")),
        "worst_case_error": worst_error,
        "worst_case_fraction": worst_fraction,
        "wall_s": wall,
    }


def _table(rows: list[dict], args) -> str:
    lines = [
        "# Austere: data read per draw vs N (Gaussian mean, temperature 1)",
        "",
        f"{args.tune} tuning + {args.draws} draws, one chain. `sd ratio` = posterior sd / "
        "exact sd (1 = unbiased; its relative Monte Carlo error is about 1/sqrt(2 ESS)). "
        "`worst E` and `worst frac` = error probability of one test and expected fraction "
        "read when the true mean sits on the threshold (dynamic program).",
        "",
        "| N | batch | epsilon | chosen by | mean rows/draw | median | fraction of N "
        "| draws reading all N | accept rate | sd ratio | ESS | worst E | worst frac "
        "| wall (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['N']:,} | {r['batch_size']} | {r['epsilon']:g} | {r['chosen_by']} "
            f"| {r['mean_rows']:,.0f} | {r['median_rows']:,.0f} | {r['fraction']:.2f} "
            f"| {r['full_share']:.2f} | {r['accept_rate']:.2f} | {r['sd_ratio']:.2f} "
            f"| {r['ess']:.0f} | {r['worst_case_error']:.3f} | {r['worst_case_fraction']:.2f} "
            f"| {r['wall_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.01, 0.001])
    parser.add_argument("--design-tolerances", type=float, nargs="*", default=[0.02])
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    rows = []
    for n_data in args.sizes:
        settings = [(args.batch_size, eps, "fixed") for eps in args.epsilons]
        for tolerance in args.design_tolerances:
            design = design_austere_test(n_data, tolerance)
            settings.append((design.batch_size, design.epsilon, f"design, tol {tolerance:g}"))
        for batch_size, epsilon, chosen_by in settings:
            rows.append(
                _run(n_data, epsilon, batch_size, args.draws, args.tune, args.seed, chosen_by)
            )
            print(rows[-1], flush=True)
    table = _table(rows, args)
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(table)
    return rows


if __name__ == "__main__":
    main()
