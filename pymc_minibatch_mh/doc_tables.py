"""Markdown tables for the documentation, generated from the code so they cannot drift.

The documentation build (``docs/conf.py``) calls :func:`write_tables`, which writes one
markdown file per table into ``docs/_generated/``; the hand-written pages include those
files (MyST's ``{include}``) instead of copying their contents, and
``tests/test_docs_tables.py`` checks that they do, and that each table matches what the
code does.

Where the tables come from:

* **Sample stats**: every step class's ``stats_dtypes_shapes``, with the one-line
  meanings of :data:`STAT_MEANINGS` (kept here, beside the tables; a test fails when a
  step reports a stat this mapping does not explain, or the mapping explains a stat no
  step reports).
* **Defaults**: the constructor keywords and defaults of each step
  (:func:`inspect.signature` of the class and of the common base class), the first
  sentence of each keyword's entry in the docstring's Parameters section (parsed by
  numpydoc), and the class attributes that fix the rest (acceptance targets, MH steps per
  draw).
* **Supported likelihoods**: :data:`FAMILY_SUPPORT`. No single structure in the code
  says which families each step takes (the recogniser, the bounds and each step's
  refusals decide it between them), so it is written down here once, and the tests build
  every step on a small model of every row and check that it accepts or refuses as the
  table says.
* **API listing**: ``pymc_minibatch_mh.__all__`` and ``pymc_minibatch_mh.diagnostics.__all__``.

Run ``python -m pymc_minibatch_mh.doc_tables DIR`` to write the tables to ``DIR``.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import numpy as np

from pymc_minibatch_mh.likelihood.affine_maps import INDEXED_MIN_COLUMNS

#: The step classes, in the order the documentation presents them (the recommended
#: default first), with the name of each one's method page (``docs/methods/<page>.md``).
STEPS = {
    "MinibatchBarker": "minibatch_barker",
    "Austere": "austere",
    "TunaMH": "tunamh",
    "FlyMC": "flymc",
}

#: What each sample stat means, one line each. Every stat some step declares in its
#: ``stats_dtypes_shapes`` needs an entry, and every entry a step that declares it.
STAT_MEANINGS = {
    "accepted": "1.0 if an MH step of the draw moved the chain, else 0.0 (a float, as in "
    "PyMC's `Metropolis`, so the steps combine with it in a compound step)",
    "accept": "the acceptance probability of the draw's proposals, averaged over its MH "
    "steps: Barker's probability at the estimated log-ratio (MinibatchBarker), "
    "`min(1, r)` (TunaMH), that of the `theta` move (FlyMC); NaN for Austere, whose "
    "test gives none",
    "batch_size": "rows read by the draw, summed over its MH steps and group sweeps "
    "(TunaMH: the Poisson draw, or N on a full-data step; FlyMC: bright rows at the "
    "proposal plus dark rows proposed to brighten)",
    "n_lik_evals": "per-row likelihood evaluations of the draw (current and proposed "
    "state; FlyMC adds the gradient passes of its HMC and MALA moves)",
    "scaling": "the proposal scale (random walk) or leapfrog step size (HMC moves) used "
    "in the draw",
    "warning": "a problem found by the checks after tuning; PyMC logs it while sampling "
    "and drops the stat from the returned draws (`keep_warning_stat=True` keeps it)",
    "delta_var": "the variance of the minibatch log-ratio estimate at the decision (the "
    "largest over the draw's MH steps)",
    "clt_error": "a Berry–Esseen-type bound on the error of the normal approximation "
    "behind the decision (the largest over the draw); often above 1, and then "
    "uninformative, at the small batches control variates allow",
    "t_stat": "the t statistic at which the sequential test stopped (the draw's last "
    "test); ±inf when it read all N rows, NaN when it read none",
    "group_accept": "the share of groups whose moves a sweep over a multilevel model's "
    "groups accepted (NaN without sweeps)",
    "poisson_draws": "the Poisson number of rows drawn by the test (0 on a full-data step)",
    "n_kept": "the drawn rows kept by the test",
    "chi": "the batch-size parameter χ in use (tuned while tuning, then fixed)",
    "region_exits": "proposals outside the box or trust region on which the bound holds, "
    "rejected without reading data",
    "excluded_mass": "the estimated posterior mass outside the trust region, after tuning "
    "(NaN while tuning and without a region)",
    "n_bright": "bright rows after the draw",
}

#: Support levels of :data:`FAMILY_SUPPORT`.
EXACT = "exact"
REGION = "exact on a trust region"
SUMMED = "exact, no rows read"
APPROXIMATE = "approximate"
REFUSED = "refused"
#: What each support level means (the legend printed under the table).
SUPPORT_LEVELS = {
    EXACT: "the chain's stationary distribution is the posterior",
    REGION: "the posterior restricted to a trust region around the mode, grown after "
    "tuning until the estimated mass outside it is below 1e-6 (stats `region_exits` and "
    "`excluded_mass`)",
    SUMMED: "a Normal log-likelihood summed from its sufficient statistics: the test is "
    "the exact MH test and no row is read after construction",
    APPROXIMATE: "each accept/reject decision may differ from the exact test by a small "
    "error the step bounds and reports",
    REFUSED: "construction raises an error that names what applies instead (before any "
    "pass over the data)",
}

#: ``steps_per_draw`` when a Normal likelihood is summed exactly: one HMC transition on
#: the exact posterior per draw (``MinibatchStep.__init__`` and ``FlyMC.__init__``).
SUMMED_STEPS_PER_DRAW = 1


@dataclass(frozen=True)
class FamilySupport:
    """One row of the supported-likelihoods table.

    Parameters
    ----------
    likelihood : str
        The likelihood as written in a model (markdown).
    variants : tuple of str
        Names of the small models the tests build for this row (each step is built on
        each of them, and must accept or refuse as ``support`` says).
    support : mapping
        Step name to one of the support levels (:data:`SUPPORT_LEVELS`).
    families : tuple of str
        The recogniser's family names this row covers
        (:data:`pymc_minibatch_mh.likelihood.glm_likelihoods.FAMILIES`), empty for
        likelihoods it does not recognise.
    """

    likelihood: str
    variants: tuple[str, ...]
    support: Mapping[str, str]
    families: tuple[str, ...] = field(default=())


def _row(likelihood, variants, families=(), *, tuna, flymc, barker=APPROXIMATE, austere=None):
    """A row: MinibatchBarker and Austere approximate (unless said), the exact steps as given."""
    support = {
        "MinibatchBarker": barker,
        "Austere": barker if austere is None else austere,
        "TunaMH": tuna,
        "FlyMC": flymc,
    }
    return FamilySupport(likelihood, tuple(variants), MappingProxyType(support), tuple(families))


#: Which likelihoods each step takes when called with no arguments. ``eta`` stands for a
#: linear predictor, affine in the sampled variables (``a + X @ beta``, ``a[group] + ...``).
FAMILY_SUPPORT = (
    _row(
        "`Bernoulli(logit_p=eta)` or `p=pm.math.invlogit(eta)`",
        ["bernoulli"],
        ["bernoulli_logit"],
        tuna=EXACT,
        flymc=EXACT,
    ),
    _row(
        "`Bernoulli(p=pm.math.invprobit(eta))` (probit link)",
        ["bernoulli_probit"],
        ["bernoulli_probit"],
        tuna=EXACT,
        flymc=EXACT,
    ),
    _row(
        "`Bernoulli(p=1 - pm.math.exp(-pm.math.exp(eta)))` (complementary log-log link)",
        ["bernoulli_cloglog"],
        ["bernoulli_cloglog"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "`Binomial(n=trials, logit_p=eta)`, fixed trials per row",
        ["binomial"],
        ["binomial_logit"],
        tuna=EXACT,
        flymc=EXACT,
    ),
    _row(
        "`Categorical(logit_p=X @ W + b)` (softmax regression)",
        ["categorical"],
        ["categorical_logit"],
        tuna=EXACT,
        flymc=EXACT,
    ),
    _row(
        "`Normal(mu=eta, sigma=s)`, one fixed `s`",
        ["normal_fixed_scale"],
        ["normal"],
        tuna=EXACT,
        flymc=SUMMED,
    ),
    _row(
        "`Normal(mu=eta, sigma=s)`, one free `s`",
        ["normal_free_scale"],
        ["normal"],
        tuna=SUMMED,
        flymc=SUMMED,
        barker=SUMMED,
    ),
    _row(
        "`Normal` or `StudentT` (fixed `nu`) with a free scale per row, "
        "`sigma=pm.math.exp(c + Z @ g)`",
        ["normal_row_scale", "student_t_row_scale"],
        ["normal", "student_t"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "`StudentT(nu, mu=eta, sigma=s)`, fixed `nu` and `s`",
        ["student_t_fixed_scale"],
        ["student_t"],
        tuna=EXACT,
        flymc=EXACT,
    ),
    _row(
        "`StudentT(nu, mu=eta, sigma=s)`, fixed `nu`, one free `s`",
        ["student_t_free_scale"],
        ["student_t"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "`StudentT` with a free `nu`",
        ["student_t_free_nu"],
        tuna=REFUSED,
        flymc=REFUSED,
    ),
    _row(
        "`Poisson(mu=pm.math.exp(eta))`, or `mu=exposure * pm.math.exp(eta)`",
        ["poisson"],
        ["poisson_log"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "`Poisson(mu=pm.math.exp(eta))` with group coefficients in `eta` (`a[group]`, "
        f"{INDEXED_MIN_COLUMNS} groups or more)",
        ["poisson_groups"],
        ["poisson_log"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "`NegativeBinomial(mu=pm.math.exp(eta), alpha=a)`, fixed `a`",
        ["negative_binomial_fixed"],
        ["negative_binomial"],
        tuna=EXACT,
        flymc=EXACT,
    ),
    _row(
        "`NegativeBinomial(mu=pm.math.exp(eta), alpha=a)`, free `a`",
        ["negative_binomial_free"],
        ["negative_binomial"],
        tuna=REGION,
        flymc=EXACT,
    ),
    _row(
        "`Gamma(alpha=a, beta=a / pm.math.exp(eta))`, fixed or free shape `a`",
        ["gamma_fixed", "gamma_free"],
        ["gamma_log"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "`Beta(mu=pm.math.invlogit(eta), nu=n)`, fixed or free precision `n`",
        ["beta_fixed", "beta_free"],
        ["beta_logit"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "`ZeroInflatedPoisson` / `HurdlePoisson` with `mu=pm.math.exp(eta)`, fixed or free `psi`",
        ["zip_fixed", "zip_free", "hurdle_poisson_free"],
        ["zip_log", "hurdle_poisson_log"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "`ZeroInflatedNegativeBinomial` / `HurdleNegativeBinomial` with "
        "`mu=pm.math.exp(eta)`, `alpha` and `psi` each fixed or free",
        ["zinb_fixed", "zinb_free", "hurdle_nb_free"],
        ["zinb_log", "hurdle_nb_log"],
        tuna=REGION,
        flymc=EXACT,
    ),
    _row(
        "`OrderedLogistic` / `OrderedProbit`, cutpoints free with "
        "`transform=pm.distributions.transforms.ordered` (or fixed)",
        ["ordered_logistic", "ordered_probit"],
        ["ordered_logistic", "ordered_probit"],
        tuna=REGION,
        flymc=REGION,
    ),
    _row(
        "several of the likelihoods above as observed variables over the same rows",
        ["bernoulli_and_student_t"],
        tuna=EXACT,
        flymc=EXACT,
    ),
    _row(
        "several data sets of different lengths sharing parameters (one observed variable each)",
        ["data_sets"],
        tuna=REFUSED,
        flymc=REFUSED,
    ),
    _row(
        "any other smooth likelihood of i.i.d. rows (e.g. `LogNormal`, a mean not affine "
        "in the parameters)",
        ["lognormal", "nonlinear_mean"],
        tuna=REFUSED,
        flymc=REFUSED,
    ),
    _row(
        "a log-likelihood with a kink in the parameters (`Laplace`, `abs(y - mu)`)",
        ["laplace"],
        tuna=REFUSED,
        flymc=REFUSED,
        barker=REFUSED,
    ),
)


# ---------------------------------------------------------------------------- helpers


def step_classes() -> dict[str, type]:
    """The step classes by name, in :data:`STEPS` order."""
    from pymc_minibatch_mh import step_methods

    return {name: getattr(step_methods, name) for name in STEPS}


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("\n", " ") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


_ROLE = re.compile(r":(?:py:)?(\w+):`([^`]+)`")
_DOUBLE_BACKTICKS = re.compile(r"``(.+?)``")


def rst_to_markdown(text: str) -> str:
    """Inline reStructuredText of a docstring as MyST markdown (roles, literals; ``|``
    escaped for table cells)."""
    text = _ROLE.sub(r"{\1}`\2`", text)
    text = _DOUBLE_BACKTICKS.sub(r"`\1`", text)
    text = text.replace("\\", "")
    return text.replace("|", "\\|")


def first_sentence(text: str, shortest: int = 30) -> str:
    """The first sentence of ``text`` (up to the first full stop that ends a sentence,
    outside inline literals), with the next one when it is shorter than ``shortest``
    characters."""
    depth = 0
    for i, char in enumerate(text):
        if char == "`":
            depth ^= 1
        elif char == "." and not depth:
            after = text[i + 1 : i + 2]
            before = text[max(0, i - 4) : i]
            if after not in ("", " ") or before.endswith((".", "e.g", "i.e", "etc", " vs")):
                continue
            if i + 1 < shortest and i + 1 < len(text):
                return text[: i + 1] + " " + first_sentence(text[i + 2 :], 0)
            return text[: i + 1]
    return text


# ---------------------------------------------------------------------------- stats


def stat_dtype(dtype) -> str:
    """A stat's dtype as shown in the table."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        return "object"


