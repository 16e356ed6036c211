"""Which distribution and link an observed variable has, read from its PyMC graph.

:func:`_match_family` maps an observed random variable to a family name, the graph of
its linear predictor (inverse link removed) and its other parameters; the helpers check
the observations and describe what was found when a model is refused.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Constant, Variable
from pytensor.scalar.basic import Add, Exp, Log, Mul, Neg, Sub, TrueDiv
from pytensor.scalar.math import Erfc, Sigmoid
from pytensor.tensor.basic import Join
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.shape import SpecifyShape
from pytensor.tensor.special import Softmax

from pymc_minibatch_mh.families.registry import (
    family_label,
    family_record,
    support_sentence,
)
from pymc_minibatch_mh.likelihood.glm_likelihoods import UnsupportedLikelihood
from pymc_minibatch_mh.likelihood.graph_tools import (
    ancestors,
    data_value,
    rebuild_graph,
    tensor_data_inputs,
)

_SUPPORTED = support_sentence()


_BOUNDS_HINT = (
    "TunaMH and FlyMC also accept explicit bounds for other likelihoods (see the `bound=` "
    "argument of the step, and TunaMH's `c=` / `metric=`); MinibatchBarker and Austere need "
    "no bounds at all."
)


def _match_family(rv: Variable) -> tuple[str, Variable, dict]:
    """Family name, the variable carrying the linear predictor, and fixed parameters."""
    node = rv.owner
    op = node.op
    params = _dist_params(node)
    name = rv.name
    if isinstance(op, _rv_type(pm.Bernoulli)):
        (p,) = params
        eta = _strip_link(p, _elemwise_of(Sigmoid))
        if eta is None:
            eta = _probit_predictor(p)
            if eta is not None:
                return "bernoulli_probit", eta, {}
            eta = _cloglog_predictor(p)
            if eta is not None:
                return "bernoulli_cloglog", eta, {}
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is Bernoulli with p = {_describe(p)}, which is "
                "not a logistic, probit or complementary log-log link. Write the model with "
                "`pm.Bernoulli(..., logit_p=eta)` (or `p=pm.math.invlogit(eta)`, "
                "`p=pm.math.invprobit(eta)`, `p=1 - pm.math.exp(-pm.math.exp(eta))`) with "
                "eta affine in the parameters. " + _SUPPORTED + " " + _BOUNDS_HINT
            )
        return "bernoulli_logit", eta, {}
    if isinstance(op, _rv_type(pm.Binomial)):
        n, p = params
        eta = _strip_link(p, _elemwise_of(Sigmoid))
        if eta is None:
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is Binomial with p = {_describe(p)}, which is not "
                "a logistic link. Write the model with `pm.Binomial(..., n=trials, "
                "logit_p=eta)` (or `p=pm.math.invlogit(eta)`) with eta affine in the "
                "parameters. " + _SUPPORTED + " " + _BOUNDS_HINT
            )
        return "binomial_logit", eta, {"n": n}
    if isinstance(op, _rv_type(pm.Poisson)):
        (mu,) = params
        eta = _strip_log_link(mu)
        if eta is None:
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is Poisson with mu = {_describe(mu)}, which is not "
                "a log link. Write `pm.Poisson(..., mu=pm.math.exp(eta))` (or "
                "`mu=exposure * pm.math.exp(eta)`) with eta affine in the parameters. "
                + _SUPPORTED
                + " "
                + _BOUNDS_HINT
            )
        return "poisson_log", eta, {}
    if isinstance(op, _rv_type(pm.NegativeBinomial)):
        n, p = params
        mu = _negative_binomial_mean(n, p)
        eta = None if mu is None else _strip_log_link(mu)
        if eta is None:
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is NegativeBinomial, but not with mu = exp(eta): "
                "write `pm.NegativeBinomial(..., mu=pm.math.exp(eta), alpha=alpha)` with eta "
                "affine in the parameters. " + _SUPPORTED + " " + _BOUNDS_HINT
            )
        return "negative_binomial", eta, {"alpha": n}
    if isinstance(op, _rv_type(pm.Gamma)):
        # PyMC stores (alpha, scale); the mean is alpha * scale. With
        # beta = alpha / exp(eta) (or alpha * exp(-eta)), log(alpha * scale) is eta; the
        # recogniser checks that it is affine in the parameters.
        alpha, scale = params
        return "gamma_log", pt.log(alpha * scale), {"alpha": alpha}
    if isinstance(op, _rv_type(pm.Beta)):
        alpha, beta = params
        mean, precision = _beta_mean_precision(alpha, beta)
        eta = None if mean is None else _strip_link(mean, _elemwise_of(Sigmoid))
        if eta is None:
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is a Beta distribution (pm.Beta), but not a "
                "regression on the logit of its mean: write `pm.Beta(..., "
                "mu=pm.math.invlogit(eta), nu=precision)` with eta affine in the parameters "
                "and one precision for all rows (a constant, pm.Data or a positive free "
                "variable), or use MinibatchBarker() / Austere(), which need no bounds. "
                + _BOUNDS_HINT
            )
        return "beta_logit", eta, {"nu": precision}
    if isinstance(op, _rv_type(pm.Normal)):
        mu, sigma = params
        return "normal", mu, {"sigma": sigma}
    if isinstance(op, _rv_type(pm.StudentT)):
        nu, mu, sigma = params
        return "student_t", mu, {"nu": nu, "sigma": sigma}
    if isinstance(op, _rv_type(pm.Categorical)):
        (p,) = params
        logits = _strip_link(p, _is_last_axis_softmax)
        if logits is None and _is_ordinal(p):
            ordinal = _ordinal_parts(p)
            if ordinal is None:
                raise UnsupportedLikelihood(
                    f"Observed variable {name!r} is an ordinal likelihood (pm.OrderedLogistic "
                    "or pm.OrderedProbit) whose linear predictor and cutpoints could not be "
                    "read from its graph. Write `pm.OrderedLogistic(..., eta=eta, "
                    "cutpoints=cutpoints)` with eta affine in the parameters and the "
                    "cutpoints a free vector with `transform=pm.distributions.transforms."
                    "ordered` (or fixed), or use MinibatchBarker() / Austere(), which need "
                    "no bounds. " + _BOUNDS_HINT
                )
            family, eta, cutpoints = ordinal
            return family, eta, {"cutpoints": cutpoints}
        if logits is None:
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is Categorical, but its probabilities are not a "
                "softmax of a linear predictor over the last axis. For a softmax regression "
                "write `pm.Categorical(..., logit_p=X @ W + b)`; for any other Categorical use "
                "MinibatchBarker() or Austere(), which need no bounds. "
                + _SUPPORTED
                + " "
                + _BOUNDS_HINT
            )
        return "categorical_logit", logits, {}
    zero_counts = _zero_count_poisson(node)
    if zero_counts is not None:
        family, mu, odds, alpha = zero_counts
        eta = None if mu is None else _strip_log_link(mu)
        if eta is None:
            label = family_label(family)
            extra = "" if alpha is None else ", alpha=alpha"
            raise UnsupportedLikelihood(
                f"Observed variable {name!r} is a {label} whose mean is "
                f"{'not' if mu is None else _describe(mu) + ','} not written with a log "
                f"link. Write `pm.{label}(..., psi=psi, mu=pm.math.exp(eta){extra})` with "
                "eta affine in the parameters. " + _SUPPORTED + " " + _BOUNDS_HINT
            )
        if alpha is None:
            return family, eta, {"odds": odds}
        return family, eta, {"alpha": alpha, "odds": odds}
    raise UnsupportedLikelihood(
        f"Observed variable {name!r} is {user_distribution(rv)}, for which TunaMH and FlyMC "
        "have no bounds: use MinibatchBarker() or Austere(), which need none. "
        + _SUPPORTED
        + " "
        + _BOUNDS_HINT
    )


#: The count distributions of the zero-count families, with their family names as
#: (zero-inflated, hurdle).
_ZERO_COUNT_FAMILIES = {
    "PoissonRV": ("zip_log", "hurdle_poisson_log"),
    "NegBinomialRV": ("zinb_log", "hurdle_nb_log"),
}


def _zero_count_poisson(node) -> tuple | None:
    """``(family, mu, odds, alpha)`` when ``node`` is a zero-inflated Poisson or negative
    binomial (a two-component mixture of a point mass at 0 and the counts:
    ``pm.ZeroInflatedPoisson``, ``pm.ZeroInflatedNegativeBinomial``, or ``pm.Mixture``
    written the same way) or a hurdle Poisson or negative binomial (a point mass at 0 and
    the counts truncated below 1: ``pm.HurdlePoisson``, ``pm.HurdleNegativeBinomial``);
    ``odds = psi / (1 - psi)`` are those of the count component, ``alpha`` the negative
    binomial's dispersion (None for the Poisson), ``mu`` its mean (None when the graph
    does not write it as ``NegativeBinomial(mu=, alpha=)`` does). Else None."""
    kind = type(node.op).__name__
    if kind not in ("MixtureRV", "_HurdleRV") or not hasattr(node.op, "dist_params"):
        return None
    weights, *components = node.op.dist_params(node)
    kinds = [type(c.owner.op).__name__ if c.owner is not None else None for c in components]
    if len(kinds) != 2 or "DiracDeltaRV" not in kinds:
        return None
    if not _is_zero(components[kinds.index("DiracDeltaRV")].owner.inputs[-1]):
        return None
    k = 1 - kinds.index("DiracDeltaRV")
    count_node = components[k].owner
    if kind == "MixtureRV":
        counts, params = kinds[k], _dist_params(count_node)
    else:
        if kinds[k] != "TruncatedRV":
            return None
        counts = type(getattr(count_node.op, "base_rv_op", None)).__name__
        *params, lower, upper = count_node.inputs[2:]
        upper = _bare(upper)
        if not (_is_zero(lower - 1) and isinstance(upper, Constant)):
            return None
        if not np.all(np.isinf(np.asarray(upper.data))):
            return None
    if counts not in _ZERO_COUNT_FAMILIES:
        return None
    inflated, hurdle = _ZERO_COUNT_FAMILIES[counts]
    family = inflated if kind == "MixtureRV" else hurdle
    odds = pt.take(weights, k, axis=-1) / pt.take(weights, 1 - k, axis=-1)
    if counts == "PoissonRV":
        (mu,) = params
        return family, mu, odds, None
    n, p = params
    return family, _negative_binomial_mean(n, p), odds, n


def _is_zero(var: Variable) -> bool:
    """Whether ``var`` is a constant (up to shape wrappers and constant folding) equal to
    0 everywhere."""
    try:
        value = pt.get_underlying_scalar_constant_value(_bare(var))
    except NotScalarConstantError:
        return False
    return bool(np.all(np.asarray(value) == 0))


def _bare(var: Variable) -> Variable:
    """``var`` without shape-only wrappers (DimShuffle, SpecifyShape)."""
    while var.owner is not None and isinstance(var.owner.op, DimShuffle | SpecifyShape):
        var = var.owner.inputs[0]
    return var


def _same(a: Variable, b: Variable) -> bool:
    """One variable, or two constants with the same value (shape wrappers ignored)."""
    a, b = _bare(a), _bare(b)
    if a is b:
        return True
    return isinstance(a, Constant) and isinstance(b, Constant) and np.array_equal(a.data, b.data)


def _beta_mean_precision(alpha: Variable, beta: Variable) -> tuple:
    """``(mu, nu)`` when ``alpha = mu * nu`` and ``beta = (1 - mu) * nu``, how PyMC writes
    ``Beta(mu=, nu=)`` (and users write ``alpha``/``beta`` by hand); else ``(None, None)``."""

    bare = _bare

    def factors(var):
        node = bare(var).owner
        if node is None or not isinstance(node.op, Elemwise):
            return None
        if not isinstance(node.op.scalar_op, Mul) or len(node.inputs) != 2:
            return None
        return [bare(term) for term in node.inputs]

    def one_minus(var):  # the m of ``1 - m``, or None
        node = var.owner
        if node is None or not isinstance(node.op, Elemwise):
            return None
        if not isinstance(node.op.scalar_op, Sub):
            return None
        one, m = (bare(term) for term in node.inputs)
        if isinstance(one, Constant) and np.all(np.asarray(one.data) == 1):
            return m
        return None

    a_terms, b_terms = factors(alpha), factors(beta)
    if a_terms is None or b_terms is None:
        return None, None
    for mean, precision in (a_terms, a_terms[::-1]):
        for complement, other in (b_terms, b_terms[::-1]):
            m = one_minus(complement)
            if m is not None and _same(m, mean) and _same(other, precision):
                return mean, precision
    return None, None


def _negative_binomial_mean(n: Variable, p: Variable) -> Variable | None:
    """``mu`` when ``p`` is how PyMC writes ``NegativeBinomial(mu=, alpha=)``:
    ``n / (mu + n)`` (PyMC 5) or ``sigmoid(log(n) - log(mu))`` (PyMC 6); else None."""

    bare, same = _bare, _same

    def elemwise(var, scalar_op_type):
        node = bare(var).owner
        ok = node is not None and isinstance(node.op, Elemwise)
        return node if ok and isinstance(node.op.scalar_op, scalar_op_type) else None

    # PyMC 6: p = sigmoid(log(n) - log(mu)).
    sigmoid = elemwise(p, Sigmoid)
    if sigmoid is not None:
        difference = elemwise(sigmoid.inputs[0], Sub)
        if difference is None:
            return None
        log_n, log_mu = (elemwise(term, Log) for term in difference.inputs)
        if log_n is None or log_mu is None or not same(log_n.inputs[0], n):
            return None
        return log_mu.inputs[0]
    # PyMC 5: p = n / (mu + n).
    node = elemwise(p, TrueDiv)
    if node is None:
        return None
    numerator, denominator = node.inputs
    total = bare(denominator).owner
    if not same(numerator, n) or total is None:
        return None
    if not (isinstance(total.op, Elemwise) and isinstance(total.op.scalar_op, Add)):
        return None
    terms = [term for term in total.inputs if not same(term, n)]
    return terms[0] if len(terms) == 1 and len(total.inputs) == 2 else None


def _rv_type(dist) -> type:
    """The RandomVariable class behind a PyMC distribution (PyMC 5.2x and 6.x)."""
    rv_type = getattr(dist, "rv_type", None)
    if isinstance(rv_type, type):
        return rv_type
    return type(dist.rv_op)


def _dist_params(node) -> list:
    op = node.op
    if hasattr(op, "dist_params"):
        return list(op.dist_params(node))
    return list(node.inputs[2:])  # pragma: no cover - (rng, size, *params) layout


def _strip_link(var: Variable, is_link: Callable) -> Variable | None:
    """``var`` with its inverse-link node removed, looking through shape-only wrappers."""
    current = var
    while current.owner is not None:
        op = current.owner.op
        if is_link(current.owner):
            return rebuild_graph(var, {current: current.owner.inputs[0]})
        if isinstance(op, DimShuffle | SpecifyShape):
            current = current.owner.inputs[0]
            continue
        return None
    return None


def _probit_predictor(p: Variable) -> Variable | None:
    """``eta`` of ``p = Phi(eta)`` written as ``pm.math.invprobit`` does,
    ``0.5 * erfc(u)`` (any ``u``: then ``eta = -sqrt(2) u``), or None."""
    current = p
    while current.owner is not None and isinstance(current.owner.op, DimShuffle | SpecifyShape):
        current = current.owner.inputs[0]
    node = current.owner
    if node is None or not _elemwise_of(Mul)(node) or len(node.inputs) != 2:
        return None
    for half, tail in (node.inputs, node.inputs[::-1]):
        if tail.owner is None or not _elemwise_of(Erfc)(tail.owner) or not _is_half(half):
            continue
        eta = -np.sqrt(2.0) * tail.owner.inputs[0]
        return rebuild_graph(p, {current: eta})
    return None


def _cloglog_predictor(p: Variable) -> Variable | None:
    """``eta`` of ``p = 1 - exp(-exp(eta))``, or None."""
    current = _bare(p)
    node = current.owner
    if node is None or not _elemwise_of(Sub)(node) or not _is_constant(node.inputs[0], 1.0):
        return None
    inner = _bare(node.inputs[1]).owner  # exp(-exp(eta))
    if inner is None or not _elemwise_of(Exp)(inner):
        return None
    negated = _bare(inner.inputs[0]).owner  # -exp(eta)
    if negated is None or not _elemwise_of(Neg)(negated):
        return None
    rate = _bare(negated.inputs[0]).owner  # exp(eta)
    if rate is None or not _elemwise_of(Exp)(rate):
        return None
    return rebuild_graph(p, {current: rate.inputs[0]})


def _is_half(var: Variable) -> bool:
    """Whether ``var`` is the constant 0.5 (up to shape wrappers)."""
    return _is_constant(var, 0.5)


def _is_constant(var: Variable, value: float) -> bool:
    """Whether ``var`` is a constant equal to ``value`` everywhere (up to shape wrappers)."""
    try:
        found = pt.get_underlying_scalar_constant_value(_bare(var))
    except NotScalarConstantError:
        return False
    return bool(np.all(np.asarray(found) == value))


def _strip_log_link(mu: Variable) -> Variable | None:
    """``eta`` of a log-link mean ``mu = exp(eta)``, or of ``mu = c * exp(eta)`` with other
    factors ``c`` (an exposure): ``eta + log(c)``, whose affinity in the parameters the
    recogniser checks like any predictor (so ``log(c)`` is a per-row offset when ``c`` is
    data, and refused when ``c`` reads a parameter in a non-affine way)."""
    is_exp = _elemwise_of(Exp)
    eta = _strip_link(mu, is_exp)
    if eta is not None or mu.owner is None:
        return eta
    node = mu.owner
    if not (isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, Mul)):
        return None
    linked = [_strip_link(factor, is_exp) for factor in node.inputs]
    found = [i for i, eta in enumerate(linked) if eta is not None]
    if len(found) != 1:
        return None
    others = [factor for i, factor in enumerate(node.inputs) if i != found[0]]
    return linked[found[0]] + sum(pt.log(factor) for factor in others)


def _elemwise_of(scalar_op_type: type) -> Callable:
    def is_link(node) -> bool:
        op = node.op
        return isinstance(op, Elemwise) and isinstance(op.scalar_op, scalar_op_type)

    return is_link


def _is_last_axis_softmax(node) -> bool:
    """Softmax over the last axis (pytensor 2 stores ``axis=-1``, pytensor 3 ``(ndim-1,)``)."""
    if not isinstance(node.op, Softmax):
        return False
    ndim = node.inputs[0].ndim
    axis = node.op.axis
    if axis is None:
        return ndim == 1
    axes = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    return len(axes) == 1 and axes[0] % ndim == ndim - 1


#: PyTensor / PyMC op classes whose name is not the distribution's PyMC name.
_PYMC_NAMES = {
    "InvGammaRV": "InverseGamma",
    "WeibullBetaRV": "Weibull",
    "NegBinomialRV": "NegativeBinomial",
    "HalfNormalRV": "HalfNormal",
    "StudentTRV": "StudentT",
    "LogNormalRV": "LogNormal",
}


def user_distribution(rv: Variable) -> str:
    """The distribution of ``rv`` as a PyMC user wrote it, for messages (e.g. "a Beta",
    "a zero-inflated or other mixture with a Poisson component")."""
    op = rv.owner.op
    kind = type(op).__name__.lstrip("_")
    components = [
        _PYMC_NAMES.get(type(v.owner.op).__name__, type(v.owner.op).__name__.removesuffix("RV"))
        for v in rv.owner.inputs
        if v.owner is not None and isinstance(v.owner.op, RandomVariable)
    ]
    names = ", ".join(dict.fromkeys(components))
    parts = f" (components: {names})" if components else ""
    if kind == "MixtureRV":
        return (
            "a mixture (pm.Mixture, or a zero-inflated distribution such as "
            f"pm.ZeroInflatedNegativeBinomial or pm.ZeroInflatedBinomial){parts}"
        )
    if kind == "HurdleRV":
        return (
            "a hurdle distribution (pm.HurdleNegativeBinomial, pm.HurdleGamma or "
            f"pm.HurdleLogNormal){parts}"
        )
    label = _PYMC_NAMES.get(kind, kind.removesuffix("RV"))
    if not label or not label.isidentifier():
        return "a distribution of a kind the recogniser does not know"
    if kind.startswith("CustomDist"):
        return "a pm.CustomDist"
    article = "an" if label[0] in "AEIO" else "a"
    return f"{article} {label} distribution (pm.{label})"


def _is_ordinal(p: Variable) -> bool:
    """Whether Categorical probabilities are built like PyMC's ordinal likelihoods: a join
    of differences of a sigmoid (OrderedLogistic) or of normal cdfs (OrderedProbit)."""
    ops = [v.owner.op for v in ancestors([p]) if v.owner is not None]
    joined = any(isinstance(op, Join) for op in ops)
    scalar = {type(op.scalar_op).__name__ for op in ops if isinstance(op, Elemwise)}
    return joined and bool(scalar & {"Sigmoid", "Erfc", "Erf", "Erfcx", "Log1mexp"})


def _ordinal_parts(p: Variable) -> tuple | None:
    """``(family, eta, cutpoints)`` of PyMC's ordinal likelihoods, read from the node that
    broadcasts the cutpoints against the linear predictor: ``cutpoints[None, :] -
    eta[:, None]`` (OrderedLogistic, then a sigmoid) or ``eta[:, None] - cutpoints[None,
    :]`` (OrderedProbit, then normal cdfs); None if there is no such node. What else the
    graph computes is checked afterwards, against the model's own log-likelihood."""
    logistic = any(
        isinstance(v.owner.op, Elemwise) and isinstance(v.owner.op.scalar_op, Sigmoid)
        for v in ancestors([p])
        if v.owner is not None
    )
    for var in ancestors([p]):
        node = var.owner
        if node is None or not isinstance(node.op, Elemwise):
            continue
        if not isinstance(node.op.scalar_op, Sub) or len(node.inputs) != 2:
            continue
        first, second = (_padding(term) for term in node.inputs)
        if first is None or second is None:
            continue
        if logistic and first[0] == "left" and second[0] == "right":
            return "ordered_logistic", second[1], first[1]
        if not logistic and first[0] == "right" and second[0] == "left":
            return "ordered_probit", first[1], second[1]
    return None


