"""Run NUTS and minibatch steps on one model in one process and tabulate the results.

For tall data the model can be sampled on a random subsample of its rows (``n_rows=``):
NUTS on all of 10^8 rows is hopeless, while NUTS and the steps on the same few thousand
random rows show whether the steps sample the right posterior there
(:mod:`~pymc_minibatch_mh.diagnostics.subsample`). Every method is scored against the
reference with the rules of :mod:`~pymc_minibatch_mh.diagnostics.agreement`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd
import pymc as pm

from pymc_minibatch_mh.diagnostics.agreement import (
    AGREE,
    MEAN_TOL,
    REFERENCE,
    SD_TOL,
    agreement_summary,
    check_tolerances,
    coordinate_errors,
    verdict,
)
from pymc_minibatch_mh.diagnostics.convergence import coordinate_draws, ess_bulk
from pymc_minibatch_mh.diagnostics.groups import group
from pymc_minibatch_mh.diagnostics.subsample import subsample_model

StepFactory = Callable[[], object]


def posterior_draws(idata, var_names) -> dict[str, np.ndarray]:
    """Draws of each scalar coordinate as ``(chain * draw,)`` arrays, keyed ``name[i,j]``."""
    draws = coordinate_draws(group(idata, "posterior"), var_names)
    return {key: values.reshape(-1) for key, values in draws.items()}


def ess_bulk_per_coordinate(posterior, var_names) -> list[float]:
    """ArviZ's bulk ESS of every scalar coordinate of ``var_names`` in the ``posterior``
    group, in the order of :func:`posterior_draws`."""
    values: list[float] = []
    for name in var_names:
        values.extend(ess_bulk(np.asarray(posterior[name])).tolist())
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
    errors = coordinate_errors(draws, reference)
    if errors.empty:
        return 0.0, 0.0
    worst = errors.max(skipna=False)
    return float(worst["mean_err_sd"]), float(worst["sd_rel_err"])


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
    n_rows: int | None = None,
    mean_tol: float = MEAN_TOL,
    sd_tol: float = SD_TOL,
) -> pd.DataFrame | tuple[pd.DataFrame, dict]:
    """Sample one model with NUTS and with each given step; tabulate cost and accuracy.

    Parameters
    ----------
    model : pymc.Model
        The model to sample.
    steps : mapping of str to step factory
        ``{"label": factory}`` where ``factory()`` builds a step method inside the
        model context (a lambda, or the class itself, e.g. ``MinibatchBarker``). A
        ready-made step instance is also accepted, except with ``n_rows``.
    reference : "nuts" or mapping
        ``"nuts"`` runs :func:`pymc.sample` with NUTS and uses its draws as the
        reference; or pass reference draws ``{"name[i]": array}`` (e.g. from
        posteriordb), in which case NUTS is not run. Given draws are taken as
        independent (their number is their effective sample size).
    draws, tune, chains, cores, random_seed
        Passed to :func:`pymc.sample` for every method (same seed for each).
        ``random_seed`` also draws the subsample of ``n_rows``.
    var_names : list of str, optional
        Free variables to score. Default: all free variables of the model.
    progressbar : bool, default False
        Show PyMC's progress bars.
    return_traces : bool, default False
        Also return ``{label: InferenceData}`` (``DataTree`` on PyMC 6).
    n_rows : int, optional
        Sample every method on the same ``n_rows`` rows of the data, drawn at random
        without replacement (seeded by ``random_seed``), instead of all N: the model is
        rebuilt on them by :func:`~pymc_minibatch_mh.diagnostics.subsample_model`, which
        reads only those rows of numpy, memmap, zarr or Dask data. At least 1000 and
        fewer than N; the steps must then be given as factories (they are built on the
        subsampled model), and the reference must be ``"nuts"``.
    mean_tol : float, default 0.2
        Largest ``|mean - reference mean|`` of any coordinate, in reference posterior
        sds, for a method to agree with the reference.
    sd_tol : float, default 0.2
        Largest ``|sd / reference sd - 1|`` of any coordinate for a method to agree.

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
        included), ``ess_bulk_min`` (ArviZ's bulk ESS, smallest over coordinates),
        ``ess_per_s``, ``n_data`` (the rows the model was sampled on: ``n_rows`` or N),
        ``mean_batch_size`` (data points touched per draw; ``n_data`` for NUTS),
        ``lik_evals_per_ess`` (per-datum likelihood evaluations per effective
        sample; for NUTS, N times the gradient evaluations; for :class:`pymc.Metropolis`,
        2 N per proposal, one proposal per coordinate and draw when it updates coordinates
        one at a time; for other full-data step methods without a ``batch_size`` stat, N
        per draw), ``accept_rate`` (the mean acceptance *probability*, the ``accept``
        stat: under Barker's rule at most about 0.5; not the share of draws that moved,
        the ``accepted`` stat the progress bar and :func:`plot_data_use` show),
        ``max_mean_err_sd`` and ``max_sd_rel_err`` against the
        reference, ``mc_error_sd`` (the largest Monte Carlo standard error of a mean
        difference, in reference sds; for the NUTS reference, of its own means),
        ``verdict`` (``"reference"``, ``"agree"``,
        ``"disagree"`` or ``"inconclusive"``, see
        :mod:`~pymc_minibatch_mh.diagnostics.agreement`) and ``agrees`` (True for
        ``"agree"`` and the reference). ``table.attrs["summary"]`` says the same in
        sentences, with the rows sampled; ``table.attrs`` also holds ``n_data_full``
        (N), ``n_rows``, ``mean_tol`` and ``sd_tol``.

    Raises
    ------
    ValueError
        For an unknown ``reference``, tolerances that are not positive, an ``n_rows``
        out of range, a step instance or given reference draws with ``n_rows``, or a
        model whose data cannot be subsampled (the message says why).

    Notes
    -----
    Agreement on a subsample is evidence about the full data, not proof: the posterior
    on N rows is about ``sqrt(N / n_rows)`` times narrower, and the approximate steps'
    errors depend on N and on that width. A disagreement on the subsample, however, is
    a problem of the step on this model.

    Examples
    --------
    >>> from pymc_minibatch_mh import MinibatchBarker, compare
    >>> table = compare(model, {"barker": MinibatchBarker}, draws=500, tune=500)  # doctest: +SKIP
    >>> table = compare(tall_model, {"barker": MinibatchBarker}, n_rows=5_000)  # doctest: +SKIP
    >>> print(table.attrs["summary"])  # doctest: +SKIP

    References
    ----------
    .. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B., Bürkner, P.-C.
       "Rank-normalization, folding, and localization: an improved R-hat for assessing
       convergence of MCMC", Bayesian Analysis 16, 2021 (bulk ESS).
    """
    check_tolerances(mean_tol, sd_tol)
    if isinstance(reference, str) and reference != "nuts":
        raise ValueError(f"reference must be 'nuts' or a mapping of draws; got {reference!r}.")
    n_data_full = None
    if n_rows is not None:
        _check_subsampling_arguments(steps, reference)
        subsample = subsample_model(model, n_rows, random_seed=random_seed)
        model, n_data_full = subsample.model, subsample.n_data
    if var_names is None:
        var_names = [rv.name for rv in model.free_RVs]
    if not isinstance(reference, str):
        _check_reference_names(reference, var_names)
    n_data = _n_data(model)
    runs: list[tuple[str, object]] = []
    if isinstance(reference, str):
        runs.append(("nuts", None))
    runs.extend(steps.items())

    rows, traces = [], {}
    ref_draws = None if isinstance(reference, str) else dict(reference)
    ref_ess = None
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
        posterior = group(idata, "posterior")
        chain_draws = coordinate_draws(posterior, var_names)
        coordinate_ess = dict(
            zip(chain_draws, ess_bulk_per_coordinate(posterior, var_names), strict=True)
        )
        samples = {key: values.reshape(-1) for key, values in chain_draws.items()}
        if ref_draws is None:  # NUTS, the reference: against itself its errors are 0, and
            # its Monte Carlo error is that of its own means.
            ref_draws, ref_ess = samples, coordinate_ess
            errors = coordinate_errors(
                samples, samples, ess=coordinate_ess, reference_ess=dict.fromkeys(samples, np.inf)
            )
        else:
            errors = coordinate_errors(
                samples, ref_draws, ess=coordinate_ess, reference_ess=ref_ess
            )
        ess = min(coordinate_ess.values())
        batch, evals_per_draw, accept = _cost(idata, factory is None, step, n_data)
        evals = evals_per_draw * draws * chains
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
                "n_data": n_data,
                "mean_batch_size": batch,
                # A chain that never moved has an ESS of 0: infinitely many evaluations.
                "lik_evals_per_ess": evals / ess if ess > 0 else math.inf,
                "accept_rate": accept,
                "max_mean_err_sd": float(errors["mean_err_sd"].max(skipna=False)),
                "max_sd_rel_err": float(errors["sd_rel_err"].max(skipna=False)),
                "mc_error_sd": float(errors["mc_error_sd"].max(skipna=False)),
                "verdict": (
                    REFERENCE
                    if factory is None
                    else verdict(errors, mean_tol=mean_tol, sd_tol=sd_tol)
                ),
            }
        )
    table = pd.DataFrame(rows).set_index("method")
    table["agrees"] = table["verdict"].isin([AGREE, REFERENCE])
    table.attrs.update(
        n_data_full=n_data if n_data_full is None else n_data_full,
        n_rows=n_rows,
        mean_tol=mean_tol,
        sd_tol=sd_tol,
    )
    table.attrs["summary"] = agreement_summary(
        table,
        mean_tol=mean_tol,
        sd_tol=sd_tol,
        heading=_heading(reference, n_data, n_data_full, random_seed),
    )
    return (table, traces) if return_traces else table


def _check_subsampling_arguments(steps: Mapping, reference) -> None:
    """With ``n_rows``, steps must be built on the subsampled model and NUTS must run on
    it: refuse step instances and given reference draws."""
    if not isinstance(reference, str):
        raise ValueError(
            "n_rows samples the model on a subsample of its rows, whose posterior differs "
            "from the full data's, so given reference draws do not apply to it. Leave "
            "reference='nuts' (NUTS on the same rows), or drop n_rows."
        )
    for label, factory in steps.items():
        if not callable(factory):
            raise TypeError(
                f"steps[{label!r}] is a step method already built (on the full model). With "
                "n_rows every step is built on the subsampled model: pass its class or a "
                f"factory instead, e.g. {{{label!r}: MinibatchBarker}} or "
                f"{{{label!r}: lambda: MinibatchBarker(batch_size=200)}}."
            )


def _check_reference_names(reference: Mapping, var_names: list[str]) -> None:
    """Refuse reference draws that name no coordinate of the scored variables (before any
    sampling)."""
    if not any(str(key).split("[")[0] in var_names for key in reference):
        raise ValueError(
            f"The reference draws name no coordinate of the variables scored ({var_names}); "
            f"got keys {sorted(map(str, reference))[:5]}. Name them as compare() names "
            "coordinates: 'mu' for a scalar, 'beta[0]' or 'w[0,1]' for array entries."
        )


def _cost(idata, is_nuts: bool, step, n_data: int) -> tuple[float, float, float]:
    """Rows read per draw, per-datum likelihood evaluations per draw and acceptance rate."""
    if is_nuts:
        return (
            float(n_data),
            n_data * _sample_stat_mean(idata, "n_steps"),
            _sample_stat_mean(idata, "acceptance_rate"),
        )
    if np.isfinite(_sample_stat_mean(idata, "batch_size")):
        return (
            _sample_stat_mean(idata, "batch_size"),
            _sample_stat_mean(idata, "n_lik_evals"),
            _sample_stat_mean(idata, "accept"),
        )
    # A full-data step method such as pm.Metropolis.
    return (
        float(n_data),
        _full_data_evals_per_draw(step, n_data),
        _sample_stat_mean(idata, "accepted"),
    )


def _heading(reference, n_data: int, n_data_full: int | None, random_seed) -> str:
    against = "NUTS on the same rows" if isinstance(reference, str) else "the given draws"
    if n_data_full is None:
        return f"All N = {n_data:,} rows sampled; reference: {against}."
    return (
        f"Sampled on {n_data:,} random rows of N = {n_data_full:,} (random_seed="
        f"{random_seed}); reference: {against}."
    )


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
    from pymc_minibatch_mh.likelihood.inspection import total_rows

    return total_rows(model)
