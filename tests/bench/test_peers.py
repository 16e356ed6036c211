"""bench peers: the table built from per-process runs, the reports, and one real run."""

import json

import numpy as np
import pytest

from pymc_minibatch_mh.bench.peers import (
    PEER,
    REFERENCE,
    PeerCase,
    _rows,
    _run_one,
    case_data,
    logistic_data,
    markdown_report,
    short_error,
    write_reports,
)


def _fake_run(rng, mean, sd, wall, *, draws=500, ess_scale=1.0):
    # Two chains of AR(1) draws with the given mean and sd: lower ess_scale, more
    # autocorrelation, lower ESS.
    phi = 1.0 - ess_scale
    x = np.empty((2, draws, 3))
    x[:, 0] = rng.standard_normal((2, 3))
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + np.sqrt(1 - phi**2) * rng.standard_normal((2, 3))
    return {
        "draws": mean + sd * x,
        "import_s": 1.0,
        "setup_s": 2.0,
        "sampling_s": wall - 3.0,
        "in_process_s": wall - 2.0,
        "rows_per_draw": 100.0,
        "wall_s": wall,
    }


def test_rows_measure_rates_ratios_and_errors(rng):
    runs = {
        REFERENCE: _fake_run(rng, 0.0, 1.0, 30.0),
        PEER: _fake_run(rng, 0.0, 1.0, 10.0, ess_scale=0.5),
        "MinibatchBarker": _fake_run(rng, 0.5, 1.0, 5.0),
        "TunaMH": {"wall_s": 3.0, "error": "ValueError: boom"},
    }
    rows = {row["method"]: row for row in _rows(runs)}
    barker, peer = rows["MinibatchBarker"], rows[PEER]
    assert barker["ess_per_s"] == pytest.approx(barker["ess_bulk_min"] / 5.0)
    assert barker["x_hmcecs"] == pytest.approx(barker["ess_per_s"] / peer["ess_per_s"])
    assert peer["x_hmcecs"] == pytest.approx(1.0)
    # The in-process rate: ESS over the time from the model's creation to the draws.
    assert barker["ess_per_in_process_s"] == pytest.approx(barker["ess_bulk_min"] / 3.0)
    assert barker["x_hmcecs_in_process"] == pytest.approx(
        barker["ess_per_in_process_s"] / peer["ess_per_in_process_s"]
    )
    # Negative control: without the process's fixed costs the ratio differs.
    assert barker["x_hmcecs_in_process"] != pytest.approx(barker["x_hmcecs"])
    # A shift of half a reference sd shows up as such; the reference has no error row.
    assert barker["max_mean_err_sd"] == pytest.approx(0.5, abs=0.15)
    assert "max_mean_err_sd" not in rows[REFERENCE]
    assert rows["TunaMH"]["error"] == "ValueError: boom"
    # Negative control: a strongly autocorrelated chain has a far lower ESS.
    assert peer["ess_bulk_min"] < 0.5 * barker["ess_bulk_min"]


