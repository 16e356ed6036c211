"""Compare minibatch steps with NUTS on the same model."""

from pymc_minibatch_mh.diagnostics.compare import compare, posterior_errors

__all__ = ["compare", "posterior_errors"]
