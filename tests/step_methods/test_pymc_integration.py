"""What every step method owes pm.sample: seeding, multiprocessing, interruption, tuning
reset and the sampling state. One test per property, run over the four step classes."""

from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from step_sampling import N_DATA, QUIET, sample_step

from pymc_minibatch_mh import Austere, FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.diagnostics import posterior as _posterior
from pymc_minibatch_mh.diagnostics import sample_stats as _stats


@dataclass(frozen=True)
class Case:
    """A step class, the model it is tested on, the variable compared between runs, the
    method's own sample stats that must be reproduced along with the draws, and a proposal
    scale far too large for the model (the default proposals are whitened by the Laplace
    covariance, so 50 is 50 posterior sds)."""

    step_class: type
    model: str
    variable: str
    own_stats: tuple[str, ...] = ()
    needs_map: bool = False
    too_large_scaling: float = 50.0
    kwargs: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.step_class.__name__


CASES = [
    Case(MinibatchBarker, "gaussian_model", "mu", ("delta_var",)),
    Case(Austere, "gaussian_model", "mu", ("batch_size", "t_stat")),
    Case(
        FlyMC,
        "logistic_model",
        "beta",
        ("n_bright", "batch_size"),
        needs_map=True,
    ),
    Case(TunaMH, "logistic_model", "beta", ("chi", "poisson_draws")),
]


@pytest.fixture(params=CASES, ids=str)
def case(request):
    """The case with its model and a step factory (FlyMC gets the MAP to skip the optimiser)."""
    spec = request.param
    model = request.getfixturevalue(spec.model)
    base = {"map_point": request.getfixturevalue("logistic_map")} if spec.needs_map else {}

    def make_step(**kwargs):
        with model:
            return spec.step_class(**{**base, **spec.kwargs, **kwargs})

    return spec, model, make_step


def _sample(case, step_kwargs=None, **kwargs):
    spec, model, make_step = case
    return sample_step(model, make_step, step_kwargs, **kwargs)


def test_same_seed_same_draws_different_seed_different(case):
    spec = case[0]
    a = _sample(case, random_seed=7, chains=2)
    b = _sample(case, random_seed=7, chains=2)
    c = _sample(case, random_seed=8, chains=2)
    draws_a, draws_b, draws_c = (np.asarray(_posterior(i)[spec.variable]) for i in (a, b, c))
    np.testing.assert_array_equal(draws_a, draws_b)
    for name in spec.own_stats:
        np.testing.assert_array_equal(np.asarray(_stats(a)[name]), np.asarray(_stats(b)[name]))
    assert not np.array_equal(draws_a, draws_c)
    assert not np.array_equal(draws_a[0], draws_a[1])  # chains get their own generators


@pytest.mark.parametrize("mp_ctx", ["fork", "spawn"])
def test_multiprocess_sampling_is_reproducible(case, mp_ctx):
    spec = case[0]
    a = _sample(case, random_seed=11, chains=2, cores=2, mp_ctx=mp_ctx)
    b = _sample(case, random_seed=11, chains=2, cores=1)
    np.testing.assert_array_equal(
        np.asarray(_posterior(a)[spec.variable]), np.asarray(_posterior(b)[spec.variable])
    )
    for name in spec.own_stats:
        np.testing.assert_array_equal(np.asarray(_stats(a)[name]), np.asarray(_stats(b)[name]))


def test_a_step_that_sampled_before_tunes_again_in_worker_processes(case):
    """A step reused for a second ``pm.sample`` (in process first, then in worker
    processes, which do not switch tuning on themselves): its draws equal a fresh step's
    with the same seed, and each chain's setup switches tuning on (the first run ended
    it). Control: the used step has ``tune`` off until a chain is set up."""
    spec, model, make_step = case
    step = make_step()
    with model:
        pm.sample(step=step, draws=20, tune=20, chains=1, cores=1, random_seed=4, **QUIET)
    assert not step.tune  # the control: tuning ended with the first run
    step.setup_chain(np.random.default_rng(0), 20, 20)
    assert step.tune
    step.stop_tuning()  # as the first run left it
    reused = sample_step(model, lambda: step, None, random_seed=11, chains=2, cores=2)
    fresh = _sample(case, random_seed=11, chains=2, cores=2)
    np.testing.assert_array_equal(
        np.asarray(_posterior(reused)[spec.variable]), np.asarray(_posterior(fresh)[spec.variable])
    )


def test_interrupted_sampling_keeps_draws(case):
    def stop_after_30(trace, draw):
        if draw.draw_idx >= 30:
            raise KeyboardInterrupt

    idata = _sample(
        case, draws=200, tune=0, random_seed=3, callback=stop_after_30, discard_tuned_samples=False
    )
    n = np.asarray(_posterior(idata)[case[0].variable]).shape[1]
    assert 30 <= n < 200


