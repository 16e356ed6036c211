"""Observed log-densities written so that their second derivatives stay finite.

The package differentiates every observed log-density twice (Taylor proxies, Laplace fits,
bounds). PyMC writes a few of them in a form whose value is right but whose derivatives
are not finite where the model puts real posterior mass:

* The negative binomial is parametrised by ``(n, p)`` with ``p = n / (mu + n)`` (PyMC 5)
  or ``p = sigmoid(log n - log mu)`` (PyMC 6). Once ``mu < 1e-16 n`` (a linear predictor
  below about -37, as for a category whose outcomes are all zero) ``p`` rounds to 1 and
  ``1 - p`` to 0, so ``value * log(1 - p)`` meets ``0 / 0`` in its derivatives at
  ``value = 0``: the Hessian of such a row is NaN, in plain, zero-inflated and hurdle
  negative binomials alike. PyMC's own ``d2logp`` escapes this only because its observed
  zeros are constants that the rewrites fold away; the package's per-row graphs take the
  observations as inputs.

:func:`observed_logp_terms` returns ``model.logp`` of the observed variables with the
negative binomial's density written from the logit ``w = log n - log mu`` of ``p`` when
the graph shows it (``log p = -softplus(-w)``, ``log(1 - p) = -softplus(w)``, with the
logarithm of an ``exp`` read as its argument): the same function, with derivatives that
are finite for every finite linear predictor. Other ``p`` are used as PyMC uses them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.dist_math import binomln, check_parameters, factln
from pymc.distributions.shape_utils import maybe_resize
from pymc.logprob.abstract import _logprob
from pytensor.graph.basic import Variable
from pytensor.scalar import Add, Exp, Log, Sigmoid, Sub, TrueDiv
from pytensor.tensor.elemwise import DimShuffle, Elemwise

from pymc_minibatch_mh.likelihood.graph_tools import unit_incomplete_beta_as_power

__all__ = ["negative_binomial_logp", "observed_logp_terms"]

#: Above this ``n`` PyMC evaluates the negative binomial as its Poisson limit (the two
#: ``gammaln`` terms of ``binomln`` cancel below their rounding there); so does this module.
POISSON_LIMIT_N = 1e10

_REGISTRATION_LOCK = threading.RLock()


def observed_logp_terms(model: pm.Model, rvs: Sequence[Variable] | None = None) -> list[Variable]:
    """``model.logp(vars=rvs, sum=False)`` (all observed variables by default) with the
    stable negative binomial density and closed forms for ``betainc(a, 1, x)``.

    Parameters
    ----------
    model : pm.Model
        The model.
    rvs : sequence of Variable, optional
        Observed variables whose terms are wanted (``model.observed_RVs`` by default).

    Returns
    -------
    list of Variable
        One elementwise log-density term per variable, as ``model.logp`` returns them.
    """
    rvs = list(model.observed_RVs if rvs is None else rvs)
    with _stable_negative_binomial():
        terms = model.logp(vars=rvs, sum=False)
    # Second derivatives must exist (Taylor proxies): a closed form where PyTensor has none.
    return unit_incomplete_beta_as_power(terms)


def negative_binomial_logp(value: Variable, n: Variable, p: Variable) -> Variable:
    """The negative binomial log-density of ``value`` (failures before the ``n``-th success
    with success probability ``p``), with PyMC's support and parameter checks.

    ``p`` is read as ``sigmoid(w)`` with ``w = log n - log mu`` when its graph is PyMC's
    ``n / (mu + n)`` or a ``sigmoid``; then ``log p`` and ``log(1 - p)`` are softplus
    terms in ``w`` whose derivatives of every order are bounded (see the module notes).
    """
    logit = _logit_of(p)
    if logit is None:
        log_p, log_q = pt.log(p), pt.log1p(-p)
    else:
        log_p, log_q = -pt.softplus(-logit), -pt.softplus(logit)
    log_mu = pt.log(n) + log_q - log_p if logit is None else _log_of(n) - logit
    zero = pt.eq(value, 0)
    negative_binomial = (
        binomln(value + n - 1, value) + pt.switch(zero, 0.0, value * log_q) + n * log_p
    )
    poisson = pt.switch(zero, 0.0, value * log_mu) - pt.exp(log_mu) - factln(value)
    res = pt.switch(pt.gt(n, POISSON_LIMIT_N), poisson, negative_binomial)
    res = pt.switch(pt.lt(value, 0), -np.inf, res)
    return check_parameters(res, 0 <= p, p <= 1, n > 0, msg="0 <= p <= 1, n > 0")


# ---------------------------------------------------------------------------- the dispatch
@contextmanager
def _stable_negative_binomial() -> Iterator[None]:
    """Within the block PyMC's log-density dispatch evaluates negative binomials (also as
    components of mixtures and truncations) with :func:`negative_binomial_logp`; the
    previous registration is restored on exit."""
    rv_type = type(pm.NegativeBinomial.rv_op)

    def logp(op, values, rng, size, n, p, **kwargs):  # a RandomVariable's inputs
        [value] = values
        return maybe_resize(negative_binomial_logp(value, n, p), size)

    with _REGISTRATION_LOCK:
        previous = _logprob.dispatch(rv_type)
        _logprob.register(rv_type, logp)
        try:
            yield
        finally:
            _logprob.register(rv_type, previous)


# ------------------------------------------------------------------------ graph reading
def _scalar_op(var: Variable, op_class) -> bool:
    node = var.owner
    return (
        node is not None
        and isinstance(node.op, Elemwise)
        and isinstance(node.op.scalar_op, op_class)
    )


def _log_of(var: Variable) -> Variable:
    """``log(var)``, with ``log(exp(x))`` read as ``x`` (also through broadcasting)."""
    node = var.owner
    if node is not None and isinstance(node.op, DimShuffle):
        return node.op(_log_of(node.inputs[0]))  # log is elementwise: it commutes
    if _scalar_op(var, Exp):
        return node.inputs[0]
    return pt.log(var)


def _without_broadcast(var: Variable) -> Variable:
    """``var`` before any dimensions were added to it (elementwise results broadcast them
    back); a transposition is kept."""
    while var.owner is not None and _adds_dims_only(var.owner.op):
        var = var.owner.inputs[0]
    return var


def _adds_dims_only(op) -> bool:
    if not isinstance(op, DimShuffle):
        return False
    kept = [dim for dim in op.new_order if dim != "x"]
    return kept == list(range(len(kept))) and len(kept) == op.input_ndim


def _logit_of(p: Variable) -> Variable | None:
    """``w`` with ``p = sigmoid(w)`` read from ``p``'s graph, or None.

    Recognised: ``sigmoid(w)`` (``w = log a - log b`` rebuilt with :func:`_log_of`) and
    ``a / (b + a)`` (``w = log a - log b``).
    """
    p = _without_broadcast(p)
    if _scalar_op(p, Sigmoid):
        (w,) = p.owner.inputs
        if _scalar_op(w, Sub):
            a, b = w.owner.inputs
            if _scalar_op(_without_broadcast(a), Log) and _scalar_op(_without_broadcast(b), Log):
                return _log_of(_log_argument(a)) - _log_of(_log_argument(b))
        return w
    if _scalar_op(p, TrueDiv):
        num, den = p.owner.inputs
        den = _without_broadcast(den)
        if _scalar_op(den, Add) and len(den.owner.inputs) == 2:
            first, second = den.owner.inputs
            base = _without_broadcast(num)
            if _without_broadcast(second) is base:
                return _log_of(num) - _log_of(first)
            if _without_broadcast(first) is base:
                return _log_of(num) - _log_of(second)
    return None


def _log_argument(log_var: Variable) -> Variable:
    """``x`` of ``log(x)`` (through broadcasting, which is re-applied to ``x``)."""
    node = log_var.owner
    if isinstance(node.op, DimShuffle):
        return node.op(_log_argument(node.inputs[0]))
    return node.inputs[0]
