"""Steps built on one model share compiled functions and full-data results; passes are
counted as rows read."""

import numpy as np
import pymc as pm
import pytest
from step_sampling import QUIET, logistic_design, logistic_regression_model

from pymc_minibatch_mh import MinibatchBarker, TunaMH
from pymc_minibatch_mh.likelihood import compiling, function_cache
from pymc_minibatch_mh.likelihood.compiling import DataBoundFunction
from pymc_minibatch_mh.likelihood.differenced_products import DifferencedProducts
from pymc_minibatch_mh.likelihood.numpy_glm import NumpyGLM, evaluate_with_numpy
from pymc_minibatch_mh.likelihood.shared_functions import share_between_steps


@pytest.fixture
def sharing():
    share_between_steps(True)
    yield
    share_between_steps(True)


def _draws(model, step, seed):
    with model:
        idata = pm.sample(
            draws=60, tune=60, chains=1, cores=1, step=step, random_seed=seed, **QUIET
        )
    return np.column_stack(
        [idata.posterior[name].values.reshape(60, -1) for name in ("alpha", "beta")]
    )


@pytest.mark.parametrize("step_class", [MinibatchBarker, TunaMH])
def test_a_second_step_reuses_the_first_steps_functions(sharing, step_class):
    model = logistic_regression_model(*logistic_design(3000))
    with model:
        first = step_class(progressbar=False)
        second = step_class(progressbar=False)
    assert second.tall_data is first.tall_data
    assert second._residual_diff is first._residual_diff
    assert second.reference is first.reference
    assert second.compile_s < 0.5 * first.compile_s
    assert second.n_data_passes < first.n_data_passes


def test_shared_functions_give_the_draws_of_separate_ones(sharing):
    model = logistic_regression_model(*logistic_design(3000))
    with model:
        MinibatchBarker(progressbar=False)  # fills the memo
        shared = MinibatchBarker(progressbar=False)
    share_between_steps(False)
    with model:
        separate = MinibatchBarker(progressbar=False)
    assert separate.tall_data is not shared.tall_data
    np.testing.assert_array_equal(_draws(model, shared, 5), _draws(model, separate, 5))
    # Negative control: the comparison can tell different chains apart.
    assert not np.array_equal(_draws(model, shared, 5), _draws(model, separate, 6))


def test_a_modified_model_or_new_data_is_not_shared(sharing):
    x, y = logistic_design(2000)
    with pm.Model():
        xs = pm.Data("x", x)
        alpha = pm.Normal("alpha", 0, 5)
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=alpha + xs @ beta, observed=y)
        first = MinibatchBarker(progressbar=False)
        assert MinibatchBarker(progressbar=False).tall_data is first.tall_data
        pm.set_data({"x": x[::-1].copy()})
        after_set_data = MinibatchBarker(progressbar=False)
        assert after_set_data.tall_data is not first.tall_data
        pm.Potential("tilt", -0.5 * alpha**2)
        after_potential = MinibatchBarker(progressbar=False)
        assert after_potential.tall_data is not after_set_data.tall_data


def test_a_partial_block_is_not_shared(sharing):
    model = logistic_regression_model(*logistic_design(2000))
    with model:
        first = MinibatchBarker(vars=[model["beta"]], progressbar=False)
        second = MinibatchBarker(vars=[model["beta"]], progressbar=False)
    assert second.tall_data is not first.tall_data


#: The numpy functions of a recognised GLM that read rows, and the position of their
#: row indices (None: all N rows).
_NUMPY_READS = {
    "loglik": 1,
    "loglik_diff": 2,
    "loglik_full": None,
    "chunk_derivatives": 1,
    "weighted_grad": 1,
    "residual_diff": 3,
}


@pytest.mark.parametrize("numpy_functions", [True, False], ids=["numpy", "compiled"])
@pytest.mark.parametrize("step_class", [MinibatchBarker, TunaMH])
def test_construction_reads_the_rows_it_reports(monkeypatch, step_class, numpy_functions):
    """Count the rows every compiled data function (and, for a GLM evaluated with numpy,
    every numpy function) is evaluated on while a step is built (a gathered function
    reads ``len(idx)`` or ``len(rows)`` rows, a full one N; the recogniser's evaluations
    of its own graphs included) and compare with ``n_data_passes``, which also counts the
    passes made outside them (data validation; TunaMH's row norms)."""
    share_between_steps(False)
    n = 100_000  # large enough for the Newton search to start on a subsample
    model = logistic_regression_model(*logistic_design(n))
    rows = []
    original = DataBoundFunction.__call__

    differencing = [False]

    def counting(self, *args):
        names = [i.variable.name for i in self.function.maker.inputs]
        index = next((names.index(k) for k in ("idx", "rows") if k in names), None)
        if not differencing[0]:
            rows.append(n if index is None else len(args[index]))
        return original(self, *args)

    differenced = DifferencedProducts.__call__

    def counting_differences(self, x, columns, idx):
        """Gradient sums on one block of rows, read once, evaluated many times."""
        rows.append(len(idx))
        differencing[0] = True
        try:
            return differenced(self, x, columns, idx)
        finally:
            differencing[0] = False

    monkeypatch.setattr(DifferencedProducts, "__call__", counting_differences)

    def counting_numpy(name, index):
        method = getattr(NumpyGLM, name)

        def call(self, *args):
            rows.append(n if index is None else len(args[index]))
            return method(self, *args)

        return call

    monkeypatch.setattr(DataBoundFunction, "__call__", counting)
    for name, index in _NUMPY_READS.items():
        monkeypatch.setattr(NumpyGLM, name, counting_numpy(name, index))
    evaluate_with_numpy(numpy_functions)
    try:
        with model:
            step = step_class(progressbar=False)
    finally:
        share_between_steps(True)
        evaluate_with_numpy(True)
    assert (step.tall_data.numpy_glm is not None) is numpy_functions
    other_passes = {MinibatchBarker: 1, TunaMH: 2}[step_class]
    through_functions = sum(rows) / n
    # Probe rows of the self-checks add a few dozen rows (< 0.01 pass).
    assert through_functions == pytest.approx(step.n_data_passes - other_passes, abs=0.01)
    assert step.n_data_passes <= 10
    # Negative control: one more full evaluation is seen by the row count.
    step.tall_data.loglik_full(step.reference.reference)
    assert sum(rows) / n == pytest.approx(through_functions + 1, abs=1e-9)


def test_a_step_built_from_stored_functions_samples_the_same_chain(sharing, tmp_path, monkeypatch):
    """The on-disk cache: a step whose functions were loaded samples the chain of a step
    whose functions were compiled."""
    monkeypatch.setenv(function_cache.ENVIRONMENT_VARIABLE, str(tmp_path))
    model = logistic_regression_model(*logistic_design(3000))
    share_between_steps(False)  # every step compiles (or loads) its own functions
    try:
        function_cache.use_function_cache(False)
        with model:
            compiled = TunaMH(progressbar=False)
        function_cache.use_function_cache(True)
        with model:
            TunaMH(progressbar=False)  # stores
        before = compiling.functions_loaded()
        with model:
            loaded = TunaMH(progressbar=False)
        assert compiling.functions_loaded() - before >= 5
    finally:
        function_cache.use_function_cache(True)
        share_between_steps(True)
    np.testing.assert_array_equal(_draws(model, compiled, 3), _draws(model, loaded, 3))
    # Negative control: the comparison tells different chains apart.
    assert not np.array_equal(_draws(model, compiled, 3), _draws(model, loaded, 4))
