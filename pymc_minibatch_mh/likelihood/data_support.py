"""Data a likelihood cannot have produced, found and named in the user's terms.

Two checks, both before any sampling:

* :func:`check_observed_support`: the observed values of common distributions against
  their support (a Bernoulli observation of 2, a negative count, a Gamma observation of
  0), in the same streaming pass as the finite-data check. Such a row has log-likelihood
  ``-inf`` for every parameter value, so no step can sample the model.
* :func:`explain_non_finite_rows`: where the log-likelihood is not finite at a point
  (e.g. a covariate of ``1e300`` overflows the linear predictor), one pass finds the
  rows and the message names the first of them with its values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import pymc as pm
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.data.row_scan import flagged_rows, on_row_chunks
from pymc_minibatch_mh.data.row_source import RowSource
from pymc_minibatch_mh.likelihood.glm_families import _dist_params
from pymc_minibatch_mh.likelihood.graph_tools import data_value

#: Magnitude above which a data value is reported as extreme when a row's likelihood is
#: not finite (squares and exponentials of such values overflow float64).
EXTREME_VALUE = 1e100


def _not_binary(y: np.ndarray) -> np.ndarray:
    return ~((y == 0) | (y == 1))


def _not_count(y: np.ndarray) -> np.ndarray:
    return ~((y >= 0) & (y == np.floor(y)))


def _not_positive_count(y: np.ndarray) -> np.ndarray:
    return ~((y >= 1) & (y == np.floor(y)))


def _not_positive(y: np.ndarray) -> np.ndarray:
    return ~(y > 0)


def _not_non_negative(y: np.ndarray) -> np.ndarray:
    return ~(y >= 0)


def _not_unit_interval(y: np.ndarray) -> np.ndarray:
    return ~((y > 0) & (y < 1))


#: ``op.name`` of a PyMC distribution -> (its name, its support in words, the test of a
#: value outside it). Categorical (and OrderedLogistic / OrderedProbit, which are
#: Categorical) is checked for non-negative integers; the class count is not read.
SUPPORTS: dict[str, tuple[str, str, Callable[[np.ndarray], np.ndarray]]] = {
    "bernoulli": ("Bernoulli", "0 or 1", _not_binary),
    "binomial": ("Binomial", "non-negative integers (counts of successes)", _not_count),
    "poisson": ("Poisson", "non-negative integers", _not_count),
    "negative_binomial": ("NegativeBinomial", "non-negative integers", _not_count),
    "geometric": ("Geometric", "positive integers", _not_positive_count),
    "categorical": ("Categorical", "class indices 0, 1, 2, ...", _not_count),
    "gamma": ("Gamma", "positive numbers", _not_positive),
    "exponential": ("Exponential", "positive numbers", _not_positive),
    "lognormal": ("LogNormal", "positive numbers", _not_positive),
    "weibull": ("Weibull", "positive numbers", _not_positive),
    "invgamma": ("InverseGamma", "positive numbers", _not_positive),
    "halfnormal": ("HalfNormal", "non-negative numbers", _not_non_negative),
    "beta": ("Beta", "numbers strictly between 0 and 1", _not_unit_interval),
}


def _outside_in(rule: str, rows: np.ndarray, first_row: int) -> tuple[int, int | None, object]:
    """``(count, first row, its value)`` of the entries of one chunk outside the support."""
    rows = np.asarray(rows)
    count, first = flagged_rows(SUPPORTS[rule][2](rows), first_row)
    return (count, first, rows[first - first_row]) if count else (0, None, None)


def _outside_support(value, rule: str) -> tuple[int, int | None, object]:
    """Entries of an observed array outside ``SUPPORTS[rule]``, in one pass over chunks."""
    found = on_row_chunks(value, partial(_outside_in, rule))
    hits = [(row, val) for _, row, val in found if row is not None]
    count = sum(n for n, _, _ in found)
    return (count, *min(hits, key=lambda hit: hit[0])) if hits else (0, None, None)


def check_observed_support(model: pm.Model) -> bool:
    """Refuse observed values outside their distribution's support, row and value named.

    Returns whether an observed array was read (the caller counts the pass).

    Raises
    ------
    ValueError
        For the first observed variable with such values: the distribution, its support,
        the first row with its value and how many rows are affected.
    """
    read = False
    for rv in model.observed_RVs:
        rule = getattr(rv.owner.op, "name", None)
        if rule not in SUPPORTS:
            continue
        value = data_value(model.rvs_to_values[rv])
        if value is None or value.ndim == 0:
            continue
        read = True
        count, row, found = _outside_support(value, rule)
        if not count and rule == "binomial":
            _check_successes_within_trials(rv, value)
        if count:
            name, support, _ = SUPPORTS[rule]
            rows = "that row" if count == 1 else f"{count} rows in all"
            raise ValueError(
                f"Observed variable {rv.name!r} has a {name} likelihood, whose values are "
                f"{support}, but row {row} of its data holds {_show(found)} ({rows}). Such a "
                "row has log-likelihood -inf for every parameter value, so no sampler can use the "
                "model as it is. Correct or drop those rows with numpy before building the "
                "model (in every per-datum array, so that the rows stay aligned), or use a "
                "distribution whose support contains them."
            )
    return read


def _check_successes_within_trials(rv: Variable, value) -> None:
    """A Binomial's successes must not exceed its trials (when the trials are data)."""
    trials = data_value(_dist_params(rv.owner)[0])
    if trials is None or isinstance(value, RowSource) or isinstance(trials, RowSource):
        return
    trials = np.asarray(trials)
    y = np.asarray(value)
    if trials.ndim > 1 or (trials.ndim == 1 and trials.shape[0] != y.shape[0]):
        return
    over = np.flatnonzero(y > trials)
    if over.size:
        row = int(over[0])
        n_row = trials if trials.ndim == 0 else trials[row]
        rows = "that row" if over.size == 1 else f"{over.size} rows in all"
        raise ValueError(
            f"Observed variable {rv.name!r} has a Binomial likelihood, whose successes cannot "
            f"exceed the trials, but row {row} of its data holds {_show(y[row])} successes "
            f"of {_show(n_row)} trials ({rows}). Correct or drop those rows with numpy "
            "before building the model (in every per-datum array, so that the rows stay "
            "aligned)."
        )


