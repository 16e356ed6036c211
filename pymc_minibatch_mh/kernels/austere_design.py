"""Worst-case design of the Austerity test: choose (batch_size, epsilon) for a tolerance.

Definitions (Section 5 of the paper). For one sequential test with first batch and
increment ``m`` and per-stage level ``epsilon``:

* ``E(mu_std, m, epsilon)`` is the probability that its decision differs from exact
  MH's, as a function of the standardised mean
  ``mu_std = (mu - mu0) sqrt(N - 1) / sigma_l``;
* ``pi(mu_std, m, epsilon)`` is the expected fraction of the N data points it reads.

``E`` is largest at ``mu_std = 0`` (the true mean sits on the threshold): there any
decision taken before ``n = N`` is a coin flip, so ``E(0, m, epsilon)`` is half the
probability of stopping before ``N`` (the limit ``mu -> mu0``). It bounds ``E`` for
every ``(q, q', u)`` and hence the error of the acceptance probability.

The dynamic program treats the t statistic as z and the batch sums as Gaussian.
Drawing without replacement, the centred partial sum ``S_n`` is a Brownian bridge
pinned at 0 at ``n = N`` (``Var S_n = n (N - n) / N`` in units of the population
variance), and ``X_n = S_n N / (N - n)`` is a Brownian motion at time
``tau_n = n N / (N - n)``. The test at stage ``n`` stops when
``|t| > t_{n-1, 1-epsilon}``, i.e. ``|X_n| > t_{n-1, 1-epsilon} sqrt(N / (N - 1)) sqrt(tau_n)``
(the factor comes from the paper's ``(n - 1) / (N - 1)`` finite-population term). The
density of the surviving ``X`` is propagated stage by stage on a uniform grid
(piecewise linear between nodes, the boundary segments treated exactly), each stage a
Gaussian convolution whose width is reduced by the ``h^2 / 6`` variance that linear
interpolation adds. Checked against simulations of the sequential test itself (see
``tests/kernels/test_austere_design.py``).

References
----------
.. [1] Korattikara, A., Chen, Y., Welling, M. "Austerity in MCMC Land: Cutting
   the Metropolis-Hastings Budget", ICML 2014, Section 5 (Eq. 8: worst-case design).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

DEFAULT_BATCH_SIZES = (200, 500, 1000, 2000, 5000)
DEFAULT_EPSILONS = (
    0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 5e-4, 2e-4, 1e-4, 1e-5, 1e-6
)  # fmt: skip
DEFAULT_MAX_STAGES = 20_000

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_KERNEL_WIDTH = 8.5  # Gaussian kernels are cut at +-8.5 sd (mass beyond: 2e-17)


@dataclass(frozen=True)
class AustereDesign:
    """A (batch_size, epsilon) pair with its worst-case error and data use.

    Attributes
    ----------
    batch_size : int
        First batch and increment ``m``.
    epsilon : float
        Per-stage level of the t-test (0: exact MH on all N points).
    error : float
        ``E(0, m, epsilon)``: worst-case probability that one sequential test decides
        differently from exact MH.
    data_fraction : float
        ``pi(0, m, epsilon)``: expected fraction of the N points one test reads in that
        worst case (tests away from the threshold stop much earlier).
    """

    batch_size: int
    epsilon: float
    error: float
    data_fraction: float


def stage_sizes(n_data: int, batch_size: int) -> np.ndarray:
    """Data used at each t-test made before the full data: ``m, 2m, ...`` (all ``< N``)."""
    m = min(int(batch_size), int(n_data))
    return np.arange(m, n_data, m, dtype=np.int64)


def _segments(y, z0, z1, f0, f1, sd):
    """``int_{z0}^{z1} f(x) phi((y - x) / sd) / sd dx`` for ``f`` linear from f0 to f1."""
    lo = (z0 - y) / sd
    hi = (z1 - y) / sd
    slope = (f1 - f0) / (z1 - z0)
    level = f0 + slope * (y - z0)
    gauss = np.exp(-0.5 * lo * lo) - np.exp(-0.5 * hi * hi)
    return level * (special.ndtr(hi) - special.ndtr(lo)) + slope * sd * _INV_SQRT_2PI * gauss


def _hat_kernel(reach: int, h: float, sd: float) -> np.ndarray:
    """``(hat * N(0, sd^2))(d h)`` for ``d = -reach..reach``; ``hat`` has half-width ``h``.

    The hat is the second difference of the ramp ``max(x, 0)`` divided by ``h``, and
    the ramp convolved with the Gaussian is ``x Phi(x / sd) + sd phi(x / sd)``.
    """
    x = np.arange(-reach - 1, reach + 2) * h
    r = x / sd
    ramp = x * special.ndtr(r) + sd * _INV_SQRT_2PI * np.exp(-0.5 * r * r)
    return (ramp[2:] - 2.0 * ramp[1:-1] + ramp[:-2]) / h


def _last_node(edge: float, h: float) -> int:
    """Largest ``k`` with ``k h`` clearly inside ``edge`` (the last segment is never empty)."""
    return math.ceil(edge / h - 1e-6) - 1


def _alive_mass(f: np.ndarray, f_edge: float, k_max: int, h: float, edge: float) -> float:
    """Integral of the piecewise-linear density on ``[-edge, edge]`` (symmetric)."""
    interior = h * (f.sum() - 0.5 * (f[0] + f[-1]))
    return interior + (edge - k_max * h) * (f[-1] + f_edge)


def worst_case_error(
    n_data: int, batch_size: int, epsilon: float, *, resolution: int | None = None
) -> tuple[float, float]:
    """``(E(0, m, epsilon), pi(0, m, epsilon))`` of the sequential test, by dynamic programming.

    Parameters
    ----------
    n_data : int
        Dataset size N.
    batch_size : int
        ``m``: first batch and increment (capped at N).
    epsilon : float
        Per-stage tail-probability threshold, in ``[0, 0.5)``; 0 never stops early.
    resolution : int, optional
        Grid nodes per half-width of the continuation band. Default: enough to resolve
        the narrowest stage-to-stage step (about ``sqrt(N / m)``, at least 25).

    Returns
    -------
    (float, float)
        The worst-case error probability of one sequential test and the expected
        fraction of the data it reads. Cost is ``O(N / m)`` stages.

    Notes
    -----
    Assumes the test statistic is Gaussian at every stage (``m`` of a few hundred, so
    that the CLT holds for the batch means). With ``mu_std = 0`` the surviving density
    is symmetric, which the recursion uses.
    """
    n_data, batch_size = int(n_data), int(batch_size)
    if n_data < 1 or batch_size < 2:
        raise ValueError(f"need n_data >= 1 and batch_size >= 2; got {n_data}, {batch_size}.")
    if not 0.0 <= epsilon < 0.5:
        raise ValueError(f"epsilon must lie in [0, 0.5); got {epsilon}.")
    n = stage_sizes(n_data, batch_size).astype(float)
    if n.size == 0 or epsilon == 0.0:
        return 0.0, 1.0
    tau = n * n_data / (n_data - n)
    bound = special.stdtrit(n - 1, 1.0 - epsilon) * math.sqrt(n_data / (n_data - 1)) * np.sqrt(tau)
    step_var = np.diff(tau)
    if resolution is None:
        narrowest = float(np.min(np.sqrt(step_var) / bound[1:])) if n.size > 1 else 1.0
        resolution = max(25, math.ceil(0.8 / narrowest))
    resolution = int(resolution)

    # Stage 1: X ~ N(0, tau_1) restricted to the continuation band.
    edge = float(bound[0])
    h = edge / resolution
    k_max = _last_node(edge, h)
    sd0 = math.sqrt(tau[0])
    f = np.exp(-0.5 * (np.arange(-k_max, k_max + 1) * h / sd0) ** 2) * _INV_SQRT_2PI / sd0
    f_edge = math.exp(-0.5 * (edge / sd0) ** 2) * _INV_SQRT_2PI / sd0
    alive = _alive_mass(f, f_edge, k_max, h, edge)
    p_early = 1.0 - alive
    used = p_early * n[0]
    sign = np.array([1.0, -1.0])

    for j in range(1, n.size):
        if alive < 1e-14:
            break
        # Linear interpolation between nodes adds variance h^2 / 6 per convolution:
        # take it off the kernel (the grid is fine enough that sd >~ 0.8 h).
        sd = math.sqrt(max(step_var[j - 1] - h * h / 6.0, 0.4 * h * h))
        new_edge = float(bound[j])
        new_k = _last_node(new_edge, h)
        reach = math.ceil(_KERNEL_WIDTH * sd / h) + 1

        # Interior: the expansion in hat functions makes this a discrete convolution.
        full = np.convolve(f, _hat_kernel(reach, h, sd))  # full[i] is node i - reach - k_max
        g = np.zeros(2 * new_k + 1)
        lo = max(-new_k, -reach - k_max)
        hi = min(new_k, reach + k_max)
        g[lo + new_k : hi + new_k + 1] = full[lo + reach + k_max : hi + reach + k_max + 1]

        # Edges: swap the outer half-hat for the true last segment [k_max h, edge].
        x_last = k_max * h
        first = max(-new_k, k_max - reach - 1)
        y = np.arange(first, new_k + 1)[:, None] * h
        z1 = np.array([edge, x_last + h])
        f1 = np.array([f_edge, 0.0])
        fix = _segments(y, x_last, z1, f[-1], f1, sd) @ sign
        g[first + new_k :] += fix
        g[: fix.size] += fix[::-1]  # mirror image at the left edge

        # Density at the new band edge, from the source segments within reach.
        lo_node = max(-k_max, math.floor((new_edge - _KERNEL_WIDTH * sd) / h))
        nodes = np.append(np.arange(lo_node, k_max + 1) * h, edge)
        values = np.append(f[lo_node + k_max :], f_edge)
        if lo_node == -k_max:  # the band is narrow: the left end segment counts too
            nodes = np.insert(nodes, 0, -edge)
            values = np.insert(values, 0, f_edge)
        pieces = _segments(new_edge, nodes[:-1], nodes[1:], values[:-1], values[1:], sd)
        right = float(np.sum(pieces))

        f, f_edge, k_max, edge = g, right, new_k, new_edge
        if k_max > 2 * resolution:  # the band has doubled: drop every other node
            f = f[(k_max % 2) :: 2]
            h *= 2.0
            k_max //= 2
        new_alive = _alive_mass(f, f_edge, k_max, h, edge)
        stopped = alive - new_alive
        p_early += stopped
        used += stopped * n[j]
        alive = new_alive

    used += max(alive, 0.0) * n_data
    return float(0.5 * p_early), float(used / n_data)


def design_austere_test(
    n_data: int,
    tolerance: float,
    *,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    epsilons: Sequence[float] = DEFAULT_EPSILONS,
    max_stages: int = DEFAULT_MAX_STAGES,
) -> AustereDesign:
    """Smallest worst-case data use subject to a worst-case error ``<= tolerance``.

    Solves Eq. 8 of Korattikara et al. by grid search: minimise ``pi(0, m, epsilon)``
    over ``m`` in ``batch_sizes`` and ``epsilon`` in ``epsilons`` subject to
    ``E(0, m, epsilon) <= tolerance``. This is the conservative design: it needs no
    trial run, but because it guards against the worst case ``mu_std = 0`` it uses far
    more data than typical tests do. The error it bounds is per MH decision; the bias
    of the posterior that results is not bounded by it directly (a tolerance of 0.02
    gave posterior sds within about 10% for a Gaussian mean up to N = 1e6 in
    ``benchmarks/austere_data_use.py``).

    Parameters
    ----------
    n_data : int
        Dataset size N.
    tolerance : float
        Bound on ``E(0, m, epsilon)``, the probability that one sequential test (one MH
        decision) differs from exact MH; in ``(0, 0.5)``.
    batch_sizes : sequence of int
        Candidate ``m`` (each at least 2). Keep them in the hundreds or more: the
        design assumes the CLT holds for batch means.
    epsilons : sequence of float
        Candidate per-stage levels in ``(0, 0.5)``.
    max_stages : int
        The dynamic program costs ``O(N / m)``; candidates with more than ``max_stages``
        stages are replaced by ``m = ceil(N / max_stages)``.

    Returns
    -------
    AustereDesign
        The chosen pair with its ``error`` and ``data_fraction``. If no candidate meets
        the tolerance the design is exact MH (``epsilon = 0``, all N points).

    References
    ----------
    .. [1] Korattikara, A., Chen, Y., Welling, M. "Austerity in MCMC Land: Cutting
       the Metropolis-Hastings Budget", ICML 2014, Eq. 8.

    Examples
    --------
    >>> from pymc_minibatch_mh import design_austere_test
    >>> design = design_austere_test(100_000, tolerance=0.05)
    >>> design.error <= 0.05
    True
    """
    n_data = int(n_data)
    if n_data < 2:
        raise ValueError(f"n_data must be at least 2; got {n_data}.")
    if not 0.0 < tolerance < 0.5:
        raise ValueError(f"tolerance must lie in (0, 0.5); got {tolerance}.")
    if not batch_sizes or any(int(m) != m or m < 2 for m in batch_sizes):
        raise ValueError(f"batch_sizes must be integers >= 2; got {list(batch_sizes)}.")
    if not epsilons or any(not 0.0 < e < 0.5 for e in epsilons):
        raise ValueError(f"epsilons must lie in (0, 0.5); got {list(epsilons)}.")
    smallest = math.ceil(n_data / max_stages)
    candidates = sorted({min(max(int(m), smallest), n_data) for m in batch_sizes})
    ladder = sorted({float(e) for e in epsilons})  # E increases with epsilon

    best = AustereDesign(max(candidates), 0.0, 0.0, 1.0)
    for m in candidates:
        # Largest epsilon whose error is within tolerance (E is monotone in epsilon,
        # and pi decreases with it): binary search on the ladder.
        lo, hi, found = 0, len(ladder) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            error, fraction = worst_case_error(n_data, m, ladder[mid])
            if error <= tolerance:
                found = AustereDesign(m, ladder[mid], error, fraction)
                lo = mid + 1
            else:
                hi = mid - 1
        if found is not None and found.data_fraction < best.data_fraction:
            best = found
    return best
