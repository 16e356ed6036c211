"""Posterior agreement checks with ESS-aware tolerances."""

from __future__ import annotations

from dataclasses import dataclass

import arviz as az
import numpy as np

from pymc_minibatch_mh.diagnostics.groups import posterior as posterior_of


@dataclass
class Agreement:
    """Per-coordinate errors of a sampler's posterior against a reference."""

    mean_err_sd: dict[str, float]
    sd_rel_err: dict[str, float]
    mcse_sd: dict[str, float]  # Monte Carlo s.e. of the mean, in reference-sd units

    def failures(self, mean_tol: float, sd_tol: float) -> list[str]:
        out = []
        for key, err in self.mean_err_sd.items():
            if err > mean_tol:
                out.append(f"{key}: |mean error| = {err:.3f} ref sd > {mean_tol}")
            if self.sd_rel_err[key] > sd_tol:
                out.append(f"{key}: |sd / ref sd - 1| = {self.sd_rel_err[key]:.3f} > {sd_tol}")
        return out

    def underpowered(self, mean_tol: float, k: float = 3.0) -> list[str]:
        """Coordinates whose Monte Carlo error is too large for ``mean_tol`` to mean much."""
        return [f"{key}: mcse {m:.3f} sd" for key, m in self.mcse_sd.items() if k * m > mean_tol]


def coordinate_draws(posterior, names) -> dict[str, np.ndarray]:
    """``{"name[i]": (chain, draw) array}`` for every scalar coordinate (0-based index)."""
    out = {}
    for name in names:
        values = np.asarray(posterior[name])
        if values.ndim == 2:
            out[name] = values
        else:
            flat = values.reshape(values.shape[0], values.shape[1], -1)
            for j in range(flat.shape[2]):
                out[f"{name}[{j}]"] = flat[:, :, j]
    return out


def agreement(draws: dict[str, np.ndarray], ref_mean: dict, ref_sd: dict) -> Agreement:
    mean_err, sd_err, mcse = {}, {}, {}
    for key, values in draws.items():
        ess = float(az.ess(values, method="bulk"))
        mean_err[key] = abs(values.mean() - ref_mean[key]) / ref_sd[key]
        sd_err[key] = abs(values.std() / ref_sd[key] - 1.0)
        mcse[key] = values.std() / np.sqrt(ess) / ref_sd[key]
    return Agreement(mean_err, sd_err, mcse)


def reference_moments(draws: dict[str, np.ndarray]) -> tuple[dict, dict]:
    means = {k: float(np.mean(v)) for k, v in draws.items()}
    sds = {k: float(np.std(v)) for k, v in draws.items()}
    return means, sds


def moments_of(idata, names) -> tuple[dict, dict]:
    """Mean and sd of every coordinate of a reference sample (e.g. a long NUTS run)."""
    draws = coordinate_draws(posterior_of(idata), names)
    return reference_moments({k: v.ravel() for k, v in draws.items()})


def failures_against(
    idata, names, ref_mean: dict, ref_sd: dict, *, mean_tol: float, sd_tol: float, check_power=True
) -> list[str]:
    """The coordinates of ``idata``'s posterior outside the tolerances (printed per coordinate).

    With ``check_power`` it first asserts that the Monte Carlo error is small enough for
    ``mean_tol`` to mean something (3 MCSE below it); negative controls turn that off.
    """
    result = agreement(coordinate_draws(posterior_of(idata), names), ref_mean, ref_sd)
    for key, err in result.mean_err_sd.items():
        print(
            f"{key}: mean err {err:.3f} sd, sd err {result.sd_rel_err[key]:.3f}, "
            f"mcse {result.mcse_sd[key]:.3f} sd"
        )
    if check_power:
        assert not result.underpowered(mean_tol), result.underpowered(mean_tol)
    return result.failures(mean_tol, sd_tol)


def familywise_z(n_coordinates: int, familywise: float = 0.01) -> float:
    """Two-sided normal quantile that keeps the chance of any false alarm among
    ``n_coordinates`` independent checks at ``familywise`` (Bonferroni)."""
    from scipy import stats

    return float(stats.norm.isf(familywise / (2.0 * max(n_coordinates, 1))))


