import os

import numpy as np
import pytest

# Keep BLAS single-threaded: the CI machine has 2 cores and tests may fork.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
