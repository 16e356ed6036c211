"""Robust regression: FlyMC against TunaMH, two *exact* minibatch methods.

Run ``python examples/robust_flymc_vs_tunamh.py`` (N = 10^5, a few minutes) or with
``--quick`` (N = 10^4, well under a minute).

What this example shows
-----------------------
Both methods leave the posterior exactly invariant while reading only a few data
points per step, but they need different kinds of bounds on the per-datum
log-likelihood. For a Student-t likelihood with fixed ``nu`` and ``sigma`` around a
linear predictor both bounds are found automatically from the model:

* **FlyMC** (Maclaurin & Adams) needs a *lower* bound ``B_n(theta) <= L_n(theta)``
  whose product over all data collapses to a few sufficient statistics. For the
  Student-t density the bound is a Gaussian in the linear predictor, tangent to the
  log density at the MAP residual (``bound="map"``). Each datum carries a brightness
  variable; only bright points are evaluated, and near the MAP very few are bright.
* **TunaMH** (Zhang, Cooper & De Sa) needs a *Lipschitz* bound
  ``|log L_n(theta) - log L_n(theta')| <= c_n M(theta, theta')`` and reads a Poisson
  number of points with mean ``chi C^2 M^2 + C M``. At temperature 1 plain Lipschitz
  bounds make that larger than N, so by default TunaMH uses control variates: the bound
  then applies to the remainders of a Taylor expansion around the MAP, which are tiny
  near the mode.

Both run with their defaults. Every coefficient has a Normal prior, so both move with
Hamiltonian dynamics that read no data: TunaMH's proposal is the exact flow on the
Gaussian surrogate (prior plus Taylor proxy), one MH step per draw; FlyMC's ``theta``
update is HMC given the bright rows, split around the Gaussian made of the prior and the
collapsed bounds, five ``theta`` and brightness updates per draw.

For a model that neither exact step certifies, ``MinibatchBarker()``, the recommended
default step, samples it approximately with a reported error.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pymc as pm

from pymc_minibatch_mh import FlyMC, TunaMH, compare


def make_model(n_data: int, n_features: int = 10, seed: int = 0) -> pm.Model:
    """Linear regression with Student-t(4) noise: a few large outliers."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_data, n_features))
    true_beta = rng.normal(0.0, 0.5, size=n_features)
    y = 0.3 + x @ true_beta + rng.standard_t(4.0, size=n_data)
    print(
        f"largest |residual| at the true coefficients: {np.abs(y - 0.3 - x @ true_beta).max():.1f}"
    )
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 5.0, shape=n_features)
        # nu and sigma are fixed numbers: that is what the automatic bounds recognise.
        pm.StudentT("y", nu=4.0, mu=alpha + x @ beta, sigma=1.0, observed=y)
    return model


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10,000 and few draws")
    args = parser.parse_args(argv)

    n_data = 10_000 if args.quick else 100_000
    draws, tune = (300, 300) if args.quick else (1000, 500)
    model = make_model(n_data)
    show = not args.quick

    steps = {
        # MAP-tuned Student-t bounds; five HMC theta updates (each followed by a
        # brightness update) per PyMC draw. The probability q_db that a dark point proposes
        # to brighten is tuned while tuning, then fixed.
        "flymc map-tuned": lambda: FlyMC(progressbar=show),
        # Lipschitz bound on the Taylor remainders; chi (the batch-size knob) is chosen
        # while tuning by the paper's heuristic, then fixed, so the chain is exact.
        "tunamh cv": lambda: TunaMH(progressbar=show),
    }
    table = compare(
        model, steps, draws=draws, tune=tune, chains=2, cores=1, random_seed=1, progressbar=show
    )

    pd.set_option("display.width", 160)
    print(f"Robust regression, N = {n_data:,}, D = 10 + intercept, Student-t(4) noise")
    print(table.round(4).to_string())
    # Both methods are exact: their errors against NUTS should be of the order of the
    # Monte Carlo error, about 1 / sqrt(ESS) standard deviations.
    for method in steps:
        row = table.loc[method]
        print(
            f"{method}: {row['mean_batch_size']:.1f} data points per draw "
            f"({100 * row['mean_batch_size'] / n_data:.2g}% of N), "
            f"{row['ess_per_s'] / table.loc['nuts', 'ess_per_s']:.2f}x NUTS's ESS per second"
        )
    return table


if __name__ == "__main__":
    main()
