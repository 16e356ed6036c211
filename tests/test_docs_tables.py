"""The documentation's generated tables against the code, and the hand-written pages
against both (pymc_minibatch_mh.doc_tables; docs/conf.py writes the tables at build time).

* The tables must be complete: every sample stat explained, every documented keyword and
  its default shown, every likelihood family the recogniser knows placed in the support
  table, every public name listed.
* The support table must say what the steps do: each step is built on a small model of
  each row (N = 200, construction only) and must accept or refuse it, exactly or on a
  trust region, as the table says (a fast subset by default, the whole table with
  ``-m slow``).
* The pages must include the generated tables, not copies of them, and what they say by
  hand about sample stats and MH steps per draw must agree with the code.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import doc_tables
from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.doc_tables import (
    APPROXIMATE,
    EXACT,
    FAMILY_SUPPORT,
    REFUSED,
    REGION,
    STAT_MEANINGS,
    STEPS,
    SUMMED,
)
from pymc_minibatch_mh.likelihood.affine_maps import INDEXED_MIN_COLUMNS
from pymc_minibatch_mh.likelihood.glm_likelihoods import UnsupportedLikelihood
from pymc_minibatch_mh.step_methods.reference import NoLaplaceFit

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
N = 200


def hand_written_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_generated" not in p.parts)


def page_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- stats


def test_every_stat_has_a_meaning():
    missing = sorted(set(doc_tables.all_stats()) - set(STAT_MEANINGS))
    assert not missing, f"sample stats without an entry in doc_tables.STAT_MEANINGS: {missing}"


def test_every_meaning_has_a_stat():
    unused = sorted(set(STAT_MEANINGS) - set(doc_tables.all_stats()))
    assert not unused, f"doc_tables.STAT_MEANINGS explains stats no step reports: {unused}"


def test_stats_table_marks_the_steps_that_report_each_stat():
    table = doc_tables.stats_table()
    classes = doc_tables.step_classes()
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        stat = cells[0].strip("`")
        for name, mark in zip(STEPS, cells[2 : 2 + len(STEPS)], strict=True):
            assert (mark == "✓") == (stat in classes[name].stats_dtypes_shapes), (stat, name)


# ---------------------------------------------------------------------------- defaults

#: Keywords of the common base class a step's docstring leaves out on purpose.
NOT_APPLICABLE = {"FlyMC": {"control_variates", "recentre"}}


@pytest.mark.parametrize("name", list(STEPS))
def test_defaults_table_shows_every_documented_keyword(name):
    cls = doc_tables.step_classes()[name]
    signature = doc_tables.constructor_defaults(cls)
    rows = {row.name: row for row in doc_tables.keyword_defaults(name)}
    undocumented = set(signature) - set(rows) - NOT_APPLICABLE.get(name, set())
    assert not undocumented, f"{name} takes keywords its docstring does not document"
    for keyword, row in rows.items():
        assert row.meaning, (name, keyword)
        if keyword not in ("target_accept", "steps_per_draw"):
            assert row.default == doc_tables._shown_default(signature[keyword]), keyword


@pytest.mark.parametrize("name", list(STEPS))
def test_defaults_table_reads_the_class_attributes(name):
    cls = doc_tables.step_classes()[name]
    table = doc_tables.defaults_table(name)
    assert f"| {cls.default_target_accept}" in table or name == "FlyMC"
    cases = doc_tables.steps_per_draw_cases(name)
    assert cases[0][1] == cls.default_steps_per_draw
    if name != "FlyMC":
        assert f"| {cls.group_target_accept} |" in table


def quick_model(kind: str, dims: int = 2):
    """Regressions evaluated with numpy (nothing compiled): a Bernoulli with Normal priors
    (``"flow"``) or Student-t priors (``"bernoulli"``), a Normal with a free scale."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(N, dims))
    with pm.Model() as model:
        if kind == "flow":
            beta = pm.Normal("beta", 0, 3, shape=dims)
        else:
            beta = pm.StudentT("beta", nu=5, mu=0, sigma=3, shape=dims)
        eta = x @ beta
        if kind == "normal":
            sigma = pm.HalfNormal("sigma", 2)
            pm.Normal("y", eta, sigma, observed=x @ np.full(dims, 0.5) + rng.normal(size=N))
        else:
            p = 1 / (1 + np.exp(-x @ np.full(dims, 0.5)))
            pm.Bernoulli("y", logit_p=eta, observed=(rng.random(N) < p).astype(int))
    return model


