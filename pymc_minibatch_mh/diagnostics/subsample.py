"""A PyMC model rebuilt on a random subsample of its data rows.

Checking a minibatch step against NUTS on all N rows is hopeless for tall data (N = 10^8),
but both can sample the same model on a few thousand random rows.
:func:`subsample_model` draws the rows (without replacement, sorted) and rebuilds the
model on them, without the user's model-building code:

* every data input with N rows along axis 0 (observed arrays and covariates: numpy
  constants, ``np.memmap``, ``pm.Data``, :func:`~pymc_minibatch_mh.tall_array`,
  :func:`~pymc_minibatch_mh.chunked_data` on zarr or Dask) is replaced by its rows, read
  with one fancy index per array (only the chunks or pages holding them are read);
* integer constants holding N as a length (the size PyMC gives an observed variable,
  ``shape=N``) and model dimensions of length N (their coordinate values too) become the
  subsample's length;
* random generators and other shared variables are copied, so that sampling the
  subsampled model (or ``pm.set_data`` on it) leaves the user's model as it was.

The rebuilt model is checked: its observed variables must have exactly the subsample's
rows and no data input may keep an axis of length N; otherwise the model is refused with
the reason (the same rule of "data points along axis 0" as the steps').
"""

from __future__ import annotations

import inspect
from copy import deepcopy
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.model.fgraph import (
    model_deterministic,
    model_free_rv,
    model_from_fgraph,
    model_named,
    model_observed_rv,
    model_potential,
)
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.type import TensorType

from pymc_minibatch_mh.data.row_source import RowSource, is_chunked_array
from pymc_minibatch_mh.likelihood.graph_tools import (
    ancestors,
    data_leaves,
    data_value,
    tensor_data_inputs,
    toposort,
)
from pymc_minibatch_mh.likelihood.inspection import datum_count, observed_lengths

#: Fewest rows a subsample may have: below this the subsampled posterior is so wide, and
#: the default batches (100 rows) so large a part of the data, that agreement on it says
#: little about the minibatch steps on the full data.
MIN_ROWS = 1000
#: Longest integer vector read as a shape or size (as in the steps' batching).
_MAX_SHAPE_LENGTH = 32
#: PyMC 6's wrappers of model variables take the variable's name; PyMC 5's do not.
_WRAPPERS_TAKE_NAME = "name" in inspect.signature(model_free_rv).parameters


@dataclass(frozen=True)
class Subsample:
    """A model rebuilt on some of its rows.

    Attributes
    ----------
    model : pymc.Model
        The model on the rows ``rows``.
    rows : ndarray of int
        The rows of the full data it holds, ascending.
    n_data : int
        The number N of rows of the full data.
    """

    model: pm.Model
    rows: np.ndarray
    n_data: int


def subsample_rows(n_data: int, n_rows: int, random_seed=None) -> np.ndarray:
    """``n_rows`` distinct rows of ``0..n_data-1``, drawn uniformly, in ascending order.

    Parameters
    ----------
    n_data : int
        The number N of rows of the data.
    n_rows : int
        The size of the subsample: at least :data:`MIN_ROWS`, below ``n_data``.
    random_seed : int, numpy Generator or None
        Seed of the draw (``numpy.random.default_rng``); the same seed gives the same rows.

    Returns
    -------
    ndarray of int64, shape (n_rows,)

    Examples
    --------
    >>> rows = subsample_rows(10**8, 5_000, random_seed=1)
    >>> rows.size, bool((rows[1:] > rows[:-1]).all()), bool(rows[-1] < 10**8)
    (5000, True, True)
    """
    check_n_rows(n_rows, n_data)
    rng = np.random.default_rng(random_seed)
    # Generator.choice draws a subsample without replacement; for a subsample above about
    # N / 50 it permutes the whole range (8 N bytes), still small next to the data's rows.
    return np.sort(rng.choice(n_data, size=n_rows, replace=False)).astype(np.int64)


