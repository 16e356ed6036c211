"""Models shared by the step-method tests; built once per session (sampling does not
modify a model)."""

import pymc as pm
import pytest
from step_sampling import (
    gaussian_mean_model,
    logistic_design,
    logistic_regression_model,
)


@pytest.fixture(scope="session")
def gaussian_model():
    return gaussian_mean_model()


@pytest.fixture(scope="session")
def logistic_data():
    return logistic_design()


@pytest.fixture(scope="session")
def logistic_model(logistic_data):
    return logistic_regression_model(*logistic_data)


@pytest.fixture(scope="session")
def logistic_map(logistic_model):
    with logistic_model:
        return pm.find_MAP(progressbar=False)