def case_value(name: str, words: str) -> int:
    """The value of the steps-per-draw case of ``name`` whose text contains ``words``."""
    matches = [value for case, value in doc_tables.steps_per_draw_cases(name) if words in case]
    assert len(matches) == 1, (name, words)
    return matches[0]


STEPS_PER_DRAW_CASES = [
    # (model, dimensions, keywords, step, words of the case it falls in)
    ("bernoulli", 2, {}, "MinibatchBarker", "HMC moves on the surrogate"),
    ("bernoulli", 2, {}, "Austere", "up to"),
    ("bernoulli", 2, {}, "TunaMH", "HMC moves on the surrogate"),
    ("bernoulli", 2, {}, "FlyMC", "random-walk θ moves"),
    ("bernoulli", 2, {"control_variates": False}, "TunaMH", "random walk, without"),
    ("bernoulli", 21, {}, "Austere", "more than"),
    ("bernoulli", 21, {}, "FlyMC", "HMC θ moves"),
    ("flow", 2, {}, "MinibatchBarker", "exact flow"),
    ("flow", 2, {}, "Austere", "exact flow"),
    ("flow", 2, {}, "TunaMH", "exact flow"),
    ("flow", 2, {}, "FlyMC", "HMC θ moves"),
    ("normal", 2, {}, "MinibatchBarker", "summed exactly"),
    ("normal", 2, {}, "Austere", "summed exactly"),
    ("normal", 2, {}, "TunaMH", "summed exactly"),
    ("normal", 2, {}, "FlyMC", "summed exactly"),
]


@pytest.mark.parametrize(("kind", "dims", "keywords", "name", "words"), STEPS_PER_DRAW_CASES)
def test_steps_per_draw_cases_by_construction(kind, dims, keywords, name, words):
    model = quick_model(kind, dims)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = doc_tables.step_classes()[name](progressbar=False, **keywords)
    assert step.steps_per_draw == case_value(name, words)


# ---------------------------------------------------------------------------- API


def test_api_listing_is_the_public_api():
    import pymc_minibatch_mh
    from pymc_minibatch_mh import diagnostics

    listing = doc_tables.api_listing()
    listed = set(re.findall(r"^   (\w+)$", listing, flags=re.MULTILINE))
    assert listed == set(pymc_minibatch_mh.__all__) | set(diagnostics.__all__)
    stubs = doc_tables.api_stubs()
    assert len(stubs) == len(listed)


def test_api_page_has_no_internals():
    text = page_text(DOCS / "api.md")
    assert "_generated/api_public.md" in text
    internals = re.findall(r"\.\. auto(?:module|function|class)::\s*(\S+)", text)
    assert not internals, f"api.md documents objects by hand: {internals}"
    assert "zinb_third_derivatives" not in text


# ---------------------------------------------------------------------------- support

FAMILY_LEVELS = (EXACT, REGION, SUMMED, APPROXIMATE, REFUSED)


def test_support_table_uses_known_levels():
    for row in FAMILY_SUPPORT:
        assert set(row.support) == set(STEPS), row.likelihood
        assert set(row.support.values()) <= set(FAMILY_LEVELS), row.likelihood


def test_support_table_covers_every_recognised_family():
    from pymc_minibatch_mh.families import FAMILY_RECORDS

    covered = {family for row in FAMILY_SUPPORT for family in row.families}
    assert covered == set(FAMILY_RECORDS), "a family the registry holds is missing in the table"


def test_support_table_agrees_with_the_family_records():
    """What each family's record says the exact steps can do, against the table (fast, no
    models): every registered family has TunaMH's remainder bound; families whose third
    derivative is unbounded need TunaMH's trust region; FlyMC refuses a family with a bound
    only in one grouped case."""
    from pymc_minibatch_mh.families import family_record

    for row in FAMILY_SUPPORT:
        for family in row.families:
            record = family_record(family)
            assert row.support["TunaMH"] != REFUSED, row.likelihood
            if record.unbounded_curvature:
                assert row.support["TunaMH"] == REGION, row.likelihood
            if record.firefly_bound and row.support["FlyMC"] == REFUSED:
                assert "group" in row.likelihood, row.likelihood  # FlyMC's one exception


def _data(rng, x):
    return {
        "logit": 1 / (1 + np.exp(-(0.3 + 0.8 * x))),
        "mean": np.exp(0.5 + 0.4 * x),
    }


