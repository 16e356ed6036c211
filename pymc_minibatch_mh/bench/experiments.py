"""The benchmark experiments: each builds a synthetic problem and runs compare() on it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pymc as pm

from pymc_minibatch_mh.bench.problems import logistic_model
from pymc_minibatch_mh.bench.report import BenchmarkResult
from pymc_minibatch_mh.diagnostics import compare


@dataclass(frozen=True)
class RunSettings:
    """Command-line settings shared by every experiment."""

    quick: bool = False
    seed: int = 1
    cores: int = 2
    progressbar: bool = True


def _ratio_notes(table, reference: str = "nuts") -> list[str]:
    notes = []
    base = float(table.loc[reference, "ess_per_s"])
    for method, row in table.iterrows():
        if method == reference:
            continue
        notes.append(
            f"{method}: ESS/s {row['ess_per_s'] / base:.3g}x {reference}'s, "
            f"{row['mean_batch_size']:.4g} data points per draw, posterior mean error "
            f"{row['max_mean_err_sd']:.3g} sd and sd error {100 * row['max_sd_rel_err']:.3g}% "
            f"against {reference}"
        )
    return notes


def tall_logistic(settings: RunSettings) -> BenchmarkResult:
    """Logistic regression, N = 10^6, D = 10 + intercept, temperature 1 (issue 6).

    NUTS, PyMC's full-data Metropolis and the control-variate minibatch steps in one
    run. Every step pays for its own MAP search and full-data Taylor sums (in
    ``setup_s`` and in ESS/s).
    """
    from pymc_minibatch_mh import Austere, MinibatchBarker, TunaMH

    n_data = 20_000 if settings.quick else 1_000_000
    n_features = 10
    draws, tune = (300, 300) if settings.quick else (1000, 500)
    model = logistic_model(n_data, n_features, seed=settings.seed)
    common = {"control_variates": True, "progressbar": settings.progressbar}
    steps: dict[str, Callable] = {
        "metropolis (full data)": lambda: pm.Metropolis(),
        "barker cv laplace-rw x5": lambda: MinibatchBarker(
            proposal="laplace", steps_per_draw=5, **common
        ),
        "barker cv independent x3": lambda: MinibatchBarker(
            proposal="independent", steps_per_draw=3, **common
        ),
        "austere cv independent x2": lambda: Austere(
            proposal="independent", steps_per_draw=2, batch_size=100, **common
        ),
        "tunamh cv independent x2 (exact)": lambda: TunaMH(
            proposal="independent", steps_per_draw=2, **common
        ),
    }
    table, traces = compare(
        model,
        steps,
        draws=draws,
        tune=tune,
        chains=2,
        cores=settings.cores,
        random_seed=settings.seed,
        progressbar=settings.progressbar,
        return_traces=True,
    )
    table["ess_per_s_vs_nuts"] = table["ess_per_s"] / table.loc["nuts", "ess_per_s"]
    params = {
        "N": n_data,
        "D": f"{n_features} + intercept",
        "temperature": 1,
        "chains": 2,
        "cores": settings.cores,
        "tune": tune,
        "draws": draws,
        "seed": settings.seed,
        "steps_per_draw": "x3 / x5 = MH steps per PyMC draw (counted in time and data)",
    }
    return BenchmarkResult(
        name="tall-logistic",
        title=f"Tall logistic regression (N = {n_data:,}, D = {n_features} + 1, T = 1)",
        params=params,
        table=table,
        traces=traces,
        var_names=["alpha", "beta"],
        notes=_ratio_notes(table),
    )


EXPERIMENTS: dict[str, Callable[[RunSettings], BenchmarkResult]] = {
    "tall-logistic": tall_logistic,
}


def run(name: str, settings: RunSettings) -> BenchmarkResult:
    """Run the experiment called ``name``."""
    return EXPERIMENTS[name](settings)
