"""R-hat and bulk ESS of every scalar coordinate, computed by ArviZ.

The public diagnostics (:func:`~pymc_minibatch_mh.diagnostics.check_mixing` and
:func:`~pymc_minibatch_mh.diagnostics.compare`) read their convergence statistics from
here, so that both report the numbers ArviZ reports for the same draws (``az.rhat`` and
``az.ess(method="bulk")``, Vehtari et al. 2021) on ArviZ 0.x and 1.x. ArviZ is imported
when a statistic is first computed, not when this module is: the steps import the
diagnostics package inside PyMC's worker processes, where importing ArviZ would cost
every chain about a second (the steps' own per-chain check uses the numpy version in
:mod:`~pymc_minibatch_mh.diagnostics.chain_statistics`).

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B., Bürkner, P.-C.
   "Rank-normalization, folding, and localization: an improved R-hat for assessing
   convergence of MCMC", Bayesian Analysis 16, 2021.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def coordinate_draws(posterior, var_names: Iterable[str]) -> dict[str, np.ndarray]:
    """The ``(chain, draw)`` draws of every scalar coordinate of ``var_names``.

    Parameters
    ----------
    posterior : mapping of str to array-like
        The ``posterior`` group of a result (or any mapping of ``(chain, draw, ...)``
        arrays).
    var_names : iterable of str
        Variables to take, in order.

    Returns
    -------
    dict of str to ndarray
        Keyed ``name`` for a scalar variable and ``name[i]`` / ``name[i,j]`` for the
        entries of an array variable (0-based, row-major order).

    Examples
    --------
    >>> import numpy as np
    >>> draws = coordinate_draws({"a": np.zeros((2, 5)), "b": np.zeros((2, 5, 2))}, ["a", "b"])
    >>> {key: value.shape for key, value in draws.items()}
    {'a': (2, 5), 'b[0]': (2, 5), 'b[1]': (2, 5)}
    """
    out = {}
    for name in var_names:
        values = np.asarray(posterior[name])
        if values.ndim < 2:
            raise ValueError(
                f"Variable {name!r} has shape {values.shape}; posterior draws are expected "
                "as (chain, draw, ...) arrays. Pass the posterior group of pm.sample's result."
            )
        if values.ndim == 2:
            out[name] = values
            continue
        flat = values.reshape(values.shape[0], values.shape[1], -1)
        for j in range(flat.shape[2]):
            index = np.unravel_index(j, values.shape[2:])
            out[f"{name}[{','.join(map(str, index))}]"] = flat[:, :, j]
    return out


def _as_coordinates(draws) -> np.ndarray:
    """``draws`` as a float ``(chain, draw, K)`` array."""
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim < 2:
        raise ValueError(
            f"Draws must be a (chain, draw, ...) array; got shape {draws.shape}. Add a chain "
            "axis for one chain: draws[None]."
        )
    return draws.reshape(draws.shape[0], draws.shape[1], -1)


def _arviz_statistic(draws: np.ndarray, statistic: str) -> np.ndarray:
    """ArviZ's ``statistic`` (``"ess"`` or ``"rhat"``) of each coordinate of a
    ``(chain, draw, K)`` array, through a dataset (the call both ArviZ 0.x and 1.x take
    for several coordinates at once)."""
    import arviz as az  # here, not at import: see the module docstring

    dataset = az.convert_to_dataset({"x": draws})
    if statistic == "ess":
        result = az.ess(dataset, method="bulk")
    else:
        result = az.rhat(dataset)
    return np.asarray(result["x"].values, dtype=np.float64).reshape(draws.shape[2])


def ess_bulk(draws) -> np.ndarray:
    """ArviZ's bulk effective sample size of each coordinate.

    Parameters
    ----------
    draws : array-like, shape (chain, draw, ...)
        The draws; trailing axes are flattened into ``K`` coordinates.

    Returns
    -------
    ndarray, shape (K,)
        Bulk ESS pooled over chains. A coordinate whose draws are all equal gets 0 (it
        never moved, whatever ArviZ's formula gives for zero variance).

    Examples
    --------
    >>> import numpy as np
    >>> draws = np.random.default_rng(0).normal(size=(2, 500, 2))
    >>> draws[:, :, 1] = 3.0
    >>> ess = ess_bulk(draws)
    >>> bool(ess[0] > 500), float(ess[1])
    (True, 0.0)
    """
    draws = _as_coordinates(draws)
    moved = _moved(draws)
    ess = np.zeros(draws.shape[2])
    if moved.any():
        ess[moved] = _arviz_statistic(draws[:, :, moved], "ess")
    return np.where(np.isfinite(ess), ess, 0.0)


def rhat(draws) -> np.ndarray:
    """ArviZ's rank-normalised split R-hat of each coordinate.

    Parameters
    ----------
    draws : array-like, shape (chain, draw, ...)
        The draws of at least two chains; trailing axes are flattened into ``K``
        coordinates.

    Returns
    -------
    ndarray, shape (K,)
        R-hat; ``inf`` for a coordinate whose draws are all equal (R-hat is undefined
        there, and such a chain is stuck).

    Raises
    ------
    ValueError
        For fewer than two chains: R-hat compares chains.
    """
    draws = _as_coordinates(draws)
    if draws.shape[0] < 2:
        raise ValueError(
            f"R-hat compares chains, and the draws have {draws.shape[0]}. Sample at least two "
            "chains (pm.sample(chains=2)), or check one chain with its ESS alone."
        )
    moved = _moved(draws)
    values = np.full(draws.shape[2], np.inf)
    if moved.any():
        values[moved] = _arviz_statistic(draws[:, :, moved], "rhat")
    return np.where(np.isfinite(values), values, np.inf)


def _moved(draws: np.ndarray) -> np.ndarray:
    """Which coordinates of ``(chain, draw, K)`` draws take more than one value."""
    flat = draws.reshape(-1, draws.shape[2])
    return np.ptp(flat, axis=0) > 0 if flat.shape[0] else np.zeros(draws.shape[2], bool)
