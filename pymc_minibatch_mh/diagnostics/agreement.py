"""Does a sampler's posterior agree with a reference? Errors, their noise, and a verdict.

A sampler agrees with the reference (NUTS on the same model, or given reference draws)
when, for every scalar coordinate,

* its posterior mean is within ``mean_tol`` reference posterior sds of the reference
  mean, and
* its posterior sd is within a fraction ``sd_tol`` of the reference sd,

and the runs were long enough for that to mean something: the Monte Carlo standard error
of the difference of the two means (from each run's bulk ESS) is below ``mean_tol / 3``.
An error is taken as real only beyond its Monte Carlo noise: ``"disagree"`` when some
coordinate's error exceeds its tolerance by more than ``z`` Monte Carlo standard errors,
with ``z`` the two-sided familywise (Bonferroni) 95 % quantile over the coordinates
compared; ``"inconclusive"`` when an error is beyond its tolerance but within that noise,
when the runs are too short to resolve ``mean_tol``, or when an error is not finite (NaN
draws, a chain that never moved); ``"agree"`` otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats

#: Default largest |mean - reference mean|, in reference posterior sds.
MEAN_TOL = 0.2
#: Default largest |sd / reference sd - 1|.
SD_TOL = 0.2
#: Monte Carlo standard errors of the mean difference that must fit within ``mean_tol``.
POWER_SE = 3.0
#: Familywise false-alarm rate of ``"disagree"`` when the sampler is right.
FAMILYWISE_ALPHA = 0.05

AGREE, DISAGREE, INCONCLUSIVE, REFERENCE = "agree", "disagree", "inconclusive", "reference"


def coordinate_errors(
    draws: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    *,
    ess: Mapping[str, float] | None = None,
    reference_ess: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Error of each shared coordinate's mean and sd against the reference, and its noise.

    Parameters
    ----------
    draws, reference : mapping of str to ndarray
        Draws of each scalar coordinate (``{"beta[0]": array}``, any shape: all entries
        are pooled). Coordinates missing from ``draws`` are skipped.
    ess, reference_ess : mapping of str to float, optional
        Effective sample size of each coordinate's draws (e.g. ArviZ's bulk ESS). Default:
        the number of draws (independent draws, as from posteriordb).

    Returns
    -------
    pandas.DataFrame
        Indexed by coordinate: ``mean_err_sd`` (``|mean - ref mean| / ref sd``),
        ``sd_rel_err`` (``|sd / ref sd - 1|``), ``mc_error_sd`` (the Monte Carlo
        standard error of the mean difference, in reference sds) and ``sd_mc_error`` (that
        of ``sd / ref sd``, from the large-sample variance of a sample sd,
        ``sd^2 / (2 n_eff)``).

    Raises
    ------
    ValueError
        If a reference coordinate has no spread (its errors in reference-sd units are
        undefined).
    """
    rows = {}
    for key, ref in reference.items():
        if key not in draws:
            continue
        ref = np.asarray(ref, dtype=np.float64).ravel()
        values = np.asarray(draws[key], dtype=np.float64).ravel()
        ref_sd = float(np.std(ref))
        if not ref_sd > 0:
            raise ValueError(
                f"The reference draws of {key!r} have no spread (sd {ref_sd}): errors in "
                "reference-sd units are undefined. Pass at least two distinct draws."
            )
        sd = float(np.std(values))
        n_eff = float(ess[key]) if ess is not None else float(values.size)
        ref_n_eff = float(reference_ess[key]) if reference_ess is not None else float(ref.size)
        if n_eff > 0 and ref_n_eff > 0:
            variance = sd**2 / n_eff + ref_sd**2 / ref_n_eff
            ratio = sd / ref_sd
            sd_variance = ratio**2 * (1.0 / (2.0 * n_eff) + 1.0 / (2.0 * ref_n_eff))
        else:  # a chain that never moved: no Monte Carlo error can be given
            variance = sd_variance = np.inf
        rows[key] = {
            "mean_err_sd": abs(float(np.mean(values)) - float(np.mean(ref))) / ref_sd,
            "sd_rel_err": abs(sd / ref_sd - 1.0),
            "mc_error_sd": float(np.sqrt(variance)) / ref_sd,
            "sd_mc_error": float(np.sqrt(sd_variance)),
        }
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(ERROR_COLUMNS), dtype=float)


#: The columns of :func:`coordinate_errors`.
ERROR_COLUMNS = ("mean_err_sd", "sd_rel_err", "mc_error_sd", "sd_mc_error")


def familywise_z(n_coordinates: int, alpha: float = FAMILYWISE_ALPHA) -> float:
    """The two-sided Bonferroni quantile for ``n_coordinates`` tests at familywise
    ``alpha``: ``z`` with ``P(|Z| > z) = alpha / n_coordinates``."""
    return float(stats.norm.isf(alpha / (2.0 * max(int(n_coordinates), 1))))


