"""The examples in the docstrings of the diagnostics modules run and print what they show."""

import doctest
import importlib

import matplotlib
import pytest

MODULES = [
    "pymc_minibatch_mh.diagnostics.agreement",
    "pymc_minibatch_mh.diagnostics.convergence",
    "pymc_minibatch_mh.diagnostics.mixing",
    "pymc_minibatch_mh.diagnostics.plots",
    "pymc_minibatch_mh.diagnostics.subsample",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    matplotlib.use("Agg")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
