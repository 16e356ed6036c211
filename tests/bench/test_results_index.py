"""The results folder's index is written from its reports and matches the folder."""

from pathlib import Path

import pytest

from pymc_minibatch_mh.bench.__main__ import main
from pymc_minibatch_mh.bench.results_index import index_text, write_index

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_the_committed_index_is_the_one_the_bench_writes():
    committed = (RESULTS / "README.md").read_text(encoding="utf-8")
    assert committed == index_text(RESULTS), (
        "benchmarks/results/README.md is stale: run `python -m pymc_minibatch_mh.bench index`"
    )


def test_every_report_has_a_row_and_a_missing_one_shows(tmp_path):
    (tmp_path / "peers-x-py312.md").write_text(
        "# Peers\n\nStack: python 3.12.1, pymc 6.4.0, pytensor 3.3.8, cache warm.\n\n"
        "## logistic N=1e6\n\n| a |\n|---|\n"
    )
    (tmp_path / "peers-x-py312.json").write_text("{}")
    (tmp_path / "gmm.md").write_text("# Mixture | with a bar\n")
    main(["index", "--out", str(tmp_path)])
    text = (tmp_path / "README.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 3  # header + two reports
    assert "[md](peers-x-py312.md) [json](peers-x-py312.json)" in text
    assert "python 3.12.1, pymc 6.4.0, cache warm" in text
    assert "logistic N=1e6" in text and "Mixture / with a bar" in text
    # negative control: a new report makes the written index stale
    (tmp_path / "new.md").write_text("# New\n")
    assert index_text(tmp_path) != text


def test_a_readme_the_bench_did_not_write_is_left_alone(tmp_path):
    project_readme = tmp_path / "README.md"
    project_readme.write_text("# My project\n")
    (tmp_path / "r.md").write_text("# R\n")
    with pytest.raises(FileExistsError, match="not a results index"):
        write_index(tmp_path)
    assert project_readme.read_text() == "# My project\n"
