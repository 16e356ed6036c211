"""Non-centred group effects, sampled in their centred coordinates.

PyMC's guides teach users to write group effects non-centred: ``a = mu + sigma * z`` with
``z ~ Normal(0, 1)``, or correlated slopes ``ab = mu + z @ chol.T`` with ``chol`` from
:func:`pymc.LKJCholeskyCov`. The likelihood then reads the effects ``a`` (its own
parameters), which are not affine in the sampled ``z``: recognised bounds, sufficient
statistics and linear predictors stop there.

The map ``z -> a`` is a bijection for fixed hyperparameters, so the posterior of
``(h, z)`` is the image of the posterior of the *centred twin* ``(h, a)``, in which

- ``a ~ Normal(mu + sigma * m, |sigma| * s)`` for ``z ~ Normal(m, s)`` (``m``, ``s``
  constants), elementwise (the Jacobian of ``z -> a`` is ``prod |sigma s|``);
- ``a_g ~ MvNormal(mu_g, L L^T)`` for ``a_g = mu_g + L z_g`` with ``z_g`` i.i.d.
  ``Normal(0, 1)`` rows and a square matrix ``L`` shared by the rows (``z @ chol.T``,
  ``(chol @ z.T).T``; the Jacobian is ``|det L|`` per row).

A Markov kernel that leaves the twin's posterior invariant, moved to ``(h, z)`` by the
bijection, leaves the user's posterior invariant: the steps sample the twin (where the
likelihood is affine in ``a`` and every recognised family, bound and exact sum applies)
and hand PyMC ``z = (a - mu) / sigma`` (or ``L^{-1} (a_g - mu_g)``).

Which expressions qualify is decided numerically on the model's own graphs: ``E`` is
computed from ``z`` alone through a chain of single-use operations, has ``z``'s shape, and
``E(z) = E(0) + S z`` (``S`` elementwise, or one square matrix on the last axis) at random
points; the inverse map is checked the same way. A model without such an effect has no
twin, and the steps sample it as written.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.model.fgraph import (
    ModelDeterministic,
    fgraph_from_model,
    model_deterministic,
    model_free_rv,
    model_from_fgraph,
)
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.random.basic import NormalRV

from pymc_minibatch_mh.likelihood.graph_tools import (
    ancestors,
    clients_of,
    data_leaves,
    data_value,
    integer_vector_gather,
    rebuild_graph,
    toposort,
)

_CHECK_SEED = 20261205  # fixed: the checks are deterministic


@dataclass(frozen=True)
class _Effect:
    """One non-centred effect of the user's model: ``effect = loc + S z``."""

    z: Variable  # the free RV ``z`` of the user's model
    effect: Variable  # the expression ``E`` (a graph of the model's RVs)
    kind: str  # "scale" (elementwise S) or "matrix" (S on the last axis)
    name: str  # name of the centred variable in the twin
    # Written with the index inside (``mu + sigma * z[group]``): the model's expression,
    # equal to ``effect[index]``, and the index. ``effect`` is then built by lifting it.
    indexed: Variable | None = None
    index: Variable | None = None


@dataclass(frozen=True, eq=False)
class CentredTwin:
    """The centred twin of a model and the bijection between their points.

    Attributes
    ----------
    model : pymc.Model
        The twin: every non-centred effect a free variable with its implied prior.
    effects : tuple of str
        ``"<twin variable> <- <user variable>"`` for each effect centred (for messages).
    """

    model: pm.Model
    effects: tuple
    _forward: object  # user values -> centred effects
    _backward: object  # twin values -> the users' z
    _user_inputs: tuple
    _twin_inputs: tuple
    _user_names: tuple  # the z's value variables
    _twin_names: tuple  # the centred effects' value variables
    _copied: tuple  # value variables the twin shares with the user's model

    def without_model(self) -> CentredTwin:
        """The bijection alone (what a step keeps, and sends to PyMC's chain processes)."""
        return replace(self, model=None)

    def twin_point(self, point: dict) -> dict:
        """The twin's point (value-variable names) of a point of the user's model."""
        out = {name: point[name] for name in self._copied}
        values = self._forward(*[point[name] for name in self._user_inputs])
        out.update(zip(self._twin_names, values, strict=True))
        return out

    def user_point(self, twin_point: dict) -> dict:
        """The user's point of a point of the twin."""
        out = {name: twin_point[name] for name in self._copied}
        values = self._backward(*[twin_point[name] for name in self._twin_inputs])
        out.update(zip(self._user_names, values, strict=True))
        return out


