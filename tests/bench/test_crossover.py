"""bench crossover: the crossover N from ratios, which runs count, the summary built from
peers rows, the report and the CLI wiring."""

import json
import math

import pytest

from pymc_minibatch_mh.bench import crossover
from pymc_minibatch_mh.bench.__main__ import main
from pymc_minibatch_mh.bench.peer_runs import OUR_STEPS
from pymc_minibatch_mh.bench.peers import REFERENCE, _rows


def test_crossover_is_interpolated_in_log_n_between_the_sizes_around_it():
    sizes = [10_000, 100_000, 1_000_000]
    # Ratio 0.5 at 1e5 and 2 at 1e6: log ratio crosses zero half-way in log N.
    n, verdict = crossover.crossover_n(sizes, [0.1, 0.5, 2.0])
    assert n == pytest.approx(math.sqrt(1e5 * 1e6))
    assert verdict == "ahead from N ≈ 320,000"
    # Control: a ratio closer to 1 below moves the crossover towards the smaller size.
    closer, _ = crossover.crossover_n(sizes, [0.1, 0.9, 2.0])
    assert 1e5 < closer < n


def test_crossover_needs_every_larger_size_ahead():
    sizes = [10_000, 100_000, 1_000_000]
    # Ahead at 1e4 but behind at 1e5: the crossover is above 1e5, not 1e4.
    n, _ = crossover.crossover_n(sizes, [1.5, 0.5, 2.0])
    assert 1e5 < n < 1e6
    assert crossover.crossover_n(sizes, [1.2, 1.5, 3.0]) == (
        10_000.0,
        "ahead at every N measured (from 10,000)",
    )
    assert crossover.crossover_n(sizes, [0.1, 2.0, 0.9]) == (
        None,
        "behind NUTS up to N = 1,000,000",
    )
    # A run that does not count below the crossover: no interpolation, the next size.
    assert crossover.crossover_n(sizes, [0.1, None, 2.0])[0] == 1_000_000.0
    with pytest.raises(ValueError, match="one ratio per size"):
        crossover.crossover_n(sizes, [1.0])
    with pytest.raises(ValueError, match="sizes must increase"):
        crossover.crossover_n([100, 10], [1.0, 2.0])


_ACCURATE = {"x_pymc_nuts": 3.0, "max_mean_err_sd": 0.05, "max_sd_rel_err": 0.05}


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (_ACCURATE, True),
        ({**_ACCURATE, "max_mean_err_sd": 0.4}, False),
        ({**_ACCURATE, "max_sd_rel_err": 0.3}, False),
        ({**_ACCURATE, "error": "ValueError: boom"}, False),
        ({**_ACCURATE, "x_pymc_nuts": None}, False),
        ({**_ACCURATE, "ess_bulk_min": None}, False),
    ],
)
def test_only_accurate_finished_runs_count(row, expected):
    row = {"ess_bulk_min": 4000.0, **row}
    assert crossover.counts(row, 4000.0) is expected
    assert not crossover.counts(row, None)  # no reference: nothing to count against


def test_short_runs_are_allowed_their_monte_carlo_noise():
    # ESS 100 each: a mean's standard error of the difference is 0.14 sd.
    noisy = {"x_pymc_nuts": 2.0, "max_mean_err_sd": 0.3, "max_sd_rel_err": 0.2}
    assert crossover.counts({**noisy, "ess_bulk_min": 100.0}, 100.0)
    # Control: the same errors with ESS 10^4 each are real errors.
    assert not crossover.counts({**noisy, "ess_bulk_min": 1e4}, 1e4)
    assert not crossover.counts({**noisy, "max_mean_err_sd": 0.8, "ess_bulk_min": 100.0}, 100.0)


def test_cases_cover_every_model_at_every_size():
    cases = crossover.crossover_cases([1_000, 5_000])
    assert [(c.kind, c.n) for c in cases] == [
        ("linear", 1_000),
        ("linear", 5_000),
        ("hierarchical", 1_000),
        ("hierarchical", 5_000),
        ("logistic", 1_000),
        ("logistic", 5_000),
    ]
    assert all("pymc-nuts" in c.methods and set(OUR_STEPS) <= set(c.methods) for c in cases)
    # PyMC's NUTS is the reference of the Normal models, numpyro's of the logistic one.
    assert [c.reference for c in cases[::2]] == ["pymc-nuts", "pymc-nuts", REFERENCE]
    assert all((c.tune, c.draws) == (500, 1000) for c in cases)
    assert all((c.tune, c.draws) == (200, 200) for c in crossover.crossover_cases([1], quick=True))


