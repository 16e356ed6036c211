"""FlyMC's rows of a GLM with a quadratic bound, evaluated from one linear predictor.

A FlyMC ``q | z`` update reads the bright rows at every proposal (every leapfrog step
with HMC): the log-likelihood, the log-bound and, for gradient moves, both gradients.
Asked separately, the target and the bound each form the rows' design and their linear
predictor ``eta = X q + o`` again; for the few bright rows of a tuned bound that
bookkeeping, not the arithmetic, is the cost. Here the rows are gathered once per set,
``eta`` is formed once per point, and the gradients are one product ``X^T v`` with

    v_n = w_n (d log L_n / d eta - d log B_n / d eta),

for the families whose bound (:class:`~pymc_minibatch_mh.bounds.collapsed.LinearQuadraticBound`)
and likelihood read ``q`` only through ``eta``. The values are the target's and the
bound's (same formulas, :func:`~pymc_minibatch_mh.likelihood.glm_likelihoods.family_loglik`
and the bound's quadratic), so the chain is the same up to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from pymc_minibatch_mh.bounds.collapsed import LinearQuadraticBound
from pymc_minibatch_mh.data.row_design import RowDesign
from pymc_minibatch_mh.families.registry import family_record
from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood, family_loglik


def eta_slope(family: str, eta: np.ndarray, y: np.ndarray, params: dict) -> np.ndarray:
    """``d log L_n / d eta_n`` of a family whose record has ``eta_slope`` (fixed parameters)."""
    if family == "bernoulli_logit":
        return y - expit(eta)
    if family == "binomial_logit":
        return y - params["n"] * expit(eta)
    if family == "poisson_log":
        return y - np.exp(eta)
    if family == "student_t":
        nu, sigma = params["nu"], params["sigma"]
        residual = y - eta
        return (nu + 1.0) * residual / (nu * sigma * sigma + residual * residual)
    raise ValueError(f"no slope in eta for the family {family!r}")


@dataclass(eq=False)
class GLMBrightRows:
    """The rows ``idx`` of a GLM likelihood and its quadratic bound, as FlyMC's kernel
    reads them (:class:`~pymc_minibatch_mh.kernels.firefly.BrightRows`).

    Build with :func:`glm_rows_factory`. ``eta`` of the last point is kept, so the
    gradient at the point whose values were just computed costs one product. The rows'
    design is gathered when they are read a second time (the bright rows of a trajectory);
    rows read once (the dark rows proposed to brighten) only form ``eta`` from the source.
    """

    idx: np.ndarray
    family: str
    source: object
    offset: np.ndarray
    observed: np.ndarray
    params: dict
    anchor: np.ndarray
    value: np.ndarray
    slope: np.ndarray
    curvature: np.ndarray
    unbounded: np.ndarray | None
    _design: np.ndarray | None = field(default=None, repr=False)
    _last: tuple | None = field(default=None, repr=False)

    @property
    def design(self) -> np.ndarray:
        """The rows of the design, dense float64 (gathered on first use)."""
        if self._design is None:
            self._design = np.asarray(self.source[self.idx], dtype=np.float64)
        return self._design

    def _eta(self, q: np.ndarray) -> np.ndarray:
        last = self._last
        if last is not None and np.array_equal(last[0], q):
            return last[1]
        if self._design is None and isinstance(self.source, RowDesign):
            eta = self.source.dot(q, self.idx)  # no gathered rows (yet)
        else:
            eta = self.design @ q
        eta = eta + self.offset
        self._last = (np.array(q, dtype=np.float64), eta)
        return eta

    def values(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Untempered ``(log L_n(q), log B_n(q))`` of the rows."""
        eta = self._eta(q)
        loglik = family_loglik(self.family, eta, self.observed, self.params)
        e = eta - self.anchor
        logbound = self.value + e * (self.slope + self.curvature * e)
        if self.unbounded is not None:
            logbound = np.where(self.unbounded, -np.inf, logbound)
        return loglik, logbound

    def weighted_grad(self, q: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] (log L_j(q) - log B_j(q))``."""
        return self.design.T @ (weights * self._slope_gap(self._eta(q)))

    def values_and_grad(self, q: np.ndarray, weigh) -> tuple[np.ndarray, np.ndarray]:
        """``weigh``'s first output at ``q`` and the gradient its weights give, from one
        linear predictor: ``weigh(log L, log B) -> (out, weights)``; returns ``(out,
        sum_j weights[j] grad (log L_j - log B_j))``. A leapfrog step of FlyMC's HMC asks
        for both at every point, and a point is never asked twice (no cache)."""
        design = self.design
        eta = design @ q + self.offset
        e = eta - self.anchor
        loglik = family_loglik(self.family, eta, self.observed, self.params)
        logbound = self.value + e * (self.slope + self.curvature * e)
        if self.unbounded is not None:
            logbound = np.where(self.unbounded, -np.inf, logbound)
        out, weights = weigh(loglik, logbound)
        return out, design.T @ (weights * self._slope_gap(eta))

    def _slope_gap(self, eta: np.ndarray) -> np.ndarray:
        """``d (log L_n - log B_n) / d eta_n``. A row without a bound has slope and curvature
        0: its bound adds no gradient."""
        bound_slope = self.slope + 2.0 * self.curvature * (eta - self.anchor)
        return eta_slope(self.family, eta, self.observed, self.params) - bound_slope


@dataclass(frozen=True, eq=False)
class GLMRows:
    """``idx -> GLMBrightRows`` (FlyMC's ``rows`` factory) of a likelihood and its bound;
    build it with :func:`glm_rows_factory`, which checks that they can be read together."""

    likelihood: LinearPredictorLikelihood
    bound: LinearQuadraticBound

    def __call__(self, idx: np.ndarray) -> GLMBrightRows:
        lik, bound = self.likelihood, self.bound
        idx = np.asarray(idx, dtype=np.int64)
        params = {
            name: value if np.ndim(value) == 0 else np.asarray(value)[idx]
            for name, value in lik.params.items()
        }
        return GLMBrightRows(
            idx=idx,
            family=lik.family,
            source=lik.design,
            offset=bound.offset[idx],
            observed=np.asarray(lik.observed[idx], dtype=np.float64),
            params=params,
            anchor=bound.anchor[idx],
            value=bound.value[idx],
            slope=bound.slope[idx],
            curvature=bound.curvature[idx],
            unbounded=None if bound.unbounded is None else bound.unbounded[idx],
        )


def glm_rows_factory(likelihood, bound) -> GLMRows | None:
    """FlyMC's ``rows`` factory for a recognised likelihood and the bound built on its rows,
    or None when they cannot be evaluated together: another family, a free scale, several
    likelihood terms or a bound of another form, or a bound over other rows than the
    likelihood's design and offset."""
    if not (
        isinstance(likelihood, LinearPredictorLikelihood)
        and isinstance(bound, LinearQuadraticBound)
        and family_record(likelihood.family).eta_slope
        and not likelihood.scale_is_free
        and bound.design is likelihood.design
        and np.array_equal(bound.offset, likelihood.offset)
    ):
        return None
    return GLMRows(likelihood, bound)