def stats_by_step() -> dict[str, dict[str, str]]:
    """``{step: {stat: dtype}}`` from each class's ``stats_dtypes_shapes``."""
    return {
        name: {stat: stat_dtype(spec[0]) for stat, spec in cls.stats_dtypes_shapes.items()}
        for name, cls in step_classes().items()
    }


def all_stats() -> dict[str, str]:
    """Every stat some step reports, with its dtype, in first-seen order."""
    found: dict[str, str] = {}
    for stats in stats_by_step().values():
        for stat, dtype in stats.items():
            found.setdefault(stat, dtype)
    return found


def stats_table(step: str | None = None) -> str:
    """The sample stats of every step (``step=None``: one column per step) or of one."""
    by_step = stats_by_step()
    if step is not None:
        rows = [
            [f"`{stat}`", dtype, rst_to_markdown_plain(STAT_MEANINGS.get(stat, ""))]
            for stat, dtype in by_step[step].items()
        ]
        return _markdown_table(["stat", "dtype", "meaning"], rows)
    rows = []
    for stat, dtype in all_stats().items():
        marks = ["✓" if stat in by_step[name] else "" for name in STEPS]
        rows.append(
            [f"`{stat}`", dtype, *marks, rst_to_markdown_plain(STAT_MEANINGS.get(stat, ""))]
        )
    return _markdown_table(["stat", "dtype", *[f"`{name}`" for name in STEPS], "meaning"], rows)


