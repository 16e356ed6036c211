"""The pieces of ``bench tall-disk`` that decide its numbers: the data files and the
streamed Laplace reference."""

import numpy as np
from scipy import optimize
from scipy.special import log_expit

from pymc_minibatch_mh.bench import tall_disk


def test_data_are_written_in_blocks_and_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(tall_disk, "BLOCK_ROWS", 700)
    assert tall_disk.write_data(tmp_path, 2000, seed=3) > 0
    x_path, y_path = tall_disk.data_paths(tmp_path, 2000)
    x, y = np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")
    assert x.shape == (2000, tall_disk.D) and x.dtype == np.float32
    assert y.dtype == np.int8 and set(np.unique(y)) == {0, 1}
    assert np.all(np.any(x != 0, axis=1))  # every block was written
    assert 0.5 < np.std(x) < 1.5
    assert tall_disk.write_data(tmp_path, 2000, seed=3) == 0.0  # exists: not rewritten


def _negative_log_posterior(q, x, y, prior_sd):
    eta = x @ q[:-1] + q[-1]
    loglik = np.sum(y * log_expit(eta) + (1 - y) * log_expit(-eta))
    return -(loglik - 0.5 * np.sum((q / prior_sd) ** 2))


def test_streamed_newton_finds_the_posterior_mode(tmp_path, monkeypatch):
    monkeypatch.setattr(tall_disk, "BLOCK_ROWS", 900)
    tall_disk.write_data(tmp_path, 3000, seed=4)
    x_path, y_path = tall_disk.data_paths(tmp_path, 3000)
    x = np.load(x_path).astype(np.float64)
    y = np.load(y_path).astype(np.float64)
    fit = tall_disk.laplace_fit(tmp_path, 3000)
    args = (x, y, tall_disk.PRIOR_SD)
    found = optimize.minimize(_negative_log_posterior, np.zeros(11), args=args, method="BFGS")
    np.testing.assert_allclose(fit["mean"], found.x, atol=2e-4)
    assert fit["iterations"] < 20 and np.all(fit["sd"] > 0)
    # Negative control: a much tighter prior gives another mode, which the check sees.
    tight = tall_disk.laplace_fit(tmp_path, 3000, prior_sd=np.full(11, 0.01))
    assert np.max(np.abs(tight["mean"] - found.x)) > 1e-2


def test_the_container_source_samples_the_files_through_tall_array(tmp_path):
    """``--source container`` runs the memmaps through ``tall_array``: the same draws as
    the memmaps in the model, up to the rounding of sums (the container changes how the
    data are held, not the model; PyMC's observations stay int8 instead of int64)."""
    tall_disk.write_data(tmp_path, 3000, seed=5)
    runs = {
        source: tall_disk.worker("MinibatchBarker", tmp_path, 3000, 30, 30, 1, 2, source)
        for source in ("container", "memmap")
    }
    np.testing.assert_allclose(runs["container"]["mean"], runs["memmap"]["mean"], rtol=1e-10)
    assert runs["container"]["peak_rss_gb"] > 0