def build_model(variant: str) -> pm.Model:
    """The small model (N = 200, two coefficients) of a support-table variant."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=N)
    d = _data(rng, x)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3)
        eta = a + b * x
        if variant == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=(rng.random(N) < d["logit"]).astype(int))
        elif variant == "bernoulli_probit":
            y = (rng.random(N) < d["logit"]).astype(int)
            pm.Bernoulli("y", p=pm.math.invprobit(eta), observed=y)
        elif variant == "bernoulli_cloglog":
            y = (rng.random(N) < d["logit"]).astype(int)
            pm.Bernoulli("y", p=1 - pm.math.exp(-pm.math.exp(eta)), observed=y)
        elif variant == "binomial":
            pm.Binomial("y", n=5, logit_p=eta, observed=rng.binomial(5, d["logit"]))
        elif variant == "categorical":
            features = np.column_stack([x, rng.normal(size=N)])
            w = pm.Normal("w", 0, 3, shape=(2, 3))
            c = pm.Normal("c", 0, 3, shape=3)
            pm.Categorical("y", logit_p=features @ w + c, observed=rng.integers(0, 3, N))
        elif variant.startswith(("normal", "student_t")):
            y = 1.0 - 0.5 * x + rng.standard_t(5, N)
            if variant.endswith("fixed_scale"):
                sigma = 1.0
            elif variant.endswith("free_scale") or variant.endswith("free_nu"):
                sigma = pm.HalfNormal("sigma", 2) if variant.endswith("free_scale") else 1.0
            else:  # a free scale per row, log-affine
                z = rng.normal(size=N)
                sigma = pm.math.exp(pm.Normal("c0", 0, 2) + pm.Normal("g", 0, 1) * z)
            if variant.startswith("normal"):
                pm.Normal("y", eta, sigma, observed=y)
            else:
                nu = pm.Gamma("nu", 2, 0.1) if variant.endswith("free_nu") else 4.0
                pm.StudentT("y", nu=nu, mu=eta, sigma=sigma, observed=y)
        elif variant == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=rng.poisson(d["mean"]))
        elif variant == "poisson_groups":
            groups = 2 * INDEXED_MIN_COLUMNS
            group = np.arange(N) % groups
            effect = pm.Normal("effect", 0, 1, shape=groups)
            mu = pm.math.exp(effect[group] + b * x)
            pm.Poisson("y", mu=mu, observed=rng.poisson(d["mean"]))
        elif variant.startswith("negative_binomial"):
            alpha = pm.Exponential("alpha", 1) if variant.endswith("free") else 2.0
            y = rng.negative_binomial(2, 2 / (2 + d["mean"]))
            pm.NegativeBinomial("y", mu=pm.math.exp(eta), alpha=alpha, observed=y)
        elif variant.startswith("gamma"):
            shape = pm.Gamma("shape", 2, 0.5) if variant.endswith("free") else 4.0
            y = rng.gamma(4.0, d["mean"] / 4.0)
            pm.Gamma("y", alpha=shape, beta=shape / pm.math.exp(eta), observed=y)
        elif variant.startswith("beta"):
            nu = pm.HalfNormal("nu", 20) if variant.endswith("free") else 6.0
            y = np.clip(rng.beta(6 * d["logit"], 6 * (1 - d["logit"])), 1e-6, 1 - 1e-6)
            pm.Beta("y", mu=pm.math.invlogit(eta), nu=nu, observed=y)
        elif variant.startswith(("zip", "hurdle_poisson")):
            psi = pm.Beta("psi", 2, 2) if variant.endswith("free") else 0.7
            y = np.where(rng.random(N) < 0.7, rng.poisson(d["mean"]), 0)
            dist = pm.ZeroInflatedPoisson if variant.startswith("zip") else pm.HurdlePoisson
            dist("y", psi=psi, mu=pm.math.exp(eta), observed=y)
        elif variant.startswith(("zinb", "hurdle_nb")):
            free = variant.endswith("free")
            psi = pm.Beta("psi", 2, 2) if free else 0.7
            alpha = pm.Exponential("alpha", 0.25) if free else 4.0
            counts = rng.negative_binomial(4, 4 / (4 + d["mean"]))
            y = np.where(rng.random(N) < 0.7, counts, 0)
            dist = (
                pm.ZeroInflatedNegativeBinomial
                if variant.startswith("zinb")
                else pm.HurdleNegativeBinomial
            )
            dist("y", psi=psi, mu=pm.math.exp(eta), alpha=alpha, observed=y)
        elif variant.startswith("ordered"):
            latent = 0.8 * x + rng.logistic(size=N)
            y = np.searchsorted(np.array([-1.0, 0.2, 1.1]), latent)
            cutpoints = pm.Normal(
                "cutpoints",
                mu=[-1.0, 0.0, 1.0],
                sigma=3.0,
                shape=3,
                transform=pm.distributions.transforms.ordered,
            )
            dist = pm.OrderedLogistic if variant.endswith("logistic") else pm.OrderedProbit
            dist("y", eta=a * rng.normal(size=N) + b * x, cutpoints=cutpoints, observed=y)
        elif variant == "bernoulli_and_student_t":
            pm.Bernoulli("y", logit_p=eta, observed=(rng.random(N) < d["logit"]).astype(int))
            pm.StudentT("z", nu=4, mu=a - b * x, sigma=1.0, observed=rng.standard_t(4, N))
        elif variant == "data_sets":
            pm.Bernoulli("y", logit_p=eta, observed=(rng.random(N) < d["logit"]).astype(int))
            short = rng.normal(size=N // 2)
            y_short = 0.2 - 0.5 * short + rng.normal(size=short.size)
            pm.Normal("z", a - b * short, 1.0, observed=y_short)
        elif variant == "lognormal":
            pm.LogNormal("y", eta, 1.0, observed=np.exp(0.3 + 0.5 * x + rng.normal(size=N)))
        elif variant == "nonlinear_mean":
            y = 2.0 * np.exp(0.3 * x) + rng.normal(size=N)
            pm.Normal("y", a * pm.math.exp(b * x), 1.0, observed=y)
        elif variant == "laplace":
            pm.Laplace("y", eta, 1.0, observed=1.0 + x + rng.laplace(size=N))
        else:
            raise KeyError(variant)
    return model


def observed_support(step) -> str:
    """The support level a constructed step shows (read from its private state)."""
    bound = getattr(step, "bound", None)
    if step._exact_sum is not None or getattr(bound, "exact", False):
        return SUMMED
    if type(step).__name__ in ("MinibatchBarker", "Austere"):
        return APPROXIMATE
    return REGION if getattr(bound, "region", None) is not None else EXACT


ALL_VARIANTS = [(variant, row) for row in FAMILY_SUPPORT for variant in row.variants]
#: Evaluated with numpy or refused early, so cheap to build (about 0.1-0.8 s per step);
#: the others compile their functions (1-2 s per model with warm caches, 15 s and more
#: on a first run).
QUICK_VARIANTS = ("bernoulli", "normal_fixed_scale", "normal_free_scale", "poisson", "laplace")


def test_every_variant_has_a_model():
    for variant, _ in ALL_VARIANTS:
        assert isinstance(build_model(variant), pm.Model)
    assert set(QUICK_VARIANTS) <= {variant for variant, _ in ALL_VARIANTS}


#: The exceptions a step refuses a model with; any other error is a crash, not a refusal.
REFUSALS = (UnsupportedLikelihood, UnsupportedBound, NoLaplaceFit)


def refusal_problem(step_name: str, err: Exception) -> str | None:
    """Why ``err`` is not a refusal in the user's words (None if it is one): it must be a
    refusal type and name another step (or NUTS) that applies."""
    if not isinstance(err, REFUSALS):
        return f"{step_name} crashed with {type(err).__name__}: {err}"
    others = [name for name in (*doc_tables.step_classes(), "NUTS") if name != step_name]
    if not any(name in str(err) for name in others):
        return f"{step_name}'s refusal names no step that applies: {err}"
    return None


def check_support(variant: str, row) -> None:
    model = build_model(variant)
    found = {}
    for name, cls in doc_tables.step_classes().items():
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                step = cls(progressbar=False)
            except ValueError as err:
                problem = refusal_problem(name, err)
                assert problem is None, f"{variant}: {problem}"
                found[name] = REFUSED
                continue
        found[name] = observed_support(step)
    assert found == dict(row.support), f"{variant}: the code does {found}"


def test_refusal_check_rejects_crashes_and_refusals_naming_nothing():
    """Negative controls of :func:`refusal_problem`."""
    assert refusal_problem("TunaMH", UnsupportedLikelihood("use MinibatchBarker()")) is None
    assert "crashed" in refusal_problem("TunaMH", ValueError("operands could not broadcast"))
    assert "names no step" in refusal_problem("TunaMH", UnsupportedLikelihood("TunaMH cannot"))


@pytest.mark.parametrize(
    ("variant", "row"),
    [pytest.param(v, r, id=v) for v, r in ALL_VARIANTS if v in QUICK_VARIANTS],
)
def test_support_by_construction(variant, row):
    check_support(variant, row)


#: Variants on which a step crashes instead of doing what the table says (a bug to fix in
#: the step, not in the table; strict, so the entry must go once it is fixed).
KNOWN_BUGS: dict[str, str] = {}


def _slow_param(variant, row):
    marks = [pytest.mark.slow]
    if variant in KNOWN_BUGS:
        marks.append(
            pytest.mark.xfail(strict=True, raises=AttributeError, reason=KNOWN_BUGS[variant])
        )
    return pytest.param(variant, row, id=variant, marks=marks)


@pytest.mark.parametrize(
    ("variant", "row"),
    [_slow_param(v, r) for v, r in ALL_VARIANTS if v not in QUICK_VARIANTS],
)
def test_support_by_construction_every_family(variant, row):
    check_support(variant, row)


# ---------------------------------------------------------------------------- pages


def includes(text: str) -> set[str]:
    """Names of the generated files a page includes."""
    return set(re.findall(r"```\{include\}\s+\S*_generated/([\w.]+)", text))


def test_every_generated_table_is_included_by_a_page():
    included = set().union(*(includes(page_text(p)) for p in hand_written_pages()))
    missing = sorted(set(doc_tables.tables()) - included)
    assert not missing, f"generated tables no page includes: {missing}"


@pytest.mark.parametrize("page", list(STEPS.values()))
def test_method_pages_include_their_tables(page):
    found = includes(page_text(DOCS / "methods" / f"{page}.md"))
    assert {f"defaults_{page}.md", f"sample_stats_{page}.md"} <= found


def test_choosing_page_includes_support_and_defaults():
    found = includes(page_text(DOCS / "choosing.md"))
    assert {"support.md", "defaults_overview.md"} <= found


def table_rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row in ``text``."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("|") and line.endswith("|") and not set(line) <= set("|-: "):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def copied_tables(text: str) -> list[str]:
    """Rows of generated tables pasted into ``text``."""
    generated = set()
    for table in doc_tables.tables().values():
        generated |= {tuple(row) for row in table_rows(table)[1:]}
    return [" | ".join(row) for row in table_rows(text) if tuple(row) in generated]


def hand_written_defaults(text: str) -> list[str]:
    """Rows of hand-written tables with a "default" column that name a step keyword."""
    keywords = set()
    for cls in doc_tables.step_classes().values():
        keywords |= set(doc_tables.constructor_defaults(cls))
    found, header = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip().lower() for cell in line.strip("|").split("|")]
        if header is None:
            header = cells
            continue
        names = set(re.findall(r"`(\w+)`", cells[0]))
        if "default" in header and names & keywords:
            found.append(line)
    return found


@pytest.mark.parametrize("path", hand_written_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_pages_hold_no_copies_of_generated_tables(path):
    text = page_text(path)
    assert not copied_tables(text), "include the generated table instead of copying it"
    assert not hand_written_defaults(text), (
        "a hand-written table of keyword defaults: include the generated defaults table"
    )


STAT_AFTER = re.compile(
    r"\b(?:sample\s+)?stats?\b(?:\s+per\s+draw)?:?\s*"
    r"((?:`\w+`(?:\s*\([^()]*\))?(?:,\s*|,?\s+and\s+|,?\s+or\s+)?)+)",
    flags=re.IGNORECASE,
)
STAT_BEFORE = re.compile(r"`(\w+)`\s+(?:sample\s+)?stats?\b")
STAT_INDEX = re.compile(r"(?:sample_stats|stats)\s*\[\s*[\"'](\w+)[\"']\s*\]")


def stat_names(text: str) -> set[str]:
    """Names a page uses as sample stats."""
    names = set(STAT_BEFORE.findall(text)) | set(STAT_INDEX.findall(text))
    for listing in STAT_AFTER.findall(text):
        names |= set(re.findall(r"`(\w+)`", re.sub(r"\([^()]*\)", "", listing)))
    return names


@pytest.mark.parametrize("path", hand_written_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_pages_name_existing_stats(path):
    unknown = sorted(stat_names(page_text(path)) - set(doc_tables.all_stats()))
    assert not unknown, f"{path.name} names sample stats no step reports: {unknown}"


NUMBERS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten".split(), start=0
    )
}
STEPS_PER_DRAW = re.compile(
    r"\b(\d+|" + "|".join(NUMBERS) + r")\s+(?:MH\s+|inner\s+|FlyMC\s+)?"
    r"(?:\$[^$]*\$\s+)?(?:HMC\s+)?(?:steps?|iterations?|tests?|updates?|moves?|transitions?)"
    r"(?:\s+\([^()]*\))?\s+(?:per\s+(?:PyMC\s+)?draw|make\s+a\s+draw)",
    flags=re.IGNORECASE,
)
STEP_IN_TABLE = re.compile(r"\b(\d+)\s+\(`?(MinibatchBarker|Austere|TunaMH|FlyMC)")
#: Words that say a number is for a particular case, not the usual default.
QUALIFIERS = (
    "random walk",
    "random-walk",
    "hmc",
    "flow",
    "summed",
    "normal",
    "coordinates",
    "dimensions",
    "measured",
    "steps_per_draw=",
    "with one",
    "setting",
)


def sentences(text: str) -> list[str]:
    """Table rows and sentences (roughly) of a page."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        if paragraph.lstrip().startswith("|"):
            found += paragraph.splitlines()
        else:
            found += re.split(r"(?<=[.!?])\s+(?=[A-Z`*])", " ".join(paragraph.split()))
    return found