def rst_to_markdown_plain(text: str) -> str:
    """Markdown text for a table cell (``|`` escaped)."""
    return text.replace("|", "\\|")


# ---------------------------------------------------------------------------- defaults

#: Keywords of every step that only pass PyMC's plumbing through (not tabulated).
PLUMBING = ("model", "rng", "initial_point", "compile_kwargs", "blocked")


@dataclass(frozen=True)
class Keyword:
    """A constructor keyword of a step: its name, default (as shown) and meaning."""

    name: str
    default: str
    meaning: str


def _parameter_texts(cls) -> dict[str, str]:
    """``{keyword: description}`` from the class docstring's Parameters section (numpydoc;
    an entry naming several keywords gives each of them its text)."""
    from numpydoc.docscrape import NumpyDocString

    texts = {}
    for parameter in NumpyDocString(inspect.getdoc(cls) or "")["Parameters"]:
        text = " ".join(line.strip() for line in parameter.desc).strip()
        for name in re.split(r"\s*,\s*", parameter.name.replace("\\", "")):
            if name:
                texts[name.strip()] = text
    return texts


def constructor_defaults(cls) -> dict[str, object]:
    """``{keyword: default}`` of a step's constructor: its own keywords, then those it
    passes to the common base class (``inspect.signature``), plumbing left out."""
    from pymc_minibatch_mh.step_methods.base import MinibatchStep

    defaults: dict[str, object] = {}
    for owner in (cls, MinibatchStep):
        for parameter in inspect.signature(owner.__init__).parameters.values():
            if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                continue
            if parameter.name in ("self", *PLUMBING) or parameter.name in defaults:
                continue
            defaults[parameter.name] = parameter.default
    return defaults


