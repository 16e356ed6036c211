"""The scales of a hierarchy: free variables that set the prior spread of group effects.

A centred hierarchy ``a ~ Normal(mu, tau)`` (or ``MvNormal(mu, chol=L)``) with ``tau``
(or ``L``) sampled has no joint mode worth the name: as ``tau`` goes to 0 with every
``a_g`` at ``mu`` the joint density grows without bound. The steps' reference point is
then taken at a mode of the scales' marginal posterior (the effects integrated by
Laplace, :mod:`~pymc_minibatch_mh.step_methods.marginal_reference`), which needs to know
which coordinates are such scales. This module finds them in the model's graph.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pymc as pm
from pymc.distributions.multivariate import MvNormalRV
from pytensor.tensor.random.basic import NormalRV

from pymc_minibatch_mh.likelihood.graph_tools import ancestors

#: Least number of effects under one scale for it to count as a group scale: a scale
#: over one or two values is an ordinary parameter, whose joint mode is well defined.
MIN_EFFECTS = 3


def block_coordinates(block: Sequence, point: dict) -> dict[str, np.ndarray]:
    """The positions in the step's ``q`` vector of every value variable of ``block``."""
    offsets, start = {}, 0
    for var in block:
        size = int(np.size(point[var.name]))
        offsets[var.name] = np.arange(start, start + size)
        start += size
    return offsets


def group_scale_coordinates(model: pm.Model, block: Sequence, point: dict) -> np.ndarray | None:
    """Positions, in the step's ``q`` vector, of the hierarchy's scale coordinates.

    A free variable counts when it is the spread parameter (``sigma`` of a Normal, the
    covariance or Cholesky factor of an MvNormal) of at least :data:`MIN_EFFECTS`
    effects that are themselves sampled: every coordinate of its value variable is
    returned.

    Parameters
    ----------
    model : pymc.Model
    block : sequence of value variables
        The step's block, in the order of ``q``.
    point : dict
        A point of the model (for the sizes of the value variables).

    Returns
    -------
    ndarray of int or None
        Sorted positions, or None when the block holds no such scale (or only scales,
        with nothing left to integrate).
    """
    offsets = block_coordinates(block, point)
    value_of = {rv: model.rvs_to_values[rv].name for rv in model.free_RVs}
    scales: set[str] = set()
    for rv in model.free_RVs:
        node = rv.owner
        if not isinstance(node.op, NormalRV | MvNormalRV):
            continue
        if value_of[rv] not in offsets or offsets[value_of[rv]].size < MIN_EFFECTS:
            continue
        spread = node.op.dist_params(node)[1]
        parents = set(ancestors([spread]))
        scales.update(
            value_of[other]
            for other in model.free_RVs
            if other is not rv and other in parents and value_of[other] in offsets
        )
    if not scales:
        return None
    index = np.sort(np.concatenate([offsets[name] for name in scales]))
    if index.size == sum(positions.size for positions in offsets.values()):
        return None
    return index
