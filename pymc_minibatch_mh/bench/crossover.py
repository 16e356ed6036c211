"""``bench crossover``: from which number of rows each step beats PyMC's NUTS.

A minibatch step costs a fixed amount per draw (a subsample, a few full-data passes when
it is built) and NUTS a gradient over all N rows per leapfrog step, so NUTS wins on small
data and the steps on tall data. This experiment runs three models through the
``bench peers`` machinery (:mod:`pymc_minibatch_mh.bench.peers`: each method in a fresh
Python process on identical data, wall time from process start to exit) at several N:

1. linear regression, 10 covariates and an intercept, free noise scale;
2. a centred hierarchical Normal model, 20 group intercepts, 3 covariates, free scales;
3. logistic regression, 10 covariates and an intercept (numpyro's NUTS is the accuracy
   reference there, and numpyro's HMCECS runs too).

The two Normal models are summed exactly from sufficient statistics by every step (no row
is read while sampling), so their crossover measures the steps' fixed costs against
NUTS's per-row cost; the logistic regression reads rows in every draw.

For each step and model the crossover N is the smallest N from which the step's ESS per
second of wall time is at least PyMC's NUTS's at that N and at every larger N measured,
interpolated linearly in log N and log ratio between the two sizes around it (see
:func:`crossover_n`). A run that failed, or whose posterior means or sds are further from
the reference than :func:`counts` allows, counts as not paying off at that N whatever its
speed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pymc_minibatch_mh.bench.peer_runs import OUR_STEPS
from pymc_minibatch_mh.bench.peers import PeerCase, markdown_report, run_peers, write_reports
from pymc_minibatch_mh.bench.report import markdown_table

SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000)
QUICK_SIZES = (5_000, 20_000)
#: The models: (label, kind, covariates).
MODELS = (
    ("linear, free sigma, D=10+1", "linear", 10),
    ("20 group intercepts, D=3", "hierarchical", 3),
    ("logistic, D=10+1", "logistic", 10),
)
#: Accuracy a run needs to count: largest error of a posterior mean, in reference sds, and
#: largest relative error of a posterior sd (the acceptance bounds of the test suites),
#: each widened to :data:`NOISE_Z` standard errors of the difference when Monte Carlo
#: noise alone could exceed it (short runs).
MAX_MEAN_ERR_SD = 0.15
MAX_SD_REL_ERR = 0.15
NOISE_Z = 4.0

TITLE = "Crossover: from which N each step beats PyMC's NUTS"


def crossover_cases(sizes: Sequence[int], *, quick: bool = False) -> tuple[PeerCase, ...]:
    """One :class:`~pymc_minibatch_mh.bench.peers.PeerCase` per model and size."""
    draws, tune = (200, 200) if quick else (1000, 500)
    return tuple(
        PeerCase(f"{label}, N={n:,}", n, d, draws, tune, kind=kind, pymc_nuts=True)
        for label, kind, d in MODELS
        for n in sizes
    )


def run_crossover(
    *,
    quick: bool = False,
    cache: str = "warm",
    seed: int = 1,
    sizes: Sequence[int] | None = None,
    progress=print,
) -> dict:
    """Run every model at every size; the result has :func:`run_peers`' layout plus
    ``"crossover"``: per model, step and size the ratio to PyMC's NUTS, and the crossover N.

    Parameters
    ----------
    quick
        Two small sizes and 200 draws per chain (a few minutes), instead of
        :data:`SIZES` with 1000.
    cache
        ``"warm"`` fills the compilation caches first, ``"cold"`` gives every process an
        empty one.
    seed
        Seed of the data and of every method.
    sizes
        Numbers of rows to run (default :data:`SIZES`, or :data:`QUICK_SIZES` with
        ``quick``).
    progress
        Called with one line of text per event.
    """
    sizes = tuple(sorted(sizes or (QUICK_SIZES if quick else SIZES)))
    cases = crossover_cases(sizes, quick=quick)
    result = run_peers(cache=cache, seed=seed, cases=cases, progress=progress)
    result["experiment"] = "crossover"
    result["crossover"] = crossover_summary(result)
    return result


def crossover_summary(result: dict) -> list[dict]:
    """Per model and step: the ratio to PyMC's NUTS at each size (``None`` where the run
    failed or was not accurate enough, see :func:`counts`) and the crossover N."""
    by_model: dict[tuple[str, int], list[dict]] = {}
    for case in result["cases"]:
        spec = case["case"]
        by_model.setdefault((spec["kind"], spec["d"]), []).append(case)
    summary = []
    for label, kind, d in MODELS:
        cases = sorted(by_model.get((kind, d), []), key=lambda c: c["case"]["n"])
        if not cases:
            continue
        sizes = [c["case"]["n"] for c in cases]
        for method in OUR_STEPS:
            ratios = []
            for case in cases:
                rows = {r["method"]: r for r in case["rows"]}
                reference = rows.get(PeerCase(**case["case"]).reference, {})
                row = rows.get(method)
                ok = row is not None and counts(row, reference.get("ess_bulk_min"))
                ratios.append(row["x_pymc_nuts"] if ok else None)
            n, verdict = crossover_n(sizes, ratios)
            summary.append(
                {
                    "model": label,
                    "method": method,
                    "sizes": sizes,
                    "x_pymc_nuts": ratios,
                    "crossover_n": n,
                    "verdict": verdict,
                }
            )
    return summary


def counts(row: dict, reference_ess: float | None) -> bool:
    """Whether a run counts: it finished, has a ratio to PyMC's NUTS, and its largest
    errors of a posterior mean (in reference sds) and of a posterior sd (relative) are
    within :data:`MAX_MEAN_ERR_SD` and :data:`MAX_SD_REL_ERR`, or within :data:`NOISE_Z`
    standard errors of the difference of two Monte Carlo estimates when that is wider.

    The standard errors use the smallest bulk ESS of the run and of the reference:
    ``sqrt(1/ess + 1/ess_ref)`` for a mean in sds, ``sqrt(1/(2 ess) + 1/(2 ess_ref))``
    for a relative sd (its Gaussian approximation).
    """
    if "error" in row or row.get("x_pymc_nuts") is None or not reference_ess:
        return False
    mean_err, sd_err, ess = (
        row.get(k) for k in ("max_mean_err_sd", "max_sd_rel_err", "ess_bulk_min")
    )
    if mean_err is None or sd_err is None or not ess:
        return False
    noise = math.sqrt(1.0 / ess + 1.0 / reference_ess)
    mean_ok = mean_err <= max(MAX_MEAN_ERR_SD, NOISE_Z * noise)
    sd_ok = sd_err <= max(MAX_SD_REL_ERR, NOISE_Z * noise / math.sqrt(2.0))
    return mean_ok and sd_ok


def crossover_n(sizes: Sequence[int], ratios: Sequence[float | None]) -> tuple[float | None, str]:
    """The smallest N from which ``ratio >= 1`` at that size and every larger one.

    ``ratios[i]`` is the step's ESS per second over NUTS's at ``sizes[i]`` (increasing);
    ``None`` marks a run that does not count, treated as a ratio below 1. Between the last
    size below 1 and the next, N is interpolated linearly in log N and log ratio (where
    both ratios are known; else the next size is taken).

    Returns
    -------
    n, verdict
        ``n`` is ``None`` when the step is not ahead at the largest size; ``verdict`` says
        in words what was found.
    """
    if len(sizes) != len(ratios) or not sizes:
        raise ValueError("crossover_n needs one ratio per size, and at least one size.")
    if list(sizes) != sorted(sizes):
        raise ValueError(f"sizes must increase; got {list(sizes)}.")
    ahead = [r is not None and r >= 1.0 for r in ratios]
    if not ahead[-1]:
        return None, f"behind NUTS up to N = {sizes[-1]:,}"
    if all(ahead):
        return float(sizes[0]), f"ahead at every N measured (from {sizes[0]:,})"
    i = max(k for k, a in enumerate(ahead) if not a)  # last size where it is behind
    lo, hi = ratios[i], ratios[i + 1]
    if lo is None or lo <= 0.0:
        return float(sizes[i + 1]), f"ahead from N = {sizes[i + 1]:,} (behind or wrong below)"
    t = -math.log(lo) / (math.log(hi) - math.log(lo))
    n = math.exp(math.log(sizes[i]) + t * (math.log(sizes[i + 1]) - math.log(sizes[i])))
    return n, f"ahead from N ≈ {_round(n):,}"


def _round(n: float) -> int:
    """``n`` to two significant figures."""
    digits = max(int(math.floor(math.log10(n))) - 1, 0)
    return int(round(n, -digits))


def crossover_report(result: dict) -> str:
    """The crossover table (ratio to PyMC's NUTS per size, and the crossover) followed by
    the per-size tables of the peers report."""
    lines = [
        f"# {TITLE}",
        "",
        "Each method in a fresh process on identical data; ESS per second of wall time "
        "(process start to exit) over PyMC's NUTS's at the same N. A dash: the run failed "
        f"or was off by more than {MAX_MEAN_ERR_SD} posterior sd in a mean or "
        f"{MAX_SD_REL_ERR:.0%} in an sd (beyond {NOISE_Z:g} Monte Carlo standard errors) "
        "and counts as behind. Crossover: the smallest N "
        "from which the step is ahead at every larger N measured, interpolated in log N.",
        "",
    ]
    for model, entries in _by_model(result["crossover"]).items():
        sizes = entries[0]["sizes"]
        table = pd.DataFrame(
            {
                **{
                    f"N={n:,}": [_ratio(e["x_pymc_nuts"][k]) for e in entries]
                    for k, n in enumerate(sizes)
                },
                "crossover": [e["verdict"] for e in entries],
            },
            index=pd.Index([e["method"] for e in entries], name="method"),
        )
        lines += [f"## {model}", "", markdown_table(table), ""]
    details = markdown_report(result, title="Per-size runs")
    return "\n".join(lines) + "\n" + details


def _by_model(summary: list[dict]) -> dict[str, list[dict]]:
    """The entries of :func:`crossover_summary` grouped by model, in their order."""
    grouped: dict[str, list[dict]] = {}
    for entry in summary:
        grouped.setdefault(entry["model"], []).append(entry)
    return grouped


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def write_crossover_reports(result: dict, out_dir: Path, *, suffix: str = "") -> list[Path]:
    """``crossover{suffix}`` as markdown, JSON and PNG under ``out_dir``."""
    return write_reports(
        result,
        out_dir,
        suffix=suffix,
        name="crossover",
        report=crossover_report,
        plot=_plot_crossover,
    )


def _plot_crossover(result: dict, path: Path) -> None:
    """Ratio to PyMC's NUTS against N, log-log, one panel per model; runs that do not
    count are left out of their line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = _by_model(result["crossover"])
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, (model, entries) in zip(axes[0], models.items(), strict=True):
        for entry in entries:
            pairs = zip(entry["sizes"], entry["x_pymc_nuts"], strict=True)
            shown = [(n, r) for n, r in pairs if r is not None]
            if shown:
                ax.plot(
                    [n for n, _ in shown], [r for _, r in shown], marker="o", label=entry["method"]
                )
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N (rows)")
        ax.set_ylabel("ESS/s over PyMC's NUTS")
        ax.set_title(model)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