def _shown_default(value) -> str:
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value!r}`"


def steps_per_draw_cases(name: str) -> tuple[tuple[str, int], ...]:
    """The MH steps per PyMC draw of a step called without ``steps_per_draw``, by case,
    read from the class attributes and module constants that set it (the first case is
    the usual one)."""
    from pymc_minibatch_mh.step_methods import austere, firefly
    from pymc_minibatch_mh.step_methods.proposal_mixture import HIGH_DIM

    cls = step_classes()[name]
    flow = (
        "the exact flow on a Gaussian surrogate, with control variates and a Normal prior on "
        "every coordinate",
        cls.flow_steps_per_draw,
    )
    summed = ("a Normal likelihood summed exactly", SUMMED_STEPS_PER_DRAW)
    if name == "MinibatchBarker":
        return (
            ("HMC moves on the surrogate, or a random walk", cls.default_steps_per_draw),
            flow,
            summed,
        )
    if name == "Austere":
        return (
            (f"up to {HIGH_DIM} coordinates", cls.default_steps_per_draw),
            (f"more than {HIGH_DIM} coordinates", austere.HIGH_DIM_STEPS_PER_DRAW),
            flow,
            summed,
        )
    if name == "TunaMH":
        return (
            ("HMC moves on the surrogate, with control variates", cls.default_steps_per_draw),
            ("a random walk, without control variates", cls.random_walk_steps_per_draw),
            flow,
            summed,
        )
    if name == "FlyMC":
        return (
            (
                f"random-walk θ moves, up to {firefly.HMC_ABOVE_DIM} coordinates without a "
                "Normal prior on every coordinate",
                cls.default_steps_per_draw,
            ),
            (
                f"HMC θ moves, above {firefly.HMC_ABOVE_DIM} coordinates or split around a "
                "Normal prior on every coordinate",
                firefly.HMC_STEPS_PER_DRAW,
            ),
            ("HMC on a Normal likelihood summed exactly", SUMMED_STEPS_PER_DRAW),
        )
    raise KeyError(name)


def _steps_text(name: str) -> str:
    return "; ".join(f"{value}: {case}" for case, value in steps_per_draw_cases(name))


def target_accept_text(name: str) -> str:
    """The acceptance rate ``target_accept=None`` stands for, from the class attributes."""
    cls = step_classes()[name]
    if name == "FlyMC":
        from pymc_minibatch_mh.step_methods import firefly

        rates = firefly.GRADIENT_TARGET_ACCEPT
        return (
            f"{rates['hmc']} (HMC θ moves), {cls.default_target_accept} (random walk), "
            f"{rates['mala']} (MALA)"
        )
    return f"{cls.default_target_accept}"


def keyword_defaults(name: str) -> list[Keyword]:
    """The rows of a step's defaults table."""
    classes = step_classes()
    cls = classes[name]
    texts = _parameter_texts(cls)
    shared = _parameter_texts(classes["MinibatchBarker"])
    rows = []
    for keyword, value in constructor_defaults(cls).items():
        if keyword not in texts:
            continue  # a keyword the class does not document does not apply to it
        text = texts[keyword]
        if text.startswith("As for"):
            text = shared.get(keyword, text)
        default = _shown_default(value)
        if keyword == "target_accept":
            default = target_accept_text(name)
        elif keyword == "steps_per_draw":
            default = _steps_text(name)
        rows.append(Keyword(keyword, default, rst_to_markdown(first_sentence(text))))
    return rows


def class_settings(name: str) -> list[Keyword]:
    """Class attributes that fix behaviour no keyword sets."""
    cls = step_classes()[name]
    rows = []
    if hasattr(cls, "group_target_accept") and name != "FlyMC":
        rows.append(
            Keyword(
                "group_target_accept",
                f"{cls.group_target_accept}",
                "acceptance rate the groups' random-walk moves are tuned to in the sweeps "
                "over a multilevel model's groups",
            )
        )
    return rows


def defaults_table(name: str) -> str:
    """A step's constructor keywords (name, default, meaning), then its class settings."""
    rows = [[f"`{k.name}`", k.default, k.meaning] for k in keyword_defaults(name)]
    rows += [[f"`{k.name}` (class attribute)", k.default, k.meaning] for k in class_settings(name)]
    return _markdown_table(["keyword", "default", "meaning"], rows)


def steps_per_draw_table() -> str:
    """MH steps per PyMC draw of every step, by case."""
    rows = [
        [f"`{name}()`", case, str(value)]
        for name in STEPS
        for case, value in steps_per_draw_cases(name)
    ]
    return _markdown_table(["step", "moves", "MH steps per draw"], rows)


def defaults_overview_table() -> str:
    """One row per step: test, usual steps per draw, acceptance targets."""
    classes = step_classes()
    kinds = {
        "MinibatchBarker": "approximate (Barker's test on minibatches)",
        "Austere": "approximate (sequential t-test)",
        "TunaMH": "exact (Poisson minibatches)",
        "FlyMC": "exact (bright rows)",
    }
    rows = []
    for name, cls in classes.items():
        groups = "" if name == "FlyMC" else f"{cls.group_target_accept}"
        rows.append(
            [
                f"`{name}()`",
                kinds[name],
                str(steps_per_draw_cases(name)[0][1]),
                target_accept_text(name),
                groups or "no group sweeps",
            ]
        )
    header = ["step", "test", "MH steps per draw (usual case)", "`target_accept`", "groups' target"]
    return _markdown_table(header, rows)


# ---------------------------------------------------------------------------- support


def support_table() -> str:
    """Which likelihoods each step takes with no arguments, and how exactly."""
    rows = [[row.likelihood, *[row.support[name] for name in STEPS]] for row in FAMILY_SUPPORT]
    table = _markdown_table(["likelihood", *[f"`{name}()`" for name in STEPS]], rows)
    legend = "\n".join(f"* **{level}**: {meaning}." for level, meaning in SUPPORT_LEVELS.items())
    note = (
        "\n`eta` is a linear predictor, affine in the sampled variables (`a + X @ beta`, "
        "`a[group] + X @ beta`); a scale written as a positive free variable is sampled on "
        "the log scale.\n\n"
    )
    return table + note + legend + "\n"


# ---------------------------------------------------------------------------- API


def public_names() -> tuple[list[str], list[str]]:
    """``(package names, diagnostics names)``: ``pymc_minibatch_mh.__all__`` and the names
    of ``pymc_minibatch_mh.diagnostics.__all__`` not exported at the top level."""
    import pymc_minibatch_mh
    from pymc_minibatch_mh import diagnostics

    top = list(pymc_minibatch_mh.__all__)
    extra = [name for name in diagnostics.__all__ if name not in top]
    return top, extra


def api_listing() -> str:
    """Autosummary tables of the public API (one stub page per name)."""
    top, extra = public_names()
    steps = [name for name in STEPS if name in top]
    others = [name for name in top if name not in STEPS]

    def block(module: str, names: list[str]) -> str:
        lines = [
            "```{eval-rst}",
            f".. currentmodule:: {module}",
            "",
            ".. autosummary::",
            "   :toctree: _generated/api",
            "   :nosignatures:",
            "",
            *[f"   {name}" for name in names],
            "```",
        ]
        return "\n".join(lines) + "\n"

    parts = ["## Step methods\n", block("pymc_minibatch_mh", steps)]
    parts += ["\n## Helpers and data\n", block("pymc_minibatch_mh", others)]
    if extra:
        parts += ["\n## Diagnostics\n", block("pymc_minibatch_mh.diagnostics", extra)]
    return "\n".join(parts)


