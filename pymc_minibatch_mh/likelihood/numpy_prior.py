"""A prior of independent standard distributions, evaluated with numpy.

Regression models usually give every free variable its own prior with fixed parameters
(``pm.Normal("beta", 0, 2, shape=d)``, ``pm.HalfNormal("sigma", 1)``). Such a prior's log
density in the sampled (unconstrained) coordinates, its gradient and its diagonal
Hessian have closed forms; evaluating them with numpy saves compiling PyTensor
functions for them (the larger part of a first construction on PyTensor's C backend, see
:mod:`~pymc_minibatch_mh.likelihood.numpy_glm`).

:func:`recognise_independent_prior` reads the prior from the model's graph and returns
None for anything else: a parameter that is not a constant (a hierarchy), a potential, a
distribution or transform outside :data:`DISTRIBUTIONS`. Whatever it returns was
compared with PyMC's own log prior and gradient at a few points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Constant, Variable
from pytensor.tensor.random.basic import CauchyRV, ExponentialRV, HalfNormalRV, NormalRV, StudentTRV
from scipy.special import gammaln

from pymc_minibatch_mh.likelihood.affine_maps import _MODE
from pymc_minibatch_mh.likelihood.compiling import compile_function
from pymc_minibatch_mh.likelihood.glm_families import _dist_params
from pymc_minibatch_mh.likelihood.graph_tools import graph_inputs

try:  # PyMC's own op for HalfCauchy
    from pymc.distributions.continuous import HalfCauchyRV
except ImportError:  # pragma: no cover - older layouts
    HalfCauchyRV = None

try:
    from pymc.logprob.transforms import LogTransform
except ImportError:  # pragma: no cover - older layouts
    from pymc.distributions.transforms import LogTransform

#: Distributions read, with the transform PyMC samples them on (None: the real line).
DISTRIBUTIONS = ("Normal", "StudentT", "Cauchy", "HalfNormal", "HalfCauchy", "Exponential")

_LOG_2PI = float(np.log(2.0 * np.pi))
_LOG_PI = float(np.log(np.pi))
_LOG_2 = float(np.log(2.0))

#: Relative tolerance of the comparison with PyMC's log prior and its gradient. PyMC keeps
#: constants such as ``sigma=5.0`` in float32 where that is exact, and computes some terms
#: of them in float32 (``log(sigma)``): the constant part of the numpy prior is set to
#: PyMC's at ``q0`` (so values agree to float64 rounding), and the rest is compared.
_CHECK_RTOL = 1e-6


@dataclass(frozen=True)
class PriorTerm:
    """One free variable's prior: ``kind`` over ``q[start:stop]``, parameters broadcast to
    that slice."""

    kind: str
    start: int
    stop: int
    params: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class IndependentPrior:
    """``log p(q)`` of independent priors, with the log transform's Jacobian for positive
    variables; value, gradient and (diagonal) Hessian in the sampled coordinates.

    The Normal terms are gathered into one (the commonest prior of a regression; its
    curvature is constant), the others are evaluated term by term.
    """

    ndim: int
    terms: tuple[PriorTerm, ...]
    #: Added to the log density (PyMC's rounding of its constants, see ``_CHECK_RTOL``).
    offset: float = 0.0

    def __post_init__(self) -> None:
        normal = [t for t in self.terms if t.kind == "Normal"]
        where = np.concatenate([np.arange(t.start, t.stop) for t in normal] or [[]])
        mu = np.concatenate([t.params[0] for t in normal] or [[]])
        sigma = np.concatenate([t.params[1] for t in normal] or [[]])
        constant = float(-np.log(sigma).sum() - 0.5 * _LOG_2PI * sigma.size) + self.offset
        curvature = np.zeros(self.ndim)
        curvature[where.astype(np.int64)] = -1.0 / sigma**2
        object.__setattr__(
            self, "_normal", (where.astype(np.int64), mu, 1.0 / sigma, constant, curvature)
        )
        object.__setattr__(self, "_others", tuple(t for t in self.terms if t.kind != "Normal"))

    def derivatives(self, q: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``(log p(q), gradient, diagonal of the Hessian)``."""
        where, mu, inv_sigma, constant, normal_curvature = self._normal
        grad = np.zeros(self.ndim)
        curvature = normal_curvature.copy()
        z = (q[where] - mu) * inv_sigma
        value = constant - 0.5 * float(z @ z)
        grad[where] = -z * inv_sigma
        for term in self._others:
            v, g, h = _TERMS[term.kind](q[term.start : term.stop], *term.params)
            value += float(np.sum(v))
            grad[term.start : term.stop] = g
            curvature[term.start : term.stop] = h
        return value, grad, curvature

    def gaussian(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(mean, precision)`` (the diagonal of the precision) when every coordinate's
        prior is Normal, else None."""
        if self._others:
            return None
        where, mu, inv_sigma, _, _ = self._normal
        mean, precision = np.zeros(self.ndim), np.zeros(self.ndim)
        mean[where], precision[where] = mu, inv_sigma**2
        return mean, precision

    def value(self, q: np.ndarray) -> float:
        """``log p(q)``: the value of :meth:`derivatives` alone (the same arithmetic, in
        every step's inner loop)."""
        where, mu, inv_sigma, constant, _ = self._normal
        z = (q[where] - mu) * inv_sigma
        value = constant - 0.5 * float(z @ z)
        for term in self._others:
            v, _, _ = _TERMS[term.kind](q[term.start : term.stop], *term.params)
            value += float(np.sum(v))
        return value

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad, _ = self.derivatives(q)
        return value, grad

    def grad(self, q: np.ndarray) -> np.ndarray:
        return self.derivatives(q)[1]

    def value_grad_hessian(self, q: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``(log p(q), gradient, Hessian)`` with the Hessian as a dense matrix."""
        value, grad, curvature = self.derivatives(q)
        return value, grad, np.diag(curvature)


def _normal(x, mu, sigma):
    z = (x - mu) / sigma
    return -0.5 * z * z - np.log(sigma) - 0.5 * _LOG_2PI, -z / sigma, -1.0 / sigma**2 + 0.0 * x


def _student_t(x, nu, mu, sigma):
    z = (x - mu) / sigma
    t = nu + z * z
    const = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi)
    value = const - np.log(sigma) - 0.5 * (nu + 1.0) * np.log1p(z * z / nu)
    return value, -(nu + 1.0) * z / (sigma * t), -(nu + 1.0) * (nu - z * z) / (sigma**2 * t * t)


def _cauchy(x, alpha, beta):
    z = (x - alpha) / beta
    t = 1.0 + z * z
    value = -_LOG_PI - np.log(beta) - np.log1p(z * z)
    return value, -2.0 * z / (beta * t), -2.0 * (1.0 - z * z) / (beta**2 * t * t)


def _half_normal(u, sigma):
    # x = exp(u): log 2 + log N(x | 0, sigma) + u.
    x2 = np.exp(2.0 * u) / sigma**2
    value = _LOG_2 - 0.5 * _LOG_2PI - np.log(sigma) - 0.5 * x2 + u
    return value, 1.0 - x2, -2.0 * x2


def _half_cauchy(u, beta):
    # x = exp(u): log 2 - log(pi beta) - log(1 + (x / beta)^2) + u.
    r = np.exp(2.0 * u) / beta**2
    value = _LOG_2 - _LOG_PI - np.log(beta) - np.log1p(r) + u
    return value, 1.0 - 2.0 * r / (1.0 + r), -4.0 * r / (1.0 + r) ** 2


def _exponential(u, scale):
    # x = exp(u): -log(scale) - x / scale + u.
    x = np.exp(u) / scale
    return -np.log(scale) - x + u, 1.0 - x, -x


_TERMS: dict[str, Callable] = {
    "Normal": _normal,
    "StudentT": _student_t,
    "Cauchy": _cauchy,
    "HalfNormal": _half_normal,
    "HalfCauchy": _half_cauchy,
    "Exponential": _exponential,
}


def _kind(rv: Variable, transform) -> tuple[str, int] | None:
    """The distribution's name in :data:`_TERMS` and how many leading parameters are a
    location that must be 0 (half distributions), or None."""
    op = rv.owner.op
    real_line = transform is None
    positive = isinstance(transform, LogTransform)
    if isinstance(op, NormalRV) and real_line:
        return "Normal", 0
    if isinstance(op, StudentTRV) and real_line:
        return "StudentT", 0
    if isinstance(op, CauchyRV) and real_line:
        return "Cauchy", 0
    if isinstance(op, HalfNormalRV) and positive:
        return "HalfNormal", 1
    if HalfCauchyRV is not None and isinstance(op, HalfCauchyRV) and positive:
        return "HalfCauchy", 0
    if isinstance(op, ExponentialRV) and positive:
        return "Exponential", 0
    return None


def recognise_independent_prior(
    model: pm.Model,
    value_vars: Sequence[Variable],
    initial_point: dict,
    compile_prior: Callable[[], Callable],
) -> IndependentPrior | None:
    """The model's prior as independent distributions of :data:`DISTRIBUTIONS` with
    constant parameters, or None.

    Parameters
    ----------
    model : pymc.Model
    value_vars : sequence of TensorVariable
        The sampled block, in raveling order; it must be all of the model's free
        variables.
    initial_point : dict
        A point of the model (sizes of the variables, and where the check runs).
    compile_prior : callable
        ``compile_prior() -> prior`` with ``prior(q) -> (log p(q), gradient)`` as PyMC
        computes it (compiled with the Python linker: a few calls), called only once the
        prior's structure has been read. The numpy prior must agree with it at ``q0`` and at
        three random points around it.
    """
    if model.potentials or {v.name for v in value_vars} != {v.name for v in model.value_vars}:
        return None
    kinds, params, sizes = [], [], []
    for value_var in value_vars:
        rv = model.values_to_rvs[value_var]
        found = _kind(rv, model.rvs_to_transforms.get(rv))
        if found is None:
            return None
        dist_params = _dist_params(rv.owner)
        if not all(isinstance(i, Constant) for i in graph_inputs(dist_params)):
            return None  # a hierarchy, or data: PyMC's prior is used
        kinds.append(found)
        params.append(dist_params)
        sizes.append(int(np.asarray(initial_point[value_var.name]).size))
    flat = [p for ps in params for p in ps]
    evaluated = iter(compile_function([], flat, mode=_MODE)() if flat else [])
    terms, start = [], 0
    for (kind, n_location), ps, size, value_var in zip(
        kinds, params, sizes, value_vars, strict=True
    ):
        shape = np.shape(initial_point[value_var.name])
        values = [np.asarray(next(evaluated), dtype=np.float64) for _ in ps]
        try:
            values = [np.broadcast_to(v, shape).ravel() for v in values]
        except ValueError:
            return None
        if any(np.any(v != 0.0) for v in values[:n_location]):
            return None
        terms.append(PriorTerm(kind, start, start + size, tuple(values[n_location:])))
        start += size
    q0 = np.concatenate(
        [np.asarray(initial_point[v.name], dtype=np.float64).ravel() for v in value_vars]
    )
    prior = compile_prior()
    exact = IndependentPrior(ndim=start, terms=tuple(terms))
    gap = float(prior(q0)[0]) - exact.value(q0)
    if not abs(gap) <= _CHECK_RTOL * (1.0 + abs(exact.value(q0))):
        return None
    result = IndependentPrior(ndim=start, terms=tuple(terms), offset=gap)
    return result if _agrees(result, prior, q0) else None


def looks_gaussian(model: pm.Model, value_vars: Sequence[Variable]) -> bool:
    """Whether the block's prior is, by its structure alone, Normal with constant parameters
    on every coordinate: the block is the whole model, without potentials, and each
    variable is a ``pm.Normal`` on the real line whose parameters are constants. Nothing
    is compiled; :func:`recognise_gaussian_prior` makes the numeric check."""
    if model.potentials or {v.name for v in value_vars} != {v.name for v in model.value_vars}:
        return False
    for value_var in value_vars:
        rv = model.values_to_rvs[value_var]
        if _kind(rv, model.rvs_to_transforms.get(rv)) != ("Normal", 0):
            return False
        if not all(isinstance(i, Constant) for i in graph_inputs(_dist_params(rv.owner))):
            return False
    return True


def recognise_gaussian_prior(
    model: pm.Model,
    value_vars: Sequence[Variable],
    initial_point: dict,
    q: Variable,
    prior: Variable,
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(mean, diagonal of the precision)`` when the block is the whole model and every
    coordinate's prior is Normal with constant parameters, else None.

    ``q`` and ``prior`` are the block's raveled value and its log prior graph (read by
    :func:`recognise_independent_prior`, compiled with the Python linker only if the
    prior's structure matches).
    """
    if q.dtype != "float64":
        return None
    independent = recognise_independent_prior(
        model,
        value_vars,
        initial_point,
        lambda: compile_function([q], [prior, pt.grad(prior, q)], mode=_MODE),
    )
    ndim = sum(int(np.asarray(initial_point[v.name]).size) for v in value_vars)
    if independent is None or independent.ndim != ndim:
        return None
    return independent.gaussian()


def _agrees(result: IndependentPrior, prior: Callable, q0: np.ndarray) -> bool:
    rng = np.random.default_rng(11)
    for q in (q0, *(q0 + rng.standard_normal(q0.size) for _ in range(3))):
        want_value, want_grad = prior(q)
        value, grad = result.value_and_grad(q)
        want_grad = np.asarray(want_grad, dtype=np.float64)
        scale = 1.0 + np.abs(want_grad)
        if not (
            np.isfinite(value)
            and abs(value - float(want_value)) <= _CHECK_RTOL * (1.0 + abs(value))
            and np.all(np.abs(grad - want_grad) <= _CHECK_RTOL * scale)
        ):
            return False
    return True
