"""The surrogate posterior of the control variates: prior plus Taylor proxy, data-free."""

from __future__ import annotations

from collections.abc import Callable

import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.likelihood.compiling import compile_function
from pymc_minibatch_mh.likelihood.tall_data import TallData


def compile_surrogate_density(
    tall_data: TallData, image: Variable | None = None, *, proxy: bool = True
) -> Callable:
    """Compile ``f(q, g, H, x_ref) -> (s, grad_q s)`` for the surrogate log density

        s(q) = log p0(q) + g . (x - x_ref) + (x - x_ref)^T H (x - x_ref) / 2,  x = x(q),

    where ``x(q)`` is ``image`` (the likelihood's image, a graph of the TallData's
    ``q``) or ``q`` itself. With ``g``, ``H`` the proxy's full-data sums divided by the
    temperature, ``s`` is the prior plus the tempered proxy of the log-likelihood, up to
    a constant. Cost ``O(D^2)``; no data. With ``proxy=False``: ``f(q) -> (log p0(q),
    grad)``, the prior alone (a closed-form likelihood sum is added outside). For a
    TallData evaluated with numpy (and no image), numpy's functions.
    """
    fast = tall_data.numpy_glm
    if fast is not None and image is None:
        return fast.surrogate if proxy else fast.prior_and_grad
    graphs = tall_data.graphs
    q = graphs.q
    if not proxy:
        fn = compile_function(
            [q], [graphs.prior, pt.grad(graphs.prior, q)], **graphs.compile_kwargs
        )
        fn.trust_input = True
        return fn
    x = q if image is None else image
    g = pt.vector("g", dtype="float64")
    h = pt.matrix("h", dtype="float64")
    x_ref = pt.vector("x_ref", dtype="float64")
    offset = pt.cast(x, "float64") - x_ref
    value = graphs.prior + pt.dot(g, offset) + 0.5 * pt.dot(offset, pt.dot(h, offset))
    fn = compile_function([q, g, h, x_ref], [value, pt.grad(value, q)], **graphs.compile_kwargs)
    fn.trust_input = True
    return fn
