"""Recognise a generalised linear model likelihood in an unmodified PyMC model.

TunaMH needs per-datum Lipschitz constants and FlyMC needs collapsible lower
bounds. Both are available in closed form when the observed likelihood is a
known family applied to a linear predictor ``eta`` that is *affine* in the
sampled block ``q`` (the raveled unconstrained values, laid out as in
:class:`~pymc_minibatch_mh.likelihood.tall_data.TallData`). This module finds
that structure and hands it over as plain numpy arrays; bounds and kernels never
see PyTensor.

Supported patterns (``eta`` affine in ``q``; fixed parameters must not depend on
any free variable):

- ``"bernoulli_logit"``: ``Bernoulli(logit_p=eta)`` or ``Bernoulli(p=invlogit(eta))``;
- ``"poisson_log"``: ``Poisson(mu=exp(eta))``;
- ``"normal"``: ``Normal(mu=eta, sigma=s)``;
- ``"student_t"``: ``StudentT(nu=fixed, mu=eta, sigma=s)``;

where ``s`` is fixed or a free scale shared by all data whose log is affine in ``q``
(a positive variable sampled on the log scale, e.g. ``pm.HalfNormal("sigma", 1)``).
- ``"categorical_logit"``: ``Categorical(logit_p=X @ W + b)``.

Anything else raises :class:`UnsupportedLikelihood`, whose message says what was
found; TunaMH and FlyMC then need explicit bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import join_nonshared_inputs
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Variable
from pytensor.scalar.basic import Exp
from pytensor.scalar.math import Sigmoid
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.shape import SpecifyShape
from pytensor.tensor.special import Softmax
from scipy.special import gammaln, logsumexp

from pymc_minibatch_mh.likelihood.batching import probe_indices
from pymc_minibatch_mh.likelihood.compiling import compile_function
from pymc_minibatch_mh.likelihood.graph_tools import (
    ancestors,
    data_value,
    rebuild_graph,
    tensor_data_inputs,
    toposort,
)
from pymc_minibatch_mh.likelihood.inspection import datum_count
from pymc_minibatch_mh.passes import record_rows

__all__ = [
    "FAMILIES",
    "SCALE_FAMILIES",
    "CompositeLikelihood",
    "LinearPredictorLikelihood",
    "UnsupportedLikelihood",
    "recognise_linear_predictor",
]

FAMILIES = ("bernoulli_logit", "student_t", "normal", "poisson_log", "categorical_logit")
_SCALAR_FAMILIES = ("bernoulli_logit", "student_t", "normal", "poisson_log")
#: Families whose scale ``sigma`` may be a free parameter (log sigma affine in q).
SCALE_FAMILIES = ("normal", "student_t")

_SUPPORTED = (
    "Supported likelihoods (one or more observed variables over the same rows, eta affine in "
    "the sampled variables): "
    "Bernoulli(logit_p=eta) or Bernoulli(p=pm.math.invlogit(eta)); Poisson(mu=pm.math.exp(eta)); "
    "Normal(mu=eta, sigma=s); StudentT(nu=<fixed>, mu=eta, sigma=s) with s fixed or one free "
    "positive scale; "
    "Categorical(logit_p=X @ W + b)."
)
_BOUNDS_HINT = (
    "TunaMH and FlyMC also accept explicit bounds for other likelihoods (see the `bound=` "
    "argument of the step, and TunaMH's `c=` / `metric=`); MinibatchBarker and Austere need "
    "no bounds at all."
)

# Graphs are evaluated a handful of times only: the Python linker compiles in
# milliseconds on both backends, and numpy does the heavy lifting (matrix products).
_MODE = Mode(linker="py", optimizer="fast_run").excluding("fusion")


def _affine_rtol() -> float:
    """Relative tolerance of the affinity checks: rounding of the model's float type."""
    return max(1e-8, 1e3 * float(np.finfo(pytensor.config.floatX).eps))


def _check_rtol() -> float:
    """Relative tolerance when comparing log-likelihoods with the model's."""
    return max(1e-6, 1e4 * float(np.finfo(pytensor.config.floatX).eps))


_CHECK_SEED = 20240607  # fixed: the self-checks are deterministic


class UnsupportedLikelihood(ValueError):
    """The model's likelihood is not one of the recognised linear-predictor families."""


# ---------------------------------------------------------------------------- result


