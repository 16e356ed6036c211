"""bench many: its cases and data, the extra table columns, the report, the CLI wiring and
the numpyro version of the hierarchical model (same columns as PyMC's)."""

import importlib.util
import json

import numpy as np
import pytest

from pymc_minibatch_mh.bench import many
from pymc_minibatch_mh.bench.__main__ import main
from pymc_minibatch_mh.bench.peer_runs import DRAW_ORDER, OUR_STEPS, _pymc_model, stack_draws
from pymc_minibatch_mh.bench.peers import (
    MIN_GROUP_ROWS,
    PEER,
    REFERENCE,
    PeerCase,
    _rows,
    _run_one,
    case_data,
    failure,
    group_labels,
)

ALL_METHODS = {"pymc-nuts", REFERENCE, PEER, *OUR_STEPS}


def _tiny_groups(n=2000, groups=8, **kwargs):
    return PeerCase(
        "tiny groups", n, 2, kind="hierarchical", groups=groups, unbalanced=True, **kwargs
    )


def test_unbalanced_groups_are_all_present_and_unequal():
    case = _tiny_groups(100_000, 500)
    data = case_data(case, seed=3)
    assert data["x"].shape == (case.n, case.d) and data["y"].shape == (case.n,)
    counts = np.bincount(data["group"], minlength=case.groups)
    assert counts.size == case.groups and counts.min() >= MIN_GROUP_ROWS
    # A few groups hold many rows, many hold few; balanced labels do not spread so.
    assert counts.max() > 10 * np.median(counts)
    balanced = np.bincount(group_labels(case.n, case.groups, False, np.random.default_rng(3)))
    assert balanced.max() < 2 * np.median(balanced)
    # Rows of every group are spread over the file, not stored group by group.
    assert np.mean(np.diff(data["group"]) == 0) < 0.1


def test_balanced_hierarchical_data_are_unchanged_by_the_new_fields():
    old = PeerCase("h", 3000, 3, kind="hierarchical")
    data = case_data(old, seed=5)
    rng = np.random.default_rng(5)
    rng.normal(size=(3000, 3))  # x
    rng.normal(0.0, 0.5, size=3)  # beta
    assert np.array_equal(data["group"], rng.integers(0, 20, size=3000))


def test_too_few_rows_for_the_group_floor_are_refused():
    with pytest.raises(ValueError, match="at least"):
        group_labels(MIN_GROUP_ROWS * 10 - 1, 10, True, np.random.default_rng(0))


def test_many_cases_run_every_method_against_the_right_reference():
    full_groups, full_logistic, centred, noncentred, lkj = many.FULL_CASES
    assert (full_groups.n, full_groups.d, full_groups.groups) == (1_000_000, 2, 500)
    assert full_groups.unbalanced and (full_groups.tune, full_groups.draws) == (500, 1000)
    assert (full_logistic.kind, full_logistic.n, full_logistic.d) == ("logistic", 100_000, 100)
    assert (centred.kind, noncentred.kind, lkj.kind) == ("users", "users_noncentred", "lkj_slopes")
    for users in (centred, noncentred):
        assert (users.n, users.groups, users.unbalanced) == (1_000_000, 2_000, True)
    assert lkj.n == 1_000_000
    for case in many.FULL_CASES + many.QUICK_CASES:
        assert set(case.methods) == ALL_METHODS and len(case.methods) == len(ALL_METHODS)
        assert case.reference == ("pymc-nuts" if case.kind != "logistic" else REFERENCE)
    assert all(case.n <= 20_000 and case.draws <= 300 for case in many.QUICK_CASES)
    # The peers cases keep their methods: no numpyro run on the Normal kinds there.
    assert PeerCase("h", 100, 3, kind="hierarchical").methods == ["pymc-nuts", *OUR_STEPS]


def _fake_run(rng, mean, wall, *, columns=3):
    return {
        "draws": mean + rng.standard_normal((2, 400, columns)),
        "import_s": 1.0,
        "setup_s": 1.0,
        "sampling_s": wall - 2.0,
        "rows_per_draw": 50.0,
        "wall_s": wall,
    }


def test_rows_give_the_share_of_n_and_the_ratio_to_either_nuts(rng):
    runs = {
        "pymc-nuts": _fake_run(rng, 0.0, 40.0),
        REFERENCE: _fake_run(rng, 0.0, 20.0),
        "TunaMH": _fake_run(rng, 0.0, 10.0),
    }
    rows = {row["method"]: row for row in _rows(runs, "pymc-nuts", n=1000)}
    tuna = rows["TunaMH"]
    assert tuna["rows_share"] == pytest.approx(0.05)
    assert tuna["x_pymc_nuts"] == pytest.approx(tuna["ess_per_s"] / rows["pymc-nuts"]["ess_per_s"])
    assert tuna["x_numpyro_nuts"] == pytest.approx(tuna["ess_per_s"] / rows[REFERENCE]["ess_per_s"])
    assert "max_mean_err_sd" in rows[REFERENCE] and "max_mean_err_sd" not in rows["pymc-nuts"]
    assert "rows_share" not in _rows(runs, "pymc-nuts")[0]