def explain_non_finite_rows(
    loglik_full: Callable[[np.ndarray], np.ndarray],
    q: np.ndarray,
    data_inputs: Sequence[tuple[Variable, np.ndarray, str]],
    where: str,
) -> str | None:
    """Why the log-likelihood is not finite at ``q``, row by row, or None if every row's is.

    One pass (``loglik_full(q)``). The message names how many rows are affected, the first
    of them, the observed values and the per-datum data in that row (extreme or
    non-finite entries first), and what to do.

    Parameters
    ----------
    loglik_full : callable
        ``loglik_full(q) -> (N,)`` per-datum log-likelihood.
    q : ndarray
        The raveled point.
    data_inputs : sequence of (variable, value, description)
        The per-datum data inputs of the likelihood, described as in other messages.
    where : str
        What ``q`` is, for the message (e.g. "the model's initial point").
    """
    values = np.asarray(loglik_full(q))
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        row, count = int(bad[0]), int(bad.size)
        what = f"the log-likelihood is not finite at {where} (row {row}: {values[row]!r})"
    else:  # finite values, but derivatives that overflow: look for extreme data
        row, count = _first_extreme_row(data_inputs)
        if row is None:
            return None
        what = (
            f"the log-likelihood's derivatives are not finite at {where}, and the data "
            f"hold values beyond {EXTREME_VALUE:g} in magnitude (the first in row {row})"
        )
    parts = []
    for _, value, description in data_inputs:
        entry = np.asarray(value[row : row + 1])[0]
        parts.append((_extremeness(entry), f"{description} holds {_show(entry)}"))
    parts.sort(key=lambda part: -part[0])
    held = "; ".join(text for _, text in parts[:4]) or "no per-datum data were found"
    extreme = bool(parts) and parts[0][0] > 0
    hint = (
        "A value this large overflows the likelihood or its derivatives: check the data "
        "for a unit or coding error (e.g. a missing-value code such as 1e300), and correct "
        "or drop the row in every per-datum array."
        if extreme
        else "Check that row's values (a value outside the likelihood's support, or one "
        "the likelihood cannot take at this point); correct or drop it, or pass a "
        "reference_point where every row's likelihood is finite."
    )
    rows = "1 row" if count == 1 else f"{count} rows"
    return f"For {rows} of the data {what}. In row {row}: {held}. {hint}"


def _extreme_in(rows: np.ndarray, first_row: int) -> tuple[int, int | None]:
    """Rows of one chunk with an entry beyond :data:`EXTREME_VALUE` (or not finite)."""
    rows = np.asarray(rows)
    if rows.dtype.kind not in "fc":
        return 0, None
    with np.errstate(invalid="ignore"):
        return flagged_rows(~(np.abs(rows) <= EXTREME_VALUE), first_row)


def _first_extreme_row(data_inputs) -> tuple[int | None, int]:
    """The first row holding an extreme entry in any data input, and how many rows do
    (counted per input and added: a row extreme in two inputs counts twice)."""
    first, count = None, 0
    for _, value, _ in data_inputs:
        for n, row in on_row_chunks(value, _extreme_in):
            count += n
            if row is not None and (first is None or row < first):
                first = row
    return first, count


def _extremeness(entry) -> float:
    """How suspicious a data entry is: 2 if not finite, 1 if extreme, else 0."""
    entry = np.asarray(entry)
    if entry.dtype.kind not in "fc":
        return 0.0
    if not np.all(np.isfinite(entry)):
        return 2.0
    return float(np.any(np.abs(entry) > EXTREME_VALUE))


def _show(entry) -> str:
    entry = np.asarray(entry)
    if entry.ndim == 0:
        return repr(entry.item())
    if entry.size <= 6:
        return np.array2string(entry, precision=4)
    worst = int(np.argmax(np.abs(np.nan_to_num(entry.astype(float), nan=np.inf))))
    return f"an array of {entry.size} values, the largest in magnitude {entry.flat[worst]!r}"
