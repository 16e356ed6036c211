"""The family registry: one record per family, read by every layer.

Checks: lookups by name and by capability (with clear errors for an unknown name or
attribute), the records' capabilities agree with each other, each record's parameters are
exactly what the family's numpy density reads (negative control: one left out fails), the
support sentence of refusals names every family, and the families layer imports neither
PyMC nor PyTensor.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pymc_minibatch_mh.families import (
    FAMILY_RECORDS,
    family_described,
    family_label,
    family_record,
    names_where,
    support_sentence,
)
from pymc_minibatch_mh.likelihood.glm_likelihoods import family_loglik

#: A value of each parameter inside its support (``n`` trials, positive scales, odds).
_VALUES = {"n": 5.0, "nu": 4.0, "sigma": 1.3, "alpha": 2.0, "odds": 1.5}
#: Observations inside every scalar family's support: counts <= n, a Beta's (0, 1), a Gamma's > 0.
_Y = {"beta_logit": np.array([0.2, 0.5, 0.9]), "gamma_log": np.array([0.5, 1.0, 3.0])}


def test_lookup_by_name_and_by_capability():
    assert family_record("poisson_log").label == "Poisson"
    assert family_label("zinb_log") == "ZeroInflatedNegativeBinomial"
    assert family_label("no_such_family") == "no_such_family"
    # Three families share PyMC's label; prose names their links.
    assert family_described("bernoulli_probit") == "Bernoulli (probit link)"
    assert family_described("bernoulli_cloglog") == "Bernoulli (complementary log-log link)"
    assert family_described("poisson_log") == "Poisson"
    assert names_where(ordinal=True) == ("ordered_logistic", "ordered_probit")
    assert names_where(odds_channel=True) == ("zinb_log", "hurdle_nb_log")
    assert set(names_where(lipschitz="box")) == {"poisson_log", "normal"}
    with pytest.raises(ValueError, match="Unknown likelihood family 'logit'.*bernoulli_logit"):
        family_record("logit")
    with pytest.raises(TypeError, match="no attribute"):
        names_where(exact=True)


def test_capabilities_agree_with_each_other():
    codes = [r.compiled_code for r in FAMILY_RECORDS.values() if r.compiled_code is not None]
    assert len(codes) == len(set(codes))
    for name, record in FAMILY_RECORDS.items():
        assert record.name == name and record.label and record.written
        if record.odds_channel:
            assert record.negative_binomial_counts and record.scale == "alpha", name
            assert "odds" in record.parameters, name
        if record.ordinal:
            assert record.unbounded_curvature and record.firefly_region, name
        if record.firefly_region:
            assert record.firefly_bound, name
        if record.row_scale:
            assert record.location_scale and record.scale == "sigma", name
        if record.scale is not None and record.scale != "odds":
            assert record.scale in record.parameters, name
        assert record.lipschitz in (None, "global", "box"), name


@pytest.mark.parametrize(
    "name",
    [n for n, r in FAMILY_RECORDS.items() if r.scalar_rows and not r.ordinal],
)
def test_parameters_are_what_the_density_reads(name):
    """With the record's parameters the numpy density is finite; without any one of them
    it fails (so the record lists nothing it does not need and misses nothing)."""
    record = family_record(name)
    eta = np.array([-0.4, 0.1, 0.7])
    y = _Y.get(name, np.array([0.0, 1.0, 3.0]))
    params = {p: _VALUES[p] for p in record.parameters}
    assert np.all(np.isfinite(family_loglik(name, eta, y, params)))
    for left_out in record.parameters:
        fewer = {p: v for p, v in params.items() if p != left_out}
        with pytest.raises(KeyError):
            family_loglik(name, eta, y, fewer)


def test_the_support_sentence_names_every_family():
    sentence = support_sentence()
    for record in FAMILY_RECORDS.values():
        assert record.label in sentence, record.name
        assert record.written in sentence, record.name


def test_the_families_layer_imports_neither_pymc_nor_pytensor():
    code = (
        "import sys; import pymc_minibatch_mh.families as f; "
        "assert f.FAMILY_RECORDS; "
        "print(sorted(m for m in ('pymc', 'pytensor') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out


def test_family_numerics_modules_share_one_interface():
    """Each family marked ``numerics`` is a module with the same three functions and the
    same parameters; a family without the mark has none (negative control)."""
    import inspect

    from pymc_minibatch_mh.families.registry import NUMERICS_INTERFACE, family_numerics

    with_numerics = [n for n, r in FAMILY_RECORDS.items() if r.numerics]
    assert {"bernoulli_probit", "bernoulli_cloglog", "poisson_log"} <= set(with_numerics)
    signatures = {}
    for name in with_numerics:
        module = family_numerics(name)
        assert module.__name__ == f"pymc_minibatch_mh.families.{name}"
        for function in NUMERICS_INTERFACE:
            signatures.setdefault(function, set()).add(
                tuple(inspect.signature(getattr(module, function)).parameters)
            )
    assert all(len(forms) == 1 for forms in signatures.values()), signatures
    assert family_numerics("bernoulli_logit") is None
    with pytest.raises(ValueError, match="Unknown likelihood family"):
        family_numerics("logit")
