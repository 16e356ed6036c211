"""The examples in the public docstrings run and give the printed results."""

import doctest
import importlib

import pytest

MODULES = [
    "pymc_minibatch_mh.bounds.lipschitz",
    "pymc_minibatch_mh.diagnostics.compare",
    "pymc_minibatch_mh.diagnostics.groups",
    "pymc_minibatch_mh.kernels.austere_design",
    "pymc_minibatch_mh.step_methods.barker",
    "pymc_minibatch_mh.step_methods.austere",
    "pymc_minibatch_mh.step_methods.tuna",
    "pymc_minibatch_mh.step_methods.firefly",
    "pymc_minibatch_mh.data.chunked_data",
    "pymc_minibatch_mh.data.tall_array",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
