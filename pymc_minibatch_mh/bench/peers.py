"""``bench peers``: our four default steps against numpyro's HMCECS, one process each.

Every method runs in a fresh Python process (:mod:`pymc_minibatch_mh.bench.peer_runs`)
on the same data file; its wall time is measured here from process start to exit, so
imports, model building, MAP search, full-data passes, compilation and sampling all
count. Accuracy is measured against the case's reference on the full data in the same
run: numpyro's NUTS for logistic regression, PyMC's NUTS for the Normal models.

Cases: logistic regression with an intercept, N = 10^6 and D = 10, and N = 10^5 and
D = 50 (``--quick``: N = 20,000, D = 5, fewer draws). PyMC's NUTS is a secondary column
where it finishes in reasonable time (it is not run at N = 10^6 unless asked: about an
hour there).

Cache state: ``warm`` (default) gives the run a compilation directory of its own and
first runs every PyMC method (PyMC's NUTS included) once on a short run of data of the
same width (:data:`WARM_UP_ROWS` rows, 50 + 50 draws), so the package's, PyTensor's and
numba's on-disk caches there hold the compiled functions; ``cold`` gives every process
an empty compilation directory. Each of our steps reports which it found
(``setup_cache``: ``cold``, ``warm`` or ``partly warm``).

``bench many`` (:mod:`pymc_minibatch_mh.bench.many`) runs its own cases through
:func:`run_peers` and writes its report with :func:`write_reports`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from pymc_minibatch_mh.bench.peer_runs import OUR_STEPS
from pymc_minibatch_mh.bench.report import markdown_table
from pymc_minibatch_mh.data import blocks as data_blocks

GROUPS = 20
#: Unbalanced groups: group shares drawn from a symmetric Dirichlet of this concentration,
#: on top of a floor of MIN_GROUP_ROWS rows per group.
GROUP_CONCENTRATION = 0.5
MIN_GROUP_ROWS = 5


#: Time limit of one method's process, unless its case sets another.
TIMEOUT_S = 3 * 3600


@dataclass(frozen=True)
class PeerCase:
    """One data set: ``n`` rows, ``d`` covariates plus an intercept, of model ``kind``.

    ``kind`` is ``"logistic"`` (numpyro's NUTS is the reference and HMCECS the peer),
    ``"linear"`` (Normal likelihood with a free sigma), ``"hierarchical"`` (a centred
    Normal model with ``groups`` group intercepts, of equal expected sizes or, with
    ``unbalanced``, of very unequal ones), ``"users"`` and ``"users_noncentred"`` (a
    Bernoulli outcome with one intercept per group, centred or written
    ``a = mu_a + sigma_a * z``) or ``"lkj_slopes"`` (a Normal outcome with an intercept
    and a slope of the first covariate per group, correlated through
    ``pm.LKJCholeskyCov``, non-centred): for all but the first PyMC's NUTS is the
    reference and the baseline. ``numpyro`` adds numpyro's NUTS and HMCECS.
    ``timeout_s`` bounds each method's process; a method that does not finish within it
    gets a row saying so.
    """

    name: str
    n: int
    d: int
    draws: int = 1000
    tune: int = 500
    pymc_nuts: bool = False
    kind: str = "logistic"
    groups: int = GROUPS
    unbalanced: bool = False
    numpyro: bool = False
    timeout_s: float = TIMEOUT_S

    @property
    def reference(self) -> str:
        return REFERENCE if self.kind == "logistic" else "pymc-nuts"

    @property
    def methods(self) -> list[str]:
        if self.kind == "logistic":
            return [REFERENCE, PEER, *OUR_STEPS] + (["pymc-nuts"] if self.pymc_nuts else [])
        return ["pymc-nuts", *([REFERENCE, PEER] if self.numpyro else []), *OUR_STEPS]


FULL_CASES = (
    PeerCase("logistic N=1e6 D=10+1", 1_000_000, 10),
    PeerCase("logistic N=1e5 D=50+1", 100_000, 50, pymc_nuts=True),
    PeerCase("linear, free sigma, N=1e5 D=10+1", 100_000, 10, kind="linear"),
    PeerCase("hierarchical, 20 group intercepts, N=1e5 D=3", 100_000, 3, kind="hierarchical"),
)
QUICK_CASES = (
    PeerCase("logistic N=2e4 D=5+1 (quick)", 20_000, 5, 300, 300, pymc_nuts=True),
    PeerCase("linear N=2e4 D=5+1 (quick)", 20_000, 5, 300, 300, kind="linear"),
)
REFERENCE = "numpyro-nuts"
PEER = "numpyro-hmcecs"
#: Rows of the warm-up runs: above one block of the row design, so that the functions
#: used only on data of more than one block are compiled by the warm-up too (at 5,000
#: rows `TunaMH()` compiled one more function in the timed run: "partly warm").
WARM_UP_ROWS = data_blocks.BLOCK_ROWS + 5_000


def case_data(case: PeerCase, seed: int) -> dict[str, np.ndarray]:
    """The data of one case: ``x``, ``y`` and, for the models with groups, ``group``."""
    if case.kind == "logistic":
        x, y = logistic_data(case.n, case.d, seed)
        return {"x": x, "y": y}
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(case.n, case.d))
    beta = rng.normal(0.0, 0.5, size=case.d)
    if case.kind == "linear":
        return {"x": x, "y": 0.3 + x @ beta + rng.normal(0.0, 1.3, size=case.n)}
    if case.kind == "hierarchical":
        group = group_labels(case.n, case.groups, case.unbalanced, rng)
        intercepts = rng.normal(0.5, 0.7, size=case.groups)
        y = intercepts[group] + x @ beta + rng.normal(0.0, 1.0, size=case.n)
        return {"x": x, "y": y, "group": group}
    if case.kind in ("users", "users_noncentred"):
        group = group_labels(case.n, case.groups, case.unbalanced, rng)
        intercepts = rng.normal(-0.3, 0.8, size=case.groups)
        p = 1.0 / (1.0 + np.exp(-(intercepts[group] + x @ beta)))
        return {"x": x, "y": (rng.random(case.n) < p).astype(np.int8), "group": group}
    if case.kind == "lkj_slopes":
        group = group_labels(case.n, case.groups, case.unbalanced, rng)
        sd, rho = np.array([0.7, 0.4]), 0.5
        cov = np.outer(sd, sd) * np.array([[1.0, rho], [rho, 1.0]])
        ab = rng.multivariate_normal([0.5, 0.3], cov, size=case.groups)
        eta = ab[group, 0] + ab[group, 1] * x[:, 0] + x[:, 1:] @ beta[1:]
        return {"x": x, "y": eta + rng.normal(0.0, 1.0, size=case.n), "group": group}
    raise ValueError(f"Unknown case kind {case.kind!r}.")


def group_labels(n: int, groups: int, unbalanced: bool, rng: np.random.Generator) -> np.ndarray:
    """The group of each of ``n`` rows, every one of ``groups`` groups present.

    Balanced: uniform labels. Unbalanced: ``MIN_GROUP_ROWS`` rows per group, the rest
    spread by group shares from a Dirichlet with concentration ``GROUP_CONCENTRATION``
    (a few groups hold most rows), then shuffled.
    """
    if not unbalanced:
        return rng.integers(0, groups, size=n)
    floor = MIN_GROUP_ROWS * groups
    if n < floor:
        raise ValueError(f"{groups} unbalanced groups need at least {floor} rows; got {n}.")
    shares = rng.dirichlet(np.full(groups, GROUP_CONCENTRATION))
    labels = np.concatenate(
        [np.repeat(np.arange(groups), MIN_GROUP_ROWS), rng.choice(groups, n - floor, p=shares)]
    )
    return rng.permutation(labels)


def logistic_data(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal covariates, coefficients N(0, 0.5^2), intercept 0.3."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    beta = rng.normal(0.0, 0.5, size=d)
    y = rng.random(n) < 1.0 / (1.0 + np.exp(-(0.3 + x @ beta)))
    return x, y.astype(np.int8)


def run_peers(
    *,
    quick: bool = False,
    cache: str = "warm",
    seed: int = 1,
    pymc_nuts_everywhere: bool = False,
    methods: tuple[str, ...] | None = None,
    cases: tuple[PeerCase, ...] | None = None,
    progress=print,
) -> dict:
    """Run every case; return ``{"cases": [...], "stack": {...}}`` (JSON-serialisable).

    ``cases`` replaces the peers cases (``QUICK_CASES`` or ``FULL_CASES`` by ``quick``).
    """
    if cache not in ("warm", "cold"):
        raise ValueError(f"cache must be 'warm' or 'cold'; got {cache!r}.")
    if cases is None:
        cases = QUICK_CASES if quick else FULL_CASES
    compile_package_bytecode()
    results, warmed = [], set()
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        tmp = Path(tmp)
        for case in cases:
            wanted = case.methods
            if pymc_nuts_everywhere and "pymc-nuts" not in wanted:
                wanted.append("pymc-nuts")
            if methods:
                wanted = [m for m in wanted if m in methods or m == case.reference]
            data_path = tmp / "data.npz"
            np.savez(data_path, **case_data(case, seed))
            pymc_methods = [m for m in wanted if m in OUR_STEPS or m == "pymc-nuts"]
            # One warm-up per model: cases that differ only in N share compiled functions.
            shape = (case.kind, case.d, case.groups, case.unbalanced, tuple(pymc_methods))
            if cache == "warm" and shape not in warmed:
                _warm_up(case, pymc_methods, tmp, seed, progress)
                warmed.add(shape)
            runs = {}
            for method in wanted:
                progress(f"[{case.name}] {method} ...")
                runs[method] = _run_one(method, case, data_path, tmp, seed, cache)
                progress(f"[{case.name}] {method}: {_summary(runs[method])}")
            rows = _rows(runs, case.reference, n=case.n)
            results.append({"case": case.__dict__, "rows": rows})
    return {"cases": results, "stack": stack_description(cache)}


def _warm_up(case: PeerCase, methods: list[str], tmp: Path, seed: int, progress) -> None:
    """One short run per PyMC method on small data of the same width (fills the caches)."""
    rows = max(WARM_UP_ROWS, 2 * MIN_GROUP_ROWS * case.groups)
    small = replace(case, name=case.name + " warm-up", n=rows, draws=50, tune=50)
    path = tmp / "warm.npz"
    np.savez(path, **case_data(small, seed))
    for method in methods:
        run = _run_one(method, small, path, tmp, seed, "warm")
        if "error" in run:
            progress(f"warm-up of {method} failed: {run['error']}")


def _run_one(method: str, case: PeerCase, data: Path, tmp: Path, seed: int, cache: str) -> dict:
    """One method in a fresh process. Its compile caches: ``"cold"``, a new empty
    directory; ``"warm"``, the run's own directory under ``tmp``, filled by the warm-up
    runs (not the user's compile directory, whose size is the machine's history: one that
    had collected 2,836 entries from test runs added 7.6 s to a warm ``MinibatchBarker()``
    construction and 14.6 s to a PyMC NUTS run on PyMC 5)."""
    out = tmp / f"{method}.npz"
    out.unlink(missing_ok=True)
    if cache == "cold":
        compiledir = Path(tempfile.mkdtemp(prefix="cold-", dir=tmp))
    else:
        compiledir = tmp / "compile-warm"
        compiledir.mkdir(exist_ok=True)
    env = compile_cache_env(compiledir)
    command = [
        sys.executable,
        "-m",
        "pymc_minibatch_mh.bench.peer_runs",
        method,
        str(data),
        str(out),
        f"--draws={case.draws}",
        f"--tune={case.tune}",
        f"--seed={seed}",
        f"--kind={case.kind}",
    ]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=case.timeout_s
        )
    except subprocess.TimeoutExpired:
        return {
            "wall_s": time.perf_counter() - start,
            "error": f"not finished within the case's limit of {case.timeout_s:g} s.",
        }
    wall = time.perf_counter() - start
    wait_for_background_compiles(compiledir)
    if done.returncode != 0 or not out.exists():
        return {"wall_s": wall, "error": failure(done.returncode, done.stderr or done.stdout)}
    with np.load(out) as result:
        run = {key: result[key] for key in result.files}
    run["wall_s"] = wall
    return run


def compile_package_bytecode() -> None:
    """Write the package's Python bytecode (``__pycache__``), as ``pip install`` does for an
    installed package: a source checkout run with ``PYTHONDONTWRITEBYTECODE`` (as this
    project's CI and the benchmarks' child processes are) otherwise compiles every module
    from source in every process, about 0.2 s of each run that the peers, installed with
    their bytecode, do not pay."""
    import compileall

    import pymc_minibatch_mh

    compileall.compile_dir(Path(pymc_minibatch_mh.__file__).parent, quiet=1)


#: Longest wait for a compilation a run started in the background.
BACKGROUND_COMPILE_WAIT_S = 300.0


def wait_for_background_compiles(compiledir: Path) -> None:
    """Wait until no compilation that a run started in the background (FlyMC's compiled
    iteration, :mod:`~pymc_minibatch_mh.kernels.compiled_split_iteration`) is under way in
    ``compiledir``'s numba cache, so that it neither competes with the next run for the
    cores nor, in a warm-up, leaves the timed run without the compiled code."""
    deadline = time.monotonic() + BACKGROUND_COMPILE_WAIT_S
    while any((compiledir / "numba").rglob("compiling-*")) and time.monotonic() < deadline:
        time.sleep(0.2)


def compile_cache_env(compiledir: Path) -> dict[str, str]:
    """The environment of a benchmark's child process whose compile caches all live in
    ``compiledir``: PyTensor's compile directory (C modules and the package's function
    cache), PyTensor's numba cache (``base_compiledir/numba`` on PyTensor 3, which does
    not follow ``compiledir``: a run that set only ``compiledir`` found the numba code of
    every earlier run in ``~/.pytensor/numba``, and its "cold" construction of a
    20-group hierarchy took 3.5 s against 35 s truly cold) and numba's own cache; one
    thread per process."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    directories = f"base_compiledir={compiledir},compiledir={compiledir / 'pytensor'}"
    flags = [env.get("PYTENSOR_FLAGS", ""), directories]
    env["PYTENSOR_FLAGS"] = ",".join(flag for flag in flags if flag)
    env["NUMBA_CACHE_DIR"] = str(compiledir / "numba")
    return env


