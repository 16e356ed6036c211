"""Colourings of a symmetric Hessian: which products to compute and how to recover it.

A colouring compresses the columns of a sparse Hessian: coordinates whose columns never
share a nonzero row take one colour, and one product ``H @ colour`` gives all their
columns at once. :mod:`~pymc_minibatch_mh.likelihood.hessian_colouring` reads the
colouring of a log-likelihood's Hessian from its graph;
:func:`leading_axis_colouring` gives that of a hierarchy's prior from the shapes of its
value variables. :class:`ColouredSumDerivatives` computes the products, recovers the
Hessian and checks it once against products with random vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: A gathered block is compressed only when it saves at least this many products.
MIN_SAVED_COLUMNS = 8
#: Relative tolerance of the check of the recovered Hessian against direct products.
CHECK_RTOL = 1e-6


@dataclass(frozen=True)
class HessianColouring:
    """Colour vectors of a symmetric ``D x D`` Hessian and how to recover it.

    Attributes
    ----------
    columns : ndarray of shape (D, C)
        One 0/1 colour vector per column; ``H @ columns`` is what the pass computes.
    singles : ndarray of shape (S,)
        Coordinates with a colour of their own (their colour is ``0 .. S-1``).
    groups : ndarray of shape (G, M)
        ``groups[j, m]``: the coordinate of group ``j`` in the ``m``-th compressed
        column family (colour ``S + m``); shape ``(0, 0)`` without compression.
    """

    columns: np.ndarray
    singles: np.ndarray
    groups: np.ndarray

    @property
    def size(self) -> int:
        return int(self.columns.shape[0])

    @property
    def n_colours(self) -> int:
        return int(self.columns.shape[1])

    @classmethod
    def dense(cls, size: int) -> HessianColouring:
        """A colour per coordinate: the products are the Hessian's columns."""
        return cls(np.eye(size), np.arange(size), np.zeros((0, 0), dtype=np.int64))

    @classmethod
    def gathered(
        cls, size: int, groups: np.ndarray, read: np.ndarray | None = None
    ) -> HessianColouring:
        """One colour per column of ``groups`` (coordinates read one group per row), one
        per other coordinate in ``read`` (default: all). Coordinates the rows never read
        have zero Hessian rows and need no colour."""
        groups = np.asarray(groups, dtype=np.int64)
        keep = np.ones(size, dtype=bool) if read is None else np.isin(np.arange(size), read)
        keep[groups.ravel()] = False
        singles = np.flatnonzero(keep)
        columns = np.zeros((size, singles.size + groups.shape[1]))
        columns[singles, np.arange(singles.size)] = 1.0
        for m in range(groups.shape[1]):
            columns[groups[:, m], singles.size + m] = 1.0
        return cls(columns, singles, groups)

    def recover(self, products: np.ndarray) -> np.ndarray:
        """The Hessian from ``products[c] = H @ columns[:, c]`` (shape ``(C, D)``)."""
        products = np.asarray(products, dtype=np.float64)
        hess = np.zeros((self.size, self.size))
        n_single = self.singles.size
        hess[:, self.singles] = products[:n_single].T
        hess[self.singles, :] = products[:n_single]
        for m in range(self.groups.shape[1]):
            column = self.groups[:, m]
            for other in range(self.groups.shape[1]):
                rows = self.groups[:, other]
                hess[rows, column] = products[n_single + m, rows]
        return hess


def leading_axis_colouring(size: int, shapes: tuple[tuple[int, ...], ...]) -> HessianColouring:
    """Colouring of a Hessian whose blocks of one long leading axis meet only along it.

    The value variables of ``q`` (with ``shapes``, in order) whose leading axis has the
    length ``G`` shared by most coordinates are compressed: entry ``g`` of one such block
    is assumed to meet entry ``g' != g`` of another (or of itself) nowhere, as the effects
    of different groups do in a hierarchy's prior (``a_g ~ Normal(mu, tau)``, or a row
    ``(a_g, b_g) ~ MvNormal``). That costs ``M`` colours (the coordinates per group)
    instead of ``G M``. A wrong guess is caught by :class:`ColouredSumDerivatives`'s check
    and costs the dense colouring, never accuracy.
    """
    blocks, start = [], 0
    for shape in shapes:
        count = int(np.prod(shape, dtype=np.int64))
        if len(shape) >= 1 and shape[0] > 1:
            blocks.append((int(shape[0]), np.arange(start, start + count).reshape(shape[0], -1)))
        start += count
    if start != size or not blocks:
        return HessianColouring.dense(size)
    totals: dict[int, int] = {}
    for length, index in blocks:
        totals[length] = totals.get(length, 0) + index.size
    length = max(totals, key=totals.get)
    groups = np.hstack([index for g, index in blocks if g == length])
    if groups.size - groups.shape[1] < MIN_SAVED_COLUMNS:
        return HessianColouring.dense(size)
    return HessianColouring.gathered(size, groups)


class ColouredSumDerivatives:
    """``f(x, idx) -> (sum_i l_i, sum_i grad l_i, sum_i hess l_i)`` from coloured products.

    Wraps a compiled ``g(x, V, idx) -> (sum, gradient, (H V)^T)``. The first call checks
    the recovered Hessian against products with two random vectors on its rows and
    switches to the dense colouring if they differ (a structure the graph analysis got
    wrong costs speed, never correctness).
    """

    def __init__(self, function, colouring: HessianColouring, *, symmetrise: bool = False):
        self.function = function
        self.colouring = colouring
        self.checked = colouring.n_colours == colouring.size
        self.symmetrise = symmetrise

    @property
    def gathers(self) -> tuple:
        """The compiled function's chunked-data reads (see
        :func:`~pymc_minibatch_mh.data.chunk_pass.row_pass`)."""
        return getattr(self.function, "gathers", ())

    def __call__(self, x: np.ndarray, idx: np.ndarray):
        colouring = self.colouring
        value, grad, products = self.function(x, colouring.columns, idx)
        hess = self._recover(colouring, products)
        if not self.checked:
            self.checked = True
            if not self._agrees(x, idx, hess):
                self.colouring = HessianColouring.dense(colouring.size)
                value, grad, products = self.function(x, self.colouring.columns, idx)
                hess = self._recover(self.colouring, products)
        return value, grad, hess

    def _recover(self, colouring: HessianColouring, products: np.ndarray) -> np.ndarray:
        """The Hessian from the products; symmetrised for approximate products (each
        off-diagonal entry is then the mean of the two products that hold it)."""
        hess = colouring.recover(products)
        return 0.5 * (hess + hess.T) if self.symmetrise else hess

    def _agrees(self, x: np.ndarray, idx: np.ndarray, hess: np.ndarray) -> bool:
        """Whether ``hess`` (recovered from the colouring) times two random vectors equals
        the products computed directly with them."""
        probe = np.random.default_rng(0).standard_normal((self.colouring.size, 2))
        _, _, direct = self.function(x, probe, idx)
        scale = max(float(np.max(np.abs(direct), initial=0.0)), 1e-12)
        return bool(np.allclose(hess @ probe, direct.T, rtol=CHECK_RTOL, atol=CHECK_RTOL * scale))
