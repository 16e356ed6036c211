"""Construction of the minibatch steps: the hooks each method overrides, the reference
point and its Taylor sums, the control variates, and the checks of the options.

:class:`ConstructionHooks` is a mixin of
:class:`~pymc_minibatch_mh.step_methods.base.MinibatchStep`, whose constructor calls
these hooks in order; the functions below it are the constructor's helpers.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import pymc as pm
from pymc.pytensorf import make_shared_replacements
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import continuous_types
from pytensor.tensor.random.basic import NormalRV

from pymc_minibatch_mh.bounds.lipschitz import UnsupportedBound
from pymc_minibatch_mh.bounds.normal_exact import exact_normal_likelihood
from pymc_minibatch_mh.kernels.control_variates import (
    ControlVariateTarget,
    ExactSumTarget,
    ImageTaylorProxy,
    TaylorProxy,
)
from pymc_minibatch_mh.kernels.sparse_matrices import kept_sparse
from pymc_minibatch_mh.likelihood import recognise_linear_predictor
from pymc_minibatch_mh.likelihood.batching import probe_indices
from pymc_minibatch_mh.likelihood.data_support import explain_non_finite_rows
from pymc_minibatch_mh.likelihood.glm_families import user_distribution
from pymc_minibatch_mh.likelihood.glm_likelihoods import UnsupportedLikelihood
from pymc_minibatch_mh.likelihood.hierarchy import group_scale_coordinates
from pymc_minibatch_mh.likelihood.image import LikelihoodImage
from pymc_minibatch_mh.likelihood.inspection import described_datum_inputs
from pymc_minibatch_mh.likelihood.smoothness import kinks
from pymc_minibatch_mh.likelihood.taylor import (
    NonFiniteTaylor,
    ResidualCheck,
    checked_residual_diff,
    chunked_taylor_sums,
    compile_residual_diff,
)
from pymc_minibatch_mh.progress import progress_status
from pymc_minibatch_mh.step_methods.marginal_reference import (
    MarginalMode,
    marginal_scale_mode,
)
from pymc_minibatch_mh.step_methods.monitor import NOISY_RATIO_CAUSE
from pymc_minibatch_mh.step_methods.proposal_mixture import PROPOSALS
from pymc_minibatch_mh.step_methods.reference import (
    MODE_NEWTON_TOLERANCE,
    SUBSAMPLE_NEWTON_TOLERANCE,
    NoLaplaceFit,
    block_position,
    covariance_of_precision,
    find_map,
    laplace_precision,
    newton_map,
    newton_subsample,
)


class ConstructionHooks:
    """What the constructor of :class:`~pymc_minibatch_mh.step_methods.base.MinibatchStep`
    asks each method, and the full-data work it does before sampling (a mixin)."""

    #: Whether the method can use Taylor control variates (FlyMC's bounds play that role).
    supports_control_variates = True
    #: The end of the warning when nearly all rows are read per step (see
    #: :func:`~pymc_minibatch_mh.step_methods.monitor.chain_problems`).
    full_data_cause = NOISY_RATIO_CAUSE
    #: Inner MH iterations per PyMC draw when ``steps_per_draw`` is not given.
    default_steps_per_draw = 1

    #: Inner MH iterations per draw when the local move is the exact flow on a Gaussian
    #: surrogate (:class:`~pymc_minibatch_mh.kernels.gaussian_flow.GaussianFlow`): one
    #: keeps its antithetic correlation, which a second move would cancel (measured on a
    #: logistic regression, N = 10^6, D = 11, 2 x 1000 draws: TunaMH's smallest ESS 3920
    #: with one step per draw, 1488 with two, in the same time).
    flow_steps_per_draw = 1

    def _default_steps(self) -> int:
        """``steps_per_draw`` when the user gives none, decided once the block's
        dimension and the proposal are known (the base: :attr:`default_steps_per_draw`)."""
        return self.default_steps_per_draw

    #: Expand the control variates in the likelihood's image (see
    #: :mod:`pymc_minibatch_mh.likelihood.image`) when one is found. TunaMH's bounds
    #: are derived for a proxy in ``q`` and keep it.
    proxy_in_image = True
    #: With control variates, ``proposal="auto"`` mixes independence moves with HMC moves
    #: on the surrogate posterior (prior + proxy) instead of a random walk.
    surrogate_moves = True
    #: The full-data log-likelihood in closed form (``log_bound_sum``), when a step found
    #: one (a Normal likelihood's sufficient statistics): then no datum is read.
    _exact_sum = None
    #: Why ``_exact_sum`` is None (None when it is set or was not looked for).
    exact_sum_unavailable: str | None = None

    def _check_applicable(self, model: pm.Model, vars: Sequence, initial_point: dict) -> None:
        """Refuse a model the method cannot sample, before any pass over the data.

        Subclasses that need a recognised likelihood (TunaMH, FlyMC) override this.
        """

    def _refuse_kinked_likelihood(self, model: pm.Model, control_variates, proposal) -> None:
        """Refuse a log-likelihood with a kink in the sampled parameters
        (:mod:`~pymc_minibatch_mh.likelihood.smoothness`), before any pass over the data,
        unless plain random-walk minibatch tests were asked for."""
        if control_variates is False and proposal == "rw":
            return
        graphs = self.tall_data.graphs
        if graphs is None or not kinks([graphs.batch], graphs.q, [graphs.idx]):
            return
        observed = ", ".join(f"{rv.name!r} ({user_distribution(rv)})" for rv in model.observed_RVs)
        raise UnsupportedLikelihood(
            f"{type(self).__name__} cannot sample this model: the log-likelihood of "
            f"{observed} has a kink in the sampled parameters (it takes abs() or sign() of a "
            "term of the data and the parameters, as pm.Laplace's |y - mu| / b does). Its "
            "second derivative is zero almost everywhere, so the Taylor proxy of the "
            "control variates and the Laplace fit of the default proposals get no curvature "
            "from the data, and the draws come out wrong (a pm.Laplace regression with the "
            "defaults: posterior means 8-25 posterior sds off NUTS). Sample this model with "
            "NUTS (pm.sample()), or write a smooth likelihood (e.g. pm.StudentT with a small "
            "nu in place of pm.Laplace). Plain minibatch tests (control_variates=False, "
            'proposal="rw") are not refused, but their accuracy on such models is unchecked.'
        )

    def _auto_proposal(self, control_variates: bool) -> str:
        """What ``proposal="auto"`` means for this method and model (the mixture here)."""
        return "auto"

    def _control_variates_unavailable(self) -> str | None:
        """Why control variates cannot be used for this model and block, or None."""
        if not self.supports_control_variates:
            return f"{type(self).__name__} does not use control variates"
        outside = self.tall_data.graphs.likelihood_outside_block
        if outside:
            return (
                f"the likelihood depends on {list(outside)}, which are outside the step's "
                "block (sampled by other step methods), so the proxy's full-data sums could "
                "not be kept fixed"
            )
        return None

    def _resolve_control_variates(self, requested: bool | None) -> bool:
        """``control_variates=None`` means: on whenever the model allows them."""
        reason = self._control_variates_unavailable()
        if requested is None:
            if reason is not None and self.supports_control_variates:
                warnings.warn(
                    f"{type(self).__name__}: control variates are off because {reason}. "
                    "Without them the minibatch log-likelihood ratio is noisy at temperature "
                    "1, and batches grow towards N (or, for TunaMH, steps shrink). Put every "
                    "free variable of the likelihood in the step's block (vars=None does) to "
                    "switch them on.",
                    UserWarning,
                    stacklevel=3,
                )
            return reason is None
        if requested and reason is not None:
            raise ValueError(f"control_variates=True is not possible: {reason}.")
        return bool(requested)

    def _taylor_at(
        self, position: np.ndarray, *, progressbar: bool = True, rows: np.ndarray | None = None
    ) -> TaylorProxy:
        """Full-data Taylor sums at ``position`` (one pass over the data, counted).

        With ``rows``, estimates of them from those rows (scaled by N / len(rows)). With
        the proxy in the likelihood's image (``proxy_in_image``) the pass sums in ``phi``
        and the sums in ``q`` follow by the chain rule (no second pass).
        """
        progressbar = self.progressbar and progressbar and rows is None
        position = np.asarray(position, dtype=np.float64)
        if self._image_maps is None:
            return chunked_taylor_sums(
                self._taylor_derivatives,
                position,
                self.tall_data.n_data,
                rows=rows,
                progressbar=progressbar,
            )
        to_image, pull_back = self._image_maps
        image = chunked_taylor_sums(
            self._taylor_derivatives,
            to_image(position),
            self.tall_data.n_data,
            rows=rows,
            progressbar=progressbar,
        )
        gradient, hessian = pull_back(position, image.gradient, image.hessian)
        return ImageTaylorProxy(
            reference=position.copy(),
            value=image.value,
            gradient=np.asarray(gradient, dtype=np.float64),
            hessian=0.5 * (hessian + hessian.T),
            image=image,
        )

    def _non_finite_rows(self, model: pm.Model, err: NonFiniteTaylor) -> NonFiniteTaylor:
        """``err`` with the rows whose log-likelihood is not finite at its point named
        (one more pass), or ``err`` itself when every row's is finite there."""
        if err.point is None:
            return err
        explanation = explain_non_finite_rows(
            self.tall_data.loglik_full,
            err.point,
            described_datum_inputs(model, self.tall_data.n_data),
            "the point the step's setup started from (the model's initial point, or "
            "reference_point if given)",
        )
        return err if explanation is None else NonFiniteTaylor(explanation, err.point)

    def _laplace_factor(self) -> np.ndarray:
        """Cholesky factor of the Laplace covariance at the reference point; ValueError
        where the log posterior is not concave there.

        At a hierarchy's marginal reference (``_marginal_scales``) the joint log density
        need not be concave in the scales: the covariance then joins the group effects'
        conditional one with the scales' marginal precision."""
        prior_hessian = self._prior_derivatives(self.reference.reference)[2]
        precision = laplace_precision(self.reference, prior_hessian, self.temperature)
        try:
            cov = covariance_of_precision(precision)
        except NoLaplaceFit:
            fit = self._marginal_scales
            if fit is None:
                raise
            precision = laplace_precision(
                self.reference,
                prior_hessian,
                self.temperature,
                marginal_scales=(fit.scale_index, fit.scale_precision),
            )
            cov = covariance_of_precision(precision, marginal=True)
        #: A sparse copy of the Laplace precision (a multilevel model), or None.
        self._laplace_precision = kept_sparse(precision)
        return np.linalg.cholesky(cov)

    def _newton_reference(
        self, model: pm.Model, initial_point: dict
    ) -> tuple[TaylorProxy, MarginalMode | None]:
        """Taylor sums at the reference point, and the hierarchy's marginal fit if any.

        With the scales of a hierarchy in the block (:func:`group_scale_coordinates`) the
        reference is the scales' Laplace-marginal mode (:func:`marginal_scale_mode`): a
        joint mode would run off to a zero scale. Otherwise it is the posterior mode,
        found by Newton steps whose passes are the Taylor passes themselves
        (:func:`newton_map`), with ``pm.find_MAP`` from the best point reached if Newton
        does not converge."""
        start = block_position(initial_point, self.vars)
        scales = group_scale_coordinates(model, self.vars, initial_point)
        if scales is not None:
            status = f"{type(self).__name__}: marginal mode of the hierarchy's scales"
            with progress_status(status, enabled=self.progressbar):
                fit = marginal_scale_mode(
                    lambda q: self._taylor_at(q, progressbar=False),
                    self._prior_derivatives,
                    start,
                    scales,
                    temperature=self.temperature,
                )
            return fit.proxy, fit
        status = f"{type(self).__name__}: Newton search for the posterior mode"
        with progress_status(status, enabled=self.progressbar):
            rows = newton_subsample(self.tall_data.n_data)
            if rows is not None:
                # Most of the way on a subsample (its sums scaled to N): the full-data
                # passes then start within a few posterior sds of the mode.
                start = newton_map(
                    lambda q: self._taylor_at(q, rows=rows),
                    self._prior_derivatives,
                    start,
                    temperature=self.temperature,
                    tolerance=SUBSAMPLE_NEWTON_TOLERANCE,
                ).position
            result = newton_map(
                lambda q: self._taylor_at(q, progressbar=False),
                self._prior_derivatives,
                start,
                temperature=self.temperature,
                tolerance=MODE_NEWTON_TOLERANCE,
            )
        if result.converged:
            return result.proxy, None
        point = dict(initial_point)
        point.update(_unravel(result.position, self.vars, initial_point))
        reference_point = find_map(model, point, progressbar=self.progressbar)
        return self._taylor_at(block_position(reference_point, self.vars)), None

    def _compile_residuals(self, image: LikelihoodImage | None):
        """The residual function of the control variates (in ``q`` or in the image)."""
        if image is None:
            return compile_residual_diff(
                self.tall_data,
                derivatives=self._taylor_derivatives,
                reference=self.reference.reference,
            )
        rng = np.random.default_rng(7)
        q_ref = self.reference.reference + 0.05 * rng.standard_normal(self.tall_data.ndim)
        q_old = q_ref + 0.05 * rng.standard_normal(q_ref.size)
        q_new = q_ref + 0.05 * rng.standard_normal(q_ref.size)
        graphs = self.tall_data.graphs
        return checked_residual_diff(
            image.phi,
            image.batch,
            graphs.idx,
            graphs.compile_kwargs,
            check=ResidualCheck(
                points=tuple(image.to_image(q) for q in (q_ref, q_old, q_new)),
                # The likelihood ratio of the images is that of their preimages.
                ratio=lambda _new, _old, rows: self.tall_data.loglik_diff(q_new, q_old, rows),
                derivatives=self._taylor_derivatives,
                rows=probe_indices(self.tall_data.n_data),
            ),
        )

    def _exact_likelihood_sum(self, lp):
        """The block's log-likelihood summed in closed form, or None.

        A Normal likelihood with a free scale (``y ~ Normal(X q + o, exp(z . q + s0))``)
        is a function of ``O(D^2)`` sufficient statistics, gathered in one pass at the
        reference point (:mod:`pymc_minibatch_mh.bounds.normal_exact`). With it the
        control variates' proxy is the log-likelihood itself: no datum is read after
        construction and every step's test is the exact MH test. Why a model has none is
        kept in ``exact_sum_unavailable``.

        Parameters
        ----------
        lp : LinearPredictorLikelihood or None
            The likelihood from :meth:`_normal_linear_predictor` (None: no exact sum).
        """
        if lp is None:
            return None
        try:
            return exact_normal_likelihood(lp, self.reference.reference)
        except UnsupportedBound as err:
            self.exact_sum_unavailable = str(err)
            return None

    def _normal_linear_predictor(self, model: pm.Model, initial_point: dict):
        """The likelihood as a linear predictor when it is one Normal with a free scale."""
        observed = list(model.observed_RVs)
        if len(observed) != 1 or not isinstance(observed[0].owner.op, NormalRV):
            written = ", ".join(
                f"{getattr(rv.owner.op, 'name', type(rv.owner.op).__name__)} ({rv.name!r})"
                for rv in observed
            )
            self.exact_sum_unavailable = (
                f"the likelihood is {written or 'missing'}; a closed-form sum needs one Normal"
            )
            return None
        try:
            lp = self._recognise_linear_predictor(model, initial_point)
        except UnsupportedLikelihood as err:
            self.exact_sum_unavailable = str(err)
            return None
        return normal_with_free_scale(lp, self)

    def _proxy_in_image(self, model: pm.Model, initial_point: dict) -> bool:
        """Whether to look for the likelihood's image for the proxy (``proxy_in_image``)."""
        return self.proxy_in_image

    def _recognise_linear_predictor(self, model: pm.Model, initial_point: dict):
        """The likelihood as a linear-predictor family over this step's block, checked
        against the compiled per-datum likelihood; raises ``UnsupportedLikelihood``."""
        if self.tall_data.numpy_glm is not None:  # recognised (and checked) already
            return self.tall_data.numpy_glm.likelihood
        status = f"Reading the likelihood as a linear predictor ({self.tall_data.n_data:,} rows)"
        with progress_status(status, enabled=self.progressbar):
            return self._shared_functions.get(
                "linear_predictor",
                lambda: recognise_linear_predictor(
                    model,
                    self.vars,
                    shared=make_shared_replacements(initial_point, self.vars, model),
                    initial_point=initial_point,
                    check_against=self.tall_data.loglik,
                ),
            )

    @property
    def start_at_reference(self) -> bool:
        """Whether chains that tune start at (a Laplace draw around) the reference point."""
        return self._start_requested and self._start_centre is not None

    @property
    def control_variates(self) -> bool:
        return self._residual_diff is not None

    @property
    def target(self):
        """What the kernels read: the model's per-datum likelihood, or with control
        variates a :class:`~pymc_minibatch_mh.kernels.control_variates.ControlVariateTarget`
        whose ratio terms are residuals of the Taylor proxy at ``self.reference`` (an
        :class:`~pymc_minibatch_mh.kernels.control_variates.ExactSumTarget`, which reads no
        data, when the log-likelihood's sum is known in closed form: ``_exact_sum``)."""
        if self._residual_diff is None:
            return self.tall_data
        if self._exact_sum is not None:
            return ExactSumTarget(self.tall_data, self._exact_sum)
        if isinstance(self.reference, ImageTaylorProxy):
            return ControlVariateTarget(
                self.tall_data,
                self.reference.image,
                self._residual_diff,
                coordinates=self._image_maps[0],
            )
        return ControlVariateTarget(self.tall_data, self.reference, self._residual_diff)

    @staticmethod
    def _default_scaling(temperature, n_data, ndim, proposal_cov) -> float:
        """2.38/sqrt(d), times the O(sqrt(K/N)) posterior scale when no covariance is given."""
        scale = 2.38 / math.sqrt(ndim)
        if proposal_cov is None:
            scale *= math.sqrt(temperature / n_data)
        return scale


