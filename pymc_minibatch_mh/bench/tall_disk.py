"""``python -m pymc_minibatch_mh.bench tall-disk``: default steps on float32 data on disk.

A logistic regression with D = 10 + 1 coefficients whose covariates (float32) and
observations (int8) are ``.npy`` files opened with ``np.load(path, mmap_mode="r")`` and
put in the model unchanged. For each N (10^6 as the per-draw baseline, 10^7, and 10^8 with
``--full``) and each step, a fresh process builds the model, constructs the step with its
defaults and samples; the report gives its peak resident memory (``ru_maxrss``, the
file's pages included once read), setup time against the time of one raw read of the
files, the cost per draw against N = 10^6, and the posterior means and sds against a
Laplace approximation found by a streamed Newton iteration (numpy, blocks of rows).

Run as ``python -m pymc_minibatch_mh.bench.tall_disk worker ...`` it is the worker
process of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

START = time.perf_counter()
D = 10
METHODS = ("TunaMH", "MinibatchBarker")
PRIOR_SD = np.r_[np.ones(D), 2.0]  # beta ~ Normal(0, 1), intercept ~ Normal(0, 2)
BLOCK_ROWS = 1_000_000
TIMEOUT_S = 3600
ZARR_CHUNK_ROWS = 2**17
#: Decoded-chunk cache per zarr array in the runs: random minibatch rows touch most chunks
#: at every step, so the cache holds the data at N = 10^7 (0.4 GB); counted in peak RSS.
ZARR_CACHE_BYTES = 2**30


def data_paths(directory: Path, n: int) -> tuple[Path, Path]:
    """The covariate and observation files of the data set with ``n`` rows."""
    return directory / f"x-{n}.npy", directory / f"y-{n}.npy"


def write_data(directory: Path, n: int, seed: int = 1) -> float:
    """Write the data set with ``n`` rows block by block (never whole in memory) unless
    it exists; return the seconds it took (0 if it existed)."""
    x_path, y_path = data_paths(directory, n)
    if x_path.exists() and y_path.exists():
        return 0.0
    directory.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    beta, intercept = rng.normal(0.0, 0.5, D), -0.3
    x = np.lib.format.open_memmap(x_path, mode="w+", dtype=np.float32, shape=(n, D))
    y = np.lib.format.open_memmap(y_path, mode="w+", dtype=np.int8, shape=(n,))
    for first in range(0, n, BLOCK_ROWS):
        last = min(n, first + BLOCK_ROWS)
        block = rng.standard_normal((last - first, D)).astype(np.float32)
        x[first:last] = block
        eta = intercept + block.astype(np.float64) @ beta
        y[first:last] = rng.random(last - first) < 1.0 / (1.0 + np.exp(-eta))
    x.flush()
    y.flush()
    del x, y
    return time.perf_counter() - start


def raw_read_seconds(directory: Path, n: int) -> float:
    """Seconds of one pass over both files in blocks (a sum of every entry)."""
    x_path, y_path = data_paths(directory, n)
    start = time.perf_counter()
    for path in (x_path, y_path):
        values = np.load(path, mmap_mode="r")
        total = 0.0
        for first in range(0, values.shape[0], BLOCK_ROWS):
            total += float(np.add.reduce(values[first : first + BLOCK_ROWS], axis=None))
    return time.perf_counter() - start


def laplace_fit(
    directory: Path, n: int, *, tol: float = 1e-10, max_iter: int = 50, prior_sd=PRIOR_SD
) -> dict:
    """Mode and Laplace sds of the posterior by Newton's method, one streamed pass over
    the files per iteration (gradient and Hessian of the log-posterior in blocks)."""
    x_path, y_path = data_paths(directory, n)
    x, y = np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")
    q = np.zeros(D + 1)  # (beta, intercept)
    precision = np.diag(1.0 / np.asarray(prior_sd, dtype=np.float64) ** 2)
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        grad, hess = -precision @ q, -precision.copy()
        for first in range(0, n, BLOCK_ROWS):
            block = np.asarray(x[first : first + BLOCK_ROWS], dtype=np.float64)
            design = np.column_stack([block, np.ones(block.shape[0])])
            p = 1.0 / (1.0 + np.exp(-(design @ q)))
            grad += design.T @ (y[first : first + BLOCK_ROWS] - p)
            hess -= design.T @ (design * (p * (1.0 - p))[:, None])
        step = np.linalg.solve(hess, grad)
        q = q - step
        if np.max(np.abs(step)) < tol:
            break
    cov = np.linalg.inv(-hess)
    return {"mean": q, "sd": np.sqrt(np.diag(cov)), "iterations": iterations}


def zarr_paths(directory: Path, n: int) -> tuple[Path, Path]:
    """The zarr copies of the data set with ``n`` rows."""
    return directory / f"x-{n}.zarr", directory / f"y-{n}.zarr"


def write_zarr(directory: Path, n: int, chunk_rows: int = ZARR_CHUNK_ROWS) -> float:
    """Copy the ``.npy`` files of the data set to zarr arrays (chunks of ``chunk_rows``
    rows, zarr's default compression) unless they exist; return the seconds it took."""
    import zarr

    done = []
    start = time.perf_counter()
    for npy, target in zip(data_paths(directory, n), zarr_paths(directory, n), strict=True):
        if target.exists():
            continue
        values = np.load(npy, mmap_mode="r")
        array = zarr.create_array(
            store=str(target),
            shape=values.shape,
            dtype=values.dtype,
            chunks=(chunk_rows, *values.shape[1:]),
        )
        for first in range(0, n, chunk_rows * 8):
            array[first : first + chunk_rows * 8] = values[first : first + chunk_rows * 8]
        done.append(target)
    return time.perf_counter() - start if done else 0.0


#: Where the data come from: ``np.memmap`` in the model, the same files through
#: ``tall_array`` (the package's container), or zarr copies through ``chunked_data`` or
#: through ``tall_array``.
SOURCES = ("memmap", "container", "zarr", "zarr-container")


def _open_data(directory: Path, n: int, source: str):
    if source in ("memmap", "container"):
        x_path, y_path = data_paths(directory, n)
        return np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")
    import zarr

    from pymc_minibatch_mh import chunked_data

    x_path, y_path = zarr_paths(directory, n)
    x, y = (zarr.open_array(str(path), mode="r") for path in (x_path, y_path))
    if source == "zarr-container":
        return x, y  # into the model through tall_array (see `worker`)
    return (
        chunked_data(x, "x", cache_bytes=ZARR_CACHE_BYTES),
        chunked_data(y, "y", cache_bytes=ZARR_CACHE_BYTES),
    )


def worker(
    method: str,
    directory: Path,
    n: int,
    draws: int,
    tune: int,
    chains: int,
    seed: int,
    source: str = "memmap",
    dask_workers: int = 0,
):
    """One run in this process: model over the files, step with defaults, sampling.

    ``source="container"`` puts the memmaps in the model through ``tall_array``;
    ``source="zarr"`` reads the zarr copies through ``chunked_data``, and
    ``source="zarr-container"`` through ``tall_array``; ``dask_workers > 0``
    starts a ``dask.distributed.LocalCluster`` with that many single-threaded worker
    processes first, so the full-data passes run on it.
    """
    import pymc as pm

    import pymc_minibatch_mh as pmh

    client = None
    if dask_workers:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(
            n_workers=dask_workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
    imported = time.perf_counter()
    x, y = _open_data(directory, n, source)
    with pm.Model() as model:
        if source in ("container", "zarr-container"):
            cache = ZARR_CACHE_BYTES if source == "zarr-container" else None
            x = pmh.tall_array("x", x, cache_bytes=cache)
            y = pmh.tall_array("y_data", y, cache_bytes=cache)
        beta = pm.Normal("beta", 0.0, 1.0, shape=D)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        pm.Bernoulli("y", logit_p=intercept + x @ beta, observed=y)
    built = time.perf_counter()
    with model:
        step = getattr(pmh, method)()
    constructed = time.perf_counter()
    # Time every step call, split by phase: tuning includes the bound's rebuilds
    # (O(N) each); the cost per draw is the draw phase's.
    phases = {True: [0.0, 0], False: [0.0, 0]}
    step_once = step.step

    def timed_step(point):
        start = time.perf_counter()
        out = step_once(point)
        phase = phases[bool(step.tune)]
        phase[0] += time.perf_counter() - start
        phase[1] += 1
        return out

    step.step = timed_step
    with model:
        idata = pm.sample(
            step=step,
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    sampled = time.perf_counter()
    workers_rss = 0.0
    if client is not None:
        workers_rss = sum(
            client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss).values()
        )
        client.close()
        cluster.close()
    posterior = idata.posterior
    draws_q = np.concatenate(
        [
            posterior["beta"].values.reshape(-1, D),
            posterior["intercept"].values.reshape(-1, 1),
        ],
        axis=1,
    )
    return {
        "method": method,
        "n": n,
        "import_s": imported - START,
        "model_s": built - imported,
        "setup_s": constructed - built,
        "sampling_s": sampled - constructed,
        "per_draw_ms": 1e3 * phases[False][0] / max(phases[False][1], 1),
        "tuning_s": phases[True][0],
        "n_data_passes": float(step.n_data_passes),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "workers_peak_rss_gb": workers_rss / 2**20,
        "mean": draws_q.mean(axis=0).tolist(),
        "sd": draws_q.std(axis=0, ddof=1).tolist(),
    }


def _run_worker(
    method, directory, n, draws, tune, chains, seed, tmp: Path, source="memmap", dask_workers=0
) -> dict:
    out = tmp / f"{method}-{n}.json"
    out.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "pymc_minibatch_mh.bench.tall_disk",
        "worker",
        method,
        str(directory),
        str(n),
        str(out),
        f"--draws={draws}",
        f"--tune={tune}",
        f"--chains={chains}",
        f"--seed={seed}",
        f"--source={source}",
        f"--dask-workers={dask_workers}",
    ]
    from pymc_minibatch_mh.bench.peers import short_error

    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    wall = time.perf_counter() - start
    if done.returncode != 0 or not out.exists():
        lines = (done.stderr or done.stdout).strip().splitlines()
        error = short_error(lines[-1] if lines else "", done.returncode)
        return {"method": method, "n": n, "wall_s": wall, "error": error}
    run = json.loads(out.read_text())
    run["wall_s"] = wall
    return run


def run_tall_disk(
    *,
    sizes: tuple[int, ...],
    directory: Path,
    draws: int = 1000,
    tune: int = 500,
    chains: int = 2,
    seed: int = 1,
    source: str = "memmap",
    dask_workers: int = 0,
    progress=print,
) -> dict:
    """Every method at every size, each in a fresh process; the first size is the
    per-draw baseline. ``source`` and ``dask_workers`` are those of :func:`worker`."""
    from pymc_minibatch_mh.bench.peers import stack_description

    cases, runs = [], []
    with tempfile.TemporaryDirectory(prefix="tall-disk-") as tmp:
        for n in sizes:
            generated = write_data(directory, n, seed)
            if generated:
                progress(f"wrote N = {n:.0e} in {generated:.1f} s")
            if source.startswith("zarr"):
                converted = write_zarr(directory, n)
                if converted:
                    progress(f"copied N = {n:.0e} to zarr in {converted:.1f} s")
            fit = laplace_fit(directory, n)
            case = {
                "n": n,
                "file_gb": sum(p.stat().st_size for p in data_paths(directory, n)) / 2**30,
                "generate_s": generated,
                "raw_read_s": raw_read_seconds(directory, n),
                "laplace_iterations": fit["iterations"],
                "laplace_mean": fit["mean"].tolist(),
                "laplace_sd": fit["sd"].tolist(),
            }
            cases.append(case)
            for method in METHODS:
                run = _run_worker(
                    method, directory, n, draws, tune, chains, seed, Path(tmp), source, dask_workers
                )
                if "error" not in run:
                    mean, sd = np.asarray(run["mean"]), np.asarray(run["sd"])
                    run["max_mean_err_laplace_sd"] = float(
                        np.max(np.abs(mean - fit["mean"]) / fit["sd"])
                    )
                    run["max_sd_rel_err"] = float(np.max(np.abs(sd / fit["sd"] - 1.0)))
                    run["setup_x_raw_read"] = run["setup_s"] / case["raw_read_s"]
                    base = [r for r in runs if r["method"] == method and r["n"] == sizes[0]]
                    if base and "per_draw_ms" in base[0]:
                        run["per_draw_x_first"] = run["per_draw_ms"] / base[0]["per_draw_ms"]
                progress(f"N = {n:.0e} {method}: " + (run.get("error") or f"{run['wall_s']:.1f} s"))
                runs.append(run)
    return {
        "stack": stack_description("warm"),
        "settings": {
            "draws": draws,
            "tune": tune,
            "chains": chains,
            "seed": seed,
            "cores": 1,
            "source": source,
            "dask_workers": dask_workers,
        },
        "cases": cases,
        "runs": runs,
    }


COLUMNS = (
    "n",
    "method",
    "wall_s",
    "setup_s",
    "setup_x_raw_read",
    "tuning_s",
    "per_draw_ms",
    "per_draw_x_first",
    "peak_rss_gb",
    "workers_peak_rss_gb",
    "n_data_passes",
    "max_mean_err_laplace_sd",
    "max_sd_rel_err",
)


def markdown_report(result: dict) -> str:
    """The report of :func:`run_tall_disk` as markdown."""
    stack = ", ".join(f"{k} {v}" for k, v in result["stack"].items())
    settings = result["settings"]
    if settings.get("source", "memmap") == "memmap":
        title = "# Default steps on float32 data on disk (np.memmap in the model)"
    elif settings["source"] == "container":
        title = "# Default steps on float32 data on disk (np.memmap through `tall_array`)"
    else:
        entry = "`tall_array`" if settings["source"] == "zarr-container" else "`chunked_data`"
        title = f"# Default steps on float32 data in zarr arrays ({entry} in the model), " + (
            f"passes on a dask.distributed LocalCluster of {settings['dask_workers']} "
            "worker processes"
            if settings.get("dask_workers")
            else "passes on Dask's threads"
        )
    lines = [
        title,
        "",
        f"zarr: chunks of {ZARR_CHUNK_ROWS} rows, zarr's default compression, "
        f"`cache_bytes={ZARR_CACHE_BYTES}` (decoded chunks kept, in "
        "`peak_rss_gb`); `workers_peak_rss_gb`: the cluster's worker processes' peak RSS "
        "summed."
        if settings.get("source", "").startswith("zarr")
        else "",
        "",
        "Logistic regression, D = 10 + 1; covariates float32 and observations int8 in `.npy` "
        "files opened with `np.load(..., mmap_mode='r')`. Each run in a fresh process, "
        f"{settings['chains']} chains one after the other, {settings['tune']} tune + "
        f"{settings['draws']} draws. `peak_rss_gb`: the process's `ru_maxrss` (the file's "
        "pages count once read). `setup_x_raw_read`: step construction over one raw read "
        "of the files (page cache warm: the files were just written or read). "
        "`per_draw_ms`: the step's time per draw after tuning (tuning, with its O(N) "
        "rebuilds of the bound, is `tuning_s`); `per_draw_x_first`: that over the same "
        "step at the first N. Errors against a Laplace fit (streamed Newton), in its sds.",
        "",
        f"Stack: {stack}.",
        "",
        "| data | file GB | written in s | one raw read s | Newton iterations |",
        "|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        written = f"{case['generate_s']:.1f}" if case["generate_s"] else "existed"
        lines.append(
            f"| N = {case['n']:.0e} | {case['file_gb']:.2f} | {written} | "
            f"{case['raw_read_s']:.2f} | {case['laplace_iterations']} |"
        )
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for run in result["runs"]:
        cells = []
        for column in COLUMNS:
            value = run.get(column, float("nan"))
            if column == "n":
                cells.append(f"{value:.0e}")
            elif isinstance(value, float):
                cells.append(f"{value:.3g}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    failed = [run for run in result["runs"] if "error" in run]
    lines += [f"- {run['method']} at N = {run['n']:.0e} failed: {run['error']}" for run in failed]
    return "\n".join(lines) + "\n"


def write_reports(result: dict, out_dir: Path, *, suffix: str = "") -> list[Path]:
    """Markdown, JSON and a plot (peak memory and cost per draw against N)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"tall-disk{suffix}"
    paths = [stem.with_suffix(".md"), stem.with_suffix(".json"), stem.with_suffix(".png")]
    paths[0].write_text(markdown_report(result))
    paths[1].write_text(json.dumps(result, indent=2))
    _plot(result, paths[2])
    return paths


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for method in METHODS:
        runs = [r for r in result["runs"] if r["method"] == method and "error" not in r]
        n = [r["n"] for r in runs]
        axes[0].plot(n, [r["peak_rss_gb"] for r in runs], "o-", label=method)
        axes[1].plot(n, [r["per_draw_ms"] for r in runs], "o-", label=method)
    axes[0].axhline(1.5, color="grey", linestyle=":", label="1.5 GB")
    for ax, label in zip(axes, ("peak RSS (GB)", "ms per draw"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("N (rows on disk)")
        ax.set_ylabel(label)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pymc_minibatch_mh.bench.tall_disk")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("worker")
    run.add_argument("method", choices=METHODS)
    run.add_argument("directory", type=Path)
    run.add_argument("n", type=int)
    run.add_argument("out", type=Path)
    run.add_argument("--draws", type=int, default=1000)
    run.add_argument("--tune", type=int, default=500)
    run.add_argument("--chains", type=int, default=2)
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--source", choices=SOURCES, default="memmap")
    run.add_argument("--dask-workers", type=int, default=0)
    args = parser.parse_args(argv)
    result = worker(
        args.method,
        args.directory,
        args.n,
        args.draws,
        args.tune,
        args.chains,
        args.seed,
        args.source,
        args.dask_workers,
    )
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
