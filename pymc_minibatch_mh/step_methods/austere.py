"""The Austere step method (sequential t-test MH)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pymc_minibatch_mh.kernels.austere import AustereSettings, austere_kernel
from pymc_minibatch_mh.kernels.subsample import UsedRows
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.step_methods.base import COMMON_STATS, MinibatchStep


class Austere(MinibatchStep):
    """Austerity MH: a sequential Student-t test on minibatches (**approximate**).

    Each step draws ``u ~ U(0, 1)`` first, then reads batches **without replacement**
    that grow by ``batch_size`` until a t-test on the mean per-datum log-likelihood
    ratio is confident at level ``epsilon`` (finite-population-corrected standard
    error, Student-t tail with ``n - 1`` degrees of freedom). At ``n = N`` the
    decision is exactly MH's.

    This is the "conservative" variant: ``(batch_size, epsilon)`` are fixed in
    advance. ``epsilon`` bounds the error of each single t-test, not of the
    sequential test; :func:`pymc_minibatch_mh.design_austere_test` picks
    ``(batch_size, epsilon)`` for a worst-case sequential error bound. The bias of
    the stationary distribution is at most ``max_error / (1 - eta)`` in total
    variation for a kernel that contracts at rate ``eta`` (Theorem 1 of the paper).
    ``epsilon = 0`` is exact MH (always reads all N points).

    Parameters
    ----------
    vars : list, optional
        Variables to sample. Default: the continuous free variables that the
        observed log-likelihood depends on.
    batch_size : int, default 500
        First batch and increment ``m`` (the paper's rule: about 500 so that the
        CLT holds for the batch mean).
    epsilon : float, default 0.01
        Per-test error level.
    temperature : float, default 1
        ``K``: the likelihood is raised to ``1/K``.
    scaling, proposal_cov, target_accept, tune, adapt_cov, steps_per_draw, data_dim
        As for :class:`~pymc_minibatch_mh.MinibatchBarker` (default
        ``target_accept`` 0.234, the Metropolis rate).
    model, rng, initial_point, compile_kwargs, blocked
        As for :class:`pymc.Metropolis`.

    Notes
    -----
    Sample stats: ``accepted``, ``accept`` (NaN: no probability estimate),
    ``batch_size`` (points used), ``n_lik_evals``, ``scaling`` and ``t_stat``.
    Failure modes: heavy-tailed or sparse per-datum ratios break the CLT behind the
    t-test; some ``(q, q', u)`` always need all N points.

    References
    ----------
    .. [1] Korattikara, A., Chen, Y., Welling, M. "Austerity in MCMC Land: Cutting
       the Metropolis-Hastings Budget", ICML 2014.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_minibatch_mh import Austere
    >>> y = np.random.default_rng(0).normal(1.0, 1.0, size=50_000)
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 10)
    ...     _ = pm.Normal("y", mu, 1.0, observed=y)
    ...     idata = pm.sample(step=Austere(epsilon=0.05), draws=200, tune=200,
    ...                       chains=1, progressbar=False)  # doctest: +SKIP
    """

    name = "austere"
    stats_dtypes_shapes = {**COMMON_STATS, "t_stat": (np.float64, [])}

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        batch_size: int = 500,
        epsilon: float = 0.01,
        **kwargs,
    ):
        if int(batch_size) != batch_size or batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2; got {batch_size}.")
        if not 0 <= epsilon < 0.5:
            raise ValueError(f"epsilon must lie in [0, 0.5); got {epsilon}.")
        super().__init__(vars, **kwargs)
        self.settings = AustereSettings(
            batch_size=int(batch_size), epsilon=float(epsilon), temperature=self.temperature
        )
        self._rows = UsedRows(self.tall_data.n_data)

    def _transition(self, state: ChainState):
        proposal, log_q_ratio = self._propose(state)
        return austere_kernel(self.rng, state, proposal, log_q_ratio, self.tall_data, self.settings)
