"""The log prior of a multilevel model split by group: one term per group's effects.

A group sweep (:mod:`pymc_minibatch_mh.kernels.group_sweep`) tests every group's move on
its own, so it needs the part of the log prior that changes when one group's effects move:
the log densities of those effects given the shared coordinates (``a_g ~ Normal(mu, tau)``,
a row of ``MvNormal(mu, chol=L)``). This module finds the free variables whose coordinates
are all some group's own, compiles their element-wise log densities as a function of the
step's ``q`` and sums each element into its group. It refuses (returns None with a reason)
what would make the split wrong: a transformed effect, an effect whose prior reads another
group's effects, an element spanning two groups, or a log prior (potentials included) that
changes with a group's effects by more than its group term, checked at random moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
from pymc.pytensorf import join_nonshared_inputs

from pymc_minibatch_mh.likelihood.compiling import compile_function
from pymc_minibatch_mh.likelihood.graph_tools import ancestors
from pymc_minibatch_mh.likelihood.hierarchy import block_coordinates

#: The log prior's change under a move of the groups may differ from the sum of the group
#: terms' changes by this much (relative to the log prior's size) before the split counts
#: as wrong: rounding only.
SPLIT_RTOL = 1e-9


@dataclass(frozen=True, eq=False)
class GroupPriorTerms:
    """``terms(q) -> (G,)``: each group's own log prior terms.

    Attributes
    ----------
    function : callable
        The compiled element-wise log densities (one raveled array per effect variable).
    owners : tuple of ndarray
        The group of every element of each array.
    n_groups : int
    """

    function: object
    owners: tuple
    n_groups: int

    def __deepcopy__(self, memo) -> GroupPriorTerms:
        return self

    def __call__(self, q: np.ndarray) -> np.ndarray:
        values = self.function(q)
        total = np.zeros(self.n_groups)
        for owner, value in zip(self.owners, values, strict=True):
            total += np.bincount(owner, np.asarray(value).ravel(), minlength=self.n_groups)
        return total


def group_prior_terms(
    model: pm.Model,
    block: Sequence,
    point: dict,
    owner: np.ndarray,
    shared: dict,
    compile_kwargs: dict | None = None,
) -> tuple[GroupPriorTerms | None, str]:
    """The groups' prior terms, or ``(None, reason)``.

    Parameters
    ----------
    model : pymc.Model
    block : sequence of value variables
        The step's block, in the order of ``q``.
    point : dict
        A point of the model (sizes and the values of variables outside the block).
    owner : ndarray of int, shape (D,)
        The group owning each coordinate of ``q``, -1 for shared coordinates.
    shared : dict
        PyMC's shared replacements of the variables outside the block.
    compile_kwargs : dict, optional
    """
    n_groups = int(owner.max()) + 1 if owner.size else 0
    offsets = block_coordinates(block, point)
    effect_rvs, element_owners = [], []
    covered = np.zeros(owner.size, dtype=bool)
    for rv in model.free_RVs:
        value = model.rvs_to_values[rv]
        if value.name not in offsets:
            continue
        positions = offsets[value.name]
        own = owner[positions]
        if np.all(own < 0):
            continue
        if np.any(own < 0):
            return None, f"{rv.name!r} holds both group effects and shared coordinates"
        if model.rvs_to_transforms.get(rv) is not None:
            return None, f"the group effects {rv.name!r} are sampled on a transformed scale"
        effect_rvs.append(rv)
        element_owners.append((rv, own))
        covered[positions] = True
    if not effect_rvs:
        return None, "no free variable holds only group effects"
    if not np.array_equal(covered, owner >= 0):
        return None, "some group coordinates belong to no effect variable"
    effect_values = {model.rvs_to_values[rv] for rv in effect_rvs}
    for rv in effect_rvs:
        parents = set(ancestors(rv.owner.op.dist_params(rv.owner)))
        if parents & (set(effect_rvs) | effect_values):
            return None, f"the prior of {rv.name!r} reads group effects"
    logps = model.logp(vars=effect_rvs, sum=False)
    owners = []
    for (rv, own), logp in zip(element_owners, logps, strict=True):
        shape = np.shape(point[model.rvs_to_values[rv].name])
        per_element = int(np.prod(shape[logp.ndim :], dtype=np.int64))
        grouped = own.reshape(-1, per_element)
        if np.any(grouped != grouped[:, :1]):
            return None, f"an element of {rv.name!r}'s log density spans two groups"
        owners.append(grouped[:, 0].astype(np.int64))
    raveled = [logp.ravel() for logp in logps]
    outputs, q_var = join_nonshared_inputs(
        point=point, outputs=raveled, inputs=list(block), shared_inputs=shared
    )
    function = compile_function([q_var], outputs, **(compile_kwargs or {}))
    function.trust_input = True
    return GroupPriorTerms(function, tuple(owners), n_groups), ""


def split_holds(
    terms: GroupPriorTerms,
    logprior,
    q: np.ndarray,
    owner: np.ndarray,
    rng: np.random.Generator,
    scale: float = 0.1,
    n_moves: int = 3,
) -> bool:
    """Whether moving the groups' coordinates changes the log prior by the change of the
    group terms alone (the rest of the prior does not read them), at ``n_moves`` random
    moves of size ``scale`` from ``q``."""
    base_prior, base_terms = float(logprior(q)), terms(q).sum()
    own = owner >= 0
    for _ in range(n_moves):
        moved = q.copy()
        moved[own] += scale * rng.standard_normal(int(own.sum()))
        change = float(logprior(moved)) - base_prior
        term_change = float(terms(moved).sum()) - base_terms
        size = 1.0 + abs(base_prior) + abs(base_terms)
        if not (abs(change - term_change) <= SPLIT_RTOL * size):
            return False
    return True
