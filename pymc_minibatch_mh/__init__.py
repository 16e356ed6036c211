"""Minibatch Metropolis–Hastings step methods for PyMC."""

from pymc_minibatch_mh.diagnostics import compare
from pymc_minibatch_mh.step_methods import MinibatchBarker

__all__ = ["MinibatchBarker", "compare"]
__version__ = "0.1.0"
