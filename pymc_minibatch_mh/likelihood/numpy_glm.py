"""The functions of a step evaluated with numpy for recognised GLMs: nothing compiled.

A first construction on PyTensor's C backend spends 14-20 s in ``gcc`` building the
per-row log-likelihood, its derivative sums, the residuals of the control variates, the
prior and the surrogate density (measured on logistic, Poisson and Normal regressions
with N = 20,000, D = 10; on numba 1-1.4 s). For the commonest likelihoods all of them
have closed forms in the linear predictor ``eta = X q + o`` (and a shared log scale
``s = a . q + s0``):

==================  ==========================  ===========================
family              ``dl/deta``                 ``d2l/deta2``
==================  ==========================  ===========================
Bernoulli (logit)   ``y - sigmoid(eta)``        ``-sigmoid(eta) sigmoid(-eta)``
Poisson (log)       ``y - exp(eta)``            ``-exp(eta)``
Normal              ``r exp(-2 s)``             ``-exp(-2 s)``
==================  ==========================  ===========================

with ``r = y - eta``; for the Normal also ``dl/ds = r^2 exp(-2 s) - 1``,
``d2l/deta ds = -2 r exp(-2 s)`` and ``d2l/ds2 = -2 r^2 exp(-2 s)``. Sums over rows are
``X^T`` products of these. :func:`recognise_numpy_glm` returns them when the model is
one of these families (read and checked by
:func:`~pymc_minibatch_mh.likelihood.linear_predictor.recognise_linear_predictor`), its
data are arrays in memory, and the block is the whole model with at most
:data:`MAX_DIM` coordinates; None otherwise (PyTensor functions are compiled as before).
The prior is :mod:`~pymc_minibatch_mh.likelihood.numpy_prior`'s where it reads it
(nothing compiled), else PyMC's in one compiled function of value and gradient
(:mod:`~pymc_minibatch_mh.likelihood.compiled_prior`: hierarchies, other distributions,
potentials). What it returns was compared with PyMC's graphs of the same model
(likelihood on probe rows through the minibatch graph, a numpy prior and its gradient at
four points), each compiled with PyTensor's Python linker, which compiles in
milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.tensor.random.basic import BernoulliRV, NormalRV, PoissonRV
from scipy.special import expit

from pymc_minibatch_mh.data.chunked_data import ChunkedRows
from pymc_minibatch_mh.data.row_design import RowDesign
from pymc_minibatch_mh.families.registry import family_record
from pymc_minibatch_mh.kernels.compiled_residuals import SUMS_MAX_FEATURES, compiled_residuals
from pymc_minibatch_mh.likelihood.affine_maps import _MODE
from pymc_minibatch_mh.likelihood.compiled_prior import CompiledPrior, compile_prior
from pymc_minibatch_mh.likelihood.compiling import compile_function
from pymc_minibatch_mh.likelihood.glm_likelihoods import (
    LinearPredictorLikelihood,
    UnsupportedLikelihood,
    family_loglik,
)
from pymc_minibatch_mh.likelihood.graph_tools import ancestors
from pymc_minibatch_mh.likelihood.linear_predictor import recognise_linear_predictor
from pymc_minibatch_mh.likelihood.numpy_prior import (
    IndependentPrior,
    recognise_independent_prior,
)

_enabled = True


def evaluate_with_numpy(enabled: bool) -> None:
    """Switch the numpy evaluation of recognised GLMs on (default) or off (every model's
    functions are compiled, as for any other model); for comparisons and tests."""
    global _enabled
    _enabled = bool(enabled)


def numpy_evaluation_enabled() -> bool:
    """Whether recognised GLMs are evaluated with numpy (see :func:`evaluate_with_numpy`)."""
    return _enabled


#: Largest block evaluated here: the Hessian sums are dense (``O(rows D^2)``); larger
#: blocks (multilevel models with many groups) keep the compiled functions, whose
#: Hessians follow the model's sparsity.
MAX_DIM = 128


@dataclass(frozen=True)
class _Rows:
    """The design rows (dense), indices and observations of a set of rows."""

    design: np.ndarray | None
    idx: np.ndarray
    observed: np.ndarray


@dataclass(frozen=True)
class RowDerivatives:
    """Per-row derivatives of the log-likelihood in ``(eta, s)`` at one point.

    ``d_s``, ``d_es`` and ``d_ss`` are None when the likelihood has no free shared log
    scale ``s``.
    """

    d_e: np.ndarray
    d_ee: np.ndarray
    d_s: np.ndarray | None = None
    d_es: np.ndarray | None = None
    d_ss: np.ndarray | None = None


@dataclass(frozen=True)
class NumpyGLM:
    """Numpy versions of the compiled functions of
    :class:`~pymc_minibatch_mh.likelihood.tall_data.TallData`,
    :func:`~pymc_minibatch_mh.likelihood.taylor.compile_chunk_derivatives`,
    :func:`~pymc_minibatch_mh.likelihood.taylor.compile_prior_derivatives`,
    :func:`~pymc_minibatch_mh.likelihood.taylor.compile_residual_diff` and
    :func:`~pymc_minibatch_mh.likelihood.surrogate.compile_surrogate_density`, with the
    same signatures and results."""

    likelihood: LinearPredictorLikelihood
    prior: IndependentPrior | CompiledPrior

    # -- per-row values -------------------------------------------------------------
    def loglik(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return self.likelihood.loglik(q, idx)

    def loglik_diff(self, q_new: np.ndarray, q_old: np.ndarray, idx: np.ndarray) -> np.ndarray:
        rows, eta = self._predictors(idx, q_new, q_old)
        return self._values(rows, eta[:, 0], q_new) - self._values(rows, eta[:, 1], q_old)

    def loglik_full(self, q: np.ndarray) -> np.ndarray:
        return self.likelihood.loglik(q)

    # -- derivatives ------------------------------------------------------------------
    def _predictors(self, idx: np.ndarray, *points: np.ndarray, design: bool = False) -> tuple:
        """``(rows, eta)``: the rows ``idx`` (their dense design rows only if ``design``)
        and ``eta`` at each point, one column per point, from one product."""
        lik = self.likelihood
        idx = np.asarray(idx)
        stacked = np.stack(points, axis=1)
        if design:
            x = lik.design[idx]
            eta = x @ stacked
        else:
            x = None
            eta = (
                lik.design.dot(stacked, idx)
                if isinstance(lik.design, RowDesign)
                else (lik.design[idx] @ stacked)
            )
        eta = eta + lik.offset[idx][:, None]
        return _Rows(x, idx, np.asarray(lik.observed[idx], dtype=np.float64)), eta

    def _values(self, rows: _Rows, eta: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Per-row log-likelihood at ``q`` from its ``eta``."""
        lik = self.likelihood
        return family_loglik(lik.family, eta, rows.observed, lik.row_params(q, rows.idx))

    def _derivatives(self, rows: _Rows, eta: np.ndarray, q: np.ndarray) -> RowDerivatives:
        """Per-row derivatives in ``(eta, s)`` of ``rows`` at ``q`` (``eta``)."""
        lik = self.likelihood
        y = rows.observed
        if lik.family == "bernoulli_logit":
            p = expit(eta)
            return RowDerivatives(y - p, -p * (1.0 - p))
        if lik.family == "poisson_log":
            mu = np.exp(eta)
            return RowDerivatives(y - mu, -mu)
        residual = y - eta
        if lik.scale_row is None:
            sigma = lik.row_params(q, rows.idx)["sigma"]
            precision = 1.0 / np.asarray(sigma, dtype=np.float64) ** 2
            return RowDerivatives(residual * precision, -precision + 0.0 * eta)
        precision = math.exp(-2.0 * lik.log_scale(q))
        weighted = residual * precision
        return RowDerivatives(
            weighted,
            np.full_like(eta, -precision),
            d_s=residual * weighted - 1.0,
            d_es=-2.0 * weighted,
            d_ss=-2.0 * residual * weighted,
        )

    def chunk_derivatives(self, q: np.ndarray, idx: np.ndarray) -> tuple:
        """``(sum_i l_i, sum_i grad l_i, sum_i hess l_i)`` over the rows ``idx`` (for a
        Bernoulli-logit likelihood of one product design, one compiled loop where numba's
        cache holds it: :meth:`~pymc_minibatch_mh.kernels.compiled_residuals.BernoulliRows.
        taylor_sums`, the same sums up to rounding)."""
        if isinstance(idx, np.ndarray) and idx.dtype.kind in "iu":
            compiled = compiled_residuals(self.likelihood)
            if compiled is not None and compiled.coef_map.shape[0] <= SUMS_MAX_FEATURES:
                return compiled.taylor_sums(q, idx)
        rows, eta = self._predictors(idx, q, design=True)
        d = self._derivatives(rows, eta[:, 0], q)
        value = float(self._values(rows, eta[:, 0], q).sum())
        x = rows.design
        grad = x.T @ d.d_e
        hess = x.T @ (d.d_ee[:, None] * x)
        if d.d_s is not None:
            a = self.likelihood.scale_row
            cross = x.T @ d.d_es
            grad = grad + a * d.d_s.sum()
            hess = hess + np.outer(cross, a) + np.outer(a, cross) + np.outer(a, a) * d.d_ss.sum()
        return value, grad, hess

    def weighted_grad(self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Gradient of ``sum_j weights[j] l_j(q)`` over the rows ``idx``."""
        rows, eta = self._predictors(idx, q, design=True)
        d = self._derivatives(rows, eta[:, 0], q)
        grad = rows.design.T @ (weights * d.d_e)
        if d.d_s is not None:
            grad = grad + self.likelihood.scale_row * float(weights @ d.d_s)
        return grad

    def residual_diff(
        self, q_new: np.ndarray, q_old: np.ndarray, q_ref: np.ndarray, idx: np.ndarray
    ) -> np.ndarray:
        """Per row, ``[l_i(q_new) - l_i(q_old)]`` minus the same difference of the second-
        order Taylor expansion of ``l_i`` around ``q_ref`` (in ``(eta, s)``, where the
        expansion is the one in ``q``: both are affine in ``q``). For a Bernoulli-logit
        likelihood of one product design, one compiled loop where numba's cache holds it
        (:mod:`~pymc_minibatch_mh.kernels.compiled_residuals`, the same values up to
        rounding)."""
        if isinstance(idx, np.ndarray) and idx.dtype.kind in "iu":
            compiled = compiled_residuals(self.likelihood)
            if compiled is not None:
                return compiled.residuals(q_new, q_old, q_ref, idx)
        rows, eta = self._predictors(idx, q_new, q_old, q_ref)
        eta_new, eta_old, eta_ref = eta[:, 0], eta[:, 1], eta[:, 2]
        d = self._derivatives(rows, eta_ref, q_ref)
        de, se = eta_new - eta_old, eta_new + eta_old - 2.0 * eta_ref
        proxy = d.d_e * de + 0.5 * d.d_ee * de * se
        if d.d_s is not None:
            a = self.likelihood.scale_row
            ds, ss = float(a @ (q_new - q_old)), float(a @ (q_new + q_old - 2.0 * q_ref))
            proxy = proxy + d.d_s * ds + 0.5 * (d.d_es * (de * ss + ds * se) + d.d_ss * ds * ss)
        ratio = self._values(rows, eta_new, q_new) - self._values(rows, eta_old, q_old)
        return ratio - proxy

    # -- data-free functions -----------------------------------------------------------
    def gaussian_prior(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(mean, diagonal of the precision)`` when the prior is Normal in every
        coordinate (see :meth:`IndependentPrior.gaussian`), else None."""
        return self.prior.gaussian() if isinstance(self.prior, IndependentPrior) else None

    def logprior(self, q: np.ndarray) -> float:
        return self.prior.value(q)

    def prior_grad(self, q: np.ndarray) -> np.ndarray:
        return self.prior.grad(q)

    def prior_derivatives(self, q: np.ndarray) -> tuple:
        return self.prior.value_grad_hessian(q)

    def prior_and_grad(self, q: np.ndarray) -> list:
        """``[log p(q), grad]``: the surrogate without a proxy."""
        return list(self.prior.value_and_grad(q))

    def surrogate(self, q: np.ndarray, g: np.ndarray, h: np.ndarray, x_ref: np.ndarray) -> list:
        """``[s(q), grad s(q)]`` for ``s(q) = log p(q) + g . (q - x_ref) + (q - x_ref)^T H
        (q - x_ref) / 2`` (``H`` symmetric)."""
        value, grad = self.prior.value_and_grad(q)
        offset = q - x_ref
        h_offset = h @ offset
        return [value + float(g @ offset) + 0.5 * float(offset @ h_offset), grad + g + h_offset]


def recognise_numpy_glm(
    model: pm.Model,
    value_vars: Sequence[Variable],
    *,
    shared: dict,
    initial_point: dict,
    q: Variable,
    idx: Variable,
    batch: Variable,
    prior: Variable,
) -> NumpyGLM | None:
    """The model's functions in numpy (:class:`NumpyGLM`), or None.

    ``q``, ``idx``, ``batch`` and ``prior`` are the graphs
    :func:`~pymc_minibatch_mh.likelihood.tall_data.build_tall_data` would compile: the
    recognised likelihood is checked on probe rows against ``batch`` (so a graph that
    reads a statistic of the rows, which a minibatch cannot subsample, is not
    recognised and the compiled path refuses it), the numpy prior against ``prior`` and
    its gradient, both compiled with the Python linker.
    """
    observed = list(model.observed_RVs)
    if q.dtype != "float64" or len(observed) != 1:
        return None
    if not isinstance(observed[0].owner.op, BernoulliRV | PoissonRV | NormalRV):
        return None
    ndim = sum(int(np.asarray(initial_point[v.name]).size) for v in value_vars)
    if ndim > MAX_DIM:
        return None
    if any(v.owner is not None and isinstance(v.owner.op, ChunkedRows) for v in ancestors([batch])):
        return None  # rows read from zarr / Dask: the compiled functions run as Dask tasks
    if {v.name for v in value_vars} != {v.name for v in model.value_vars}:
        return None  # the numpy likelihood reads every free variable from the block
    independent = recognise_independent_prior(
        model,
        value_vars,
        initial_point,
        lambda: compile_function([q], [prior, pt.grad(prior, q)], mode=_MODE),
    )
    batch_fn = compile_function([q, idx], batch, mode=_MODE, on_unused_input="ignore")
    try:
        likelihood = recognise_linear_predictor(
            model,
            value_vars,
            shared=shared,
            initial_point=initial_point,
            check_against=lambda point, rows: batch_fn(point, np.asarray(rows, dtype=np.int64)),
        )
    except UnsupportedLikelihood:
        return None  # not one of these families: the compiled functions serve
    if not _evaluated_here(likelihood, ndim):
        return None
    if independent is None:  # a hierarchy, other distributions, potentials: PyMC's prior
        shapes = tuple(np.shape(initial_point[v.name]) for v in value_vars)
        return NumpyGLM(likelihood, compile_prior(q, prior, ndim, shapes=shapes))
    return NumpyGLM(likelihood, independent) if independent.ndim == ndim else None


def _evaluated_here(likelihood, ndim: int) -> bool:
    """Whether this module evaluates ``likelihood`` (see the module's docstring)."""
    if not isinstance(likelihood, LinearPredictorLikelihood):
        return False
    if not family_record(likelihood.family).numpy_rows or ndim > MAX_DIM:
        return False
    if likelihood.row_scales or likelihood.free_odds or likelihood.cut_rows is not None:
        return False
    return likelihood.family == "normal" or likelihood.scale_row is None
