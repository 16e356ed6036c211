"""Find the datum axis of a PyMC model and refuse models that cannot be subsampled."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pymc as pm
from pymc.data import MinibatchIndexRV
from pymc.pytensorf import constant_fold
from pymc.variational.minibatch_rv import MinibatchRandomVariable
from pymc.vartypes import discrete_types
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.data.row_scan import non_finite_entries
from pymc_minibatch_mh.likelihood.batching import datum_data_inputs
from pymc_minibatch_mh.likelihood.data_support import check_observed_support
from pymc_minibatch_mh.likelihood.glm_likelihoods import DataSetsOfDifferentLengths
from pymc_minibatch_mh.likelihood.graph_tools import ancestors, data_value, graph_inputs

# Suffixes of the variables PyMC's Model.make_obs_var creates when `observed=` has NaNs.
_OBSERVED_SUFFIX = "_observed"
_UNOBSERVED_SUFFIX = "_unobserved"


def observed_lengths(model: pm.Model) -> dict[str, int]:
    """Leading length of every observed variable, after refusing unsupported ones."""
    if not model.observed_RVs:
        potentials = [p.name or "unnamed" for p in model.potentials]
        where = (
            f"The model's potentials ({', '.join(map(repr, potentials))}) may hold the "
            "likelihood, but a potential is one sum the steps cannot split into rows: write "
            "the per-row density as an observed distribution instead, e.g. "
            "`pm.CustomDist('y', ..., logp=row_logp, observed=y)`, whose log-density has "
            "one entry per row."
            if potentials
            else "Pass `observed=` to at least one distribution, or use pm.Metropolis / "
            "NUTS for prior-only models."
        )
        raise ValueError(
            "The model has no observed variables, so there is no data to subsample: "
            f"minibatch MH steps need a likelihood over rows. {where}"
        )
    check_no_imputed_observations(model)
    lengths = {}
    for rv in model.observed_RVs:
        if isinstance(rv.owner.op, MinibatchRandomVariable):
            raise ValueError(
                f"Observed variable {rv.name!r} was created with `total_size`. Minibatch MH "
                "steps do their own N/n scaling on the full data: remove `total_size` and "
                "pass the full arrays as `observed=`."
            )
        value = model.rvs_to_values[rv]
        if _uses_pymc_minibatch([value, *rv.owner.inputs]):
            raise ValueError(
                f"Observed variable {rv.name!r} uses `pm.Minibatch` data. Minibatch MH steps "
                "draw their own batches from the full data: pass the full arrays (numpy or "
                "pm.Data) instead of `pm.Minibatch(...)`."
            )
        data = data_value(value)
        if data is None:
            raise ValueError(
                f"Observed variable {rv.name!r} is not a numpy array or pm.Data container; "
                "pass the observed data as an array or `pm.Data`."
            )
        if data.ndim == 0:
            raise ValueError(
                f"Observed variable {rv.name!r} is a scalar: there is no datum axis to "
                "subsample. Observed data must have the data points along axis 0."
            )
        lengths[rv.name] = int(data.shape[0])
    return lengths


def check_no_imputed_observations(model: pm.Model) -> None:
    """Refuse observed variables whose missing values PyMC imputes as latent variables.

    Parameters
    ----------
    model : pymc.Model

    Raises
    ------
    ValueError
        If an ``observed=`` array had NaN entries, which PyMC turns into a free
        variable ``{name}_unobserved`` with one value per missing entry.
    """
    for rv in model.observed_RVs:
        imputed = imputed_counterpart(model, rv)
        if imputed is None:
            continue
        name = rv.name[: -len(_OBSERVED_SUFFIX)]
        count = _size_if_constant(imputed)
        how_many = "" if count is None else f"{count} "
        raise ValueError(
            f"Observed variable {name!r} has {how_many}missing values (NaN in `observed=`), "
            f"which PyMC imputes as the latent variable {imputed.name!r}: one free value per "
            "missing datum, which a minibatch step cannot sample (it reads only a subsample "
            "of the data). Drop the rows with missing observations with numpy before "
            "building the model (e.g. keep = ~np.isnan(y); then pass y[keep] and x[keep]), "
            "or impute them beforehand."
        )


def imputed_counterpart(model: pm.Model, observed_rv: Variable) -> Variable | None:
    """The free variable holding PyMC's imputed values for ``observed_rv``, if any.

    For an ``observed=`` array with NaN entries, ``Model.make_obs_var`` (PyMC 5 and 6)
    registers the observed part as ``{name}_observed``, the missing part as a free
    variable ``{name}_unobserved``, and a Deterministic ``{name}`` that joins the two.
    All three, and the join, must be present.

    Parameters
    ----------
    model : pymc.Model
    observed_rv : TensorVariable
        An observed random variable of ``model``.

    Returns
    -------
    TensorVariable or None
        The free ``{name}_unobserved`` variable, or None if ``observed_rv`` was not
        split off by PyMC's imputation.
    """
    rv_name = observed_rv.name or ""
    if not rv_name.endswith(_OBSERVED_SUFFIX):
        return None
    name = rv_name[: -len(_OBSERVED_SUFFIX)]
    unobserved = model.named_vars.get(name + _UNOBSERVED_SUFFIX)
    joined = model.named_vars.get(name)
    if not any(unobserved is rv for rv in model.free_RVs):
        return None
    if not any(joined is det for det in model.deterministics):
        return None
    parents = set(ancestors([joined]))
    if observed_rv not in parents or unobserved not in parents:
        return None
    return unobserved


def _size_if_constant(var: Variable) -> int | None:
    """Number of entries of ``var`` if its shape is a constant of the graph, else None."""
    [shape] = constant_fold([var.shape], raise_not_constant=False)
    if isinstance(shape, Variable):
        return None
    return int(np.prod(shape))


def _uses_pymc_minibatch(variables: Sequence[Variable]) -> bool:
    """True if the graph draws random minibatch indices (``pm.Minibatch``)."""

    def is_minibatch(op) -> bool:
        # PyMC wraps pm.Minibatch in a MinibatchOp (an OpFromGraph) around a
        # MinibatchIndexRV; older versions expose the index RV directly.
        return isinstance(op, MinibatchIndexRV) or type(op).__name__ == "MinibatchOp"

    return any(
        var.owner is not None and is_minibatch(var.owner.op) for var in ancestors(list(variables))
    )


def total_rows(model: pm.Model) -> int:
    """N of the steps' row axis: the observed variables' common length, or the sum of the
    lengths of data sets of different lengths (stacked on one axis,
    :mod:`~pymc_minibatch_mh.likelihood.stacked_rows`)."""
    lengths = observed_lengths(model)
    if len(set(lengths.values())) > 1:
        return int(sum(lengths.values()))
    return datum_count(model)


def datum_count(model: pm.Model, data_dim: str | None = None) -> int:
    """The number N of data points shared by all observed variables.

    Parameters
    ----------
    model : pymc.Model
    data_dim : str, optional
        Name of the model dimension (``coords`` key) that indexes the data points.
    """
    lengths = observed_lengths(model)
    if len(set(lengths.values())) > 1:
        found = ", ".join(f"{name}: {n}" for name, n in lengths.items())
        raise DataSetsOfDifferentLengths(
            f"The observed variables are data sets of different lengths ({found}). Use "
            "MinibatchBarker() or Austere(), which sample such models (each data set's rows "
            "on one stacked row axis). TunaMH() and FlyMC() do not derive their bounds for "
            "them yet: their recognised likelihoods need every observed variable on one row "
            "axis."
        )
    n_data = next(iter(lengths.values()))
    if data_dim is not None:
        if data_dim not in model.coords:
            raise ValueError(
                f"data_dim={data_dim!r} is not a dimension of the model; known dims: "
                f"{sorted(model.coords)}."
            )
        dim_length = int(model.dim_lengths[data_dim].eval())
        if dim_length != n_data:
            raise ValueError(
                f"data_dim={data_dim!r} has length {dim_length}, but the observed variables "
                f"have {n_data} rows. data_dim must name the axis that indexes data points."
            )
    if n_data < 2:
        raise ValueError(f"The observed data has {n_data} row(s); at least 2 are needed.")
    return n_data


def likelihood_value_vars(model: pm.Model, loglik_terms: Sequence[Variable] | None = None):
    """Value variables of the free RVs that the observed log-likelihood depends on."""
    if loglik_terms is None:
        loglik_terms = model.logp(vars=model.observed_RVs, sum=False)
    inputs = set(graph_inputs(list(loglik_terms)))
    return [v for v in model.value_vars if v in inputs]


def check_sampled_block(
    model: pm.Model, value_vars: Sequence[Variable], initial_point: dict, n_data: int
) -> None:
    """Refuse discrete variables and per-datum (local) latent variables in the block."""
    for var in value_vars:
        if var.dtype in discrete_types:
            raise ValueError(
                f"Variable {var.name!r} is discrete ({var.dtype}); minibatch MH steps "
                "propose continuous random-walk moves. Leave it out of `vars` so PyMC "
                "assigns a discrete sampler to it (e.g. pm.sample(step=[MinibatchBarker("
                f"vars=[...continuous...]), pm.Metropolis([{var.name}])]))."
            )
        shape = np.shape(initial_point[var.name])
        if len(shape) >= 1 and shape[0] == n_data:
            raise ValueError(
                f"Variable {var.name!r} has shape {shape}: a leading axis of length "
                f"N = {n_data} makes it a per-datum (local) latent variable, which a "
                "minibatch step cannot update from a subsample. Marginalise it out, or "
                "leave it out of `vars` and sample it with another step method."
            )


def check_finite_data(model: pm.Model, loglik_terms: Sequence[Variable], n_data: int) -> None:
    """Refuse NaN or inf in per-datum data, in one streaming pass over row chunks.

    Every constant or shared input of the observed log-likelihood with ``n_data`` rows
    (observed arrays and covariates, numpy or ``pm.Data``) is checked; integer and
    boolean arrays cannot hold NaN and are skipped.

    Parameters
    ----------
    model : pymc.Model
    loglik_terms : sequence of TensorVariable
        ``model.logp(vars=model.observed_RVs, sum=False)``, one term per observed variable.
    n_data : int
        The number N of data points.

    The same pass checks the observed values of common distributions against their
    support (:func:`~pymc_minibatch_mh.likelihood.data_support.check_observed_support`).

    Raises
    ------
    ValueError
        Naming every data input with non-finite entries, their count and first row; or
        an observed value outside its distribution's support, with its row.
    """
    problems = []
    inputs = _datum_inputs_with_users(model, loglik_terms, n_data)
    counted = any(value.dtype.kind in "fc" for _, value, _ in inputs)
    if counted:
        record_rows(n_data, n_data)  # one pass reads the rows of every array
    for var, value, users in inputs:
        count, first_row = non_finite_entries(value)
        if count:
            problems.append(
                f"  - {_describe_data_input(model, var, value, users)} has {count} non-finite "
                f"entr{'y' if count == 1 else 'ies'} (NaN or inf); the first is in row "
                f"{first_row}."
            )
    if problems:
        raise ValueError(
            "Per-datum data must be finite, but:\n"
            + "\n".join(problems)
            + "\nDrop or impute those rows with numpy before building the model, in every "
            "per-datum array so that the rows stay aligned. For missing observations, do "
            "not pass NaN in `observed=`: PyMC's automatic imputation makes them per-datum "
            "latent variables, which a minibatch step cannot sample."
        )
    if check_observed_support(model) and not counted:
        record_rows(n_data, n_data)  # the same pass, over the observed arrays only


def described_datum_inputs(model: pm.Model, n_data: int) -> list[tuple[Variable, np.ndarray, str]]:
    """The per-datum data inputs of the likelihood, each with its name for messages."""
    terms = model.logp(vars=model.observed_RVs, sum=False)
    return [
        (var, value, _describe_data_input(model, var, value, users))
        for var, value, users in _datum_inputs_with_users(model, terms, n_data)
    ]


def _datum_inputs_with_users(
    model: pm.Model, loglik_terms: Sequence[Variable], n_data: int
) -> list[tuple[Variable, np.ndarray, list[str]]]:
    """Data inputs with N rows, each with the names of the observed variables reading it."""
    found: dict[Variable, tuple[np.ndarray, list[str]]] = {}
    for rv, term in zip(model.observed_RVs, loglik_terms, strict=True):
        for var, value in datum_data_inputs([term], n_data):
            found.setdefault(var, (value, []))[1].append(rv.name)
    return [(var, value, users) for var, (value, users) in found.items()]


def _describe_data_input(
    model: pm.Model, var: Variable, value: np.ndarray, users: list[str]
) -> str:
    """How to name a data input in a message: observed data, named data, or an array."""
    for rv in model.observed_RVs:
        observed = model.rvs_to_values[rv]
        # PyMC casts integer pm.Data observations: the data input is then the cast's input.
        wrapped = [] if observed.owner is None else observed.owner.inputs
        if any(var is candidate for candidate in [observed, *wrapped]):
            return f"the observed data of {rv.name!r}"
    readers = ", ".join(map(repr, users))
    if var.name:
        return f"data input {var.name!r} (read by the likelihood of {readers})"
    kind = "a numpy array" if isinstance(value, np.ndarray) else "a chunked_data array"
    return f"{kind} of shape {value.shape} (read by the likelihood of {readers})"