def _padding(var: Variable) -> tuple | None:
    """``("right", x)`` for ``x[..., None]`` of a vector, ``("left", x)`` for
    ``x[None, ...]`` of a vector; else None."""
    node = var.owner
    if node is None or not isinstance(node.op, DimShuffle) or var.ndim != 2:
        return None
    order = tuple(node.op.new_order)
    if order == (0, "x"):
        return "right", node.inputs[0]
    if order == ("x", 0):
        return "left", node.inputs[0]
    return None


def _describe(var: Variable) -> str:
    """A short description of what a parameter is, for error messages."""
    while var.owner is not None and isinstance(var.owner.op, DimShuffle | SpecifyShape):
        var = var.owner.inputs[0]
    owner = var.owner
    if owner is None:
        return "a constant or data array"
    op = owner.op
    if hasattr(op, "dist_params"):
        return f"the random variable {var.name!r}" if var.name else "a random variable"
    if isinstance(op, Elemwise):
        return f"{type(op.scalar_op).__name__.lower()}(...)"
    return f"{type(op).__name__}(...)"


def _refuse_data_potentials(model: pm.Model, n_data: int) -> None:
    """Potentials that read per-datum data are likelihood terms the bounds cannot see."""
    for potential in model.potentials:
        for var, value in tensor_data_inputs([potential]):
            if value.ndim >= 1 and value.shape[0] == n_data:
                raise UnsupportedLikelihood(
                    f"Potential {potential.name!r} reads per-datum data "
                    f"({var.name or 'an array'} with {n_data} rows): it is a likelihood "
                    "term that the bounds of TunaMH/FlyMC cannot cover, and it would be "
                    "evaluated on all N rows at every step. Express it as an observed "
                    "distribution, or use MinibatchBarker / Austere. " + _BOUNDS_HINT
                )


