"""Pure-numpy Markov kernels for minibatch Metropolis–Hastings.

Nothing in this subpackage imports PyMC or PyTensor. Every kernel is a function
of arrays, an explicit :class:`numpy.random.Generator` and a
:class:`~pymc_minibatch_mh.kernels.target.TallTarget` that supplies the prior and
the per-datum log-likelihood as separate callables.
"""

from pymc_minibatch_mh.kernels.adaptation import CovarianceWindow, ScaleAdaptation, adapt_scale
from pymc_minibatch_mh.kernels.austere import AustereInfo, AustereSettings, austere_kernel
from pymc_minibatch_mh.kernels.austere_design import AustereDesign, design_austere_test
from pymc_minibatch_mh.kernels.barker import BarkerInfo, BarkerSettings, barker_kernel
from pymc_minibatch_mh.kernels.correction import (
    CorrectionTable,
    build_correction_masses,
    correction_sup_error,
    load_default_correction,
)
from pymc_minibatch_mh.kernels.proposals import RandomWalkProposal
from pymc_minibatch_mh.kernels.target import ChainState, TallTarget

__all__ = [
    "AustereDesign",
    "AustereInfo",
    "AustereSettings",
    "austere_kernel",
    "design_austere_test",
    "BarkerInfo",
    "BarkerSettings",
    "ChainState",
    "CovarianceWindow",
    "CorrectionTable",
    "RandomWalkProposal",
    "ScaleAdaptation",
    "TallTarget",
    "adapt_scale",
    "barker_kernel",
    "build_correction_masses",
    "correction_sup_error",
    "load_default_correction",
]
