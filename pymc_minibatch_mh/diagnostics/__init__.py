"""Check runs of the minibatch steps: against NUTS, for mixing, and by the data they read."""

from pymc_minibatch_mh.diagnostics.agreement import agreement_summary
from pymc_minibatch_mh.diagnostics.compare import compare, posterior_errors
from pymc_minibatch_mh.diagnostics.groups import posterior, sample_stats
from pymc_minibatch_mh.diagnostics.mixing import MixingWarning, check_mixing
from pymc_minibatch_mh.diagnostics.plots import data_use, plot_data_use
from pymc_minibatch_mh.diagnostics.subsample import Subsample, subsample_model, subsample_rows

__all__ = [
    "MixingWarning",
    "Subsample",
    "agreement_summary",
    "check_mixing",
    "compare",
    "data_use",
    "plot_data_use",
    "posterior",
    "posterior_errors",
    "sample_stats",
    "subsample_model",
    "subsample_rows",
]
