"""The moves of the minibatch steps: the proposal mixture and how tuning refits it.

``proposal="auto"`` mixes a local move (a random walk with the Laplace covariance, or
HMC on the surrogate posterior, prior plus Taylor proxy, when there are control
variates) with independence moves from a multivariate t around the reference point.
:class:`ProposalMoves` builds the untuned proposal, chooses each iteration's move and,
at the end of every tuning window, refits the mixture to the chain's draws. It is a
mixin of :class:`~pymc_minibatch_mh.step_methods.base.MinibatchStep`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from pymc.stats.convergence import SamplerWarning, WarningType

from pymc_minibatch_mh.kernels.control_variates import ImageTaylorProxy
from pymc_minibatch_mh.kernels.gaussian_flow import GaussianFlow
from pymc_minibatch_mh.kernels.proposals import (
    IndependenceProposal,
    ProposalMixture,
    RandomWalkProposal,
)
from pymc_minibatch_mh.kernels.surrogate_hmc import SurrogateHMC
from pymc_minibatch_mh.kernels.target import ChainState
from pymc_minibatch_mh.likelihood.taylor import NonFiniteTaylor

PROPOSALS = ("auto", "rw", "laplace", "independent")
#: ``proposal="auto"``: probability of an independence move before tuning has measured
#: how well the Gaussian fit works.
INITIAL_P_INDEPENDENT = 0.5
#: Bounds of the tuned probability of an independence move (the random walk keeps at
#: least this share, and the independence moves too).
P_INDEPENDENT_RANGE = (0.2, 0.8)
#: Above this many dimensions a Gaussian fit is rarely good enough for independence moves
#: (their acceptance falls with the dimension), so their tuned share may fall to
#: HIGH_DIM_P_FLOOR, and a refitted proposal starts at the usual floor instead of
#: INITIAL_P_INDEPENDENT. Measured (TunaMH, centred hierarchy with 200 groups, N = 20,000):
#: min ESS 90 of 1000 draws with a share of 0.5 after every refit, 195 with local moves only.
HIGH_DIM = 20
HIGH_DIM_P_FLOOR = 0.02
#: Below this acceptance rate of its moves (relative to the method's best rate, see
#: ``best_independent_rate``) the independence proposal is refitted to the tuning draws:
#: the window's mean and covariance, the covariance inflated by this factor.
REFIT_BELOW = 0.1
REFIT_INFLATION = 1.2**2
#: A window's sample covariance is shrunk towards the covariance in use with weight
#: ``count / (count + COVARIANCE_PRIOR_DRAWS * d)``: a few hundred correlated draws
#: estimate a d x d covariance poorly, and the Laplace covariance is a good prior guess.
COVARIANCE_PRIOR_DRAWS = 10
#: Below this acceptance rate of the flow's moves (relative to the method's best rate) at
#: the end of a tuning window, the Gaussian surrogate does not fit the posterior, and the
#: moves become those of other priors: HMC on the surrogate mixed with independence moves,
#: whose refits follow the posterior's shape. Measured: a binomial regression with an
#: all-zero category and Normal(0, 100) priors (the coefficient's posterior sd 61, far from
#: its Laplace fit) accepted 28 % of TunaMH's flow moves, and its mean was 0.48 sd off;
#: logistic regressions (N = 10^5-10^6, D = 11-101) accepted 75-99 %.
FLOW_MIN_RATE = 0.5
#: Acceptance rate of the inner HMC step on the surrogate that tuning aims at.
SURROGATE_TARGET_ACCEPT = 0.8
SURROGATE_TRANSITIONS = 10
#: HMC transitions per draw when the surrogate is the exact posterior (``_exact_sum``):
#: one per draw, as an even number of them would cancel the antithetic correlation of
#: HMC draws on a near-Gaussian posterior (measured: 1.5 effective draws per transition).
EXACT_SUM_TRANSITIONS = 1


class ProposalMoves:
    """The proposal mixture of :class:`~pymc_minibatch_mh.step_methods.base.MinibatchStep`
    (a mixin: it reads the step's reference point, Laplace factor, surrogate and
    adaptation state)."""

    def _untuned_moves(self, proposal: str, centre, proposal_cov, ndim: int):
        """The proposal before tuning and its default scale, for ``proposal`` (the user's
        choice, or what ``"auto"`` means for this method): a random walk, independence
        moves from the Laplace fit, HMC on the surrogate (``"laplace"`` with control
        variates) or their mixture (``"auto"``)."""
        if proposal == "rw":
            untuned = RandomWalkProposal.from_covariance(proposal_cov, ndim)
            default_scaling = self._default_scaling(
                self.temperature, self.tall_data.n_data, ndim, proposal_cov
            )
        elif proposal == "independent":
            untuned = IndependenceProposal(centre=centre, chol=self._laplace_chol)
            default_scaling = 1.0
        else:
            random_walk = RandomWalkProposal(self._laplace_chol, self._laplace_precision)
            default_scaling = 2.38 / math.sqrt(ndim)
            p_independent = INITIAL_P_INDEPENDENT
            if self._surrogate is not None:
                # The local move is HMC on the surrogate; the scale is its step size.
                transitions = SURROGATE_TRANSITIONS
                if self._exact_sum is not None:
                    # The surrogate is the posterior: every HMC move is accepted by the
                    # exact test, and independence moves (rarely accepted in many
                    # dimensions) would only leave the chain in place.
                    transitions, p_independent = EXACT_SUM_TRANSITIONS, 0.0
                random_walk = SurrogateHMC(self._laplace_chol, transitions)
                default_scaling = ndim ** (-0.25)
                flow = self._surrogate_flow() if self._exact_sum is None else None
                if flow is not None:
                    # A Gaussian surrogate: its Hamiltonian flow is exact, and its moves
                    # are better than independence moves from the Laplace fit.
                    random_walk, p_independent = flow, 0.0
            if proposal == "laplace":
                untuned = random_walk
            else:
                untuned = ProposalMixture(
                    random_walk,
                    IndependenceProposal(centre=centre, chol=self._laplace_chol),
                    p_independent,
                )
        return untuned, default_scaling

    @property
    def uses_gaussian_flow(self) -> bool:
        """Whether the local move is the exact flow on a Gaussian surrogate."""
        proposal = self._untuned_proposal
        local = proposal.random_walk if isinstance(proposal, ProposalMixture) else proposal
        return isinstance(local, GaussianFlow)

    def _choose_move(self):
        """The proposal of the next MH iteration and its scale; records its kind.

        Returns ``(proposal, scaling)``; ``proposal(rng, position, scaling)`` gives the
        proposed point and the log proposal-density ratio.
        """
        proposal = self.proposal
        if isinstance(proposal, ProposalMixture):
            self._move_independent = proposal.choose(self.rng)
            if self._move_independent:
                return proposal.independent, 1.0
            return proposal.random_walk, self.adaptation.scaling
        self._move_independent = isinstance(proposal, IndependenceProposal)
        return proposal, self.adaptation.scaling

    def _propose(self, state: ChainState) -> tuple[np.ndarray, float]:
        proposal, scaling = self._choose_move()
        self._move_flow = isinstance(proposal, GaussianFlow)
        if self._move_flow:
            self._inner_accept = None
            # The flow on the current proxy's surrogate; should the proxy moved to have
            # no Gaussian surrogate, the last one (any reversible move stays valid).
            flow = self._surrogate_flow() or proposal
            return flow(self.rng, state.position)
        if isinstance(proposal, SurrogateHMC):
            moved, log_q_ratio, self._inner_accept = proposal(
                self.rng, state.position, scaling, self._surrogate_density
            )
            return moved, log_q_ratio
        self._inner_accept = None
        return proposal(self.rng, state.position, scaling)

    def _surrogate_density(self, position: np.ndarray) -> tuple[float, np.ndarray]:
        """Prior plus tempered proxy of the control variates and its gradient in ``q``
        (prior plus the exact tempered log-likelihood when ``_exact_sum`` is set)."""
        if self._exact_sum is not None:
            return self._exact_surrogate_density(position)
        value, grad = self._surrogate(position, *self._tempered_proxy_terms())
        return float(value), grad

    def _keep_or_leave_flow(self, mixture: ProposalMixture) -> ProposalMixture:
        """End of a tuning window with the flow: keep it while its moves are accepted,
        else (see :data:`FLOW_MIN_RATE`) HMC on the surrogate and independence moves, and
        the steps per draw of those moves."""
        proposed, accepted = self.flow_tally
        self.flow_tally = (0, 0.0)
        if not proposed or accepted / proposed / self.best_independent_rate >= FLOW_MIN_RATE:
            return mixture
        ndim = self.tall_data.ndim
        if not self._user_steps:
            self.steps_per_draw = int(self._default_steps())
        self.independent_tally = (0, 0.0)
        return ProposalMixture(
            SurrogateHMC(self._laplace_chol, SURROGATE_TRANSITIONS),
            mixture.independent,
            P_INDEPENDENT_RANGE[0] if ndim > HIGH_DIM else INITIAL_P_INDEPENDENT,
        )

    def _tempered_proxy_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(g, H, x_ref)`` of the proxy over the temperature, computed once per expansion
        point, not per leapfrog step (the Hessian has D^2 entries)."""
        cached = getattr(self, "_tempered_proxy", None)
        if cached is None or cached[0] is not self.reference:
            proxy = self.reference
            if isinstance(proxy, ImageTaylorProxy):
                proxy = proxy.image
            cached = (
                self.reference,
                proxy.gradient / self.temperature,
                proxy.hessian / self.temperature,
                proxy.reference,
            )
            self._tempered_proxy = cached
        return cached[1:]

    def _surrogate_flow(self) -> GaussianFlow | None:
        """The exact Hamiltonian flow on the surrogate of the current proxy when that is a
        Gaussian (a Normal prior on every coordinate, ``_gaussian_prior``), else None.

        With prior mean ``m``, prior precisions ``d`` and the tempered proxy ``(g, H,
        x_ref)``, the surrogate's log density is ``-q^T (diag(d) - H) q / 2 + q . (d m + g
        - H x_ref)`` plus a constant.
        """
        if self._gaussian_prior is None or self.reference is None:
            return None
        cached = getattr(self, "_flow", None)
        if cached is not None and cached[0] is self.reference:
            return cached[1]
        g, h, x_ref = self._tempered_proxy_terms()
        mean, precision = self._gaussian_prior
        try:
            flow = GaussianFlow.from_quadratic(
                np.diag(precision) - h, precision * mean + g - h @ x_ref
            )
        except np.linalg.LinAlgError:
            flow = None  # the proxy curves upwards somewhere: not a Gaussian
        self._flow = (self.reference, flow)
        return flow

    def _exact_surrogate_density(self, position: np.ndarray) -> tuple[float, np.ndarray]:
        """The prior (``_surrogate`` compiled without a proxy) plus the exact log-likelihood
        over the temperature: the surrogate is the tempered posterior itself."""
        value, grad = self._surrogate(position)
        lik, lik_grad = self._exact_sum.log_bound_sum_and_grad(position)
        return float(value) + lik / self.temperature, grad + lik_grad / self.temperature

    def _refit_mixture(self, mean: np.ndarray, cov: np.ndarray) -> None:
        """End of a tuning window with ``proposal="auto"``.

        The random walk takes the window's covariance, shrunk towards the one in use. The
        independence proposal keeps its Gaussian fit unless its moves were rarely accepted,
        in which case it is refitted to the window's mean and (inflated) covariance; the
        probability of an independence move follows its acceptance rate. With control
        variates (``recentre=None``) the proxy is re-expanded at the window's mean when the
        independence fit was poor or the mean sits more than about one posterior sd (beyond
        Monte Carlo noise) from the expansion point: one pass over the data.
        """
        mixture = self.proposal
        ndim = self.tall_data.ndim
        if isinstance(mixture.random_walk, GaussianFlow):
            mixture = self._keep_or_leave_flow(mixture)
        # The flow has no covariance of its own: its windows shrink towards the Laplace fit.
        previous = getattr(mixture.random_walk, "chol", self._laplace_chol)
        weight = self.cov_window.count / (self.cov_window.count + COVARIANCE_PRIOR_DRAWS * ndim)
        cov = weight * cov + (1.0 - weight) * (previous @ previous.T)
        chol = np.linalg.cholesky(cov)
        proposed, accepted = self.independent_tally
        rate = accepted / proposed / self.best_independent_rate if proposed else 0.0
        independent = mixture.independent
        # No independence moves (the flow, or HMC on the exact posterior): nothing to refit.
        refit = rate < REFIT_BELOW and mixture.p_independent > 0.0
        low, high = P_INDEPENDENT_RANGE
        many = ndim > HIGH_DIM
        if mixture.p_independent == 0.0:
            p_independent = 0.0  # HMC on the exact posterior only (``_exact_sum``)
        elif refit:
            independent = IndependenceProposal(
                centre=mean.copy(), chol=math.sqrt(REFIT_INFLATION) * chol, df=independent.df
            )
            p_independent = low if many else INITIAL_P_INDEPENDENT
        else:
            p_independent = float(np.clip(1.6 * rate, HIGH_DIM_P_FLOOR if many else low, high))
        local = mixture.random_walk
        if not isinstance(local, GaussianFlow):  # the flow follows the proxy instead
            local = replace(local, chol=chol)
        self.proposal = ProposalMixture(local, independent, p_independent)
        self.independent_tally = (0, 0.0)
        if self.recentre is None and self.reference is not None:
            offset = float(np.linalg.norm(np.linalg.solve(chol, mean - self.reference.reference)))
            noise = math.sqrt(ndim / max(self.cov_window.count, 1))
            if refit or offset > 1.0 + 2.0 * noise:
                try:
                    self._recentre(mean)
                except NonFiniteTaylor as err:
                    # Any fixed proxy keeps the estimator unbiased: keep the current one.
                    self._pending_warnings.append(
                        SamplerWarning(
                            WarningType.BAD_PARAMS,
                            f"{type(self).__name__}: the control variates could not be "
                            f"moved to the mean of the tuning draws ({err}); they stay at "
                            f"the previous expansion point. The chain visited a region "
                            "where the likelihood is not finite: check the model, or pass "
                            "reference_point= a point in the bulk of the posterior.",
                            "warn",
                        )
                    )
