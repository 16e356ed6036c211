"""Do the chains of a sampling result agree and mix? A check that says why, in words.

PyMC's own convergence checks run only with ``compute_convergence_checks=True`` and do not
say what to do. :func:`check_mixing` reads the returned draws of every chain: split R-hat
(rank-normalised, Vehtari et al. 2021) above ``max_rhat`` means the chains disagree, and a
bulk effective sample size below ``min_ess_per_chain`` per chain means they barely move.
Both are ArviZ's values (``az.rhat``, ``az.ess(method="bulk")``), the numbers a user's own
``az.summary`` shows.
Each minibatch step also checks its own chain while sampling
(:mod:`pymc_minibatch_mh.step_methods.monitor`); only this function sees all chains.

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B., Bürkner, P.-C.
   "Rank-normalization, folding, and localization: an improved R-hat for assessing
   convergence of MCMC", Bayesian Analysis 16, 2021.
"""

from __future__ import annotations

import warnings

import numpy as np

from pymc_minibatch_mh.diagnostics.convergence import ess_bulk, rhat
from pymc_minibatch_mh.diagnostics.groups import posterior

#: Split R-hat above which chains count as disagreeing.
MAX_RHAT = 1.05
#: Bulk ESS per chain below which draws count as not mixing.
MIN_ESS_PER_CHAIN = 10.0


class MixingWarning(UserWarning):
    """The chains disagree or barely move: their draws are not to be trusted."""


def check_mixing(
    idata,
    var_names: list[str] | None = None,
    *,
    max_rhat: float = MAX_RHAT,
    min_ess_per_chain: float = MIN_ESS_PER_CHAIN,
    warn: bool = True,
) -> dict[str, str]:
    """Check that the chains of ``pm.sample``'s result agree and mix; warn in words if not.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        The result of :func:`pymc.sample` (PyMC 5 or PyMC 6).
    var_names : list of str, optional
        Variables to check. Default: every variable of the posterior group.
    max_rhat : float, default 1.05
        Largest split R-hat (ArviZ's ``az.rhat``) accepted for any coordinate of a
        variable; not checked for a single chain.
    min_ess_per_chain : float, default 10
        Smallest bulk ESS (ArviZ's ``az.ess(method="bulk")``) per chain accepted for any
        coordinate of a variable. A coordinate that never moved has ESS 0.
    warn : bool, default True
        Issue one :class:`MixingWarning` that lists the problems.

    Returns
    -------
    dict of str to str
        ``{variable: what is wrong}``; empty when every variable passes.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> good = {"posterior": {"x": rng.normal(size=(2, 500))}}
    >>> check_mixing(good)
    {}
    """
    post = posterior(idata)
    names = list(var_names) if var_names is not None else list(post.keys())
    problems: dict[str, str] = {}
    for name in names:
        draws = np.asarray(post[name])
        n_chains = draws.shape[0]
        ess = ess_bulk(draws)
        found = []
        worst_rhat = float(np.max(rhat(draws))) if n_chains > 1 else 1.0
        if worst_rhat > max_rhat:
            found.append(f"split R-hat {worst_rhat:.3g} > {max_rhat:g} (the chains disagree)")
        if float(np.min(ess)) < min_ess_per_chain * n_chains:
            found.append(
                f"bulk ESS {float(np.min(ess)):.1f} from {n_chains} x {draws.shape[1]} draws "
                "(the chains barely move)"
            )
        if found:
            problems[name] = "; ".join(found)
    if problems and warn:
        listed = "; ".join(f"{name}: {what}" for name, what in problems.items())
        warnings.warn(
            f"The draws are not to be trusted as they are: {listed}. The chains have not "
            "converged to one posterior (a chain stuck away from the bulk, or one that moves "
            "too slowly), so means and intervals computed from them may be far off. Try "
            "more tuning and draws (tune=3000); for crossed or non-centred effects pass "
            "reference_point= a point in the bulk of the posterior (e.g. the mean of a short "
            "NUTS run) or write the model centred; or sample with NUTS.",
            MixingWarning,
            stacklevel=2,
        )
    return problems
