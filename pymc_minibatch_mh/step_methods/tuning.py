"""Tuning of the minibatch steps: the scale, the covariance windows and the control
variates' expansion point, and how PyMC's tuning hooks reset and end it.

:class:`Tuning` is a mixin of :class:`~pymc_minibatch_mh.step_methods.base.MinibatchStep`;
the proposal mixture's refit at the end of a window is in
:mod:`~pymc_minibatch_mh.step_methods.proposal_mixture`.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_minibatch_mh.data.pass_tally import passes_counted_on
from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow, ScaleAdaptation, adapt_scale
from pymc_minibatch_mh.kernels.proposals import ProposalMixture, RandomWalkProposal
from pymc_minibatch_mh.step_methods.monitor import PostTuningTally
from pymc_minibatch_mh.step_methods.proposal_mixture import SURROGATE_TARGET_ACCEPT


class Tuning:
    """Tuning schedule and PyMC's tuning hooks of
    :class:`~pymc_minibatch_mh.step_methods.base.MinibatchStep` (a mixin)."""

    def reset_tuning(self) -> None:
        """Restore the proposal, its scale and the control variates to their untuned state,
        and tuning itself: a step that sampled before ended its tuning (``stop_tuning``),
        and PyMC's workers, unlike its sequential loop, do not switch it on again, so a
        reused step would otherwise run its next chains untuned (measured: a second
        ``pm.sample`` with ``cores=2`` at N = 10^6 reading nearly all rows per draw)."""
        self.tune = self.adapt
        self.adaptation = self._untuned_adaptation
        self.proposal = self._untuned_proposal
        self.reference = self._untuned_reference
        self.chain_started = False
        self.cov_window = CovarianceWindow(self.tall_data.ndim) if self.adapt_cov else None
        if self.recentre is True:
            self._recentre_window = CovarianceWindow(self.tall_data.ndim, first_window=50)
        self.independent_tally = (0, 0.0)
        self.flow_tally = (0, 0.0)
        self.steps_per_draw = self._untuned_steps_per_draw
        # The chain's length (PyMC 6 says it before resetting tuning) is kept.
        self.post_tuning = PostTuningTally(last_draw=self.post_tuning.last_draw)
        self._pending_warnings = []

    def stop_tuning(self) -> None:
        """End of tuning: with ``recentre=True``, move the control variates to the chain's
        recent mean (one pass over the data); the proxy is fixed from then on."""
        if self.recentre is True and self.tune and self._recentre_window.count > 0:
            self._recentre(self._recentre_window.mean)
        super().stop_tuning()

    def _recentre(self, position: np.ndarray) -> None:
        """Move the control variates' expansion point (one pass over the data); nothing to
        move when the log-likelihood's sum is exact (``_exact_sum``)."""
        if self._exact_sum is not None:
            return
        with passes_counted_on(self):
            self.reference = self._taylor_at(position, progressbar=False)

    def _adapt(self, position: np.ndarray, accept_prob: float) -> None:
        """Tuning schedule: Robbins–Monro on log(scaling) from the random-walk moves,
        windowed covariance estimates (which also refit ``proposal="auto"``), and the
        running mean used by ``recentre=True``."""
        if self._recentre_window is not None:
            self._recentre_window = self._recentre_window.add(position)
            if self._recentre_window.complete:
                # Doubling windows: at the end of tuning the mean covers the latest half.
                self._recentre_window = self._recentre_window.next_window()
        if self._move_independent:
            proposed, accepted = self.independent_tally
            self.independent_tally = (proposed + 1, accepted + accept_prob)
        elif self._inner_accept is not None:
            # HMC on the surrogate: its step size follows the inner acceptance.
            self.adaptation = adapt_scale(
                self.adaptation, self._inner_accept, SURROGATE_TARGET_ACCEPT
            )
        elif self._move_flow:  # no scale to tune; its acceptance says whether it fits
            proposed, accepted = self.flow_tally
            self.flow_tally = (proposed + 1, accepted + accept_prob)
        elif self.adapt_scale:
            self.adaptation = adapt_scale(self.adaptation, accept_prob, self.target_accept)
        if self.cov_window is None:
            return
        self.cov_window = self.cov_window.add(position)
        if not self.cov_window.complete:
            return
        cov = self.cov_window.covariance()
        if cov is not None:
            if isinstance(self.proposal, ProposalMixture):
                self._refit_mixture(self.cov_window.mean, cov)
            else:
                if self.proposal is self._untuned_proposal:
                    # The scale tuned for the initial proposal does not carry over.
                    self.adaptation = ScaleAdaptation(
                        math.log(2.38 / math.sqrt(self.tall_data.ndim)), self.adaptation.n_updates
                    )
                self.proposal = RandomWalkProposal.from_covariance(cov, self.tall_data.ndim)
        self.cov_window = self.cov_window.next_window()
