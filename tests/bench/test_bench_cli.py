"""The benchmark CLI end to end: every experiment with --quick writes md, json and png."""

import json
import math

import pytest

from pymc_minibatch_mh.bench.__main__ import main
from pymc_minibatch_mh.bench.experiments import EXPERIMENTS, GMM_BATCH_FACTOR, SEITA_GMM_BATCH

# About 2 minutes on PyMC 5 / pytensor 2 (C backend, compiled functions cached on disk);
# under pytensor >= 3 (PyMC 6) the default numba backend compiles every step's functions
# anew and the run takes about 8 minutes, so there it only runs with `-m slow`.
# Every quick experiment end to end takes minutes: among the slow tests on both stacks.
SLOW = pytest.mark.slow

# Method labels each experiment must report (logistic: at every N of the quick run).
EXPECTED = {
    "gmm": [
        "nuts on binned tempered copy",
        "barker m=50, rw sd 0.15",
        "barker m=50, rw var 0.15",
        "austere eps=0.005 m=50",
        "exact MH (austere eps=0",
        "tunamh box",
    ],
    "logistic": [
        "nuts [N=1e4]",
        "nuts [N=30,000]",
        "metropolis (full data) [N=1e4]",
        "barker rw, no cv [N=1e4]",
        "barker cv independent x3 [N=30,000]",
        "austere cv independent x2 [N=30,000]",
        "tunamh cv independent x2 (exact) [N=30,000]",
        "flymc map-tuned independent x3 (exact) [N=30,000]",
    ],
    "robust": [
        "nuts",
        "metropolis (full data)",
        "tunamh rw, no cv (exact)",
        "tunamh cv independent x2 (exact)",
        "flymc map-tuned independent x3 (exact)",
        "barker cv independent x3",
    ],
    "tall-logistic": ["nuts", "metropolis (full data)", "tunamh cv independent x2 (exact)"],
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    written = main(["all", "--quick", "--out", str(out), "--no-progress"])
    return out, written


def test_cli_lists_every_experiment():
    assert set(EXPERIMENTS) == {"gmm", "logistic", "robust", "tall-logistic"}
    with pytest.raises(SystemExit):
        main(["no-such-experiment"])


@SLOW
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_quick_run_writes_reports(results, name):
    out, written = results
    for ext in ("md", "json", "png"):
        path = out / f"{name}-quick.{ext}"
        assert path in written and path.stat().st_size > 0, path
    payload = json.loads((out / f"{name}-quick.json").read_text())
    methods = [row["method"] for row in payload["rows"]]
    assert len(methods) == len(set(methods))
    for label in EXPECTED[name]:
        assert any(method.startswith(label) for method in methods), (label, methods)
    for row in payload["rows"]:
        ess = row["ess_bulk_min"]
        assert ess is not None and math.isfinite(ess) and ess > 0, row
        assert row["mean_batch_size"] > 0, row
    assert (out / f"{name}-quick.md").read_text().startswith(f"# {payload['title']}")


@SLOW
def test_gmm_quick_reproduces_seita_batch_size(results):
    # The paper's N / K = 100 is kept in --quick (N = 10^5, K = 10^3), so the mean batch
    # of MinibatchBarker should be the paper's 182.3 within the check's factor 1.5, and
    # reading 0.15 as a variance should cost several times more data.
    out, _ = results
    payload = json.loads((out / "gmm-quick.json").read_text())
    check = payload["params"]["check"]
    paper = SEITA_GMM_BATCH["MHminibatch"][0]
    assert check["passed"] is True
    assert (
        paper / GMM_BATCH_FACTOR <= check["barker sd 0.15 mean batch"] <= paper * GMM_BATCH_FACTOR
    )
    rows = {row["method"]: row for row in payload["rows"]}
    sd = rows["barker m=50, rw sd 0.15"]["mean_batch_size"]
    var = rows["barker m=50, rw var 0.15"]["mean_batch_size"]
    assert var > 3 * sd
    exact = next(row for method, row in rows.items() if method.startswith("exact MH"))
    assert exact["mean_batch_size"] == payload["params"]["N"]
