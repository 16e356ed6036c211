"""Command line: ``python -m pymc_minibatch_mh.bench EXPERIMENT [--quick]``.

EXPERIMENT is one of gmm, logistic, robust, tall-logistic or all.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pymc_minibatch_mh.bench.experiments import EXPERIMENTS, RunSettings, run
from pymc_minibatch_mh.bench.report import markdown_table, write_all


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(
        prog="python -m pymc_minibatch_mh.bench",
        description="Run minibatch-MH benchmarks against NUTS on synthetic tall data.",
    )
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    parser.add_argument(
        "--quick", action="store_true", help="small N and few draws (a smoke test, ~1 minute)"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cores", type=int, default=2, help="parallel chains (default 2)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    args = parser.parse_args(argv)

    settings = RunSettings(
        quick=args.quick, seed=args.seed, cores=args.cores, progressbar=not args.no_progress
    )
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    written = []
    for name in names:
        start = time.perf_counter()
        result = run(name, settings)
        paths = write_all(result, args.out, suffix="-quick" if args.quick else "")
        written += paths
        print(f"\n{result.title} ({time.perf_counter() - start:.0f} s)")
        print(markdown_table(result.table))
        for note in result.notes:
            print(f"- {note}")
        print("written: " + ", ".join(str(p) for p in paths))
    return written


if __name__ == "__main__":
    main()
