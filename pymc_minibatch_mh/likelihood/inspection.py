"""Find the datum axis of a PyMC model and refuse models that cannot be subsampled."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pymc as pm
from pymc.data import MinibatchIndexRV
from pymc.variational.minibatch_rv import MinibatchRandomVariable
from pymc.vartypes import discrete_types
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.likelihood.graph_tools import ancestors, data_value, graph_inputs


def observed_lengths(model: pm.Model) -> dict[str, int]:
    """Leading length of every observed variable, after refusing unsupported ones."""
    if not model.observed_RVs:
        raise ValueError(
            "The model has no observed variables, so there is no data to subsample. "
            "Minibatch MH steps need a likelihood: pass `observed=` to at least one "
            "distribution, or use pm.Metropolis / NUTS for prior-only models."
        )
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


def _uses_pymc_minibatch(variables: Sequence[Variable]) -> bool:
    """True if the graph draws random minibatch indices (``pm.Minibatch``)."""

    def is_minibatch(op) -> bool:
        # PyMC wraps pm.Minibatch in a MinibatchOp (an OpFromGraph) around a
        # MinibatchIndexRV; older versions expose the index RV directly.
        return isinstance(op, MinibatchIndexRV) or type(op).__name__ == "MinibatchOp"

    return any(
        var.owner is not None and is_minibatch(var.owner.op) for var in ancestors(list(variables))
    )


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
        raise ValueError(
            "Observed variables must share one datum axis (axis 0) of the same length N, "
            f"but their lengths differ ({found}). Put independent datasets in separate "
            "models, or stack them so that every observed variable has N rows."
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
