"""Run NUTS and minibatch steps on one model in one process and tabulate the results."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd
import pymc as pm

from pymc_minibatch_mh.diagnostics.groups import group

StepFactory = Callable[[], object]


def posterior_draws(idata, var_names) -> dict[str, np.ndarray]:
    """Draws of each scalar coordinate as ``(chain * draw,)`` arrays, keyed ``name[i,j]``."""
    posterior = group(idata, "posterior")
    out = {}
    for name in var_names:
        values = np.asarray(posterior[name])
        flat = values.reshape(values.shape[0] * values.shape[1], -1)
        if flat.shape[1] == 1 and values.ndim == 2:
            out[name] = flat[:, 0]
        else:
            for j in range(flat.shape[1]):
                idx = np.unravel_index(j, values.shape[2:])
                out[f"{name}[{','.join(map(str, idx))}]"] = flat[:, j]
    return out


def ess_bulk_per_coordinate(posterior, var_names) -> list[float]:
    """ArviZ's bulk ESS of every scalar coordinate of ``var_names`` in the ``posterior``
    group, in order."""
    import arviz as az  # here, not at import: it costs ~1 s to import on PyMC 6

    values = []
    for name in var_names:
        draws = np.asarray(posterior[name])
        draws = draws.reshape(draws.shape[0], draws.shape[1], -1)
        for j in range(draws.shape[2]):  # az.ess takes one (chain, draw) array at a time
            values.append(float(az.ess(draws[:, :, j], method="bulk")))
    return values


def posterior_errors(
    draws: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]
) -> tuple[float, float]:
    """``(max |mean - ref mean| / ref sd, max |sd / ref sd - 1|)`` over shared coordinates.

    Parameters
    ----------
    draws, reference : mapping of str to ndarray
        Draws of each scalar coordinate (``{"beta[0]": array}``); coordinates missing
        from ``draws`` are skipped.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_minibatch_mh.diagnostics import posterior_errors
    >>> posterior_errors({"a": np.array([1.5, 3.5])}, {"a": np.array([0.0, 2.0])})
    (1.5, 0.0)
    """
    mean_err, sd_err = 0.0, 0.0
    for key, ref in reference.items():
        if key not in draws:
            continue
        ref_sd = float(np.std(ref))
        if not ref_sd > 0:
            raise ValueError(
                f"The reference draws of {key!r} have no spread (sd {ref_sd}): errors in "
                "reference-sd units are undefined. Pass at least two distinct draws."
            )
        mean_err = max(mean_err, abs(float(np.mean(draws[key])) - float(np.mean(ref))) / ref_sd)
        sd_err = max(sd_err, abs(float(np.std(draws[key])) / ref_sd - 1.0))
    return mean_err, sd_err


def _sample_stat_mean(idata, name: str) -> float:
    stats = group(idata, "sample_stats")
    if name not in stats:
        return float("nan")
    return float(np.mean(np.asarray(stats[name])))


def compare(
    model: pm.Model,
    steps: Mapping[str, StepFactory | object],
    *,
    reference: str | Mapping[str, np.ndarray] = "nuts",
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 2,
    cores: int = 1,
    random_seed: int | None = None,
    var_names: list[str] | None = None,
    progressbar: bool = False,
    return_traces: bool = False,
) -> pd.DataFrame | tuple[pd.DataFrame, dict]:
    """Sample one model with NUTS and with each given step; tabulate cost and accuracy.

    Parameters
    ----------
    model : pymc.Model
        The model to sample.
    steps : mapping of str to step factory
        ``{"label": factory}`` where ``factory()`` builds a step method inside the
        model context (a lambda, or the class itself, e.g. ``MinibatchBarker``). A
        ready-made step instance is also accepted.
    reference : "nuts" or mapping
        ``"nuts"`` runs :func:`pymc.sample` with NUTS and uses its draws as the
        reference; or pass reference draws ``{"name[i]": array}`` (e.g. from
        posteriordb), in which case NUTS is not run.
    draws, tune, chains, cores, random_seed
        Passed to :func:`pymc.sample` for every method (same seed for each).
    var_names : list of str, optional
        Free variables to score. Default: all free variables of the model.
    progressbar : bool, default False
        Show PyMC's progress bars.
    return_traces : bool, default False
        Also return ``{label: InferenceData}``.

    Returns
    -------
    pandas.DataFrame
        One row per method with ``setup_s`` (building the step: MAP, full-data sums),
        ``compile_s`` (the part of it spent compiling PyTensor functions, see
        :class:`~pymc_minibatch_mh.step_methods.base.MinibatchStep`; NaN for PyMC's
        samplers), ``setup_cache`` (``"cold"``, ``"warm"`` or ``"partly warm"``: whether the
        step's compiled functions came from the on-disk cache, see
        :func:`~pymc_minibatch_mh.step_methods.base.setup_cache`; empty for PyMC's
        samplers), ``n_data_passes`` (full-data passes of the step, mode search included;
        NaN for PyMC's samplers), ``wall_time_s`` (setup and sampling, compilation
        included), ``ess_bulk_min``, ``ess_per_s``,
        ``mean_batch_size`` (data points touched per draw; N for NUTS),
        ``lik_evals_per_ess`` (per-datum likelihood evaluations per effective
        sample; for NUTS, N times the gradient evaluations; for :class:`pymc.Metropolis`,
        2 N per proposal, one proposal per coordinate and draw when it updates coordinates
        one at a time; for other full-data step methods without a ``batch_size`` stat, N
        per draw), ``accept_rate``,
        ``max_mean_err_sd`` and ``max_sd_rel_err`` against the reference.

    Examples
    --------
    >>> from pymc_minibatch_mh import MinibatchBarker, compare
    >>> table = compare(model, {"barker": MinibatchBarker}, draws=500, tune=500)  # doctest: +SKIP

    References
    ----------
    .. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B., Bürkner, P.-C.
       "Rank-normalization, folding, and localization: an improved R-hat for assessing
       convergence of MCMC", Bayesian Analysis 16, 2021 (bulk ESS).
    """
    if var_names is None:
        var_names = [rv.name for rv in model.free_RVs]
    n_data = _n_data(model)
    runs: list[tuple[str, object]] = []
    if isinstance(reference, str):
        if reference != "nuts":
            raise ValueError(f"reference must be 'nuts' or a mapping of draws; got {reference!r}.")
        runs.append(("nuts", None))
    runs.extend(steps.items())

    rows, traces = [], {}
    ref_draws = None if isinstance(reference, str) else dict(reference)
    for label, factory in runs:
        start = time.perf_counter()
        with model:
            step = None if factory is None else (factory() if callable(factory) else factory)
            setup = time.perf_counter() - start
            idata = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                cores=cores,
                step=step,
                random_seed=random_seed,
                progressbar=progressbar,
                compute_convergence_checks=False,
            )
        wall = time.perf_counter() - start
        traces[label] = idata
        samples = posterior_draws(idata, var_names)
        if ref_draws is None:
            ref_draws = samples
        ess = min(ess_bulk_per_coordinate(group(idata, "posterior"), var_names))
        if factory is None:
            steps_taken = _sample_stat_mean(idata, "n_steps")
            batch = float(n_data)
            evals = n_data * steps_taken * draws * chains
            accept = _sample_stat_mean(idata, "acceptance_rate")
        elif np.isfinite(_sample_stat_mean(idata, "batch_size")):
            batch = _sample_stat_mean(idata, "batch_size")
            evals = _sample_stat_mean(idata, "n_lik_evals") * draws * chains
            accept = _sample_stat_mean(idata, "accept")
        else:  # a full-data step method such as pm.Metropolis
            batch = float(n_data)
            evals = _full_data_evals_per_draw(step, n_data) * draws * chains
            accept = _sample_stat_mean(idata, "accepted")
        mean_err, sd_err = posterior_errors(samples, ref_draws)
        rows.append(
            {
                "method": label,
                "setup_s": setup,
                "compile_s": float(getattr(step, "compile_s", math.nan)),
                "setup_cache": str(getattr(step, "setup_cache", "")),
                "n_data_passes": float(getattr(step, "n_data_passes", math.nan)),
                "wall_time_s": wall,
                "ess_bulk_min": ess,
                "ess_per_s": ess / wall,
                "mean_batch_size": batch,
                "lik_evals_per_ess": evals / ess,
                "accept_rate": accept,
                "max_mean_err_sd": mean_err,
                "max_sd_rel_err": sd_err,
            }
        )
    table = pd.DataFrame(rows).set_index("method")
    return (table, traces) if return_traces else table


def _full_data_evals_per_draw(step, n_data: int) -> float:
    """Per-datum likelihood evaluations per draw of a step method that reads all the data.

    PyMC's Metropolis evaluates the model's log density at the proposed and the current
    point for every proposal (``delta_logp``), and with ``elemwise_update`` makes one
    proposal per coordinate. Any other full-data step is counted as one pass.
    """
    if isinstance(step, pm.Metropolis):
        proposals = len(step.enum_dims) if step.elemwise_update else 1
        return 2.0 * n_data * proposals
    return float(n_data)


def _n_data(model: pm.Model) -> int:
    from pymc_minibatch_mh.likelihood.inspection import datum_count

    return datum_count(model)
