"""Likelihood bounds for the exact minibatch methods (pure numpy, no PyMC import).

Lower bounds whose product over the data collapses to sufficient statistics
(FlyMC) and Lipschitz-type constants for energy differences (TunaMH), built
from the numeric description of a linear-predictor likelihood.
"""
