"""Progress display: PyMC's bar shows running means; one-off passes show a status."""

import numpy as np
import pymc as pm
from step_sampling import N_DATA

from pymc_minibatch_mh import FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.diagnostics.groups import group
from pymc_minibatch_mh.progress import progress_status


def test_progress_columns_report_running_means():
    with pm.Model():
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.0, observed=np.random.default_rng(0).normal(size=500))
        step = MinibatchBarker()
    columns, stats = step._progressbar_config(3)
    assert len(columns) == 2 and set(stats) == {"mb_batch", "mb_accept"}
    assert all(len(v) == 3 for v in stats.values())
    (update,) = step._make_progressbar_update_functions()
    update({"batch_size": 100, "accepted": True, "scaling": 1.0})
    shown = update({"batch_size": 300, "accepted": False, "scaling": 1.0})
    assert shown == {"mb_batch": 200.0, "mb_accept": 0.5}


def test_progress_bar_runs_inside_pm_sample():
    with pm.Model():
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.0, observed=np.random.default_rng(0).normal(size=500))
        idata = pm.sample(
            step=MinibatchBarker(),
            draws=20,
            tune=20,
            chains=1,
            progressbar=True,
            compute_convergence_checks=False,
        )
    posterior = group(idata, "posterior")
    assert np.asarray(posterior["mu"]).shape == (1, 20)


def test_steps_build_with_progress_displays_on(logistic_model):
    """FlyMC (MAP bar, recogniser and bound statuses) and TunaMH (recogniser status)."""
    with logistic_model:
        step = FlyMC(progressbar=True)
    assert step.bound.n_data == N_DATA
    with logistic_model:
        assert TunaMH(progressbar=True).bound.n_data == N_DATA


def test_progress_status_runs_the_block_once_either_way():
    ran = []
    for enabled in (False, True):
        with progress_status("working", enabled=enabled):
            ran.append(enabled)
    assert ran == [False, True]