def steps_per_draw_claims(text: str, page_step: str | None = None):
    """``(step, number, qualified, sentence)`` for each statement of MH steps per draw."""
    claims = []
    for sentence in sentences(text):
        if not re.search(r"per (?:PyMC )?draw|make a draw|steps_per_draw", sentence):
            continue
        for match in STEP_IN_TABLE.finditer(sentence):
            claims.append((match[2], int(match[1]), False, sentence))
        for match in STEPS_PER_DRAW.finditer(sentence):
            word = match[1].lower()
            number = NUMBERS[word] if word in NUMBERS else int(word)
            before = sentence[: match.start()]
            named = [(before.rfind(name), name) for name in STEPS if before.rfind(name) >= 0]
            step = max(named)[1] if named else page_step
            if step is None:
                continue
            qualified = any(q in sentence.lower() for q in QUALIFIERS)
            claims.append((step, number, qualified, sentence))
    return claims


def wrong_steps_per_draw(text: str, page_step: str | None = None) -> list[str]:
    problems = []
    for step, number, qualified, sentence in steps_per_draw_claims(text, page_step):
        cases = doc_tables.steps_per_draw_cases(step)
        allowed = {value for _, value in cases} if qualified else {cases[0][1]}
        if number not in allowed:
            problems.append(
                f"{step}: {number} steps per draw (code: {sorted(allowed)}): {sentence}"
            )
    return problems


