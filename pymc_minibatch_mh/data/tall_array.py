"""A ``pm.Data``-like container for tall arrays that keeps them as they are.

``pm.Data`` converts its value to PyMC's float type (a float32 ``np.memmap`` of 10^7 x 10
becomes a 0.8 GB float64 array in memory) and stores it in the result's
``constant_data`` group (once more, at the end of sampling). :func:`tall_array` makes the
same kind of model variable, a shared variable that ``pm.set_data`` can replace (new
rows for predictions), without either copy: the array is held as given (a memmap stays a
view of its file, float32 stays float32), and it is left out of ``constant_data`` unless
asked for.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.tensor.sharedvar import TensorSharedVariable

from pymc_minibatch_mh.data.row_source import is_chunked_array

__all__ = ["TallArrayVariable", "tall_array"]


class TallArrayVariable(TensorSharedVariable):
    """A shared tensor that keeps its dtype when given new values.

    ``pm.set_data`` converts new values to PyMC's float type before setting them, which a
    float32 variable refuses; this variable casts them back to its own dtype (and keeps
    an array of its dtype as it is, without a copy).
    """

    def set_value(self, new_value, borrow: bool = False) -> None:
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


def tall_array(
    name: str,
    value,
    *,
    dims=None,
    model: pm.Model | None = None,
    keep_in_idata: bool = False,
) -> TallArrayVariable:
    """Register a tall array (numpy or ``np.memmap``) in a model, as it is.

    Use it where ``pm.Data`` would go: covariates or observations with the data points
    along axis 0. The array is not copied or converted, and ``pm.set_data({name: new})``
    replaces it (new values are cast to its dtype), e.g. with new rows before
    ``pm.sample_posterior_predictive``.

    Parameters
    ----------
    name : str
        Name of the variable in the model (the key for ``pm.set_data``).
    value : numpy.ndarray or numpy.memmap
        The array. Open files with ``np.load(path, mmap_mode="r")``.
    dims : str or sequence of str, optional
        Dimension names, as for ``pm.Data``.
    model : pymc.Model, optional
        Default: the model in context.
    keep_in_idata : bool, default False
        Also store the array in the result's ``constant_data`` group, as ``pm.Data`` does
        (a copy of the whole array in the result).

    Returns
    -------
    TallArrayVariable

    Raises
    ------
    TypeError
        For a zarr or Dask array (use :func:`~pymc_minibatch_mh.chunked_data`) or for an
        array that is not numeric.

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
    if is_chunked_array(value):
        raise TypeError(
            f"tall_array({name!r}, ...) takes a numpy array or np.memmap; for a zarr or Dask "
            "array use chunked_data(array, name), which reads it chunk by chunk."
        )
    if not isinstance(value, np.ndarray):
        raise TypeError(
            f"tall_array({name!r}, ...) takes a numpy array or np.memmap, got "
            f"{type(value).__name__}. Convert it with np.asarray, or open a file with "
            "np.load(path, mmap_mode='r')."
        )
    if value.dtype.kind not in "biuf" or value.ndim == 0:
        raise TypeError(
            f"tall_array({name!r}, ...) needs a numeric array with the data points along "
            f"axis 0; got dtype {value.dtype} and shape {value.shape}."
        )
    model = pm.modelcontext(model)
    tensor_type = pt.TensorType(str(value.dtype), shape=(None,) * value.ndim)
    variable = TallArrayVariable(type=tensor_type, value=value, strict=False, name=name)
    variable.container.storage[0] = value  # exactly the given array (no filtered copy)
    if keep_in_idata:
        model.register_data_var(variable, dims=dims)
    else:
        model.add_named_variable(variable, dims=dims)
    return variable
