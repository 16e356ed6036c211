"""Full-data passes over a design: the same sums from numpy rows and from chunked data,
the latter as one Dask task per chunk, on a LocalCluster's worker processes."""

import numpy as np
import pymc as pm
import pytest

from pymc_minibatch_mh import TunaMH, chunked_data
from pymc_minibatch_mh.bounds import free_scale, negative_binomial
from pymc_minibatch_mh.bounds.bohning import untuned_bohning
from pymc_minibatch_mh.bounds.jaakkola_jordan import map_tuned_jaakkola_jordan
from pymc_minibatch_mh.bounds.lipschitz import _eta_range, _row_norms
from pymc_minibatch_mh.bounds.trust_region import TrustRegion
from pymc_minibatch_mh.data.chunk_pass import design_map, design_sum
from pymc_minibatch_mh.data.row_design import FeatureBlock, RowDesign
from pymc_minibatch_mh.data.row_source import RowSource
from pymc_minibatch_mh.families.poisson_log import map_tuned_poisson_log

N, P, CHUNK = 6_000, 4, 1_500  # four chunks of chunked data


def _designs(tmp_path, rng):
    """The same (N, P + 1) design (an intercept column, then the features) over numpy
    features and over a zarr array of them."""
    zarr = pytest.importorskip("zarr")
    x = rng.normal(size=(N, P)).astype(np.float32)
    stored = zarr.create_array(store=str(tmp_path / "x.zarr"), data=x, chunks=(CHUNK, P))
    place = np.zeros((P, P + 1))
    place[np.arange(P), np.arange(1, P + 1)] = 1.0
    intercept = np.r_[1.0, np.zeros(P)]
    in_memory = RowDesign(N, P + 1, [FeatureBlock(x, place)], intercept)
    chunked = RowDesign(N, P + 1, [FeatureBlock(RowSource(stored), place)], intercept)
    return in_memory, chunked


class _Predictor:
    """A linear predictor ``design @ q`` without an offset (what ``_eta_range`` reads)."""

    def __init__(self, design):
        self.design, self.offset = design, 0.0


def _sum_of_rows(design, rows, weights):
    return (design[rows].T @ weights, float(weights.sum()))


def _passes(design, rng_seed=3):
    """Every pass of the data layer and of the bounds that reads the design whole."""
    rng = np.random.default_rng(rng_seed)
    q = 0.3 * rng.normal(size=P + 1)
    y = (rng.random(N) < 0.4).astype(np.int8)
    labels = rng.integers(0, 3, size=N)
    jj = map_tuned_jaakkola_jordan(design, 0.0, y, q)
    bohning = untuned_bohning(design, np.zeros((N, 3)), labels, 3)
    box = (-np.ones(P + 1), np.ones(P + 1))
    weights = rng.random(N)
    counts = rng.poisson(2.0, size=N).astype(np.float64)
    # A negative binomial with a free dispersion (its scale row: the last coordinate) and
    # a free-scale quadratic with a shared scale direction, from made-up row coefficients.
    direction = np.r_[np.zeros(P), 1.0]
    nb = negative_binomial._collapsed(
        "negative_binomial",
        design,
        np.zeros(N),
        counts,
        (direction, 0.0, None),
        (None, 0.0, None),
        q,
        tuned=True,
    )
    # The same counts with zeros and a hurdle at a fixed psi (odds 1.5).
    hurdle = negative_binomial._collapsed(
        "hurdle_nb_log",
        design,
        np.zeros(N),
        counts,
        (direction, 0.0, None),
        (None, 0.0, np.full(N, np.log(1.5))),
        q,
        tuned=True,
    )
    region = TrustRegion(q, 0.02 * np.eye(P + 1), 3.0)
    poisson = map_tuned_poisson_log(design, 0.0, counts, q, region)
    taylor = (rng.normal(size=N), rng.normal(size=N), rng.normal(size=N))
    curvatures = (rng.random(N), rng.random(N), 0.1 * rng.normal(size=N))
    scale = free_scale._collapsed_bound(
        design,
        direction,
        q,
        taylor,
        curvatures,
        weight=1.3,
        region=None,
        family="t",
        unbounded=None,
    )
    return {
        "dot": design @ q,
        "norms": _row_norms(design, None),
        "eta_range": np.column_stack(_eta_range(_Predictor(design), box)),
        "design_sum": np.r_[design_sum(design, _sum_of_rows, per_row=(weights,))[0]],
        "jj_hessian": jj.collapsed.hessian,
        "jj_value": jj.log_bound_sum(q + 0.1),
        "bohning_gram": bohning.feature_gram,
        "bohning_value": bohning.log_bound_sum(np.zeros(3 * (P + 1))),
        "nb_constants": nb.jj_constant,
        "nb_value": nb.log_bound_sum(q + 0.1),
        "hurdle_weights": hurdle.weight,
        "hurdle_value": hurdle.log_bound_sum(q + 0.1),
        "free_scale_hessian": scale.collapsed.hessian,
        "poisson_curvature": poisson.curvature,
        "poisson_value": poisson.log_bound_sum(q + 0.01),
    }


