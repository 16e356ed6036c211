"""Variance of the minibatch log-ratio estimate with and without Taylor control variates.

Logistic regression, N = 10^5, D = 10 + intercept, temperature 1. For moves of the size a
well-tuned sampler makes (Laplace-scale), prints N^2 Var(per-datum term): the variance of
the log-ratio estimate from a batch of b rows is this over b.

Run: ``python benchmarks/cv_variance.py``.
"""

import numpy as np
from pymc.pytensorf import make_shared_replacements

from pymc_minibatch_mh.bench.problems import logistic_model
from pymc_minibatch_mh.kernels.control_variates import ControlVariateTarget
from pymc_minibatch_mh.likelihood import build_tall_data
from pymc_minibatch_mh.likelihood.taylor import compile_residual_diff, full_data_taylor
from pymc_minibatch_mh.step_methods.reference import block_position, find_map


def main(n_data: int = 100_000, n_moves: int = 5, seed: int = 0) -> None:
    model = logistic_model(n_data, 10, seed=seed)
    point = model.initial_point()
    value_vars = model.value_vars
    shared = make_shared_replacements(point, value_vars, model)
    data = build_tall_data(model, value_vars, shared=shared, initial_point=point)
    with model:
        reference = block_position(find_map(model, point, progressbar=False), value_vars)
    proxy = full_data_taylor(data, reference)
    target = ControlVariateTarget(data, proxy, compile_residual_diff(data))
    chol = np.linalg.cholesky(np.linalg.inv(-proxy.hessian))
    rng = np.random.default_rng(seed)
    everything = np.arange(n_data)
    print(f"N = {n_data}: N^2 Var(term) for {n_moves} posterior-scale moves")
    print("plain            control variates   ratio")
    for _ in range(n_moves):
        q = reference + chol @ rng.standard_normal(reference.size)
        q_new = q + 2.38 / np.sqrt(q.size) * chol @ rng.standard_normal(q.size)
        plain = n_data**2 * data.loglik_diff(q_new, q, everything).var()
        cv = n_data**2 * target.loglik_diff(q_new, q, everything).var()
        print(f"{plain:14.4g}   {cv:14.4g}   {plain / cv:10.3g}")


if __name__ == "__main__":
    main()