def test_many_report_names_its_columns_and_references(tmp_path, rng):
    cases = []
    for case in many.QUICK_CASES:
        runs = {method: _fake_run(rng, 0.0, 10.0) for method in case.methods}
        cases.append({"case": case.__dict__, "rows": _rows(runs, case.reference, n=case.n)})
    result = {"cases": cases, "stack": {"python": "3.x", "cache": "warm"}, "experiment": "many"}
    paths = many.write_many_reports(result, tmp_path, suffix="-test")
    assert [p.name for p in paths] == ["many-test.md", "many-test.json", "many-test.png"]
    assert json.loads(paths[1].read_text())["experiment"] == "many"
    text = paths[0].read_text()
    assert text.startswith("# Many parameters")
    assert "Reference: pymc-nuts." in text and "Reference: numpyro-nuts." in text
    header = next(line for line in text.splitlines() if line.startswith("| method"))
    for column in ("wall_s", "ess_per_s", "x_pymc_nuts", "x_numpyro_nuts", "rows_share"):
        assert column in header


def test_cli_runs_many_and_names_the_files_after_it(tmp_path, monkeypatch, rng):
    called = {}

    def fake_run_many(**kwargs):
        called.update(kwargs)
        case = many.QUICK_CASES[1]
        runs = {REFERENCE: _fake_run(rng, 0.0, 5.0), PEER: _fake_run(rng, 0.0, 5.0)}
        rows = _rows(runs, case.reference, n=case.n)
        return {"cases": [{"case": case.__dict__, "rows": rows}], "stack": {"cache": "cold"}}

    monkeypatch.setattr(many, "run_many", fake_run_many)
    monkeypatch.setattr("pymc_minibatch_mh.bench.__main__._require_peers_extra", lambda _: None)
    paths = main(["many", "--quick", "--cache", "cold", "--out", str(tmp_path), "--seed", "4"])
    assert called == {"quick": True, "cache": "cold", "seed": 4}
    assert all(p.name.startswith("many-quick-cold-py") and p.exists() for p in paths)


@pytest.mark.skipif(importlib.util.find_spec("numpyro") is not None, reason="numpyro installed")
def test_cli_many_without_numpyro_says_what_to_install(tmp_path):
    with pytest.raises(SystemExit, match=r"bench many needs numpyro.*\[peers\]"):
        main(["many", "--quick", "--out", str(tmp_path)])


def test_a_killed_process_is_reported_by_its_signal():
    # numpyro's HMCECS can exhaust memory on many parameters; the kernel then kills it.
    assert failure(-9, "a warning printed before") == "killed by SIGKILL (out of memory?)."
    assert failure(1, "Traceback\nValueError: bad. More.") == "ValueError: bad."


def test_draws_are_stacked_in_the_declared_order():
    samples = {
        "beta": np.zeros((2, 3, 2)),
        "mu_a": np.ones((2, 3)),
        "sigma_a": np.full((2, 3), 2.0),
        "a": np.full((2, 3, 4), 3.0),
        "sigma": np.full((2, 3), 4.0),
    }
    stacked = stack_draws(samples, "hierarchical", 2, 3)
    assert stacked.shape == (2, 3, 2 + 1 + 1 + 4 + 1)
    assert list(stacked[0, 0]) == [0, 0, 1, 2, 3, 3, 3, 3, 4]


def test_numpyro_hierarchical_model_has_pymcs_variables_and_shapes():
    pytest.importorskip("numpyro")
    import jax
    from numpyro.handlers import seed, trace

    from pymc_minibatch_mh.bench.peer_runs import _numpyro_model

    data = case_data(_tiny_groups(), seed=3)
    groups = int(data["group"].max()) + 1
    model = _numpyro_model("hierarchical", groups)
    arrays = {key: jax.numpy.asarray(value) for key, value in data.items()}
    sites = trace(seed(model, 0)).get_trace(arrays)
    numpyro_shapes = {
        name: tuple(site["value"].shape)
        for name, site in sites.items()
        if site["type"] == "sample" and not site["is_observed"]
    }
    point = _pymc_model("hierarchical", data).initial_point()
    pymc_shapes = {name: point[name].shape for name in DRAW_ORDER["hierarchical"] if name in point}
    assert set(numpyro_shapes) == set(DRAW_ORDER["hierarchical"])
    assert numpyro_shapes["a"] == (groups,)
    for name in ("beta", "mu_a", "a"):  # unconstrained in PyMC's initial point
        assert numpyro_shapes[name] == pymc_shapes[name]