def centred_twin(model: pm.Model, block_names: Sequence[str]) -> CentredTwin | None:
    """The centred twin of ``model`` when it has non-centred effects, else None.

    Only effects whose variables (``z`` and everything ``loc`` and ``S`` read) are all in
    the block are centred; the twin is built only when the block is every free variable
    of the model (a step sampling part of a model shares the rest with other steps, which
    read the user's variables).
    """
    free_names = {model.rvs_to_values[rv].name for rv in model.free_RVs}
    if set(block_names) != free_names:
        return None
    try:
        effects = _find_effects(model)
        return _build_twin(model, effects) if effects else None
    except Exception as err:  # noqa: BLE001 - any graph PyTensor or PyMC cannot rewrite
        warnings.warn(
            f"Non-centred effects were found but could not be sampled in centred coordinates "
            f"({type(err).__name__}: {err}); the step samples the model as written. Please "
            "report this with the model.",
            UserWarning,
            stacklevel=3,
        )
        return None


# --------------------------------------------------------------------------- detection
def _find_effects(model: pm.Model) -> list[_Effect]:
    outputs = [*model.observed_RVs, *model.potentials, *model.free_RVs]
    nodes = toposort(outputs)
    clients = clients_of(nodes)
    found = []
    taken = {*model.named_vars}
    for z in model.free_RVs:
        if not _standard_normal_like(model, z):
            continue
        for effect in _effect_candidates(z, clients, model):
            if _reads_data(effect, z):
                continue  # a product with data (X @ beta), not an effect: never evaluated
            kind = _affine_kind(model, z, effect)
            if kind is not None:
                name = _twin_name(effect, z, model, taken)
                found.append(_Effect(z, effect, kind, name))
                break
        else:
            lifted = _indexed_effect(model, z, clients, taken)
            if lifted is None:
                continue
            found.append(lifted)
        taken.add(found[-1].name)
    return found


def _indexed_effect(model: pm.Model, z: Variable, clients: dict, taken: set) -> _Effect | None:
    """An effect written with the index inside, ``mu + sigma * z[group]``: its lifted form
    ``E = mu + sigma * z`` (every ``v[group]`` on the chain read as ``v``), when ``E`` is
    affine in ``z`` with ``z``'s shape and ``E[group]`` equals the model's expression."""
    readers = [n for n in clients.get(z, []) if not _views_only(n, set(model.deterministics))]
    if len(readers) != 1 or not integer_vector_gather(readers[0]) or readers[0].inputs[0] is not z:
        return None
    node = readers[0]
    index = node.inputs[1]
    free = set(model.free_RVs)
    if any(v in free for v in ancestors([index])):
        return None
    for indexed in _effect_candidates(node.outputs[0], clients, model):
        effect = _lifted(indexed, index)
        if effect is None or _reads_data(effect, z):
            continue
        kind = _affine_kind(model, z, effect)
        if kind is not None and _lift_holds(model, effect, indexed, index):
            name = _twin_name(indexed, z, model, taken)
            return _Effect(z, effect, kind, name, indexed=indexed, index=index)
    return None


def _same_index(a: Variable, b: Variable) -> bool:
    if a is b:
        return True
    if isinstance(a, Constant) and isinstance(b, Constant):
        return np.array_equal(a.data, b.data)
    return False


def _lifted(indexed: Variable, index: Variable) -> Variable | None:
    """``indexed`` with every ``v[index]`` in it replaced by ``v``, or None if it has none."""
    replace = {}
    for node in toposort([indexed]):
        if integer_vector_gather(node) and _same_index(node.inputs[1], index):
            replace[node.outputs[0]] = node.inputs[0]
    if not replace:
        return None
    try:
        return rebuild_graph(indexed, replace)
    except ValueError:  # it also reads per-row terms (b * x): the index does not lift
        return None