def _run(rng, wall, *, shift=0.0):
    return {
        "draws": shift + rng.standard_normal((2, 4000, 3)),
        "import_s": 1.0,
        "setup_s": 1.0,
        "sampling_s": wall - 2.0,
        "rows_per_draw": 50.0,
        "wall_s": wall,
    }


def _fake_result(rng, sizes):
    """NUTS's wall time grows with N, the steps' does not: the steps overtake it. TunaMH
    is off by a whole sd at every size (it never counts)."""
    cases = []
    for case in crossover.crossover_cases(sizes):
        runs = {"pymc-nuts": _run(rng, 10.0 * case.n / sizes[0])}
        if case.reference != "pymc-nuts":
            runs[case.reference] = _run(rng, 10.0 * case.n / sizes[0])
        for method in OUR_STEPS:
            runs[method] = _run(rng, 25.0, shift=1.0 if method == "TunaMH" else 0.0)
        cases.append({"case": case.__dict__, "rows": _rows(runs, case.reference, n=case.n)})
    result = {"cases": cases, "stack": {"python": "3.x", "cache": "warm"}}
    result["crossover"] = crossover.crossover_summary(result)
    return result


def test_summary_finds_the_crossover_of_every_step_and_model(rng):
    sizes = [1_000, 10_000, 100_000]
    result = _fake_result(rng, sizes)
    summary = result["crossover"]
    assert {(e["model"], e["method"]) for e in summary} == {
        (label, method) for label, _, _ in crossover.MODELS for method in OUR_STEPS
    }
    for entry in summary:
        assert entry["sizes"] == sizes
        if entry["method"] == "TunaMH":  # the wrong runs never count, however fast
            assert entry["x_pymc_nuts"] == [None] * 3 and entry["crossover_n"] is None
        else:  # ratio below 1 at 1e3 and about 5 at 1e4: a crossover between them
            assert entry["x_pymc_nuts"][0] < 1 < entry["x_pymc_nuts"][1]
            assert 1_000 < entry["crossover_n"] < 10_000


def test_report_and_files(tmp_path, rng):
    result = _fake_result(rng, [1_000, 10_000])
    paths = crossover.write_crossover_reports(result, tmp_path, suffix="-test")
    assert [p.name for p in paths] == [
        "crossover-test.md",
        "crossover-test.json",
        "crossover-test.png",
    ]
    assert all(p.stat().st_size > 0 for p in paths)
    text = paths[0].read_text()
    assert text.startswith("# Crossover")
    assert "| TunaMH | – | – | behind NUTS up to N = 10,000 |" in text
    assert "N=1,000" in text and "ahead from N ≈" in text
    assert "# Per-size runs" in text  # the per-size tables follow
    saved = json.loads(paths[1].read_text())
    assert len(saved["crossover"]) == len(crossover.MODELS) * len(OUR_STEPS)


def test_cli_runs_crossover_with_the_given_sizes(tmp_path, monkeypatch, rng):
    called = {}

    def fake_run_crossover(**kwargs):
        called.update(kwargs)
        return _fake_result(rng, [1_000, 10_000])

    monkeypatch.setattr(crossover, "run_crossover", fake_run_crossover)
    monkeypatch.setattr("pymc_minibatch_mh.bench.__main__._require_peers_extra", lambda _: None)
    argv = ["crossover", "--sizes", "1000", "10000", "--out", str(tmp_path), "--seed", "3"]
    paths = main(argv)
    assert called == {"quick": False, "cache": "warm", "seed": 3, "sizes": [1_000, 10_000]}
    assert all(p.name.startswith("crossover-py") and p.exists() for p in paths)


def test_one_warm_up_per_model_across_sizes(monkeypatch, tmp_path):
    from pymc_minibatch_mh.bench import peers

    warmed, ran = [], []
    monkeypatch.setattr(peers, "_warm_up", lambda case, *a, **k: warmed.append(case.kind))

    def fake_run_one(method, case, *args):
        ran.append((case.kind, case.n, method))
        return {"wall_s": 1.0, "error": "not run"}

    monkeypatch.setattr(peers, "_run_one", fake_run_one)
    cases = crossover.crossover_cases([500, 1_000])
    peers.run_peers(cases=cases, progress=lambda _: None)
    assert warmed == ["linear", "hierarchical", "logistic"]  # not once per size
    every_method = sum(len(c.methods) for c in cases)
    assert len(ran) == every_method
    # Control: cold caches warm nothing.
    warmed.clear()
    peers.run_peers(cases=cases, cache="cold", progress=lambda _: None)
    assert warmed == []
    assert len(ran) == 2 * every_method
