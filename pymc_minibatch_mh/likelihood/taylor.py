"""Second-order Taylor control variates of the per-datum log-likelihood.

Around a reference point ``q*`` each per-datum log-likelihood has the proxy

    p_i(q) = l_i(q*) + g_i . (q - q*) + 1/2 (q - q*)^T H_i (q - q*),

whose sum over all N rows only needs the full-data sums ``G = sum_i g_i`` and
``H = sum_i H_i``, computed once here in chunks of rows (memory ``O(chunk D + D^2)``).
For a move ``q -> q'`` the proxy difference of one datum is

    p_i(q') - p_i(q) = g_i . d + 1/2 d^T H_i s,   d = q' - q,   s = q' + q - 2 q*,

which the compiled residual function obtains with two forward-mode (Jacobian-vector)
products of the batch graph at ``q*``: per-datum gradients and Hessians are never
formed, and a batch costs a small constant times a plain log-likelihood evaluation.

References
----------
.. [1] Bardenet, R., Doucet, A., Holmes, C. "On Markov chain Monte Carlo methods for
   tall data", JMLR 18, 2017.
.. [2] Quiroz, M., Kohn, R., Villani, M., Tran, M.-N. "Speeding up MCMC by efficient
   data subsampling", JASA 114, 2019.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytensor
from pytensor.compile.mode import get_mode
from pytensor.graph.replace import clone_replace

from pymc_minibatch_mh.data.chunk_pass import row_pass
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.kernels.control_variates import TaylorProxy
from pymc_minibatch_mh.likelihood.batching import probe_indices
from pymc_minibatch_mh.likelihood.compiled_prior import compile_prior
from pymc_minibatch_mh.likelihood.compiling import compile_function
from pymc_minibatch_mh.likelihood.hessian_colouring import compile_coloured_sum_derivatives
from pymc_minibatch_mh.likelihood.tall_data import TallData, TallGraphs
from pymc_minibatch_mh.progress import progress_bar

try:  # pytensor >= 3
    from pytensor.gradient import pushforward as _pushforward

    def _jvp(f, wrt, tangent):
        return _pushforward(f, wrt, tangent)

except ImportError:  # pytensor 2.x
    from pytensor.gradient import Rop as _rop

    def _jvp(f, wrt, tangent):
        return _rop(f, wrt, tangent, use_op_rop_implementation=False)


DEFAULT_CHUNK_ROWS = 20_000


class NonFiniteTaylor(ValueError):
    """The log-likelihood or its derivatives are not finite at an expansion point.

    Attributes
    ----------
    point : ndarray or None
        That point (raveled), when known.
    """

    def __init__(self, message: str, point: np.ndarray | None = None):
        super().__init__(message)
        self.point = point


def _graphs_of(tall_data: TallData) -> TallGraphs:
    if tall_data.graphs is None:
        raise RuntimeError(
            "This TallData no longer holds its symbolic graphs (it was unpickled); build "
            "the control variates in the process that built the TallData."
        )
    return tall_data.graphs


def check_block_covers_likelihood(tall_data: TallData) -> None:
    """Refuse control variates when the likelihood reads variables outside the block.

    The full-data sums are computed once; if another step method changed a variable
    the likelihood depends on, the per-batch residuals and the stored sums would no
    longer describe the same proxy and the estimator would be biased.
    """
    outside = _graphs_of(tall_data).likelihood_outside_block
    if outside:
        raise ValueError(
            f"control_variates=True needs every free variable of the likelihood in the step's "
            f"block, but {list(outside)} are sampled by other step methods. Add them to "
            f"`vars=` (or leave `vars=None`), or switch control variates off."
        )


def compile_residual_diff(
    tall_data: TallData, *, derivatives: Callable | None = None, reference=None
) -> Callable:
    """Compile ``residual_diff(q_new, q_old, q_ref, idx) -> (len(idx),)``, checked.

    Returns, per datum, ``[l_i(q_new) - l_i(q_old)] - [p_i(q_new) - p_i(q_old)]`` for the
    second-order Taylor proxy ``p_i`` around ``q_ref`` (numpy's, unchecked, for a TallData
    evaluated with numpy). Summed over all N rows and added
    to :meth:`TaylorProxy.diff` it gives the exact full-data log-likelihood ratio.

    The compiled function is checked on a few rows against the proxy difference built
    from ``derivatives`` (reverse-mode gradient and Hessian sums, see
    :func:`compile_chunk_derivatives`). Some PyTensor releases fuse the double
    forward-mode graph of some likelihoods (seen with ``MvNormal`` under an LKJ prior on
    PyTensor 3.3) into kernels that compute wrong values; when the check fails the
    function is compiled again without elementwise fusion and checked again.

    Parameters
    ----------
    tall_data : TallData
        Compiled model functions (with graphs).
    derivatives : callable, optional
        A function from :func:`compile_chunk_derivatives` (compiled if not given).
    reference : ndarray, optional
        Point around which the check runs (default: zeros).

    Raises
    ------
    RuntimeError
        If the residuals are wrong even without fusion (please report the model).
    """
    if tall_data.numpy_glm is not None:
        return tall_data.numpy_glm.residual_diff
    graphs = _graphs_of(tall_data)
    if derivatives is None:
        derivatives = compile_chunk_derivatives(tall_data)
    centre = np.zeros(tall_data.ndim) if reference is None else np.asarray(reference, float)
    rng = np.random.default_rng(7)
    points = [centre + 0.05 * rng.standard_normal(centre.size) for _ in range(3)]
    points[1] += points[0] - centre
    points[2] += points[0] - centre
    return checked_residual_diff(
        graphs.q,
        graphs.batch,
        graphs.idx,
        graphs.compile_kwargs,
        check=ResidualCheck(
            points=tuple(points),
            ratio=tall_data.loglik_diff,
            derivatives=derivatives,
            rows=probe_indices(tall_data.n_data),
        ),
    )


@dataclass(frozen=True)
class ResidualCheck:
    """What :func:`checked_residual_diff` compares the compiled residuals with.

    Attributes
    ----------
    points : tuple of ndarray
        ``(x_ref, x_old, x_new)``: the expansion point and a move near it.
    ratio : callable
        ``ratio(x_new, x_old, rows)``: per-datum log-likelihood differences.
    derivatives : callable
        ``derivatives(x, rows) -> (sum, gradient sum, Hessian sum)`` (reverse mode).
    rows : ndarray
        Row indices of the check.
    """

    points: tuple
    ratio: Callable
    derivatives: Callable
    rows: np.ndarray


def checked_residual_diff(x, batch, idx, compile_kwargs: dict, *, check: ResidualCheck):
    """Compile the residuals of ``batch`` (a per-row graph in the vector ``x``) around an
    expansion point given as an input, check them, and recompile without elementwise
    fusion if the check fails (see :func:`compile_residual_diff`)."""
    for exclude_fusion in (False, True):
        fn = _compile_residual_diff(x, batch, idx, compile_kwargs, exclude_fusion=exclude_fusion)
        if _residuals_agree(fn, check):
            return fn
    raise RuntimeError(
        "The compiled control-variate residuals disagree with the log-likelihood's own "
        "gradient and Hessian on this model, even without elementwise fusion (a PyTensor "
        f"{pytensor.__version__} compilation problem). Pass control_variates=False, and "
        "please report the model."
    )


def _compile_residual_diff(
    x, batch, idx, compile_kwargs: dict, *, exclude_fusion: bool
) -> Callable:
    x_new, x_old, x_ref = x.type("x_new"), x.type("x_old"), x.type("x_ref")
    direction, spread = x.type("direction"), x.type("spread")
    at_ref = clone_replace(batch, replace={x: x_ref})
    first = _jvp(at_ref, x_ref, direction)
    second = _jvp(first, x_ref, spread)
    proxy_diff = clone_replace(
        first + 0.5 * second,
        replace={direction: x_new - x_old, spread: x_new + x_old - 2.0 * x_ref},
    )
    ratio = clone_replace(batch, replace={x: x_new}) - clone_replace(batch, replace={x: x_old})
    compile_kwargs = dict(compile_kwargs)
    if exclude_fusion:
        compile_kwargs["mode"] = get_mode(compile_kwargs.get("mode")).excluding("fusion")
    fn = compile_function([x_new, x_old, x_ref, idx], ratio - proxy_diff, **compile_kwargs)
    fn.trust_input = True
    return fn


def _residuals_agree(residual_diff: Callable, check: ResidualCheck) -> bool:
    """Whether ``ratio - residual`` on the check's rows equals the proxy difference from
    the reverse-mode sums, ``g . d + d^T H s / 2``."""
    x_ref, x_old, x_new = check.points
    _, grad, hess = check.derivatives(x_ref, check.rows)
    d, s = x_new - x_old, x_new + x_old - 2.0 * x_ref
    expected = float(grad @ d + 0.5 * (d @ (hess @ s)))
    ratio = check.ratio(x_new, x_old, check.rows)
    residual = residual_diff(x_new, x_old, x_ref, check.rows)
    if not (np.all(np.isfinite(ratio)) and np.all(np.isfinite(residual))):
        return True  # outside the support here: nothing to compare
    got = float(np.sum(ratio - residual))
    scale = abs(float(grad @ d)) + abs(float(d @ (hess @ s))) + float(np.abs(ratio).sum())
    return abs(got - expected) <= 1e-6 * scale + 1e-9


def compile_chunk_derivatives(tall_data: TallData) -> Callable:
    """Compile ``f(q, idx) -> (sum_i l_i, sum_i grad l_i, sum_i hess l_i)`` over rows ``idx``
    (numpy's for a TallData evaluated with numpy)."""
    if tall_data.numpy_glm is not None:
        return tall_data.numpy_glm.chunk_derivatives
    graphs = _graphs_of(tall_data)
    return compile_sum_derivatives(
        graphs.q,
        graphs.batch,
        graphs.idx,
        graphs.compile_kwargs,
        size=tall_data.ndim,
        n_data=tall_data.n_data,
    )


def compile_sum_derivatives(
    x, batch, idx, compile_kwargs: dict, *, size: int | None = None, n_data: int | None = None
) -> Callable:
    """Compile ``f(x, idx) -> (sum, gradient, Hessian)`` of ``batch.sum()`` in the vector ``x``.

    The Hessian comes from as many Hessian-vector products as its colouring has colours
    (:mod:`~pymc_minibatch_mh.likelihood.hessian_colouring`): one per coordinate in
    general, one per gathered block of group effects in a multilevel model.
    """
    return compile_coloured_sum_derivatives(x, batch, idx, compile_kwargs, size=size, n_data=n_data)


def compile_prior_derivatives(tall_data: TallData) -> Callable:
    """Compile ``f(q) -> (value, gradient, Hessian)`` of the log prior (with Jacobians and
    potentials); data-free (numpy's for a TallData evaluated with numpy). The Hessian is
    from differences of the compiled gradient where they settle
    (:class:`~pymc_minibatch_mh.likelihood.compiled_prior.CompiledPrior`)."""
    if tall_data.numpy_glm is not None:
        return tall_data.numpy_glm.prior_derivatives
    graphs = _graphs_of(tall_data)
    prior = compile_prior(
        graphs.q, graphs.prior, tall_data.ndim, graphs.compile_kwargs, graphs.shapes
    )
    return prior.value_grad_hessian


def full_data_taylor(
    tall_data: TallData,
    reference: np.ndarray,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    derivatives: Callable | None = None,
    progressbar: bool = False,
) -> TaylorProxy:
    """Full-data value, gradient and Hessian sums of the log-likelihood at ``reference``.

    One streaming pass over the data in chunks of ``chunk_rows`` rows: memory
    ``O(chunk_rows * D + D^2)``, time ``O(N)`` likelihood-Hessian work.

    Parameters
    ----------
    tall_data : TallData
        Compiled model functions (with graphs).
    reference : ndarray
        The expansion point ``q*`` (raveled, unconstrained).
    chunk_rows : int
        Rows per chunk.
    derivatives : callable, optional
        A function from :func:`compile_chunk_derivatives` (compiled if not given).
    progressbar : bool
        Show a progress bar over the chunks.
    """
    if derivatives is None:
        derivatives = compile_chunk_derivatives(tall_data)
    return chunked_taylor_sums(
        derivatives, reference, tall_data.n_data, chunk_rows=chunk_rows, progressbar=progressbar
    )


def chunked_taylor_sums(
    derivatives: Callable,
    reference: np.ndarray,
    n_data: int,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    rows: np.ndarray | None = None,
    progressbar: bool = False,
) -> TaylorProxy:
    """Sum ``derivatives(reference, rows)`` over all rows in chunks: one pass.

    When ``derivatives`` reads chunked data (zarr / Dask), the pass over all rows is a
    Dask computation with one task per chunk (:func:`~pymc_minibatch_mh.data.chunk_pass.
    row_pass`).

    With ``rows`` (a subsample of row indices) the sums run over those rows only and are
    scaled by ``n_data / len(rows)``: an unbiased estimate of the full sums at a fraction
    of a pass.

    Raises
    ------
    NonFiniteTaylor
        If a sum is not finite.
    """
    reference = np.asarray(reference, dtype=np.float64)
    value, grad, hess = 0.0, np.zeros(reference.size), np.zeros((reference.size,) * 2)
    n_rows = n_data if rows is None else len(rows)
    # Chunked data: one Dask task per chunk, sums combined.
    on_chunks = None
    if rows is None:
        on_chunks = row_pass(
            derivatives, (reference,), n_data, block_rows=chunk_rows, combine="sum"
        )
    if on_chunks is not None:
        value, grad, hess = float(on_chunks[0]), on_chunks[1], on_chunks[2]
        record_rows(n_data, n_data)
    else:
        starts = range(0, n_rows, chunk_rows)
        for start in progress_bar(starts, "Taylor sums over the data", enabled=progressbar):
            stop = min(start + chunk_rows, n_rows)
            if rows is None:
                idx = np.arange(start, stop, dtype=np.int64)
            else:
                idx = np.asarray(rows[start:stop], dtype=np.int64)
            v, g, h = derivatives(reference, idx)
            record_rows(idx.size, n_data)
            value += float(v)
            grad += g
            hess += h
    hess = 0.5 * (hess + hess.T)
    if rows is not None:
        scale = n_data / n_rows
        value, grad, hess = value * scale, grad * scale, hess * scale
    if not (np.isfinite(value) and np.all(np.isfinite(grad)) and np.all(np.isfinite(hess))):
        raise NonFiniteTaylor(
            "The log-likelihood or its derivatives are not finite at the reference point; "
            "pass a reference_point inside the support of the posterior.",
            point=np.asarray(reference, dtype=np.float64).copy(),
        )
    return TaylorProxy(reference=reference.copy(), value=value, gradient=grad, hessian=hess)
