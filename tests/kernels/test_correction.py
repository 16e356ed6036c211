"""The correction distribution reproduces Seita et al.'s Table 3."""

import numpy as np
import pytest
from scipy import special, stats

from pymc_minibatch_mh.kernels.correction import (
    CorrectionTable,
    build_correction_masses,
    correction_sup_error,
    load_default_correction,
)


def test_shipped_table_reproduces_paper_sup_error():
    table = load_default_correction()
    assert (table.n_grid, table.half_width, table.sigma, table.ridge) == (4000, 20.0, 1.0, 10.0)
    err = correction_sup_error(table.masses, table.n_grid, table.half_width, table.sigma)
    # Paper: 8.9e-4 (N_g = 4000, sigma = 1, lambda = 10).
    assert err == pytest.approx(8.9e-4, rel=0.03)
    assert np.all(table.masses >= 0)
    # Clipping negatives adds ~8.9e-4 of mass; the sampler renormalises.
    assert table.masses.sum() == pytest.approx(1.0, abs=2e-3)


@pytest.mark.parametrize(
    ("sigma", "ridge", "paper"),
    [(0.8, 10.0, 4.0e-4), (1.0, 10.0, 1.3e-3), (0.8, 1.0, 6.7e-5), (0.9, 0.1, 1.3e-4)],
)
def test_table3_cells_at_n_grid_2000(sigma, ridge, paper):
    masses = build_correction_masses(n_grid=2000, half_width=20.0, sigma=sigma, ridge=ridge)
    err = correction_sup_error(masses, 2000, 20.0, sigma)
    # Two significant figures as printed in the paper.
    assert err == pytest.approx(paper, rel=0.06)


def test_correction_moments(rng):
    table = load_default_correction()
    draws = table.sample(rng, 400_000)
    assert abs(draws.mean()) < 0.01
    # Var(X_corr) ~ 2.36 (ideal pi^2/3 - 1 = 2.29).
    assert draws.var() == pytest.approx(2.36, abs=0.03)


def test_normal_plus_correction_is_logistic(rng):
    table = load_default_correction()
    x = rng.normal(size=400_000) + table.sample(rng, 400_000)
    ks = stats.kstest(x, stats.logistic.cdf)
    assert ks.statistic < 4e-3


def test_logistic_is_not_a_gaussian():
    grid = np.linspace(-10, 10, 20001)
    assert np.max(np.abs(special.expit(grid) - stats.norm.cdf(grid / 1.7))) == pytest.approx(
        0.00956, abs=5e-5
    )


def test_table_roundtrip(tmp_path):
    table = load_default_correction()
    table.save(tmp_path / "t.npz")
    again = CorrectionTable.load(tmp_path / "t.npz")
    np.testing.assert_array_equal(again.masses, table.masses)
    assert again.sigma == table.sigma


def test_sigma_out_of_range():
    with pytest.raises(ValueError, match="sigma"):
        build_correction_masses(n_grid=10, sigma=2.0)
