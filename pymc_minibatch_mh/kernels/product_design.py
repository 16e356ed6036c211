"""A design matrix as the compiled loops read it: one product ``X @ W(q)`` plus constant
columns, ``eta_n = weight (X_n . (W q)) + c . q + o_n``
(:mod:`~pymc_minibatch_mh.kernels.logit_numba`), with the features as the model holds them."""

from __future__ import annotations

import numpy as np


def plain(features: np.ndarray) -> bool:
    """Real features in C order (others would need a copy of the data)."""
    return features.dtype.kind in "fiu" and features.flags.c_contiguous


def fixed(values: np.ndarray, dtype=np.float64) -> np.ndarray:
    """A C-contiguous, read-only view (a copy where needed) of ``values``: the arrays the
    compiled loops read all have that type, so their compiled signatures do not depend on
    how the model's arrays were made (the examples that compile them build the same)."""
    view = np.ascontiguousarray(values, dtype=dtype).view()
    view.flags.writeable = False
    return view


def product_design(source, n_data: int):
    """``(features, coef_map, weight, constant_row)`` of a dense design or of a
    :class:`~pymc_minibatch_mh.data.row_design.RowDesign` with one product and constant
    columns only, whose features are a real array in memory in C order, else None. The
    features stay as they are (no float64 copy)."""
    if type(source) is np.ndarray:
        if source.ndim != 2 or source.shape[0] != n_data or not plain(source):
            return None
        dim = source.shape[1]
        return source, np.eye(dim), 1.0, np.zeros(dim)
    blocks = getattr(source, "blocks", None)
    if (
        blocks is None
        or len(blocks) != 1
        or getattr(source, "dense", None) is not None
        or getattr(source, "indexed", ())
        or np.ndim(blocks[0].weight) != 0
    ):
        return None
    features = blocks[0].features
    if type(features) is not np.ndarray or features.ndim != 2 or not plain(features):
        return None  # a memmap, a chunked array or another layout keeps the numpy path
    coef_map = np.ascontiguousarray(blocks[0].coef_map, dtype=np.float64)
    constant_row = np.ascontiguousarray(source.constant_row, dtype=np.float64)
    return features, coef_map, float(blocks[0].weight), constant_row