def api_stubs() -> dict[str, str]:
    """``{file name: reStructuredText}``: one page per public name, where the listing's
    autosummary tables link (written here rather than by autosummary, which looks for
    its directives in the pages themselves, not in the included listing)."""
    import pymc_minibatch_mh
    from pymc_minibatch_mh import diagnostics

    top, extra = public_names()
    pages = {}
    for module, names in ((pymc_minibatch_mh, top), (diagnostics, extra)):
        for name in names:
            obj = getattr(module, name)
            full = f"{module.__name__}.{name}"
            directive = "autoclass" if inspect.isclass(obj) else "autofunction"
            pages[f"{full}.rst"] = (
                f"{full}\n{'=' * len(full)}\n\n.. currentmodule:: {module.__name__}\n\n"
                f".. {directive}:: {name}\n"
            )
    return pages


# ---------------------------------------------------------------------------- writing


def tables() -> dict[str, str]:
    """``{file name: markdown}`` of every generated table."""
    found = {
        "sample_stats.md": stats_table(),
        "steps_per_draw.md": steps_per_draw_table(),
        "defaults_overview.md": defaults_overview_table(),
        "support.md": support_table(),
        "api_public.md": api_listing(),
    }
    for name, page in STEPS.items():
        found[f"sample_stats_{page}.md"] = stats_table(name)
        found[f"defaults_{page}.md"] = defaults_table(name)
    return found


HEADER = "<!-- Generated by pymc_minibatch_mh.doc_tables: do not edit. -->\n\n"


def write_tables(directory: str | Path) -> list[Path]:
    """Write every table into ``directory`` and the API pages into ``directory/api``;
    files whose contents are unchanged are left alone (so Sphinx does not rebuild the pages
    that include them). Returns the paths."""
    directory = Path(directory)
    files = {name: HEADER + text for name, text in tables().items()}
    files.update({f"api/{name}": text for name, text in api_stubs().items()})
    stale = set((directory / "api").glob("*.rst")) - {directory / name for name in files}
    for path in stale:  # a name no longer public
        path.unlink()
    paths = []
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":  # pragma: no cover - a convenience for writers
    for written in write_tables(sys.argv[1] if len(sys.argv) > 1 else "docs/_generated"):
        print(written)
