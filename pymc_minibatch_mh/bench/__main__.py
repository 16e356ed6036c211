"""Command line: ``python -m pymc_minibatch_mh.bench EXPERIMENT [--quick]``.

EXPERIMENT is one of gmm, logistic, robust, tall-logistic, all, peers (our default
steps against numpyro's HMCECS, each method in a fresh process; needs the ``[peers]``
extra: numpyro and jax), many (many parameters: 500 unbalanced group intercepts and a
100-covariate logistic regression, our default steps against PyMC's NUTS, numpyro's NUTS
and HMCECS through the peers machinery; needs ``[peers]`` too), crossover (the N from
which each step beats PyMC's NUTS on a linear, a hierarchical and a logistic model; needs
``[peers]``), or tall-disk (default
steps on float32 data in ``.npy`` files opened as memory maps: peak memory, setup against
one raw read, cost per draw). Every run rewrites the index of its output folder
(``README.md``, :mod:`pymc_minibatch_mh.bench.results_index`); ``index`` rewrites it alone.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from pymc_minibatch_mh.bench.experiments import EXPERIMENTS, RunSettings, run
from pymc_minibatch_mh.bench.report import markdown_table, write_all
from pymc_minibatch_mh.bench.results_index import write_index
from pymc_minibatch_mh.bench.tall_disk import SOURCES


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(
        prog="python -m pymc_minibatch_mh.bench",
        description="Run minibatch-MH benchmarks against NUTS on synthetic tall data.",
    )
    parser.add_argument(
        "experiment",
        choices=[*EXPERIMENTS, "all", "peers", "many", "crossover", "tall-disk", "index"],
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small N and few draws (a smoke test: about a minute; peers, many and crossover: "
        "minutes)",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cores", type=int, default=2, help="parallel chains (default 2)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--cache",
        choices=["warm", "cold"],
        default="warm",
        help="peers, many, crossover: warm the compilation caches first (default) or start "
        "every process cold",
    )
    parser.add_argument(
        "--pymc-nuts-everywhere",
        action="store_true",
        help="peers: also run PyMC's NUTS at N = 10^6 (about an hour)",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        help="crossover: numbers of rows to run (default 10^4, 3*10^4, ..., 10^6)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="tall-disk: also N = 10^8 (4 GB of float32 on disk, about 10 minutes to write)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "pymc-minibatch-mh-tall-disk",
        help="tall-disk: where the data files are written (and reused)",
    )
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="memmap",
        help="tall-disk: read the data as np.memmap (default), as the same files through "
        "tall_array (the package's pm.Data-like container), or as zarr copies through "
        "chunked_data or through tall_array (zarr-container; both need the [dask] extra)",
    )
    parser.add_argument(
        "--dask-workers",
        type=int,
        default=0,
        help="tall-disk: run each sampling process with a dask.distributed LocalCluster of "
        "this many worker processes (0: none)",
    )
    args = parser.parse_args(argv)
    written = [] if args.experiment == "index" else _run_experiment(args)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"index rewritten: {write_index(args.out)}")
    return written


def _run_experiment(args) -> list[Path]:
    if args.experiment == "peers":
        return _peers(args)
    if args.experiment == "many":
        return _many(args)
    if args.experiment == "crossover":
        return _crossover(args)
    if args.experiment == "tall-disk":
        return _tall_disk(args)

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


def _tall_disk(args) -> list[Path]:
    import platform

    from pymc_minibatch_mh.bench.tall_disk import markdown_report, run_tall_disk, write_reports

    if args.quick:
        sizes, draws, tune = (10**5, 10**6), 200, 100
    else:
        sizes, draws, tune = (10**6, 10**7, *((10**8,) if args.full else ())), 1000, 500
    result = run_tall_disk(
        sizes=sizes,
        directory=args.data_dir,
        draws=draws,
        tune=tune,
        seed=args.seed,
        source=args.source,
        dask_workers=args.dask_workers,
    )
    stack = "py" + "".join(platform.python_version_tuple()[:2])
    source = "" if args.source == "memmap" else f"-{args.source}"
    source += f"-cluster{args.dask_workers}" if args.dask_workers else ""
    suffix = f"{source}-{stack}" + ("-quick" if args.quick else "")
    paths = write_reports(result, args.out, suffix=suffix)
    print(markdown_report(result))
    print("written: " + ", ".join(str(p) for p in paths))
    return paths


def _peers(args) -> list[Path]:
    from pymc_minibatch_mh.bench.peers import markdown_report, run_peers, write_reports

    _require_peers_extra("peers")
    result = run_peers(
        quick=args.quick,
        cache=args.cache,
        seed=args.seed,
        pymc_nuts_everywhere=args.pymc_nuts_everywhere,
    )
    paths = write_reports(result, args.out, suffix=_peers_suffix(args))
    print(markdown_report(result))
    print("written: " + ", ".join(str(p) for p in paths))
    return paths


def _many(args) -> list[Path]:
    from pymc_minibatch_mh.bench.many import many_report, run_many, write_many_reports

    _require_peers_extra("many")
    result = run_many(quick=args.quick, cache=args.cache, seed=args.seed)
    paths = write_many_reports(result, args.out, suffix=_peers_suffix(args))
    print(many_report(result))
    print("written: " + ", ".join(str(p) for p in paths))
    return paths


def _crossover(args) -> list[Path]:
    from pymc_minibatch_mh.bench import crossover

    _require_peers_extra("crossover")  # numpyro's NUTS is the logistic model's reference
    result = crossover.run_crossover(
        quick=args.quick, cache=args.cache, seed=args.seed, sizes=args.sizes
    )
    paths = crossover.write_crossover_reports(result, args.out, suffix=_peers_suffix(args))
    print(crossover.crossover_report(result))
    print("written: " + ", ".join(str(p) for p in paths))
    return paths


def _require_peers_extra(experiment: str) -> None:
    for package in ("numpyro", "jax"):
        try:
            __import__(package)
        except ImportError:
            raise SystemExit(
                f"bench {experiment} needs {package}: pip install 'pymc-minibatch-mh[peers]'"
            ) from None


def _peers_suffix(args) -> str:
    """``-quick``, ``-cold`` as run, and the Python version: one report per stack."""
    suffix = ("-quick" if args.quick else "") + ("-cold" if args.cache == "cold" else "")
    return suffix + "-py{}{}".format(*sys.version_info[:2])


if __name__ == "__main__":
    main()
