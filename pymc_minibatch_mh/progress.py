"""Progress display for long one-off precomputations (full-data passes, optimisation)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from typing import TypeVar

Item = TypeVar("Item")


def progress_bar(items: Iterable[Item], description: str, *, enabled: bool) -> Iterator[Item]:
    """Iterate over ``items``, showing a rich progress bar on the terminal when ``enabled``.

    Rich is a dependency of PyMC and draws the same style of bar as ``pm.sample``.
    """
    if not enabled:
        yield from items
        return
    from rich.progress import track

    total = len(items) if isinstance(items, Sized) else None
    yield from track(items, description=description, total=total, transient=False)


@contextmanager
def progress_status(description: str, *, enabled: bool) -> Iterator[None]:
    """Show a spinner with ``description`` on the terminal while the block runs, when
    ``enabled`` (for one-off passes over the data that have no natural progress count)."""
    if not enabled:
        yield
        return
    from rich.console import Console

    with Console().status(description):
        yield
