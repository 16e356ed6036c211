"""The likelihood engine's functions for a test model, built as a step builds them."""

from __future__ import annotations

import pymc as pm
from pymc.pytensorf import make_shared_replacements

from pymc_minibatch_mh.likelihood.tall_data import TallData, build_tall_data


def tall_data_of(model: pm.Model, value_vars=None, **kwargs) -> TallData:
    """:func:`build_tall_data` of ``model`` at its initial point, the block ``value_vars``
    (all of the model's by default), ``kwargs`` passed on."""
    point = model.initial_point()
    value_vars = value_vars or model.value_vars
    shared = make_shared_replacements(point, value_vars, model)
    return build_tall_data(model, value_vars, shared=shared, initial_point=point, **kwargs)