def failure(returncode: int, output: str) -> str:
    """What went wrong in a method's process: the signal that killed it or its error."""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"killed by {name}" + (" (out of memory?)." if name == "SIGKILL" else ".")
    lines = output.strip().splitlines()
    return short_error(lines[-1] if lines else "", returncode)


def short_error(last_line: str, returncode: int) -> str:
    """The exception's type and first sentence (a refusal's advice follows in the full
    message, which the run prints)."""
    if not last_line:
        return f"exit code {returncode}"
    kind, _, message = last_line.partition(": ")
    sentence = message.split(". ")[0].rstrip(".")
    return f"{kind.rsplit('.', 1)[-1]}: {sentence}." if message else last_line


def _summary(run: dict) -> str:
    if "error" in run:
        return f"FAILED after {run['wall_s']:.0f} s: {run['error']}"
    return f"{run['wall_s']:.1f} s"


def _rows(runs: dict, reference_method: str = REFERENCE, n: int | None = None) -> list[dict]:
    """Table rows: ESS/s over the whole wall time, ratios, errors against the reference.

    With ``n``, the number of data rows, each row also has ``rows_share``: rows read per
    draw as a share of ``n``.
    """
    import arviz as az

    reference = runs.get(reference_method, {})
    ref_draws = reference.get("draws")
    if ref_draws is not None:
        flat = ref_draws.reshape(-1, ref_draws.shape[-1])
        ref_mean, ref_sd = flat.mean(axis=0), flat.std(axis=0)
    rows = []
    for method, run in runs.items():
        row = {"method": method, "wall_s": run["wall_s"]}
        if "error" in run:
            row["error"] = run["error"]
            rows.append(row)
            continue
        draws = run["draws"]
        ess = min(float(az.ess(draws[..., j], method="bulk")) for j in range(draws.shape[-1]))
        row.update(
            setup_s=float(run["setup_s"]),
            sampling_s=float(run["sampling_s"]),
            import_s=float(run["import_s"]),
            ess_bulk_min=ess,
            ess_per_s=ess / run["wall_s"],
            rows_per_draw=float(run["rows_per_draw"]),
            n_data_passes=round(float(run["n_data_passes"]), 2) if "n_data_passes" in run else None,
            setup_cache=str(run["setup_cache"]) if "setup_cache" in run else None,
        )
        if "in_process_s" in run:  # model creation to returned draws, in the process
            row["in_process_s"] = float(run["in_process_s"])
            row["ess_per_in_process_s"] = ess / row["in_process_s"]
        if n:
            row["rows_share"] = row["rows_per_draw"] / n
        if ref_draws is not None and method != reference_method:
            flat = draws.reshape(-1, draws.shape[-1])
            row["max_mean_err_sd"] = float(np.max(np.abs(flat.mean(axis=0) - ref_mean) / ref_sd))
            row["max_sd_rel_err"] = float(np.max(np.abs(flat.std(axis=0) / ref_sd - 1.0)))
        rows.append(row)
    bases = (
        (PEER, "x_hmcecs", "ess_per_s"),
        ("pymc-nuts", "x_pymc_nuts", "ess_per_s"),
        (REFERENCE, "x_numpyro_nuts", "ess_per_s"),
        (PEER, "x_hmcecs_in_process", "ess_per_in_process_s"),
    )
    for base, column, rate_column in bases:
        rate = next((r.get(rate_column) for r in rows if r["method"] == base), None)
        for row in rows:
            if rate and rate_column in row:
                row[column] = row[rate_column] / rate
    return rows


