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
    """``pm.find_MAP`` from ``start`` without jitter, on PyMC 5 and PyMC 6."""
    params = inspect.signature(pm.find_MAP).parameters
    kwargs: dict = {"model": model, "progressbar": progressbar}
    if "initvals" in params:  # PyMC 6
        kwargs.update(initvals=start, jitter=False)
    else:  # PyMC 5
        kwargs.update(start=start, include_transformed=True)
    return pm.find_MAP(**kwargs)


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
