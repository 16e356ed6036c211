"""Compare minibatch steps with NUTS on the same model."""

from pymc_minibatch_mh.diagnostics.compare import compare, posterior_errors
from pymc_minibatch_mh.diagnostics.groups import posterior, sample_stats
from pymc_minibatch_mh.diagnostics.mixing import MixingWarning, check_mixing

__all__ = [
    "MixingWarning",
    "check_mixing",
    "compare",
    "posterior",
    "posterior_errors",
    "sample_stats",
]