def verdict(errors: pd.DataFrame, *, mean_tol: float = MEAN_TOL, sd_tol: float = SD_TOL) -> str:
    """``"agree"``, ``"disagree"`` or ``"inconclusive"`` from :func:`coordinate_errors`
    (the module docstring gives the rule; a missing ``sd_mc_error`` column counts as 0).

    Parameters
    ----------
    errors : pandas.DataFrame
        One row per coordinate, the columns of :func:`coordinate_errors`.
    mean_tol, sd_tol : float
        The tolerances on mean errors (reference sds) and relative sd errors.

    Returns
    -------
    str
        The verdict.

    Examples
    --------
    >>> import pandas as pd
    >>> errors = pd.DataFrame({"mean_err_sd": [0.05], "sd_rel_err": [0.02],
    ...                        "mc_error_sd": [0.04]})
    >>> verdict(errors)
    'agree'
    >>> verdict(errors.assign(sd_rel_err=[1.5]))
    'disagree'
    >>> verdict(errors.assign(mc_error_sd=[0.2]))
    'inconclusive'
    >>> verdict(errors.assign(mean_err_sd=[0.3], mc_error_sd=[0.06]))  # within its noise
    'inconclusive'
    """
    check_tolerances(mean_tol, sd_tol)
    if errors.empty:
        raise ValueError(
            "No coordinate is shared by the draws and the reference, so there is nothing to "
            "compare. Name the reference draws as compare() names coordinates: 'mu', "
            "'beta[0]', 'w[0,1]'."
        )
    mean_err, mean_mc = errors["mean_err_sd"], errors["mc_error_sd"]
    sd_err = errors["sd_rel_err"]
    sd_mc = errors["sd_mc_error"] if "sd_mc_error" in errors else 0.0 * sd_err
    values = np.column_stack([mean_err, mean_mc, sd_err, sd_mc])
    if not np.isfinite(values).all():
        return INCONCLUSIVE
    z = familywise_z(len(errors))
    if (mean_err - z * mean_mc > mean_tol).any() or (sd_err - z * sd_mc > sd_tol).any():
        return DISAGREE
    beyond = (mean_err > mean_tol).any() or (sd_err > sd_tol).any()
    if beyond or (POWER_SE * mean_mc > mean_tol).any():
        return INCONCLUSIVE
    return AGREE


def check_tolerances(mean_tol: float, sd_tol: float) -> None:
    """Refuse tolerances that are not positive finite numbers.

    Raises
    ------
    ValueError
        Naming the tolerance and what it means.
    """
    for name, value in (("mean_tol", mean_tol), ("sd_tol", sd_tol)):
        if isinstance(value, bool) or not (np.isfinite(value) and value > 0):
            raise ValueError(
                f"{name} must be a positive number (e.g. 0.2); got {value!r}. It is the "
                "largest error accepted: for means in reference posterior sds, for sds as a "
                "fraction of the reference sd."
            )


def describe(row: Mapping, *, mean_tol: float, sd_tol: float) -> str:
    """One line on one sampler's agreement, from its ``compare()`` table row."""
    found = (
        f"largest mean error {row['max_mean_err_sd']:.3f} sd (tolerance {mean_tol:g}), "
        f"largest sd error {100 * row['max_sd_rel_err']:.1f} % (tolerance {100 * sd_tol:g} %), "
        f"Monte Carlo error {row['mc_error_sd']:.3f} sd"
    )
    what = {
        AGREE: "agrees with the reference",
        DISAGREE: "DISAGREES with the reference",
        INCONCLUSIVE: (
            "inconclusive: the runs are too short to tell (an error beyond a tolerance but "
            f"within its Monte Carlo noise, {POWER_SE:g} Monte Carlo errors that do not fit in "
            f"{mean_tol:g} sd, or a statistic that is not finite); sample more draws"
        ),
    }[row["verdict"]]
    return f"{what}: {found}"


def agreement_summary(
    table: pd.DataFrame,
    *,
    mean_tol: float = MEAN_TOL,
    sd_tol: float = SD_TOL,
    heading: str = "",
) -> str:
    """Sentences on which samplers of a :func:`~pymc_minibatch_mh.compare` table agree.

    Parameters
    ----------
    table : pandas.DataFrame
        The table ``compare()`` returns (columns ``verdict``, ``max_mean_err_sd``,
        ``max_sd_rel_err``, ``mc_error_sd``).
    mean_tol, sd_tol : float
        The tolerances the table's verdicts were made with.
    heading : str, optional
        A first line (``compare()`` says there which rows were sampled).

    Returns
    -------
    str
        One line per sampler, after the heading; ``compare()`` stores it in
        ``table.attrs["summary"]``.
    """
    lines = [heading] if heading else []
    for method, row in table.iterrows():
        if row["verdict"] == REFERENCE:
            lines.append(f"  {method}: the reference")
        else:
            lines.append(f"  {method}: {describe(row, mean_tol=mean_tol, sd_tol=sd_tol)}")
    judged = table[table["verdict"] != REFERENCE]
    if len(judged):
        if (judged["verdict"] == AGREE).all():
            lines.append("Every sampler agrees with the reference.")
        else:
            others = ", ".join(f"{m} ({v})" for m, v in judged["verdict"].items() if v != AGREE)
            lines.append(f"Not shown to agree: {others}.")
    return "\n".join(lines)
