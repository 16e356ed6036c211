"""The log prior PyMC computes, as one compiled function of its value and gradient.

Two users. A recognised regression (:mod:`~pymc_minibatch_mh.likelihood.numpy_glm`) whose
prior is not a product of independent standard distributions with constant parameters (a
hierarchy ``a ~ Normal(mu, tau)``, a Gamma or Beta prior, a potential) still has its
likelihood's functions in numpy; only the prior is compiled. And every other model's
prior derivatives (:func:`~pymc_minibatch_mh.likelihood.taylor.compile_prior_derivatives`).
The Hessian, needed at the reference point and in the mode search (never for an
accept/reject decision), comes from differences of the gradient
(:class:`~pymc_minibatch_mh.likelihood.differenced_products.DifferencedProducts`); the
Hessian's own graph is compiled only where they do not settle (a prior with a kink at
the point, e.g. a Laplace prior at its centre).

Measured on PyMC 6's numba backend with every compile cache empty (20-group centred
hierarchy, N = 20,000): the compiled functions of the likelihood took 35 s to build
(20.6 s of it the Hessian sums' function, numba compiling at its first call), the prior's
value, gradient and Hessian 4.6 s, PyMC's NUTS 6.8 s for its whole run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.likelihood.coloured_hessian import (
    ColouredSumDerivatives,
    leading_axis_colouring,
)
from pymc_minibatch_mh.likelihood.compiling import compile_function, jacobian
from pymc_minibatch_mh.likelihood.differenced_products import DifferencedProducts

_NO_ROWS = np.zeros(0, dtype=np.int64)


class CompiledPrior:
    """The log prior in the sampled coordinates, with the methods of
    :class:`~pymc_minibatch_mh.likelihood.numpy_prior.IndependentPrior`.

    Parameters
    ----------
    ndim : int
        Length of ``q``.
    function : callable
        ``function(q) -> [value, gradient]`` (compiled).
    compile_products : callable
        ``compile_products() -> p`` with ``p(q, V, idx) -> (value, gradient, (H V)^T)``
        from the Hessian's own graph, called only if the differences of the gradient do
        not settle.
    shapes : tuple of tuple of int, optional
        Shapes of the value variables in ``q``: the Hessian of a hierarchy's effects
        (one long leading axis) then costs a few products, not one per effect
        (:func:`~pymc_minibatch_mh.likelihood.hessian_colouring.leading_axis_colouring`).
    """

    def __init__(
        self,
        ndim: int,
        function: Callable,
        compile_products: Callable,
        shapes: tuple[tuple[int, ...], ...] = (),
    ):
        self.ndim = int(ndim)
        self.function = function
        products = DifferencedProducts(lambda q, idx: function(q), compile_products)
        self._derivatives = ColouredSumDerivatives(
            products, leading_axis_colouring(self.ndim, shapes), symmetrise=True
        )

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = self.function(np.asarray(q, dtype=np.float64))
        # Copies: a compiled function may reuse its output buffers at the next call.
        return float(value), np.array(grad, dtype=np.float64)

    def value(self, q: np.ndarray) -> float:
        return self.value_and_grad(q)[0]

    def grad(self, q: np.ndarray) -> np.ndarray:
        return self.value_and_grad(q)[1]

    def value_grad_hessian(self, q: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """Value, gradient and Hessian (symmetrised)."""
        q = np.asarray(q, dtype=np.float64)
        value, grad, hessian = self._derivatives(q, _NO_ROWS)
        return float(value), np.array(grad, dtype=np.float64), np.asarray(hessian)


def compile_prior(
    q: Variable,
    prior: Variable,
    ndim: int,
    compile_kwargs: dict | None = None,
    shapes: tuple[tuple[int, ...], ...] = (),
) -> CompiledPrior:
    """:class:`CompiledPrior` of the graph ``prior`` in the vector ``q`` (of length
    ``ndim``, made of value variables of ``shapes``)."""
    compile_kwargs = dict(compile_kwargs or {})
    grad = pt.grad(prior, q, disconnected_inputs="ignore")
    function = compile_function([q], [prior, grad], **compile_kwargs)
    function.trust_input = True

    def compile_products():
        hess = jacobian(grad, q, disconnected_inputs="ignore")
        exact = compile_function([q], [prior, grad, hess], **compile_kwargs)
        exact.trust_input = True

        def products(q_value, columns, idx):
            value, grad_value, hess_value = exact(q_value)
            return value, grad_value, (np.asarray(hess_value) @ columns).T

        return products

    return CompiledPrior(ndim, function, compile_products, shapes)