def page_step(path: Path) -> str | None:
    pages = {page: name for name, page in STEPS.items()}
    return pages.get(path.stem) if path.parent.name == "methods" else None


@pytest.mark.parametrize("path", hand_written_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_pages_state_steps_per_draw_as_the_code(path):
    problems = wrong_steps_per_draw(page_text(path), page_step(path))
    assert not problems, "\n".join(problems)


def test_page_checks_catch_known_mistakes():
    """The checks above find what they are for (the lines the pages once had)."""
    old_options = (
        "| `steps_per_draw` | 3 (MinibatchBarker), 1 (Austere), 5 (TunaMH), 10 (FlyMC) | "
        "MH steps per PyMC draw |"
    )
    assert any("TunaMH: 5" in p for p in wrong_steps_per_draw(old_options))
    assert wrong_steps_per_draw("TunaMH makes four MH steps per draw.")
    assert not wrong_steps_per_draw(
        "TunaMH makes two MH steps per draw (five with random-walk moves)."
    )
    assert stat_names("Stats per draw: `accepted`, `n_shiny` (after the draw).") == {
        "accepted",
        "n_shiny",
    }
    assert "n_shiny" in stat_names('idata.sample_stats["n_shiny"].mean()')
    copy = doc_tables.steps_per_draw_table()
    assert copied_tables(copy)
    assert hand_written_defaults(
        "| knob | default | meaning |\n|---|---|---|\n| `chi` | tuned | x |"
    )


RECOMMENDS = re.compile(r"recommend", flags=re.IGNORECASE)


@pytest.mark.parametrize("path", hand_written_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_pages_recommend_one_default_step(path):
    """A sentence that recommends a step recommends MinibatchBarker() (named in it, or the
    subject of its method page)."""
    subject = page_step(path) or ""
    for sentence in sentences(page_text(path)):
        if not RECOMMENDS.search(sentence):
            continue
        others = [name for name in STEPS if name != "MinibatchBarker" and name in sentence]
        assert "MinibatchBarker" in sentence + subject or not others, sentence