def _lift_holds(model: pm.Model, effect: Variable, indexed: Variable, index: Variable) -> bool:
    """Whether ``effect[index]`` equals ``indexed`` at random points (shapes included)."""
    rng = np.random.default_rng(_CHECK_SEED + 1)
    fn = pytensor.function(
        model.value_vars,
        model.replace_rvs_by_values([effect[index], indexed]),
        on_unused_input="ignore",
        mode=_MODE,
    )
    base = model.initial_point()
    for _ in range(2):
        point = {k: np.asarray(v) + rng.normal(0.0, 0.5, np.shape(v)) for k, v in base.items()}
        lifted, original = fn(*[point[v.name] for v in model.value_vars])
        if np.shape(lifted) != np.shape(original) or not np.allclose(lifted, original):
            return False
    return True


def _standard_normal_like(model: pm.Model, z: Variable) -> bool:
    """``z ~ Normal(m, s)`` with constant ``m``, ``s``, no transform, no other free RV read."""
    node = z.owner
    if node is None or not isinstance(node.op, NormalRV):
        return False
    if model.rvs_to_transforms.get(z) is not None:
        return False
    params = node.op.dist_params(node)
    free = set(model.free_RVs)
    return not any(v in free for p in params for v in ancestors([p]))


def _uniform_params(z: Variable) -> bool:
    """Whether every entry of ``z`` has the same (constant) mean and sd."""
    node = z.owner
    params = node.op.dist_params(node)
    values = [np.asarray(p.eval()) for p in params]
    return all(np.all(v == v.ravel()[0]) for v in values)


def _effect_candidates(z: Variable, clients: dict, model: pm.Model) -> list[Variable]:
    """The expressions of ``z``'s rank on the chain of single-use operations from ``z``
    (Deterministics aside), last first: the effect is the last of them that is affine in
    ``z`` with ``z``'s shape (an index ``a[group]`` after it has the rank but not the shape)."""
    deterministics = set(model.deterministics)
    current, found = z, []
    for _ in range(12):
        readers = [n for n in clients.get(current, []) if not _views_only(n, deterministics)]
        if len(readers) != 1 or len(readers[0].outputs) != 1:
            break
        current = readers[0].outputs[0]
        if current.type.ndim == z.type.ndim and current.dtype == z.dtype:
            found.append(current)
    return found[::-1]


def _reads_data(effect: Variable, z: Variable) -> bool:
    """Whether ``effect`` reads chunked data or an array much larger than ``z`` (data
    rows): an effect reads hyperparameters and small constants only."""
    limit = 10 * int(np.prod([d or 1 for d in z.type.shape])) + 100
    for leaf in data_leaves([effect]):
        if leaf.owner is not None:  # a chunked array: data
            return True
        value = data_value(leaf)
        if value is not None and int(np.prod(np.shape(value))) > limit:
            return True
    return False


def _views_only(node, deterministics: set) -> bool:
    return all(out in deterministics for out in node.outputs)


def _affine_kind(model: pm.Model, z: Variable, effect: Variable) -> str | None:
    """``"scale"`` or ``"matrix"`` if ``effect = loc + S z`` at random points, else None."""
    rng = np.random.default_rng(_CHECK_SEED)
    value_vars = model.value_vars
    fn = pytensor.function(
        value_vars,
        model.replace_rvs_by_values([effect])[0],
        on_unused_input="ignore",
        mode=_MODE,
    )
    base = model.initial_point()
    z_name = model.rvs_to_values[z].name
    z_shape = np.shape(base[z_name])
    if z_shape == () or np.prod(z_shape) == 0:
        return None
    for kind in ("scale", "matrix"):
        if kind == "matrix" and (len(z_shape) != 2 or not _uniform_params(z)):
            continue
        if _affine_at_points(fn, value_vars, base, z_name, z_shape, kind, rng):
            return kind
    return None


