import os

import numpy as np
import pytest

# Keep BLAS single-threaded: the CI machine has 2 cores and tests may fork.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The compiled sampling loops are used only once numba's cache holds them, which a
# background compilation may change during a test (the chains then agree up to rounding,
# not bit for bit). Tests of those loops switch them on themselves (`compiled_loops_on`).
os.environ.setdefault("PYMC_MINIBATCH_MH_COMPILED_LOOPS", "0")


@pytest.fixture
def compiled_loops_on(monkeypatch):
    """The compiled sampling loops used (compiled in this process where numba's disk cache
    does not hold them yet)."""
    from pymc_minibatch_mh.kernels import compiled_cache

    monkeypatch.setenv(compiled_cache.SWITCH, "1")
    monkeypatch.setattr(compiled_cache, "cached", lambda types: True)


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


@pytest.fixture
def no_map_search(monkeypatch):
    """Fail the test if a step starts the MAP search (refusals must come before it)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the MAP search started before the refusal")

    monkeypatch.setattr("pymc_minibatch_mh.step_methods.base.find_map", refuse)


@pytest.fixture
def cluster_client():
    """A ``dask.distributed`` client on a LocalCluster of 2 single-threaded worker
    processes (skipped without the ``[dask]`` extra)."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture
def first_run():
    """Constructions as on a first run: the package's function cache off (nothing loaded,
    so Hessian sums are differences of the gradient sums where the data are small)."""
    from pymc_minibatch_mh.likelihood import function_cache

    function_cache.use_function_cache(False)
    yield
    function_cache.use_function_cache(True)


#: Test functions measured as costly with empty compile caches (scripts/cold_test_costs.py).
_COLD_COSTLY = os.path.join(os.path.dirname(__file__), "cold_costly.txt")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` the tests listed in ``cold_costly.txt``: on a machine whose compile
    caches are empty (CI) each takes longer than a few seconds, so they run with
    ``-m slow`` instead of in the default run (``COLD_COSTLY_LIST=off`` runs them there)."""
    if os.environ.get("COLD_COSTLY_LIST") == "off" or not os.path.exists(_COLD_COSTLY):
        return
    with open(_COLD_COSTLY) as listing:
        costly = {line.split("#", 1)[0].strip() for line in listing} - {""}
    for item in items:
        if item.nodeid.split("[", 1)[0] in costly:
            item.add_marker(pytest.mark.slow)
