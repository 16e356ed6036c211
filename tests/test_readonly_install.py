"""The package built as a wheel and installed into a read-only site-packages: sampling with
each step writes nothing inside the installed tree. Its compile caches (PyTensor functions,
numba's machine code of the compiled loops, the markers of a background compilation) go to
the user's cache directory (:mod:`pymc_minibatch_mh.cache_location`).

The tree is made read-only with ``chmod``, which does not stop root: as root the check is
the comparison of the tree's listing (names, sizes, modification times) before and after,
which is the real check in either case. Python is left free to write bytecode
(``PYTHONDONTWRITEBYTECODE`` unset); pip compiled it at installation, as for a user's
install, so a valid ``.pyc`` is found and nothing needs writing.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Run in the subprocess: a tiny logistic regression sampled with each step, then one
#: compiled loop called (its numba cache must appear in the package's cache directory).
SCRIPT = """
import json, os, sys, time
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_minibatch_mh
from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH

rng = np.random.default_rng(20261207)
n = 2000
x = rng.normal(size=n)
y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.3 + 0.8 * x)))).astype(np.int8)
seconds = {}
for step in (MinibatchBarker, Austere, TunaMH, FlyMC):
    start = time.perf_counter()
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        pm.Bernoulli("obs", logit_p=beta[0] + beta[1] * x, observed=y)
        pm.sample(
            step=step(), draws=50, tune=50, chains=1, cores=1, progressbar=False,
            compute_convergence_checks=False, random_seed=1,
        )
    seconds[step.__name__] = round(time.perf_counter() - start, 2)

# A compiled loop, compiled and written to numba's disk cache now.
from pymc_minibatch_mh.kernels import compiled_cache, logit_numba

assert abs(logit_numba.bernoulli_loglik(0.0, 1.0) + np.log(2.0)) < 1e-12
marker = compiled_cache._compiling_marker((0, "<f8", 2, 2, "<i4"))

# A compilation started in the background by a step writes the same cache: wait for it.
cache = Path(os.environ["PYMC_MINIBATCH_MH_CACHE_DIR"])
deadline = time.monotonic() + 300
while any(cache.rglob("compiling-*")) and time.monotonic() < deadline:
    time.sleep(0.5)
print(json.dumps({
    "package": pymc_minibatch_mh.__file__,
    "marker": marker,
    "compiling": [str(p) for p in cache.rglob("compiling-*")],
    "seconds": seconds,
}))
"""


def _listing(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: relative path -> (kind, size, modification time in ns)."""
    entries = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            info = path.lstat()
            kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
            size = info.st_size if kind == "file" else 0
            entries[str(path.relative_to(root))] = (kind, size, info.st_mtime_ns)
    return entries


def _set_writable(root: Path, writable: bool) -> None:
    """Add (the owner's) or remove (everyone's) write permission on ``root`` and below."""
    paths = [root, *root.rglob("*")]
    for path in paths:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        if writable:
            path.chmod(mode | stat.S_IWUSR)
        else:
            path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _pip(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--no-deps", "--no-index", "--quiet"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _installed_site(tmp_path: Path) -> Path:
    """The package's wheel, built from this checkout without network, installed (with
    its bytecode, as pip installs it) into ``tmp_path / "site"``."""
    try:
        import hatchling  # noqa: F401
    except ImportError:
        pytest.fail("building the wheel offline needs hatchling (in the [test] extra)")
    wheels = tmp_path / "wheels"
    _pip("wheel", "--no-build-isolation", "--wheel-dir", str(wheels), str(REPO), cwd=tmp_path)
    (wheel,) = wheels.glob("pymc_minibatch_mh-*.whl")
    site = tmp_path / "site"
    _pip("install", "--target", str(site), str(wheel), cwd=tmp_path)
    return site


def test_sampling_with_each_step_writes_nothing_in_a_read_only_install(tmp_path):
    site = _installed_site(tmp_path)
    package = site / "pymc_minibatch_mh"
    assert (package / "py.typed").is_file()  # shipped in the wheel
    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    script = tmp_path / "sample_each_step.py"
    script.write_text(SCRIPT)
    env = {
        key: value
        for key, value in os.environ.items()
        if key
        not in {
            "PYTHONDONTWRITEBYTECODE",  # bytecode writing is attempted
            "PYTHONPYCACHEPREFIX",
            "PYTHONPATH",
            "NUMBA_CACHE_DIR",
            "PYMC_MINIBATCH_MH_FUNCTION_CACHE",
        }
    }
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYMC_MINIBATCH_MH_CACHE_DIR=str(cache),
        PYTHONPATH=str(site),
        PYMC_MINIBATCH_MH_COMPILED_LOOPS="1",  # the user's default (the test suite's is 0)
    )
    before = _listing(site)
    pycache_before = {path for path in before if Path(path).name == "__pycache__"}
    _set_writable(site, False)
    try:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        elapsed = time.perf_counter() - start
        after = _listing(site)
    finally:
        _set_writable(site, True)  # so that tmp_path can be removed
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Imported from the read-only tree (not from this checkout).
    assert Path(result["package"]).resolve().is_relative_to(site.resolve())
    assert not result["compiling"], f"background compilation unfinished after {elapsed:.0f} s"

    # Nothing written in the installed tree: same entries, sizes and times.
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(path for path in set(before) & set(after) if before[path] != after[path])
    as_root = getattr(os, "geteuid", lambda: None)() == 0  # chmod did not stop writes
    assert (added, removed, changed) == ([], [], []), f"written in the install (root: {as_root})"
    assert {path for path in after if Path(path).name == "__pycache__"} == pycache_before
    assert not [path for path in after if path.endswith((".nbi", ".nbc"))]

    # Control: the caches were written, in the package's cache directory.
    assert any((cache / "numba").rglob("logit_numba.bernoulli_loglik-*.nbi"))
    assert any((cache / "functions").glob("*.pkl"))
    assert Path(result["marker"]).resolve().is_relative_to((cache / "numba").resolve())
    # ... and not in numba's user-wide fallback under the (temporary) home.
    assert not [path for path in home.rglob("*") if "logit_numba" in path.name]
