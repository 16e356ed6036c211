"""Tall logistic regression: MinibatchBarker() with its defaults against NUTS.

Run ``python examples/logistic_tall.py`` (N = 10^6, about 10-20 minutes on two cores,
most of it NUTS) or ``python examples/logistic_tall.py --quick`` (N = 20,000, under a
minute).

What this example shows
-----------------------
1. A PyMC model is written as usual, with the *full* data as ``observed=``: no
   ``pm.Minibatch`` and no ``total_size``. The step method finds the per-datum
   log-likelihood in the model graph and draws its own minibatches.
2. At temperature 1 (the real posterior), plain minibatch tests need batches close to N.
   The default control variates subtract a second-order Taylor expansion of every
   per-datum log-likelihood around the MAP, whose full-data sum is computed once;
   only the small remainders are subsampled, so batches stay small.
3. The moves read no data. The prior plus the Taylor proxy is a surrogate of the
   posterior; with a Normal prior on every coefficient, as here, it is a Gaussian, and
   each proposal is its exact Hamiltonian flow over a random time (three MH steps per
   draw). Under other priors the proposal mixes independence moves from the Laplace
   approximation at the MAP (a multivariate Student-t) with ten HMC transitions on the
   surrogate. Either way the minibatch test only decides on the proxy's residuals.
4. :func:`pymc_minibatch_mh.compare` runs NUTS and the minibatch step on the same
   model and tabulates cost (time, data read per draw) and accuracy against NUTS.

MinibatchBarker, the recommended default step, is an *approximate* method: each
accept/reject decision can differ from the exact Barker test by a small, reported error
(sample stat ``clt_error``).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pymc as pm

from pymc_minibatch_mh import MinibatchBarker, compare


def make_model(n_data: int, n_features: int = 10, seed: int = 0) -> pm.Model:
    """A logistic regression with an intercept on synthetic data."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_data, n_features))
    true_beta = rng.normal(0.0, 0.5, size=n_features)
    y = rng.random(n_data) < 1.0 / (1.0 + np.exp(-(0.3 + x @ true_beta)))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 5.0, shape=n_features)
        # The full data go in as usual: the step method subsamples them itself.
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y.astype(np.int8))
    return model


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 20,000 and few draws")
    args = parser.parse_args(argv)

    n_data = 20_000 if args.quick else 1_000_000
    # NUTS costs a full pass over the data per gradient (several per draw), so the
    # full run keeps its draws modest; the minibatch step gets the same budget.
    draws, tune = (200, 200) if args.quick else (500, 300)
    model = make_model(n_data)

    # A step factory builds the step inside the model context when compare() needs it.
    # Building the step finds the MAP by Newton steps, whose last full-data pass gives the
    # Taylor sums, and prepares the per-datum functions (for this regression they are
    # evaluated with numpy, nothing is compiled): this "setup" is included in the timings
    # of the table.
    steps = {
        "MinibatchBarker()": lambda: MinibatchBarker(progressbar=not args.quick),
    }

    # compare() runs NUTS first (the reference), then each step, with the same seed.
    table = compare(
        model,
        steps,
        draws=draws,
        tune=tune,
        chains=2,
        cores=1,
        random_seed=1,
        progressbar=not args.quick,
    )

    # How to read the table:
    #  - ess_per_s: the smallest bulk ESS over all coordinates per second of wall time
    #    (setup and compilation included);
    #  - mean_batch_size: data points read per draw (N for NUTS, per gradient);
    #  - max_mean_err_sd / max_sd_rel_err: the worst posterior mean error in NUTS
    #    standard deviations and the worst relative error of a posterior sd.
    pd.set_option("display.width", 160)
    print(f"Logistic regression, N = {n_data:,}, D = 10 + intercept")
    print(table.round(4).to_string())
    speedup = table["ess_per_s"].iloc[1] / table.loc["nuts", "ess_per_s"]
    print(f"\nESS per second relative to NUTS: {speedup:.2f}x")
    return table


if __name__ == "__main__":
    main()