def test_passes_over_chunked_data_run_on_the_cluster_and_match_numpy(tmp_path, rng, cluster_client):
    distributed = pytest.importorskip("distributed")
    in_memory, chunked = _designs(tmp_path, rng)
    with distributed.get_task_stream(cluster_client) as idle:
        expected = _passes(in_memory)  # negative control: numpy runs no Dask task
    with distributed.get_task_stream(cluster_client) as stream:
        got = _passes(chunked)
    tasks = [t for t in stream.data if "_design_chunk_values" in str(t["key"])]
    workers = {t["worker"] for t in tasks}
    known = set(cluster_client.scheduler_info()["workers"])
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-9, atol=1e-9, err_msg=name)
    # Passes over the design (dot, norms, eta range, the generic sum, the JJ, Böhning,
    # negative binomial, hurdle, free-scale and Poisson sums, and the products and norms
    # behind the JJ and Poisson anchors), four chunks each.
    assert len(tasks) >= 13 * N // CHUNK
    assert workers and workers <= known
    assert not idle.data


def test_design_map_and_sum_cover_every_row_once_in_blocks(rng):
    """Blocks of any size: the map returns the rows in order, the sum adds each row once."""
    x = rng.normal(size=(1_003, 3))
    values = rng.normal(size=1_003)
    for block_rows in (1, 7, 500, 5_000):
        mapped = design_map(x, _rows_times, per_row=(values,), block_rows=block_rows)
        np.testing.assert_allclose(mapped, x * values[:, None])
        total, count = design_sum(x, _sum_of_rows, per_row=(values,), block_rows=block_rows)
        np.testing.assert_allclose(total, x.T @ values)
        assert count == pytest.approx(values.sum())
    # Negative control: a task that drops the last row of each block misses rows.
    short = design_map(x, _all_but_last, block_rows=500)
    assert short.shape[0] == 1_003 - 3


def test_a_row_design_reads_an_index_of_every_row_in_order_as_a_pass(rng, monkeypatch):
    """``dot`` with the index array 0..N-1 (FlyMC's first draw of z) runs as the pass over
    all rows, gives the gathered product, and any other index still gathers."""
    x = rng.normal(size=(N, P))
    place = np.zeros((P, P + 1))
    place[np.arange(P), np.arange(1, P + 1)] = 1.0
    design = RowDesign(N, P + 1, [FeatureBlock(x, place)], np.r_[1.0, np.zeros(P)])
    q = rng.normal(size=P + 1)
    dense = np.column_stack([np.ones(N), x])
    import pymc_minibatch_mh.data.chunk_pass as chunk_pass

    passes = []
    real_map = chunk_pass.design_map
    monkeypatch.setattr(
        chunk_pass, "design_map", lambda *a, **k: passes.append(1) or real_map(*a, **k)
    )
    every = np.arange(N)
    np.testing.assert_allclose(design.dot(q, every), dense @ q)
    assert passes == [1]
    # Negative controls: a permutation, a repeat and a shorter index are gathered.
    for rows in (every[::-1], np.r_[every[:-1], 0], every[:-1]):
        np.testing.assert_allclose(design.dot(q, rows), dense[rows] @ q)
    assert passes == [1]


@pytest.mark.parametrize(
    "columns", [np.arange(1, P + 1), np.arange(P)[::-1] + 1, np.r_[0, 2 : P + 1]]
)
def test_rows_of_features_placed_in_columns_match_the_dense_design(rng, columns):
    """Rows read from a design whose features sit in consecutive columns (a strided update),
    in reversed or gapped columns (a scatter), with a constant row everywhere."""
    x = rng.normal(size=(N, P))
    place = np.zeros((P, P + 1))
    place[np.arange(P), columns] = 1.0
    constant = rng.normal(size=P + 1)
    design = RowDesign(N, P + 1, [FeatureBlock(x, place)], constant)
    dense = x @ place + constant
    for rows in (slice(None), slice(3, 40), rng.integers(0, N, size=17), 5):
        np.testing.assert_allclose(design[rows], dense[rows], rtol=0, atol=1e-12)
    # Negative control: the features in other columns give another design.
    moved = RowDesign(N, P + 1, [FeatureBlock(x, np.roll(place, 1, axis=1))], constant)
    assert np.abs(moved[slice(None)] - dense).max() > 0.1


def _rows_times(design, rows, values):
    return design[rows] * values[:, None]


def _all_but_last(design, rows):
    return design[rows][:-1]


