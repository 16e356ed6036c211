"""First-run construction time of the default steps, with every compile cache empty.

Usage::

    python benchmarks/cold_construction.py [--steps TunaMH MinibatchBarker] [--skip-other]

For each family (logistic, Poisson-log, Normal with a free sigma; N = 20,000 rows, D = 10
covariates) and each step, a fresh Python process builds the model and then the step
with no arguments, with an empty PyTensor compile directory, an empty PyTensor numba cache
and an empty numba cache (so the package's function cache, which lives in the compile
directory, is empty too): the first run of a model never compiled on the machine. The
process reports the step's ``setup_s`` (construction), ``compile_s`` (the part spent in
PyTensor's compile calls; numba compiles at a function's first call, which is not in
it), ``setup_cache`` and ``functions_compiled``, and the time of the step's first
``import`` (the package imports its step classes on first use). A second process on the
same, now filled, directories gives the warm construction.

Then other models (N = 20,000: centred and non-centred 20-group hierarchies, a
hierarchical logistic regression, negative binomial, Student-t and zero-inflated Poisson
regressions) against PyMC's NUTS: each step's cold construction, and NUTS's whole cold run
of 5 tuning and 5 draws (one chain; its compilation and first calls), each in a fresh
process with empty caches. Writes ``benchmarks/results/cold_construction-py{major}{minor}.md``.
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
OTHER_MODELS = (
    "hierarchy",
    "hierarchical_logistic",
    "non_centred",
    "negative_binomial",
    "student_t",
    "zero_inflated_poisson",
)
N_ROWS, N_COVARIATES, N_GROUPS = 20_000, 10, 20

_CHILD = r"""
import json, sys, time
import numpy as np, pymc as pm
import pymc_minibatch_mh as mm

family, step_name, n, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
groups = int(sys.argv[5])
rng = np.random.default_rng(0)
x = rng.normal(size=(n, d))
truth = 0.3 * rng.normal(size=d)
g = rng.integers(0, groups, size=n)
effects = np.linspace(-1, 1, groups)
with pm.Model() as model:
    beta = pm.Normal("beta", 0, 2, shape=d)
    eta = x @ beta
    if family == "logistic":
        y = (rng.random(n) < 1 / (1 + np.exp(-x @ truth))).astype(int)
        pm.Bernoulli("y", logit_p=eta, observed=y)
    elif family == "poisson":
        pm.Poisson("y", mu=pm.math.exp(eta), observed=rng.poisson(np.exp(0.5 * x @ truth)))
    elif family == "linear":
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", mu=eta, sigma=sigma, observed=x @ truth + rng.normal(size=n))
    elif family in ("hierarchy", "hierarchical_logistic", "non_centred"):
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        if family == "non_centred":
            a = mu + tau * pm.Normal("z", 0, 1, shape=groups)
        else:
            a = pm.Normal("a", mu, tau, shape=groups)
        if family == "hierarchical_logistic":
            p = 1 / (1 + np.exp(-effects[g] - x @ truth))
            pm.Bernoulli("y", logit_p=a[g] + eta, observed=(rng.random(n) < p).astype(int))
        else:
            sigma = pm.HalfNormal("sigma", 2)
            y = effects[g] + x @ truth + rng.normal(size=n)
            pm.Normal("y", mu=a[g] + eta, sigma=sigma, observed=y)
    elif family == "negative_binomial":
        alpha = pm.Exponential("alpha", 1)
        y = rng.negative_binomial(2, 2 / (2 + np.exp(0.5 * x @ truth)))
        pm.NegativeBinomial("y", mu=pm.math.exp(eta), alpha=alpha, observed=y)
    elif family == "student_t":
        sigma = pm.HalfNormal("sigma", 2)
        y = x @ truth + rng.standard_t(4, size=n)
        pm.StudentT("y", nu=4, mu=eta, sigma=sigma, observed=y)
    elif family == "zero_inflated_poisson":
        psi = pm.Beta("psi", 2, 2)
        y = rng.poisson(np.exp(0.5 * x @ truth)) * (rng.random(n) < 0.7)
        pm.ZeroInflatedPoisson("y", psi=psi, mu=pm.math.exp(eta), observed=y)
