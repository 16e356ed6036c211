"""What the recogniser hands over: a GLM likelihood as plain numpy arrays.

:class:`LinearPredictorLikelihood` holds one observed variable's family, design,
offset, observations and parameters (with an optional free log-scale channel);
:class:`CompositeLikelihood` several of them over the same rows; :func:`family_loglik`
evaluates their per-datum log-densities in numpy. Bounds and kernels read these objects
and never see PyTensor; this module does not import PyMC either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, gammaln, log_expit, log_ndtr, logsumexp

from pymc_minibatch_mh.data.row_design import RowDesign
from pymc_minibatch_mh.families.registry import (
    FAMILY_RECORDS,
    family_numerics,
    family_record,
    names_where,
)


class UnsupportedLikelihood(ValueError):
    """The model's likelihood is not one of the recognised linear-predictor families."""


class DataSetsOfDifferentLengths(UnsupportedLikelihood):
    """The observed variables are data sets of different lengths: the likelihood is not
    one GLM over one row axis. The message names the steps that sample such models; a
    step adds nothing to it (its generic hints about other likelihoods do not apply)."""


@dataclass(frozen=True, eq=False)
class LinearPredictorLikelihood:
    """A per-datum likelihood ``p(y_i | eta_i)`` with ``eta`` affine in ``q``.

    Parameters
    ----------
    family : str
        A name in :data:`~pymc_minibatch_mh.families.registry.FAMILY_RECORDS`.
    design : ndarray or RowDesign
        Scalar families: ``(N, D)`` with ``eta = design @ q + offset``; the recogniser
        gives a :class:`~pymc_minibatch_mh.data.row_design.RowDesign` (the model's
        features, rows formed on demand).
        ``"categorical_logit"``: ``(N, P)`` feature matrix (see ``coef_map``).
    offset : ndarray
        ``(N,)`` for scalar families, ``(N, K)`` for ``"categorical_logit"``.
    observed : ndarray
        ``(N,)`` observations: 0/1 for Bernoulli, successes 0..n for Binomial, class
        index 0..K-1 (int) for Categorical, counts for Poisson, reals otherwise; integer
        and float arrays are kept in their dtype (not copied), other kinds become float64.
    params : dict
        Fixed family parameters, each a float or an ``(N,)`` array:
        ``{"nu", "sigma"}`` for Student-t, ``{"sigma"}`` for Normal, ``{"alpha"}`` for the
        negative binomial (mean ``exp(eta)``, dispersion ``alpha``) and for the Gamma
        (mean ``exp(eta)``, shape ``alpha``), ``{"nu"}`` for the Beta (mean
        ``sigmoid(eta)``, precision ``nu = alpha + beta``), ``{"odds"}`` for the
        zero-inflated Poisson (mean ``exp(eta)`` of the Poisson component, whose odds
        ``psi / (1 - psi)`` these are) and for the hurdle Poisson (the odds of a
        positive count), ``{"alpha", "odds"}`` for the zero-inflated and hurdle negative
        binomial (dispersion and odds), ``{"n"}`` (trials per row)
        for the Binomial with logit ``eta``, empty otherwise.
        Without ``"sigma"`` / ``"alpha"`` when that parameter is free (``scale_row``).
    scale_row, scale_offset : ndarray and float, optional
        Normal and Student-t with a free scale: ``log sigma = scale_row @ q +
        scale_offset``, the same for every datum (e.g. ``sigma`` a positive free
        variable sampled on the log scale); for the negative binomial and the Gamma the
        same for ``log alpha``, for the Beta for ``log nu``, for the zero-inflated and
        hurdle Poisson for ``logit psi``. None when the parameter is fixed.
    cut_rows, cut_offsets : ndarray, optional
        Ordinal families only: the K - 1 cutpoints are PyMC's ordered transform of an
        affine map of ``q``, ``kappa = cut_rows @ q + cut_offsets`` (shapes ``(K - 1, D)``
        and ``(K - 1,)``): ``c_1 = kappa_1`` and ``c_j = c_{j-1} + exp(kappa_j)``. Fixed
        cutpoints have ``cut_rows`` 0.
    odds_row, odds_offset : ndarray and float, optional
        Zero-inflated and hurdle negative binomial with a free ``psi``:
        ``logit psi = odds_row @ q + odds_offset`` (``scale_row`` is then ``log alpha``).
    scale_design, scale_offsets : RowDesign or ndarray, and ndarray, optional
        Normal and Student-t whose scale differs between rows (heteroscedastic):
        ``log sigma_i = scale_design[i] @ q + scale_offsets[i]``, shapes ``(N, D)`` and
        ``(N,)`` (e.g. ``sigma = pm.math.exp(c + Z @ g)``). Exclusive with ``scale_row``.
    coef_map, coef_offset : ndarray, optional
        ``"categorical_logit"`` only: ``A`` of shape ``(P*K, D)`` and ``w0`` of shape
        ``(P*K,)`` such that ``logits = design @ (A @ q + w0).reshape(P, K) + offset``.
    n_classes : int, optional
        ``"categorical_logit"`` only: the number of classes K.

    Notes
    -----
    Memory: a dense ``design`` is float64, 8 N D bytes for scalar families (8 N P for
    categorical); a ``RowDesign`` holds the model's own feature arrays (no copy) and
    forms float64 rows per block. ``offset`` is N (N K) floats unless it is one value
    broadcast to all rows. All arrays are read-only views.

    References
    ----------
    .. [1] Maclaurin, D. and Adams, R. P. (2014). Firefly Monte Carlo: Exact MCMC
       with subsets of data. UAI.
    .. [2] Zhang, R., Cooper, A. F. and De Sa, C. (2020). Asymptotically optimal
       exact minibatch Metropolis-Hastings. NeurIPS.
    """

    family: str
    design: np.ndarray
    offset: np.ndarray
    observed: np.ndarray
    params: dict
    coef_map: np.ndarray | None = None
    coef_offset: np.ndarray | None = None
    n_classes: int | None = None
    scale_row: np.ndarray | None = None
    scale_offset: float = 0.0
    scale_design: np.ndarray | None = None
    scale_offsets: np.ndarray | None = None
    cut_rows: np.ndarray | None = None
    cut_offsets: np.ndarray | None = None
    odds_row: np.ndarray | None = None
    odds_offset: float = 0.0

    def __post_init__(self) -> None:
        kind = family_record(self.family)
        design = self.design
        if not isinstance(design, RowDesign) or self.family == "categorical_logit":
            design = _frozen(design, np.float64)
        n_data = design.shape[0] if design.ndim == 2 else -1
        if design.ndim != 2:
            raise ValueError(f"design must be 2-D, got shape {design.shape}.")
        # Integer or float observations are kept as they are (no float64 copy of N values);
        # the family densities widen the rows they read.
        observed = np.asarray(self.observed)
        if not kind.scalar_rows or kind.ordinal:
            observed = _frozen(observed, np.int64)
        else:
            observed = _frozen(observed, None if observed.dtype.kind in "iuf" else np.float64)
        if observed.shape != (n_data,):
            raise ValueError(f"observed has shape {observed.shape}, expected ({n_data},).")
        offset = _frozen(self.offset, np.float64)
        if self.family == "categorical_logit":
            k = int(self.n_classes or 0)
            coef_map = _frozen(self.coef_map, np.float64)
            coef_offset = _frozen(self.coef_offset, np.float64)
            p_k = design.shape[1] * k
            if k < 2 or offset.shape != (n_data, k):
                raise ValueError(
                    f"categorical_logit needs n_classes >= 2 and offset of shape (N, K); got "
                    f"n_classes={self.n_classes}, offset {offset.shape}."
                )
            if coef_map.ndim != 2 or coef_map.shape[0] != p_k or coef_offset.shape != (p_k,):
                raise ValueError(
                    f"coef_map must be (P*K, D) = ({p_k}, D) and coef_offset ({p_k},); got "
                    f"{coef_map.shape} and {coef_offset.shape}."
                )
            object.__setattr__(self, "coef_map", coef_map)
            object.__setattr__(self, "coef_offset", coef_offset)
            object.__setattr__(self, "n_classes", k)
        else:
            if offset.shape != (n_data,):
                raise ValueError(f"offset has shape {offset.shape}, expected ({n_data},).")
            if self.coef_map is not None or self.coef_offset is not None:
                raise ValueError("coef_map / coef_offset are only used by categorical_logit.")
        needed = set(kind.parameters)
        if self.scale_row is not None:
            if kind.scale is None:
                scaled = tuple(name for name, r in FAMILY_RECORDS.items() if r.scale)
                raise ValueError(
                    f"scale_row (a free scale) is only used by {scaled}; got {self.family!r}."
                )
            scale_row = _frozen(self.scale_row, np.float64)
            if scale_row.shape != (design.shape[1],) or not np.all(np.isfinite(scale_row)):
                raise ValueError(
                    f"scale_row must be a finite vector of length D = {design.shape[1]}; got "
                    f"shape {scale_row.shape}."
                )
            if not math.isfinite(float(self.scale_offset)):
                raise ValueError("scale_offset must be finite.")
            object.__setattr__(self, "scale_row", scale_row)
            object.__setattr__(self, "scale_offset", float(self.scale_offset))
            needed = needed - {kind.scale}
        if self.scale_design is not None:
            self._check_scale_design(n_data, design.shape[1])
            needed = needed - {kind.scale}
        if self.odds_row is not None:
            self._check_odds_row(design.shape[1])
            needed = needed - {"odds"}
        if kind.ordinal != (self.cut_rows is not None):
            raise ValueError(
                "cut_rows (the cutpoints) are needed by, and only by, ordinal families."
            )
        if self.cut_rows is not None:
            self._check_cutpoints(observed, design.shape[1])
        if set(self.params) != needed:
            raise ValueError(
                f"{self.family} needs params {sorted(needed)}, got {sorted(self.params)}."
            )
        params = {}
        for name, value in self.params.items():
            value = np.asarray(value, dtype=np.float64)
            if value.size == 1:
                params[name] = float(value.reshape(()))
            elif value.shape == (n_data,):
                params[name] = _frozen(value, np.float64)
            else:
                raise ValueError(
                    f"Parameter {name!r} must be a scalar or have shape ({n_data},), got "
                    f"{value.shape}."
                )
            if not np.all(np.asarray(params[name]) > 0) or not np.all(np.isfinite(params[name])):
                raise ValueError(f"Parameter {name!r} must be positive and finite.")
        object.__setattr__(self, "design", design)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "observed", observed)
        object.__setattr__(self, "params", params)

    def _check_odds_row(self, ndim: int) -> None:
        if not family_record(self.family).odds_channel:
            raise ValueError(
                f"odds_row (a free psi) is only used by {names_where(odds_channel=True)}; got "
                f"{self.family!r}."
            )
        odds_row = _frozen(self.odds_row, np.float64)
        if odds_row.shape != (ndim,) or not np.all(np.isfinite(odds_row)):
            raise ValueError(
                f"odds_row must be a finite vector of length D = {ndim}; got shape "
                f"{odds_row.shape}."
            )
        if not math.isfinite(float(self.odds_offset)):
            raise ValueError("odds_offset must be finite.")
        object.__setattr__(self, "odds_row", odds_row)
        object.__setattr__(self, "odds_offset", float(self.odds_offset))

    def _check_cutpoints(self, observed: np.ndarray, ndim: int) -> None:
        cut_rows = _frozen(self.cut_rows, np.float64)
        cut_offsets = _frozen(self.cut_offsets, np.float64)
        k1 = cut_rows.shape[0] if cut_rows.ndim == 2 else 0
        if k1 < 1 or cut_rows.shape != (k1, ndim) or cut_offsets.shape != (k1,):
            raise ValueError(
                f"cut_rows must be (K - 1, D) with D = {ndim} and cut_offsets (K - 1,); got "
                f"{cut_rows.shape} and {cut_offsets.shape}."
            )
        if not (np.all(np.isfinite(cut_rows)) and np.all(np.isfinite(cut_offsets))):
            raise ValueError("cut_rows and cut_offsets must be finite.")
        outside = (observed < 0) | (observed > k1)
        if np.any(outside):
            row = int(np.flatnonzero(outside)[0])
            raise ValueError(
                f"Ordinal observations must be categories 0, 1, ..., {k1} (K = {k1 + 1} "
                f"categories from {k1} cutpoints); row {row} is {observed[row].item()!r}."
            )
        object.__setattr__(self, "cut_rows", cut_rows)
        object.__setattr__(self, "cut_offsets", cut_offsets)

    @property
    def n_categories(self) -> int:
        """Ordinal families: the number K of categories."""
        return int(self.cut_rows.shape[0]) + 1

    def cutpoints(self, q: np.ndarray) -> np.ndarray:
        """Ordinal families: the K - 1 increasing cutpoints at ``q``."""
        kappa = self.cut_rows @ np.asarray(q, dtype=np.float64) + self.cut_offsets
        return np.cumsum(np.concatenate([kappa[:1], np.exp(kappa[1:])]))

    def _check_scale_design(self, n_data: int, ndim: int) -> None:
        if not family_record(self.family).row_scale or self.scale_row is not None:
            raise ValueError(
                f"scale_design (a scale per row) is only used by {names_where(row_scale=True)}, "
                f"and not with scale_row; got {self.family!r}."
            )
        scale_design = self.scale_design
        if not isinstance(scale_design, RowDesign):
            scale_design = _frozen(scale_design, np.float64)
        offsets = _frozen(np.broadcast_to(self.scale_offsets, (n_data,)), np.float64)
        if scale_design.shape != (n_data, ndim):
            raise ValueError(
                f"scale_design must have shape ({n_data}, {ndim}); got {scale_design.shape}."
            )
        if not np.all(np.isfinite(offsets)):
            raise ValueError("scale_offsets must be finite.")
        object.__setattr__(self, "scale_design", scale_design)
        object.__setattr__(self, "scale_offsets", offsets)

    @property
    def n_data(self) -> int:
        """Number of data points N."""
        return int(self.design.shape[0])

    @property
    def ndim(self) -> int:
        """Length D of the raveled parameter vector ``q``."""
        if self.family == "categorical_logit":
            return int(self.coef_map.shape[1])
        return int(self.design.shape[1])

    def coefficients(self, q: np.ndarray) -> np.ndarray:
        """``categorical_logit`` only: the ``(P, K)`` coefficient matrix at ``q``."""
        if self.family != "categorical_logit":
            raise ValueError("coefficients() is only defined for categorical_logit.")
        return (self.coef_map @ q + self.coef_offset).reshape(self.design.shape[1], -1)

    def linear_predictor(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """``eta`` of the rows ``idx`` (all rows if None).

        Returns shape ``(len(idx),)`` for scalar families and ``(len(idx), K)``
        (the logits) for ``"categorical_logit"``.
        """
        q = np.asarray(q, dtype=np.float64)
        rows = slice(None) if idx is None else np.asarray(idx)
        if self.family == "categorical_logit":
            return self.design[rows] @ self.coefficients(q) + self.offset[rows]
        return _affine_rows(self.design, self.offset, q, idx)

    @property
    def free_scale(self) -> bool:
        """Whether ``sigma`` (``alpha`` for the negative binomial) is free, with its log
        ``scale_row @ q + scale_offset``."""
        return self.scale_row is not None

    @property
    def row_scales(self) -> bool:
        """Whether ``sigma`` differs between rows, its log ``scale_design @ q +
        scale_offsets`` (a heteroscedastic Normal or Student-t)."""
        return self.scale_design is not None

    @property
    def free_odds(self) -> bool:
        """Whether ``psi`` of a zero-inflated or hurdle negative binomial is free, with
        ``logit psi = odds_row @ q + odds_offset``."""
        return self.odds_row is not None

    @property
    def scale_is_free(self) -> bool:
        """Whether a parameter besides the linear predictor is free: the second parameter,
        one for all rows (``free_scale``) or one per row (``row_scales``), or the odds of a
        negative binomial with zeros (``free_odds``)."""
        return self.free_scale or self.row_scales or self.free_odds

    def log_odds(self, q: np.ndarray) -> float:
        """``logit psi`` at ``q`` (``free_odds`` only)."""
        if self.odds_row is None:
            raise ValueError("log_odds() needs a free psi (odds_row).")
        return float(self.odds_row @ np.asarray(q, dtype=np.float64) + self.odds_offset)

    def log_scales(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """``log sigma`` of the rows ``idx`` (all rows if None), ``row_scales`` only."""
        if self.scale_design is None:
            raise ValueError("log_scales() needs a scale per row (scale_design).")
        q = np.asarray(q, dtype=np.float64)
        return _affine_rows(self.scale_design, self.scale_offsets, q, idx)

    def log_scale(self, q: np.ndarray) -> float:
        """``log sigma`` (``log alpha``) at ``q`` (free scale only)."""
        if self.scale_row is None:
            raise ValueError("log_scale() needs a free scale (scale_row).")
        return float(self.scale_row @ np.asarray(q, dtype=np.float64) + self.scale_offset)

    def loglik(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Untempered per-datum log-likelihood of the rows ``idx`` (all rows if None)."""
        rows = slice(None) if idx is None else np.asarray(idx)
        eta = self.linear_predictor(q, idx)
        return family_loglik(self.family, eta, self.observed[rows], self.row_params(q, idx))

    def row_params(self, q: np.ndarray, idx: np.ndarray | None = None) -> dict:
        """The family's parameters besides ``eta`` for the rows ``idx`` (all rows if None)
        at ``q``, as :func:`family_loglik` reads them."""
        rows = slice(None) if idx is None else np.asarray(idx)
        params = {
            name: value if np.ndim(value) == 0 else value[rows]
            for name, value in self.params.items()
        }
        if self.scale_row is not None:
            params[family_record(self.family).scale] = math.exp(self.log_scale(q))
        if self.scale_design is not None:
            params[family_record(self.family).scale] = np.exp(self.log_scales(q, idx))
        if self.odds_row is not None:
            params["odds"] = math.exp(self.log_odds(q))
        if self.cut_rows is not None:
            params["cutpoints"] = self.cutpoints(q)
        return params


@dataclass(frozen=True, eq=False)
class CompositeLikelihood:
    """Several observed variables over the same N rows: ``l_i = sum_k l_i^(k)``.

    Each part is a :class:`LinearPredictorLikelihood` over the same raveled block ``q``;
    bounds that share a metric add up part by part (TunaMH's remainder bounds do).

    Parameters
    ----------
    parts : tuple of LinearPredictorLikelihood
        One per observed variable, each with N rows.
    names : tuple of str
        The observed variables' names, in the same order.
    """

    parts: tuple
    names: tuple
    family: str = "composite"

    def __post_init__(self) -> None:
        if len(self.parts) < 2 or len(self.names) != len(self.parts):
            raise ValueError("A composite likelihood needs two or more named parts.")
        sizes = {(part.n_data, part.ndim) for part in self.parts}
        if len(sizes) != 1:
            raise ValueError(f"The parts disagree on (N, D): {sorted(sizes)}.")

    @property
    def n_data(self) -> int:
        return self.parts[0].n_data

    @property
    def ndim(self) -> int:
        return self.parts[0].ndim

    @property
    def free_scale(self) -> bool:
        return any(getattr(part, "free_scale", False) for part in self.parts)

    @property
    def row_scales(self) -> bool:
        return any(getattr(part, "row_scales", False) for part in self.parts)

    @property
    def scale_is_free(self) -> bool:
        return any(getattr(part, "scale_is_free", False) for part in self.parts)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(part.family for part in self.parts)

    def loglik(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Untempered per-datum log-likelihood (sum over the parts)."""
        return sum(part.loglik(q, idx) for part in self.parts)


def family_loglik(family: str, eta: np.ndarray, y: np.ndarray, params: dict) -> np.ndarray:
    """Per-datum log-density of ``y`` given the linear predictor ``eta`` (numpy, stable).

    Parameters
    ----------
    family : str
        A name in :data:`~pymc_minibatch_mh.families.registry.FAMILY_RECORDS`.
    eta : ndarray
        ``(n,)`` linear predictor, or ``(n, K)`` logits for ``"categorical_logit"``.
    y : ndarray
        ``(n,)`` observations.
    params : dict
        Fixed parameters (scalars or arrays broadcastable to ``(n,)``).
    """
    numerics = family_numerics(family)
    if numerics is not None:
        return numerics.loglik(eta, y, params)
    if family == "bernoulli_logit":
        # log sigmoid(s) = -log(1 + exp(-s)), with s = eta for y = 1 and -eta for y = 0.
        return -np.logaddexp(0.0, np.where(y > 0.5, -eta, eta))
    if family == "binomial_logit":
        # y log sigmoid(eta) + (n - y) log sigmoid(-eta) = y eta - n log(1 + exp(eta)).
        n = np.asarray(params["n"], dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        log_choose = gammaln(n + 1.0) - gammaln(y + 1.0) - gammaln(n - y + 1.0)
        return log_choose + y * eta - n * np.logaddexp(0.0, eta)
    if family == "negative_binomial":
        return _negative_binomial(eta, y, params["alpha"])[0]
    if family in names_where(odds_channel=True):
        # psi = odds / (1 + odds), the weight of the negative binomial part.
        log_odds = np.log(np.asarray(params["odds"], dtype=np.float64))
        y = np.asarray(y, dtype=np.float64)
        counts, log_p0 = _negative_binomial(eta, y, params["alpha"])
        log_norm = np.logaddexp(0.0, log_odds)
        if family == "zinb_log":  # P(0) = (1 - psi) + psi NB(0)
            zero = np.logaddexp(0.0, log_odds + log_p0) - log_norm
            return np.where(y > 0, log_odds - log_norm + counts, zero)
        # Hurdle: P(0) = 1 - psi, P(y > 0) = psi NB(y) / (1 - NB(0)).
        with np.errstate(divide="ignore"):
            truncated = counts - np.log(-np.expm1(log_p0))
        return np.where(y > 0, log_odds - log_norm + truncated, -log_norm)
    if family == "zip_log":
        # psi = odds / (1 + odds): P(0) = (1 - psi) + psi e^{-mu}, P(y > 0) = psi Poisson.
        log_odds = np.log(np.asarray(params["odds"], dtype=np.float64))
        y = np.asarray(y, dtype=np.float64)
        mu = np.exp(eta)
        log_norm = np.logaddexp(0.0, log_odds)  # log(1 + odds) = -log(1 - psi)
        zero = np.logaddexp(0.0, log_odds - mu) - log_norm
        positive = log_odds - log_norm + y * eta - mu - gammaln(y + 1.0)
        return np.where(y > 0, positive, zero)
    if family == "hurdle_poisson_log":
        # P(0) = 1 - psi; P(y > 0) = psi Poisson(y | mu) / (1 - e^{-mu}).
        log_odds = np.log(np.asarray(params["odds"], dtype=np.float64))
        y = np.asarray(y, dtype=np.float64)
        mu = np.exp(eta)
        log_norm = np.logaddexp(0.0, log_odds)
        truncated = y * eta - mu - gammaln(y + 1.0) - np.log(-np.expm1(-mu))
        return np.where(y > 0, log_odds - log_norm + truncated, -log_norm)
    if family == "beta_logit":
        # mean sigmoid(eta), precision nu: alpha = nu sigmoid(eta), beta = nu sigmoid(-eta).
        nu = np.asarray(params["nu"], dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        a, b = nu * expit(eta), nu * expit(-eta)
        return (
            gammaln(nu) - gammaln(a) - gammaln(b) + (a - 1.0) * np.log(y) + (b - 1.0) * np.log1p(-y)
        )
    if family in names_where(ordinal=True):
        return ordinal_loglik(family, eta, y, params["cutpoints"])
    if family == "normal":
        sigma = params["sigma"]
        z = (y - eta) / sigma
        return -0.5 * np.log(2.0 * np.pi) - np.log(sigma) - 0.5 * z * z
    if family == "student_t":
        nu, sigma = params["nu"], params["sigma"]
        z = (y - eta) / sigma
        const = (
            gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi) - np.log(sigma)
        )
        return const - 0.5 * (nu + 1.0) * np.log1p(z * z / nu)
    if family == "categorical_logit":
        y = np.asarray(y, dtype=np.int64)
        chosen = np.take_along_axis(eta, y[:, None], axis=1)[:, 0]
        return chosen - logsumexp(eta, axis=1)
    raise ValueError(f"Unknown family {family!r}; expected one of {tuple(FAMILY_RECORDS)}.")


def _negative_binomial(eta, y, alpha) -> tuple[np.ndarray, np.ndarray]:
    """``(log NB(y), log NB(0))`` with mean ``exp(eta)`` and dispersion ``alpha``:
    ``log(alpha / (alpha + mu))`` and ``log(mu / (alpha + mu))`` from the log-sum-exp of
    ``(log alpha, eta)``."""
    alpha = np.asarray(alpha, dtype=np.float64)
    log_total = np.logaddexp(np.log(alpha), eta)
    log_p0 = alpha * (np.log(alpha) - log_total)
    counts = gammaln(y + alpha) - gammaln(alpha) - gammaln(y + 1.0) + log_p0
    return counts + y * (eta - log_total), log_p0


def ordinal_loglik(family: str, eta: np.ndarray, y: np.ndarray, cutpoints) -> np.ndarray:
    """``log(F(c_{y+1} - eta) - F(c_y - eta))`` with ``c_0 = -inf``, ``c_K = +inf`` and ``F``
    the logistic or the standard normal cdf, without cancellation: rows whose interval
    lies above 0 use the upper tails, ``log(S(b) - S(a))`` with ``S = 1 - F``."""
    log_cdf = log_expit if family == "ordered_logistic" else log_ndtr
    y = np.asarray(y, dtype=np.int64)
    bounds = np.concatenate([[-np.inf], np.asarray(cutpoints, dtype=np.float64), [np.inf]])
    eta = np.asarray(eta, dtype=np.float64)
    upper, lower = bounds[y + 1] - eta, bounds[y] - eta  # a > b
    with np.errstate(invalid="ignore", divide="ignore"):
        # F(a) - F(b) = F(a) (1 - F(b) / F(a)), or S(b) - S(a) = S(b) (1 - S(a) / S(b)).
        right = upper + lower > 0  # NaN-safe: -inf + inf only when K = 1
        big, small = np.where(right, -lower, upper), np.where(right, -upper, lower)
        log_big, log_small = log_cdf(big), log_cdf(small)
        return log_big + np.log1p(-np.exp(log_small - log_big))


def _affine_rows(design, offset: np.ndarray, q: np.ndarray, idx) -> np.ndarray:
    """``design[idx] @ q + offset[idx]`` (all rows if ``idx`` is None); a
    :class:`~pymc_minibatch_mh.data.row_design.RowDesign` forms its rows on demand."""
    rows = slice(None) if idx is None else np.asarray(idx)
    if isinstance(design, RowDesign):
        return design.dot(q, None if idx is None else rows) + offset[rows]
    return design[rows] @ q + offset[rows]


def _frozen(value, dtype) -> np.ndarray:
    array = np.asarray(value, dtype=dtype).view()
    array.setflags(write=False)
    return array
