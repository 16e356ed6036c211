"""Worst-case design of the Austerity test: choose (batch_size, epsilon) for a tolerance.

At the worst case ``mu_std = 0`` (the true mean sits exactly on the threshold) any
decision taken before ``n = N`` is a coin flip, so the sequential test's error is
``E(0, m, epsilon) = P(stop before N) / 2``. Treating the t statistic as z and the
partial sums of a batch drawn without replacement as a Gaussian random walk pinned
at 0 after all N points (a Brownian bridge), a dynamic program over a grid of the
standardised statistic gives ``E`` and the expected fraction of data used
``pi(0, m, epsilon)``. The design minimises the data used subject to ``E <= tolerance``
(Eq. 8 of the paper; conservative, needs no trial run).

References
----------
.. [1] Korattikara, A., Chen, Y., Welling, M. "Austerity in MCMC Land: Cutting
   the Metropolis-Hastings Budget", ICML 2014, Section 5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

DEFAULT_BATCH_SIZES = (100, 200, 500, 1000, 2000)
DEFAULT_EPSILONS = (0.1, 0.05, 0.02, 0.01, 0.005, 0.001, 0.0001)


@dataclass(frozen=True)
class AustereDesign:
    """A (batch_size, epsilon) pair with its worst-case error and data use.

    Attributes
    ----------
    batch_size, epsilon : int, float
        The chosen test parameters.
    error : float
        ``E(0, m, epsilon)``: worst-case probability that one sequential test errs.
    data_fraction : float
        Expected fraction of the N points one test uses at the worst case.
    """

    batch_size: int
    epsilon: float
    error: float
    data_fraction: float


def worst_case_error(
    n_data: int, batch_size: int, epsilon: float, grid: int = 81, tail: float = 1e-10
) -> tuple[float, float]:
    """``(E(0, m, epsilon), pi(0, m, epsilon))`` by a grid dynamic program.

    Parameters
    ----------
    n_data : int
        Dataset size N.
    batch_size : int
        ``m``: the batch grows by ``m`` points per stage.
    epsilon : float
        Per-stage tail-probability threshold of the t-test.
    grid : int
        Number of bins of the standardised statistic inside the continuation band.
    tail : float
        Stop the recursion once the mass still undecided is below this.
    """
    m = min(batch_size, n_data)
    sizes = list(range(m, n_data, m))  # stages strictly before the full data
    if not sizes:
        return 0.0, 1.0
    p_stop_early, used = 0.0, 0.0
    mass = prev_edges = None
    prev_sd = 1.0
    for j, n in enumerate(sizes):
        sd = math.sqrt(n * (n_data - n) / n_data)  # marginal sd of the partial sum
        z = stats.t.isf(epsilon, n - 1) * math.sqrt((n_data - 1) / n_data)
        edges = np.linspace(-z, z, grid + 1)
        if mass is None or prev_edges is None:
            cont = special.ndtr(edges[1:]) - special.ndtr(edges[:-1])
        else:
            centres = 0.5 * (prev_edges[1:] + prev_edges[:-1])
            shrink = (n_data - n) / (n_data - sizes[j - 1])
            mean = centres * shrink * prev_sd / sd
            noise = math.sqrt(m * shrink) / sd
            cdf = special.ndtr((edges[None, :] - mean[:, None]) / noise)
            cont = mass @ (cdf[:, 1:] - cdf[:, :-1])
        total_before = 1.0 if mass is None else float(mass.sum())
        stopped = total_before - float(cont.sum())
        p_stop_early += stopped
        used += stopped * n
        mass, prev_edges, prev_sd = cont, edges, sd
        if mass.sum() < tail:
            break
    remaining = max(0.0, 1.0 - p_stop_early)
    used += remaining * n_data
    return 0.5 * p_stop_early, used / n_data


def design_austere_test(
    n_data: int,
    tolerance: float,
    *,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    epsilons: Sequence[float] = DEFAULT_EPSILONS,
) -> AustereDesign:
    """Smallest expected data use with worst-case single-test error ``<= tolerance``.

    Parameters
    ----------
    n_data : int
        Dataset size N.
    tolerance : float
        Bound on ``E(0, m, epsilon)``, the worst-case probability that one
        sequential test decides differently from exact MH.
    batch_sizes, epsilons : sequences
        The grid searched.

    Returns
    -------
    AustereDesign
        ``epsilon = 0`` (exact MH on the full data) if no grid point meets the
        tolerance.

    Examples
    --------
    >>> from pymc_minibatch_mh.kernels.austere_design import design_austere_test
    >>> design = design_austere_test(100_000, tolerance=0.05)
    >>> design.error <= 0.05
    True
    """
    best = AustereDesign(max(batch_sizes), 0.0, 0.0, 1.0)
    for m in batch_sizes:
        for eps in epsilons:
            error, fraction = worst_case_error(n_data, m, eps)
            if error <= tolerance and fraction < best.data_fraction:
                best = AustereDesign(int(m), float(eps), error, fraction)
    return best
