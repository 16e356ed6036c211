"""The recognised likelihood families: one record each, with what the package can do.

Every module that treats families differently asks the family's record here
(``family_record(lp.family).odds_channel``) or a list derived from the records
(:func:`names_where`) instead of keeping a list of family names of its own. A record holds
how a user writes the family (for the support sentence in refusals), the name of its
positive parameter that may be free, its channels and the capabilities of the bounds and
kernels that serve it. The per-row log density, its derivatives and the bounds themselves
stay in their modules (:mod:`pymc_minibatch_mh.likelihood.glm_likelihoods`,
:mod:`pymc_minibatch_mh.bounds`); this module imports neither PyMC nor PyTensor.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from types import MappingProxyType, ModuleType


@dataclass(frozen=True)
class Family:
    """One likelihood family and its capabilities.

    Attributes
    ----------
    name : str
        The package's name of the family (``"poisson_log"``), held by a likelihood's
        ``family``.
    label : str
        PyMC's name of the distribution, as messages show it (``"Poisson"``).
    written : str
        How a model writes it so that it is recognised (``eta`` an affine predictor).
    support : str
        The observations it takes, checked when it is recognised: ``"binary"`` (0 or 1),
        ``"counts"`` (non-negative integers), ``"positive"``, ``"unit_interval"`` (strictly
        between 0 and 1), ``"categories"`` (ordinal 0..K-1), ``"classes"`` (integer
        indices) or ``"real"``.
    parameters : tuple of str
        The parameters besides ``eta`` that its rows read (fixed values, or a free
        ``scale`` / ``odds`` channel).
    scale : str or None
        The positive parameter that may be a free variable (its log affine in the sampled
        variables): ``"sigma"``, ``"alpha"``, ``"nu"``, or ``"odds"`` for ``psi``.
    ordinal : bool
        Cutpoints that enter through PyMC's ordered transform.
    odds_channel : bool
        A third channel, ``logit psi``, beside ``eta`` and ``log alpha``.
    row_scale : bool
        The scale may differ between rows, its log affine (``sigma[group]``).
    location_scale : bool
        ``eta`` is a location and the free parameter a scale.
    scalar_rows : bool
        One scalar linear predictor per row (False: one per category).
    numpy_rows : bool
        Evaluated with numpy instead of compiled functions
        (:mod:`pymc_minibatch_mh.likelihood.numpy_glm`).
    eta_slope : bool
        :func:`pymc_minibatch_mh.bounds.glm_bright_rows.eta_slope` gives
        ``d log L / d eta`` (fixed parameters).
    lipschitz : str or None
        TunaMH without control variates: ``"global"`` (a bound on all of the space),
        ``"box"`` (on a box of the predictor) or None (none).
    unbounded_curvature : bool
        The third derivative grows without bound: TunaMH's Taylor remainder holds on a
        trust region only.
    firefly_bound : bool
        FlyMC has a collapsed lower bound (False for the Normal, which every step sums
        exactly from sufficient statistics).
    firefly_region : bool
        FlyMC's bound holds on a trust region only.
    negative_binomial_counts : bool
        Served by :mod:`pymc_minibatch_mh.bounds.negative_binomial` (alone, zero-inflated
        or hurdle).
    compiled_code : int or None
        Its code in the compiled split-HMC kernels, or None.
    link : str or None
        The link, named in messages where the label alone is ambiguous (``"probit"``
        beside the logistic Bernoulli), or None.
    numerics : bool
        Its numerics are one module, ``pymc_minibatch_mh.families.<name>``, with the
        functions every such module has (:func:`family_numerics`); the bounds and the
        numpy density reach it through that function instead of a branch naming it.
    """

    name: str
    label: str
    written: str
    support: str
    parameters: tuple[str, ...] = ()
    scale: str | None = None
    ordinal: bool = False
    odds_channel: bool = False
    row_scale: bool = False
    location_scale: bool = False
    scalar_rows: bool = True
    numpy_rows: bool = False
    eta_slope: bool = False
    lipschitz: str | None = None
    unbounded_curvature: bool = False
    firefly_bound: bool = True
    firefly_region: bool = False
    negative_binomial_counts: bool = False
    compiled_code: int | None = None
    link: str | None = None
    numerics: bool = False


_FREE_SCALE = (
    "with s fixed, one free positive scale, or a free scale per row whose log is affine "
    "(s = pm.math.exp(c + Z @ g), or sigma[group])"
)
_ZERO_PART = "with psi fixed or one free probability"
_ZERO_NB_PART = "with psi and a each fixed or one free variable"
_ORDERED = "with c free with transform=pm.distributions.transforms.ordered, or fixed"

_RECORDS = (
    Family(
        "bernoulli_logit",
        "Bernoulli",
        "Bernoulli(logit_p=eta) or Bernoulli(p=pm.math.invlogit(eta))",
        support="binary",
        numpy_rows=True,
        eta_slope=True,
        lipschitz="global",
        compiled_code=0,
    ),
    Family(
        "bernoulli_probit",
        "Bernoulli",
        "Bernoulli(p=pm.math.invprobit(eta))",
        support="binary",
        link="probit",
        numerics=True,
    ),
    Family(
        "bernoulli_cloglog",
        "Bernoulli",
        "Bernoulli(p=1 - pm.math.exp(-pm.math.exp(eta))) (complementary log-log link)",
        support="binary",
        unbounded_curvature=True,
        firefly_region=True,
        link="complementary log-log",
        numerics=True,
    ),
    Family(
        "binomial_logit",
        "Binomial",
        "Binomial(n=trials, logit_p=eta) with fixed trials per row",
        support="counts",
        parameters=("n",),
        eta_slope=True,
        lipschitz="global",
        compiled_code=1,
    ),
    Family(
        "student_t",
        "StudentT",
        f"StudentT(nu=<fixed>, mu=eta, sigma=s) {_FREE_SCALE}",
        support="real",
        parameters=("nu", "sigma"),
        scale="sigma",
        row_scale=True,
        location_scale=True,
        eta_slope=True,
        lipschitz="global",
    ),
    Family(
        "normal",
        "Normal",
        f"Normal(mu=eta, sigma=s) {_FREE_SCALE}",
        support="real",
        parameters=("sigma",),
        scale="sigma",
        row_scale=True,
        location_scale=True,
        numpy_rows=True,
        lipschitz="box",
        firefly_bound=False,
    ),
    Family(
        "poisson_log",
        "Poisson",
        "Poisson(mu=pm.math.exp(eta)) or Poisson(mu=exposure * pm.math.exp(eta))",
        support="counts",
        numpy_rows=True,
        eta_slope=True,
        lipschitz="box",
        unbounded_curvature=True,
        firefly_region=True,
        numerics=True,
    ),
    Family(
        "negative_binomial",
        "NegativeBinomial",
        "NegativeBinomial(mu=pm.math.exp(eta), alpha=a) with a fixed or free",
        support="counts",
        parameters=("alpha",),
        scale="alpha",
        negative_binomial_counts=True,
    ),
    Family(
        "gamma_log",
        "Gamma",
        "Gamma(alpha=a, beta=a / pm.math.exp(eta)) with a fixed or free shape a",
        support="positive",
        parameters=("alpha",),
        scale="alpha",
        unbounded_curvature=True,
        firefly_region=True,
        numerics=True,
    ),
    Family(
        "beta_logit",
        "Beta",
        "Beta(mu=pm.math.invlogit(eta), nu=phi) with a fixed or free precision phi",
        support="unit_interval",
        parameters=("nu",),
        scale="nu",
        unbounded_curvature=True,
        firefly_region=True,
    ),
    Family(
        "zip_log",
        "ZeroInflatedPoisson",
        f"ZeroInflatedPoisson(psi=psi, mu=pm.math.exp(eta)) {_ZERO_PART}",
        support="counts",
        parameters=("odds",),
        scale="odds",
        unbounded_curvature=True,
        firefly_region=True,
    ),
    Family(
        "hurdle_poisson_log",
        "HurdlePoisson",
        f"HurdlePoisson(psi=psi, mu=pm.math.exp(eta)) {_ZERO_PART}",
        support="counts",
        parameters=("odds",),
        scale="odds",
        unbounded_curvature=True,
        firefly_region=True,
    ),
    Family(
        "zinb_log",
        "ZeroInflatedNegativeBinomial",
        f"ZeroInflatedNegativeBinomial(psi=psi, mu=pm.math.exp(eta), alpha=a) {_ZERO_NB_PART}",
        support="counts",
        parameters=("alpha", "odds"),
        scale="alpha",
        odds_channel=True,
        unbounded_curvature=True,
        negative_binomial_counts=True,
    ),
    Family(
        "hurdle_nb_log",
        "HurdleNegativeBinomial",
        f"HurdleNegativeBinomial(psi=psi, mu=pm.math.exp(eta), alpha=a) {_ZERO_NB_PART}",
        support="counts",
        parameters=("alpha", "odds"),
        scale="alpha",
        odds_channel=True,
        unbounded_curvature=True,
        negative_binomial_counts=True,
    ),
    Family(
        "ordered_logistic",
        "OrderedLogistic",
        f"OrderedLogistic(eta=eta, cutpoints=c) {_ORDERED}",
        support="categories",
        ordinal=True,
        unbounded_curvature=True,
        firefly_region=True,
    ),
    Family(
        "ordered_probit",
        "OrderedProbit",
        f"OrderedProbit(eta=eta, cutpoints=c) {_ORDERED}",
        support="categories",
        ordinal=True,
        unbounded_curvature=True,
        firefly_region=True,
    ),
    Family(
        "categorical_logit",
        "Categorical",
        "Categorical(logit_p=X @ W + b)",
        support="classes",
        scalar_rows=False,
        lipschitz="global",
    ),
)

#: Every family by name, in the order of the support sentence.
FAMILY_RECORDS = MappingProxyType({record.name: record for record in _RECORDS})
_FLAGS = frozenset(f.name for f in fields(Family))


def family_record(name: str) -> Family:
    """The record of the family ``name`` (a likelihood's ``family``)."""
    try:
        return FAMILY_RECORDS[name]
    except KeyError:
        raise ValueError(
            f"Unknown likelihood family {name!r}; expected one of {tuple(FAMILY_RECORDS)}."
        ) from None


def names_where(**wanted) -> tuple[str, ...]:
    """Names of the families whose attributes equal every ``wanted`` value, in registry
    order (``names_where(ordinal=True)``)."""
    unknown = set(wanted) - _FLAGS
    if unknown:
        raise TypeError(f"Family has no attribute(s) {sorted(unknown)}.")
    return tuple(r.name for r in _RECORDS if all(getattr(r, k) == v for k, v in wanted.items()))


def family_label(name: str) -> str:
    """PyMC's name of the family's distribution (the name itself when not registered)."""
    record = FAMILY_RECORDS.get(name)
    return name if record is None else record.label


#: What every module of family numerics defines (:func:`family_numerics`).
NUMERICS_INTERFACE = ("loglik", "third_derivative_bounds", "firefly_bound")


def family_numerics(name: str) -> ModuleType | None:
    """The module holding the family's numerics, or None for a family whose numerics
    still live in the bound modules.

    Each such module defines, with one signature for every family:

    - ``loglik(eta, y, params)``: the per-row log density (numpy);
    - ``third_derivative_bounds(lp, eta_range)``: per row, a bound on
      ``|d^3 log p / d eta^3|`` (TunaMH's Taylor remainder), over all ``eta`` when
      ``eta_range`` is None, else over each row's ``(eta_lo, eta_hi)`` (a family with
      ``unbounded_curvature`` is always given a range);
    - ``firefly_bound(lp, q_map, q_init, region)``: FlyMC's collapsed lower bound, tight
      at ``q_map`` (at ``q_init`` when ``q_map`` is None), holding on ``region`` (None for a
      family without ``firefly_region``).

    The module is imported on first use (it imports the bounds' generic machinery, which
    itself reads this registry).
    """
    if not family_record(name).numerics:
        return None
    return importlib.import_module(f"pymc_minibatch_mh.families.{name}")


def family_described(name: str) -> str:
    """The family's label with its link where the label alone is ambiguous, for prose
    (``"Bernoulli (probit link)"``)."""
    record = FAMILY_RECORDS.get(name)
    if record is None or record.link is None:
        return family_label(name)
    return f"{record.label} ({record.link} link)"


def support_sentence() -> str:
    """How each recognised family is written, for refusals: one sentence from the records."""
    forms = "; ".join(r.written for r in _RECORDS)
    return (
        "Supported likelihoods (one or more observed variables over the same rows, eta "
        f"affine in the sampled variables): {forms}."
    )
