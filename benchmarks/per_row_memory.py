"""What each default step keeps in memory per data row, besides the data.

Usage::

    python benchmarks/per_row_memory.py [--n 200000] [--steps TunaMH FlyMC]

Builds a logistic regression (10 float32 covariates, int8 observations) and each step
with no arguments (FlyMC after two draws, when its chain state exists), then walks every
object the step holds (attributes of the package's objects, dicts, lists and tuples) and
lists the numpy arrays with N (or N + 1) entries, once per underlying buffer, in bytes
per row. The covariate array itself (40 bytes per row) is the user's and shows up where
a compiled function or a design holds it. Prints a markdown table
(``docs/toward_1e9_rows.md`` quotes it).
"""

from __future__ import annotations

import argparse

import numpy as np
import pymc as pm

import pymc_minibatch_mh as mh

N_FEATURES = 10


def logistic_model(n: int) -> pm.Model:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, N_FEATURES)).astype(np.float32)
    eta = x @ rng.normal(0.0, 0.5, N_FEATURES)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int8)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=N_FEATURES)
        alpha = pm.Normal("alpha", 0, 2)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    return model


def per_row_arrays(root, n: int) -> dict[str, int]:
    """``{path: bytes}`` of the arrays with ``n`` or ``n + 1`` entries reachable from
    ``root`` through the package's objects, one entry per underlying buffer."""
    found: dict[str, int] = {}
    buffers: set[int] = set()
    seen: set[int] = set()

    def walk(obj, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 8:
            return
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            base = obj
            while isinstance(base.base, np.ndarray):
                base = base.base
            if obj.ndim >= 1 and obj.shape[0] in (n, n + 1) and id(base) not in buffers:
                buffers.add(id(base))
                found[path] = int(base.nbytes)
            return
        if isinstance(obj, dict):
            for key, value in obj.items():
                walk(value, f"{path}[{key!r}]", depth + 1)
        elif isinstance(obj, list | tuple | set):
            for i, value in enumerate(obj):
                walk(value, f"{path}[{i}]", depth + 1)
        elif type(obj).__module__.startswith("pymc_minibatch_mh"):
            for key, value in getattr(obj, "__dict__", {}).items():
                walk(value, f"{path}.{key}", depth + 1)

    walk(root, "step", 0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument(
        "--steps", nargs="+", default=["MinibatchBarker", "Austere", "TunaMH", "FlyMC"]
    )
    args = parser.parse_args()
    print("| step | array | bytes / row |\n|---|---|---|")
    for name in args.steps:
        with logistic_model(args.n) as model:
            step = getattr(mh, name)(progressbar=False)
            if name == "FlyMC":
                pm.sample(
                    step=step,
                    tune=2,
                    draws=2,
                    chains=1,
                    cores=1,
                    progressbar=False,
                    compute_convergence_checks=False,
                )
        found = per_row_arrays(step, args.n)
        for path, nbytes in found.items():
            print(f"| {name} | `{path}` | {nbytes / args.n:.1f} |")
        observed = model.rvs_to_values[model.observed_RVs[0]]
        print(
            f"| {name} | total (PyMC keeps the observations as {observed.dtype}) | "
            f"{sum(found.values()) / args.n:.1f} |"
        )


if __name__ == "__main__":
    main()
