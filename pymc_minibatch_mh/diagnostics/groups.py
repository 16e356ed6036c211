"""Read groups of a sampling result on both stacks (ArviZ InferenceData and xarray DataTree)."""

from __future__ import annotations


def group(idata, name: str):
    """The group ``name`` (e.g. ``"posterior"``) of an InferenceData (PyMC 5) or DataTree
    (PyMC 6)."""
    return getattr(idata, name) if hasattr(idata, name) else idata[name]


def posterior(idata):
    """The ``posterior`` group of ``pm.sample``'s result, on PyMC 5 and PyMC 6.

    Examples
    --------
    >>> from pymc_minibatch_mh.diagnostics import posterior
    >>> posterior({"posterior": "draws"})
    'draws'
    """
    return group(idata, "posterior")


def sample_stats(idata):
    """The ``sample_stats`` group of ``pm.sample``'s result, on PyMC 5 and PyMC 6.

    Examples
    --------
    >>> from pymc_minibatch_mh.diagnostics import sample_stats
    >>> sample_stats({"sample_stats": "stats"})
    'stats'
    """
    return group(idata, "sample_stats")