def test_reports_are_written(tmp_path, rng):
    runs = {REFERENCE: _fake_run(rng, 0.0, 1.0, 30.0), PEER: _fake_run(rng, 0.0, 1.0, 10.0)}
    result = {
        "cases": [{"case": PeerCase("toy", 100, 3).__dict__, "rows": _rows(runs)}],
        "stack": {"python": "3.x", "cache": "warm"},
    }
    paths = write_reports(result, tmp_path, suffix="-test")
    assert [p.name for p in paths] == ["peers-test.md", "peers-test.json", "peers-test.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    assert json.loads(paths[1].read_text())["cases"][0]["case"]["name"] == "toy"
    text = markdown_report(result)
    assert "## toy" in text and "x_hmcecs" in text and "cache warm" in text


def _logistic_file(case: PeerCase, tmp_path, seed: int):
    """The case's logistic-regression data written where a method's process reads it."""
    x, y = logistic_data(case.n, case.d, seed=seed)
    data = tmp_path / "data.npz"
    np.savez(data, x=x, y=y)
    return data


def test_one_method_in_a_fresh_process(tmp_path):
    """A real run of a default step through the per-process runner (small data)."""
    case = PeerCase("tiny", 3000, 2, draws=100, tune=100)
    data = _logistic_file(case, tmp_path, seed=3)
    run = _run_one("MinibatchBarker", case, data, tmp_path, seed=3, cache="warm")
    assert "error" not in run, run.get("error")
    assert run["draws"].shape == (2, 100, 3)
    assert 0 < float(run["setup_s"]) < run["wall_s"]
    # Setup and sampling happen inside the in-process time, which is inside the wall time.
    assert float(run["setup_s"]) + float(run["sampling_s"]) <= float(run["in_process_s"])
    assert float(run["in_process_s"]) < run["wall_s"]
    assert 0 < float(run["rows_per_draw"]) < case.n
    assert float(run["n_data_passes"]) >= 1


def test_the_hierarchical_case_runs_in_a_fresh_process(tmp_path):
    """The N = 10^5 sibling cases (here tiny) build the model a user writes; every free
    variable's draws are returned."""
    case = PeerCase("tiny hierarchical", 2000, 2, draws=50, tune=50, kind="hierarchical")
    data = tmp_path / "data.npz"
    np.savez(data, **case_data(case, seed=3))
    run = _run_one("MinibatchBarker", case, data, tmp_path, seed=3, cache="warm")
    assert "error" not in run, run.get("error")
    # beta (2), mu_a, sigma_a, a (20 groups), sigma
    assert run["draws"].shape == (2, 50, 2 + 1 + 1 + 20 + 1)
    assert case.reference == "pymc-nuts" and "numpyro-hmcecs" not in case.methods


def test_a_refusal_is_reported_by_its_first_sentence():
    line = (
        "pymc_minibatch_mh.likelihood.linear_predictor.UnsupportedLikelihood: TunaMH could "
        "not derive bounds: sigma is free. Pass the bound explicitly. Or use Austere."
    )
    assert short_error(line, 1) == (
        "UnsupportedLikelihood: TunaMH could not derive bounds: sigma is free."
    )
    assert short_error("", 3) == "exit code 3"


def test_the_process_reports_cold_and_warm_compile_caches(tmp_path):
    """``--cache cold`` gives each process an empty compile directory: the step compiles
    its functions and says so; a second warm run loads them (the first warm run fills
    the cache if it was empty)."""
    case = PeerCase("tiny", 2000, 2, draws=30, tune=30)
    data = _logistic_file(case, tmp_path, seed=5)
    cold = _run_one("TunaMH", case, data, tmp_path, seed=5, cache="cold")
    assert "error" not in cold, cold.get("error")
    assert str(cold["setup_cache"]) == "cold"
    for _ in range(2):
        warm = _run_one("TunaMH", case, data, tmp_path, seed=5, cache="warm")
        assert "error" not in warm, warm.get("error")
    # Negative control of the label: the same step with its functions on disk is warm.
    assert str(warm["setup_cache"]) == "warm"
    rows = {row["method"]: row for row in _rows({"TunaMH": cold}, reference_method="none")}
    assert rows["TunaMH"]["setup_cache"] == "cold"


def test_child_processes_keep_every_compile_cache_in_one_directory(tmp_path, monkeypatch):
    from pymc_minibatch_mh.bench.peers import compile_cache_env

    monkeypatch.setenv("PYTENSOR_FLAGS", "floatX=float64")
    env = compile_cache_env(tmp_path)
    directories = f"base_compiledir={tmp_path},compiledir={tmp_path / 'pytensor'}"
    assert env["PYTENSOR_FLAGS"] == f"floatX=float64,{directories}"
    assert env["NUMBA_CACHE_DIR"] == str(tmp_path / "numba")
    assert env["OMP_NUM_THREADS"] == "1"
    # Control: without flags of the user's own, only the directory is set.
    monkeypatch.delenv("PYTENSOR_FLAGS")
    assert compile_cache_env(tmp_path)["PYTENSOR_FLAGS"] == directories


def test_a_method_over_its_case_time_limit_gets_a_row_saying_so(tmp_path):
    """A real process stopped at the case's limit: a row with the limit, not a crash."""
    case = PeerCase("tiny", 3000, 2, draws=100, tune=100, timeout_s=0.5)
    data = _logistic_file(case, tmp_path, seed=3)
    run = _run_one("MinibatchBarker", case, data, tmp_path, seed=3, cache="warm")
    assert run["error"] == "not finished within the case's limit of 0.5 s."
    assert run["wall_s"] < 30
    # negative control: the default limit lets the same run finish (above)
    assert PeerCase("tiny", 3000, 2).timeout_s == 3 * 3600


def test_quick_many_cases_with_numpyro_have_a_time_limit():
    from pymc_minibatch_mh.bench.many import QUICK_CASES, QUICK_TIMEOUT_S

    limited = [c for c in QUICK_CASES if c.kind in ("users_noncentred", "lkj_slopes")]
    assert limited and all(c.timeout_s == QUICK_TIMEOUT_S <= 900 for c in limited)
