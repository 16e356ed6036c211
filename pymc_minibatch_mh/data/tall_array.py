"""A ``pm.Data``-like container for tall arrays that keeps them as they are.

``pm.Data`` converts its value to PyMC's float type (a float32 ``np.memmap`` of 10^7 x 10
becomes a 0.8 GB float64 array in memory) and stores it in the result's
``constant_data`` group (once more, at the end of sampling); it cannot hold a zarr or
Dask array at all. :func:`tall_array` makes the same kind of model variable, a shared
variable that ``pm.set_data`` can replace (new rows for predictions), without either
copy: the array is held as given (a memmap stays a view of its file, float32 stays
float32, a zarr or Dask array stays on its store and is read by chunks), and it is left
out of ``constant_data`` unless asked for.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.tensor.sharedvar import TensorSharedVariable

from pymc_minibatch_mh.data.chunked_data import SwappableRows
from pymc_minibatch_mh.data.row_source import RowSource, is_chunked_array

__all__ = ["TallArrayVariable", "tall_array"]


class TallArrayVariable(TensorSharedVariable):
    """A shared tensor that keeps its dtype when given new values.

    ``pm.set_data`` converts new values to PyMC's float type before setting them, which a
    float32 variable refuses; this variable casts them back to its own dtype (and keeps
    an array of its dtype as it is, without a copy).

    Built on a zarr or Dask array (:attr:`chunked` is that array) the variable holds a
    placeholder of the array's shape that takes no memory, and the model reads the array
    through :class:`~pymc_minibatch_mh.data.chunked_data.SwappableRows`; ``get_value``
    returns the chunked array until new values are set (:attr:`holds_chunked`).
    """

    chunked = None  # the zarr or Dask array, for a chunked tall array
    stand_in = None  # its memory-free placeholder of the same shape and dtype
    holds_chunked = False

    def get_value(self, borrow: bool = False, return_internal_type: bool = False):
        if self.holds_chunked:
            return self.chunked
        return super().get_value(borrow=borrow, return_internal_type=return_internal_type)

    def set_value(self, new_value, borrow: bool = False) -> None:
        if self.chunked is not None and new_value is self.chunked:
            # Back to the array the model was built on (and to its shape).
            super().set_value(self.stand_in, borrow=True)
            self.holds_chunked = True
            return
        if is_chunked_array(new_value):
            raise TypeError(
                f"{self.name!r} can be given numpy values (e.g. new rows for predictions) "
                "or the array it was created with; for another zarr or Dask array build the "
                "model again."
            )
        value = np.asarray(new_value)
        if value.dtype != self.dtype:
            if np.issubdtype(self.dtype, np.integer) and not np.all(
                value == value.astype(self.dtype)
            ):
                raise ValueError(
                    f"The new values of {self.name!r} are not all {self.dtype}: the tall "
                    "array keeps the dtype it was created with."
                )
            value = value.astype(self.dtype)
            borrow = True
        super().set_value(value, borrow=borrow)
        self.holds_chunked = False


def tall_array(
    name: str,
    value,
    *,
    dims=None,
    model: pm.Model | None = None,
    keep_in_idata: bool = False,
    cache_bytes: int | None = None,
):
    """Register a tall array (numpy, ``np.memmap``, zarr or Dask) in a model, as it is.

    Use it where ``pm.Data`` would go: covariates or observations with the data points
    along axis 0. The array is not copied or converted, and ``pm.set_data({name: new})``
    replaces it (new values are cast to its dtype), e.g. with new rows before
    ``pm.sample_posterior_predictive``.

    A zarr or Dask array is read as :func:`~pymc_minibatch_mh.chunked_data` reads it: the
    minibatch steps read the chunks holding a batch's rows and run full-data passes as
    Dask tasks, while anything else that evaluates the model (NUTS, predictions before
    ``pm.set_data``) reads the whole array at each evaluation. ``pm.set_data`` converts
    what it is given to numpy (PyMC's rule), so it takes new rows in memory, not another
    chunked array.

    Parameters
    ----------
    name : str
        Name of the variable in the model (the key for ``pm.set_data``).
    value : numpy.ndarray, numpy.memmap, zarr.Array or dask.array.Array
        The array. Open files with ``np.load(path, mmap_mode="r")`` or ``zarr.open``.
    dims : str or sequence of str, optional
        Dimension names, as for ``pm.Data``.
    model : pymc.Model, optional
        Default: the model in context.
    keep_in_idata : bool, default False
        Also store the array in the result's ``constant_data`` group, as ``pm.Data`` does
        (a copy of the whole array in the result; for a zarr or Dask array, read whole).
    cache_bytes : int, optional
        For a zarr or Dask array: bytes of decoded chunks kept in memory (see
        :func:`~pymc_minibatch_mh.chunked_data`).

    Returns
    -------
    TensorVariable
        The :class:`TallArrayVariable` itself for a numpy array or memmap; for a zarr or
        Dask array, the tensor of its rows (the variable is its input, registered in the
        model under ``name``).

    Raises
    ------
    TypeError
        For an array that is not numeric, or not an array.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_minibatch_mh import tall_array
    >>> x = np.ones((1000, 2), dtype=np.float32)
    >>> with pm.Model() as model:
    ...     X = tall_array("X", x)
    ...     beta = pm.Normal("beta", shape=2)
    ...     mu = X @ beta
    >>> X.get_value(borrow=True) is x, X.dtype
    (True, 'float32')
    """
    chunked = is_chunked_array(value)
    if not chunked and not isinstance(value, np.ndarray):
        raise TypeError(
            f"tall_array({name!r}, ...) takes a numpy array, np.memmap, zarr or Dask array, "
            f"got {type(value).__name__}. Convert it with np.asarray, or open a file with "
            "np.load(path, mmap_mode='r')."
        )
    dtype = np.dtype(value.dtype)
    if dtype.kind not in "biuf" or len(value.shape) == 0:
        raise TypeError(
            f"tall_array({name!r}, ...) needs a numeric array with the data points along "
            f"axis 0; got dtype {value.dtype} and shape {value.shape}."
        )
    model = pm.modelcontext(model)
    tensor_type = pt.TensorType(str(dtype), shape=(None,) * len(value.shape))
    held = value
    if chunked:
        # A stand-in of the array's shape and dtype without memory (every entry is one
        # zero): the model reads the array itself through SwappableRows.
        held = np.broadcast_to(np.zeros((), dtype=dtype), tuple(int(s) for s in value.shape))
    variable = TallArrayVariable(type=tensor_type, value=held, strict=False, name=name)
    variable.container.storage[0] = held  # exactly the given array (no filtered copy)
    if keep_in_idata:
        model.register_data_var(variable, dims=dims)
    else:
        model.add_named_variable(variable, dims=dims)
    if not chunked:
        return variable
    variable.chunked, variable.stand_in, variable.holds_chunked = value, held, True
    source = RowSource(value, cache_bytes=cache_bytes)
    return SwappableRows(source, variable, name=f"{name}_rows")(variable)
