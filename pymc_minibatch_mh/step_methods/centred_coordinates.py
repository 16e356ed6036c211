"""Steps on a model with non-centred effects sample its centred twin.

:func:`~pymc_minibatch_mh.likelihood.centring.centred_twin` finds the model's non-centred
effects (``a = mu + sigma * z``, ``ab = mu + z @ chol.T``) and builds the twin in which
they are free variables with their implied priors. A step built with no ``vars`` on such
a model is constructed on the twin (recognition, bounds, exact sums, reference point,
proposals: all in the coordinates the likelihood reads) and maps points at its boundary
with PyMC: the user's point goes in as the twin's, the twin's new point comes out as the
user's (``z = (a - mu) / sigma``). The map is a bijection, so the chain on the user's
variables leaves their posterior invariant exactly when the chain on the twin leaves the
twin's invariant.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection

from pymc_minibatch_mh.likelihood.centring import CentredTwin, centred_twin
from pymc_minibatch_mh.likelihood.shared_functions import shared_functions
from pymc_minibatch_mh.step_methods.reference import NoLaplaceFit, find_map

#: Keyword arguments of the steps' constructors that hold a point of the model.
_POINT_ARGUMENTS = ("initial_point", "reference_point", "map_point")

#: Largest Laplace variance, in the twin's unconstrained coordinates, of a fit that says
#: something: a log-scale sd of 1000 (a factor e^1000) is no fit. Near a zero scale the
#: twin's Hessian in the log scale vanishes to rounding, and whether it then comes out
#: barely definite or barely indefinite depends on the platform's arithmetic.
MAX_LAPLACE_VARIANCE = 1e6


def twin_of(model: pm.Model) -> CentredTwin | None:
    """The centred twin of ``model`` (shared by every step built on it), or None."""
    names = tuple(v.name for v in model.value_vars)
    memo = shared_functions(model, names, "centred_twin")
    return memo.get("twin", lambda: centred_twin(model, names))


def in_centred_coordinates(init):
    """Wrap a step's ``__init__`` so that its outermost call constructs the step on the
    model's centred twin when it has one (and the step's block is the default, the whole
    model); the step's ``vars`` stay the user's, as PyMC assigns variables by them.

    A centred hierarchy has no joint mode worth the name (its density grows without bound
    as the groups' spread goes to 0), and the twin's mode search can run off to it, while
    the user's non-centred form has a mode. When the twin's reference point has no Laplace
    fit, the step is built on the twin again with the image of the user's mode as its
    reference point; when that has none either (the data say little about the spread),
    on the model as written.
    """

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        if getattr(self, "_centring_resolved", False):
            return init(self, *args, **kwargs)
        self._centring_resolved = True
        self._centring = None
        vars = args[0] if args else kwargs.get("vars")
        model = pm.modelcontext(kwargs.get("model"))
        twin = twin_of(model) if vars is None else None
        if twin is None:
            return init(self, *args, **kwargs)
        twin_kwargs = dict(kwargs)
        twin_kwargs["model"] = twin.model
        for name in _POINT_ARGUMENTS:
            point = kwargs.get(name)
            if isinstance(point, dict):
                twin_kwargs[name] = twin.twin_point(point)
        if kwargs.get("initial_point") is None:
            twin_kwargs["initial_point"] = twin.twin_point(model.initial_point())
        caught = _built(init, self, args, twin_kwargs)
        if caught is None and kwargs.get("reference_point") is None:
            # The user's mode exists where the twin's does not: expand around its image.
            start = kwargs.get("initial_point") or model.initial_point()
            user_mode = find_map(model, start, progressbar=kwargs.get("progressbar", True))
            twin_kwargs["reference_point"] = twin.twin_point(user_mode)
            caught = _built(init, self, args, twin_kwargs)
        if caught is None:  # no Laplace fit in the twin: the model as written
            return init(self, *args, **kwargs)
        for warning in caught:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
        user_vars = list(model.value_vars)
        self._centring = twin.without_model()
        self._twin_var_names = tuple(v.name for v in self.vars)
        self.vars = user_vars
        self.var_names = tuple(v.name for v in user_vars)
        self.centred_effects = twin.effects

    return wrapper


def _built(init, step, args, kwargs) -> list | None:
    """Construct ``step`` on the twin: the warnings it raised, or None when its reference
    point has no Laplace fit (the twin's density is not concave there, or is so flat in
    some coordinate that its Laplace variance exceeds ``MAX_LAPLACE_VARIANCE``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            init(step, *args, **kwargs)
        except NoLaplaceFit:
            return None
    chol = step._laplace_chol
    if step.reference is not None and chol is None:
        return None
    if chol is not None and not (np.sum(chol**2, axis=1) <= MAX_LAPLACE_VARIANCE).all():
        return None
    return caught


class CentredCoordinates:
    """Mixin of the step base class: ``step`` maps the user's point to the twin's and back
    when the step was built on the centred twin (see :func:`in_centred_coordinates`)."""

    _centring: CentredTwin | None = None
    #: ``"<twin variable> <- <user variable>"`` of each effect the step samples centred.
    centred_effects: tuple = ()

    def step(self, point: dict):
        twin = self._centring
        if twin is None:
            return super().step(point)
        last = getattr(self, "_last_exchange", None)
        if last is not None and _same_point(point, last[0]):
            # The point this step returned: continue from its own twin position, not from
            # the round trip z = (a - mu) / sigma, a = mu + sigma * z, whose rounding would
            # make the position look new (FlyMC then redraws every brightness variable).
            q = last[1]
        else:
            twin_point = twin.twin_point(point)
            names = self._twin_var_names
            q = DictToArrayBijection.map({name: twin_point[name] for name in names})
        new, stats = self.astep(q)
        user = twin.user_point(DictToArrayBijection.rmap(new))
        # In the point's own key order: PyMC's sequential sampler passes a point's values
        # to its trace function by position.
        out = {name: user[name] for name in point}
        self._last_exchange = (out, new)
        return out, stats


def _same_point(point: dict, other: dict) -> bool:
    """Whether two points hold equal arrays under the same names."""
    return point.keys() == other.keys() and all(
        np.array_equal(point[name], other[name]) for name in point
    )
