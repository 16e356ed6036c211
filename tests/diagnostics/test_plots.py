"""plot_data_use draws, per chain, the rows each draw read and the running acceptance rate
of a minibatch run (InferenceData on PyMC 5, DataTree on PyMC 6)."""

import subprocess
import sys

import matplotlib
import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.diagnostics import data_use, plot_data_use, sample_stats

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

QUIET = {"progressbar": False, "compute_convergence_checks": False}


@pytest.fixture(scope="module")
def model():
    y = np.random.default_rng(4).normal(0.5, 1.0, size=2_000)
    with pm.Model() as m:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.0, observed=y)
    return m


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_lines_show_each_chains_rows_and_running_acceptance(model):
    with model:
        idata = pm.sample(
            step=MinibatchBarker(progressbar=False),
            draws=120,
            tune=100,
            chains=2,
            cores=1,
            random_seed=2,
            **QUIET,
        )
    stats = sample_stats(idata)
    rows = np.asarray(stats["batch_size"])
    accepted = np.asarray(stats["accepted"])
    axes = plot_data_use(idata, n_data=2_000)
    rows_ax, accept_ax = axes
    chain_lines = [line for line in rows_ax.get_lines() if line.get_label().startswith("chain")]
    assert len(chain_lines) == 2 and len(accept_ax.get_lines()) == 2
    for chain, (line, rate) in enumerate(zip(chain_lines, accept_ax.get_lines(), strict=True)):
        np.testing.assert_array_equal(line.get_xdata(), np.arange(120))
        np.testing.assert_array_equal(line.get_ydata(), rows[chain])
        expected = np.cumsum(accepted[chain]) / np.arange(1, 121)
        np.testing.assert_allclose(rate.get_ydata(), expected)
        assert rate.get_ydata()[-1] == pytest.approx(accepted[chain].mean())
    # The dashed line at N: a batch reaching it read all the data.
    [full] = [line for line in rows_ax.get_lines() if not line.get_label().startswith("chain")]
    assert set(full.get_ydata()) == {2_000}
    # Batches of about 100 rows per MH step, far below N (control variates are on).
    assert 0 < rows.mean() < 1_000
    assert accept_ax.get_ylim() == (0.0, 1.0) and accept_ax.get_xlabel() == "draw"


def test_given_axes_are_drawn_on_and_returned():
    stats = {"batch_size": np.array([[100, 250, 50]]), "accepted": np.array([[1.0, 0.0, 0.0]])}
    _, given = plt.subplots(1, 2)
    axes = plot_data_use({"sample_stats": stats}, ax=given)
    assert axes[0] is given[0] and axes[1] is given[1]
    np.testing.assert_allclose(given[1].get_lines()[0].get_ydata(), [1.0, 0.5, 1 / 3])
    with pytest.raises(ValueError, match="ax must be two matplotlib Axes"):
        plot_data_use({"sample_stats": stats}, ax=given[0])


def test_compound_steps_rows_are_summed_and_acceptances_averaged():
    stats = {
        "batch_size": np.array([[[100, 10], [300, 30]]]),  # (chain, draw, step)
        "accepted": np.array([[[1.0, 0.0], [1.0, 1.0]]]),
    }
    rows, acceptance = data_use({"sample_stats": stats})
    np.testing.assert_array_equal(rows, [[110.0, 330.0]])
    np.testing.assert_allclose(acceptance, [[0.5, 0.75]])


def test_a_run_without_minibatch_stats_is_refused_in_words(model):
    with model:
        nuts = pm.sample(draws=30, tune=30, chains=1, random_seed=1, **QUIET)
    with pytest.raises(ValueError, match="no 'batch_size' or 'accepted' sample stat.*without them"):
        plot_data_use(nuts)
    with pytest.raises(ValueError, match="no sample_stats group"):
        plot_data_use({"posterior": {}})


def test_importing_the_diagnostics_imports_neither_arviz_nor_matplotlib():
    """The steps import the diagnostics package inside PyMC's worker processes."""
    code = (
        "import sys, pymc\n"
        "before = set(sys.modules)\n"
        "import pymc_minibatch_mh.diagnostics\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(sorted(new & {'arviz', 'arviz_stats', 'arviz_base', 'matplotlib'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
