"""Bounds on differences of second-order Taylor remainders, for TunaMH with control variates.

With control variates the energies TunaMH subsamples are the remainders
``R_i(q) = l_i(q) - p_i(q)`` of the second-order Taylor proxy ``p_i`` around ``q*``.
For a likelihood that depends on ``q`` through ``eta_i = x_i . q + o_i``,
``l_i(q) = f_i(eta_i)`` and ``R_i = rho_i(eta_i)`` with ``rho_i`` the remainder of ``f_i``
at ``eta_i* = x_i . q* + o_i``, so ``|rho_i'(eta)| <= L3_i (eta - eta_i*)^2 / 2`` where
``L3_i = sup |f_i'''|``. Integrating along the segment from ``q`` to ``q'``:

    |R_i(q') - R_i(q)| <= L3_i / 2 |x_i . d| ((x_i . m)^2 + (x_i . d)^2 / 12)

with ``d = q' - q`` and ``m = (q + q')/2 - q*``. Cauchy–Schwarz with any invertible ``L``
(``|x . v| <= ||L^T x|| ||L^{-1} v||``) gives ``|R_i(q') - R_i(q)| <= c_i M(q, q')`` with

    c_i = L3_i ||L^T x_i||^3 / 2,   M(q, q') = ||L^{-1} d|| (||L^{-1} m||^2 + ||L^{-1} d||^2 / 12).

``M`` is symmetric in ``(q, q')``. Near ``q*`` and for posterior-scale moves, ``C M`` is of
order ``N^{-1/2}``: TunaMH then reads almost no data per step and stays exact.

Third-derivative bounds ``L3`` (untempered):

* Bernoulli, logit link: ``sup |sigma (1 - sigma) (1 - 2 sigma)| = sqrt(3) / 18``;
* Bernoulli, probit link: ``sup |d^3/d s^3 log Phi(s)|``, about 0.296
  (:mod:`pymc_minibatch_mh.families.bernoulli_probit`);
* Bernoulli, complementary log-log link: about 0.426 where ``y = 1``, and on the trust region
  ``exp(eta_hi)`` where ``y = 0`` (:mod:`pymc_minibatch_mh.families.bernoulli_cloglog`);
* Normal with fixed ``sigma``: 0 (the proxy is exact; no data is ever read);
* Student-t with fixed ``nu``, ``sigma``: ``2 (nu + 1) sup_t |t (3 - t^2)| / (1 + t^2)^3 /
  (nu^{3/2} sigma^3)`` (the supremum over ``t`` is found numerically once);
* Poisson, log link: ``f''' = -exp(eta)`` has no global bound; on the trust region
  (below) ``L3_i = exp(eta_i* + rho ||L^T x_i||)``, the largest ``exp(eta_i)`` there;
* Negative binomial (log mean, fixed ``alpha``): ``f''' = -(alpha + y) p q (q - p)`` with
  ``p = mu / (alpha + mu)``, so ``L3_i = (alpha + y_i) sqrt(3) / 18`` globally; with a free
  ``alpha`` the two channels ``(eta, log alpha)`` are bounded on the trust region term by
  term (``docs/methods/tunamh.md`` lists the four third derivatives and their bounds);
* Gamma, log mean ``eta`` and shape ``alpha``: ``f(eta) = -alpha (eta + y e^{-eta})`` + const,
  ``f''' = alpha y e^{-eta}``, unbounded as ``eta`` falls; on the trust region
  ``L3_i = alpha y_i exp(-eta_i* + rho ||L^T x_i||)``. With a free ``alpha`` the channels
  ``(eta, t = log alpha)`` are bounded term by term on the region, as for the negative
  binomial (:func:`_gamma_t3`);
* Categorical (softmax of K logits ``eta_i = A_i q + b_i``, ``A_i`` of shape ``(K, D)``):
  ``f_i(eta) = eta_{y_i} - logsumexp(eta)``, whose third derivative in the directions
  ``a, a, a`` is minus the third central moment of ``a_C`` with ``C ~ Categorical(softmax
  eta)``. A variable with range ``r`` has a third central moment of at most
  ``r^3 sqrt(3) / 18`` in absolute value (two-point distributions on the ends are the
  extreme ones). The range does not change when a constant is added to every logit, and
  ``max_k a_k - min_k a_k <= sqrt(2) ||P a||`` with ``P = I - 1 1^T / K`` the centring
  projection, so ``|D^3 f [a, a, a]| <= T3 ||P a||^3`` with
  ``T3 = 2 sqrt(2) sqrt(3) / 18`` for every ``eta`` (global). For a symmetric trilinear
  form on a Euclidean space the largest ``|D^3 f [a, a, b]|`` over unit ``a, b`` equals
  the largest ``|D^3 f [a, a, a]|`` (Banach), and ``D^3 f`` only sees ``P a``, so the
  vector-channel argument of the next paragraph gives ``c_i = T3 ||P A_i L||_2^3 / 2`` with
  the same metric; ``||P A_i L||_2^2`` is the largest eigenvalue of the ``K x K`` matrix
  ``P A_i S A_i^T P`` (the projection keeps the directions that shift every logit
  equally, which the softmax ignores, from loosening the bound).

**Free scale (Normal and Student-t).** With ``s = log sigma = z . q + s0`` free, the
per-datum log-likelihood is a function of two affine channels, ``l_i = f_i(eta_i, s)``
with ``f_i(eta, s) = -s + g((y_i - eta) e^{-s})`` up to a constant
(``g(u) = -u^2 / 2`` for the Normal, ``g(u) = -(nu + 1)/2 log(1 + u^2 / nu)`` for
Student-t). The argument above goes through for a vector of channels
``u_i = A_i q + b_i`` (rows ``x_i`` and ``z``), measured in scaled units
``W = diag(w, 1)`` with ``w = e^{-s*}`` (``eta`` in units of the reference ``sigma``):
the gradient remainder along the segment is at most
``T3_i / 2 ||W A_i (q - q*)||^2 ||W A_i d||`` where ``T3_i`` bounds the Frobenius norm of
the third-derivative tensor of ``f_i`` in the scaled channels (the Frobenius norm bounds
``|D^3 f [a, a, a]| / ||a||^3``), and ``||W A_i v|| <= ||W A_i L||_2 ||L^{-1} v||``. So

    c_i = T3_i ||W A_i L||_2^3 / 2   with the same metric M,

where ``||W A_i L||_2^2`` is the largest eigenvalue of the 2 x 2 matrix
``[[w^2 x_i' S x_i, w x_i' S z], [w x_i' S z, z' S z]]``, ``S = L L^T``. Writing
``u = (y - eta) e^{-s}`` and ``delta = s - s*``, the scaled third derivatives are

    f_eee = -g''' e^{-3 delta},       f_ees = -(u g''' + 2 g'') e^{-2 delta},
    f_ess = -(g' + 3 u g'' + u^2 g''') e^{-delta},   f_sss = -(u g' + 3 u^2 g'' + u^3 g'''),

and ``T3^2 = f_eee^2 + 3 f_ees^2 + 3 f_ess^2 + f_sss^2`` (each mixed entry appears three
times in the symmetric tensor). Neither channel is bounded globally (``e^{-delta}`` grows
without limit as ``sigma -> 0``), so the bound is taken on the trust region, where
``delta >= -rho sqrt(z' S z)`` and ``|y_i - eta_i| <= |y_i - eta_i*| + rho ||L^T x_i||``.
With ``E = e^{rho sqrt(z' S z)}``:

* Normal (``g' = -u``, ``g'' = -1``, ``g''' = 0``): ``f_eee = 0``, ``|f_ees| = 2 e^{-2 delta}``,
  ``|f_ess| = 4 |u| e^{-delta}``, ``|f_sss| = 4 u^2``, so
  ``T3_i^2 = 12 E^4 + 48 U_i^2 E^2 + 16 U_i^4`` with ``U_i`` the largest ``|u|`` on the
  region, ``(|y_i - eta_i*| + rho ||L^T x_i||) e^{-(s* - rho sqrt(z' S z))}``;
* Student-t: the four functions of ``u`` in brackets are bounded on the whole real line
  (``g`` grows like a logarithm); with ``B_1..B_4`` their suprema (found once
  numerically, on a dense grid refined by a bounded optimiser, then enlarged by 0.1 %),
  ``T3^2 = B_1^2 E^6 + 3 B_2^2 E^4 + 3 B_3^2 E^2 + B_4^2`` (the same for every datum).

**Trust region.** Where ``L3`` or ``T3`` needs one, the bound holds on
``R = {q : ||L^{-1}(q - q*)|| <= rho}`` (:mod:`pymc_minibatch_mh.bounds.trust_region`);
both ends of every move lie in ``R`` (TunaMH rejects proposals outside it before
reading any datum), and ``R`` is convex, so the whole segment does too. The chain is
then exact for the posterior restricted to ``R``, whose default radius leaves out
negligible mass. Every bound here is also checked on each datum the kernel draws.

References
----------
.. [1] Zhang, R., Cooper, A. F., De Sa, C. "Asymptotically Optimal Exact Minibatch
   Metropolis-Hastings", NeurIPS 2020.
.. [2] Cornish, R., Vanetti, P., Bouchard-Côté, A., Deligiannidis, G., Doucet, A.
   "Scalable Metropolis-Hastings for exact Bayesian inference with large datasets",
   ICML 2019.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from scipy import linalg, special

from pymc_minibatch_mh.bounds.beta_curvature import beta_a_suprema, beta_row_terms
from pymc_minibatch_mh.bounds.grid_supremum import supremum_on_grid
from pymc_minibatch_mh.bounds.hurdle_curvature import (
    hurdle_third_derivatives,
    truncation_third_derivative,
)
from pymc_minibatch_mh.bounds.lipschitz import (
    LipschitzBound,
    UnsupportedBound,
    _row_norms,
)
from pymc_minibatch_mh.bounds.ordinal_curvature import ordinal_suprema
from pymc_minibatch_mh.bounds.row_cells import CellRegion, RowCells
from pymc_minibatch_mh.bounds.sigmoid_derivatives import SIGMOID_D1, SIGMOID_D2, SIGMOID_D3
from pymc_minibatch_mh.bounds.trust_region import TrustRegion, default_radius
from pymc_minibatch_mh.bounds.zinb_curvature import (
    frobenius,
    hurdle_nb_third_derivatives,
    truncation_suprema,
    zinb_third_derivatives,
)
from pymc_minibatch_mh.bounds.zip_curvature import zip_third_derivatives
from pymc_minibatch_mh.data import blocks as data_blocks
from pymc_minibatch_mh.data.chunk_pass import design_map
from pymc_minibatch_mh.data.pass_tally import record_rows
from pymc_minibatch_mh.data.row_design import design_rows
from pymc_minibatch_mh.families.registry import FAMILY_RECORDS, family_numerics, family_record

if TYPE_CHECKING:  # pragma: no cover - typing only (kept out of the import path)
    from pymc_minibatch_mh.likelihood.glm_likelihoods import LinearPredictorLikelihood

#: ``sup |d^3/d eta^3 log sigmoid(eta)| = sup |sigmoid''|`` (the Bernoulli-logit ``L3``).
LOGISTIC_THIRD_DERIVATIVE = SIGMOID_D2
#: ``T3`` of the softmax log-likelihood in the Euclidean norm of the K logits (global).
SOFTMAX_THIRD_DERIVATIVE = 2.0 * math.sqrt(2.0) * LOGISTIC_THIRD_DERIVATIVE


@lru_cache(maxsize=1)
def _student_t_shape_constant() -> float:
    """``sup_t |t (3 - t^2)| / (1 + t^2)^3`` (attained near ``t = 0.41``)."""

    def shape(t):
        return np.abs(t * (3.0 - t * t)) / (1.0 + t * t) ** 3

    from scipy import optimize  # imported when needed: 0.3 s of every step's setup

    grid = np.linspace(0.0, 5.0, 5_001)
    t0 = float(grid[np.argmax(shape(grid))])
    best = optimize.minimize_scalar(
        lambda t: -shape(t),
        bounds=(max(t0 - 0.01, 0.0), t0 + 0.01),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(shape(best.x))


def needs_region(lp: LinearPredictorLikelihood) -> bool:
    """Whether the remainder bound of ``lp`` holds only on a trust region."""
    parts = getattr(lp, "parts", (lp,))
    return any(
        family_record(part.family).unbounded_curvature or getattr(part, "scale_is_free", False)
        for part in parts
    )


def remainder_bound_unavailable(lp) -> str | None:
    """Why no Taylor-remainder bound exists for ``lp`` (None if one does)."""
    for part in getattr(lp, "parts", (lp,)):
        if part.family not in FAMILY_RECORDS:
            return (
                f"no bound on the third derivative of a {part.family} log-likelihood (which "
                "bounds its Taylor remainders) is available"
            )
    return None


def third_derivative_bound(lp: LinearPredictorLikelihood) -> np.ndarray:
    """``L3_i = sup_eta |d^3/d eta^3 log p(y_i | eta)|`` per datum (untempered).

    Raises
    ------
    UnsupportedBound
        For families without a finite global bound (Poisson) or not covered here
        (Categorical).
    """
    n = lp.n_data
    if lp.family == "bernoulli_logit":
        return np.full(n, LOGISTIC_THIRD_DERIVATIVE)
    numerics = family_numerics(lp.family)
    if numerics is not None and not family_record(lp.family).unbounded_curvature:
        return numerics.third_derivative_bounds(lp, None)
    if lp.family == "binomial_logit":
        # y eta - n log(1 + e^eta): the third derivative is -n sigmoid''(eta).
        trials = np.broadcast_to(np.asarray(lp.params["n"], dtype=np.float64), (n,))
        return trials * LOGISTIC_THIRD_DERIVATIVE
    if lp.family == "normal":
        return np.zeros(n)
    if lp.family == "student_t":
        nu = np.broadcast_to(np.asarray(lp.params["nu"], dtype=np.float64), (n,))
        sigma = np.broadcast_to(np.asarray(lp.params["sigma"], dtype=np.float64), (n,))
        return 2.0 * (nu + 1.0) * _student_t_shape_constant() / (nu**1.5 * sigma**3)
    if lp.family == "negative_binomial":
        # f^(3) = -(alpha + y) p q (q - p) with p = mu / (alpha + mu), q = 1 - p.
        alpha = np.broadcast_to(np.asarray(lp.params["alpha"], dtype=np.float64), (n,))
        return (alpha + np.asarray(lp.observed, dtype=np.float64)) * LOGISTIC_THIRD_DERIVATIVE
    raise UnsupportedBound(
        f"No global scalar bound on the third derivative of a {lp.family} log-likelihood is "
        "available (Poisson's holds on a trust region only; Categorical's is a bound on the "
        "K logits, see taylor_remainder_bound). Use MinibatchBarker/Austere with control "
        "variates."
    )


def _grid_supremum(fn, upper: float) -> float:
    """``sup_{0 <= t <= upper} |fn(t)|`` for a smooth ``fn`` (:func:`_supremum_on_grid`)."""
    grid = np.concatenate([np.linspace(0.0, 10.0, 20_001), np.geomspace(10.0, upper, 2_001)])
    return supremum_on_grid(fn, grid)


def student_t_g_derivatives(nu: float, u):
    """``(g', g'', g''')`` at ``u`` for ``g(u) = -(nu + 1)/2 log(1 + u^2 / nu)``, the
    standardised Student-t log-density up to a constant."""
    v = nu + u * u
    return (
        -(nu + 1.0) * u / v,
        -(nu + 1.0) * (nu - u * u) / v**2,
        2.0 * (nu + 1.0) * u * (3.0 * nu - u * u) / v**3,
    )


def single_nu(lp) -> float:
    """The one ``nu`` of a Student-t likelihood with a free scale (for all rows, or one per
    row), which the scale bounds need; refused if the rows have several."""
    nu = np.unique(np.asarray(lp.params["nu"], dtype=np.float64))
    if nu.size != 1:
        raise UnsupportedBound(
            "Student-t with a free scale needs one nu for all data (got several values)."
        )
    return float(nu[0])


@lru_cache(maxsize=64)
def student_t_scale_constants(nu: float) -> tuple[float, float, float, float]:
    """``B_1..B_4``: suprema over ``u`` of ``|g'''|``, ``|u g''' + 2 g''|``,
    ``|g' + 3 u g'' + u^2 g'''|`` and ``|u g' + 3 u^2 g'' + u^3 g'''|`` for
    ``g(u) = -(nu + 1)/2 log(1 + u^2 / nu)`` (each is even or odd in ``u``)."""

    def phi(k):
        def fn(u):
            g1, g2, g3 = student_t_g_derivatives(nu, u)
            return (
                g3,
                u * g3 + 2.0 * g2,
                g1 + 3.0 * u * g2 + u * u * g3,
                u * g1 + 3.0 * u * u * g2 + u**3 * g3,
            )[k]

        return fn

    upper = 1e4 * math.sqrt(nu)
    return tuple(_grid_supremum(phi(k), upper) for k in range(4))


@dataclass(frozen=True)
class RemainderMetric:
    """``M(q, q') = ||W d|| (||W m||^2 + ||W d||^2 / 12)`` with ``W = L^{-1}``,
    ``d = q' - q`` and ``m = (q + q') / 2 - centre``; symmetric in ``(q, q')``, O(D^2)."""

    centre: np.ndarray
    chol: np.ndarray | None = None
    _inverse: np.ndarray | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        centre = np.array(self.centre, dtype=np.float64)
        centre.setflags(write=False)
        object.__setattr__(self, "centre", centre)
        inverse = None
        if self.chol is not None:
            inverse = linalg.solve_triangular(
                np.asarray(self.chol, dtype=np.float64), np.eye(centre.size), lower=True
            )
        object.__setattr__(self, "_inverse", inverse)

    def __call__(self, q: np.ndarray, q_new: np.ndarray) -> float:
        d = np.asarray(q_new, dtype=np.float64) - q
        m = 0.5 * (np.asarray(q_new, dtype=np.float64) + q) - self.centre
        if self._inverse is not None:
            d = self._inverse @ d
            m = self._inverse @ m
        dd = float(d @ d)
        return math.sqrt(dd) * (float(m @ m) + dd / 12.0)


#: A row whose remainder constant exceeds this (in the metric's whitened units, where a
#: typical move has ``M`` of order D; not applied without a Laplace factor) would be drawn
#: about ``c_i M`` times per step: it is evaluated exactly at every step instead
#: (``LipschitzBound.exact_rows``), as is a row whose constant overflows on the trust
#: region (a quasi-separated category).
EXACT_ROW_CONSTANT = 1.0
#: Largest fraction of the rows evaluated exactly (the loosest first); rows whose constant
#: overflows beyond it make the bound refused.
MAX_EXACT_FRACTION = 0.5


def taylor_remainder_bound(
    lp: LinearPredictorLikelihood,
    reference: np.ndarray,
    *,
    chol: np.ndarray | None = None,
    radius: float | None = None,
    cells: RowCells | None = None,
) -> LipschitzBound:
    """TunaMH bound for the Taylor-remainder differences around ``reference``.

    Parameters
    ----------
    lp : LinearPredictorLikelihood
        The recognised likelihood (design rows ``x_i``, family and parameters).
    reference : ndarray
        The expansion point ``q*`` of the control variates.
    chol : ndarray, optional
        Lower-triangular ``L`` for the whitened norms (e.g. the Cholesky factor of the
        Laplace covariance); ``None`` for Euclidean norms. Must stay fixed while a chain
        that has to be exact uses the bound. Required when the bound needs a trust
        region (Poisson, free scale), whose shape it gives.
    radius : float, optional
        Radius of the trust region in units of ``L`` (default
        :func:`~pymc_minibatch_mh.bounds.trust_region.default_radius`).
    cells : RowCells, optional
        Rows grouped by the coordinates they touch (built with ``reference`` and ``chol``,
        :mod:`pymc_minibatch_mh.bounds.row_cells`): the bound then has a metric per cell,
        and a trust region, where one is needed, is a :class:`CellRegion` whose per-cell
        radius is ``sqrt(|T|)`` plus the margin of ``radius`` over ``sqrt(D)``.

    Returns
    -------
    LipschitzBound
        With ``region`` set when the bound holds on a trust region only.

    Several observed variables over the same rows (a ``CompositeLikelihood``): the bound
    of the sum is the sum of the parts' bounds, which share the metric (and the region).

    Raises
    ------
    UnsupportedBound
        A trust region without ``chol``; constants that overflow.
    """
    parts = getattr(lp, "parts", None)
    if parts is not None:
        radius = default_radius(np.size(reference)) if radius is None else radius
        bounds = [taylor_remainder_bound(p, reference, chol=chol, radius=radius) for p in parts]
        region = next((b.region for b in bounds if b.region is not None), None)
        families = ", ".join(p.family for p in parts)
        return LipschitzBound(
            np.sum([b.c for b in bounds], axis=0),
            bounds[0].metric,
            description=f"sum of second-order Taylor remainder bounds ({families})",
            region=region,
        )
    reference = np.asarray(reference, dtype=np.float64)
    if lp.family == "categorical_logit":
        return LipschitzBound(
            _softmax_constants(lp, chol),
            RemainderMetric(reference, chol),
            description="second-order Taylor remainder of a categorical_logit likelihood",
        )
    region = None
    if needs_region(lp):
        if chol is None:
            raise UnsupportedBound(
                f"The remainder bound of a {lp.family} likelihood"
                f"{' with a free scale' if lp.free_scale else ''} holds on a trust region "
                "shaped by the Laplace covariance, which is not available here."
            )
        radius = default_radius(reference.size) if radius is None else radius
        if cells is None:
            region = TrustRegion(reference, chol, radius)
        else:
            margin = max(radius - math.sqrt(reference.size), 1.0)
            region = CellRegion.around(cells, chol, margin)
    if family_record(lp.family).ordinal:
        c = _ordinal_constants(lp, region)
    elif family_record(lp.family).odds_channel:
        c = _three_channel_constants(lp, region)
    elif getattr(lp, "scale_is_free", False):
        c = _free_scale_constants(lp, region)
    else:
        norms = _row_norms(lp.design, chol)
        numerics = family_numerics(lp.family)
        if numerics is not None and family_record(lp.family).unbounded_curvature:
            l3 = numerics.third_derivative_bounds(lp, _eta_ranges(lp, region, norms))
        elif lp.family in ("beta_logit", "zip_log", "hurdle_poisson_log"):
            l3 = region_third_derivatives(lp, region, norms)[0]
        else:
            l3 = third_derivative_bound(lp)
        # c = 0.5 * l3 * norms**3, with no further N-long temporaries (same values: the
        # product is formed in the same order up to commutativity).
        half_l3 = 0.5 * l3
        del l3
        c = np.power(norms, 3, out=norms)
        c *= half_l3
        del half_l3
        c.setflags(write=False)  # handed to LipschitzBound without a copy
    exact = ~np.isfinite(c)
    most = int(MAX_EXACT_FRACTION * c.size)
    if chol is not None:  # c in whitened units, where EXACT_ROW_CONSTANT means something
        # The loosest rows first, as many as the cap allows (each saves more reads than
        # it costs).
        loose = np.flatnonzero(np.isfinite(c) & (c > EXACT_ROW_CONSTANT))
        room = max(most - int(exact.sum()), 0)
        if loose.size > room:
            loose = loose[np.argsort(c[loose])[::-1][:room]]
        exact[loose] = True
    if exact.sum() > most:
        raise UnsupportedBound(
            f"The remainder constants of the {lp.family} likelihood overflow on the trust "
            "region for most rows: the linear predictor is too large there. Use "
            "MinibatchBarker / Austere."
        )
    exact_rows = None
    if exact.any():  # evaluated at every step instead of drawn (LipschitzBound)
        c = np.where(exact, 0.0, c)
        c.setflags(write=False)
        exact_rows = np.flatnonzero(exact)
    scale = " with a free scale" if getattr(lp, "free_scale", False) else ""
    if family_record(lp.family).odds_channel:
        free = [name for name, on in (("alpha", lp.free_scale), ("psi", lp.free_odds)) if on]
        scale = f" with {' and '.join(free)} free" if free else ""
    if getattr(lp, "row_scales", False):
        scale = " with a log-linear scale per row"
    where = ""
    if isinstance(region, CellRegion):
        where = (
            f", on a trust region of radius {region.radius:.3g} to "
            f"{float(region.radii.max()):.3g} in each cell"
        )
    elif region is not None:
        where = f", on a trust region of radius {region.radius:.3g}"
    if cells is not None:
        where += (
            f"; a metric per cell of rows that touch the same coordinates "
            f"({cells.n_cells} cells of at most {cells.width} coordinates)"
        )
    return LipschitzBound(
        c,
        RemainderMetric(reference, chol),
        description=f"second-order Taylor remainder of a {lp.family} likelihood{scale}{where}",
        region=region,
        cells=cells,
        exact_rows=exact_rows,
    )


def _softmax_constants(lp: LinearPredictorLikelihood, chol: np.ndarray | None) -> np.ndarray:
    """``c_i = T3 ||P A_i L||_2^3 / 2`` for the softmax likelihood (module docstring).

    With logits ``eta_i = x_i (A q + w0).reshape(P, K)``, ``A_i = (x_i^T kron I_K) A`` and
    ``A_i S A_i^T = sum_{p, p'} x_ip x_ip' G[p, :, p', :]`` with ``G = A S A^T`` arranged
    as ``(P, K, P, K)``, centred on both sides by ``P``; one chunked pass over the rows.
    """
    coef_map = np.asarray(lp.coef_map, dtype=np.float64)
    k = int(lp.n_classes)
    factor = coef_map if chol is None else coef_map @ chol
    design = design_rows(lp.design)
    n, p = design.shape
    centred = factor.reshape(p, k, -1)
    centred = (centred - centred.mean(axis=1, keepdims=True)).reshape(p * k, -1)
    gram = (centred @ centred.T).reshape(p, k, p, k)
    record_rows(n, n)
    op_norm_sq = design_map(design, _softmax_op_norms, args=(gram,))
    return 0.5 * SOFTMAX_THIRD_DERIVATIVE * np.maximum(op_norm_sq, 0.0) ** 1.5


def _softmax_op_norms(design, rows: slice, gram) -> np.ndarray:
    """``||P A_i L||_2^2`` of the rows ``rows``: the largest eigenvalue of each row's
    ``K x K`` matrix ``sum_{p, p'} x_ip x_ip' G[p, :, p', :]``."""
    x = np.asarray(design[rows], dtype=np.float64)
    blocks = np.einsum("ip,iq,pkql->ikl", x, x, gram, optimize=True)
    return np.linalg.eigvalsh(blocks)[:, -1]


def _whitened_products(design, rows: slice, chol, lz) -> np.ndarray:
    """``(x_i' S x_i, x_i' S z)`` of the rows ``rows`` (``S = L L^T``, ``lz = L^T z``)."""
    block = design[rows] @ chol
    return np.column_stack([np.einsum("ij,ij->i", block, block), block @ lz])


def _whitened_pair_products(design, rows: slice, scale_rows, chol) -> np.ndarray:
    """``(x_i' S x_i, x_i' S z_i, z_i' S z_i)`` of the rows ``rows``, each with its own
    scale row ``z_i`` (``scale_rows``: those rows of the scale design)."""
    block = design[rows] @ chol
    z_block = np.asarray(scale_rows, dtype=np.float64) @ chol
    return np.column_stack(
        [
            np.einsum("ij,ij->i", block, block),
            np.einsum("ij,ij->i", block, z_block),
            np.einsum("ij,ij->i", z_block, z_block),
        ]
    )


def _free_scale_constants(lp: LinearPredictorLikelihood, region: TrustRegion) -> np.ndarray:
    """``c_i = T3_i ||W_i A_i L||^3 / 2`` for a free scale (one for all rows, or a
    log-linear scale per row): ``A_i`` stacks the row's linear-predictor row ``x_i`` and
    log-scale row ``z_i``, ``W_i`` puts ``eta`` in units of the row's reference scale."""
    chol, rho = region.chol, region.row_radii()  # a float, or one radius per row (cells)
    design = design_rows(lp.design)
    n = design.shape[0]
    record_rows(n, n)
    if getattr(lp, "row_scales", False):
        # Each row its own scale direction z_i: its whitened length and the cross term
        # are per row, in the same pass over the rows.
        scale_rows = design_rows(lp.scale_design)
        both = design_map(design, _whitened_pair_products, per_row=(scale_rows,), args=(chol,))
        xsx, xsz, czz = both[:, 0], both[:, 1], both[:, 2]
        s_star = lp.log_scales(region.centre)
        record_rows(n, n)
    else:
        z = np.asarray(lp.scale_row, dtype=np.float64)
        lz = chol.T @ z
        czz = float(lz @ lz)
        s_star = lp.log_scale(region.centre)
        both = design_map(design, _whitened_products, args=(chol, lz))
        xsx, xsz = both[:, 0], both[:, 1]
    s_half = rho * np.sqrt(czz)
    # Channel units: eta in units of the reference sigma (location-scale families); the
    # other families' channels (eta, log or logit of the second parameter) as they are.
    w = np.exp(-s_star) if family_record(lp.family).location_scale else 1.0
    big_e = np.exp(s_half)  # largest e^{-delta} on the region
    g11, g12 = w * w * xsx, w * xsz
    half_trace, half_gap = 0.5 * (g11 + czz), 0.5 * (g11 - czz)
    op_norm_sq = half_trace + np.sqrt(half_gap * half_gap + g12 * g12)
    if lp.family == "negative_binomial":
        t3 = _negative_binomial_t3(lp, region, np.sqrt(xsx), s_star, s_half)
    elif lp.family == "gamma_log":
        t3 = _gamma_t3(lp, region, np.sqrt(xsx), s_star, s_half)
    elif lp.family in ("beta_logit", "zip_log", "hurdle_poisson_log"):
        t3 = _frobenius(region_third_derivatives(lp, region, np.sqrt(xsx), s_star, s_half))
    elif lp.family == "normal":
        eta = lp.linear_predictor(region.centre)
        record_rows(n, n)
        residual = np.abs(np.asarray(lp.observed, dtype=np.float64) - eta) + rho * np.sqrt(xsx)
        u_max = residual * np.exp(s_half - s_star)
        t3 = np.sqrt(12.0 * big_e**4 + 48.0 * u_max**2 * big_e**2 + 16.0 * u_max**4)
    else:
        b1, b2, b3, b4 = student_t_scale_constants(single_nu(lp))
        t3 = np.sqrt(b1**2 * big_e**6 + 3 * b2**2 * big_e**4 + 3 * b3**2 * big_e**2 + b4**2)
    return 0.5 * t3 * op_norm_sq**1.5


def _three_channel_constants(lp: LinearPredictorLikelihood, region: TrustRegion) -> np.ndarray:
    """``c_i = T3_i ||A_i L||_2^3 / 2`` for a zero-inflated or hurdle negative binomial:
    ``A_i`` stacks the row's linear-predictor row ``x_i`` and the rows of ``log alpha`` and
    ``logit psi`` (0 for a fixed one), ``T3_i`` bounds the Frobenius norm of the row's
    third derivatives in the three channels over the region
    (:mod:`pymc_minibatch_mh.bounds.zinb_curvature`)."""
    chol = region.chol
    design = design_rows(lp.design)
    n = design.shape[0]
    lz = shared_channel_rows(lp) @ chol  # whitened rows of log alpha and logit psi
    zz = lz @ lz.T
    record_rows(n, n)
    both = design_map(
        design, _three_channel_norms, args=(chol, lz, zz), block_rows=data_blocks.BLOCK_ROWS
    )
    xsx, op_norm_sq = both[:, 0], both[:, 1]
    entries, _, _ = three_channel_entries(lp, region, np.sqrt(xsx))
    t3 = frobenius(entries, (lp.free_scale, lp.free_odds))
    with np.errstate(over="ignore", invalid="ignore"):
        return 0.5 * t3 * np.maximum(op_norm_sq, 0.0) ** 1.5


def _three_channel_norms(design, rows: slice, chol, lz, zz) -> np.ndarray:
    """``(x_i' S x_i, ||A_i L||_2^2)`` of the rows ``rows``: the linear predictor's
    whitened length and the largest eigenvalue of the 3 x 3 Gram matrix of the row's
    three whitened channels (``lz``: the shared rows, ``zz`` their Gram matrix)."""
    block = design[rows] @ chol
    gram = np.empty((block.shape[0], 3, 3))
    gram[:, 1:, 1:] = zz
    gram[:, 0, 0] = np.einsum("ij,ij->i", block, block)
    gram[:, 0, 1:] = gram[:, 1:, 0] = block @ lz.T
    return np.column_stack([gram[:, 0, 0], np.linalg.eigvalsh(gram)[:, -1]])


def shared_channel_rows(lp) -> np.ndarray:
    """The rows of ``log alpha`` and ``logit psi`` in ``q`` (shape ``(2, D)``; a zero row
    for a fixed parameter) of a zero-inflated or hurdle negative binomial."""
    shared = np.zeros((2, lp.ndim))
    if lp.free_scale:
        shared[0] = lp.scale_row
    if lp.free_odds:
        shared[1] = lp.odds_row
    return shared


def three_channel_entries(lp, region: TrustRegion, eta_sd: np.ndarray | None = None) -> tuple:
    """``(entries, (eta_lo, eta_hi), (a_range, t_range))`` for a zero-inflated or hurdle
    negative binomial on ``region``: per-row bounds on the ten third-derivative entries
    in ``(eta, log alpha, logit psi)``
    (:data:`~pymc_minibatch_mh.bounds.zinb_curvature.ENTRIES`), each row's range of the
    linear predictor and the ranges of the two shared parameters. ``eta_sd`` is each
    row's whitened norm ``||L^T x_i||`` (computed if not given)."""
    if eta_sd is None:
        eta_sd = _row_norms(lp.design, region.chol)
    rho = float(np.max(region.row_radii()))
    halves = []
    for free, row in ((lp.free_scale, lp.scale_row), (lp.free_odds, lp.odds_row)):
        lz = region.chol.T @ row if free else np.zeros(1)
        halves.append(rho * math.sqrt(float(lz @ lz)))
    a_range, t_range = _log_param_ranges(lp, region.centre, halves)
    alpha_range = (math.exp(a_range[0]), math.exp(a_range[1]))
    eta_lo, eta_hi = _eta_ranges(lp, region, eta_sd)
    with np.errstate(over="ignore"):
        mu_lo, mu_hi = np.exp(eta_lo), np.exp(eta_hi)
    y = lp.observed
    if lp.family == "zinb_log":
        entries = zinb_third_derivatives(y, mu_lo, mu_hi, alpha_range, t_range[1])
    else:
        positive = np.asarray(y) > 0
        box = (
            (float(np.min(eta_lo[positive])), float(np.max(eta_hi[positive])))
            if positive.any()
            else (0.0, 0.0)
        )
        truncation = truncation_suprema(box, a_range)
        entries = hurdle_nb_third_derivatives(y, mu_lo, mu_hi, alpha_range, truncation)
    return entries, (eta_lo, eta_hi), (a_range, t_range)


def _log_param_ranges(lp, centre: np.ndarray, halves) -> tuple:
    """Ranges of ``log alpha`` and ``logit psi`` on a region: within ``halves`` of their
    values at ``centre`` when free, their given values (one or one per row) when fixed."""
    ranges = []
    for free, value_at, name, half in (
        (lp.free_scale, lp.log_scale if lp.free_scale else None, "alpha", halves[0]),
        (lp.free_odds, lp.log_odds if lp.free_odds else None, "odds", halves[1]),
    ):
        if free:
            middle = value_at(centre)
            ranges.append((middle - float(half), middle + float(half)))
        else:
            logs = np.log(np.asarray(lp.params[name], dtype=np.float64))
            ranges.append((float(np.min(logs)), float(np.max(logs))))
    return tuple(ranges)


def _ordinal_reaches(
    design, rows: slice, upper, lower, has_upper, has_lower, chol, lw, ww, moved, rho
) -> np.ndarray:
    """``(rho ||L^T x_i||, sum over the row's two cutpoints j of (||L^T (w_j - x_i)|| +
    moved_j)^2)`` of the rows ``rows`` (the cutpoints present for the row's level)."""
    block = design[rows] @ chol
    xx = np.einsum("ij,ij->i", block, block)
    xw = block @ lw.T
    local = np.arange(xx.size)
    p_sq = np.zeros(xx.size)
    for j, present in ((upper, has_upper), (lower, has_lower)):
        norm = np.sqrt(np.maximum(ww[j] - 2.0 * xw[local, j] + xx, 0.0)) + moved[j]
        p_sq += np.where(present, norm * norm, 0.0)
    return np.column_stack([rho * np.sqrt(xx), p_sq])


def _ordinal_constants(lp: LinearPredictorLikelihood, region: TrustRegion) -> np.ndarray:
    """``c_i = K_i / 2`` for an ordinal likelihood, ``K_i`` bounding
    ``|D^3 l_i [v, v, v]|`` over the region for ``||L^{-1} v|| = 1``.

    A row of category ``k`` reads the channels ``A(q) = (c_{k+1}(q) - eta_i,
    c_k(q) - eta_i)``, where the cutpoints are PyMC's ordered transform of
    ``kappa = K q + k0`` (``c_1 = kappa_1``, ``c_j = c_{j-1} + exp(kappa_j)``), so ``A`` is
    not affine and the chain rule gives

        D^3 l [v, v, v] = D^3 h [A1 v]^3 + 3 D^2 h [A1 v, A2 [v, v]] + D h . A3 [v, v, v]

    with ``A1, A2, A3`` the first three derivatives of ``A``. On the region each
    ``kappa_m`` lies within ``rho sigma_m`` of its centre value (``sigma_m = ||L^T K_m||``),
    so with ``E_m`` the largest ``exp(kappa_m)`` there, the second and third derivatives of
    ``c_j`` are at most ``Q_j = sum_{2 <= m <= j} E_m sigma_m^2`` and
    ``R_j = sum E_m sigma_m^3`` in whitened units; the channel's gradient row moves from
    its value ``w_j - x_i`` at the centre by at most
    ``dW_j = sum_{2 <= m <= j} max|exp(kappa_m) - exp(kappa_m*)| sigma_m``, so
    ``|A1_j v| <= ||L^T (w_j - x_i)|| + dW_j``. ``T1, T2, T3`` are the suprema of the
    norms of ``h``'s derivatives over the category's box of ``a`` and the gap
    (:mod:`pymc_minibatch_mh.bounds.ordinal_curvature`). Then
    ``K_i = T3 P_i^3 + 3 T2 P_i Q_i + T1 R_i`` with ``P_i``, ``Q_i``, ``R_i`` the Euclidean
    norms over the row's one or two channels.
    """
    chol, rho = region.chol, float(np.max(region.row_radii()))
    cut_rows = np.asarray(lp.cut_rows, dtype=np.float64)
    kappa = cut_rows @ region.centre + lp.cut_offsets
    lk = cut_rows @ chol
    sigma = np.sqrt(np.einsum("ij,ij->i", lk, lk))
    k1 = kappa.size
    with np.errstate(over="ignore"):
        e_mid, e_hi = np.exp(kappa), np.exp(kappa + rho * sigma)
        e_lo = np.exp(kappa - rho * sigma)
    gap = np.arange(k1) > 0  # kappa_1 is the first cutpoint itself, the others log gaps
    slope = np.where(gap, e_mid, 1.0)
    lw = np.cumsum(slope[:, None] * cut_rows, axis=0) @ chol  # whitened cutpoint gradients
    ww = np.einsum("ij,ij->i", lw, lw)
    moved = np.cumsum(np.where(gap, np.maximum(e_hi - e_mid, e_mid - e_lo) * sigma, 0.0))
    q_sum = np.cumsum(np.where(gap, e_hi * sigma**2, 0.0))
    r_sum = np.cumsum(np.where(gap, e_hi * sigma**3, 0.0))
    c_lo = np.cumsum(np.where(gap, e_lo, kappa - rho * sigma))
    c_hi = np.cumsum(np.where(gap, e_hi, kappa + rho * sigma))
    if not all(np.all(np.isfinite(v)) for v in (e_hi, c_lo, c_hi, moved, q_sum, r_sum)):
        raise UnsupportedBound(
            f"The {lp.family} remainder constants overflow on the trust region (a gap "
            "between cutpoints is extremely uncertain). Use MinibatchBarker / Austere."
        )
    design = design_rows(lp.design)
    n = design.shape[0]
    y = np.asarray(lp.observed, dtype=np.int64)
    eta = lp.linear_predictor(region.centre)
    record_rows(2 * n, n)
    upper, lower = np.clip(y, 0, k1 - 1), np.clip(y - 1, 0, k1 - 1)
    has_upper, has_lower = y <= k1 - 1, y >= 1
    both = design_map(
        design,
        _ordinal_reaches,
        per_row=(upper, lower, has_upper, has_lower),
        args=(chol, lw, ww, moved, rho),
        block_rows=data_blocks.BLOCK_ROWS,
    )
    eta_reach, p_sq = both[:, 0], both[:, 1]

    def over_channels(per_cutpoint):
        up = np.where(has_upper, per_cutpoint[upper] ** 2, 0.0)
        return np.sqrt(up + np.where(has_lower, per_cutpoint[lower] ** 2, 0.0))

    p_row, q_row, r_row = np.sqrt(p_sq), over_channels(q_sum), over_channels(r_sum)
    eta_lo, eta_hi = eta - eta_reach, eta + eta_reach
    big_k = np.zeros(n)
    for k in range(k1 + 1):
        mine = y == k
        if not np.any(mine):
            continue
        lo_eta, hi_eta = float(np.min(eta_lo[mine])), float(np.max(eta_hi[mine]))
        j = min(k, k1 - 1)  # the cutpoint above (below for the highest category)
        channel = (float(c_lo[j]) - hi_eta, float(c_hi[j]) - lo_eta)
        if k == 0:
            kind, gaps = "lowest", (0.0, 0.0)
        elif k == k1:
            kind, gaps = "highest", (0.0, 0.0)
        else:
            kind, gaps = "interior", (float(e_lo[k]), float(e_hi[k]))
        t1, t2, t3 = ordinal_suprema(lp.family, kind, channel, gaps)
        p = p_row[mine]
        big_k[mine] = t3 * p**3 + 3.0 * t2 * p * q_row[mine] + t1 * r_row[mine]
    return 0.5 * big_k


def _negative_binomial_t3(lp, region: TrustRegion, eta_sd, t_star, t_half) -> np.ndarray:
    """Frobenius bound of the third derivatives of the negative binomial log-likelihood in
    ``(eta, t = log alpha)`` over the trust region (see the module docstring)."""
    y = np.asarray(lp.observed, dtype=np.float64)
    eta_lo, eta_hi = _eta_ranges(lp, region, eta_sd)
    with np.errstate(over="ignore"):
        mu_lo, mu_hi = np.exp(eta_lo), np.exp(eta_hi)
    alpha_lo, alpha_hi = np.exp(t_star - t_half), np.exp(t_star + t_half)
    k = LOGISTIC_THIRD_DERIVATIVE  # sup |p q (q - p)| = sqrt(3) / 18
    eee = (alpha_hi + y) * k
    eet = k * y + 8.0 / 27.0 * alpha_hi  # p q (q - p) y - 2 alpha p^2 q, sup p^2 q = 4/27
    ett = k * np.maximum(np.abs(y - mu_lo), np.abs(y - mu_hi))
    # alpha^3 D psi'' + 3 alpha^2 D psi' + alpha D psi = sum_{k=1}^{y-1} h(alpha / (alpha + k))
    # with |h(r)| <= r, so at most alpha (psi(alpha + y) - psi(alpha)) - 1, increasing in alpha.
    polygamma_part = np.where(
        y >= 1.0, alpha_hi * (special.digamma(alpha_hi + y) - special.digamma(alpha_hi)) - 1.0, 0.0
    )
    ttt = (
        np.maximum(polygamma_part, 0.0)
        + alpha_hi * np.log1p(mu_hi / alpha_lo)
        + 3.0 * alpha_hi
        + k * y
    )
    return np.sqrt(eee**2 + 3.0 * eet**2 + 3.0 * ett**2 + ttt**2)


def _gamma_t3(lp, region: TrustRegion, eta_sd, t_star, t_half) -> np.ndarray:
    """Frobenius bound of the third derivatives of the Gamma log-likelihood in
    ``(eta, t = log alpha)`` over the trust region.

    With ``u = y e^{-eta}`` and ``alpha = e^t``, ``f = alpha (t + log u - u) - lgamma(alpha)``
    + const, and ``f_eee = alpha u``, ``f_eet = -alpha u``, ``f_ett = alpha (u - 1)``,
    ``f_ttt = K(alpha) + alpha (1 + log u - u)`` with
    ``K(alpha) = alpha (t + 2 - psi(alpha) - 3 alpha psi'(alpha) - alpha^2 psi''(alpha))``.
    ``u - 1 - log u >= 0`` is convex in ``log u`` and ``|u - 1|`` monotone on each side of
    1, so both are largest at an end of the region's range of ``u``; ``|K|`` is bounded by
    its largest value on a dense grid of ``log alpha`` (refined, times a small margin).
    """
    y = np.asarray(lp.observed, dtype=np.float64)
    eta_lo, eta_hi = _eta_ranges(lp, region, eta_sd)
    with np.errstate(over="ignore", divide="ignore"):
        u_lo = y * np.exp(-eta_hi)
        u_hi = y * np.exp(-eta_lo)
        gap = np.maximum(u_lo - 1.0 - np.log(u_lo), u_hi - 1.0 - np.log(u_hi))
    # One range of log alpha for all rows: the widest (cells give one radius per row).
    t_half = float(np.max(t_half))
    alpha_hi = math.exp(t_star + t_half)
    eee = eet = alpha_hi * u_hi  # |f_eee| = |f_eet| = alpha u
    ett = alpha_hi * np.maximum(np.abs(u_lo - 1.0), np.abs(u_hi - 1.0))
    ttt = gamma_shape_constant(t_star - t_half, t_star + t_half) + alpha_hi * gap
    return np.sqrt(eee**2 + 3.0 * eet**2 + 3.0 * ett**2 + ttt**2)


def _eta_ranges(lp, region: TrustRegion, eta_sd) -> tuple[np.ndarray, np.ndarray]:
    """Each row's smallest and largest linear predictor on the region: its value at the
    centre minus and plus the region's radius times ``eta_sd`` (the row's whitened norm)."""
    eta = lp.linear_predictor(region.centre)
    record_rows(lp.n_data, lp.n_data)
    reach = region.row_radii() * eta_sd
    return eta - reach, eta + reach


def _eta_box(lp, region: TrustRegion, eta_sd) -> tuple[float, float]:
    """The smallest and largest linear predictor of any row on the region."""
    eta_lo, eta_hi = _eta_ranges(lp, region, eta_sd)
    return float(np.min(eta_lo)), float(np.max(eta_hi))


def _frobenius(entries) -> np.ndarray:
    """Frobenius norm of a symmetric third-derivative tensor in two channels from its
    distinct entries ``(eee, eet, ett, ttt)`` (each mixed entry appears three times)."""
    eee, eet, ett, ttt = entries
    with np.errstate(over="ignore"):  # inf: the row is evaluated exactly (exact_rows)
        return np.sqrt(eee**2 + 3.0 * eet**2 + 3.0 * ett**2 + ttt**2)


def region_third_derivatives(
    lp, region: TrustRegion, eta_sd, t_star: float | None = None, t_half=None
) -> tuple:
    """Per-row bounds on ``|f_eee|, |f_eet|, |f_ett|, |f_ttt|`` over ``region`` for a Beta,
    zero-inflated or hurdle Poisson likelihood in ``(eta, t)`` (``t`` the log precision or
    the log odds). ``eta_sd`` is each row's whitened norm ``||L^T x_i||``; a free second
    parameter has ``t`` within ``t_half`` of ``t_star`` on the region, a fixed one
    (``t_star`` None) ranges over its given values.

    The Beta uses the suprema of the observation-free part over the rows' box of
    ``(eta, t)`` plus the observation's part row by row
    (:mod:`pymc_minibatch_mh.bounds.beta_curvature`); the zero-count families use each
    row's range of the Poisson mean (:mod:`pymc_minibatch_mh.bounds.zip_curvature`,
    :mod:`pymc_minibatch_mh.bounds.hurdle_curvature`).
    """
    if t_star is None:
        name = "nu" if lp.family == "beta_logit" else "odds"
        log_values = np.log(np.asarray(lp.params[name], dtype=np.float64))
        t_lo, t_hi = float(np.min(log_values)), float(np.max(log_values))
    else:
        t_half = float(np.max(t_half))
        t_lo, t_hi = t_star - t_half, t_star + t_half
    if lp.family == "beta_logit":
        eta_lo, eta_hi = _eta_box(lp, region, eta_sd)
        a_eee, a_eet, a_ett, a_ttt = beta_a_suprema(eta_lo, eta_hi, t_lo, t_hi)
        logit_y, log_extreme = beta_row_terms(lp.observed)
        # The largest precision: on the region (free), or each row's own (fixed).
        nu_hi = math.exp(t_hi) if t_star is not None else np.asarray(lp.params["nu"], float)
        return (
            a_eee + nu_hi * logit_y * SIGMOID_D3,
            a_eet + nu_hi * logit_y * SIGMOID_D2,
            a_ett + nu_hi * logit_y * SIGMOID_D1,
            a_ttt + nu_hi * log_extreme,
        )
    eta_lo, eta_hi = _eta_ranges(lp, region, eta_sd)
    with np.errstate(over="ignore"):
        mu_lo, mu_hi = np.exp(eta_lo), np.exp(eta_hi)
    if lp.family == "hurdle_poisson_log":
        eee, ttt = hurdle_third_derivatives(lp.observed, mu_hi, truncation_constant())
        zero = np.zeros_like(eee)
        return eee, zero, zero, ttt
    return zip_third_derivatives(lp.observed, mu_lo, mu_hi, t_hi)


@lru_cache(maxsize=1)
def truncation_constant() -> float:
    """The supremum over all ``eta`` of the absolute third derivative of the hurdle
    Poisson's truncation term (:mod:`pymc_minibatch_mh.bounds.hurdle_curvature`); it is 0
    to double precision outside ``[-40, 6]``, the grid's span."""
    return supremum_on_grid(truncation_third_derivative, np.linspace(-40.0, 6.0, 46_001))


def _gamma_k(t):
    a = np.exp(t)
    return a * (
        t
        + 2.0
        - special.digamma(a)
        - 3.0 * a * special.polygamma(1, a)
        - a * a * special.polygamma(2, a)
    )


def gamma_shape_constant(t_lo: float, t_hi: float) -> float:
    """``sup |K(alpha)|`` for ``t = log alpha`` in ``[t_lo, t_hi]`` (see :func:`_gamma_t3`)."""
    return grid_supremum_over(_gamma_k, t_lo, t_hi)


def grid_supremum_over(fn, lo: float, hi: float) -> float:
    """``sup |fn(t)|`` for ``t`` in ``[lo, hi]`` and a smooth ``fn`` (a grid of 4,001
    points, :func:`_supremum_on_grid`)."""
    return supremum_on_grid(fn, np.linspace(lo, hi, 4_001))
