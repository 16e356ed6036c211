"""First-run construction time of the default steps, with every compile cache empty.

Usage::

    python benchmarks/cold_construction.py [--steps TunaMH MinibatchBarker] [--repeat 1]

For each family (logistic, Poisson-log, Normal with a free sigma; N = 20,000 rows, D = 10
covariates) and each step, a fresh Python process builds the model and then the step
with no arguments, with an empty PyTensor compile directory and an empty numba cache
(so the package's function cache, which lives in the compile directory, is empty too):
the first run of a model never compiled on the machine. The process reports the step's
``setup_s`` (construction), ``compile_s`` (the part spent compiling PyTensor
functions), ``setup_cache`` and ``functions_compiled``, and the time of the step's first
``import`` (the package imports its step classes on first use). A second process on the
same, now filled, directories gives the warm construction. Writes
``benchmarks/results/cold_construction-py{major}{minor}.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pymc_minibatch_mh.bench.peers import compile_cache_env

FAMILIES = ("logistic", "poisson", "linear")
N_ROWS, N_COVARIATES = 20_000, 10

_CHILD = r"""
import json, sys, time
import numpy as np, pymc as pm
import pymc_minibatch_mh as mm

family, step_name, n, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
x = rng.normal(size=(n, d))
truth = 0.3 * rng.normal(size=d)
with pm.Model() as model:
    beta = pm.Normal("beta", 0, 2, shape=d)
    eta = x @ beta
    if family == "logistic":
        y = (rng.random(n) < 1 / (1 + np.exp(-x @ truth))).astype(int)
        pm.Bernoulli("y", logit_p=eta, observed=y)
    elif family == "poisson":
        pm.Poisson("y", mu=pm.math.exp(eta), observed=rng.poisson(np.exp(0.5 * x @ truth)))
    else:
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", mu=eta, sigma=sigma, observed=x @ truth + rng.normal(size=n))
start = time.perf_counter()
step_class = getattr(mm, step_name)
imported = time.perf_counter() - start
with model:
    step = step_class(progressbar=False)
print(json.dumps({
    "import_s": imported,
    "setup_s": step.setup_s,
    "compile_s": step.compile_s,
    "setup_cache": step.setup_cache,
    "functions_compiled": step.functions_compiled,
}))
"""


def construct(family: str, step: str, compiledir: Path) -> dict:
    """Build ``step`` on ``family`` in a fresh process whose caches are in ``compiledir``."""
    env = compile_cache_env(compiledir)
    command = [sys.executable, "-c", _CHILD, family, step, str(N_ROWS), str(N_COVARIATES)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{step} on {family} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", nargs="+", default=["TunaMH", "MinibatchBarker"])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    import pymc
    import pytensor

    rows = []
    for family in FAMILIES:
        for step in args.steps:
            with tempfile.TemporaryDirectory(prefix="cold-") as tmp:
                cold = construct(family, step, Path(tmp))
                warm = construct(family, step, Path(tmp))
            rows.append((family, step, cold, warm))
            print(f"{family} {step}: cold {cold}, warm {warm}", flush=True)
    tag = "py{}{}".format(*sys.version_info[:2])
    lines = [
        "# First-run (cold) and warm construction of the default steps",
        "",
        f"`python benchmarks/cold_construction.py`, {time.strftime('%Y-%m-%d')}; Python "
        f"{sys.version.split()[0]}, PyMC {pymc.__version__}, PyTensor {pytensor.__version__}; "
        f"N = {N_ROWS:,}, D = {N_COVARIATES}; each construction in a fresh process; cold: "
        "empty compile directory and numba cache; warm: the same directories after the "
        "cold run. `import_s`: first use of the step class (imports the step modules).",
        "",
        "| family | step | cold setup_s | cold compile_s | functions compiled | "
        "warm setup_s | warm setup_cache | import_s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for family, step, cold, warm in rows:
        lines.append(
            f"| {family} | `{step}()` | {cold['setup_s']:.2f} | {cold['compile_s']:.2f} | "
            f"{cold['functions_compiled']} ({cold['setup_cache']}) | {warm['setup_s']:.2f} | "
            f"{warm['setup_cache']} | {cold['import_s']:.2f} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"cold_construction-{tag}.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"written: {path}")
    return path


if __name__ == "__main__":
    main()
