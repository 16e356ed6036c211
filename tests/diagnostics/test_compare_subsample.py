"""compare(n_rows=...): NUTS and the steps on the same random rows of a model too tall for
full-data NUTS, with a verdict that tells a correct step from a wrong one."""

import numpy as np
import pymc as pm
import pytest
from scipy import special

from pymc_minibatch_mh import MinibatchBarker, compare, tall_array
from pymc_minibatch_mh.diagnostics import posterior

N_TALL = 2_000_000
N_ROWS = 5_000


@pytest.fixture(scope="module")
def tall_model(tmp_path_factory):
    """Logistic regression on 2 x 10^6 rows held in memory-mapped files (48 MB): the rows
    are written in blocks, and the model holds the files as they are."""
    folder = tmp_path_factory.mktemp("tall")
    x = np.lib.format.open_memmap(folder / "x.npy", mode="w+", dtype=np.float32, shape=(N_TALL, 3))
    y = np.lib.format.open_memmap(folder / "y.npy", mode="w+", dtype=np.int8, shape=(N_TALL,))
    rng = np.random.default_rng(5)
    for start in range(0, N_TALL, 500_000):
        block = rng.normal(size=(500_000, 3)).astype(np.float32)
        x[start : start + 500_000] = block
        logit = 0.5 + block @ np.array([1.0, -0.5, 0.25])
        y[start : start + 500_000] = rng.random(500_000) < special.expit(logit)
    x.flush()
    y.flush()
    del x, y
    with pm.Model() as model:
        X = tall_array("X", np.load(folder / "x.npy", mmap_mode="r"))
        Y = tall_array("Y", np.load(folder / "y.npy", mmap_mode="r"))
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=alpha + X @ beta, observed=Y)
    return model


def test_steps_are_checked_against_nuts_on_a_subsample(tall_model):
    table, traces = compare(
        tall_model,
        {
            "barker": MinibatchBarker,
            # Negative control: a tempered posterior, about sqrt(50) times too wide.
            "barker_hot": lambda: MinibatchBarker(temperature=50.0),
        },
        n_rows=N_ROWS,
        draws=300,
        tune=300,
        chains=2,
        random_seed=3,
        mean_tol=0.3,
        sd_tol=0.3,
        return_traces=True,
    )
    # Every method ran on the same 5,000 rows, not on the 2 x 10^6.
    assert (table["n_data"] == N_ROWS).all()
    assert table.loc["nuts", "mean_batch_size"] == N_ROWS
    assert table.attrs["n_data_full"] == N_TALL and table.attrs["n_rows"] == N_ROWS
    for idata in traces.values():
        assert np.asarray(posterior(idata)["beta"]).shape == (2, 300, 3)
    # The default step agrees with NUTS there, with enough effective draws to say so.
    assert table.loc["nuts", "verdict"] == "reference"
    assert table.loc["barker", "verdict"] == "agree" and table.loc["barker", "agrees"]
    assert 3 * table.loc["barker", "mc_error_sd"] < 0.3
    # The tempered one is caught: its sds are several times NUTS's.
    assert table.loc["barker_hot", "verdict"] == "disagree"
    assert not table.loc["barker_hot", "agrees"]
    assert table.loc["barker_hot", "max_sd_rel_err"] > 2.0
    summary = table.attrs["summary"]
    assert "Sampled on 5,000 random rows of N = 2,000,000 (random_seed=3)" in summary
    assert "barker: agrees with the reference" in summary
    assert "barker_hot: DISAGREES" in summary


def test_subsampling_refuses_what_cannot_apply_to_a_subsample(tall_model):
    with pytest.raises(TypeError, match="already built.*pass its class or a factory"):
        compare(tall_model, {"ready": object()}, n_rows=N_ROWS)
    with pytest.raises(ValueError, match="given reference draws do not apply"):
        compare(tall_model, {}, reference={"alpha": np.arange(3.0)}, n_rows=N_ROWS)
    with pytest.raises(ValueError, match="not smaller than the data"):
        compare(tall_model, {}, n_rows=N_TALL)
    with pytest.raises(ValueError, match="below the smallest subsample"):
        compare(tall_model, {}, n_rows=10)
