"""FlyMC likelihood queries per draw and ESS per query against full-data random-walk MH.

Usage::

    python benchmarks/firefly_queries.py [--config mnist-like|tall|both] [--draws 10000]

Reproduces the shape of the logistic-regression row of Table 1 of Maclaurin & Adams
(2014) (MNIST 7 vs 9: 50 principal components plus a bias, N = 12,214; regular MCMC
12,214 queries per iteration, untuned FlyMC 6,252, MAP-tuned FlyMC 207 and a 22x
speed-up) on synthetic data of the same size (MNIST is not shipped), plus a "tall"
configuration (N = 10^5, 4 parameters). All samplers are random-walk Metropolis
tuned to acceptance 0.234 with the package's covariance adaptation, one chain each,
started at the MAP so that every sampler is measured after the same burn-in:

* regular MCMC: :class:`~pymc_minibatch_mh.Austere` with ``epsilon=0`` (exact MH on
  all N data every iteration);
* untuned FlyMC (Jaakkola–Jordan, ``xi = 1.5``) and MAP-tuned FlyMC, with the
  default ``q_db`` (tuned to the bright fraction) and with the paper's fixed values.

"Queries" are per-datum likelihood evaluations per draw (the ``batch_size`` stat;
full MH counts N, as in the paper, since the current state's values are cached).
ESS is ArviZ's bulk ESS, averaged over coordinates (the minimum is also shown);
speed-up = (ESS per query) / (ESS per query of regular MCMC), the rule that
reproduces the paper's table. Writes ``benchmarks/results/firefly_queries.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pymc as pm
from scipy import special
from single_chain import timed_single_chain

from pymc_minibatch_mh.diagnostics.compare import ess_bulk_per_coordinate
from pymc_minibatch_mh.step_methods.austere import Austere
from pymc_minibatch_mh.step_methods.firefly import FlyMC

RESULTS = Path(__file__).resolve().parent / "results" / "firefly_queries.md"
PAPER_ROWS = [
    ("Regular MCMC", "12,214", "3.7", "(1)"),
    ("Untuned FlyMC", "6,252", "1.3", "0.7"),
    ("MAP-tuned FlyMC", "207", "1.4", "22"),
]


def make_data(config: str, seed: int):
    """Synthetic logistic-regression data: (design without bias, labels, prior sd)."""
    rng = np.random.default_rng(seed)
    if config == "mnist-like":
        n, d = 12_214, 50
        # principal-component-like features: decreasing variances
        scales = 3.0 / np.sqrt(np.arange(1, d + 1))
        x = rng.normal(size=(n, d)) * scales
        # logits with sd ~ 5.6 and ~91% accuracy: with xi = 1.5 about 41% of the data are
        # bright at the truth, as for the paper's untuned MNIST run (6,252 of 12,214 queries)
        w = rng.normal(size=d) / np.sqrt(d) * 6.0 / scales.mean()
        prior_sd = 2.0
    else:
        n, d = 100_000, 3
        x = rng.normal(size=(n, d))
        w = np.array([1.0, -0.7, 0.4])
        prior_sd = 5.0
    y = (rng.random(n) < special.expit(0.2 + x @ w)).astype(np.int8)
    return x, y, prior_sd


def build_model(x, y, prior_sd):
    with pm.Model() as model:
        bias = pm.Normal("bias", 0, prior_sd)
        w = pm.Normal("w", 0, prior_sd, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=bias + x @ w, observed=y)
    return model


def run(model, label, make_step, *, draws, tune, seed, start):
    with model:
        t0 = time.perf_counter()
        step = make_step()
        setup = time.perf_counter() - t0
    post, stats, wall = timed_single_chain(
        model, step, draws=draws, tune=tune, seed=seed, initvals=start
    )
    ess = ess_bulk_per_coordinate(post, ["bias", "w"])
    queries = float(np.asarray(stats["batch_size"]).mean())
    n_bright = float(np.asarray(stats["n_bright"]).mean()) if "n_bright" in stats else float("nan")
    row = {
        "label": label,
        "queries": queries,
        "n_bright": n_bright,
        "accept": float(np.asarray(stats["accepted"]).mean()),
        "ess_mean_per_1000": 1000 * float(np.mean(ess)) / draws,
        "ess_min_per_1000": 1000 * float(np.min(ess)) / draws,
        "ess_per_query": float(np.mean(ess)) / (draws * queries),
        "setup_s": setup,
        "wall_s": wall,
        "ess_per_s": float(np.mean(ess)) / wall,
        "q_db": getattr(step, "q_db", float("nan")),
    }
    print(
        f"  {label:<34} queries/draw {queries:>10.1f}  bright {n_bright:>8.1f}  "
        f"acc {row['accept']:.2f}  ESS/1000 {row['ess_mean_per_1000']:6.1f}  "
        f"ESS/query {row['ess_per_query']:.3g}  wall {wall:.1f}s",
        flush=True,
    )
    return row


def benchmark(config: str, *, draws: int, tune: int, regular_draws: int, seed: int) -> dict:
    x, y, prior_sd = make_data(config, seed)
    model = build_model(x, y, prior_sd)
    n = x.shape[0]
    print(f"{config}: N = {n}, D = {x.shape[1] + 1}", flush=True)
    with model:
        t0 = time.perf_counter()
        map_point = pm.find_MAP(progressbar=False)
        map_time = time.perf_counter() - t0
    start = {"bias": map_point["bias"], "w": map_point["w"]}
    common = {"tune": tune, "seed": seed + 1, "start": start}
    rows = [
        run(
            model,
            "Regular MCMC (full-data RW MH)",
            lambda: Austere(epsilon=0.0, proposal="rw", control_variates=False),
            draws=regular_draws,
            **common,
        ),
        run(
            model,
            "Untuned FlyMC (q_db tuned)",
            lambda: FlyMC(bound="untuned", proposal="rw", steps_per_draw=1),
            draws=draws,
            **common,
        ),
        run(
            model,
            "Untuned FlyMC (q_db = 0.1)",
            lambda: FlyMC(bound="untuned", q_db=0.1, proposal="rw", steps_per_draw=1),
            draws=draws,
            **common,
        ),
        run(
            model,
            "MAP-tuned FlyMC (q_db tuned)",
            lambda: FlyMC(map_point=map_point, proposal="rw", steps_per_draw=1),
            draws=draws,
            **common,
        ),
        run(
            model,
            "MAP-tuned FlyMC (q_db = 0.01)",
            lambda: FlyMC(map_point=map_point, q_db=0.01, proposal="rw", steps_per_draw=1),
            draws=draws,
            **common,
        ),
    ]
    base = rows[0]["ess_per_query"]
    for row in rows:
        row["speedup"] = row["ess_per_query"] / base
    return {
        "config": config,
        "n": n,
        "d": x.shape[1] + 1,
        "rows": rows,
        "map_s": map_time,
        "draws": draws,
        "regular_draws": regular_draws,
        "tune": tune,
    }


def to_markdown(results: list[dict], argv: str) -> str:
    lines = [
        "# FlyMC: likelihood queries per draw and ESS per query",
        "",
        f"Generated by `python benchmarks/firefly_queries.py {argv}`.",
        "Synthetic logistic regression; one chain per sampler started at the MAP; random-walk",
        "MH tuned to 0.234 (covariance adaptation on); speed-up = ESS per likelihood query",
        "relative to full-data random-walk MH. ESS is ArviZ bulk ESS (mean over coordinates,",
        "min in brackets) per 1000 draws; it is a single-chain estimate, so expect +-20%.",
        "",
    ]
    for res in results:
        lines += [
            f"## {res['config']} (N = {res['n']:,}, D = {res['d']})",
            "",
            f"Draws: {res['draws']} (regular MCMC: {res['regular_draws']}) after {res['tune']} "
            f"tuning draws. MAP by `pm.find_MAP`: {res['map_s']:.1f} s (not included below).",
            "",
            "| Algorithm | Queries / draw | Mean bright | Accept | ESS / 1000 draws "
            "| ESS / query | Speed-up | final q_db | Wall (s) | ESS / s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in res["rows"]:
            lines.append(
                f"| {r['label']} | {r['queries']:,.1f} | {r['n_bright']:,.1f} | "
                f"{r['accept']:.2f} | {r['ess_mean_per_1000']:.1f} ({r['ess_min_per_1000']:.1f}) | "
                f"{r['ess_per_query']:.3g} | {r['speedup']:,.1f} | {r['q_db']:.3g} | "
                f"{r['wall_s']:.1f} | {r['ess_per_s']:.1f} |"
            )
        lines.append("")
    lines += [
        "## Paper (Maclaurin & Adams 2014, Table 1, MNIST 7 vs 9, N = 12,214, D = 51)",
        "",
        "| Algorithm | Queries / iteration | ESS / 1000 iterations | Speed-up |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in PAPER_ROWS]
    lines += [
        "",
        "## Reading the numbers",
        "",
        "- Queries per draw count each likelihood evaluated in the draw once: bright points",
        "  at the proposal plus dark points proposed to brighten (FlyMC), N (full-data MH).",
        "- The synthetic MNIST-like data reproduce the paper's regular-MCMC efficiency and",
        "  untuned bright fraction, but Gaussian features leave far fewer points bright",
        "  under MAP-tuned bounds than real MNIST does (the paper's 207 queries at",
        "  q_db = 0.01 imply about 85 bright points), so the MAP-tuned speed-ups here are",
        "  larger than the paper's 22x; the row with the paper's q_db = 0.01 is the",
        "  closest analogue.",
        "- With q_db tuned to the bright fraction, a MAP-tuned draw costs about twice the",
        "  number of bright points, which does not grow with N: the tall configuration",
        "  shows the resulting ESS-per-query gains at N = 10^5.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=["mnist-like", "tall", "both"], default="both")
    parser.add_argument("--draws", type=int, default=10_000)
    parser.add_argument(
        "--regular-draws",
        type=int,
        default=None,
        help="draws for full-data MH (default: --draws; a quarter of it for "
        "the tall configuration, where each full-data step reads 10^5 rows)",
    )
    parser.add_argument("--tune", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    configs = ["mnist-like", "tall"] if args.config == "both" else [args.config]
    results = [
        benchmark(
            c,
            draws=args.draws,
            tune=args.tune,
            regular_draws=args.regular_draws or (args.draws if c != "tall" else args.draws // 4),
            seed=args.seed,
        )
        for c in configs
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    text = to_markdown(results, " ".join(argv) if argv is not None else "")
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
