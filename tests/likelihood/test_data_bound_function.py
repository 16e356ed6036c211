"""Pickling a function bound to its data (how passes over chunked data send it to Dask
workers, and PyMC sends a step to its chains' processes)."""

import pickle
import threading

import numpy as np
import pytensor.tensor as pt

from pymc_minibatch_mh.data.chunk_pass import CALL_LOCK
from pymc_minibatch_mh.likelihood.compiling import (
    DataBoundFunction,
    compile_function,
    data_placeholder,
)

WAIT_S = 0.5


def _bound_function():
    x = np.random.default_rng(0).normal(size=(50, 3))
    var = pt.matrix("x", dtype="float64")
    q = pt.vector("q", dtype="float64")
    idx = pt.vector("idx", dtype="int64")
    design = data_placeholder(var, x)
    function = compile_function([q, idx], pt.exp(design[idx] @ q))
    assert isinstance(function, DataBoundFunction)
    return function, x


def _pickle_in_thread(function) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(pickle.dumps(function)), daemon=True)
    thread.start()
    return thread, out


def test_a_pickled_function_computes_the_same_without_its_last_inputs():
    function, x = _bound_function()
    q, idx = np.array([0.1, -0.2, 0.3]), np.arange(7, dtype=np.int64)
    before = function(q, idx)
    copy = pickle.loads(pickle.dumps(function))
    np.testing.assert_allclose(copy(q, idx), before)
    np.testing.assert_allclose(before, np.exp(x[:7] @ q))
    # Nothing of the last call stays in the compiled function's storage.
    assert all(cell.storage[0] is None for cell in copy.function.input_storage)


def test_pickling_waits_for_a_call_in_progress():
    """A Dask worker may send the function to another worker while a task of its own is
    calling it (behind CALL_LOCK): pickling then waits for the call to end, instead of
    recording storage cells halfway through it (which PyTensor fails to unpickle)."""
    function, _ = _bound_function()
    with CALL_LOCK:  # a call in progress
        thread, out = _pickle_in_thread(function)
        thread.join(WAIT_S)
        assert thread.is_alive() and not out
    thread.join(10)
    assert not thread.is_alive() and out
    q, idx = np.zeros(3), np.arange(4, dtype=np.int64)
    np.testing.assert_allclose(pickle.loads(out[0])(q, idx), np.ones(4))


def test_negative_control_pickling_does_not_wait_without_a_call():
    function, _ = _bound_function()
    thread, out = _pickle_in_thread(function)
    thread.join(10)
    assert not thread.is_alive() and out


def test_the_gradient_of_an_op_from_graph_pickles():
    """PyTensor builds an OpFromGraph's gradient around a local function, which the
    standard pickler refuses (negative control); the bound function falls back to
    cloudpickle, and the copy computes the same."""
    from pytensor.compile.builders import OpFromGraph

    x = np.random.default_rng(1).normal(size=(40, 2))
    a = pt.vector("a", dtype="float64")
    softplus = OpFromGraph([a], [pt.log1p(pt.exp(a))])
    var = pt.matrix("x", dtype="float64")
    q = pt.vector("q", dtype="float64")
    idx = pt.vector("idx", dtype="int64")
    total = softplus(data_placeholder(var, x)[idx] @ q).sum()
    function = compile_function([q, idx], pt.grad(total, q))
    assert isinstance(function, DataBoundFunction)
    try:
        pickle.dumps(function.function, protocol=pickle.HIGHEST_PROTOCOL)
        standard = True
    except (AttributeError, pickle.PicklingError, TypeError):
        standard = False
    point, rows = np.array([0.3, -0.2]), np.arange(0, 40, 3)
    copy = pickle.loads(pickle.dumps(function))
    np.testing.assert_allclose(copy(point, rows), function(point, rows), rtol=1e-12)
    assert not standard  # the fallback was needed
