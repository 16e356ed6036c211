"""The reference point of a step (MAP by default) and its Laplace covariance."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np
import pymc as pm
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.kernels.control_variates import TaylorProxy


def block_position(point: dict, value_vars: Sequence[Variable]) -> np.ndarray:
    """Ravel the values of ``value_vars`` in ``point`` into the step's ``q`` vector."""
    missing = [v.name for v in value_vars if v.name not in point]
    if missing:
        raise ValueError(
            f"reference_point lacks {missing}: give values for the sampled block's value "
            f"variables (unconstrained names such as 'sigma_log__' for transformed ones), "
            f"e.g. the output of pm.find_MAP()."
        )
    return np.concatenate([np.asarray(point[v.name], dtype=np.float64).ravel() for v in value_vars])


def find_map(model: pm.Model, start: dict, *, progressbar: bool) -> dict:
    """``pm.find_MAP`` from ``start`` without jitter, on PyMC 5 and PyMC 6.

    Parameters
    ----------
    model : pymc.Model
    start : dict
        A point of the model's value variables (e.g. ``model.initial_point()``), in the
        unconstrained space.
    progressbar : bool
        Show the optimiser's progress bar.

    Returns
    -------
    dict
        The MAP point, with values of both the value variables (transformed names such
        as ``sigma_log__``) and the constrained random variables.

    Notes
    -----
    PyMC reads a start value given under a transformed name through the transform's
    symbolic ``backward``. Some transforms cannot take a numpy value there (the packed
    Cholesky transform of ``LKJCholeskyCov`` indexes it with a tensor, which numpy
    refuses), and transforms whose parameters are other random variables (e.g.
    ``Uniform(lower=a, ...)``) yield a start value that PyMC rejects as depending on
    random variables. PyMC is therefore given the constrained values of the free random
    variables at ``start``, which every transform accepts.
    """
    params = inspect.signature(pm.find_MAP).parameters
    initvals = free_rv_values(model, start)
    kwargs: dict = {"model": model, "progressbar": progressbar}
    if "initvals" in params:  # PyMC 6
        kwargs.update(initvals=initvals, jitter=False)
    else:  # PyMC 5
        kwargs.update(start=initvals, include_transformed=True)
    return pm.find_MAP(**kwargs)


def free_rv_values(model: pm.Model, point: dict) -> dict[str, np.ndarray]:
    """Constrained value of every free random variable at a point of the value variables.

    Parameters
    ----------
    model : pymc.Model
    point : dict
        Values of the model's value variables, keyed by their names.

    Returns
    -------
    dict
        ``{rv.name: value}`` for every free random variable of the model.

    Raises
    ------
    ValueError
        If ``point`` lacks a value variable of the model.
    """
    missing = [v.name for v in model.value_vars if v.name not in point]
    if missing:
        raise ValueError(
            f"The start point lacks values for {missing}: give a value for every value "
            "variable of the model (e.g. start from model.initial_point())."
        )
    values = {v.name: np.asarray(point[v.name]) for v in model.value_vars}
    transformed = [rv for rv in model.free_RVs if model.rvs_to_transforms.get(rv) is not None]
    result = {
        rv.name: values[model.rvs_to_values[rv].name]
        for rv in model.free_RVs
        if model.rvs_to_transforms.get(rv) is None
    }
    if transformed:
        backward = model.compile_fn(
            model.replace_rvs_by_values(transformed),
            inputs=model.value_vars,
            point_fn=False,
            on_unused_input="ignore",
        )
        constrained = backward(*(values[v.name] for v in model.value_vars))
        result.update(
            (rv.name, np.asarray(value)) for rv, value in zip(transformed, constrained, strict=True)
        )
    return result


def laplace_covariance(
    proxy: TaylorProxy, prior_hessian: np.ndarray, temperature: float
) -> np.ndarray:
    """Inverse of the negative Hessian of the tempered log posterior at the reference point.

    Raises
    ------
    ValueError
        If that Hessian is not negative definite (the reference point is not a mode).
    """
    precision = -(proxy.hessian / temperature + prior_hessian)
    precision = 0.5 * (precision + precision.T)
    try:
        chol = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError as err:
        raise ValueError(
            "The log posterior is not concave at the reference point (its Hessian is not "
            "negative definite), so it has no Laplace covariance there. Pass a "
            "reference_point at a posterior mode (pm.find_MAP may have stopped early), or "
            "use proposal='rw'."
        ) from err
    inv_chol = np.linalg.solve(chol, np.eye(chol.shape[0]))
    return inv_chol.T @ inv_chol
