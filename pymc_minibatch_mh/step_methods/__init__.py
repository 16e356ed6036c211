"""PyMC step methods (thin adaptors around the pure kernels)."""

from pymc_minibatch_mh.step_methods.austere import Austere
from pymc_minibatch_mh.step_methods.barker import MinibatchBarker
from pymc_minibatch_mh.step_methods.base import MinibatchStep
from pymc_minibatch_mh.step_methods.firefly import FlyMC
from pymc_minibatch_mh.step_methods.tuna import TunaMH

__all__ = ["Austere", "FlyMC", "MinibatchBarker", "MinibatchStep", "TunaMH"]