def stack_description(cache: str) -> dict:
    """Versions of the interpreter and libraries, the machine, and the cache state."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("pymc", "pytensor", "numpyro", "jax", "numba", "numpy"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return {
        "python": platform.python_version(),
        **found,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "cache": cache,
    }


COLUMNS = [
    "method",
    "wall_s",
    "setup_s",
    "setup_cache",
    "sampling_s",
    "ess_bulk_min",
    "ess_per_s",
    "x_hmcecs",
    "x_pymc_nuts",
    "in_process_s",
    "x_hmcecs_in_process",
    "rows_per_draw",
    "n_data_passes",
    "max_mean_err_sd",
    "max_sd_rel_err",
]


TITLE = "Minibatch MH steps (defaults) against numpyro HMCECS"
INTRO = (
    "Each method in a fresh process on identical data; wall time from process start to "
    "exit (imports, model, MAP, passes, compilation, sampling). ESS: smallest bulk "
    "ESS over the coefficients. `in_process_s`: from the model's creation to the returned "
    "draws, inside the process (without the imports and the interpreter's start and exit), "
    "and `x_hmcecs_in_process` the ESS per second of it against HMCECS's. Errors against "
    "the case's reference on the full data, in its posterior sds."
)


def write_reports(
    result: dict,
    out_dir: Path,
    *,
    suffix: str = "",
    name: str = "peers",
    report=None,
    plot=None,
) -> list[Path]:
    """Markdown, JSON and a bar chart of ESS/s (log scale) under ``out_dir``.

    The files are ``{name}{suffix}.md``, ``.json`` and ``.png``; ``report`` renders the
    markdown (default :func:`markdown_report`), ``plot(result, path)`` the figure (default
    a bar chart per case).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{name}{suffix}"
    paths = [stem.with_suffix(".md"), stem.with_suffix(".json"), stem.with_suffix(".png")]
    paths[0].write_text((report or markdown_report)(result))
    paths[1].write_text(json.dumps(result, indent=2, default=_json_default))
    (plot or _plot)(result, paths[2])
    return paths


