"""Accuracy and data use of every step class called with NO arguments, on user-written models.

Usage::

    python benchmarks/defaults_check.py [--models logistic,linear] \
        [--steps MinibatchBarker,Austere,TunaMH,FlyMC] [--draws 1000] [--tune 1000] \
        [--n N] [--seed 2027] [--out PATH] [--no-cache]

For each (model, step class) pair it builds ``Step()`` inside the model (no arguments,
the defaults under test), samples ``pm.sample(step=..., chains=2, cores=2)`` and prints
one row: worst mean error in reference-sd units, worst ``|sd / ref sd - 1|``, minimum
bulk ESS, acceptance rate, mean ``batch_size`` per draw as a fraction of N, construction
and sampling seconds, maximum r-hat, and the verdict of the acceptance criteria of
``tests/statistical/test_default_posteriors.py`` (means within 0.15 sd, sds within 15 %,
3 MCSE below 0.15 sd, and on the regressions at N >= 20,000 the batch limit: 5 % of N for
MinibatchBarker/Austere, 1 % for TunaMH/FlyMC). If construction raises a ValueError or
NotImplementedError the row shows the refusal (first 150 characters). Any other
exception, at construction or while sampling, is reported in its row (type and message,
traceback on stderr) and the remaining pairs still run.

The models and references come from ``tests/statistical/user_models.py``; NUTS
references are cached on disk (see that module), so a second run skips them. ``--n``
sets N for every model whose data size is free (the posteriordb mixture keeps its 1,000
points).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm

from pymc_minibatch_mh.diagnostics import posterior, sample_stats

TESTS_DIR = Path(__file__).resolve().parents[1] / "tests"
COLUMNS = (
    ("model", 16, "s"),
    ("step", 16, "s"),
    ("mean_err", 9, ".3f"),
    ("sd_err", 7, ".3f"),
    ("ess_min", 8, ".0f"),
    ("accept", 7, ".3f"),
    ("batch/N", 8, ".4f"),
    ("build_s", 8, ".1f"),
    ("sample_s", 9, ".1f"),
    ("rhat_max", 9, ".3f"),
    ("verdict", 22, "s"),
)


def _load_suite():
    """``(user_models, agreement)`` modules of the statistical test suite."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    return (
        importlib.import_module("statistical.user_models"),
        importlib.import_module("statistical.agreement"),
    )


@dataclass
class Row:
    """One (model, step) result; NaN where a value was not measured."""

    model: str
    step: str
    values: dict = field(default_factory=dict)
    verdict: str = ""
    note: str = ""

    def format(self) -> str:
        cells = []
        for name, width, spec in COLUMNS:
            if name == "model":
                value = self.model
            elif name == "step":
                value = self.step
            elif name == "verdict":
                value = self.verdict
            else:
                value = self.values.get(name, math.nan)
            if isinstance(value, float) and not math.isfinite(value):
                text = "-"
            else:
                text = format(value, spec)
            cells.append(text.rjust(width) if spec != "s" else text.ljust(width))
        line = " ".join(cells)
        return f"{line} {self.note}" if self.note else line


def header() -> str:
    """The column titles, aligned with :meth:`Row.format`."""
    cells = [n.ljust(w) if s == "s" else n.rjust(w) for n, w, s in COLUMNS]
    return " ".join(cells) + " note"


def _coordinate_diagnostics(draws: dict[str, np.ndarray]) -> tuple[float, float]:
    """``(min bulk ESS, max r-hat)`` over scalar coordinates with spread."""
    ess, rhat = [], []
    for values in draws.values():
        if np.std(values) > 0:
            ess.append(float(az.ess(values, method="bulk")))
            rhat.append(float(az.rhat(values)))
    if not ess:
        return math.nan, math.nan
    return min(ess), max(rhat)


def _measure(idata, case, reference, suite, agreement_module, step_name: str) -> Row:
    """Accuracy, mixing and data use of one sampling run, with the criteria's verdict."""
    row = Row(case.name, step_name)
    draws = agreement_module.coordinate_draws(posterior(idata), case.var_names)
    row.values["ess_min"], row.values["rhat_max"] = _coordinate_diagnostics(draws)
    stats = sample_stats(idata)
    if "accepted" in stats:
        row.values["accept"] = float(np.mean(np.asarray(stats["accepted"])))
    fraction = suite.mean_batch_fraction(idata, case.n_data)
    row.values["batch/N"] = fraction
    failed = []
    if reference is None:
        failed.append("no-ref")
    else:
        result = agreement_module.agreement(draws, reference.mean, reference.sd)
        row.values["mean_err"] = max(result.mean_err_sd.values())
        row.values["sd_err"] = max(result.sd_rel_err.values())
        checks = {
            "mean": row.values["mean_err"] > suite.MEAN_TOL,
            "sd": row.values["sd_err"] > suite.SD_TOL,
            "power": bool(result.underpowered(suite.MEAN_TOL)),
        }
        failed += [name for name, bad in checks.items() if bad]
    if suite.batch_problem(fraction, suite.batch_limit(case, step_name)):
        failed.append("batch")
    row.verdict = "FAIL " + ",".join(failed) if failed else "pass"
    return row