def _affine_at_points(fn, value_vars, base, z_name, z_shape, kind, rng) -> bool:
    for _ in range(3):
        point = {k: np.asarray(v) + rng.normal(0.0, 0.5, np.shape(v)) for k, v in base.items()}
        args = [point[v.name] for v in value_vars]
        index = [v.name for v in value_vars].index(z_name)

        def at(z_value, args=args, index=index):
            return np.asarray(fn(*args[:index], z_value, *args[index + 1 :]), dtype=np.float64)

        loc = at(np.zeros(z_shape))
        if loc.shape != tuple(z_shape):
            return False
        z_value = rng.normal(size=z_shape)
        if kind == "scale":
            scale = at(np.ones(z_shape)) - loc
            expected = loc + scale * z_value
            if not np.all(np.abs(scale) > 0):
                return False
        else:
            k = z_shape[1]
            matrix = np.stack(
                [(at(np.tile(np.eye(k)[j], (z_shape[0], 1))) - loc)[0] for j in range(k)], axis=1
            )
            expected = loc + z_value @ matrix.T
            if abs(np.linalg.det(matrix)) < 1e-12:
                return False
        actual = at(z_value)
        if not np.allclose(actual, expected, rtol=1e-7, atol=1e-9 * (1 + np.abs(expected).max())):
            return False
    return True


def _twin_name(effect: Variable, z: Variable, model: pm.Model, taken: set) -> str:
    """The Deterministic's name that holds the effect (removed from the twin), else
    ``<z>_centred``."""
    for det in model.deterministics:
        if det is effect or (det.owner is not None and effect in det.owner.inputs):
            return det.name
    name = f"{z.name}_centred"
    while name in taken:
        name += "_"
    return name


# --------------------------------------------------------------------------- the twin
_MODE = pytensor.compile.mode.Mode(linker="py", optimizer="fast_run")


def _build_twin(model: pm.Model, effects: list[_Effect]) -> CentredTwin | None:
    fgraph, memo = fgraph_from_model(model, inlined_views=True)
    # The twin needs no Deterministics (PyMC computes the user's from the user's point);
    # removed, their names are free for the centred variables.
    for node in list(fgraph.toposort()):
        if isinstance(node.op, ModelDeterministic):
            fgraph.replace(node.outputs[0], node.inputs[0], import_missing=True)
    removed_outputs = set()
    for effect in effects:
        z_fg = memo[effect.z]
        if effect.indexed is None:
            e_fg = memo[effect.effect]
        else:  # the lifted effect is not in the model: lifted again in the fgraph
            index_fg = memo.get(effect.index, effect.index)
            e_fg = _lifted(memo[effect.indexed], index_fg)
        loc, linear = _loc_and_linear(e_fg, z_fg, effect.kind)
        dist = _centred_dist(effect, loc, linear, memo)
        value = dist.type()
        value.name = effect.name
        twin_rv = _free_rv(dist, value, effect.name)
        if effect.indexed is None:
            fgraph.replace(e_fg, twin_rv, import_missing=True)
        else:
            fgraph.replace(memo[effect.indexed], twin_rv[index_fg], import_missing=True)
        removed_outputs.add(z_fg)
        # loc and the linear part, as graphs of the twin, for the inverse map.
        fgraph.add_output(_named(loc, _LOC + effect.name), import_missing=True)
        fgraph.add_output(_named(linear, _LINEAR + effect.name), import_missing=True)
    keep = [
        out
        for out in fgraph.outputs
        if out not in removed_outputs
        and not (
            out.owner is not None
            and isinstance(out.owner.op, ModelDeterministic)
            and not (out.name or "").startswith("__centring")
        )
    ]
    new_fgraph = FunctionGraph(outputs=keep, clone=False)
    new_fgraph._coords = getattr(fgraph, "_coords", {})
    new_fgraph._dim_lengths = getattr(fgraph, "_dim_lengths", {})
    twin = model_from_fgraph(new_fgraph, mutate_fgraph=True)
    return _bijection(model, twin, effects)


def _loc_and_linear(effect: Variable, z: Variable, kind: str):
    """``loc`` and the linear part (elementwise scale, or the matrix) of ``effect`` in ``z``,
    as graphs that do not read ``z`` (not even its shape)."""
    shape = _shape_without(z)
    zeros = pt.zeros(shape, dtype=z.dtype)
    loc = rebuild_graph(effect, {z: zeros})
    if kind == "scale":
        return loc, rebuild_graph(effect, {z: pt.ones(shape, dtype=z.dtype)}) - loc
    width = int(np.asarray(pt.as_tensor(shape[1]).eval()))  # a constant or a dim's length
    eye = np.eye(width, dtype=z.dtype)
    columns = [(rebuild_graph(effect, {z: zeros + eye[j]}) - loc)[0] for j in range(width)]
    return loc, pt.stack(columns, axis=1)


