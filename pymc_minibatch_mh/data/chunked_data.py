"""The entry point for chunked data (zarr and Dask arrays) in a PyMC model.

:func:`chunked_data` returns a tensor that stands for a zarr or Dask array in a model
graph, used wherever a numpy array or ``pm.Data`` would be (``observed=``, ``X @ beta``).
The model stays an ordinary PyMC model: evaluating the tensor reads the whole array (so
``pm.sample()`` with NUTS, or ``model.compile_logp()``, work, at the cost of reading
everything at each call). The minibatch steps of this package instead recognise it and
read rows on demand: a minibatch reads only the chunks holding its rows and full-data
passes are Dask reductions over the chunks (see the user guide, "Data larger than
memory").
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.gradient
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op

from pymc_minibatch_mh.data.row_source import RowSource, is_chunked_array

__all__ = ["ChunkedData", "ChunkedRows", "SwappableRows", "chunked_data", "chunked_source"]


class _ArrayOp(Op):
    """An Op standing for one chunked array: equal only to itself (no merging of
    different arrays), and its output is never constant-folded into the graph."""

    __props__ = ()  # equality is overridden below: an instance per array
    view_map: dict = {}

    def __init__(self, source: RowSource, name: str | None = None):
        self.source = source
        self.name = name

    def __eq__(self, other) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __str__(self) -> str:
        return f"{type(self).__name__}{{{self.name or ''}{list(self.source.shape)}}}"

    def do_constant_folding(self, fgraph, node) -> bool:
        return False


class _NoGradientThrough(Op):
    """An Op whose one input is an index or data: no gradient flows through it."""

    def connection_pattern(self, node):
        return [[False]]

    def L_op(self, inputs, outputs, output_grads):
        return [pytensor.gradient.disconnected_type()]

    def R_op(self, inputs, eval_points):
        return [None]


class ChunkedData(_ArrayOp):
    """An Op without inputs whose output is the whole of a chunked array."""

    def make_node(self) -> Apply:
        out = pt.tensor(dtype=str(self.source.dtype), shape=self.source.shape, name=self.name)
        return Apply(self, [], [out])

    def perform(self, node, inputs, output_storage) -> None:
        output_storage[0][0] = np.asarray(self.source)


class ChunkedRows(_NoGradientThrough):
    """``source[idx]``: the rows ``idx`` of a chunked array, read when the graph runs.

    A minibatch graph reads chunked data through this Op (built by
    :func:`~pymc_minibatch_mh.likelihood.batching.gather_rows`): one call reads the
    distinct rows of ``idx`` (:class:`~pymc_minibatch_mh.data.row_source.RowSource`), so only
    the chunks holding them. ``idx`` is an integer vector and has no gradient.
    """

    __props__ = ()  # equality is overridden below: gathers of one source merge

    def __init__(self, source: RowSource):
        self.source = source

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.source is self.source

    def __hash__(self) -> int:
        return hash((type(self), id(self.source)))

    def __str__(self) -> str:
        return f"ChunkedRows{{{list(self.source.shape)}}}"

    def make_node(self, idx) -> Apply:
        idx = pt.as_tensor_variable(idx)
        if idx.ndim != 1 or idx.dtype[:3] not in ("int", "uin"):
            raise TypeError(f"ChunkedRows needs an integer vector of rows, got {idx.type}.")
        out = pt.tensor(dtype=str(self.source.dtype), shape=(None, *self.source.shape[1:]))
        return Apply(self, [idx], [out])

    def perform(self, node, inputs, output_storage) -> None:
        output_storage[0][0] = self.source[inputs[0]]

    def infer_shape(self, *args):
        # (fgraph, node, input_shapes) on PyTensor 2, (node, input_shapes) on PyTensor 3
        # (which deprecates the fgraph parameter).
        input_shapes = args[-1]
        return [(input_shapes[0][0], *self.source.shape[1:])]


class SwappableRows(_ArrayOp, _NoGradientThrough):
    """The rows of a :func:`~pymc_minibatch_mh.data.tall_array.tall_array` built on a
    zarr or Dask array: the whole chunked array while its shared variable holds the
    array, the shared variable's value once ``pm.set_data`` has replaced it.

    The input is the shared variable (what ``pm.set_data`` sets); ``holder`` is that
    variable, asked at each evaluation whether it still holds the chunked array
    (:attr:`source`). While it does, the package reads rows of :attr:`source` on demand
    (:func:`chunked_source`) and anything else that evaluates the tensor reads it whole.
    """

    def __init__(self, source: RowSource, holder, name: str | None = None):
        super().__init__(source, name)
        self.holder = holder

    @property
    def holds_source(self) -> bool:
        """Whether the shared variable still holds the chunked array."""
        return self.holder.holds_chunked

    def make_node(self, rows) -> Apply:
        out = pt.tensor(dtype=rows.dtype, shape=(None,) * rows.ndim, name=self.name)
        return Apply(self, [rows], [out])

    def perform(self, node, inputs, output_storage) -> None:
        output_storage[0][0] = np.asarray(self.source) if self.holds_source else inputs[0]

    # No infer_shape: the shape of the rows is read from the rows (``Shape`` of the output),
    # so that graphs keep no path to the stand-in input, which is not data.


def chunked_data(array, name: str | None = None, *, cache_bytes: int | None = None) -> Variable:
    """A model tensor for a zarr or Dask array, read row by row by the minibatch steps.

    Parameters
    ----------
    array : zarr.Array or dask.array.Array
        Per-datum data (covariates or observations) with the data points along axis 0.
        Integer and floating dtypes are kept (a float32 array stays float32).
    name : str, optional
        Name of the tensor.
    cache_bytes : int, optional
        Bytes of decoded chunks kept in memory, least recently used dropped first
        (default 256 MB, :data:`~pymc_minibatch_mh.data.row_source.CACHE_BYTES`). A minibatch
        reads every chunk holding one of its rows, so random batches over data much
        larger than the cache decode many chunks per step: give the cache the size of
        the data if it fits in memory, or use an ``np.memmap`` (random rows cost a page
        each) for sampling and the chunked array for distributed passes.

    Returns
    -------
    TensorVariable
        Use it in the model like an array: ``pm.Bernoulli("y", logit_p=X @ beta,
        observed=y)`` with ``X = chunked_data(zarr_X)`` and ``y = chunked_data(zarr_y)``.

    Notes
    -----
    The minibatch steps read a batch's rows with one gather of the distinct rows (zarr's
    orthogonal selection, or a Dask gather), so only the chunks holding them are read.
    Full-data passes run as Dask computations over the row chunks, on the current
    ``dask.distributed`` client if there is one. Anything else that evaluates the tensor
    (NUTS, ``pm.sample_posterior_predictive``) reads the whole array at each evaluation.

    Examples
    --------
    >>> import numpy as np, pymc as pm, zarr
    >>> from pymc_minibatch_mh import chunked_data
    >>> X = zarr.create_array(store={}, data=np.ones((100, 2), dtype="float32"), chunks=(50, 2))
    >>> with pm.Model():
    ...     beta = pm.Normal("beta", shape=2)
    ...     eta = chunked_data(X, "X") @ beta
    >>> eta.eval({beta: np.array([1.0, 2.0])})[:3]
    array([3., 3., 3.])
    """
    if not is_chunked_array(array):
        raise TypeError(
            f"chunked_data() takes a zarr or Dask array, got {type(array).__name__}. Pass "
            "numpy arrays and np.memmap (np.load(path, mmap_mode='r')) to the model "
            "directly or through pm.Data: they are read row by row as they are."
        )
    return ChunkedData(RowSource(array, cache_bytes=cache_bytes), name=name)()


def chunked_source(var: Variable) -> RowSource | None:
    """The :class:`RowSource` behind a :func:`chunked_data` tensor (or a chunked
    :func:`~pymc_minibatch_mh.data.tall_array.tall_array` that still holds its array),
    else None."""
    owner = getattr(var, "owner", None)
    if owner is None:
        return None
    if isinstance(owner.op, ChunkedData):
        return owner.op.source
    if isinstance(owner.op, SwappableRows) and owner.op.holds_source:
        return owner.op.source
    return None


def swapped_rows(var: Variable) -> Variable | None:
    """The shared variable of a chunked ``tall_array`` whose array ``pm.set_data`` has
    replaced (its value is then the data), else None."""
    owner = getattr(var, "owner", None)
    if owner is not None and isinstance(owner.op, SwappableRows) and not owner.op.holds_source:
        return owner.inputs[0]
    return None


def is_data_leaf(var: Variable) -> bool:
    """Whether a walk over a graph's data stops at ``var``: a graph input, a
    :func:`chunked_data` tensor or a chunked ``tall_array`` (whose input only stands in
    for the array)."""
    owner = var.owner
    return owner is None or isinstance(owner.op, ChunkedData | SwappableRows)
