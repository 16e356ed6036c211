"""Regenerate the Barker correction table shipped beside its kernel,
``pymc_minibatch_mh/kernels/correction_c1.npz``.

Usage::

    python scripts/build_correction_table.py [--n-grid 4000] [--sigma 1.0] [--ridge 10] [--out PATH]

The default settings (n_grid = 4000, V = 20, sigma = 1, lambda = 10) take a few
minutes of dense linear algebra and about 1 GB of memory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pymc_minibatch_mh.kernels.correction import (
    CorrectionTable,
    build_correction_masses,
    correction_sup_error,
)

DEFAULT_OUT = (
    Path(__file__).resolve().parents[1] / "pymc_minibatch_mh" / "kernels" / "correction_c1.npz"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-grid", type=int, default=4000)
    parser.add_argument("--half-width", type=float, default=20.0)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--ridge", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    start = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(f"\r  accumulating M^T M: {done}/{total} rows", end="", file=sys.stderr, flush=True)

    masses = build_correction_masses(
        args.n_grid, args.half_width, args.sigma, args.ridge, progress=progress
    )
    print(file=sys.stderr)
    err = correction_sup_error(masses, args.n_grid, args.half_width, args.sigma)
    table = CorrectionTable.from_masses(
        masses, args.n_grid, args.half_width, args.sigma, args.ridge
    )
    table.save(args.out)
    print(
        f"wrote {args.out}: sup error {err:.3e}, sum of masses {masses.sum():.10f}, "
        f"{time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
