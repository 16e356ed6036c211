"""Build per-datum log-likelihood and log-prior functions from an unmodified PyMC model.

This is the only layer of the package that builds PyTensor graphs.
"""

from pymc_minibatch_mh.likelihood.inspection import likelihood_value_vars
from pymc_minibatch_mh.likelihood.linear_predictor import (
    LinearPredictorLikelihood,
    UnsupportedLikelihood,
    recognise_linear_predictor,
)
from pymc_minibatch_mh.likelihood.tall_data import TallData, build_tall_data

__all__ = [
    "LinearPredictorLikelihood",
    "TallData",
    "UnsupportedLikelihood",
    "build_tall_data",
    "likelihood_value_vars",
    "recognise_linear_predictor",
]
