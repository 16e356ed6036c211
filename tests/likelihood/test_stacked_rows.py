"""Data sets of different lengths on one stacked row axis: each row's log-likelihood is its
own data set's, in the order the rows are asked for."""

import numpy as np
import pymc as pm
import pytest
from scipy import special, stats
from tall_builder import tall_data_of

from pymc_minibatch_mh import FlyMC, MinibatchBarker, TunaMH
from pymc_minibatch_mh.likelihood.glm_likelihoods import UnsupportedLikelihood
from pymc_minibatch_mh.likelihood.stacked_rows import StackedRows, stacked_layout

N1, N2, N3 = 300, 120, 70


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x1, x2, x3 = rng.normal(size=N1), rng.normal(size=(N2, 2)), rng.normal(size=N3)
    counts = rng.poisson(np.exp(0.3 + 0.4 * x1))
    answers = (rng.random(N2) < 0.5).astype(int)
    amounts = 1.0 + x3 + rng.normal(size=N3)
    return x1, x2, x3, counts, answers, amounts


def _model(data, *, nan_in_x3=False):
    x1, x2, x3, counts, answers, amounts = data
    if nan_in_x3:
        x3 = x3.copy()
        x3[5] = np.nan
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        level = pm.Normal("level", 0, 1, shape=3)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Poisson("counts", mu=pm.math.exp(level[0] + b * x1), observed=counts)
        pm.Bernoulli(
            "answers",
            logit_p=level[1] + pm.Data("x2", x2) @ pm.math.stack([b, b]),
            observed=answers,
        )
        pm.Normal("amounts", level[2] + b * x3, sigma, observed=amounts)
    return model


def _tall(model, **kwargs):
    return tall_data_of(model, compile_kwargs={"mode": "FAST_COMPILE"}, **kwargs)


def _expected(data, q):
    """Each data set's log-density by scipy, stacked in the model's order."""
    x1, x2, x3, counts, answers, amounts = data
    b, level, log_sigma = q[0], q[1:4], q[4]
    return np.concatenate(
        [
            stats.poisson.logpmf(counts, np.exp(level[0] + b * x1)),
            stats.bernoulli.logpmf(answers, special.expit(level[1] + x2.sum(1) * b)),
            stats.norm.logpdf(amounts, level[2] + b * x3, np.exp(log_sigma)),
        ]
    )


def test_rows_of_every_data_set_in_the_order_asked():
    data = _data()
    tall = _tall(_model(data))
    assert tall.n_data == N1 + N2 + N3
    q = np.array([0.3, 0.2, -0.1, 0.5, 0.1])  # b, level (3), log sigma
    expected = _expected(data, q)
    np.testing.assert_allclose(tall.loglik_full(q), expected, rtol=1e-10)
    idx = np.array([N1 + N2 + 3, 0, N1 + 7, 5, N1 + N2 + 3, N1 - 1, N1, N1 + N2 - 1])
    np.testing.assert_allclose(tall.loglik(q, idx), expected[idx], rtol=1e-10)
    only_one = np.array([2, 9, 2])
    np.testing.assert_allclose(tall.loglik(q, only_one), expected[only_one], rtol=1e-10)
    q_old = q + 0.1
    np.testing.assert_allclose(
        tall.loglik_diff(q, q_old, idx), expected[idx] - _expected(data, q_old)[idx], rtol=1e-9
    )


def test_layout_of_the_stacked_axis():
    assert stacked_layout({"y": 5, "z": 5}) is None
    layout = stacked_layout({"a": 3, "b": 2, "c": 4})
    assert layout == StackedRows(("a", "b", "c"), (3, 2, 4))
    assert layout.offsets == (0, 3, 5) and layout.n_data == 9
    np.testing.assert_array_equal(layout.data_set_of(np.arange(9)), [0, 0, 0, 1, 1, 2, 2, 2, 2])


def test_a_non_finite_covariate_of_one_data_set_is_named():
    with pytest.raises(ValueError, match="non-finite"):
        _tall(_model(_data(), nan_in_x3=True))


def test_data_dim_with_data_sets_of_different_lengths_is_refused():
    with pytest.raises(ValueError, match="data_dim='row' names one row axis"):
        _tall(_model(_data()), data_dim="row")


@pytest.mark.parametrize("step", [TunaMH, FlyMC])
def test_exact_steps_refuse_in_words_naming_the_steps_that_apply(no_map_search, step):
    """The refusal says what to use, without the generic hints about other likelihoods
    (explicit bounds) that do not apply here."""
    with _model(_data()):
        with pytest.raises(UnsupportedLikelihood, match=r"Use MinibatchBarker\(\) or Aus") as err:
            step(progressbar=False)
    assert "bound" not in str(err.value).replace("bounds for", "")


def test_minibatch_barker_samples_data_sets_of_different_lengths():
    with _model(_data()):
        idata = pm.sample(
            step=MinibatchBarker(progressbar=False),
            draws=50,
            tune=50,
            chains=1,
            random_seed=2,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert np.all(np.isfinite(idata.posterior["level"].values))
    assert int(idata.sample_stats["batch_size"].max()) <= N1 + N2 + N3