def _shape_without(z: Variable):
    """The shape of the free RV ``z`` (a ModelFreeRV output) from its size parameter, or
    from its (constant) parameters when it has no size."""
    rv_node = z.owner.inputs[0].owner
    size = rv_node.op.size_param(rv_node)
    if isinstance(size, Constant) and size.data is None:
        return pt.broadcast_shape(*rv_node.op.dist_params(rv_node))
    return [size[i] for i in range(z.type.ndim)]


def _centred_dist(effect: _Effect, loc, linear, memo):
    node = effect.z.owner
    params = node.op.dist_params(node)
    mean, sd = (memo.get(p, p) for p in params)
    if effect.kind == "scale":
        return pm.Normal.dist(loc + linear * mean, pt.abs(linear) * sd)
    # Rows of i.i.d. Normal(m, s) entries (checked by _standard_normal_like).
    m, s = (float(np.asarray(p.eval()).ravel()[0]) for p in params)
    shift = pt.sum(linear, axis=1) * m
    return pm.MvNormal.dist(loc + shift, cov=pt.dot(linear, linear.T) * s**2)


def _free_rv(dist, value, name: str):
    if "name" in inspect.signature(model_free_rv).parameters:  # PyMC 6
        out = model_free_rv(dist, value, None, name)
    else:  # PyMC 5: the name is the output's
        out = model_free_rv(dist, value, None)
    out.name = name
    return out


def _named(var, name: str):
    if isinstance(model_deterministic, ModelDeterministic):  # PyMC 5: an Op, named by output
        out = model_deterministic(var)
    else:  # PyMC 6
        out = model_deterministic(var, name)
    out.name = name
    return out


def _bijection(model: pm.Model, twin: pm.Model, effects: list[_Effect]) -> CentredTwin:
    twin_rvs = {rv.name: rv for rv in twin.free_RVs}
    named = twin.named_vars
    backward = []
    for effect in effects:
        value = twin.rvs_to_values[twin_rvs[effect.name]]
        loc, linear = named[_LOC + effect.name], named[_LINEAR + effect.name]
        z = _inverse(value, loc, linear, effect)
        backward.append(z)
    twin_inputs = [v for v in twin.value_vars]
    user_inputs = [v for v in model.value_vars]
    backward_fn = pytensor.function(
        twin_inputs, twin.replace_rvs_by_values(backward), on_unused_input="ignore", mode=_MODE
    )
    forward_fn = pytensor.function(
        user_inputs,
        model.replace_rvs_by_values([e.effect for e in effects]),
        on_unused_input="ignore",
        mode=_MODE,
    )
    user_names = tuple(model.rvs_to_values[e.z].name for e in effects)
    twin_names = tuple(twin.rvs_to_values[twin_rvs[e.name]].name for e in effects)
    twin_value_names = {v.name for v in twin.value_vars}
    copied = tuple(
        v.name for v in model.value_vars if v.name not in user_names and v.name in twin_value_names
    )
    # The private Deterministics served their purpose: the twin's users never see them.
    for det in [d for d in twin.deterministics if d.name.startswith("__centring")]:
        twin.deterministics.remove(det)
    return CentredTwin(
        model=twin,
        effects=tuple(f"{e.name} <- {e.z.name}" for e in effects),
        _forward=forward_fn,
        _backward=backward_fn,
        _user_inputs=tuple(v.name for v in user_inputs),
        _twin_inputs=tuple(v.name for v in twin_inputs),
        _user_names=user_names,
        _twin_names=twin_names,
        _copied=copied,
    )


_LOC, _LINEAR = "__centring_loc_", "__centring_linear_"


def _inverse(value, loc, linear, effect: _Effect):
    """``z`` as a graph of the centred variable's value and the map's parts."""
    if effect.kind == "scale":
        return (value - loc) / linear
    return pt.linalg.solve(linear, (value - loc).T).T
