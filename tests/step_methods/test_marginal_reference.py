"""The reference point of a centred hierarchy: the scales' Laplace-marginal mode.

On a Normal hierarchy with a known noise scale the group effects and their mean are
Gaussian given the group scale, so the Laplace-marginal posterior of ``log tau`` is the
exact marginal posterior, which a grid gives in closed form. The steps' reference must
sit at its mode; the joint mode search (the negative control) runs off to a zero scale
on the same model.
"""

import numpy as np
import pymc as pm
import pytest
from scipy.stats import multivariate_normal

from pymc_minibatch_mh import MinibatchBarker, TunaMH
from pymc_minibatch_mh.likelihood.hierarchy import group_scale_coordinates
from pymc_minibatch_mh.step_methods.reference import newton_map

GROUPS = 60
ROWS_PER_GROUP = 2
TAU = 0.5
MU_SD = 5.0


def _weak_groups():
    """60 groups of 2 rows, noise sd 1, group sd 0.5: no local joint mode."""
    rng = np.random.default_rng(20261206)
    group = np.repeat(np.arange(GROUPS), ROWS_PER_GROUP)
    effects = 0.3 + TAU * rng.standard_normal(GROUPS)
    y = effects[group] + rng.standard_normal(group.size)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, MU_SD)
        tau = pm.HalfNormal("tau", 1.0)
        a = pm.Normal("a", mu, tau, shape=GROUPS)
        pm.Normal("y", a[group], 1.0, observed=y)
    return model, group, y


def _exact_log_tau_mode(group, y) -> float:
    """Mode of the exact marginal posterior of ``log tau`` on a fine grid: the group means
    are ``Normal(mu, tau^2 + 1/n)``, and ``mu ~ Normal(0, 5)`` integrates in closed form."""
    means = np.bincount(group, weights=y) / np.bincount(group)
    grid = np.linspace(-4.0, 1.0, 5001)
    density = []
    for s in grid:
        tau2 = np.exp(2 * s)
        cov = MU_SD**2 * np.ones((GROUPS, GROUPS)) + np.eye(GROUPS) * (tau2 + 1 / ROWS_PER_GROUP)
        log_prior = -0.5 * tau2 + s  # HalfNormal(1) in log tau, with its Jacobian
        density.append(multivariate_normal(np.zeros(GROUPS), cov).logpdf(means) + log_prior)
    return float(grid[int(np.argmax(density))])


def _log_tau(step, model) -> float:
    names = [v.name for v in step.vars]
    sizes = [int(np.size(model.initial_point()[n])) for n in names]
    offset = int(np.sum(sizes[: names.index("tau_log__")]))
    return float(step.reference.reference[offset])


@pytest.mark.parametrize("step_class", [MinibatchBarker, TunaMH])
def test_the_reference_is_the_exact_marginal_mode_of_the_scale(step_class):
    model, group, y = _weak_groups()
    want = _exact_log_tau_mode(group, y)
    with model:
        step = step_class()
    assert step._marginal_scales is not None
    assert abs(_log_tau(step, model) - want) < 0.05
    assert step._laplace_chol is not None  # a Laplace fit for the proposal and the start


def test_the_joint_mode_search_runs_off_to_a_zero_scale():
    """Negative control: Newton steps on the joint density from the same start leave the
    marginal mode behind and head for ``tau = 0``."""
    model, group, y = _weak_groups()
    want = _exact_log_tau_mode(group, y)
    with model:
        step = MinibatchBarker()
    start = np.zeros(step.tall_data.ndim)
    joint = newton_map(step._taylor_at, step._prior_derivatives, start, max_passes=30)
    names = [v.name for v in step.vars]
    offset = names.index("tau_log__")  # mu and tau_log__ are scalars ahead of a
    assert joint.position[offset] < want - 2.0


def test_scale_coordinates_are_found_where_a_scale_spreads_sampled_effects():
    model, _, _ = _weak_groups()
    point = model.initial_point()
    index = group_scale_coordinates(model, model.value_vars, point)
    names = [v.name for v in model.value_vars]
    assert index.tolist() == [names.index("tau_log__")]
    # Negative controls: a fixed scale, or effects outside the block, make no hierarchy.
    with pm.Model() as fixed:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("a", mu, 0.5, shape=10)
    assert group_scale_coordinates(fixed, fixed.value_vars, fixed.initial_point()) is None
    block = [v for v in model.value_vars if v.name != "a"]
    assert group_scale_coordinates(model, block, point) is None