def check_n_rows(n_rows, n_data: int) -> None:
    """Refuse a subsample size that is not an integer in ``[MIN_ROWS, n_data)``."""
    if isinstance(n_rows, bool) or not isinstance(n_rows, int | np.integer):
        raise TypeError(f"n_rows must be an integer number of rows; got {n_rows!r}.")
    if n_rows >= n_data:
        raise ValueError(
            f"n_rows={n_rows} is not smaller than the data (N = {n_data} rows), so there is "
            "nothing to subsample: leave n_rows=None to sample the model on all its rows."
        )
    if n_rows < MIN_ROWS:
        raise ValueError(
            f"n_rows={n_rows} is below the smallest subsample, {MIN_ROWS} rows: on fewer "
            "rows the posterior is too wide, and the steps' batches too large a part of the "
            f"data, for agreement to say much about N = {n_data}. Pass n_rows of a few "
            "thousand or more."
        )


def subsample_model(model: pm.Model, n_rows: int, *, random_seed=None) -> Subsample:
    """The model rebuilt on ``n_rows`` random rows of its data.

    Parameters
    ----------
    model : pymc.Model
        A model whose observed variables share one datum axis (axis 0) of N rows, as the
        minibatch steps require. It is not modified.
    n_rows : int
        Rows to keep: at least :data:`MIN_ROWS` and fewer than N.
    random_seed : int, numpy Generator or None
        Seed of the draw of the rows.

    Returns
    -------
    Subsample
        The rebuilt model, the rows it holds and N.

    Raises
    ------
    ValueError
        If ``n_rows`` is out of range, or the model's data cannot be subsampled: no
        observed data with a datum axis, a free variable whose shape or prior depends
        on the rows (a per-datum latent variable), or data with N entries along another
        axis than the first.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> y = np.random.default_rng(0).normal(size=20_000)
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu")
    ...     obs = pm.Normal("y", mu, 1.0, observed=y)
    >>> sub = subsample_model(model, 2_000, random_seed=0)
    >>> observed = sub.model.rvs_to_values[sub.model["y"]].eval()
    >>> sub.n_data, observed.shape, bool(np.all(observed == y[sub.rows]))
    (20000, (2000,), True)
    """
    if model.parent is not None:
        raise ValueError(
            "The model is a sub-model (created inside another model's context); pass the "
            "outermost model to subsample its data."
        )
    lengths = observed_lengths(model)
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"The observed variables are data sets of different lengths ({lengths}); "
            "subsampling rows needs one row axis shared by all of them. Compare on the full "
            "data (compare(..., n_rows=None)) or on a model you subsample yourself."
        )
    n_data = datum_count(model)
    rows = subsample_rows(n_data, n_rows, random_seed)
    return Subsample(_rebuilt_on_rows(model, rows, n_data), rows, n_data)


# ------------------------------------------------------------------------ rebuilding
def _rebuilt_on_rows(model: pm.Model, rows: np.ndarray, n_data: int) -> pm.Model:
    free, observed = list(model.free_RVs), list(model.observed_RVs)
    values = model.rvs_to_values
    row_dims = _dims_of_length(model, n_data)
    graphs = [
        *free,
        *observed,
        *(values[rv] for rv in observed),
        *model.potentials,
        *model.deterministics,
        *model.data_vars,
        *model.dim_lengths.values(),
    ]
    memo, on_rows = _replacements(graphs, rows, n_data)
    _refuse_row_dependent_free_variables(free, on_rows)
    _rebuild(graphs, memo)

    wrapped = []
    for rv in free:
        value = values[rv].clone()  # a new input of the same type and name
        wrapped.append(
            _wrap(model_free_rv, model, rv, memo, value, model.rvs_to_transforms.get(rv))
        )
    for rv in observed:
        wrapped.append(_wrap(model_observed_rv, model, rv, memo, memo.get(values[rv], values[rv])))
    wrapped += [_wrap(model_potential, model, var, memo) for var in model.potentials]
    wrapped += [_wrap(model_deterministic, model, var, memo) for var in model.deterministics]
    wrapped += [_wrap(model_named, model, var, memo) for var in model.data_vars]

    fgraph = FunctionGraph(outputs=wrapped, clone=False)
    fgraph._coords = {
        dim: _labels_on_rows(labels, rows) if dim in row_dims else labels
        for dim, labels in model.coords.items()
    }
    fgraph._dim_lengths = {dim: memo.get(var, var) for dim, var in model.dim_lengths.items()}
    new = model_from_fgraph(fgraph, mutate_fgraph=False)  # a copy of every graph
    for rv, initval in model.rvs_to_initial_values.items():
        if initval is not None and rv in free:
            new.set_initval(new[rv.name], initval)
    _check_rebuilt(new, len(rows), n_data)
    return new


