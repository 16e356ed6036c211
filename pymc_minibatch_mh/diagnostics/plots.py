"""Plots of what a minibatch run read and decided, draw by draw, with matplotlib.

ArviZ's plots show the draws; the minibatch steps also record, as sample stats, the data
rows each draw read (``batch_size``, summed over the draw's MH steps) and whether a
proposal was accepted (``accepted``: at least one of the draw's MH steps accepted).
:func:`plot_data_use` shows both per chain, in the manner of ArviZ's plots (an ``ax``
argument, the axes returned), for ``pm.sample``'s result on PyMC 5 and PyMC 6.
"""

from __future__ import annotations

import numpy as np

from pymc_minibatch_mh.diagnostics.groups import group

#: Sample stats of the minibatch steps that the plot reads.
ROWS_STAT, ACCEPTED_STAT = "batch_size", "accepted"


def data_use(idata) -> tuple[np.ndarray, np.ndarray]:
    """Rows read per draw and the running acceptance rate, per chain.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        The result of :func:`pymc.sample` with a minibatch step (PyMC 5 or PyMC 6).

    Returns
    -------
    rows : ndarray, shape (chain, draw)
        Data rows read at each draw (the ``batch_size`` stat: summed over the draw's MH
        steps, ``steps_per_draw``, so it may exceed N; summed over the minibatch steps of
        a compound step).
    acceptance : ndarray, shape (chain, draw)
        Fraction of draws ``0..t`` that accepted a proposal (the ``accepted`` stat;
        averaged over the steps of a compound step).

    Raises
    ------
    ValueError
        If the result has no ``batch_size`` or ``accepted`` sample stat (a run without a
        minibatch step, e.g. NUTS).

    Examples
    --------
    >>> import numpy as np
    >>> stats = {"batch_size": np.array([[100, 300, 200]]), "accepted": np.array([[1, 0, 1]])}
    >>> rows, acceptance = data_use({"sample_stats": stats})
    >>> rows.tolist(), np.round(acceptance, 3).tolist()
    ([[100.0, 300.0, 200.0]], [[1.0, 0.5, 0.667]])
    """
    stats = _sample_stats(idata)
    missing = [name for name in (ROWS_STAT, ACCEPTED_STAT) if name not in stats]
    if missing:
        raise ValueError(
            f"The result has no {' or '.join(map(repr, missing))} sample stat, so there is "
            "no record of the rows each draw read: plot_data_use shows runs of the minibatch "
            "steps (MinibatchBarker, Austere, TunaMH, FlyMC), and this one was sampled "
            "without them (e.g. by NUTS). Pass the result of pm.sample(step=MinibatchBarker())."
        )
    rows = _per_draw(stats[ROWS_STAT], np.sum)
    accepted = _per_draw(stats[ACCEPTED_STAT], np.mean)
    if rows.shape != accepted.shape:
        raise ValueError(
            f"The {ROWS_STAT!r} and {ACCEPTED_STAT!r} sample stats have different shapes "
            f"({rows.shape} and {accepted.shape}); both should be (chain, draw)."
        )
    counted = np.arange(1, accepted.shape[1] + 1)
    return rows, np.cumsum(accepted, axis=1) / counted


def plot_data_use(idata, ax=None, *, n_data: int | None = None, figsize=None) -> np.ndarray:
    """Plot the rows each draw read and the running acceptance rate, per chain.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        The result of :func:`pymc.sample` with a minibatch step (PyMC 5 or PyMC 6).
    ax : sequence of two matplotlib Axes, optional
        Where to draw the rows read and the acceptance rate. Default: a new figure with
        two panels sharing the draw axis.
    n_data : int, optional
        The number N of data rows, drawn as a dashed line: a draw at it read as many rows
        as one full-data pass (a draw of several MH steps may read more).
    figsize : tuple of float, optional
        Size of the new figure (ignored with ``ax``).

    Returns
    -------
    ndarray of matplotlib Axes, shape (2,)
        The rows panel (one line per chain, draws on the x axis) and the acceptance
        panel (one line per chain, between 0 and 1).

    Raises
    ------
    ValueError
        If the result has no minibatch sample stats (e.g. a NUTS run), or ``ax`` is not
        two axes.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from pymc_minibatch_mh.diagnostics import plot_data_use
    >>> stats = {"batch_size": np.full((2, 50), 120), "accepted": np.ones((2, 50))}
    >>> axes = plot_data_use({"sample_stats": stats}, n_data=10_000)
    >>> [len(panel.get_lines()) for panel in axes]
    [3, 2]
    """
    rows, acceptance = data_use(idata)
    axes = _axes(ax, figsize)
    draws = np.arange(rows.shape[1])
    rows_ax, accept_ax = axes
    for chain in range(rows.shape[0]):
        colour = f"C{chain % 10}"
        rows_ax.plot(draws, rows[chain], color=colour, lw=0.8, alpha=0.8, label=f"chain {chain}")
        accept_ax.plot(draws, acceptance[chain], color=colour, lw=1.2, label=f"chain {chain}")
    if n_data is not None:
        rows_ax.axhline(n_data, color="k", ls="--", lw=1.0, label=f"N = {n_data:,} rows")
    rows_ax.set_ylabel("rows read per draw")
    mean_rows = float(np.mean(rows))
    rows_ax.set_title(f"Data read per draw (mean {mean_rows:,.4g} rows)")
    # Room above the largest value, so that a constant batch size is not drawn on the frame.
    top = max(float(np.max(rows)), n_data or 0.0, 1.0)
    rows_ax.set_ylim(0.0, 1.08 * top)
    rows_ax.legend(loc="best", fontsize="small")
    accept_ax.set_ylabel("running acceptance rate")
    accept_ax.set_xlabel("draw")
    accept_ax.set_ylim(0.0, 1.0)
    accept_ax.set_title("Share of the draws so far whose proposal was accepted")
    for panel in axes:
        panel.grid(True, alpha=0.3)
    return axes


def _sample_stats(idata):
    try:
        return group(idata, "sample_stats")
    except KeyError as err:
        raise ValueError(
            "The result has no sample_stats group; pass the result of pm.sample."
        ) from err


def _per_draw(values, combine) -> np.ndarray:
    """A ``(chain, draw)`` float array from a stat, extra axes (several steps reporting
    it) combined."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim < 2:
        raise ValueError(
            f"A sample stat has shape {values.shape}; expected (chain, draw) from pm.sample."
        )
    return combine(values.reshape(*values.shape[:2], -1), axis=2)


def _axes(ax, figsize) -> np.ndarray:
    if ax is None:
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:
            raise ImportError(
                "plot_data_use draws with matplotlib, which is not installed: "
                "pip install matplotlib."
            ) from err
        _, axes = plt.subplots(2, 1, sharex=True, figsize=figsize or (8.0, 5.0), squeeze=True)
        return np.asarray(axes)
    axes = np.ravel(np.asarray(ax, dtype=object))
    if axes.size != 2:
        raise ValueError(
            f"ax must be two matplotlib Axes (rows read, acceptance rate); got {axes.size}. "
            "Pass e.g. plt.subplots(2, 1)[1], or leave ax=None."
        )
    return axes