def block_value_vars(model: pm.Model, vars: Sequence | None) -> list:
    """The value variables of a step's block: ``vars``, or by default every continuous
    free variable (hyperparameters that only enter the prior cost nothing per datum, and
    leaving them to NUTS would make NUTS evaluate the full-data likelihood at every
    leapfrog step)."""
    if vars is not None:
        return get_value_vars_from_user_vars(vars, model)
    block = [v for v in model.value_vars if v.dtype in continuous_types]
    if not block:
        raise ValueError(
            "The model has no continuous free variable, so there is nothing for a "
            "minibatch step to sample."
        )
    return block


def _check_options(
    temperature, steps_per_draw, target_accept, proposal, proposal_cov, control_variates, recentre
) -> None:
    """Refuse inconsistent constructor options before any work."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive; got {temperature}.")
    if int(steps_per_draw) != steps_per_draw or steps_per_draw < 1:
        raise ValueError(f"steps_per_draw must be a positive integer; got {steps_per_draw}.")
    if target_accept is not None and not 0 < target_accept < 1:
        raise ValueError(f"target_accept must lie in (0, 1); got {target_accept}.")
    if proposal not in PROPOSALS:
        raise ValueError(f"proposal must be one of {PROPOSALS}; got {proposal!r}.")
    if proposal_cov is not None and proposal != "rw":
        raise ValueError(
            f"proposal_cov is only used with proposal='rw'; proposal={proposal!r} takes "
            "its covariance from the Laplace approximation at the reference point."
        )
    if recentre and control_variates is False:
        raise ValueError(
            "recentre=True moves the control variates: it cannot go with control_variates=False."
        )


def _unravel(position: np.ndarray, value_vars, point: dict) -> dict:
    """Split a raveled block position into ``{name: array}`` shaped as in ``point``."""
    out, start = {}, 0
    for var in value_vars:
        shape = np.shape(point[var.name])
        size = int(np.prod(shape))
        out[var.name] = position[start : start + size].reshape(shape)
        start += size
    return out


def normal_with_free_scale(lp, step):
    """``lp`` if it is a single Normal likelihood with a free scale, else None (the
    reason kept in ``step.exact_sum_unavailable``)."""
    if lp is None:
        step.exact_sum_unavailable = "the likelihood was not recognised"
        return None
    if getattr(lp, "row_scales", False):
        step.exact_sum_unavailable = (
            "sigma differs between rows (a closed-form sum needs one scale for all rows)"
        )
        return None
    if getattr(lp, "parts", None) is not None or lp.family != "normal" or not lp.free_scale:
        step.exact_sum_unavailable = (
            f"the likelihood is {lp.family} (a closed-form sum needs one Normal with a free scale)"
        )
        return None
    return lp


def no_residuals(x_new, x_old, x_ref, idx) -> np.ndarray:
    """The residuals of a proxy that is the log-likelihood itself: all zero."""
    return np.zeros(len(idx))
