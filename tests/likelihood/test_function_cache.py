"""The on-disk cache of compiled functions: keys that tell graphs apart, and stored
functions that compute what freshly compiled ones do (a step built from stored functions
is checked in ``tests/step_methods/test_shared_functions.py``)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from pymc_minibatch_mh.likelihood import compiling, function_cache
from pymc_minibatch_mh.likelihood.compiling import compile_function, jacobian
from pymc_minibatch_mh.likelihood.function_cache import graph_key


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(function_cache.ENVIRONMENT_VARIABLE, str(tmp_path))
    function_cache.use_function_cache(True)
    yield tmp_path
    function_cache.use_function_cache(True)


def _graph(constant=2.0, op=pt.exp, dtype="float64"):
    q = pt.vector("q", dtype=dtype)
    idx = pt.vector("idx", dtype="int64")
    x = pt.matrix("x", dtype=dtype)
    out = op(x[idx] @ q) * constant + pt.sum(q**2)
    return [q, idx, x], out


def test_the_same_graph_built_twice_has_the_same_key():
    assert graph_key(*_graph(), {}) == graph_key(*_graph(), {})
    assert graph_key(*_graph(), {}) is not None


@pytest.mark.parametrize(
    "other",
    [
        lambda: (_graph(constant=3.0), {}),
        lambda: (_graph(op=pt.log1p), {}),
        lambda: (_graph(dtype="float32"), {}),
        lambda: (_graph(), {"on_unused_input": "ignore"}),
    ],
    ids=["constant", "op", "dtype", "kwargs"],
)
def test_any_difference_changes_the_key(other):
    (inputs, outputs), kwargs = other()
    assert graph_key(inputs, outputs, kwargs) is not None
    assert graph_key(inputs, outputs, kwargs) != graph_key(*_graph(), {})


def test_input_order_of_the_same_variables_changes_the_key():
    inputs, out = _graph()
    assert graph_key(inputs, out, {}) != graph_key(inputs[::-1], out, {})


def test_one_output_and_a_list_of_it_have_different_keys():
    """``function(i, out)`` returns an array, ``function(i, [out])`` a list of one."""
    inputs, out = _graph()
    assert graph_key(inputs, out, {}) != graph_key(inputs, [out], {})


def test_graphs_the_key_cannot_describe_are_not_cached():
    q = pt.vector("q")
    shared = pytensor.shared(np.ones(3))
    assert graph_key([q], pt.sum(q * shared), {}) is None  # its value would be frozen
    big = pt.constant(np.ones(function_cache.MAX_CONSTANT_SIZE + 1))
    assert graph_key([q], pt.sum(q) + pt.sum(big), {}) is None
    free = pt.vector("free")  # not a function input
    assert graph_key([q], pt.sum(q * free), {}) is None
    assert graph_key([q], pt.sum(q), {"updates": {}}) is None


def test_a_jacobian_graph_is_keyed_with_its_inner_graph():
    def build(power):
        q = pt.vector("q")
        return [q], jacobian(pt.exp(q) ** power, q)

    assert graph_key(*build(2), {}) is not None
    assert graph_key(*build(2), {}) == graph_key(*build(2), {})
    assert graph_key(*build(2), {}) != graph_key(*build(3), {})


def test_a_stored_function_computes_what_a_compiled_one_does(cache_dir, rng):
    x = rng.normal(size=(50, 3))
    q, idx = rng.normal(size=3), np.array([0, 7, 7, 49])
    before = compiling.functions_loaded()
    first = compile_function(*_graph())
    assert len(list(cache_dir.glob("*.pkl"))) == 1
    second = compile_function(*_graph())
    assert compiling.functions_loaded() == before + 1
    np.testing.assert_array_equal(first(q, idx, x), second(q, idx, x))
    # The stored file holds no data array of the graph's variables (tags are dropped).
    assert (cache_dir / next(cache_dir.glob("*.pkl")).name).stat().st_size < 200_000


def test_a_damaged_entry_warns_and_compiles_again(cache_dir, rng):
    compile_function(*_graph())
    (entry,) = cache_dir.glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    before = compiling.functions_loaded()
    with pytest.warns(RuntimeWarning, match="compiled again"):
        function = compile_function(*_graph())
    assert compiling.functions_loaded() == before
    x = rng.normal(size=(4, 3))
    q, idx = np.ones(3), np.arange(4)
    expected = np.exp(x @ q) * 2.0 + 3.0
    np.testing.assert_allclose(function(q, idx, x), expected)
    # The entry was rewritten and loads again.
    compile_function(*_graph())
    assert compiling.functions_loaded() == before + 1


def test_switched_off_nothing_is_stored(cache_dir):
    function_cache.use_function_cache(False)
    compile_function(*_graph())
    assert not list(cache_dir.glob("*.pkl"))


def test_the_models_check_bounds_flag_is_in_the_key():
    """pymc's compile removes parameter checks in a model with ``check_bounds=False``."""
    inputs, out = _graph()
    with pm.Model(check_bounds=False):
        unchecked = graph_key(inputs, out, {})
    with pm.Model(check_bounds=True):
        checked = graph_key(inputs, out, {})
    assert unchecked != checked
    assert checked == graph_key(inputs, out, {})  # outside a model: checks kept


def test_the_linkers_settings_are_in_the_key():
    from pytensor.compile.mode import Mode
    from pytensor.link.vm import VMLinker

    inputs, out = _graph()

    def key(lazy):
        return graph_key(inputs, out, {"mode": Mode(linker=VMLinker(lazy=lazy), optimizer=None)})

    assert key(True) == key(True)
    assert key(True) != key(False)


class _Scaled(Op):
    """An Op with a setting outside its ``__props__`` (as some PyTensor Ops have)."""

    __props__ = ()

    def __init__(self, factor):
        self.factor = factor

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0] * self.factor


def test_an_ops_settings_outside_its_props_are_in_the_key():
    x = pt.vector("x")
    assert graph_key([x], _Scaled(2.0)(x), {}) != graph_key([x], _Scaled(3.0)(x), {})
    assert graph_key([x], _Scaled(2.0)(x), {}) == graph_key([x], _Scaled(2.0)(x), {})


def test_repeated_inputs_are_not_cached():
    x, y = pt.vector("x"), pt.vector("y")
    assert graph_key([x, x, y], x - y, {}) is None


def test_an_inner_graph_op_compiles_and_computes(cache_dir):
    """OpFromGraph (no ``__props__`` on PyTensor 2) is keyed by its inner graph."""
    from pytensor.compile.builders import OpFromGraph

    a = pt.vector("a")
    double_plus_one = OpFromGraph([a], [2.0 * a + 1.0])
    x = pt.vector("x")
    first = compile_function([x], double_plus_one(x))
    second = compile_function([x], double_plus_one(x))
    np.testing.assert_array_equal(first(np.ones(2)), [3.0, 3.0])
    np.testing.assert_array_equal(second(np.ones(2)), [3.0, 3.0])