def many_failures(
    draws: dict[str, np.ndarray],
    ref_mean: dict,
    ref_sd: dict,
    *,
    ref_ess: float,
    mean_tol: float,
    sd_tol: float,
    familywise: float = 0.01,
) -> list[str]:
    """Coordinates outside the tolerances, for models with hundreds of coordinates.

    With hundreds of coordinates the largest Monte Carlo error alone exceeds a fixed
    tolerance: at 0.05 sd per coordinate (ESS 400), the largest of 200 is about 0.15 sd.
    A coordinate therefore fails when its error exceeds both the tolerance and
    ``z * noise``: ``noise`` combines the sampler's Monte Carlo standard error (from its
    bulk ESS) and the reference's (from the reference's smallest bulk ESS ``ref_ess``),
    and ``z`` keeps the chance of any false alarm at ``familywise``
    (:func:`familywise_z`). Before that, each coordinate's own Monte Carlo error must be
    at most a third of ``mean_tol`` (bulk ESS of about 400 for 0.15 sd): a chain that mixes
    too slowly fails as underpowered instead of passing on wide error bars.
    """
    z = familywise_z(len(draws), familywise)
    out = []
    for key, values in draws.items():
        sd = float(values.std())
        mcse = sd / np.sqrt(float(az.ess(values, method="bulk"))) / ref_sd[key]
        if 3.0 * mcse > mean_tol:
            out.append(f"{key}: underpowered, Monte Carlo s.e. {mcse:.3f} sd > {mean_tol / 3:.3f}")
            continue
        err = abs(float(values.mean()) - ref_mean[key]) / ref_sd[key]
        mean_bound = max(mean_tol, z * float(np.hypot(mcse, 1.0 / np.sqrt(ref_ess))))
        if err > mean_bound:
            out.append(f"{key}: |mean error| = {err:.3f} ref sd > {mean_bound:.3f}")
        sd_err = abs(sd / ref_sd[key] - 1.0)
        sd_mcse = _sd_mcse(values) / ref_sd[key]
        sd_bound = max(sd_tol, z * float(np.hypot(sd_mcse, 1.0 / np.sqrt(2.0 * ref_ess))))
        if sd_err > sd_bound:
            out.append(f"{key}: |sd / ref sd - 1| = {sd_err:.3f} > {sd_bound:.3f}")
    return out


def _sd_mcse(values: np.ndarray) -> float:
    """Monte Carlo standard error of the sd of ``(chain, draw)`` draws, from the ESS of the
    squared deviations (delta method; ``az.mcse(method="sd")`` fails on some versions)."""
    squares = (values - values.mean()) ** 2
    ess = float(az.ess(squares, method="bulk"))
    return float(squares.std() / np.sqrt(ess) / (2.0 * values.std()))


def grid_moments(axes: dict[str, np.ndarray], logp: np.ndarray) -> tuple[dict, dict]:
    """Posterior means and sds of the coordinates of a 2-D grid ``axes`` (two named 1-D
    grids, ``indexing="ij"``) with unnormalised log density ``logp``; asserts that the
    grid's edges hold no mass (it is wide enough)."""
    (name_a, grid_a), (name_b, grid_b) = axes.items()
    qa, qb = np.meshgrid(grid_a, grid_b, indexing="ij")
    w = np.exp(logp - logp.max())
    w /= w.sum()
    assert w[0].sum() + w[-1].sum() + w[:, 0].sum() + w[:, -1].sum() < 1e-12
    mean = {name_a: float(np.sum(w * qa)), name_b: float(np.sum(w * qb))}
    sd = {
        name_a: float(np.sqrt(np.sum(w * (qa - mean[name_a]) ** 2))),
        name_b: float(np.sqrt(np.sum(w * (qb - mean[name_b]) ** 2))),
    }
    return mean, sd


def grid_moments_of(values: dict[str, np.ndarray], logp: np.ndarray) -> tuple[dict, dict]:
    """Posterior means and sds of functions of a grid of any dimension (``values``: name ->
    array of the grid's shape) with unnormalised log density ``logp``; asserts that the
    grid's faces hold no mass (it is wide enough)."""
    w = np.exp(logp - logp.max())
    w /= w.sum()
    faces = sum(np.take(w, k, axis=axis).sum() for axis in range(w.ndim) for k in (0, -1))
    assert faces < 1e-10, faces
    mean = {k: float(np.sum(w * v)) for k, v in values.items()}
    sd = {k: float(np.sqrt(np.sum(w * (v - mean[k]) ** 2))) for k, v in values.items()}
    return mean, sd


def grid_z_failures(case: dict, step, *, draws: int, seed: int, z_tol: float = 4.0) -> dict:
    """Sample ``case["model"]`` with ``step`` (2 chains, 1000 tuning steps) and return the
    variables whose mean or sd is ``z_tol`` Monte Carlo standard errors or more away from
    the grid's ``case["mean"]`` / ``case["sd"]`` (the sd's standard error taken as
    ``sd / sqrt(2 ESS_sd)``), with their z-scores."""
    import pymc as pm

    with case["model"]:
        idata = pm.sample(
            step=step,
            draws=draws,
            tune=1000,
            chains=2,
            cores=2,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    # Names are variables or their coordinates ("cut[0]", as coordinate_draws names them).
    variables = sorted({name.split("[")[0] for name in case["mean"]})
    draws = coordinate_draws(posterior_of(idata), variables)
    z = {}
    for name in case["mean"]:
        values = np.asarray(draws[name])
        sd = values.std()
        mcse_mean = sd / np.sqrt(float(az.ess(values, method="mean")))
        mcse_sd = sd / np.sqrt(2.0 * float(az.ess(values, method="sd")))
        z[name] = (
            (values.mean() - case["mean"][name]) / mcse_mean,
            (sd - case["sd"][name]) / mcse_sd,
        )
    print(case.get("label", ""), "z-scores (mean, sd):", z)
    return {k: v for k, v in z.items() if max(abs(v[0]), abs(v[1])) >= z_tol}