@dataclass(frozen=True, eq=False)
class LinearPredictorLikelihood:
    """A per-datum likelihood ``p(y_i | eta_i)`` with ``eta`` affine in ``q``.

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    design : ndarray
        Scalar families: ``(N, D)`` with ``eta = design @ q + offset``.
        ``"categorical_logit"``: ``(N, P)`` feature matrix (see ``coef_map``).
    offset : ndarray
        ``(N,)`` for scalar families, ``(N, K)`` for ``"categorical_logit"``.
    observed : ndarray
        ``(N,)`` observations: 0/1 (float) for Bernoulli, class index 0..K-1
        (int) for Categorical, counts (float) for Poisson, reals otherwise.
    params : dict
        Fixed family parameters, each a float or an ``(N,)`` array:
        ``{"nu", "sigma"}`` for Student-t, ``{"sigma"}`` for Normal, empty otherwise.
        Without ``"sigma"`` when the scale is free (``scale_row``).
    scale_row, scale_offset : ndarray and float, optional
        Normal and Student-t with a free scale: ``log sigma = scale_row @ q +
        scale_offset``, the same for every datum (e.g. ``sigma`` a positive free
        variable sampled on the log scale). None for a fixed ``sigma``.
    coef_map, coef_offset : ndarray, optional
        ``"categorical_logit"`` only: ``A`` of shape ``(P*K, D)`` and ``w0`` of shape
        ``(P*K,)`` such that ``logits = design @ (A @ q + w0).reshape(P, K) + offset``.
    n_classes : int, optional
        ``"categorical_logit"`` only: the number of classes K.

    Notes
    -----
    Memory: ``design`` is dense float64, 8 N D bytes for scalar families
    (8 N P for categorical), plus ``offset`` (N or N K floats). All arrays
    are read-only views.

    References
    ----------
    .. [1] Maclaurin, D. and Adams, R. P. (2014). Firefly Monte Carlo: Exact MCMC
       with subsets of data. UAI.
    .. [2] Zhang, R., Cooper, A. F. and De Sa, C. (2020). Asymptotically optimal
       exact minibatch Metropolis-Hastings. NeurIPS.
    """

    family: str
    design: np.ndarray
    offset: np.ndarray
    observed: np.ndarray
    params: dict
    coef_map: np.ndarray | None = None
    coef_offset: np.ndarray | None = None
    n_classes: int | None = None
    scale_row: np.ndarray | None = None
    scale_offset: float = 0.0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}.")
        design = _frozen(self.design, np.float64)
        n_data = design.shape[0] if design.ndim == 2 else -1
        if design.ndim != 2:
            raise ValueError(f"design must be 2-D, got shape {design.shape}.")
        observed = _frozen(
            self.observed, np.int64 if self.family == "categorical_logit" else np.float64
        )
        if observed.shape != (n_data,):
            raise ValueError(f"observed has shape {observed.shape}, expected ({n_data},).")
        offset = _frozen(self.offset, np.float64)
        if self.family == "categorical_logit":
            k = int(self.n_classes or 0)
            coef_map = _frozen(self.coef_map, np.float64)
            coef_offset = _frozen(self.coef_offset, np.float64)
            p_k = design.shape[1] * k
            if k < 2 or offset.shape != (n_data, k):
                raise ValueError(
                    f"categorical_logit needs n_classes >= 2 and offset of shape (N, K); got "
                    f"n_classes={self.n_classes}, offset {offset.shape}."
                )
            if coef_map.ndim != 2 or coef_map.shape[0] != p_k or coef_offset.shape != (p_k,):
                raise ValueError(
                    f"coef_map must be (P*K, D) = ({p_k}, D) and coef_offset ({p_k},); got "
                    f"{coef_map.shape} and {coef_offset.shape}."
                )
            object.__setattr__(self, "coef_map", coef_map)
            object.__setattr__(self, "coef_offset", coef_offset)
            object.__setattr__(self, "n_classes", k)
        else:
            if offset.shape != (n_data,):
                raise ValueError(f"offset has shape {offset.shape}, expected ({n_data},).")
            if self.coef_map is not None or self.coef_offset is not None:
                raise ValueError("coef_map / coef_offset are only used by categorical_logit.")
        needed = {"student_t": {"nu", "sigma"}, "normal": {"sigma"}}.get(self.family, set())
        if self.scale_row is not None:
            if self.family not in SCALE_FAMILIES:
                raise ValueError(
                    f"scale_row (a free scale) is only used by {SCALE_FAMILIES}; got "
                    f"{self.family!r}."
                )
            scale_row = _frozen(self.scale_row, np.float64)
            if scale_row.shape != (design.shape[1],) or not np.all(np.isfinite(scale_row)):
                raise ValueError(
                    f"scale_row must be a finite vector of length D = {design.shape[1]}; got "
                    f"shape {scale_row.shape}."
                )
            if not math.isfinite(float(self.scale_offset)):
                raise ValueError("scale_offset must be finite.")
            object.__setattr__(self, "scale_row", scale_row)
            object.__setattr__(self, "scale_offset", float(self.scale_offset))
            needed = needed - {"sigma"}
        if set(self.params) != needed:
            raise ValueError(
                f"{self.family} needs params {sorted(needed)}, got {sorted(self.params)}."
            )
        params = {}
        for name, value in self.params.items():
            value = np.asarray(value, dtype=np.float64)
            if value.size == 1:
                params[name] = float(value.reshape(()))
            elif value.shape == (n_data,):
                params[name] = _frozen(value, np.float64)
            else:
                raise ValueError(
                    f"Parameter {name!r} must be a scalar or have shape ({n_data},), got "
                    f"{value.shape}."
                )
            if not np.all(np.asarray(params[name]) > 0) or not np.all(np.isfinite(params[name])):
                raise ValueError(f"Parameter {name!r} must be positive and finite.")
        object.__setattr__(self, "design", design)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "observed", observed)
        object.__setattr__(self, "params", params)

    @property
    def n_data(self) -> int:
        """Number of data points N."""
        return int(self.design.shape[0])

    @property
    def ndim(self) -> int:
        """Length D of the raveled parameter vector ``q``."""
        if self.family == "categorical_logit":
            return int(self.coef_map.shape[1])
        return int(self.design.shape[1])

    def coefficients(self, q: np.ndarray) -> np.ndarray:
        """``categorical_logit`` only: the ``(P, K)`` coefficient matrix at ``q``."""
        if self.family != "categorical_logit":
            raise ValueError("coefficients() is only defined for categorical_logit.")
        return (self.coef_map @ q + self.coef_offset).reshape(self.design.shape[1], -1)

    def linear_predictor(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """``eta`` of the rows ``idx`` (all rows if None).

        Returns shape ``(len(idx),)`` for scalar families and ``(len(idx), K)``
        (the logits) for ``"categorical_logit"``.
        """
        q = np.asarray(q, dtype=np.float64)
        rows = slice(None) if idx is None else np.asarray(idx)
        if self.family == "categorical_logit":
            return self.design[rows] @ self.coefficients(q) + self.offset[rows]
        return self.design[rows] @ q + self.offset[rows]

    @property
    def free_scale(self) -> bool:
        """Whether ``sigma`` is a free parameter (``log sigma = scale_row @ q + offset``)."""
        return self.scale_row is not None

    def log_scale(self, q: np.ndarray) -> float:
        """``log sigma`` at ``q`` (free scale only)."""
        if self.scale_row is None:
            raise ValueError("log_scale() needs a free scale (scale_row).")
        return float(self.scale_row @ np.asarray(q, dtype=np.float64) + self.scale_offset)

    def loglik(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Untempered per-datum log-likelihood of the rows ``idx`` (all rows if None)."""
        rows = slice(None) if idx is None else np.asarray(idx)
        eta = self.linear_predictor(q, idx)
        params = {
            name: value if np.ndim(value) == 0 else value[rows]
            for name, value in self.params.items()
        }
        if self.scale_row is not None:
            params["sigma"] = math.exp(self.log_scale(q))
        return family_loglik(self.family, eta, self.observed[rows], params)


@dataclass(frozen=True, eq=False)
class CompositeLikelihood:
    """Several observed variables over the same N rows: ``l_i = sum_k l_i^(k)``.

    Each part is a :class:`LinearPredictorLikelihood` over the same raveled block ``q``;
    bounds that share a metric add up part by part (TunaMH's remainder bounds do).

    Parameters
    ----------
    parts : tuple of LinearPredictorLikelihood
        One per observed variable, each with N rows.
    names : tuple of str
        The observed variables' names, in the same order.
    """

    parts: tuple
    names: tuple
    family: str = "composite"

    def __post_init__(self) -> None:
        if len(self.parts) < 2 or len(self.names) != len(self.parts):
            raise ValueError("A composite likelihood needs two or more named parts.")
        sizes = {(part.n_data, part.ndim) for part in self.parts}
        if len(sizes) != 1:
            raise ValueError(f"The parts disagree on (N, D): {sorted(sizes)}.")

    @property
    def n_data(self) -> int:
        return self.parts[0].n_data

    @property
    def ndim(self) -> int:
        return self.parts[0].ndim

    @property
    def free_scale(self) -> bool:
        return any(getattr(part, "free_scale", False) for part in self.parts)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(part.family for part in self.parts)

    def loglik(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Untempered per-datum log-likelihood (sum over the parts)."""
        return sum(part.loglik(q, idx) for part in self.parts)


def family_loglik(family: str, eta: np.ndarray, y: np.ndarray, params: dict) -> np.ndarray:
    """Per-datum log-density of ``y`` given the linear predictor ``eta`` (numpy, stable).

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    eta : ndarray
        ``(n,)`` linear predictor, or ``(n, K)`` logits for ``"categorical_logit"``.
    y : ndarray
        ``(n,)`` observations.
    params : dict
        Fixed parameters (scalars or arrays broadcastable to ``(n,)``).
    """
    if family == "bernoulli_logit":
        # log sigmoid(s) = -log(1 + exp(-s)), with s = eta for y = 1 and -eta for y = 0.
        signed = np.where(y > 0.5, eta, -eta)
        return -np.logaddexp(0.0, -signed)
    if family == "poisson_log":
        return y * eta - np.exp(eta) - gammaln(y + 1.0)
    if family == "normal":
        sigma = params["sigma"]
        z = (y - eta) / sigma
        return -0.5 * np.log(2.0 * np.pi) - np.log(sigma) - 0.5 * z * z
    if family == "student_t":
        nu, sigma = params["nu"], params["sigma"]
        z = (y - eta) / sigma
        const = (
            gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi) - np.log(sigma)
        )
        return const - 0.5 * (nu + 1.0) * np.log1p(z * z / nu)
    if family == "categorical_logit":
        y = np.asarray(y, dtype=np.int64)
        chosen = np.take_along_axis(eta, y[:, None], axis=1)[:, 0]
        return chosen - logsumexp(eta, axis=1)
    raise ValueError(f"Unknown family {family!r}; expected one of {FAMILIES}.")


def _frozen(value, dtype) -> np.ndarray:
    array = np.asarray(value, dtype=dtype).view()
    array.setflags(write=False)
    return array


# ---------------------------------------------------------------------------- recogniser


def recognise_linear_predictor(
    model: pm.Model,
    value_vars: Sequence[Variable],
    *,
    shared: dict,
    initial_point: dict,
    check_against: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> LinearPredictorLikelihood | CompositeLikelihood:
    """Express the model's likelihood as a known family of an affine linear predictor.

    ``eta`` (the logits for Categorical) is read from the observed variable's
    parameters and compiled as a function of the raveled vector ``q`` of
    ``value_vars`` (other value variables read from ``shared``, exactly as in
    :func:`~pymc_minibatch_mh.likelihood.tall_data.build_tall_data`). It is then
    linearised numerically with unit steps, ``J[:, k] = eta(q0 + e_k) - eta(q0)``
    and ``offset = eta(q0) - J @ q0``, which is exact when ``eta`` is affine:

    * products ``X @ W`` of an (N, P) data matrix and a coefficient matrix that
      depends on ``q`` are found in the graph; only ``W(q)`` is differenced, and
      the design block is ``X`` times that small map;
    * everything else (intercepts, ``b * x[:, j]``, offsets) is differenced over
      all rows, for the coordinates it depends on.

    Affinity is then verified at random points far from ``q0`` (tight relative
    tolerance), and the numpy per-datum log-likelihood is compared with the
    model's (or ``check_against``) on probe rows at ``q0`` and a perturbed point.

    Parameters
    ----------
    model : pymc.Model
        Model with one observed variable, or several sharing the N rows (each must be a
        recognised family; the result is then a :class:`CompositeLikelihood`).
    value_vars : sequence of TensorVariable
        Value variables of the sampled block, in raveling order.
    shared : dict
        Replacements of the other value variables by shared variables
        (:func:`pymc.pytensorf.make_shared_replacements`).
    initial_point : dict
        A point of the model; ``q0`` is read from it.
    check_against : callable, optional
        ``check_against(q, idx) -> (len(idx),)`` untempered per-datum
        log-likelihood (e.g. ``TallData.loglik``). If None, the model's own
        observed log-density is compiled and used.

    Returns
    -------
    LinearPredictorLikelihood or CompositeLikelihood

    Raises
    ------
    UnsupportedLikelihood
        The likelihood is not a recognised family or link, ``eta`` is not affine
        in ``q`` or depends on free variables outside the block, a fixed
        parameter (``sigma``, ``nu``) depends on a free variable, a potential
        reads the data, or the self-check fails. The message says what was found.
    ValueError
        For models that cannot be subsampled at all (see ``build_tall_data``).

    Notes
    -----
    Cost: a few compiles with the Python linker (milliseconds each). Time
    O(N * D) when each coefficient is one coordinate of ``q`` (the usual case;
    O(N * P * D) for a general coefficient map), plus one O(N) evaluation of the
    non-product part per coordinate it depends on, plus a handful of full
    evaluations for the checks. Memory: the design is dense float64, N x D for
    scalar families and N x P (+1 for an intercept) for Categorical, plus the
    (N,) or (N, K) offset; nothing is quadratic in N.

    Fixed parameters must not depend on *any* free variable: one outside the
    block would be changed by another step while the bounds keep its old value.

    References
    ----------
    .. [1] Maclaurin, D. and Adams, R. P. (2014). Firefly Monte Carlo: Exact MCMC
       with subsets of data. UAI.
    .. [2] Zhang, R., Cooper, A. F. and De Sa, C. (2020). Asymptotically optimal
       exact minibatch Metropolis-Hastings. NeurIPS.
    """
    value_vars = list(value_vars)
    observed_rvs = list(model.observed_RVs)
    n_data = datum_count(model)
    _refuse_data_potentials(model, n_data)
    q0 = np.concatenate(
        [np.asarray(initial_point[v.name], dtype=np.float64).ravel() for v in value_vars]
    )
    parts, contexts = [], []
    for rv in observed_rvs:
        family, link_params, fixed = _match_family(rv)
        observed = _observed_values(model, rv, family, n_data)
        context = _Context(model, value_vars, shared, initial_point, rv, n_data, q0)
        if family == "categorical_logit":
            part = _recognise_categorical(context, link_params, observed)
        else:
            part = _recognise_scalar(context, family, link_params, fixed, observed)
        parts.append(part)
        contexts.append(context)
    names = ", ".join(repr(rv.name) for rv in observed_rvs)
    if len(parts) == 1:
        result = parts[0]
    else:
        # Each part is checked against its own observed variable first (clear messages).
        for part, context in zip(parts, contexts, strict=True):
            _self_check(part, context.model_loglik(), q0, context.rv.name)
        result = CompositeLikelihood(tuple(parts), tuple(rv.name for rv in observed_rvs))

    if check_against is None:
        if len(parts) == 1:
            _self_check(result, contexts[0].model_loglik(), q0, names)
        return result
    try:
        _self_check(result, check_against, q0, names)
    except UnsupportedLikelihood:
        # Tell apart "we misread the model" from "the reference is not the model".
        if len(parts) == 1:
            _self_check(result, contexts[0].model_loglik(), q0, names)
        raise UnsupportedLikelihood(
            f"The per-datum log-likelihood passed as `check_against` disagrees with the full-data "
            f"log-likelihood of {names}, while the recognised {result.family} likelihood "
            "agrees with the latter. The minibatch graph probably reduces over the data axis "
            "(e.g. in-graph centring `x - x.mean(0)`, which then uses the minibatch mean): "
            "precompute such statistics in numpy and pass them as data."
        ) from None
    return result


@dataclass
class _Context:
    model: pm.Model
    value_vars: list
    shared: dict
    initial_point: dict
    rv: Variable
    n_data: int
    q0: np.ndarray

    @property
    def slices(self) -> dict:
        """Slice of ``q`` of every value variable of the block."""
        out, start = {}, 0
        for var in self.value_vars:
            size = int(np.size(self.initial_point[var.name]))
            out[var] = slice(start, start + size)
            start += size
        return out

    def free_inputs(self, graph: Variable) -> list:
        """Value variables of the model that ``graph`` depends on."""
        found = set(ancestors([graph]))
        return [v for v in self.model.value_vars if v in found]

    def compile(self, outputs: list, extra_inputs: Sequence[Variable] = ()):
        """Compile ``outputs`` (in value-variable form) as ``f(q, *extra) -> list``."""
        joined, q_var = join_nonshared_inputs(
            point=self.initial_point,
            outputs=outputs,
            inputs=self.value_vars,
            shared_inputs=self.shared,
        )
        fn = compile_function([q_var, *extra_inputs], joined, mode=_MODE, on_unused_input="ignore")
        dtype = q_var.dtype

        def evaluate(q, *extra):
            return [np.asarray(o, dtype=np.float64) for o in fn(np.asarray(q, dtype), *extra)]

        return evaluate

    def model_loglik(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """The model's own per-datum observed log-density, compiled over all rows."""
        (term,) = self.model.logp(vars=[self.rv], sum=False)
        fn = self.compile([term])
        return lambda q, idx: fn(q)[0][np.asarray(idx)]

    def describe_vars(self, variables: list) -> str:
        parts = []
        for var in variables:
            rv = self.model.values_to_rvs.get(var)
            if rv is not None and rv.name != var.name:
                parts.append(
                    f"{rv.name!r} (sampled on a transformed scale as {var.name!r}, so even "
                    f"X * {rv.name} is not affine in the sampled value)"
                )
            else:
                parts.append(repr(var.name))
        return ", ".join(parts)


def _match_family(rv: Variable) -> tuple[str, Variable, dict]:
    """Family name, the variable carrying the linear predictor, and fixed parameters."""
    node = rv.owner
    op = node.op
    params = _dist_params(node)
    name = rv.name
    if isinstance(op, _rv_type(pm.Bernoulli)):
        (p,) = params
        eta = _strip_link(p, _elemwise_of(Sigmoid))
        if eta is None:
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is Bernoulli with p = {_describe(p)}, which is not "
                "a logistic link. Write the model with `pm.Bernoulli(..., logit_p=eta)` (or "
                "`p=pm.math.invlogit(eta)`) with eta affine in the parameters. "
                + _SUPPORTED
                + " "
                + _BOUNDS_HINT
            )
        return "bernoulli_logit", eta, {}
    if isinstance(op, _rv_type(pm.Poisson)):
        (mu,) = params
        eta = _strip_link(mu, _elemwise_of(Exp))
        if eta is None:
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is Poisson with mu = {_describe(mu)}, which is not "
                "a log link. Write `pm.Poisson(..., mu=pm.math.exp(eta))` with eta affine in "
                "the parameters. " + _SUPPORTED + " " + _BOUNDS_HINT
            )
        return "poisson_log", eta, {}
    if isinstance(op, _rv_type(pm.Normal)):
        mu, sigma = params
        return "normal", mu, {"sigma": sigma}
    if isinstance(op, _rv_type(pm.StudentT)):
        nu, mu, sigma = params
        return "student_t", mu, {"nu": nu, "sigma": sigma}
    if isinstance(op, _rv_type(pm.Categorical)):
        (p,) = params
        logits = _strip_link(p, _is_last_axis_softmax)
        if logits is None:
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is Categorical with p = {_describe(p)}, not a "
                "softmax over the last axis. Write `pm.Categorical(..., logit_p=X @ W + b)`. "
                + _SUPPORTED
                + " "
                + _BOUNDS_HINT
            )
        return "categorical_logit", logits, {}
    raise UnsupportedLikelihood(
        f"Observed variable {name!r} has distribution {type(op).__name__}, which the "
        "linear-predictor recogniser does not know. " + _SUPPORTED + " " + _BOUNDS_HINT
    )


def _rv_type(dist) -> type:
    """The RandomVariable class behind a PyMC distribution (PyMC 5.2x and 6.x)."""
    rv_type = getattr(dist, "rv_type", None)
    if isinstance(rv_type, type):
        return rv_type
    return type(dist.rv_op)


def _dist_params(node) -> list:
    op = node.op
    if hasattr(op, "dist_params"):
        return list(op.dist_params(node))
    return list(node.inputs[2:])  # pragma: no cover - (rng, size, *params) layout


def _strip_link(var: Variable, is_link: Callable) -> Variable | None:
    """``var`` with its inverse-link node removed, looking through shape-only wrappers."""
    current = var
    while current.owner is not None:
        op = current.owner.op
        if is_link(current.owner):
            return rebuild_graph(var, {current: current.owner.inputs[0]})
        if isinstance(op, DimShuffle | SpecifyShape):
            current = current.owner.inputs[0]
            continue
        return None
    return None


def _elemwise_of(scalar_op_type: type) -> Callable:
    def is_link(node) -> bool:
        op = node.op
        return isinstance(op, Elemwise) and isinstance(op.scalar_op, scalar_op_type)

    return is_link


def _is_last_axis_softmax(node) -> bool:
    """Softmax over the last axis (pytensor 2 stores ``axis=-1``, pytensor 3 ``(ndim-1,)``)."""
    if not isinstance(node.op, Softmax):
        return False
    ndim = node.inputs[0].ndim
    axis = node.op.axis
    if axis is None:
        return ndim == 1
    axes = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    return len(axes) == 1 and axes[0] % ndim == ndim - 1


def _describe(var: Variable) -> str:
    """A short description of what a parameter is, for error messages."""
    while var.owner is not None and isinstance(var.owner.op, DimShuffle | SpecifyShape):
        var = var.owner.inputs[0]
    owner = var.owner
    if owner is None:
        return "a constant or data array"
    op = owner.op
    if hasattr(op, "dist_params"):
        return f"the random variable {var.name!r}" if var.name else "a random variable"
    if isinstance(op, Elemwise):
        return f"{type(op.scalar_op).__name__.lower()}(...)"
    return f"{type(op).__name__}(...)"


def _refuse_data_potentials(model: pm.Model, n_data: int) -> None:
    """Potentials that read per-datum data are likelihood terms the bounds cannot see."""
    for potential in model.potentials:
        for var, value in tensor_data_inputs([potential]):
            if value.ndim >= 1 and value.shape[0] == n_data:
                raise UnsupportedLikelihood(
                    f"Potential {potential.name!r} reads per-datum data "
                    f"({var.name or 'an array'} with {n_data} rows): it is a likelihood "
                    "term that the bounds of TunaMH/FlyMC cannot cover, and it would be "
                    "evaluated on all N rows at every step. Express it as an observed "
                    "distribution, or use MinibatchBarker / Austere. " + _BOUNDS_HINT
                )


def _observed_values(model: pm.Model, rv: Variable, family: str, n_data: int) -> np.ndarray:
    values = np.asarray(data_value(model.rvs_to_values[rv]))
    if values.shape != (n_data,):
        raise UnsupportedLikelihood(
            f"Observed variable {rv.name!r} has shape {values.shape}; the linear-predictor "
            f"recogniser needs one observation per data point, shape ({n_data},). " + _BOUNDS_HINT
        )
    if family == "bernoulli_logit" and not np.all((values == 0) | (values == 1)):
        raise UnsupportedLikelihood(f"Bernoulli observations of {rv.name!r} must be 0 or 1.")
    if family == "poisson_log" and not np.all((values >= 0) & (values == np.round(values))):
        raise UnsupportedLikelihood(
            f"Poisson observations of {rv.name!r} must be non-negative integers."
        )
    if family == "categorical_logit" and not np.all(values == np.round(values)):
        raise UnsupportedLikelihood(
            f"Categorical observations of {rv.name!r} must be integer class indices."
        )
    return values


# ------------------------------------------------------------------ scalar families


def _recognise_scalar(
    ctx: _Context, family: str, eta_rv: Variable, fixed_rv: dict, observed: np.ndarray
) -> LinearPredictorLikelihood:
    n_data, name = ctx.n_data, ctx.rv.name
    eta, *graphs = ctx.model.replace_rvs_by_values([eta_rv, *fixed_rv.values()])
    _refuse_outside_block(ctx, eta, f"the linear predictor of {name!r}")
    fixed, scale_graph = {}, None
    for param_name, graph in zip(fixed_rv, graphs, strict=True):
        free = ctx.free_inputs(graph)
        if not free:
            fixed[param_name] = graph
        elif param_name == "sigma" and family in SCALE_FAMILIES:
            scale_graph = graph
        else:
            raise UnsupportedLikelihood(
                f"Parameter {param_name!r} of the {_family_label(family)} likelihood of {name!r} "
                f"depends on the free variable(s) {[v.name for v in free]}. TunaMH/FlyMC bounds "
                f"need {param_name} fixed during sampling: make it a constant or pm.Data, or "
                "sample this model with MinibatchBarker / Austere. " + _BOUNDS_HINT
            )
    params = {}
    if fixed:
        values = ctx.compile(list(fixed.values()))(ctx.q0)
        for param_name, value in zip(fixed, values, strict=True):
            params[param_name] = _as_param(value, param_name, name, n_data)
    scale_row, scale_offset = None, 0.0
    if scale_graph is not None:
        scale_row, scale_offset = _recognise_log_scale(ctx, family, scale_graph)

    parts = _decompose(ctx, eta, (), f"The linear predictor of {name!r}")
    design = parts.residual_jac
    for product in parts.products:
        if not np.all(np.isfinite(product.weight)):
            raise UnsupportedLikelihood(f"The linear predictor of {name!r} is not finite.")
        _add_features_times_map(design, product.features, product.coef_map, product.weight)
    offset = parts.value_q0 - design @ ctx.q0

    def predict(q):
        return design @ q + offset

    what = f"The linear predictor of {name!r}"
    _verify_affine(ctx, parts.full, predict, _columns(ctx, eta), what)
    return LinearPredictorLikelihood(
        family=family,
        design=design,
        offset=offset,
        observed=observed,
        params=params,
        scale_row=scale_row,
        scale_offset=scale_offset,
    )


def _recognise_log_scale(ctx: _Context, family: str, sigma: Variable) -> tuple[np.ndarray, float]:
    """``log sigma = row @ q + offset`` for a free scale shared by every datum."""
    name = ctx.rv.name
    what = f"log(sigma) of the {_family_label(family)} likelihood of {name!r}"
    _refuse_outside_block(ctx, sigma, what)
    scale_fn = ctx.compile([pt.log(sigma)])

    def evaluate(q):
        (value,) = scale_fn(q)
        return np.asarray(value, dtype=np.float64).ravel()

    columns = _columns(ctx, sigma)
    jac, offset = _linearise(evaluate, ctx.q0, columns)
    if offset.size != 1 and not (
        np.allclose(jac, jac[:1], rtol=_affine_rtol(), atol=_affine_rtol())
        and np.allclose(offset, offset[0], rtol=_affine_rtol(), atol=_affine_rtol())
    ):
        raise UnsupportedLikelihood(
            f"sigma of the {_family_label(family)} likelihood of {name!r} depends on free "
            f"variables and differs between data points ({offset.size} values). TunaMH's "
            "bounds cover one free scale shared by all data (e.g. `sigma = "
            "pm.HalfNormal('sigma', 1)`); for per-group scales use MinibatchBarker / Austere. "
            + _BOUNDS_HINT
        )
    row, base = jac[0], float(offset[0])

    def predict(q):
        return np.full(offset.size, row @ q + base)

    _verify_affine(ctx, evaluate, predict, columns, what.capitalize())
    return row, base


def _family_label(family: str) -> str:
    return {"normal": "Normal", "student_t": "StudentT"}.get(family, family)


def _as_param(value: np.ndarray, param_name: str, rv_name: str, n_data: int):
    if value.size == 1:
        value = float(value.reshape(()))
    else:
        try:
            value = np.broadcast_to(value, (n_data,)).copy()
        except ValueError:
            raise UnsupportedLikelihood(
                f"Parameter {param_name!r} of {rv_name!r} has shape {value.shape}, which does "
                f"not broadcast to one value per data point ({n_data},)."
            ) from None
    if not np.all(np.isfinite(value)) or not np.all(np.asarray(value) > 0):
        raise UnsupportedLikelihood(
            f"Parameter {param_name!r} of {rv_name!r} must be positive and finite."
        )
    return value


def _refuse_outside_block(ctx: _Context, graph: Variable, what: str) -> None:
    block = set(ctx.value_vars)
    outside = [v for v in ctx.free_inputs(graph) if v not in block]
    if outside:
        raise UnsupportedLikelihood(
            f"{what.capitalize()} depends on free variable(s) {[v.name for v in outside]} that "
            "are not sampled by this step: another step would change them during sampling "
            "while the bounds keep their initial values. Include them in the step's `vars` "
            "(if they enter linearly), fix them as constants or pm.Data, or use MinibatchBarker "
            "/ Austere. " + _BOUNDS_HINT
        )


def _columns(ctx: _Context, graph: Variable) -> list[int]:
    """Indices of ``q`` whose value variable ``graph`` depends on."""
    inputs = set(ctx.free_inputs(graph))
    cols = []
    for var, sl in ctx.slices.items():
        if var in inputs:
            cols.extend(range(sl.start, sl.stop))
    return cols


def _linearise(fn, q0: np.ndarray, columns: list[int]):
    """Unit-step differences of an affine map: ``(jacobian, value at zero)``."""
    base = _finite(np.array(fn(q0), dtype=np.float64), "The coefficient matrix")
    jac = np.zeros((*base.shape, q0.size), dtype=np.float64)
    for k in columns:
        q = q0.copy()
        q[k] += 1.0
        jac[..., k] = fn(q) - base
    offset = base - jac @ q0
    return jac, offset


def _verify_affine(ctx: _Context, evaluate, predict, columns: list[int], what: str) -> None:
    """Check ``evaluate == predict`` at random points; name non-affine variables if not."""
    rng = np.random.default_rng(_CHECK_SEED)
    dim = ctx.q0.size
    points = [ctx.q0 + rng.normal(size=dim), ctx.q0 + 10.0 * rng.normal(size=dim)]
    if all(_affine_ok(evaluate, predict, q) for q in points):
        return
    # Name the culprits: a variable is non-linear on its own if the second difference
    # eta(q + d) + eta(q - d) - 2 eta(q) along its coordinates is not zero.
    offenders = []
    for var, sl in ctx.slices.items():
        if not set(range(sl.start, sl.stop)) & set(columns):
            continue
        for base, scale in ((points[0], 1.0), (points[1], 10.0)):
            step = np.zeros(dim)
            step[sl] = scale * rng.normal(size=sl.stop - sl.start)
            with np.errstate(all="ignore"):
                plus, centre, minus = (evaluate(q) for q in (base + step, base, base - step))
                if not _close(plus, 2.0 * np.asarray(centre) - minus):
                    offenders.append(var)
                    break
    if offenders:
        detail = f"{ctx.describe_vars(offenders)} enter(s) non-linearly."
    else:
        detail = "each variable enters linearly on its own, but they interact (e.g. a product)."
    raise UnsupportedLikelihood(
        f"{what} is not affine in the sampled variables: {detail} TunaMH/FlyMC recognise "
        "eta = X @ beta + intercept with the coefficients as free variables on their own "
        "(unconstrained) scale. Reparameterise, leave the non-linear variables out of the "
        "step, or use MinibatchBarker / Austere. " + _SUPPORTED + " " + _BOUNDS_HINT
    )


def _affine_ok(evaluate, predict, q: np.ndarray) -> bool:
    with np.errstate(all="ignore"):
        return _close(evaluate(q), predict(q))


def _close(actual, expected) -> bool:
    """Equal up to rounding, relative to the magnitude of the values."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if not (np.all(np.isfinite(actual)) and np.all(np.isfinite(expected))):
        return False
    scale = 1.0 + max(np.max(np.abs(actual), initial=0.0), np.max(np.abs(expected), initial=0.0))
    return bool(np.max(np.abs(actual - expected), initial=0.0) <= _affine_rtol() * scale)


# ----------------------------------------------------------------------- categorical


def _recognise_categorical(
    ctx: _Context, logits_rv: Variable, observed: np.ndarray
) -> LinearPredictorLikelihood:
    n_data, name = ctx.n_data, ctx.rv.name
    what = f"The logits of {name!r}"
    (logits,) = ctx.model.replace_rvs_by_values([logits_rv])
    _refuse_outside_block(ctx, logits, f"the logits of {name!r}")
    if logits.ndim not in (1, 2):
        raise UnsupportedLikelihood(
            f"The logits of {name!r} have {logits.ndim} dimensions; expected (N, K) or (K,)."
        )
    n_classes = int(np.shape(ctx.compile([logits])(ctx.q0)[0])[-1])
    if n_classes < 2:
        raise UnsupportedLikelihood(f"Categorical {name!r} has fewer than 2 classes.")
    if not np.all((observed >= 0) & (observed < n_classes)):
        raise UnsupportedLikelihood(
            f"Categorical observations of {name!r} must lie in 0..{n_classes - 1}."
        )
    how = (
        " Write the logits as `X @ W + b` with X an (N, P) data matrix and W (P, K), b (K,) "
        "affine in the sampled variables. " + _SUPPORTED + " " + _BOUNDS_HINT
    )
    # What depends on q outside the products must be an intercept: the same on every row.
    parts = _decompose(
        ctx,
        logits,
        (n_classes,),
        what,
        per_row=False,
        not_row_constant=(
            f"{what} have a term that depends on the sampled variables differently on each "
            "row but is not a product X @ W of a data matrix X (N, P) and a coefficient "
            "matrix W (P, K)." + how
        ),
    )
    blocks, maps, offsets = [], [], []
    for product in parts.products:
        weight = product.weight  # (N, K): d logits / d (X @ W), elementwise
        features, coef_map, coef_offset = product.features, product.coef_map, product.coef_offset
        if _close(weight, np.full_like(weight, weight.flat[0])):
            coef_map, coef_offset = weight.flat[0] * coef_map, weight.flat[0] * coef_offset
        elif _close(weight, np.broadcast_to(weight[:, :1], weight.shape)):
            features = weight[:, :1] * features  # a per-row scale
        elif _close(weight, np.broadcast_to(weight[:1], weight.shape)):
            n_features = features.shape[1]  # a per-class scale of the columns of W
            scale = np.tile(weight[0], n_features)
            coef_map, coef_offset = scale[:, None] * coef_map, scale * coef_offset
        else:
            raise UnsupportedLikelihood(
                f"{what} scale a product X @ W differently for each class and row." + how
            )
        blocks.append(features)
        maps.append(coef_map)
        offsets.append(coef_offset)
    intercept = parts.residual_jac  # (K, D)
    if np.any(intercept != 0) or not blocks:
        blocks.append(np.ones((n_data, 1)))
        maps.append(intercept)
        offsets.append(np.zeros(n_classes))
    design = np.hstack(blocks) if len(blocks) > 1 else blocks[0]
    coef_map = np.vstack(maps)
    coef_offset = np.concatenate(offsets)
    coef0 = (coef_map @ ctx.q0 + coef_offset).reshape(design.shape[1], n_classes)
    result = LinearPredictorLikelihood(
        family="categorical_logit",
        design=design,
        offset=parts.value_q0 - design @ coef0,
        observed=observed.astype(np.int64),
        params={},
        coef_map=coef_map,
        coef_offset=coef_offset,
        n_classes=n_classes,
    )
    _verify_affine(ctx, parts.full, result.linear_predictor, _columns(ctx, logits), what)
    return result


# ------------------------------------------------------- products X @ W and the rest


@dataclass
class _Product:
    """A product ``X @ W(q)`` in the linear predictor.

    ``X`` is an (N, P) data matrix and ``W(q)`` a (P, M) matrix affine in ``q``:
    ``W(q).ravel() = coef_map @ q + coef_offset``. ``weight`` is the derivative of the
    linear predictor with respect to the product output (N, 1) -> (N,) or (N, K),
    taken elementwise (found by setting the output to ones).
    """

    output: Variable
    placeholder: Variable
    features: np.ndarray
    coef_map: np.ndarray
    coef_offset: np.ndarray
    weight: np.ndarray | None = None


@dataclass
class _Decomposition:
    products: list[_Product]
    residual_jac: np.ndarray  # unit-step jacobian (N, ..., D), or one row (..., D)
    value_q0: np.ndarray  # the graph at q0, broadcast to (N, *trailing)
    full: Callable  # q -> graph value, broadcast to (N, *trailing)


def _decompose(
    ctx: _Context,
    graph: Variable,
    trailing: tuple,
    what: str,
    *,
    per_row: bool = True,
    not_row_constant: str = "",
) -> _Decomposition:
    """Split ``graph`` into data products ``X @ W(q)`` and a residual, both linearised.

    The products are linearised through their small coefficient matrices (cost
    O(P * M) per coordinate), so the N-row data matrices are multiplied only once.
    Only the residual (intercepts, per-row terms such as ``b * x[:, 2]``) is
    differenced numerically over all N rows, for the coordinates it depends on.
    With ``per_row=False`` the residual must change identically on every row
    (an intercept), else ``UnsupportedLikelihood(not_row_constant)`` is raised.
    """
    n_data = ctx.n_data
    shape = (n_data, *trailing)
    width = trailing[0] if trailing else 1
    full_fn = ctx.compile([graph])
    value_q0 = _finite(_broadcast(full_fn(ctx.q0)[0], shape, what), what)
    products = _find_products(ctx, graph, width)
    stripped = graph
    if products:
        stripped = rebuild_graph(graph, {p.output: p.placeholder for p in products})
    stripped_fn = ctx.compile([stripped], [p.placeholder for p in products])
    zeros = [np.zeros((n_data, width), dtype=p.placeholder.dtype) for p in products]

    def residual(q):
        return _broadcast(stripped_fn(q, *zeros)[0], shape, what)

    base = _finite(np.array(residual(ctx.q0)), what)
    for j, product in enumerate(products):
        ones = list(zeros)
        ones[j] = np.ones_like(zeros[j])
        product.weight = _broadcast(stripped_fn(ctx.q0, *ones)[0], shape, what) - base
    # Unit-step differences of the residual. Per-row residuals give an (N, D) block;
    # otherwise only one row is kept and every other row must agree with it.
    jac = np.zeros((*(shape if per_row else trailing), ctx.q0.size))
    for k in _columns(ctx, stripped):
        q = ctx.q0.copy()
        q[k] += 1.0
        delta = residual(q) - base
        if per_row:
            jac[..., k] = delta
        elif _close(delta, np.broadcast_to(delta[0], delta.shape)):
            jac[..., k] = delta[0]
        else:
            raise UnsupportedLikelihood(not_row_constant)
    return _Decomposition(
        products=products,
        residual_jac=jac,
        value_q0=value_q0,
        full=lambda q: _broadcast(full_fn(q)[0], shape, what),
    )


def _find_products(ctx: _Context, graph: Variable, width: int) -> list[_Product]:
    """Products ``X @ W`` in ``graph`` with X (N, P) free of q and W (P, width) in q."""
    block = set(ctx.value_vars)
    candidates = []
    for node in toposort([graph]):
        op = node.op
        is_dot = isinstance(op, Dot) or (
            isinstance(op, Blockwise) and isinstance(getattr(op, "core_op", None), Dot)
        )
        if not is_dot or len(node.inputs) != 2:
            continue
        x_var, w_var = node.inputs
        if x_var.ndim != 2 or w_var.ndim != 2:
            continue
        if ctx.free_inputs(x_var) or not set(ctx.free_inputs(w_var)) & block:
            continue
        candidates.append((node.outputs[0], x_var, w_var))
    if not candidates:
        return []
    x_values = compile_function([], [x for _, x, _ in candidates], mode=_MODE)()
    record_rows(ctx.n_data, ctx.n_data)  # the features are read (and copied) once
    w_fn = ctx.compile([w for _, _, w in candidates])
    w_values = w_fn(ctx.q0)
    products = []
    for j, (out, _, w_var) in enumerate(candidates):
        x_value = np.array(x_values[j], dtype=np.float64)  # a copy: pm.set_data cannot alter it
        if x_value.shape[0] != ctx.n_data or w_values[j].shape != (x_value.shape[1], width):
            continue  # not per-datum features times a (P, width) matrix: stays in the residual

        def w_flat(q, j=j):
            return w_fn(q)[j].ravel()

        coef_map, coef_offset = _linearise(w_flat, ctx.q0, _columns(ctx, w_var))
        placeholder = pt.tensor(dtype=out.dtype, shape=(ctx.n_data, width))
        products.append(_Product(out, placeholder, x_value, coef_map, coef_offset))
    return products


def _add_features_times_map(
    design: np.ndarray, features: np.ndarray, coef_map: np.ndarray, weight: np.ndarray
) -> None:
    """``design += weight[:, None] * (features @ coef_map)``, in O(N * D) when possible.

    Coefficient maps usually pick one coordinate per coefficient (``W`` is a value
    variable, possibly scaled or with fixed entries); then each column of the design
    is one feature column. Otherwise a dense product is formed for the columns used.
    """
    used = np.flatnonzero(np.any(coef_map != 0, axis=0))
    sub = coef_map[:, used]
    row_weight = weight.reshape(-1)
    if np.all(np.count_nonzero(sub, axis=0) == 1):
        rows = np.argmax(sub != 0, axis=0)
        for pos, (col, row) in enumerate(zip(used, rows, strict=True)):
            design[:, col] += (sub[row, pos] * row_weight) * features[:, row]
    else:
        design[:, used] += row_weight[:, None] * (features @ sub)


def _broadcast(value: np.ndarray, shape: tuple, what: str) -> np.ndarray:
    try:
        return np.broadcast_to(value, shape)
    except ValueError:
        raise UnsupportedLikelihood(
            f"{what} has shape {np.shape(value)}; expected one value per data point, shape {shape}."
        ) from None


def _finite(value: np.ndarray, what: str) -> np.ndarray:
    if not np.all(np.isfinite(value)):
        raise UnsupportedLikelihood(
            f"{what} is not finite at the initial point; check the data for NaN/inf and the "
            "initial values."
        )
    return value


# ----------------------------------------------------------------------- self-check


def _self_check(
    result: LinearPredictorLikelihood,
    check: Callable[[np.ndarray, np.ndarray], np.ndarray],
    q0: np.ndarray,
    name: str,
) -> None:
    """Compare the numpy log-likelihood with the model's on probe rows and two points."""
    rows = probe_indices(result.n_data)
    rng = np.random.default_rng(_CHECK_SEED + 1)
    for q in (q0, q0 + 0.5 * rng.normal(size=q0.size)):
        ours = result.loglik(q, rows)
        theirs = np.asarray(check(q, rows), dtype=np.float64)
        if theirs.shape != ours.shape or not np.allclose(
            ours, theirs, rtol=_check_rtol(), atol=_check_rtol()
        ):
            diff = np.max(np.abs(ours - theirs)) if theirs.shape == ours.shape else np.nan
            raise UnsupportedLikelihood(
                f"The log-likelihood of {name!r} rebuilt from the recognised "
                f"{result.family} linear predictor does not match the model's (max abs "
                f"difference {diff:.3g} on probe rows). The model's likelihood has terms or "
                "axes the recogniser does not see. " + _SUPPORTED + " " + _BOUNDS_HINT
            )
