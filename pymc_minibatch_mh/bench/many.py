"""``bench many``: many parameters, through the ``bench peers`` machinery.

Five cases, each method in a fresh Python process on the same data file with its wall
time measured from process start to exit (see :mod:`pymc_minibatch_mh.bench.peers`):

1. A centred hierarchical Normal model with 500 group intercepts of very unequal sizes
   (group shares from a Dirichlet(0.5), at least a few rows per group), two covariates,
   a free noise scale and a free group scale, N = 10^6. PyMC's NUTS is the reference.
2. Logistic regression with 100 covariates and an intercept, N = 10^5. numpyro's NUTS
   is the reference.
3. and 4. Bernoulli outcomes of 2,000 users of very unequal sizes, one intercept per
   user (centred, then non-centred ``a = mu_a + sigma_a * z``) and two covariates,
   N = 10^6. PyMC's NUTS is the reference.
5. Intercepts and slopes of 100 groups correlated through ``pm.LKJCholeskyCov``,
   non-centred, a Normal outcome with one more covariate, N = 10^6. PyMC's NUTS is the
   reference.

Every case runs our four steps with their default arguments, PyMC's NUTS, numpyro's
NUTS and numpyro's HMCECS (Taylor proxy at an SVI MAP point). ``--quick``: 50 groups,
D = 20, 200 non-centred users and 20 LKJ groups, N = 20,000, 300 tune and 300 draws per
chain.

Memory: numpyro's degree-2 Taylor proxy builds per-row Hessians of the whole subsample
when HMCECS starts, which grows with the number of parameters times the square of the
subsample size, whatever N. With 1000 rows per subsample and two chains at once its
process peaked at 5 GB with 100 groups and 10 GB with 200; with 500 groups it exceeded
a 24 GB machine and was killed. Above 200 groups HMCECS therefore runs its two chains
one after the other (``peer_runs.HMCECS_SEQUENTIAL_ABOVE_GROUPS``; its wall time counts
both); if it is still killed, the report says so in its row. With 2,000 users it would
need about 45 GB even so: it is not started, and its row says why.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from pymc_minibatch_mh.bench.peers import PeerCase, markdown_report, run_peers, write_reports

FULL_CASES = (
    PeerCase(
        "500 groups, Normal, N=1e6",
        1_000_000,
        2,
        kind="hierarchical",
        groups=500,
        unbalanced=True,
        numpyro=True,
    ),
    PeerCase("logistic N=1e5 D=100+1", 100_000, 100, pymc_nuts=True),
    *(
        PeerCase(
            f"2,000 users, Bernoulli, {form}, N=1e6",
            1_000_000,
            2,
            kind=kind,
            groups=2_000,
            unbalanced=True,
            numpyro=True,
        )
        for form, kind in (("centred", "users"), ("non-centred", "users_noncentred"))
    ),
    PeerCase(
        "100 groups, LKJ slopes, Normal, N=1e6",
        1_000_000,
        2,
        kind="lkj_slopes",
        groups=100,
        unbalanced=True,
        numpyro=True,
    ),
)
#: A quick case's limit per method: numpyro's HMCECS took over 12 minutes on the 200 users,
#: which would make the quick run no longer quick; it then gets a row saying so.
QUICK_TIMEOUT_S = 600
QUICK_CASES = (
    PeerCase(
        "50 groups, Normal, N=2e4 (quick)",
        20_000,
        2,
        300,
        300,
        kind="hierarchical",
        groups=50,
        unbalanced=True,
        numpyro=True,
    ),
    PeerCase("logistic N=2e4 D=20+1 (quick)", 20_000, 20, 300, 300, pymc_nuts=True),
    PeerCase(
        "200 users, Bernoulli, non-centred, N=2e4 (quick)",
        20_000,
        2,
        300,
        300,
        kind="users_noncentred",
        groups=200,
        unbalanced=True,
        numpyro=True,
        timeout_s=QUICK_TIMEOUT_S,
    ),
    PeerCase(
        "20 groups, LKJ slopes, Normal, N=2e4 (quick)",
        20_000,
        2,
        300,
        300,
        kind="lkj_slopes",
        groups=20,
        unbalanced=True,
        numpyro=True,
        timeout_s=QUICK_TIMEOUT_S,
    ),
)

TITLE = "Many parameters: minibatch MH steps (defaults), PyMC NUTS, numpyro NUTS and HMCECS"
INTRO = (
    "Each method in a fresh process on identical data; wall time `wall_s` from process "
    "start to exit (imports, model, MAP, passes, compilation, sampling). `ess_per_s`: the "
    "smallest bulk ESS over all coordinates per second of wall time; `x_pymc_nuts` and "
    "`x_numpyro_nuts`: that rate over PyMC's or numpyro's NUTS (the reference of the "
    "case is named under it). `rows_share`: data rows read per draw as a share of N. "
    "`max_mean_err_sd`: largest error of a posterior mean in reference posterior sds; "
    "`max_sd_rel_err`: largest relative error of a posterior sd."
)
COLUMNS = [
    "method",
    "wall_s",
    "setup_s",
    "sampling_s",
    "ess_bulk_min",
    "ess_per_s",
    "x_pymc_nuts",
    "x_numpyro_nuts",
    "rows_share",
    "n_data_passes",
    "max_mean_err_sd",
    "max_sd_rel_err",
]

#: The ``many`` report: the peers report with this experiment's title and columns.
many_report = partial(markdown_report, title=TITLE, intro=INTRO, columns=COLUMNS)


def run_many(
    *,
    quick: bool = False,
    cache: str = "warm",
    seed: int = 1,
    methods: tuple[str, ...] | None = None,
    progress=print,
) -> dict:
    """Run the ``many`` cases; the result has the layout of :func:`run_peers`'.

    Parameters
    ----------
    quick
        Run the small cases (a few minutes) instead of the full ones.
    cache
        ``"warm"`` fills the compilation caches first, ``"cold"`` gives every process an
        empty one.
    seed
        Seed of the data and of every method.
    methods
        Run only these methods (and each case's reference).
    progress
        Called with one line of text per event.

    Returns
    -------
    dict
        ``{"cases": [...], "stack": {...}, "experiment": "many"}``, JSON-serialisable.
    """
    cases = QUICK_CASES if quick else FULL_CASES
    result = run_peers(cache=cache, seed=seed, methods=methods, cases=cases, progress=progress)
    result["experiment"] = "many"
    return result


def write_many_reports(result: dict, out_dir: Path, *, suffix: str = "") -> list[Path]:
    """``many{suffix}`` as markdown, JSON and PNG under ``out_dir``."""
    return write_reports(result, out_dir, suffix=suffix, name="many", report=many_report)