def _replacements(graphs, rows: np.ndarray, n_data: int) -> tuple[dict, set]:
    """What each data leaf of ``graphs`` becomes on the rows, and the leaves that hold rows
    or the row count (the ones a free variable must not read)."""
    memo, on_rows = {}, set()
    for var in data_leaves(graphs):
        if isinstance(var, SharedVariable) and not isinstance(var.type, TensorType):
            # A random generator: a copy, so that seeding the new model leaves this one.
            memo[var] = _copy_of_shared(var)
            continue
        if getattr(var, "holds_chunked", False):
            # A chunked tall_array registered as data: its zarr or Dask array, not read.
            value = var.get_value(borrow=True)
        else:
            value = data_value(var)
        if value is None:
            continue
        if len(value.shape) >= 1 and value.shape[0] == n_data:
            memo[var] = _on_rows(var, _read_rows(value, rows))
            on_rows.add(var)
        elif _holds_length(value, n_data):
            length = np.where(np.asarray(value) == n_data, rows.size, value).astype(value.dtype)
            memo[var] = _like(var, length)
            on_rows.add(var)
        elif isinstance(var, SharedVariable):
            # Its own copy, so that pm.set_data on the new model does not write here.
            memo[var] = _like(var, np.asarray(value))
    return memo, on_rows


def _copy_of_shared(var: SharedVariable) -> SharedVariable:
    """A shared variable of the same type holding a deep copy of ``var``'s value (as PyMC's
    ``fgraph_from_model`` copies random generators)."""
    return type(var)(
        type=var.type, value=None, strict=None, container=deepcopy(var.container), name=var.name
    )