def _observed_values(model: pm.Model, rv: Variable, family: str, n_data: int) -> np.ndarray:
    values = np.asarray(data_value(model.rvs_to_values[rv]))
    if values.shape != (n_data,):
        raise UnsupportedLikelihood(
            f"Observed variable {rv.name!r} has shape {values.shape}; the linear-predictor "
            f"recogniser needs one observation per data point, shape ({n_data},). " + _BOUNDS_HINT
        )
    support = family_record(family).support
    label = family_label(family)
    if support == "binary" and not np.all((values == 0) | (values == 1)):
        raise UnsupportedLikelihood(f"{label} observations of {rv.name!r} must be 0 or 1.")
    whole = values == np.round(values)
    if support == "counts" and not np.all((values >= 0) & whole):
        raise UnsupportedLikelihood(
            f"{label} observations of {rv.name!r} must be non-negative integers."
        )
    if support == "positive" and not np.all(values > 0):
        raise UnsupportedLikelihood(
            f"{label} observations of {rv.name!r} must be positive; row "
            f"{int(np.flatnonzero(~(values > 0))[0])} is "
            f"{values[~(values > 0)][0].item()!r}."
        )
    if support == "unit_interval" and not np.all((values > 0) & (values < 1)):
        outside = ~((values > 0) & (values < 1))
        raise UnsupportedLikelihood(
            f"{label} observations of {rv.name!r} must be strictly between 0 and 1; row "
            f"{int(np.flatnonzero(outside)[0])} is {values[outside][0].item()!r}."
        )
    if support == "categories" and not np.all((values >= 0) & whole):
        bad = ~((values >= 0) & whole)
        raise UnsupportedLikelihood(
            f"{label} observations of {rv.name!r} must be category indices "
            f"0, 1, ..., K - 1; row {int(np.flatnonzero(bad)[0])} is "
            f"{values[bad][0].item()!r}."
        )
    if support == "classes" and not np.all(whole):
        raise UnsupportedLikelihood(
            f"{label} observations of {rv.name!r} must be integer class indices."
        )
    return values
