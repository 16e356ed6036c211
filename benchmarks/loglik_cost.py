"""Per-call cost of the subsampled log-likelihood for a fixed batch at growing N.

Usage: ``python benchmarks/loglik_cost.py [--batch 1000] [--sizes 10000 100000 1000000]``

Prints the median time of ``loglik(q, idx)`` with ``len(idx) = batch`` and, for
contrast, of ``loglik_full(q)``. The first should stay flat in N (cost
proportional to the batch), the second grows linearly.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import numpy as np
import pymc as pm
from pymc.pytensorf import make_shared_replacements

from pymc_minibatch_mh.likelihood import build_tall_data


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    rows = []
    print(f"{'N':>10} {'loglik(batch=' + str(args.batch) + ')':>22} {'loglik_full':>14}")
    for n_data in args.sizes:
        x = rng.normal(size=(n_data, args.features))
        y = (rng.random(n_data) < 0.5).astype(np.int8)
        with pm.Model() as model:
            beta = pm.Normal("beta", 0, 1, shape=args.features)
            pm.Bernoulli("y", logit_p=x @ beta, observed=y)
        point = model.initial_point()
        shared = make_shared_replacements(point, model.value_vars, model)
        data = build_tall_data(model, model.value_vars, shared=shared, initial_point=point)
        q = np.zeros(data.ndim)
        idx = rng.integers(0, n_data, size=args.batch)
        t_batch = _median_time(partial(data.loglik, q, idx), args.repeats)
        t_full = _median_time(partial(data.loglik_full, q), max(5, args.repeats // 20))
        rows.append({"n_data": n_data, "batch_s": t_batch, "full_s": t_full})
        print(f"{n_data:>10} {t_batch * 1e6:>19.1f} us {t_full * 1e3:>11.2f} ms")
    ratio = rows[-1]["batch_s"] / rows[0]["batch_s"]
    print(f"batch-call time ratio N={args.sizes[-1]} vs N={args.sizes[0]}: {ratio:.2f}")
    return rows


if __name__ == "__main__":
    main()
