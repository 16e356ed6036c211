"""Taylor control variates: the exactly-summed proxy and the target that subsamples residuals.

With a second-order Taylor proxy ``p_i`` of each per-datum log-likelihood around a
reference point ``q*``, the full-data log-likelihood ratio splits as

    sum_i [l_i(q') - l_i(q)] = sum_i [p_i(q') - p_i(q)] + sum_i r_i(q', q),

where the first sum is known exactly from ``G = sum_i grad l_i(q*)`` and
``H = sum_i hess l_i(q*)`` in ``O(D^2)``, and only the residuals ``r_i`` are estimated
from a minibatch: ``(N / b) sum_{j in batch} r_j``. Near ``q*`` the residuals are of
third order in the distance, so their variance is orders of magnitude below that of
the raw per-datum ratios at the posterior scale of tall data.

References
----------
.. [1] Bardenet, R., Doucet, A., Holmes, C. "On Markov chain Monte Carlo methods for
   tall data", JMLR 18, 2017.
.. [2] Quiroz, M., Kohn, R., Villani, M., Tran, M.-N. "Speeding up MCMC by efficient
   data subsampling", JASA 114, 2019.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np
from scipy import sparse

from pymc_minibatch_mh.data import blocks as data_blocks
from pymc_minibatch_mh.data.chunk_pass import all_rows
from pymc_minibatch_mh.kernels.target import TallTarget, per_row_in_blocks

#: A proxy Hessian of at least this many rows with at most this share of non-zeros is
#: multiplied in sparse form.
SPARSE_MIN_SIZE = 200
SPARSE_SHARE = 0.05


@dataclass(frozen=True)
class TaylorProxy:
    """Full-data sums of a second-order Taylor expansion of the log-likelihood.

    Attributes
    ----------
    reference : ndarray, shape (D,)
        Expansion point ``q*``.
    value : float
        ``sum_i l_i(q*)``.
    gradient : ndarray, shape (D,)
        ``G = sum_i grad l_i(q*)``.
    hessian : ndarray, shape (D, D)
        ``H = sum_i hess l_i(q*)`` (symmetric).
    """

    reference: np.ndarray
    value: float
    gradient: np.ndarray
    hessian: np.ndarray

    def diff(self, q_new: np.ndarray, q_old: np.ndarray) -> float:
        """``sum_i [p_i(q_new) - p_i(q_old)] = G.d + d^T H s / 2`` with ``d = q_new - q_old``
        and ``s = q_new + q_old - 2 q*``; ``O(D^2)`` (the Hessian's non-zeros when sparse)."""
        d = q_new - q_old
        s = q_new + q_old - 2.0 * self.reference
        return float(self.gradient @ d + 0.5 * (d @ self.hessian_dot(s)))

    def total(self, q: np.ndarray) -> float:
        """``sum_i p_i(q)``: the proxy of the full-data log-likelihood at ``q``."""
        a = q - self.reference
        return float(self.value + self.gradient @ a + 0.5 * (a @ self.hessian_dot(a)))

    def hessian_dot(self, v: np.ndarray) -> np.ndarray:
        """``H v``, through a sparse copy of ``H`` when most of it is zero (a multilevel
        model: effects of different groups never meet in a row)."""
        compressed = self._sparse_hessian
        return self.hessian @ v if compressed is None else compressed @ v

    @cached_property
    def _sparse_hessian(self):
        """``H`` in CSR form when at most :data:`SPARSE_SHARE` of it is non-zero and it is
        large enough for that to pay, else None."""
        hessian = np.asarray(self.hessian)
        if hessian.ndim != 2 or hessian.shape[0] < SPARSE_MIN_SIZE:
            return None
        if np.count_nonzero(hessian) > SPARSE_SHARE * hessian.size:
            return None
        return sparse.csr_array(hessian)


@dataclass(frozen=True)
class ImageTaylorProxy(TaylorProxy):
    """A Taylor proxy expanded in the likelihood's image ``phi = phi(q)``, seen in ``q``.

    The inherited fields are the value, gradient and Hessian in ``q`` at ``reference``
    (obtained from ``image`` by the chain rule): they describe the log-likelihood there
    (Laplace fit, bounds). The control variates use ``image``: the proxy in ``phi``,
    which stays accurate where ``phi(q)`` is non-linear.

    Attributes
    ----------
    image : TaylorProxy
        Full-data Taylor sums in ``phi`` at ``phi(reference)``.
    """

    image: TaylorProxy | None = None


class _BaseTargetPassThrough:
    """``n_data``, ``loglik``, ``loglik_full`` and ``logprior`` of the wrapped ``base``
    target; subclasses define only how the ratio splits (``loglik_diff``, ``diff_offset``)."""

    base: TallTarget

    @property
    def n_data(self) -> int:
        return self.base.n_data

    def loglik(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return self.base.loglik(q, idx)

    def loglik_full(self, q: np.ndarray) -> np.ndarray:
        return self.base.loglik_full(q)

    def logprior(self, q: np.ndarray) -> float:
        return self.base.logprior(q)


@dataclass(frozen=True)
class ControlVariateTarget(_BaseTargetPassThrough):
    """A :class:`~pymc_minibatch_mh.kernels.target.TallTarget` whose ratio terms are residuals.

    ``loglik_diff(q', q, idx)`` returns the residuals ``r_i(q', q)`` of the Taylor proxy
    and ``diff_offset(q', q)`` the exactly-summed proxy difference, so every kernel's
    estimate ``diff_offset + (N / b) sum_batch loglik_diff`` stays unbiased for the full
    log-likelihood ratio. ``loglik``, ``loglik_full`` and ``logprior`` are those of
    ``base``.

    Attributes
    ----------
    base : TallTarget
        The plain target (per-datum log-likelihood and prior).
    proxy : TaylorProxy
        Full-data Taylor sums at the reference point.
    residual_diff : callable
        ``residual_diff(x_new, x_old, x_ref, idx) -> (len(idx),)`` residual differences
        computed with the same per-datum proxy as ``proxy``.
    coordinates : callable, optional
        ``coordinates(q) -> x``: the space of the proxy (the likelihood's image, see
        :class:`ImageTaylorProxy`); ``None`` means ``q`` itself. The unbiasedness does
        not depend on it: any fixed proxy cancels between its exact sum and the residuals.
    """

    base: TallTarget
    proxy: TaylorProxy
    residual_diff: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    coordinates: Callable[[np.ndarray], np.ndarray] | None = None
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def _x(self, q: np.ndarray) -> np.ndarray:
        """``coordinates(q)``, remembered for the two points of the current move."""
        if self.coordinates is None:
            return q
        key = q.tobytes()
        x = self._memo.get(key)
        if x is None:
            if len(self._memo) >= 4:
                self._memo.clear()
            x = self._memo[key] = self.coordinates(q)
        return x

    def loglik_diff(self, q_new: np.ndarray, q_old: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return per_row_in_blocks(
            self.residual_diff, self._x(q_new), self._x(q_old), self.proxy.reference, idx=idx
        )

    def loglik_diff_full(self, q_new: np.ndarray, q_old: np.ndarray) -> np.ndarray:
        """:meth:`loglik_diff` of every row, in one pass (Dask tasks when the residual
        function reads chunked data)."""
        leading = (self._x(q_new), self._x(q_old), self.proxy.reference)
        n_data = self.base.n_data
        return all_rows(self.residual_diff, leading, n_data, block_rows=data_blocks.BLOCK_ROWS)

    def diff_offset(self, q_new: np.ndarray, q_old: np.ndarray) -> float:
        return self.proxy.diff(self._x(q_new), self._x(q_old))


class ExactLogLikelihoodSum(Protocol):
    """The full-data log-likelihood in closed form (e.g. from sufficient statistics)."""

    def log_bound_sum(self, q: np.ndarray) -> float: ...

    def log_bound_sum_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]: ...


@dataclass(frozen=True)
class ExactSumTarget(_BaseTargetPassThrough):
    """A :class:`~pymc_minibatch_mh.kernels.target.TallTarget` whose whole log-likelihood
    ratio is known exactly, so no datum needs to be read.

    It is the limit of the control variates when the proxy is the log-likelihood itself
    (e.g. a Normal likelihood summed from its sufficient statistics,
    :mod:`pymc_minibatch_mh.bounds.normal_exact`): ``diff_offset(q', q)`` is the full-data
    ratio and every residual ``loglik_diff`` is 0. Kernels that see ``exact_sum`` skip
    their minibatches; any that read one get zeros, which leave their estimates exact.

    Attributes
    ----------
    base : TallTarget
        The plain target (per-datum log-likelihood and prior).
    likelihood : ExactLogLikelihoodSum
        ``likelihood.log_bound_sum(q)`` is ``sum_i l_i(q)`` over all N rows.
    """

    base: TallTarget
    likelihood: ExactLogLikelihoodSum
    #: Kernels may skip the data: the offset is the whole log-likelihood ratio.
    exact_sum: bool = True

    def loglik_diff(self, q_new: np.ndarray, q_old: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return np.zeros(len(idx))

    def diff_offset(self, q_new: np.ndarray, q_old: np.ndarray) -> float:
        return self.likelihood.log_bound_sum(q_new) - self.likelihood.log_bound_sum(q_old)
