"""Write a benchmark's results as markdown, JSON and PNG files."""

from __future__ import annotations

import json
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pymc_minibatch_mh.diagnostics.groups import posterior, sample_stats


@dataclass
class BenchmarkResult:
    """What one benchmark produced.

    Attributes
    ----------
    name : str
        File stem, e.g. ``"tall-logistic"``.
    title : str
        Heading of the markdown report.
    params : dict
        Problem and sampler settings (JSON-serialisable).
    table : pandas.DataFrame
        The :func:`~pymc_minibatch_mh.compare` table, one row per method.
    traces : dict
        ``{method: InferenceData or DataTree}``.
    var_names : list of str
        Free variables to plot.
    notes : list of str
        Findings to print under the table (measured, not assumed).
    """

    name: str
    title: str
    params: dict
    table: pd.DataFrame
    traces: dict
    var_names: list[str]
    notes: list[str] = field(default_factory=list)


def _json_value(value):
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _format_cell(value) -> str:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return "nan" if not math.isfinite(float(value)) else f"{float(value):.4g}"
    return str(value)


def markdown_table(table: pd.DataFrame) -> str:
    """A pipe table of ``table`` with its index as the first column (4 significant digits)."""
    header = [table.index.name or "", *map(str, table.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for index, row in zip(table.index, table.itertuples(index=False), strict=True):
        lines.append("| " + " | ".join([str(index), *map(_format_cell, row)]) + " |")
    return "\n".join(lines)


def write_markdown(result: BenchmarkResult, path: Path) -> None:
    lines = [f"# {result.title}", ""]
    lines += [f"- {key}: {value}" for key, value in result.params.items()]
    lines += ["", markdown_table(result.table), ""]
    lines += [f"- {note}" for note in result.notes]
    lines += [
        "",
        "Columns: `setup_s` building the step (MAP, full-data sums, compilation); "
        "`wall_time_s` setup plus sampling; `ess_bulk_min` smallest bulk ESS over all "
        "coordinates; `mean_batch_size` data points read per draw (N for full-data methods); "
        "`lik_evals_per_ess` per-datum likelihood evaluations per effective sample; "
        "`max_mean_err_sd` / `max_sd_rel_err` largest error of a posterior mean (in "
        "reference sd) / sd (relative) against the reference.",
        "",
        f"Machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}.",
    ]
    path.write_text("\n".join(lines) + "\n")


def write_json(result: BenchmarkResult, path: Path) -> None:
    rows = [
        {"method": method, **{k: _json_value(v) for k, v in row.items()}}
        for method, row in result.table.to_dict(orient="index").items()
    ]
    payload = {"name": result.name, "title": result.title, "params": result.params}
    payload.update(rows=rows, notes=result.notes)
    path.write_text(json.dumps(payload, indent=2) + "\n")


def write_png(result: BenchmarkResult, path: Path, max_coordinates: int = 6) -> None:
    """Marginal posteriors of every method overlaid, and batch-size histograms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    coords = []
    first = posterior(next(iter(result.traces.values())))
    for name in result.var_names:
        size = int(np.prod(np.asarray(first[name]).shape[2:], dtype=int))
        coords += [(name, j) for j in range(size)]
    coords = coords[:max_coordinates]
    batched = {
        label: np.asarray(sample_stats(idata)["batch_size"]).ravel()
        for label, idata in result.traces.items()
        if "batch_size" in sample_stats(idata)
    }
    colours = {label: f"C{i}" for i, label in enumerate(result.traces)}
    n_panels = len(coords) + (1 if batched else 0)
    n_cols = min(3, n_panels)
    n_rows = math.ceil(n_panels / n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, 3.2 * n_rows), squeeze=False)
    for ax, (name, j) in zip(axes.flat, coords, strict=False):
        for label, idata in result.traces.items():
            values = np.asarray(posterior(idata)[name])
            values = values.reshape(values.shape[0] * values.shape[1], -1)[:, j]
            ax.hist(
                values, bins=40, density=True, histtype="step", label=label, color=colours[label]
            )
        ax.set_title(f"{name}[{j}]" if first[name].ndim > 2 else name)
    if batched:
        ax = axes.flat[len(coords)]
        upper = max(float(np.max(sizes)) for sizes in batched.values())
        edges = np.logspace(0, np.log10(max(upper, 10.0)) + 0.05, 50)
        for label, sizes in batched.items():
            ax.hist(
                np.maximum(sizes, 1), bins=edges, histtype="step", label=label, color=colours[label]
            )
        ax.set_title("data points read per draw")
        ax.set_xscale("log")
        ax.set_yscale("log")
    for ax in list(axes.flat)[n_panels:]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize="small")
    fig.suptitle(result.title)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(result: BenchmarkResult, out_dir: Path, *, suffix: str = "") -> list[Path]:
    """Write ``<name><suffix>.md``, ``.json`` and ``.png`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{result.name}{suffix}"
    paths = [stem.with_suffix(".md"), stem.with_suffix(".json"), stem.with_suffix(".png")]
    write_markdown(result, paths[0])
    write_json(result, paths[1])
    write_png(result, paths[2])
    return paths
