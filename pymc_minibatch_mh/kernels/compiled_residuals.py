"""The control variates' residuals of a Bernoulli-logit GLM held in memory, compiled.

MinibatchBarker, Austere and TunaMH test a move on the residuals
``r_i = [l_i(q') - l_i(q)] - [p_i(q') - p_i(q)]`` of a batch of rows, where ``p_i`` is the
row's second-order Taylor expansion at the reference point
(:meth:`~pymc_minibatch_mh.likelihood.numpy_glm.NumpyGLM.residual_diff`). For a batch of
a hundred rows the numpy version is some twenty operations on small arrays (the rows'
linear predictors at three points, the derivatives at the reference, two log-likelihoods)
and costs about 35 µs, most of it call overhead; here it is one compiled loop
(:func:`~pymc_minibatch_mh.kernels.logit_numba.bernoulli_residuals`), the same formulas,
so the same values up to rounding. It is used once numba's disk cache holds it
(:mod:`~pymc_minibatch_mh.kernels.compiled_cache`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from pymc_minibatch_mh.kernels import compiled_cache, split_kicks
from pymc_minibatch_mh.kernels.product_design import fixed, product_design

#: Compute the residuals compiled where :func:`compiled_residuals` allows it (False: numpy
#: only, in this process).
ENABLED = True
#: Most features for which the compiled Taylor sums replace numpy's: the loop does P^2 / 2
#: multiply-adds per row on one core, where numpy's ``X' diag(h) X`` runs on every core.
SUMS_MAX_FEATURES = 32


@dataclass(frozen=True, eq=False)
class BernoulliRows:
    """Every row of a Bernoulli-logit GLM: ``eta_n = weight (features_n . (coef_map q)) +
    constant_row . q + offset_n`` and the outcomes ``observed`` (0 or 1, as float64)."""

    features: np.ndarray
    coef_map: np.ndarray
    weight: float
    constant_row: np.ndarray
    offset: np.ndarray
    observed: np.ndarray

    def residuals(self, q_new, q_old, q_ref, idx: np.ndarray) -> np.ndarray:
        """The residuals of the rows ``idx`` (an integer array)."""
        out = np.empty(idx.size)
        split_kicks.compiled_loops().bernoulli_residuals(
            *_residual_args(self, np.ascontiguousarray(idx, dtype=np.int64), q_new, q_old,
                            q_ref, out)
        )  # fmt: skip
        return out

    def taylor_sums(self, q: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``(sum_n l_n, sum_n grad l_n, sum_n hess l_n)`` over the rows ``idx`` at ``q``,
        as :meth:`~pymc_minibatch_mh.likelihood.numpy_glm.NumpyGLM.chunk_derivatives`.

        The loop sums the derivatives in ``eta`` against the features (``F' d``, ``F' h``,
        ``F' diag(h) F``); since ``d eta_n / d q = weight M' F_n + c`` (coefficient map
        ``M``, constant row ``c``), the sums in ``q`` follow in O(P^2 D + P D^2).
        """
        n_feat = self.coef_map.shape[0]
        g_feat, h_feat = np.zeros(n_feat), np.zeros(n_feat)
        h_gram = np.zeros((n_feat, n_feat))
        q = np.ascontiguousarray(q, dtype=np.float64)
        total, d_sum, h_sum = split_kicks.compiled_loops().bernoulli_taylor_sums(
            np.ascontiguousarray(idx, dtype=np.int64), self.features, self.coef_map,
            self.weight, self.constant_row, self.offset, self.observed, q, g_feat, h_feat,
            h_gram,
        )  # fmt: skip
        h_gram = 0.5 * (h_gram + h_gram.T)
        m, c, a = self.coef_map, self.constant_row, self.weight
        grad = a * (m.T @ g_feat) + d_sum * c
        cross = a * (m.T @ h_feat)
        hess = a * a * (m.T @ h_gram @ m) + np.outer(cross, c) + np.outer(c, cross)
        return float(total), grad, hess + h_sum * np.outer(c, c)


_BUILT: dict = {}


def compiled_residuals(likelihood) -> BernoulliRows | None:
    """The rows of a :class:`~pymc_minibatch_mh.likelihood.glm_likelihoods.
    LinearPredictorLikelihood` for the compiled residuals, built once per likelihood in each
    process, or None where they do not apply (another family, a free scale, a design of
    another form, :data:`ENABLED` off) or are not compiled yet."""
    if not ENABLED or likelihood.family != "bernoulli_logit":
        return None
    key = id(likelihood)
    built = _BUILT.get(key)
    if built is not None and built[0]() is likelihood:
        return built[1]
    rows = _build(likelihood)
    _BUILT[key] = (weakref.ref(likelihood, lambda _, key=key: _BUILT.pop(key, None)), rows)
    return rows


def _build(likelihood) -> BernoulliRows | None:
    if getattr(likelihood, "scale_row", None) is not None or split_kicks.compiled_loops() is None:
        return None
    n_data = int(np.shape(likelihood.observed)[0])
    product = product_design(likelihood.design, n_data)
    if product is None:
        return None
    features, coef_map, weight, constant_row = product
    rows = BernoulliRows(
        features=fixed(features, features.dtype),
        coef_map=fixed(coef_map),
        weight=float(weight),
        constant_row=fixed(constant_row),
        offset=fixed(np.broadcast_to(np.asarray(likelihood.offset, np.float64), (n_data,))),
        observed=fixed(np.asarray(likelihood.observed, dtype=np.float64)),
    )
    from pymc_minibatch_mh.kernels.compiled_split_iteration import loop_types

    ready = compiled_cache.ready(loop_types(0, rows.features, rows.coef_map, n_data))
    return rows if ready else None


def _residual_args(rows: BernoulliRows, idx, q_new, q_old, q_ref, out) -> tuple:
    points = (np.ascontiguousarray(q, dtype=np.float64) for q in (q_new, q_old, q_ref))
    return (
        idx, rows.features, rows.coef_map, rows.weight, rows.constant_row, rows.offset,
        rows.observed, *points, out,
    )  # fmt: skip


def example_calls(types: tuple) -> list:
    """``(loop, arguments)`` of the residual loop for these types (none but for the
    Bernoulli family, code 0; see :mod:`~pymc_minibatch_mh.kernels.compiled_cache`)."""
    family, dtype, n_feat, dim, _ = types
    if family != 0:
        return []
    column = fixed(np.zeros(4))
    rows = BernoulliRows(
        features=fixed(np.zeros((4, n_feat), dtype=dtype), dtype),
        coef_map=fixed(np.eye(n_feat, dim)),
        weight=1.0,
        constant_row=fixed(np.zeros(dim)),
        offset=column,
        observed=column,
    )
    q = np.zeros(dim)
    args = _residual_args(rows, np.arange(2, dtype=np.int64), q, q, q, np.empty(2))
    sums = (
        np.arange(2, dtype=np.int64), rows.features, rows.coef_map, rows.weight,
        rows.constant_row, rows.offset, rows.observed, q, np.zeros(n_feat), np.zeros(n_feat),
        np.zeros((n_feat, n_feat)),
    )  # fmt: skip
    loops = split_kicks.compiled_loops()
    return [(loops.bernoulli_residuals, args), (loops.bernoulli_taylor_sums, sums)]