def _family_model(x, kind: str, rng):
    """A model over covariates ``x`` (an array, or a chunked_data tensor of the same
    values) whose default TunaMH() reads them in a pass of the bounds: a Normal with a
    free sigma (summed exactly), an ordered logistic (ordinal constants), a zero-inflated
    negative binomial with free alpha and psi (three-channel constants)."""
    values = np.asarray(x.eval() if hasattr(x, "eval") else x, dtype=np.float64)
    eta = values @ np.array([0.5, -0.3, 0.2, 0.1])
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=P)
        if kind == "normal":
            sigma = pm.HalfNormal("sigma", 2.0)
            y = eta + rng.normal(size=N)
            pm.Normal("y", x @ beta, sigma, observed=y)
        elif kind == "ordinal":
            cuts = pm.Normal(
                "cuts",
                0,
                3,
                shape=2,
                transform=pm.distributions.transforms.ordered,
                initval=np.array([-1.0, 1.0]),
            )
            y = np.digitize(eta + rng.logistic(size=N), [-1.0, 1.0])
            pm.OrderedLogistic("y", eta=x @ beta, cutpoints=cuts, observed=y)
        else:
            alpha = pm.Exponential("alpha", 0.5)
            psi = pm.Beta("psi", 2, 2)
            mu = np.exp(1.0 + eta)
            counts = rng.negative_binomial(3.0, 3.0 / (3.0 + mu))
            y = np.where(rng.random(N) < 0.7, counts, 0)
            pm.ZeroInflatedNegativeBinomial(
                "y", psi=psi, mu=pm.math.exp(x @ beta), alpha=alpha, observed=y
            )
    return model


@pytest.mark.slow  # 3-7 minutes: three TunaMH() constructions with their passes on a cluster
@pytest.mark.parametrize("kind", ["normal", "ordinal", "zinb"])
def test_the_remaining_bound_passes_run_on_the_cluster(tmp_path, kind, cluster_client):
    """The Normal likelihood's sufficient statistics and TunaMH's ordinal and
    three-channel constants over chunked covariates: Dask tasks on the cluster, the
    values of the in-memory model (controls: the in-memory model runs no such task)."""
    distributed = pytest.importorskip("distributed")
    zarr = pytest.importorskip("zarr")
    x = np.random.default_rng(5).normal(size=(N, P)).astype(np.float32)
    stored = zarr.create_array(store=str(tmp_path / "x.zarr"), data=x, chunks=(CHUNK, P))
    steps = {}
    for name, data in (("memory", x), ("chunked", chunked_data(stored))):
        with distributed.get_task_stream(cluster_client) as stream:
            with _family_model(data, kind, np.random.default_rng(6)):
                steps[name] = TunaMH(progressbar=False)
        steps[name + "_tasks"] = [t for t in stream.data if "_design_chunk_values" in str(t["key"])]
    assert len(steps["chunked_tasks"]) >= N // CHUNK and not steps["memory_tasks"]
    memory, chunked = steps["memory"], steps["chunked"]
    if kind == "normal":  # summed exactly: no row constants, the sums instead
        np.testing.assert_allclose(chunked._exact_sum.gram, memory._exact_sum.gram, rtol=1e-9)
    else:
        # The constants scale with the Laplace sds, from Hessian sums that on a first run
        # are checked differences of the gradient sums (accurate to about 1e-9 of their
        # scale, summed per chunk on the cluster and per block in memory).
        np.testing.assert_allclose(chunked.bound.c, memory.bound.c, rtol=1e-7)


def test_a_user_bound_is_checked_on_every_row_on_the_cluster(tmp_path, cluster_client):
    """TunaMH's check of a user-given bound reads every row once per probe pair: over
    chunked data, as Dask tasks on the cluster; a row with too small a constant is found
    there (control)."""
    distributed = pytest.importorskip("distributed")
    zarr = pytest.importorskip("zarr")
    rng = np.random.default_rng(9)
    x = rng.normal(size=(N, 1)).astype(np.float32)
    y = (rng.random(N) < 1.0 / (1.0 + np.exp(-(0.3 + x[:, 0])))).astype(np.int8)
    stored = zarr.create_array(store=str(tmp_path / "x.zarr"), data=x, chunks=(CHUNK, 1))
    with pm.Model():
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5)
        pm.Bernoulli("y", logit_p=alpha + beta * chunked_data(stored)[:, 0], observed=y)
        c = np.sqrt(1.0 + x[:, 0].astype(np.float64) ** 2)  # ||(1, x_i)||: valid
        step = TunaMH(c=c, proposal="rw", progressbar=False)
        with distributed.get_task_stream(cluster_client) as stream:
            step._probe_bound(step.bound, np.zeros(2), all_rows=True)
        too_small = c.copy()
        too_small[4_321] *= 1e-3
        with pytest.raises(ValueError, match="datum 4321 "):
            TunaMH(c=too_small, proposal="rw", progressbar=False)
    tasks = [t for t in stream.data if "_range_values" in str(t["key"])]
    assert len(tasks) == 3 * N // CHUNK  # three probe pairs, four chunks each
