"""Minibatch Metropolis–Hastings step methods for PyMC.

The public names are imported lazily so that ``pymc_minibatch_mh.kernels``
(pure numpy) can be used without importing PyMC.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "Austere": "pymc_minibatch_mh.step_methods",
    "MinibatchBarker": "pymc_minibatch_mh.step_methods",
    "FlyMC": "pymc_minibatch_mh.step_methods",
    "TunaMH": "pymc_minibatch_mh.step_methods",
    "LipschitzBound": "pymc_minibatch_mh.bounds.lipschitz",
    "chi_from_kappa": "pymc_minibatch_mh.bounds.lipschitz",
    "design_austere_test": "pymc_minibatch_mh.kernels.austere_design",
    "compare": "pymc_minibatch_mh.diagnostics",
    "check_mixing": "pymc_minibatch_mh.diagnostics",
    "plot_data_use": "pymc_minibatch_mh.diagnostics",
    "subsample_model": "pymc_minibatch_mh.diagnostics",
    "chunked_data": "pymc_minibatch_mh.data.chunked_data",
    "tall_array": "pymc_minibatch_mh.data.tall_array",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'pymc_minibatch_mh' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_EXPORTS])
