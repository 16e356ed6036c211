"""Compiled functions and full-data results shared by every step built on one model.

Building a step compiles the model's per-datum likelihood and its derivatives and makes
full-data passes (mode search, Taylor sums). When several steps are built on the same
model in one process (``compare()``, a notebook that tries each method, a test suite),
they reuse what an earlier step built, keyed by its role (``"tall_data"``,
``"taylor_derivatives"``, a reference point at a temperature, ...). Only steps whose block
is the whole model share: their functions read no variable that another step method
updates.

The memo is weakly keyed on the model and checked against a fingerprint of the model's
variables and data arrays, so it is dropped when the model is modified, when
``pm.set_data`` replaces a data array, or when the model is garbage collected.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any

import pymc as pm

from pymc_minibatch_mh.likelihood.graph_tools import data_value, graph_inputs

_MEMOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_enabled = True


class SharedFunctions:
    """A memo of compiled functions and results for one model and block.

    ``get(role, build)`` returns the value stored under ``role``, calling ``build()``
    first if there is none (a ``None`` result is stored too).
    """

    def __init__(self, fingerprint: tuple = ()):
        self.fingerprint = fingerprint
        self._values: dict[Hashable, Any] = {}

    def get(self, role: Hashable, build: Callable[[], Any]) -> Any:
        if role not in self._values:
            self._values[role] = build()
        return self._values[role]

    def __contains__(self, role: Hashable) -> bool:
        return role in self._values


def shared_functions(
    model: pm.Model, block_names: tuple[str, ...], key: Hashable
) -> SharedFunctions:
    """The memo of ``model`` for a step whose block holds ``block_names``.

    A block that is not the whole model gets a fresh, unshared memo (its functions read
    the other variables through shared variables of its own).
    """
    whole_model = set(block_names) == {v.name for v in model.value_vars}
    if not (_enabled and whole_model):
        return SharedFunctions()
    fingerprint = _fingerprint(model)
    memos = _MEMOS.setdefault(model, {})
    memo = memos.get((block_names, key))
    if memo is None or memo.fingerprint != fingerprint:
        memo = memos[(block_names, key)] = SharedFunctions(fingerprint)
    return memo


def share_between_steps(enabled: bool) -> None:
    """Switch the sharing of compiled functions between steps on (default) or off; off
    also forgets what was shared."""
    global _enabled
    _enabled = bool(enabled)
    if not enabled:
        _MEMOS.clear()


def _fingerprint(model: pm.Model) -> tuple:
    """Identities of the model's variables and of the data arrays its likelihood reads."""
    variables = [
        *model.value_vars,
        *model.free_RVs,
        *model.observed_RVs,
        *model.potentials,
        *model.deterministics,
    ]
    observed_values = [model.rvs_to_values[rv] for rv in model.observed_RVs]
    data = [
        id(value)
        for var in graph_inputs([*model.observed_RVs, *observed_values, *model.potentials])
        if (value := _data_identity(var)) is not None
    ]
    return tuple(id(v) for v in variables) + tuple(data)


def _data_identity(var):
    if getattr(var, "get_value", None) is not None:  # a shared variable (pm.Data)
        return var.get_value(borrow=True)
    return None if data_value(var) is None else var
