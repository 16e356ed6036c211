"""The correction distribution C_sigma of the minibatch Barker test.

A standard logistic variable is written as ``X_norm + X_corr`` with
``X_norm ~ N(0, sigma^2)``. ``C_sigma`` is the law of ``X_corr``: a set of
probability masses ``u_j`` on the grid ``Y_j = j h``, ``j = -n_grid..n_grid``,
``h = half_width / n_grid``, found by a ridge least-squares fit of
``sum_j u_j Phi((X_i - Y_j) / sigma)`` to the logistic CDF on the grid
``X_i = i h``, ``i = -2 n_grid..2 n_grid``; negative masses are clipped to 0.

References
----------
.. [1] Seita, D., Pan, X., Chen, H., Canny, J. "An Efficient Minibatch
   Acceptance Test for Metropolis-Hastings", UAI 2017, Section 5 and Table 3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import numpy as np
from scipy import linalg, special

DEFAULT_TABLE_FILE = "correction_c1.npz"
_ROW_CHUNK = 1024


def _grids(n_grid: int, half_width: float) -> tuple[np.ndarray, np.ndarray]:
    h = half_width / n_grid
    x = np.arange(-2 * n_grid, 2 * n_grid + 1) * h
    y = np.arange(-n_grid, n_grid + 1) * h
    return x, y


def build_correction_masses(
    n_grid: int = 4000,
    half_width: float = 20.0,
    sigma: float = 1.0,
    ridge: float = 10.0,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Solve for the masses of ``C_sigma`` (clipped at 0, not renormalised).

    Parameters
    ----------
    n_grid : int
        Grid half-size (``N`` in the paper; unrelated to the data size).
    half_width : float
        ``V``: the support of ``X_corr`` is ``[-V, V]``.
    sigma : float
        Standard deviation of the normal part; ``0 < sigma < pi / sqrt(3)``.
    ridge : float
        Ridge penalty ``lambda`` of ``(M^T M + lambda I) u = M^T v``.
    progress : callable, optional
        Called as ``progress(rows_done, rows_total)`` while ``M^T M`` accumulates.

    Returns
    -------
    ndarray
        The ``2 n_grid + 1`` masses ``u_j`` (probability masses, not densities).

    References
    ----------
    .. [1] Seita et al. (2017), Section 5 ("Computing the correction distribution").
    """
    if not 0 < sigma < np.pi / np.sqrt(3):
        raise ValueError(f"sigma must lie in (0, pi/sqrt(3)) ~ (0, 1.814); got {sigma}.")
    x, y = _grids(n_grid, half_width)
    gram = np.zeros((y.size, y.size))
    rhs = np.zeros(y.size)
    for start in range(0, x.size, _ROW_CHUNK):
        xs = x[start : start + _ROW_CHUNK]
        block = special.ndtr((xs[:, None] - y[None, :]) / sigma)
        gram += block.T @ block
        rhs += block.T @ special.expit(xs)
        if progress is not None:
            progress(min(start + _ROW_CHUNK, x.size), x.size)
    gram[np.diag_indices_from(gram)] += ridge
    masses = linalg.solve(gram, rhs, assume_a="pos")
    return np.maximum(masses, 0.0)


def correction_sup_error(
    masses: np.ndarray, n_grid: int, half_width: float = 20.0, sigma: float = 1.0
) -> float:
    """``max_i |sum_j u_j Phi((X_i - Y_j) / sigma) - S(X_i)|`` over the ``4 n_grid + 1`` grid."""
    x, y = _grids(n_grid, half_width)
    worst = 0.0
    for start in range(0, x.size, _ROW_CHUNK):
        xs = x[start : start + _ROW_CHUNK]
        fit = special.ndtr((xs[:, None] - y[None, :]) / sigma) @ masses
        worst = max(worst, float(np.max(np.abs(fit - special.expit(xs)))))
    return worst


@dataclass(frozen=True)
class CorrectionTable:
    """A sampler for ``X_corr ~ C_sigma``.

    Attributes
    ----------
    support : ndarray
        Grid points ``Y_j``.
    masses : ndarray
        Clipped masses ``u_j`` as solved (their sum is within ~1e-3 of 1).
    sigma : float
        Standard deviation of the normal component the table was built for.
    n_grid, half_width, ridge : int, float, float
        The construction parameters.
    """

    support: np.ndarray
    masses: np.ndarray
    sigma: float
    n_grid: int
    half_width: float
    ridge: float

    @property
    def cdf(self) -> np.ndarray:
        cdf = np.cumsum(self.masses)
        return cdf / cdf[-1]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_cdf", self.cdf)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray | float:
        """Draw ``X_corr`` (masses renormalised to sum to one)."""
        u = rng.random(size)
        j = np.searchsorted(self._cdf, u, side="right")
        if size is None:  # one draw (each Barker test): no array operations on a scalar
            return self.support[min(int(j), self.support.size - 1)]
        return self.support[np.minimum(j, self.support.size - 1)]

    @classmethod
    def from_masses(
        cls, masses: np.ndarray, n_grid: int, half_width: float, sigma: float, ridge: float
    ) -> CorrectionTable:
        _, y = _grids(n_grid, half_width)
        if masses.shape != y.shape:
            raise ValueError(f"expected {y.size} masses for n_grid={n_grid}, got {masses.size}")
        return cls(y, np.asarray(masses, dtype=float), sigma, n_grid, half_width, ridge)

    def save(self, path) -> None:
        np.savez_compressed(
            path,
            masses=self.masses,
            n_grid=self.n_grid,
            half_width=self.half_width,
            sigma=self.sigma,
            ridge=self.ridge,
        )

    @classmethod
    def load(cls, file) -> CorrectionTable:
        with np.load(file) as data:
            return cls.from_masses(
                data["masses"],
                int(data["n_grid"]),
                float(data["half_width"]),
                float(data["sigma"]),
                float(data["ridge"]),
            )


def load_default_correction() -> CorrectionTable:
    """The shipped ``C_1`` table: ``n_grid = 4000``, ``V = 20``, ``sigma = 1``, ``lambda = 10``.

    Regenerate it with ``python scripts/build_correction_table.py``.
    """
    ref = resources.files("pymc_minibatch_mh.kernels").joinpath(DEFAULT_TABLE_FILE)
    with ref.open("rb") as fh:
        return CorrectionTable.load(fh)