def _read_rows(value, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` (ascending) of a data array, in one fancy index of the array."""
    if isinstance(value, RowSource):  # chunked_data / a chunked tall_array
        array = value.array
        if hasattr(array, "oindex"):  # zarr: the chunks holding the rows are decoded
            picked = array.oindex[rows]
        else:  # Dask: one computation of the gathered rows
            picked = array[rows].compute()
        return np.asarray(picked).astype(value.dtype, copy=False)
    if is_chunked_array(value):
        return _read_rows(RowSource(value), rows)
    return np.asarray(value[rows])  # numpy, np.memmap (only the pages of the rows)


def _holds_length(value, n_data: int) -> bool:
    """Whether an integer scalar or short vector holds N (a size, a shape, a dim length)."""
    value = np.asarray(value)
    return (
        value.dtype.kind in "iu"
        and value.ndim <= 1
        and value.size <= _MAX_SHAPE_LENGTH
        and bool(np.any(value == n_data))
    )


def _on_rows(var: Variable, picked: np.ndarray) -> Variable:
    """A data leaf's replacement holding ``picked``, of its kind (shared stays shared)."""
    picked = picked.astype(var.dtype, copy=False)
    if isinstance(var, SharedVariable):
        shape = (None, *var.type.shape[1:])
        return pytensor.shared(picked, name=var.name, shape=shape, borrow=True)
    return pt.constant(picked, name=var.name, dtype=var.dtype)


def _like(var: Variable, value: np.ndarray) -> Variable:
    """A new shared variable or constant like ``var``, holding ``value``."""
    value = np.asarray(value, dtype=var.dtype)
    if isinstance(var, SharedVariable):
        shape = tuple(
            None if old is None or old != new else old
            for old, new in zip(var.type.shape, value.shape, strict=True)
        )
        return pytensor.shared(value, name=var.name, shape=shape, borrow=True)
    return pt.constant(value, name=var.name, dtype=var.dtype)


def _labels_on_rows(labels, rows: np.ndarray):
    """The coordinate values of a dimension of length N at the rows (None stays None)."""
    if labels is None:
        return None
    return tuple(labels[i] for i in rows.tolist())


def _dims_of_length(model: pm.Model, n_data: int) -> set[str]:
    """Model dimensions of length N (their coordinate values are subsampled too)."""
    found = set()
    for dim, length in model.dim_lengths.items():
        value = data_value(length)
        if value is None:
            value = length.eval()
        if int(np.asarray(value)) == n_data:
            found.add(dim)
    return found


def _refuse_row_dependent_free_variables(free, on_rows: set) -> None:
    for rv in free:
        read = [var for var in ancestors([rv]) if var in on_rows]
        if read:
            raise ValueError(
                f"Free variable {rv.name!r} depends on the data rows or on their number N "
                "(a per-datum latent variable, a shape of N, or a prior computed from the "
                "data), so it would change meaning on a subsample and the model cannot be "
                "rebuilt on one. Build the model on a subsample of your data yourself and "
                "call compare() on it without n_rows."
            )


def _rebuild(graphs, memo: dict) -> None:
    """Remake every node of ``graphs`` that reads a replaced variable, in one walk, adding
    the new outputs to ``memo`` (types re-inferred: N rows become the subsample's)."""
    for node in toposort(graphs):
        if all(out in memo for out in node.outputs):
            continue
        new_inputs = [memo.get(var, var) for var in node.inputs]
        if all(new is old for new, old in zip(new_inputs, node.inputs, strict=True)):
            continue
        try:
            if any(cls.__name__ == "SymbolicOp" for cls in type(node.op).__mro__):
                # As graph_tools.rebuild_graph: pytensor 3's SymbolicOps are built for
                # their input types, and calling the op builds one for the new types.
                new_outputs = node.op(*new_inputs, return_list=True)
            else:
                new_outputs = node.clone_with_new_inputs(new_inputs, strict=False).outputs
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"The model could not be rebuilt on a subsample of its rows: the operation "
                f"{node.op} refused the subsample's shapes ({err}). It may hold the number "
                "of rows N in a way that cannot be replaced (a fixed shape inside a custom "
                "distribution). Build the model on a subsample of your data yourself and "
                "call compare() on it without n_rows."
            ) from err
        for old, new in zip(node.outputs, new_outputs, strict=True):
            new.name = old.name
            memo[old] = new


def _wrap(wrapper, model: pm.Model, var: Variable, memo: dict, *inputs) -> Variable:
    """``var``'s new version wrapped as a model variable of its kind (free, observed,
    potential, deterministic, data), with its name and dims, for ``model_from_fgraph``."""
    new = memo.get(var, var)
    new.name = var.name
    dims = tuple(model.named_vars_to_dims.get(var.name, ()) or ())
    name = (var.name,) if _WRAPPERS_TAKE_NAME else ()
    return wrapper(new, *inputs, *name, *dims)


def _check_rebuilt(new: pm.Model, n_rows: int, n_data: int) -> None:
    """Refuse a rebuilt model that still reads the full data anywhere."""
    lengths = observed_lengths(new)
    wrong = {name: length for name, length in lengths.items() if length != n_rows}
    if wrong:
        raise ValueError(
            f"After subsampling, observed variables {wrong} do not have the subsample's "
            f"{n_rows} rows: their data were not found as arrays with the N = {n_data} data "
            "points along axis 0. Pass observed data as numpy arrays, pm.Data or tall_array."
        )
    graphs = [*new.free_RVs, *new.observed_RVs, *new.potentials, *new.deterministics]
    leftover = [
        var.name or f"an array of shape {value.shape}"
        for var, value in tensor_data_inputs(graphs)
        if len(value.shape) >= 1 and n_data in value.shape
    ]
    if leftover:
        raise ValueError(
            f"The model reads data {leftover} with an axis of length N = {n_data} that is "
            "not the first, so it cannot be rebuilt on a subsample of rows. Store per-datum "
            "data with the data points along axis 0."
        )
