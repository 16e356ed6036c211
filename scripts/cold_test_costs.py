"""List the default tests that are costly on a machine whose compile caches are empty.

CI runs on a fresh machine: every model a test builds is compiled from nothing (PyTensor's
C modules on PyMC 5, numba on PyMC 6), and a test that is quick on a developer's warm
machine can take a minute there. This script runs the default test selection with empty
caches (a temporary compile directory) and a per-test time limit (pytest-timeout), and
writes every test function that ran over the limit, or failed or erred because an earlier
one did (a shared fixture that timed out), to ``tests/cold_costly.txt``. ``tests/conftest.py``
marks those ``slow``: they run in ``pytest -m slow`` (and in CI after the default run, as
the time budget allows) instead of the default run.

Run it on each stack and merge (with ``--merge`` the tests already listed are left out, so
the ones that now compile first are measured as such)::

    python scripts/cold_test_costs.py --timeout 4            # python 3.11 / PyMC 5
    python3.12 scripts/cold_test_costs.py --timeout 4 --merge # python 3.12 / PyMC 6

It needs ``pip install pytest-timeout``. A test is listed by function (every
parametrisation of it), so the default run keeps no half of a parametrised check.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "cold_costly.txt"


class _Recorder:
    """pytest plugin: each test's wall time and whether any phase failed."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self.failed: set[str] = set()

    def pytest_runtest_logstart(self, nodeid, location):
        self.started[nodeid] = time.perf_counter()

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.add(report.nodeid)

    def pytest_runtest_logfinish(self, nodeid, location):
        self.seconds[nodeid] = time.perf_counter() - self.started.pop(nodeid)


def _function(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def _read(path: Path) -> set[str]:
    if not path.exists():
        return set()
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds per test")
    parser.add_argument("--merge", action="store_true", help="add to the existing list")
    parser.add_argument("--out", type=Path, default=LIST, help="the list to write")
    parser.add_argument(
        "pytest_args", nargs="*", help="what to run instead of all of tests/ (paths, options)"
    )
    args = parser.parse_args(argv)

    import pytest

    cache = tempfile.mkdtemp(prefix="cold-compile-")
    os.environ["PYTENSOR_FLAGS"] = f"base_compiledir={cache}"
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(cache, "numba")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not args.merge:  # measure every default test, the listed ones too
        os.environ["COLD_COSTLY_LIST"] = "off"
    recorder = _Recorder()
    pytest.main(
        [
            *(args.pytest_args or [str(ROOT / "tests")]),
            "-q",
            "-p",
            "timeout",
            f"--timeout={args.timeout}",
            "--timeout-method=signal",
        ],
        plugins=[recorder],
    )
    costly = {_function(n) for n, s in recorder.seconds.items() if s > args.timeout}
    costly |= {_function(n) for n in recorder.failed}
    listed = (_read(args.out) if args.merge else set()) | costly
    kept = sum(s for n, s in recorder.seconds.items() if _function(n) not in listed)
    args.out.write_text(
        "# Default tests that take longer than a few seconds with empty compile caches\n"
        "# (written by scripts/cold_test_costs.py; tests/conftest.py marks them slow).\n"
        + "".join(f"{name}\n" for name in sorted(listed))
    )
    print(
        f"{len(costly)} costly test functions on this stack, {len(listed)} listed in "
        f"{args.out}; the rest of the run took {kept:.0f} s here.",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
