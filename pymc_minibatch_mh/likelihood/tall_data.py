"""Compiled per-datum log-likelihood, full log-likelihood and log-prior of a PyMC model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.pytensorf import join_nonshared_inputs
from pytensor.graph.basic import Variable
from pytensor.graph.replace import clone_replace

from pymc_minibatch_mh.data import blocks as data_blocks
from pymc_minibatch_mh.data.chunk_pass import all_rows
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.kernels.target import per_row_in_blocks
from pymc_minibatch_mh.likelihood.batching import (
    probe_indices,
)
from pymc_minibatch_mh.likelihood.compiling import compile_function
from pymc_minibatch_mh.likelihood.inspection import (
    check_finite_data,
    check_sampled_block,
    datum_count,
    likelihood_value_vars,
    observed_lengths,
)
from pymc_minibatch_mh.likelihood.numpy_glm import (
    NumpyGLM,
    numpy_evaluation_enabled,
    recognise_numpy_glm,
)
from pymc_minibatch_mh.likelihood.stable_logps import observed_logp_terms
from pymc_minibatch_mh.likelihood.stacked_rows import (
    data_set_graphs,
    stacked_graphs,
    stacked_layout,
)


@dataclass(frozen=True)
class TallGraphs:
    """The symbolic graphs behind a :class:`TallData`, for compiling further functions.

    Attributes
    ----------
    q : TensorVariable
        The raveled value vector of the sampled block.
    idx : TensorVariable
        Integer row indices.
    batch : TensorVariable
        Per-datum log-likelihood of the rows ``idx`` at ``q`` (cost O(len(idx))).
    prior : TensorVariable
        Log prior density (with Jacobians) plus potentials at ``q``.
    likelihood_outside_block : tuple of str
        Value variables outside the sampled block that the likelihood reads (their
        current values are held in shared variables).
    compile_kwargs : dict
        The keyword arguments the TallData functions were compiled with.
    shapes : tuple of tuple of int
        Shapes of the block's value variables, in the order of ``q``.
    """

    q: Variable
    idx: Variable
    batch: Variable
    prior: Variable
    likelihood_outside_block: tuple[str, ...]
    compile_kwargs: dict
    shapes: tuple[tuple[int, ...], ...] = ()


@dataclass
class TallData:
    """A PyMC model seen as prior + i.i.d. per-datum likelihood over a raveled vector ``q``.

    Satisfies :class:`pymc_minibatch_mh.kernels.TallTarget`.

    Attributes
    ----------
    n_data : int
        Number of data points N.
    ndim : int
        Length of the raveled unconstrained parameter vector of the sampled block.
    var_names : tuple of str
        Value variables of the sampled block, in raveling order.
    """

    n_data: int
    ndim: int
    var_names: tuple[str, ...]
    _loglik_fn: object = field(repr=False)
    _loglik_diff_fn: object = field(repr=False)
    _loglik_full_fn: object = field(repr=False)
    _logprior_fn: object = field(repr=False)
    _loglik_weighted_grad_fn: object = field(default=None, repr=False)
    _logprior_grad_fn: object = field(default=None, repr=False)
    graphs: TallGraphs | None = field(default=None, repr=False, compare=False)
    #: The functions in numpy (:mod:`~pymc_minibatch_mh.likelihood.numpy_glm`) when the
    #: model is a recognised GLM with a recognised prior: nothing was compiled for them.
    numpy_glm: NumpyGLM | None = field(default=None, repr=False, compare=False)

    def __getstate__(self):
        # The symbolic graphs are only needed to compile more functions at construction
        # time; worker processes receive the compiled functions alone.
        state = dict(self.__dict__)
        state["graphs"] = None
        return state

    def loglik(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Per-datum log-likelihood (summed over observed variables) of rows ``idx``."""
        return per_row_in_blocks(self._loglik_fn, q, idx=idx)

    def loglik_diff(self, q_new: np.ndarray, q_old: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``loglik(q_new, idx) - loglik(q_old, idx)`` in one compiled call (per block of
        rows for a very large ``idx``)."""
        return per_row_in_blocks(self._loglik_diff_fn, q_new, q_old, idx=idx)

    def loglik_diff_full(self, q_new: np.ndarray, q_old: np.ndarray) -> np.ndarray:
        """:meth:`loglik_diff` of every row, in one pass (Dask tasks for chunked data)."""
        return all_rows(
            self._loglik_diff_fn, (q_new, q_old), self.n_data, block_rows=data_blocks.BLOCK_ROWS
        )

    def diff_offset(self, q_new: np.ndarray, q_old: np.ndarray) -> float:
        """0: every term of the log-likelihood ratio is in :meth:`loglik_diff`."""
        return 0.0

    def loglik_full(self, q: np.ndarray) -> np.ndarray:
        """Per-datum log-likelihood of all N rows.

        Up to :data:`~pymc_minibatch_mh.data.blocks.BLOCK_ROWS` rows in one call of the
        full-data function; above that, block by block through the gathered function, the
        one every minibatch uses (the construction check compared it with the full-data
        function on probe rows), so the temporaries (float32 data widened to float64, pages
        of a memory-mapped file) stay one block's size; for chunked data as Dask tasks over
        the chunks (:func:`~pymc_minibatch_mh.data.chunk_pass.all_rows`).
        """
        if self.n_data <= data_blocks.BLOCK_ROWS:
            return self._loglik_full_fn(q)
        return all_rows(self._loglik_fn, (q,), self.n_data, block_rows=data_blocks.BLOCK_ROWS)

    def logprior(self, q: np.ndarray) -> float:
        """Log prior density with transform Jacobians, plus potentials."""
        return float(self._logprior_fn(q))

    @property
    def has_gradients(self) -> bool:
        """Whether the gradient functions were compiled (``build_tall_data(gradients=True)``)."""
        return self._logprior_grad_fn is not None

    def loglik_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        """Gradient in ``q`` of ``sum_j weights[j] * loglik(q, idx)[j]``, shape ``(ndim,)``.

        One reverse-mode pass over the rows ``idx``: cost proportional to ``len(idx)``.
        """
        self._require_gradients()
        return self._loglik_weighted_grad_fn(q, idx, weights)

    def logprior_grad(self, q: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`logprior`, shape ``(ndim,)``."""
        self._require_gradients()
        return self._logprior_grad_fn(q)

    def _require_gradients(self) -> None:
        if not self.has_gradients:
            raise RuntimeError(
                "This TallData was compiled without gradients; build it with "
                "build_tall_data(..., gradients=True)."
            )


def build_tall_data(
    model: pm.Model,
    value_vars: Sequence[Variable],
    *,
    shared: dict,
    initial_point: dict,
    data_dim: str | None = None,
    compile_kwargs: dict | None = None,
    gradients: bool = False,
    numpy_functions: bool | None = None,
) -> TallData:
    """Compile the functions a minibatch kernel needs, once.

    Parameters
    ----------
    model : pymc.Model
        An ordinary model whose observed variables share a leading datum axis.
    value_vars : sequence of TensorVariable
        Value variables of the sampled block; the others are read from ``shared``.
    shared : dict
        Replacements of the other value variables by shared variables, as built by
        :func:`pymc.pytensorf.make_shared_replacements`.
    initial_point : dict
        A point of the model, used for raveling and the self-check.
    data_dim : str, optional
        Name of the dimension that indexes the data points (checked against the data).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile` (e.g. ``{"mode": "FAST_RUN"}``).
    gradients : bool, default False
        Also compile :meth:`TallData.loglik_weighted_grad` and
        :meth:`TallData.logprior_grad` (for gradient-based proposals).
    numpy_functions : bool, optional
        Evaluate a recognised GLM with a recognised prior with numpy instead of compiling
        PyTensor functions (:mod:`~pymc_minibatch_mh.likelihood.numpy_glm`; not with
        ``compile_kwargs``). Default:
        :func:`~pymc_minibatch_mh.likelihood.numpy_glm.numpy_evaluation_enabled` (on).

    Raises
    ------
    ValueError
        For models with no observed data, observed variables of different lengths,
        missing observations imputed by PyMC, NaN or inf in per-datum data,
        ``pm.Minibatch`` data or ``total_size``, discrete or per-datum variables in
        the block, or data that cannot be gathered row-wise.
    """
    # Several data sets of different lengths: one stacked row axis (stacked_rows.py).
    layout = stacked_layout(observed_lengths(model))
    if layout is not None and data_dim is not None:
        raise ValueError(
            f"data_dim={data_dim!r} names one row axis, but the observed variables have "
            f"different lengths ({dict(zip(layout.names, layout.lengths, strict=True))}): "
            "leave data_dim out; each data set's rows are then read on its own axis."
        )
    n_data = datum_count(model, data_dim) if layout is None else layout.n_data
    # Finite second derivatives (Taylor proxies, bounds) wherever the density is finite.
    loglik_terms = observed_logp_terms(model)
    # Before any compilation or O(N) pass: NaN data would only show up as garbage later.
    for rows in (n_data,) if layout is None else sorted(set(layout.lengths)):
        check_finite_data(model, loglik_terms, rows)
        check_sampled_block(model, value_vars, initial_point, rows)
    compile_kwargs = dict(compile_kwargs or {})

    idx = pt.vector("idx", dtype="int64")
    if layout is None:
        per_datum, batch, other_lengths = data_set_graphs(
            loglik_terms, n_data, idx, check_bounds=model.check_bounds
        )
    else:
        stacked = stacked_graphs(loglik_terms, layout, idx, check_bounds=model.check_bounds)
        per_datum, batch, other_lengths = stacked.full, stacked.batch, stacked.other_lengths
    prior = model.logp(vars=[*model.free_RVs, *model.potentials], sum=True)

    (batch, full, prior), q_var = join_nonshared_inputs(
        point=initial_point,
        outputs=[batch, per_datum, prior],
        inputs=value_vars,
        shared_inputs=shared,
    )
    graphs = TallGraphs(
        q=q_var,
        idx=idx,
        batch=batch,
        prior=prior,
        likelihood_outside_block=tuple(
            v.name
            for v in likelihood_value_vars(model, loglik_terms)
            if v.name not in {w.name for w in value_vars}
        ),
        compile_kwargs=compile_kwargs,
        shapes=tuple(np.shape(initial_point[v.name]) for v in value_vars),
    )
    q0 = np.concatenate(
        [np.asarray(initial_point[v.name], dtype=q_var.dtype).ravel() for v in value_vars]
    )
    fast = None
    if numpy_functions is None:
        numpy_functions = numpy_evaluation_enabled()
    if numpy_functions and not compile_kwargs and layout is None:
        fast = recognise_numpy_glm(
            model,
            value_vars,
            shared=shared,
            initial_point=initial_point,
            q=q_var,
            idx=idx,
            batch=batch,
            prior=prior,
        )
    if fast is not None:
        return TallData(
            n_data=n_data,
            ndim=int(q0.size),
            var_names=tuple(v.name for v in value_vars),
            _loglik_fn=fast.loglik,
            _loglik_diff_fn=fast.loglik_diff,
            _loglik_full_fn=fast.loglik_full,
            _logprior_fn=fast.logprior,
            _loglik_weighted_grad_fn=fast.weighted_grad if gradients else None,
            _logprior_grad_fn=fast.prior_grad if gradients else None,
            graphs=graphs,
            numpy_glm=fast,
        )
    q_old = q_var.type("q_old")
    batch_old = clone_replace(batch, replace={q_var: q_old})
    loglik_fn = compile_function([q_var, idx], batch, **compile_kwargs)
    loglik_diff_fn = compile_function([q_var, q_old, idx], batch - batch_old, **compile_kwargs)
    loglik_full_fn = compile_function([q_var], full, **compile_kwargs)
    logprior_fn = compile_function([q_var], prior, **compile_kwargs)
    functions = [loglik_fn, loglik_diff_fn, loglik_full_fn, logprior_fn]
    weighted_grad_fn = prior_grad_fn = None
    if gradients:
        weights = pt.vector("weights", dtype=batch.dtype)
        weighted_grad_fn = compile_function(
            [q_var, idx, weights], pt.grad(pt.dot(weights, batch), q_var), **compile_kwargs
        )
        prior_grad_fn = compile_function([q_var], pt.grad(prior, q_var), **compile_kwargs)
        functions += [weighted_grad_fn, prior_grad_fn]
    for fn in functions:
        fn.trust_input = True

    data = TallData(
        n_data=n_data,
        ndim=int(q0.size),
        var_names=tuple(v.name for v in value_vars),
        _loglik_fn=loglik_fn,
        _loglik_diff_fn=loglik_diff_fn,
        _loglik_full_fn=loglik_full_fn,
        _logprior_fn=logprior_fn,
        _loglik_weighted_grad_fn=weighted_grad_fn,
        _logprior_grad_fn=prior_grad_fn,
        graphs=graphs,
    )
    _self_check(data, q0, other_lengths)
    return data


def _self_check(data: TallData, q0: np.ndarray, other_lengths: dict[str, int]) -> None:
    """Compare the gathered graph with the full graph on fixed rows (also warms up JIT).

    Up to :data:`~pymc_minibatch_mh.data.blocks.BLOCK_ROWS` rows, the full-data graph's
    values on all rows are the reference; above, the gathered graph's values on the
    leading ``BLOCK_ROWS`` rows (one block, not a pass over N). Either way a graph that
    reads a statistic of all the rows it is given (e.g. ``x - x.mean(0)``) gives other
    values on the probe rows alone.
    The comparison runs at a fixed perturbation of ``q0`` (at ``q0`` many coefficients
    are 0 and would hide such a statistic); at ``q0`` itself too only if the perturbed
    point is outside the support. ``other_lengths`` names the data inputs whose leading
    axis is neither N nor 1, used to explain a failed first evaluation.
    """
    reference = _LeadingRows(data)
    rows = probe_indices(reference.n_rows)
    perturbed = q0 + 0.3 * np.random.default_rng(0).standard_normal(q0.size)
    batch, full = _first_evaluation(data, reference, q0, perturbed, rows, other_lengths)
    if full.shape != (reference.n_rows,):
        raise ValueError(
            f"The per-datum log-likelihood has shape {full.shape}, expected "
            f"({reference.n_rows},) for {reference.n_rows} rows."
        )
    batch_p, full_p = data.loglik(perturbed, rows), full[rows]
    finite = np.isfinite(full_p) & np.isfinite(batch_p)
    if not finite.any():  # outside the support there: compare at q0
        full_p, batch_p = reference(q0)[rows], batch
        finite = np.isfinite(full_p) & np.isfinite(batch_p)
    if batch_p.shape != rows.shape or not np.allclose(
        batch_p[finite], full_p[finite], rtol=1e-7, atol=1e-9
    ):
        raise ValueError(
            "The log-likelihood of a data row depends on other rows: a minibatch gives "
            "different per-datum values than the full data. This happens when the model "
            "graph computes a statistic over all data points (e.g. centring with "
            "x - x.mean(0), or normalising by x.std(0)), which a minibatch would compute "
            "from the batch alone. Compute such statistics with numpy before building the "
            "model and pass the transformed data. (Or a non-data input of the likelihood "
            "has N entries along its first axis and was mistaken for data: then please "
            "report the model.)"
        )
    diff = data.loglik_diff(q0, q0, rows)
    if not np.allclose(diff[np.isfinite(batch)], 0.0):
        raise ValueError("Internal error: loglik_diff(q, q) is not zero.")
    data.logprior(q0)


class _LeadingRows:
    """The reference log-likelihood of the self-check: all N rows through the full-data
    function when N is at most :data:`~pymc_minibatch_mh.data.blocks.BLOCK_ROWS`, else the
    leading ``BLOCK_ROWS`` rows at once through the gathered function. Calls record the rows
    they read.

    Above that size the full-data graph is not run at all (PyMC pins its length to N):
    what is compared is one block of rows against a few of its rows (:func:`_self_check`).
    """

    def __init__(self, data: TallData):
        self.data = data
        self.n_rows = min(data.n_data, data_blocks.BLOCK_ROWS)

    def __call__(self, q: np.ndarray) -> np.ndarray:
        record_rows(self.n_rows, self.data.n_data)
        if self.n_rows == self.data.n_data:
            return self.data._loglik_full_fn(q)
        return self.data.loglik(q, np.arange(self.n_rows, dtype=np.int64))


def _first_evaluation(
    data: TallData,
    reference: _LeadingRows,
    q0: np.ndarray,
    q1: np.ndarray,
    rows: np.ndarray,
    other_lengths: dict[str, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Per-datum log-likelihood of ``rows`` at ``q0`` (cheap, first) and of the reference
    rows at ``q1`` (recorded).

    Raises
    ------
    ValueError
        If an evaluation fails while the likelihood reads data whose leading axis has
        neither N nor 1 entries: data of mismatched lengths, which PyTensor only
        reports as a shape error inside the compiled graph. Other errors propagate.
    """
    try:
        batch = data.loglik(q0, rows)
        return batch, reference(q1)
    except (ValueError, IndexError) as err:
        if not other_lengths:
            raise
        found = ", ".join(f"{name}: {length} rows" for name, length in other_lengths.items())
        raise ValueError(
            f"The log-likelihood could not be evaluated: the observed data have "
            f"N = {data.n_data} rows, but the likelihood also reads data with another "
            f"number of rows ({found}). Every per-datum array (covariates as well as "
            "observations) must have the N data points along axis 0: drop or align rows "
            "with numpy before building the model. (PyTensor's error: "
            f"{str(err).splitlines()[0]})"
        ) from err
