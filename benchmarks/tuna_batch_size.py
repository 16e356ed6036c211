"""TunaMH batch size against chi and against N (logistic regression).

Usage: ``python benchmarks/tuna_batch_size.py [--quick] [--out PATH]`` (default output
benchmarks/results/tuna_batch_size.md).

Part 1, batch vs chi, mirrors the paper's MNIST 7-vs-9 sweep on synthetic data of
the same shape (no MNIST download): N = 12,214, 50 features whose variances decay
like PCA scores and sum to 42 (about the variance the first 50 principal components
of MNIST digits carry), no intercept, flat prior, Gaussian random walk with
per-coordinate sd 1e-3 and no tuning, as in the authors' code. With the step fixed,
``E[B] = chi C^2 E[M^2] + C E[M]`` is known in closed form and printed next to the
measured mean of ``B``. A second table re-tunes the step to 25% acceptance for each
chi (the paper tuned step sizes per method).

Part 2, batch vs N: logistic regression with an intercept and two covariates,
N = 10^4 .. 10^6, automatic chi and step tuning, at temperature 1 and at a
temperature ``K = N / 1000`` that keeps the tempered posterior's width fixed.

The paper's sweep (MNIST, its own step sizes): chi = 1e-5 -> 504, 1e-4 -> 810,
5e-4 -> 2048. Absolute numbers depend on the data and the step; the trend (batch
growing with chi, near its floor C M when chi C^2 M^2 << 1) is what carries over.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pymc as pm
from scipy import special
from single_chain import timed_single_chain

from pymc_minibatch_mh.diagnostics.compare import ess_bulk_per_coordinate
from pymc_minibatch_mh.step_methods.tuna import TunaMH

PAPER = {1e-5: 504.07, 1e-4: 810.35, 5e-4: 2047.91}
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "tuna_batch_size.md"


def _mnist_like(seed: int = 0, n: int = 12_214, d: int = 50):
    rng = np.random.default_rng(seed)
    variances = 1.0 / np.arange(1, d + 1)
    variances *= 42.0 / variances.sum()
    x = rng.normal(size=(n, d)) * np.sqrt(variances)
    theta = rng.normal(size=d) / np.sqrt(variances) * 0.3
    y = (rng.random(n) < special.expit(x @ theta)).astype(int)
    return x, y


def _sample(model, step, draws, tune, seed):
    posterior, stats, wall = timed_single_chain(model, step, draws=draws, tune=tune, seed=seed)
    n_data = step.tall_data.n_data
    batch = np.asarray(stats["batch_size"]).ravel()
    draws_b = np.asarray(stats["poisson_draws"]).ravel()
    ess = min(ess_bulk_per_coordinate(posterior, list(posterior.data_vars)))
    return {
        "batch": float(batch.mean()),
        "poisson": float(draws_b.mean()),
        "kept": float(np.asarray(stats["n_kept"]).mean()),
        "accept": float(np.asarray(stats["accepted"]).mean()),
        "full": float(((draws_b == 0) & (batch >= n_data)).mean()),
        "chi": float(np.asarray(stats["chi"]).ravel()[-1]),
        "scaling": float(np.asarray(stats["scaling"]).ravel()[-1]),
        "ess_per_1000": 1000.0 * ess / len(batch),
        "wall": wall,
    }


def batch_vs_chi(iters: int, tune: int, chis: list) -> tuple[list, list, float]:
    x, y = _mnist_like()
    n, d = x.shape
    with pm.Model() as model:
        theta = pm.Flat("theta", shape=d)
        pm.Bernoulli("y", logit_p=x @ theta, observed=y)
    total = float(np.linalg.norm(x, axis=1).sum())
    sd = 1e-3
    mean_m = sd * math.sqrt(2) * math.exp(special.gammaln((d + 1) / 2) - special.gammaln(d / 2))
    mean_m2 = sd**2 * d
    fixed, tuned = [], []
    for k, chi in enumerate(chis):
        with model:
            step = TunaMH(
                chi=chi,
                control_variates=False,
                proposal_cov=np.full(d, sd**2),
                scaling=1.0,
                tune=False,
                adapt_cov=False,
                precondition=False,
            )
        row = _sample(model, step, iters, 0, seed=10 + k)
        chi_used = row["chi"]
        row["theory"] = chi_used * total**2 * mean_m2 + total * mean_m
        row["label"] = "auto" if chi is None else f"{chi:g}"
        row["paper"] = PAPER.get(chi)
        fixed.append(row)
        with model:
            step = TunaMH(
                chi=chi, proposal_cov=np.full(d, sd**2), scaling=1.0, control_variates=False
            )
        row = _sample(model, step, iters, tune, seed=20 + k)
        row["label"] = "auto" if chi is None else f"{chi:g}"
        tuned.append(row)
    return fixed, tuned, total


def batch_vs_n(sizes: list, draws: int, tune: int) -> list:
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        x = rng.normal(size=(n, 2))
        y = (rng.random(n) < special.expit(-0.5 + x @ np.array([1.0, -0.7]))).astype(int)
        with pm.Model() as model:
            alpha = pm.Normal("alpha", 0, 5)
            beta = pm.Normal("beta", 0, 5, shape=2)
            pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
        for temperature in (1.0, n / 1000.0):
            with model:
                step = TunaMH(temperature=temperature, proposal="rw", control_variates=False)
            row = _sample(model, step, draws, tune, seed=n % 1000 + 1)
            row.update(n=n, temperature=temperature)
            rows.append(row)
    return rows


def chi_efficiency(n: int, temperature: float, chis: list, draws: int, tune: int) -> list:
    """Mixing per iteration, per datum and per second against chi (tuned step each time)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 2))
    y = (rng.random(n) < special.expit(-0.5 + x @ np.array([1.0, -0.7]))).astype(int)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    rows = []
    for k, chi in enumerate(chis):
        with model:
            step = TunaMH(temperature=temperature, chi=chi, proposal="rw", control_variates=False)
        row = _sample(model, step, draws, tune, seed=30 + k)
        row["label"] = "auto" if chi is None else f"{chi:g}"
        row["ess"] = row["ess_per_1000"] * draws / 1000.0
        rows.append(row)
    return rows