start = time.perf_counter()
if step_name == "NUTS":
    with model:
        pm.sample(tune=5, draws=5, chains=1, progressbar=False,
                  compute_convergence_checks=False, random_seed=1)
    print(json.dumps({"run_s": time.perf_counter() - start}))
    sys.exit(0)
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
    d = N_COVARIATES if family in FAMILIES else 3
    command = [sys.executable, "-c", _CHILD, family, step, str(N_ROWS), str(d), str(N_GROUPS)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cold(family: str, step: str) -> dict:
    """``step`` on ``family`` in a fresh process with every compile cache empty."""
    with tempfile.TemporaryDirectory(prefix="cold-") as tmp:
        return construct(family, step, Path(tmp))


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", nargs="+", default=["TunaMH", "MinibatchBarker"])
    parser.add_argument("--skip-other", action="store_true", help="only the three families")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    import pymc
    import pytensor

    rows = []
    for family in FAMILIES:
        for step in args.steps:
            with tempfile.TemporaryDirectory(prefix="cold-") as tmp:
                first = construct(family, step, Path(tmp))
                warm = construct(family, step, Path(tmp))
            rows.append((family, step, first, warm))
            print(f"{family} {step}: cold {first}, warm {warm}", flush=True)
    others = []
    for family in () if args.skip_other else OTHER_MODELS:
        nuts = cold(family, "NUTS")
        steps = {step: cold(family, step) for step in args.steps}
        others.append((family, nuts, steps))
        print(f"{family}: NUTS {nuts}, {steps}", flush=True)
    tag = "py{}{}".format(*sys.version_info[:2])
    lines = [
        "# First-run (cold) and warm construction of the default steps",
        "",
        f"`python benchmarks/cold_construction.py`, {time.strftime('%Y-%m-%d')}; Python "
        f"{sys.version.split()[0]}, PyMC {pymc.__version__}, PyTensor {pytensor.__version__}; "
        f"N = {N_ROWS:,}, D = {N_COVARIATES}; each construction in a fresh process; cold: "
        "empty compile directory, PyTensor numba cache and numba cache; warm: the same "
        "directories after the cold run. `import_s`: first use of the step class (imports "
        "the step modules); `compile_s`: time in PyTensor's compile calls (numba compiles "
        "at a function's first call, counted in `setup_s` only).",
        "",
        "| family | step | cold setup_s | cold compile_s | functions compiled | "
        "warm setup_s | warm setup_cache | import_s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for family, step, first, warm in rows:
        lines.append(
            f"| {family} | `{step}()` | {first['setup_s']:.2f} | {first['compile_s']:.2f} | "
            f"{first['functions_compiled']} ({first['setup_cache']}) | {warm['setup_s']:.2f} | "
            f"{warm['setup_cache']} | {first['import_s']:.2f} |"
        )
    if others:
        lines += [
            "",
            f"Other models (N = {N_ROWS:,}, 3 covariates, {N_GROUPS} groups), every cache empty "
            "in every process: each step's construction against PyMC's NUTS's whole run of 5 "
            "tuning and 5 draws on one chain (its compilation and first calls).",
            "",
            "| model | PyMC NUTS run s | "
            + " | ".join(f"`{s}()` setup s" for s in args.steps)
            + " |",
            "|---|---|" + "---|" * len(args.steps),
        ]
        for family, nuts, steps in others:
            cells = [_cell(steps[step], "setup_s") for step in args.steps]
            lines.append(f"| {family} | {_cell(nuts, 'run_s')} | " + " | ".join(cells) + " |")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"cold_construction-{tag}.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"written: {path}")
    return path


def _cell(result: dict, key: str) -> str:
    if "error" in result:
        return "refused: " + result["error"].split(": ", 1)[-1][:90].replace("|", "/")
    return f"{result[key]:.1f}"


if __name__ == "__main__":
    main()
