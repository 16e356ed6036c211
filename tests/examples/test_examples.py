"""Each example runs with --quick and prints a compare() table."""

import importlib.util
import math
from pathlib import Path

import pytensor
import pytest

# About 1 minute on PyMC 5 / pytensor 2; under pytensor >= 3 (PyMC 6) numba compiles
# every step's functions anew (about 5 minutes), so there these run only with `-m slow`.
pytestmark = [pytest.mark.slow] if int(pytensor.__version__.split(".")[0]) >= 3 else []

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_table(table, methods):
    assert list(table.index) == ["nuts", *methods]
    for method in table.index:
        assert math.isfinite(table.loc[method, "ess_bulk_min"]), method
        assert table.loc[method, "ess_bulk_min"] > 0, method


def test_logistic_tall(capsys):
    table = load("logistic_tall").main(["--quick"])
    check_table(table, ["MinibatchBarker()"])
    # Control variates keep the batch far below N = 20,000.
    assert table.loc["MinibatchBarker()", "mean_batch_size"] < 2_000
    assert "ESS per second relative to NUTS" in capsys.readouterr().out


def test_robust_flymc_vs_tunamh(capsys):
    table = load("robust_flymc_vs_tunamh").main(["--quick"])
    check_table(table, ["flymc map-tuned", "tunamh cv"])
    assert (table["mean_batch_size"].iloc[1:] < 1_000).all()
    assert "data points per draw" in capsys.readouterr().out


@pytest.mark.slow  # the docs build runs it too (docs/examples.md), on both stacks
def test_diagnostics_with_arviz(tmp_path, capsys):
    table = load("diagnostics_with_arviz").main(["--quick", "--out", str(tmp_path)])
    check_table(table, ["MinibatchBarker()", "barker rw, no cv"])
    for label in ("good", "bad"):
        assert (tmp_path / f"rank_plots_{label}.png").stat().st_size > 0
    out = capsys.readouterr().out
    # The diagnostics tell the two runs apart.
    assert "R-hat < 1.01 and bulk ESS > 400 everywhere: True" in out
    assert "R-hat < 1.01 and bulk ESS > 400 everywhere: False" in out