def _markdown(fixed, tuned, total, by_n, eff, args) -> str:
    lines = [
        "# TunaMH batch size",
        "",
        f"Generated by `benchmarks/tuna_batch_size.py{' --quick' if args.quick else ''}`. "
        "Batch = the Poisson draw B (ejected points included), or N on a full-data step; "
        "per MH iteration (one step per draw).",
        "",
        "## Batch vs chi (synthetic MNIST-shaped data, N = 12,214, D = 50, flat prior)",
        "",
        f"C = sum_i ||x_i|| = {total:,.0f}. Fixed random walk, sd 1e-3 per coordinate "
        f"(as in the paper's code), {args.chi_iters} iterations per chi.",
        "",
        "| chi | E[B] theory | mean B | mean kept | accept | paper (MNIST) |",
        "|---|---|---|---|---|---|",
    ]
    for r in fixed:
        paper = f"{r['paper']:.0f}" if r["paper"] else ""
        lines.append(
            f"| {r['label']} (used {r['chi']:.3g}) | {r['theory']:.1f} | {r['poisson']:.1f} | "
            f"{r['kept']:.1f} | {r['accept']:.2f} | {paper} |"
        )
    lines += [
        "",
        f"Same data, step tuned to 25% acceptance per chi ({args.tune} tuning iterations):",
        "",
        "| chi | tuned scaling | mean batch | accept | full-data steps | "
        "min ESS / 1000 it. | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in tuned:
        lines.append(
            f"| {r['label']} (used {r['chi']:.3g}) | {r['scaling']:.3g} | {r['batch']:.1f} | "
            f"{r['accept']:.2f} | {r['full']:.0%} | {r['ess_per_1000']:.1f} | {r['wall']:.1f} |"
        )
    lines += [
        "",
        "## Batch vs N (logistic regression, intercept + 2 covariates, automatic chi)",
        "",
        f"{args.tune} tuning + {args.draws} draws, one chain.",
        "",
        "| N | temperature | chi | tuned scaling | mean batch | batch / N | accept | "
        "full-data steps | min ESS / 1000 draws | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in by_n:
        lines.append(
            f"| {r['n']:,} | {r['temperature']:g} | {r['chi']:.3g} | {r['scaling']:.3g} | "
            f"{r['batch']:.1f} | {r['batch'] / r['n']:.2e} | {r['accept']:.2f} | "
            f"{r['full']:.0%} | {r['ess_per_1000']:.1f} | {r['wall']:.1f} |"
        )
    lines += [
        "",
        f"## Mixing against chi (N = {args.eff_n:,}, temperature {args.eff_k:g}, "
        "step tuned per chi)",
        "",
        f"{args.eff_tune} tuning + {args.eff_draws} draws, one chain; ESS is the minimum bulk "
        "ESS over the three coefficients.",
        "",
        "| chi | mean batch | accept | full-data steps | min ESS | ESS per 10^6 data read | "
        "ESS / s | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in eff:
        per_data = 1e6 * r["ess"] / (r["batch"] * args.eff_draws)
        lines.append(
            f"| {r['label']} (used {r['chi']:.3g}) | {r['batch']:.1f} | {r['accept']:.2f} | "
            f"{r['full']:.0%} | {r['ess']:.0f} | {per_data:.1f} | {r['ess'] / r['wall']:.1f} | "
            f"{r['wall']:.1f} |"
        )
    lines += [
        "",
        "Reading: with the step fixed, the mean Poisson draw matches chi C^2 E[M^2] + C E[M] "
        "(the growth with chi at a fixed step is mild); with the step re-tuned per chi, as "
        "in the paper, the batch grows much faster with chi, to compare with the paper's "
        "ratios 810/504 = 1.6 and 2048/504 = 4.1. At temperature 1 the automatic chi "
        "keeps batches near C M, and tuning shrinks the step until the ratio noise (which "
        "grows with C M) allows the target acceptance, so the chain moves slowly (low ESS "
        "per iteration); at a temperature proportional to N the batch stays flat in N. "
        "The last table shows the price of the paper's heuristic when the ratio noise "
        "dominates: a chi near 1 / (C M), i.e. a batch about twice its floor, divides the "
        "noise variance by about 3, lets the tuned step grow, and here gives more "
        "ESS per iteration, per datum read and per second than the heuristic's chi.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations and sizes")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.chi_iters = 500 if args.quick else 2000
    args.tune = 300 if args.quick else 1000
    args.draws = 300 if args.quick else 1000
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    fixed, tuned, total = batch_vs_chi(args.chi_iters, args.tune, [1e-5, 1e-4, 5e-4, None])
    by_n = batch_vs_n(sizes, args.draws, args.tune)
    args.eff_n, args.eff_k = 100_000, 100.0
    args.eff_tune = args.eff_draws = 500 if args.quick else 2000
    eff = chi_efficiency(
        args.eff_n, args.eff_k, [None, 1e-3, 1.3e-2, 1e-1], args.eff_draws, args.eff_tune
    )
    text = _markdown(fixed, tuned, total, by_n, eff, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
