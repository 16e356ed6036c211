"""``tests/cold_costly.txt`` names test functions that exist, and they are marked slow.

The list moves tests that are costly on a machine with empty compile caches out of the
default run (``tests/conftest.py``); a stale entry would silently stop matching anything,
and a typo would leave a costly test in the default run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _listed() -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in (TESTS / "cold_costly.txt").open())
    return [line for line in lines if line]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef)
            }
    return names


def test_every_listed_test_exists():
    listed = _listed()
    assert listed and len(listed) == len(set(listed))
    missing = []
    for entry in listed:
        path, _, function = entry.partition("::")
        if not (ROOT / path).is_file() or function not in _test_functions(ROOT / path):
            missing.append(entry)
    assert not missing, f"entries of cold_costly.txt that match no test: {missing}"


def test_listed_tests_are_marked_slow():
    """Collect one file with ``-m slow``: a listed test is selected, an unlisted test of
    the same file is not (the negative control)."""
    listed = _listed()
    entry = next(e for e in listed if e.startswith("tests/bounds/"))
    path = entry.partition("::")[0]
    unlisted = sorted(_test_functions(ROOT / path) - {e.partition("::")[2] for e in listed})
    if not unlisted:
        pytest.skip(f"every test of {path} is listed")
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    names = {line.split("[", 1)[0] for line in collected.stdout.splitlines() if "::" in line}
    assert entry in names, collected.stdout + collected.stderr
    assert f"{path}::{unlisted[0]}" not in names
