"""Hessian-vector products of a sum from differences of its compiled gradient."""

from __future__ import annotations

import numpy as np


class DifferencedProducts:
    """``g(x, V, idx) -> (sum, gradient, (H V)^T)`` from a compiled ``f(x, idx) -> (sum,
    gradient)``: each product ``H v`` is a central difference of the gradient sums along
    ``v``, Richardson-extrapolated: ``(4 D(h / 2) - D(h)) / 3`` with ``D(h) = (f'(x + h v)
    - f'(x - h v)) / 2 h``, four gradients per product, truncation error ``O(h^4)``.

    Why: numba compiles a Hessian-vector product graph at several times the cost of the
    gradient's. Measured with empty caches on PyMC 6 (negative binomial regression,
    N = 20,000): gradient sums 3.5 s, one product 10.9 s, the products with a matrix of
    colours 22.7 s; that function was 27 s of a 47 s construction (56 s of 83 s on a
    zero-inflated Poisson), where PyMC's NUTS took 7-20 s for its whole run.

    Accuracy, checked on every product: ``h`` starts at ``1e-3 max(1, |x_v|)`` and is
    divided by 8 until ``D(h / 2)`` and ``D(h)`` agree to :attr:`tolerance` of the
    column's largest entry (a log-likelihood that bends on a scale far below ``h``, e.g.
    in the coefficient of an unscaled covariate in the 10^5 range, gets a smaller step).
    The extrapolated product is then accurate to far less than that difference, plus
    rounding of about ``1e-16 / h`` of the gradient terms: in the tests, within 1e-9 of
    the Hessian's scale ``sqrt(|H_jj H_kk|)``. When no step settles (a likelihood that is
    not smooth at that scale), the products are compiled as a graph after all
    (``compile_exact()``) and used from then on. The Taylor proxy's full-data Hessian
    may thus differ from the sum of the per-row Hessians in the residuals by that much:
    a quadratic term of the log-likelihood 1e-9 of the proxy's own, of the order of the
    rounding of the log-likelihood sums themselves (about ``1e-16 N`` of their terms).
    """

    step = 1e-3
    shrink = 8.0
    tries = 8
    tolerance = 1e-5

    def __init__(self, function, compile_exact):
        self.function = function
        self.compile_exact = compile_exact
        self.exact = None

    @property
    def gathers(self) -> tuple:
        return getattr(self.function, "gathers", ())

    def __call__(self, x: np.ndarray, columns: np.ndarray, idx: np.ndarray) -> tuple:
        if self.exact is not None:
            return self.exact(x, columns, idx)
        x = np.asarray(x, dtype=np.float64)
        function = self.function
        if getattr(function, "gathers", ()):  # rows of chunked data: read them once
            function = function.with_rows_of(x, idx)
        value, grad = function(x, idx)
        value, grad = float(value), np.array(grad, dtype=np.float64)  # before buffers change
        products = np.empty((columns.shape[1], x.size))
        for c in range(columns.shape[1]):
            product = self._product(function, x, columns[:, c], idx)
            if product is None:  # not smooth at any step tried: the products' graph
                self.exact = self.compile_exact()
                return self.exact(x, columns, idx)
            products[c] = product
        return value, grad, products

    def _product(self, function, x: np.ndarray, v: np.ndarray, idx: np.ndarray):
        """``H v`` from ``function``'s gradients, or None where no step settles."""

        def grad(point):
            return np.array(function(point, idx)[1], dtype=np.float64)

        h = self.step * max(1.0, float(np.max(np.abs(x[v != 0]), initial=0.0)))
        for _ in range(self.tries):
            wide = (grad(x + h * v) - grad(x - h * v)) / (2.0 * h)
            near = (grad(x + 0.5 * h * v) - grad(x - 0.5 * h * v)) / h
            size = float(np.max(np.abs(near), initial=0.0))
            if np.all(np.isfinite(near)) and np.all(np.isfinite(wide)):
                if np.max(np.abs(near - wide), initial=0.0) <= self.tolerance * size:
                    return (4.0 * near - wide) / 3.0
            h /= self.shrink
        return None