def test_numpyro_hierarchical_run_writes_columns_in_pymcs_order(tmp_path):
    """A real numpyro NUTS run in a fresh process on tiny unbalanced data: each block of
    columns holds its variable. The intercepts centre on -3 with spread 0.4 and the noise
    sd is 2, so every two of mu_a, sigma_a and sigma differ by far more than their errors."""
    pytest.importorskip("numpyro")
    case = _tiny_groups(draws=150, tune=150, numpyro=True)
    data = case_data(case, seed=3)
    rng = np.random.default_rng(3)
    intercepts = rng.normal(-3.0, 0.4, size=case.groups)
    data["y"] = intercepts[data["group"]] + data["x"] @ [0.5, -1.0] + rng.normal(0, 2, case.n)
    path = tmp_path / "data.npz"
    np.savez(path, **data)
    run = _run_one(REFERENCE, case, path, tmp_path, seed=3, cache="warm")
    assert "error" not in run, run.get("error")
    d, groups = case.d, case.groups
    assert run["draws"].shape == (2, case.draws, d + 1 + 1 + groups + 1)
    mean = run["draws"].reshape(-1, d + 3 + groups).mean(axis=0)

    design = np.hstack([data["x"], np.eye(groups)[data["group"]]])
    fit, *_ = np.linalg.lstsq(design, data["y"], rcond=None)
    noise = np.std(data["y"] - design @ fit)
    assert np.allclose(mean[:d], fit[:d], atol=0.15)  # beta
    assert abs(mean[d] - np.mean(fit[d:])) < 0.6 and mean[d] < -2  # mu_a
    assert 0.05 < mean[d + 1] < 1.5  # sigma_a
    assert np.corrcoef(mean[d + 2 : d + 2 + groups], fit[d:])[0, 1] > 0.5  # a, group order
    assert abs(mean[-1] - noise) < 0.15  # sigma


GROUP_MODEL_KINDS = ("users", "users_noncentred", "lkj_slopes")


@pytest.mark.parametrize("kind", GROUP_MODEL_KINDS)
def test_data_of_the_group_kinds_have_every_group(kind):
    case = PeerCase("g", 4_000, 2, kind=kind, groups=40, unbalanced=True)
    data = case_data(case, seed=2)
    assert data["x"].shape == (case.n, 2) and data["y"].shape == (case.n,)
    assert np.bincount(data["group"]).size == case.groups
    if kind.startswith("users"):
        assert set(np.unique(data["y"])) == {0, 1}
    else:
        assert np.unique(data["y"]).size == case.n  # a Normal outcome


@pytest.mark.parametrize("kind", GROUP_MODEL_KINDS)
def test_group_kinds_have_the_same_draw_columns_in_pymc_and_numpyro(kind):
    """Every column of DRAW_ORDER is a variable (free or Deterministic) of the PyMC model
    and a sample or deterministic site of the numpyro model, of the same shape."""
    import pymc as pm

    case = PeerCase("g", 2_000, 2, kind=kind, groups=8, unbalanced=True)
    data = case_data(case, seed=4)
    model = _pymc_model(kind, data)
    names = DRAW_ORDER[kind]
    values = pm.draw([model[n] for n in names])
    pymc_shapes = {name: np.shape(value) for name, value in zip(names, values, strict=True)}
    assert pymc_shapes["a" if kind.startswith("users") else "ab"][0] == case.groups
    pytest.importorskip("numpyro")
    import jax
    from numpyro.handlers import seed, trace

    from pymc_minibatch_mh.bench.peer_runs import _numpyro_model

    arrays = {key: jax.numpy.asarray(value) for key, value in data.items()}
    sites = trace(seed(_numpyro_model(kind, case.groups), 0)).get_trace(arrays)
    for name in names:
        assert tuple(sites[name]["value"].shape) == pymc_shapes[name], name


def test_hmcecs_that_cannot_fit_in_memory_is_not_started():
    """2,000 users need about 45 GB of HMCECS proxy: refused with the numbers, not killed."""
    pytest.importorskip("numpyro")
    from pymc_minibatch_mh.bench.peer_runs import _check_hmcecs_memory, _numpyro_model

    big = case_data(PeerCase("u", 20_000, 2, kind="users", groups=2_000, unbalanced=True), 1)
    with pytest.raises(MemoryError, match=r"not run: .* 2004 parameters, about \d+ GB"):
        _check_hmcecs_memory(_numpyro_model("users", 2_000), big, chains=2)
    small = case_data(PeerCase("u", 2_000, 2, kind="users", groups=20, unbalanced=True), 1)
    _check_hmcecs_memory(_numpyro_model("users", 20), small, chains=2)  # fits: no error