def test_tuning_changes_scaling_and_reset_restores(case):
    spec, model, make_step = case
    # A random walk: the default local move on these models (Normal priors) is the exact
    # flow on the Gaussian surrogate, which has no scale.
    step = make_step(scaling=spec.too_large_scaling, proposal="rw")
    with model:
        pm.sample(step=step, draws=10, tune=200, chains=1, random_seed=1, **QUIET)
    assert step.scaling < 0.5 * spec.too_large_scaling
    step.reset_tuning()
    assert step.scaling == pytest.approx(spec.too_large_scaling)


def test_no_tuning_keeps_scaling(case):
    idata = _sample(case, {"scaling": 0.01, "tune": False}, random_seed=2)
    assert np.allclose(np.asarray(_stats(idata)["scaling"]), 0.01)


def test_sampling_state_roundtrip(case):
    spec, model, make_step = case
    step = make_step()
    state = step.sampling_state
    point = model.initial_point()
    first, _ = step.step(point)
    step.sampling_state = state
    again, _ = step.step(point)
    np.testing.assert_array_equal(first[spec.variable], again[spec.variable])


# ----------------------------------------------- methods that take any likelihood

# How each method reports a proposal refused because every datum's log-density is -inf.
LIKELIHOOD_WALL = {
    MinibatchBarker: lambda stats: np.asarray(stats["accept"]) == 0,
    Austere: lambda stats: (
        np.isnan(np.asarray(stats["t_stat"])) & (np.asarray(stats["accepted"]) == 0)
    ),
}


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere], ids=lambda c: c.__name__)
def test_compound_step_with_nuts_on_other_variables(rng, step_class):
    y = rng.normal(1.0, 2.0, size=N_DATA)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", mu, sigma, observed=y)
        step = step_class([mu])
    idata = sample_step(model, lambda: [step], draws=200, tune=200, random_seed=4)
    stats = _stats(idata)
    assert "batch_size" in stats and "diverging" in stats  # both samplers ran
    sigma_draws = np.asarray(_posterior(idata)["sigma"]).ravel()
    assert abs(sigma_draws[100:].mean() - y.std()) < 0.2


@pytest.mark.parametrize("step_class", [MinibatchBarker, Austere], ids=lambda c: c.__name__)
def test_invalid_proposals_are_rejected_without_crashing(rng, step_class):
    y = rng.normal(0.5, 1.0, size=N_DATA)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        # Below 0.48 the prior potential is -inf; above 0.52 the likelihood scale is
        # negative, so every datum's log-density is -inf (NaN ratios).
        pm.Potential("wall", pt.switch(mu < 0.48, -np.inf, 0.0))
        pm.Normal("y", mu, pt.switch(mu > 0.52, -1.0, 1.0), observed=y)
    idata = sample_step(
        model,
        step_class,
        # A plain random walk from the given initial value (the default would start at
        # the MAP, which the model's walls make hard to find).
        {"scaling": 0.03, "tune": False, "proposal": "rw", "control_variates": False},
        draws=300,
        tune=0,
        random_seed=5,
        initvals={"mu": 0.5},
    )
    mu_draws = np.asarray(_posterior(idata)["mu"])
    assert np.all((mu_draws >= 0.48) & (mu_draws <= 0.52))
    stats = _stats(idata)
    batch = np.asarray(stats["batch_size"])
    assert np.any(batch == 0)  # the prior wall: no data touched
    assert np.any((batch > 0) & LIKELIHOOD_WALL[step_class](stats))  # the likelihood wall
    assert np.any(np.asarray(stats["accepted"]))  # the chain still moves


def test_chain_workers_run_blas_on_one_thread(monkeypatch):
    """In a PyMC chain worker (process named ``worker_chain_*``) BLAS is limited to one
    thread; elsewhere (the user's process, negative control) nothing changes."""
    import multiprocessing

    from threadpoolctl import threadpool_info

    from pymc_minibatch_mh.step_methods import base

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    monkeypatch.setattr(base, "_BLAS_LIMITER", None)
    assert not base.one_blas_thread_in_chain_workers()
    assert base._BLAS_LIMITER is None and blas_threads() == before
    monkeypatch.setattr(multiprocessing.current_process(), "name", "worker_chain_0")
    try:
        assert base.one_blas_thread_in_chain_workers()
        assert blas_threads() and all(n == 1 for n in blas_threads())
    finally:
        if base._BLAS_LIMITER is not None:
            base._BLAS_LIMITER.restore_original_limits()
    assert blas_threads() == before
