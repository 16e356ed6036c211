"""Recognise a generalised linear model likelihood in an unmodified PyMC model.

TunaMH needs per-datum Lipschitz constants and FlyMC needs collapsible lower
bounds. Both are available in closed form when the observed likelihood is a
known family applied to a linear predictor ``eta`` that is *affine* in the
sampled block ``q`` (the raveled unconstrained values, laid out as in
:class:`~pymc_minibatch_mh.likelihood.tall_data.TallData`). This module finds
that structure and hands it over as plain numpy arrays; bounds and kernels never
see PyTensor.

Supported patterns (``eta`` affine in ``q``; fixed parameters must not depend on
any free variable):

- ``"bernoulli_logit"``: ``Bernoulli(logit_p=eta)`` or ``Bernoulli(p=invlogit(eta))``;
- ``"poisson_log"``: ``Poisson(mu=exp(eta))``;
- ``"normal"``: ``Normal(mu=eta, sigma=s)``;
- ``"student_t"``: ``StudentT(nu=fixed, mu=eta, sigma=s)``;
- ``"categorical_logit"``: ``Categorical(logit_p=X @ W + b)``;

where ``s`` is fixed, a free scale shared by all data whose log is affine in ``q``
(a positive variable sampled on the log scale, e.g. ``pm.HalfNormal("sigma", 1)``), or a
free scale per row whose log is affine in ``q`` (``s = pm.math.exp(c + Z @ g)``, or
``sigma[group]``), read like the linear predictor.
Several observed variables over the same rows, each of these families, give a
:class:`~pymc_minibatch_mh.likelihood.glm_likelihoods.CompositeLikelihood`.

Anything else raises :class:`UnsupportedLikelihood`, whose message says what was
found; TunaMH and FlyMC then need explicit bounds.

The work is split by role: :mod:`.glm_likelihoods` (the numpy result types),
:mod:`.glm_families` (distribution and link of an observed variable),
:mod:`.affine_maps` (linearising and checking affine graphs),
:mod:`.categorical_predictor` (softmax regressions); this module drives them and
recognises the scalar families.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.families.registry import family_label, family_record
from pymc_minibatch_mh.likelihood.affine_maps import (
    _CHECK_SEED,
    _affine_rtol,
    _check_rtol,
    _columns,
    _Context,
    _decompose,
    _design_of,
    _linearise,
    _refuse_outside_block,
    _row_constant,
    _verify_affine,
)
from pymc_minibatch_mh.likelihood.batching import probe_indices
from pymc_minibatch_mh.likelihood.categorical_predictor import (
    _recognise_categorical,
)
from pymc_minibatch_mh.likelihood.glm_families import (
    _BOUNDS_HINT,
    _SUPPORTED,
    _match_family,
    _observed_values,
    _refuse_data_potentials,
)
from pymc_minibatch_mh.likelihood.glm_likelihoods import (
    CompositeLikelihood,
    LinearPredictorLikelihood,
    UnsupportedLikelihood,
)
from pymc_minibatch_mh.likelihood.inspection import datum_count

__all__ = [
    "CompositeLikelihood",
    "LinearPredictorLikelihood",
    "UnsupportedLikelihood",
    "recognise_linear_predictor",
]


def recognise_linear_predictor(
    model: pm.Model,
    value_vars: Sequence[Variable],
    *,
    shared: dict,
    initial_point: dict,
    check_against: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> LinearPredictorLikelihood | CompositeLikelihood:
    """Express the model's likelihood as a known family of an affine linear predictor.

    ``eta`` (the logits for Categorical) is read from the observed variable's
    parameters and compiled as a function of the raveled vector ``q`` of
    ``value_vars`` (other value variables read from ``shared``, exactly as in
    :func:`~pymc_minibatch_mh.likelihood.tall_data.build_tall_data`). It is then
    linearised numerically with unit steps, ``J[:, k] = eta(q0 + e_k) - eta(q0)``
    and ``offset = eta(q0) - J @ q0``, which is exact when ``eta`` is affine:

    * products ``X @ W`` of an (N, P) data matrix and a coefficient matrix that
      depends on ``q`` are found in the graph; only ``W(q)`` is differenced, and
      the design block is ``X`` times that small map;
    * everything else (intercepts, ``b * x[:, j]``, offsets) is differenced over
      all rows, for the coordinates it depends on.

    Affinity is then verified at random points far from ``q0`` (tight relative
    tolerance), and the numpy per-datum log-likelihood is compared with the
    model's (or ``check_against``) on probe rows at ``q0`` and a perturbed point.

    Parameters
    ----------
    model : pymc.Model
        Model with one observed variable, or several sharing the N rows (each must be a
        recognised family; the result is then a :class:`CompositeLikelihood`).
    value_vars : sequence of TensorVariable
        Value variables of the sampled block, in raveling order.
    shared : dict
        Replacements of the other value variables by shared variables
        (:func:`pymc.pytensorf.make_shared_replacements`).
    initial_point : dict
        A point of the model; ``q0`` is read from it.
    check_against : callable, optional
        ``check_against(q, idx) -> (len(idx),)`` untempered per-datum
        log-likelihood (e.g. ``TallData.loglik``). If None, the model's own
        observed log-density is compiled and used.

    Returns
    -------
    LinearPredictorLikelihood or CompositeLikelihood

    Raises
    ------
    UnsupportedLikelihood
        The likelihood is not a recognised family or link, ``eta`` is not affine
        in ``q`` or depends on free variables outside the block, a fixed
        parameter (``sigma``, ``nu``) depends on a free variable, a potential
        reads the data, or the self-check fails. The message says what was found.
    ValueError
        For models that cannot be subsampled at all (see ``build_tall_data``).

    Notes
    -----
    Cost: a few compiles with the Python linker (milliseconds each). Time
    O(N * D) when each coefficient is one coordinate of ``q`` (the usual case;
    O(N * P * D) for a general coefficient map), plus one O(N) evaluation of the
    non-product part per coordinate it depends on, plus a handful of full
    evaluations for the checks. Memory: the design is dense float64, N x D for
    scalar families and N x P (+1 for an intercept) for Categorical, plus the
    (N,) or (N, K) offset; nothing is quadratic in N.

    Fixed parameters must not depend on *any* free variable: one outside the
    block would be changed by another step while the bounds keep its old value.

    References
    ----------
    .. [1] Maclaurin, D. and Adams, R. P. (2014). Firefly Monte Carlo: Exact MCMC
       with subsets of data. UAI.
    .. [2] Zhang, R., Cooper, A. F. and De Sa, C. (2020). Asymptotically optimal
       exact minibatch Metropolis-Hastings. NeurIPS.
    """
    value_vars = list(value_vars)
    observed_rvs = list(model.observed_RVs)
    n_data = datum_count(model)
    _refuse_data_potentials(model, n_data)
    q0 = np.concatenate(
        [np.asarray(initial_point[v.name], dtype=np.float64).ravel() for v in value_vars]
    )
    parts, contexts = [], []
    for rv in observed_rvs:
        family, link_params, fixed = _match_family(rv)
        observed = _observed_values(model, rv, family, n_data)
        context = _Context(model, value_vars, shared, initial_point, rv, n_data, q0)
        if family == "categorical_logit":
            part = _recognise_categorical(context, link_params, observed)
        else:
            part = _recognise_scalar(context, family, link_params, fixed, observed)
        parts.append(part)
        contexts.append(context)
    names = ", ".join(repr(rv.name) for rv in observed_rvs)
    if len(parts) == 1:
        result = parts[0]
    else:
        # Each part is checked against its own observed variable first (clear messages).
        for part, context in zip(parts, contexts, strict=True):
            _self_check(part, context.model_loglik(), q0, context.rv.name)
        result = CompositeLikelihood(tuple(parts), tuple(rv.name for rv in observed_rvs))

    if check_against is None:
        if len(parts) == 1:
            _self_check(result, contexts[0].model_loglik(), q0, names)
        return result
    try:
        _self_check(result, check_against, q0, names)
    except UnsupportedLikelihood:
        # Tell apart "we misread the model" from "the reference is not the model".
        if len(parts) == 1:
            _self_check(result, contexts[0].model_loglik(), q0, names)
        raise UnsupportedLikelihood(
            f"The per-datum log-likelihood passed as `check_against` disagrees with the full-data "
            f"log-likelihood of {names}, while the recognised {result.family} likelihood "
            "agrees with the latter. The minibatch graph probably reduces over the data axis "
            "(e.g. in-graph centring `x - x.mean(0)`, which then uses the minibatch mean): "
            "precompute such statistics in numpy and pass them as data."
        ) from None
    return result


def _recognise_scalar(
    ctx: _Context, family: str, eta_rv: Variable, fixed_rv: dict, observed: np.ndarray
) -> LinearPredictorLikelihood:
    n_data, name = ctx.n_data, ctx.rv.name
    eta, *graphs = ctx.model.replace_rvs_by_values([eta_rv, *fixed_rv.values()])
    _refuse_outside_block(ctx, eta, f"the linear predictor of {name!r}")
    fixed, scale_graph, odds_graph, extra = {}, None, None, {}
    for param_name, graph in zip(fixed_rv, graphs, strict=True):
        free = ctx.free_inputs(graph)
        if family_record(family).ordinal and param_name == "cutpoints":
            extra = _recognise_cutpoints(ctx, family, graph)
        elif not free:
            fixed[param_name] = graph
        elif param_name == family_record(family).scale:
            scale_graph = graph
        elif param_name == "odds" and family_record(family).odds_channel:
            odds_graph = graph
        else:
            raise UnsupportedLikelihood(
                f"Parameter {param_name!r} of the {family_label(family)} likelihood of {name!r} "
                f"depends on the free variable(s) {[v.name for v in free]}. TunaMH/FlyMC bounds "
                f"need {param_name} fixed during sampling: make it a constant or pm.Data, or "
                "sample this model with MinibatchBarker / Austere. " + _BOUNDS_HINT
            )
    params = {}
    if fixed:
        values = ctx.compile(list(fixed.values()))(ctx.q0)
        for param_name, value in zip(fixed, values, strict=True):
            odds = np.asarray(value, dtype=np.float64)
            if param_name == "odds" and not np.all((odds > 0) & np.isfinite(odds)):
                counts = "Poisson" if family in _USER_PARAMS else "NegativeBinomial"
                raise UnsupportedLikelihood(
                    f"psi of the {family_label(family)} likelihood of {name!r} must be "
                    f"strictly between 0 and 1 (the probability of the {counts} part); with "
                    f"psi = 1 write `pm.{counts}(..., mu=pm.math.exp(eta))`."
                )
            params[param_name] = _as_param(value, param_name, name, n_data)
    scale = {}
    if scale_graph is not None:
        scale = _recognise_log_scale(ctx, family, scale_graph)
    if odds_graph is not None:
        odds_map = _recognise_log_scale(ctx, family, odds_graph, odds=True)
        scale.update(odds_row=odds_map["scale_row"], odds_offset=odds_map["scale_offset"])

    what = f"The linear predictor of {name!r}"
    parts = _decompose(ctx, eta, (), what)
    design = _design_of(ctx, parts, what)
    offset = _row_constant(parts.value_q0 - design @ ctx.q0)

    def predict(q):
        return design @ q + offset

    _verify_affine(ctx, parts.full, predict, _columns(ctx, eta), what)
    return LinearPredictorLikelihood(
        family=family,
        design=design,
        offset=offset,
        observed=observed,
        params=params,
        **scale,
        **extra,
    )


#: The parameter as the user wrote it where the recogniser works with another (the odds
#: ``psi / (1 - psi)`` of the zero-inflated and hurdle Poisson).
_USER_PARAMS = {"zip_log": "psi", "hurdle_poisson_log": "psi"}
#: A prior for the free parameter in messages (PyMC samples it on the recognised scale).

#: How to write a family so that its second parameter is one value for all rows.
_PARAM_HINTS = {
    "gamma_log": (
        "For a Gamma regression write `pm.Gamma('y', alpha=shape, beta=shape / "
        "pm.math.exp(eta))` (one shape for all rows); `mu=..., sigma=...` makes the shape "
        "mu**2 / sigma**2 change with every row's mean. "
    ),
}


def _recognise_log_scale(
    ctx: _Context, family: str, sigma: Variable, *, odds: bool = False
) -> dict:
    """The free scale's log as an affine map of ``q``: ``scale_row`` and ``scale_offset``
    when one value serves every datum (``alpha`` for the negative binomial and the Gamma),
    ``scale_design`` and ``scale_offsets`` when it differs between rows (a regression on
    ``log sigma``, Normal and Student-t only). ``odds``: ``sigma`` is the odds of a
    negative binomial with zeros (its log is ``logit psi``)."""
    name = ctx.rv.name
    scale = family_record(family).scale
    param = "psi" if odds else _USER_PARAMS.get(family, scale)
    what = f"log({scale}) of the {family_label(family)} likelihood of {name!r}"
    if family in _USER_PARAMS or odds:
        what = f"logit({param}) of the {family_label(family)} likelihood of {name!r}"
    _refuse_outside_block(ctx, sigma, what)
    log_sigma = pt.log(sigma)
    scale_fn = ctx.compile([log_sigma])

    def evaluate(q):
        (value,) = scale_fn(q)
        return np.asarray(value, dtype=np.float64).ravel()

    columns = _columns(ctx, sigma)
    jac, offset = _linearise(evaluate, ctx.q0, columns)
    if offset.size != 1 and not (
        np.allclose(jac, jac[:1], rtol=_affine_rtol(), atol=_affine_rtol())
        and np.allclose(offset, offset[0], rtol=_affine_rtol(), atol=_affine_rtol())
    ):
        if family_record(family).row_scale:
            return _recognise_row_log_scale(ctx, log_sigma, what)
        raise UnsupportedLikelihood(
            f"{param} of the {family_label(family)} likelihood of {name!r} depends on free "
            f"variables and differs between data points ({offset.size} values: per group, or "
            f"a regression on {param}). The exact steps' automatic bounds (TunaMH, FlyMC) "
            f"cover one free {param} shared by all data (e.g. `{param} = "
            f"{'pm.Beta' if param == 'psi' else 'pm.HalfNormal'}('{param}', "
            f"{'2, 2' if param == 'psi' else '1'})`); when {param} varies between "
            "rows use "
            "MinibatchBarker or Austere. " + _PARAM_HINTS.get(family, "") + _BOUNDS_HINT
        )
    row, base = jac[0], float(offset[0])

    def predict(q):
        return np.full(offset.size, row @ q + base)

    _verify_affine(ctx, evaluate, predict, columns, what.capitalize())
    return {"scale_row": row, "scale_offset": base}


def _recognise_row_log_scale(ctx: _Context, log_sigma: Variable, what: str) -> dict:
    """``log sigma_i = scale_design[i] @ q + scale_offsets[i]`` (a heteroscedastic model),
    read like the linear predictor: data products, group effects and per-row terms."""
    what = what[0].upper() + what[1:]
    not_affine = (
        f"{what} differs between rows but is not affine in the sampled variables. The exact "
        "steps' bounds cover a log-linear scale, e.g. `sigma = pm.math.exp(c + Z @ g)`; for "
        "any other scale use MinibatchBarker or Austere. " + _BOUNDS_HINT
    )
    try:
        parts = _decompose(ctx, log_sigma, (), what)
        design = _design_of(ctx, parts, what)
    except UnsupportedLikelihood as err:
        raise UnsupportedLikelihood(f"{not_affine} ({err})") from None
    offsets = _row_constant(parts.value_q0 - design @ ctx.q0)

    def predict(q):
        return design @ q + offsets

    _verify_affine(ctx, parts.full, predict, _columns(ctx, log_sigma), what)
    return {"scale_design": design, "scale_offsets": offsets}


def _recognise_cutpoints(ctx: _Context, family: str, cutpoints: Variable) -> dict:
    """The cutpoints of an ordinal likelihood as PyMC's ordered transform of an affine map
    of ``q``: ``kappa = (c_1, log(c_2 - c_1), ...)`` must be affine (it is the value
    variable itself for a free vector with ``transform=ordered``; constant for fixed
    cutpoints)."""
    name = ctx.rv.name
    what = f"cutpoints of the {family_label(family)} likelihood of {name!r}"
    _refuse_outside_block(ctx, cutpoints, what)
    cut_fn = ctx.compile([cutpoints])

    def evaluate(q):
        (value,) = cut_fn(q)
        return np.asarray(value, dtype=np.float64).ravel()

    def log_gaps(q):
        c = evaluate(q)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.concatenate([c[:1], np.log(np.diff(c))])

    refusal = (
        f"The {what} are not increasing free variables with PyMC's ordered transform. The "
        "exact steps' bounds need `cutpoints = pm.Normal('cutpoints', mu=..., sigma=..., "
        "shape=K - 1, transform=pm.distributions.transforms.ordered)` (or any prior with "
        "that transform), or fixed cutpoints; for other cutpoints use MinibatchBarker() or "
        "Austere(), which need no bounds. " + _BOUNDS_HINT
    )
    kappa0 = log_gaps(ctx.q0)
    if kappa0.size < 1 or not np.all(np.isfinite(kappa0)):
        raise UnsupportedLikelihood(refusal)
    columns = _columns(ctx, cutpoints)
    jac, offset = _linearise(log_gaps, ctx.q0, columns)

    def predict(q):  # the ordered transform of the affine map, compared in cutpoint space
        kappa = jac @ q + offset
        return np.cumsum(np.concatenate([kappa[:1], np.exp(kappa[1:])]))

    try:
        _verify_affine(ctx, evaluate, predict, columns, what.capitalize())
    except UnsupportedLikelihood as err:
        raise UnsupportedLikelihood(f"{refusal} ({err})") from None
    return {"cut_rows": jac, "cut_offsets": offset}


def _as_param(value: np.ndarray, param_name: str, rv_name: str, n_data: int):
    if value.size == 1:
        value = float(value.reshape(()))
    else:
        try:
            value = np.broadcast_to(value, (n_data,)).copy()
        except ValueError:
            raise UnsupportedLikelihood(
                f"Parameter {param_name!r} of {rv_name!r} has shape {value.shape}, which does "
                f"not broadcast to one value per data point ({n_data},)."
            ) from None
    if not np.all(np.isfinite(value)) or not np.all(np.asarray(value) > 0):
        raise UnsupportedLikelihood(
            f"Parameter {param_name!r} of {rv_name!r} must be positive and finite."
        )
    return value


def _self_check(
    result: LinearPredictorLikelihood,
    check: Callable[[np.ndarray, np.ndarray], np.ndarray],
    q0: np.ndarray,
    name: str,
) -> None:
    """Compare the numpy log-likelihood with the model's on probe rows and two points."""
    rows = probe_indices(result.n_data)
    rng = np.random.default_rng(_CHECK_SEED + 1)
    for q in (q0, q0 + 0.5 * rng.normal(size=q0.size)):
        ours = result.loglik(q, rows)
        theirs = np.asarray(check(q, rows), dtype=np.float64)
        if theirs.shape != ours.shape or not np.allclose(
            ours, theirs, rtol=_check_rtol(), atol=_check_rtol()
        ):
            diff = np.max(np.abs(ours - theirs)) if theirs.shape == ours.shape else np.nan
            raise UnsupportedLikelihood(
                f"The log-likelihood of {name!r} rebuilt from the recognised "
                f"{result.family} linear predictor does not match the model's (max abs "
                f"difference {diff:.3g} on probe rows). The model's likelihood has terms or "
                "axes the recogniser does not see. " + _SUPPORTED + " " + _BOUNDS_HINT
            )