def markdown_report(
    result: dict, *, title: str = TITLE, intro: str = INTRO, columns: list[str] = COLUMNS
) -> str:
    """The report: ``title``, ``intro``, the stack, and per case a table of ``columns``."""
    stack = result["stack"]
    lines = [
        f"# {title}",
        "",
        intro,
        "",
        "Stack: " + ", ".join(f"{k} {v}" for k, v in stack.items() if v is not None) + ".",
    ]
    for case in result["cases"]:
        spec = case["case"]
        table = pd.DataFrame(case["rows"]).set_index("method")
        shown = [c for c in columns[1:] if c in table.columns]
        reference = PeerCase(**spec).reference
        lines += [
            "",
            f"## {spec['name']}",
            "",
            f"2 chains, {spec['tune']} tune + {spec['draws']} draws each. Reference: {reference}.",
            "",
            markdown_table(table[shown]),
        ]
        if "error" in table.columns:
            for method, error in table["error"].dropna().items():
                lines.append(f"- {method} failed: {error}")
    return "\n".join(lines) + "\n"


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["cases"]
    fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4), squeeze=False)
    for ax, case in zip(axes[0], cases, strict=True):
        rows = [r for r in case["rows"] if "ess_per_s" in r]
        names = [r["method"] for r in rows]
        rates = [r["ess_per_s"] for r in rows]
        colours = [
            "tab:orange" if n.startswith(("numpyro", "pymc-")) else "tab:blue" for n in names
        ]
        ax.barh(names, rates, color=colours)
        ax.set_xscale("log")
        ax.set_xlabel("min bulk ESS per second of wall time")
        ax.set_title(case["case"]["name"])
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _json_default(value):
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