def _others(step, model) -> str:
    """Names of free variables the step leaves to other samplers (PyMC assigns them)."""
    mine = {v.name for v in step.vars}
    rest = [v.name for v in model.value_vars if v.name not in mine]
    return f"others sampled by PyMC's default steps: {rest}" if rest else ""


def run_pair(case, reference, step_name: str, args, suite, agreement_module) -> Row:
    """Construct ``Step()`` in ``case.model``, sample, measure; errors become the row."""
    cls = suite.step_class(step_name)
    start = time.perf_counter()
    try:
        with case.model:
            step = cls()
    except Exception as err:
        build = time.perf_counter() - start
        row = Row(case.name, step_name, {"build_s": build})
        message = " ".join(str(err).split())
        if isinstance(err, ValueError | NotImplementedError):
            problem = suite.refusal_problem(err, step_name)
            row.verdict = "refused" if problem is None else "refused (unclear)"
            row.note = f"{type(err).__name__}: {message[:150]}"
        else:
            row.verdict = "ERROR at construction"
            row.note = f"{type(err).__name__}: {message[:300]}"
            traceback.print_exc(file=sys.stderr)
        return row
    build = time.perf_counter() - start
    try:
        with case.model:
            idata = pm.sample(
                draws=args.draws,
                tune=args.tune,
                step=step,
                chains=2,
                cores=2,
                random_seed=args.seed,
                compute_convergence_checks=False,
                progressbar=False,
            )
    except Exception as err:
        row = Row(case.name, step_name, {"build_s": build})
        row.values["sample_s"] = time.perf_counter() - start - build
        row.verdict = "ERROR while sampling"
        row.note = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        traceback.print_exc(file=sys.stderr)
        return row
    sample = time.perf_counter() - start - build
    row = _measure(idata, case, reference, suite, agreement_module, step_name)
    row.values.update(build_s=build, sample_s=sample)
    row.note = _others(step, case.model)
    return row


def _parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated; default all")
    parser.add_argument("--steps", default="MinibatchBarker,Austere,TunaMH,FlyMC")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--n", type=int, default=None, help="N for every free-size model")
    parser.add_argument("--seed", type=int, default=2027, help="random_seed of pm.sample")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    parser.add_argument("--no-cache", action="store_true", help="recompute NUTS references")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """Run the harness; returns 0 (the report, not the exit code, carries the verdicts)."""
    args = _parse(argv)
    warnings.filterwarnings("ignore", message=".*We recommend running at least 4 chains.*")
    suite, agreement_module = _load_suite()
    models = list(suite.BUILDERS) if args.models is None else args.models.split(",")
    steps = args.steps.split(",")
    unknown = [m for m in models if m not in suite.BUILDERS]
    unknown += [s for s in steps if s not in suite.STEP_NAMES]
    if unknown:
        raise SystemExit(
            f"unknown models/steps {unknown}; models: {list(suite.BUILDERS)}, "
            f"steps: {list(suite.STEP_NAMES)}"
        )
    t_start = time.perf_counter()
    report: list[str] = []

    def emit(line: str) -> None:
        print(line, flush=True)
        report.append(line)

    emit(
        f"defaults_check: PyMC {pm.__version__}, draws={args.draws}, tune={args.tune}, "
        f"chains=2, cores=2, seed={args.seed}, n={args.n or 'default'}"
    )
    rows: list[Row] = []
    for model_name in models:
        n = None if model_name in suite.FIXED_SIZE else args.n
        try:
            case = suite.BUILDERS[model_name](n)
        except Exception as err:
            emit(f"[{model_name}] model build FAILED: {type(err).__name__}: {err}")
            traceback.print_exc(file=sys.stderr)
            continue
        t_ref = time.perf_counter()
        try:
            reference = case.reference(use_cache=not args.no_cache)
        except Exception as err:
            reference = None
            emit(f"[{model_name}] reference FAILED: {type(err).__name__}: {err}")
            traceback.print_exc(file=sys.stderr)
        else:
            origin = "cache" if reference.from_cache else "computed now"
            emit(
                f"[{model_name}] N = {case.n_data}; reference {reference.source}: "
                f"{reference.seconds:.1f} s ({origin}, {time.perf_counter() - t_ref:.1f} s "
                f"here) {reference.diagnostics or ''}"
            )
        emit(header())
        for step_name in steps:
            row = run_pair(case, reference, step_name, args, suite, agreement_module)
            rows.append(row)
            emit(row.format())
    total = time.perf_counter() - t_start
    emit("")
    emit("Summary")
    emit(header())
    for row in rows:
        emit(row.format())
    emit(f"total wall time {total:.0f} s")
    if args.out is not None:
        args.out.write_text("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
