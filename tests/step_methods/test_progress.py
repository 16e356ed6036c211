"""PyMC's progress bar shows the running mean batch size and acceptance rate."""

import numpy as np
import pymc as pm

from pymc_minibatch_mh import MinibatchBarker
from pymc_minibatch_mh.diagnostics.groups import group


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
