"""A process-wide tally of the data rows read by full-data work, in units of passes.

Every loop of the package over all N data rows (validation, mode search, Taylor sums,
bound constants) records the rows it reads here, chunk by chunk, so a pass over a 5 %
subsample counts 0.05. Steps report the tally's growth during their construction as
``n_data_passes``. Per-step minibatch reads during sampling are not recorded here (they
are in the sample stats).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_passes = 0.0


def record_rows(n_rows: int, n_data: int) -> None:
    """Record that ``n_rows`` of the ``n_data`` rows were read by full-data work."""
    global _passes
    if n_data > 0:
        _passes += n_rows / n_data


def data_passes() -> float:
    """Passes over the data recorded so far in this process (rows read / N, summed)."""
    return _passes


@contextmanager
def passes_counted_on(owner) -> Iterator[None]:
    """Add the passes made inside the block to ``owner.n_data_passes`` (a step's tally)."""
    before = data_passes()
    yield
    owner.n_data_passes = round(owner.n_data_passes + data_passes() - before, 3)
