"""The reference point of a step (MAP by default) and its Laplace covariance."""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
from pytensor.graph.basic import Variable
from scipy import linalg

from pymc_minibatch_mh.kernels.control_variates import TaylorProxy
from pymc_minibatch_mh.step_methods.definite_solve import definite_factor


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
    with warnings.catch_warnings():
        # PyMC 6 announces that find_MAP will return an InferenceData; this call is the
        # package's own and reads the dict it returns now (the user passed nothing).
        warnings.filterwarnings(
            "ignore", message="`find_MAP` will return an `InferenceData`", category=FutureWarning
        )
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


class NoLaplaceFit(ValueError):
    """The log posterior is not concave at the reference point: no Laplace covariance."""


def laplace_covariance(
    proxy: TaylorProxy,
    prior_hessian: np.ndarray,
    temperature: float,
    *,
    marginal_scales: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Inverse of the negative Hessian of the tempered log posterior at the reference point.

    With ``marginal_scales = (index, precision)`` (a hierarchy's Laplace-marginal
    reference, :mod:`.marginal_reference`), the rows and columns of the scale
    coordinates ``index`` are replaced by their marginal ``precision`` (cross terms
    dropped): the joint density need not be concave in the scales there.

    Raises
    ------
    NoLaplaceFit
        If that Hessian is not negative definite (the reference point is not a mode).
    """
    return covariance_of_precision(
        laplace_precision(proxy, prior_hessian, temperature, marginal_scales=marginal_scales),
        marginal=marginal_scales is not None,
    )


def laplace_precision(
    proxy: TaylorProxy,
    prior_hessian: np.ndarray,
    temperature: float,
    *,
    marginal_scales: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """The negative Hessian of the tempered log posterior at the reference point, with a
    hierarchy's scale rows replaced as in :func:`laplace_covariance`."""
    precision = -(proxy.hessian / temperature + prior_hessian)
    precision = 0.5 * (precision + precision.T)
    if marginal_scales is not None:
        index, scale_precision = marginal_scales
        precision[index, :] = 0.0
        precision[:, index] = 0.0
        precision[np.ix_(index, index)] = scale_precision
    return precision


def covariance_of_precision(precision: np.ndarray, *, marginal: bool = False) -> np.ndarray:
    """The inverse of a Laplace ``precision``; :class:`NoLaplaceFit` if it is not positive
    definite (``marginal``: at a hierarchy's marginal reference, for the message)."""
    try:
        chol = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError as err:
        where = "in the group effects " if marginal else ""
        raise NoLaplaceFit(
            f"The log posterior is not concave {where}at the reference point (its Hessian "
            "is not negative definite), so it has no Laplace covariance there. Pass a "
            "reference_point at a posterior mode (pm.find_MAP may have stopped early), or "
            "use proposal='rw'."
        ) from err
    inv_chol = np.linalg.solve(chol, np.eye(chol.shape[0]))
    return inv_chol.T @ inv_chol


@dataclass(frozen=True)
class NewtonResult:
    """Outcome of :func:`newton_map`.

    Attributes
    ----------
    position : ndarray
        The last accepted point (the mode when ``converged``).
    proxy : TaylorProxy
        The full-data Taylor sums at ``position`` (from the same pass).
    converged : bool
        Whether the Newton decrement fell below the tolerance.
    passes : int
        Full-data passes made.
    """

    position: np.ndarray
    proxy: TaylorProxy
    converged: bool
    passes: int


#: Rows of the subsample on which the Newton search starts: ``max(SUBSAMPLE_MIN_ROWS,
#: N // SUBSAMPLE_DIVISOR)``, used when that is at most a quarter of N.
SUBSAMPLE_MIN_ROWS = 20_000
SUBSAMPLE_DIVISOR = 20
SUBSAMPLE_NEWTON_TOLERANCE = 1e-2
#: Newton decrement at which the search on all rows stops. The decrement is about half
#: the squared distance to the mode in the posterior's own metric, so 1e-2 leaves the
#: reference within about 0.15 posterior sd of the mode: as good an expansion point for
#: the Taylor proxy, and one full-data pass fewer than a tight tolerance.
MODE_NEWTON_TOLERANCE = 1e-2


def newton_subsample(n_data: int, seed: int = 0) -> np.ndarray | None:
    """Sorted row indices of the subsample the mode search starts on, or None when N is
    too small for a subsample to save passes.

    The subsample mode is ``O(sqrt(N / m))`` posterior sds from the full-data mode, close
    enough for Newton's method on all rows to converge in two or three passes.
    """
    size = max(SUBSAMPLE_MIN_ROWS, n_data // SUBSAMPLE_DIVISOR)
    if 4 * size > n_data:
        return None
    rows = np.random.default_rng(seed).choice(n_data, size=size, replace=False)
    return np.sort(rows).astype(np.int64)


def newton_map(
    taylor_at: Callable[[np.ndarray], TaylorProxy],
    prior_at: Callable[[np.ndarray], tuple],
    start: np.ndarray,
    *,
    temperature: float = 1.0,
    tolerance: float = 1e-6,
    max_passes: int = 40,
) -> NewtonResult:
    """Posterior mode by damped Newton steps, one full-data pass per trial point.

    Each pass (``taylor_at``) gives the log-likelihood's value, gradient and Hessian
    sums, the same sums the control variates need: the pass at the mode is the Taylor
    pass, so no separate one is made. Newton's method converges quadratically near a
    mode of a smooth log posterior, so a handful of passes replaces the dozens of
    full-data gradients of a quasi-Newton search.

    The step solves ``(-H + lambda I) d = g`` for the log posterior's gradient ``g`` and
    Hessian ``H`` (likelihood tempered by ``temperature``, plus the prior's), with
    ``lambda = 0`` where ``-H`` is positive definite and otherwise twice the magnitude of
    its most negative eigenvalue; the step length is halved until the log posterior rises
    by at least a ``1e-4`` share of the predicted rise (Armijo). It stops when ``-H`` is
    positive definite and the Newton decrement ``g . d / 2`` is below ``tolerance``: a
    small decrement where the Hessian is indefinite marks a saddle, which non-centred and
    crossed effects have where a group scale meets zero.

    Parameters
    ----------
    taylor_at : callable
        ``taylor_at(q) -> TaylorProxy``: one full-data pass at ``q``.
    prior_at : callable
        ``prior_at(q) -> (value, gradient, hessian)`` of the log prior (with Jacobians).
    start : ndarray
        Starting point (unconstrained).
    temperature : float
        ``K``; the likelihood is raised to ``1/K``.
    tolerance : float
        Newton decrement (in log-density units) at which the search stops.
    max_passes : int
        Largest number of full-data passes.
    """
    position = np.asarray(start, dtype=np.float64).copy()
    proxy = taylor_at(position)
    passes = 1
    value = posterior_sums(proxy, prior_at(position), temperature)[0]
    while passes < max_passes:
        value, gradient, hessian = posterior_sums(proxy, prior_at(position), temperature)
        direction, definite = _newton_direction(gradient, hessian)
        decrement = float(gradient @ direction)
        # A small decrement where the Hessian is not definite is a saddle (e.g. where a
        # non-centred effect's scale meets zero), not a mode: keep climbing.
        if definite and decrement / 2.0 < tolerance:
            return NewtonResult(position, proxy, True, passes)
        length = 1.0
        while passes < max_passes:
            trial = position + length * direction
            try:
                trial_proxy = taylor_at(trial)
            except (ValueError, ArithmeticError):  # not finite there: shorten the step
                trial_proxy = None
            passes += 1
            if trial_proxy is not None:
                trial_value = posterior_sums(trial_proxy, prior_at(trial), temperature)[0]
                if math.isfinite(trial_value) and trial_value >= value + 1e-4 * length * decrement:
                    position, proxy = trial, trial_proxy
                    break
            length /= 2.0
            if length < 1e-10:
                return NewtonResult(position, proxy, False, passes)
    return NewtonResult(position, proxy, False, passes)


def posterior_sums(proxy: TaylorProxy, prior: tuple, temperature: float) -> tuple:
    """``(value, gradient, hessian)`` of the log posterior from the likelihood's Taylor
    sums (tempered by ``temperature``) and the prior's ``(value, gradient, hessian)``."""
    prior_value, prior_gradient, prior_hessian = prior
    return (
        proxy.value / temperature + float(prior_value),
        proxy.gradient / temperature + np.asarray(prior_gradient),
        proxy.hessian / temperature + np.asarray(prior_hessian),
    )


def _newton_direction(gradient: np.ndarray, hessian: np.ndarray) -> tuple[np.ndarray, bool]:
    """Solve ``(-H + lambda I) d = g``; return ``d`` and whether ``-H`` itself is definite.

    Where ``-H`` is positive definite, ``lambda = 0`` (the Newton step). Otherwise
    ``lambda`` is twice the magnitude of the most negative eigenvalue of ``-H`` (at least
    ``1e-6 * mean |diag H|``): a step along the directions of positive curvature that
    still climbs along those of negative curvature, instead of a tiny step under a
    damping sized to the largest curvature.
    """
    precision = -0.5 * (hessian + hessian.T)
    scale = max(float(np.mean(np.abs(np.diag(precision)))), 1e-12)
    factor = definite_factor(precision)
    if factor is not None:
        return factor.solve(gradient), True
    lowest = float(np.linalg.eigvalsh(precision)[0])
    damping = max(-2.0 * lowest, 1e-6 * scale)
    for _ in range(30):
        try:
            chol = np.linalg.cholesky(precision + damping * np.eye(gradient.size))
        except np.linalg.LinAlgError:
            damping *= 10.0
            continue
        return linalg.cho_solve((chol, True), gradient), False
    return gradient / scale, False  # no definite damping found: a short gradient step
