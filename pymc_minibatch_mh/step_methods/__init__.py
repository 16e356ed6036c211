"""PyMC step methods (thin adaptors around the pure kernels)."""

from pymc_minibatch_mh.step_methods.austere import Austere
from pymc_minibatch_mh.step_methods.barker import MinibatchBarker
from pymc_minibatch_mh.step_methods.base import MinibatchStep

__all__ = ["Austere", "MinibatchBarker", "MinibatchStep"]
