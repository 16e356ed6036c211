"""The MinibatchBarker step method."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pymc_minibatch_mh.kernels.barker import BarkerSettings, barker_kernel
from pymc_minibatch_mh.kernels.correction import CorrectionTable, load_default_correction
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.step_methods.base import COMMON_STATS, MinibatchStep


class MinibatchBarker(MinibatchStep):
    """Minibatch Barker MH test with a normal + correction decomposition (**approximate**).

    Each step proposes a Gaussian random-walk move in the unconstrained space and
    decides with the minibatch Barker test of Seita et al.: the batch grows by
    ``batch_size`` (indices drawn with replacement) until the variance of the
    log-ratio estimate ``Delta*`` is below 1 (and, with ``delta``, until the CLT
    error bound is below ``delta``); then ``Delta* + X_nc + X_corr > 0`` decides.
    If the batch would reach N, the exact Barker test on the full data is used.

    The method is approximate: each decision can differ from the exact Barker
    test by the CLT error of the minibatch mean (reported per draw as the
    ``clt_error`` stat) plus the 8.9e-4 sup error of the correction table. At
    temperature 1 with a well-scaled proposal the batch tends towards N unless
    the proposal is small; the batch shrinks as ``temperature**-2`` and
    ``scaling**2``.

    Parameters
    ----------
    vars : list, optional
        Variables to sample. Default: the continuous free variables that the
        observed log-likelihood depends on; PyMC assigns other steps to the rest.
    batch_size : int, default 100
        First batch size and growth increment ``m``.
    delta : float, optional
        Tolerance on the CLT error bound of each test. Off by default: with
        Gaussian increments the bound is ``>= 11.8 / sqrt(b)``, so it only bites
        for ``delta`` of order ``0.1-1``.
    temperature : float, default 1
        ``K``: the likelihood is raised to ``1/K``. The prior is not tempered.
    scaling : float, optional
        Initial proposal scale. Default for ``proposal="rw"``: ``2.38 * sqrt(K / (N d))``
        without ``proposal_cov`` (the usual posterior scale for tall data), else
        ``2.38 / sqrt(d)``; ``2.38 / sqrt(d)`` for ``"laplace"``; 1 for ``"independent"``.
    proposal : {"rw", "laplace", "independent"}, default "rw"
        ``"rw"``: Gaussian random walk (covariance ``proposal_cov``, or adapted while
        tuning). ``"laplace"``: random walk whose covariance is the Laplace covariance
        (inverse negative Hessian of the tempered log posterior) at the reference
        point. ``"independent"``: independent multivariate Student-t (7 degrees of
        freedom) draws centred at the reference point with the Laplace covariance; for
        unimodal, near-Gaussian tall-data posteriors it proposes almost independent
        draws, for multimodal ones it mixes badly.
    proposal_cov : array, optional
        Proposal covariance (matrix) or variances (vector) in the unconstrained space
        (``proposal="rw"`` only).
    control_variates : bool, default False
        Subsample only the residuals of a second-order Taylor expansion of each
        per-datum log-likelihood around the reference point; the expansion's full-data
        sum enters exactly (one pass over the data at construction). At temperature 1
        this shrinks the variance of the log-ratio estimate by orders of magnitude on
        near-Gaussian posteriors, so batches stay small. Needs every free variable of the
        likelihood in the step's block.
    reference_point : dict, optional
        The expansion point for ``control_variates`` and the Laplace proposals, as a
        point of the model (value-variable names, e.g. from :func:`pymc.find_MAP`).
        Default: the MAP found with :func:`pymc.find_MAP` on the full data.
    recentre : bool, default False
        With control variates, move the expansion point to the chain's mean over the
        latest tuning iterations when tuning ends (one more pass over the data per chain).
    start_at_reference : bool, default True
        When there is a reference point (control variates or Laplace proposals) and
        the chain starts by tuning, replace its initial point by a draw from the
        Laplace approximation at the reference point, where the control variates are
        accurate; this shortens burn-in (tuning draws are discarded anyway).
    target_accept : float, default 0.158
        Acceptance probability targeted while tuning ``scaling``. Barker's rule
        accepts less often than Metropolis'; 0.158 is its optimal rate for
        random-walk proposals in high dimension (Agrawal et al. 2023).
    tune : bool, default True
        Adapt ``scaling`` (Robbins–Monro on its log) during PyMC's tuning phase.
    adapt_cov : bool, optional
        While tuning, replace the proposal covariance by the sample covariance of
        the chain over doubling windows (100, 200, 400, ... iterations), as Stan
        does for its mass matrix. Needs ``tune`` of a few hundred iterations or more.
        Default: on for ``proposal="rw"``, off otherwise.
    steps_per_draw : int, default 1
        Inner MH iterations per PyMC draw (amortises PyMC's per-draw overhead).
        Stats are summed (``batch_size``, ``n_lik_evals``), averaged (``accept``),
        OR-ed (``accepted``) or maximised (``delta_var``, ``clt_error``) over them.
    correction : CorrectionTable, optional
        Correction distribution; default the shipped ``C_1`` (n_grid 4000, V 20, lambda 10).
    data_dim : str, optional
        Name of the model dimension that indexes data points (checked).
    progressbar : bool, default True
        Show progress of the one-off precomputations (MAP, full-data Taylor sums).
    model, rng, initial_point, compile_kwargs, blocked
        As for :class:`pymc.Metropolis`.

    Notes
    -----
    Sample stats: ``accepted``, ``accept`` (Barker probability at ``Delta*``),
    ``batch_size`` (distinct data points evaluated), ``n_lik_evals``, ``scaling``,
    ``delta_var`` (``s^2`` of ``Delta*`` at the decision) and ``clt_error``.

    References
    ----------
    .. [1] Seita, D., Pan, X., Chen, H., Canny, J. "An Efficient Minibatch
       Acceptance Test for Metropolis-Hastings", UAI 2017.
    .. [2] Agrawal, S., Vats, D., Łatuszyński, K., Roberts, G. O. "Optimal
       scaling of MCMC beyond Metropolis", Adv. Appl. Probab. 55, 2023.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_minibatch_mh import MinibatchBarker
    >>> y = np.random.default_rng(0).normal(1.0, 1.0, size=20_000)
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 10)
    ...     _ = pm.Normal("y", mu, 1.0, observed=y)
    ...     idata = pm.sample(step=MinibatchBarker(), draws=200, tune=200, chains=1,
    ...                       progressbar=False, random_seed=1)  # doctest: +SKIP
    """

    name = "minibatch_barker"
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "delta_var": (np.float64, []),
        "clt_error": (np.float64, []),
    }
    default_target_accept = 0.158

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        batch_size: int = 100,
        delta: float | None = None,
        correction: CorrectionTable | None = None,
        **kwargs,
    ):
        if int(batch_size) != batch_size or batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2; got {batch_size}.")
        if delta is not None and not delta > 0:
            raise ValueError(f"delta must be positive (or None to disable); got {delta}.")
        super().__init__(vars, **kwargs)
        self.settings = BarkerSettings(
            batch_size=int(batch_size),
            temperature=self.temperature,
            delta=delta,
            table=correction if correction is not None else load_default_correction(),
        )

    def _transition(self, state: ChainState):
        proposal, log_q_ratio = self._propose(state)
        return barker_kernel(self.rng, state, proposal, log_q_ratio, self.target, self.settings)
