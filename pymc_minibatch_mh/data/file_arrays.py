"""Arrays read from a file (``np.memmap``) cross process boundaries as the file, not as bytes.

PyMC runs chains in worker processes and pickles the step methods to them. Pickling a
memory-mapped array writes its whole contents (NumPy pickles the data), so every chain's
process would hold a private copy of an on-disk data set. :func:`portable` turns a view of
a memory-mapped file into a small description (file name, byte offset, dtype, shape,
strides); :func:`restored` maps the same bytes again in the receiving process, read-only.
Pages of the file are then shared through the operating system's page cache, and a chain
that reads minibatch rows only brings those pages into memory.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FileView:
    """Where a view of a memory-mapped file lies: enough to map it again."""

    filename: str
    file_offset: int  # byte offset in the file of the mapped array's first element
    mapped_bytes: int  # bytes mapped from there on
    view_offset: int  # byte offset of the view's first element within the mapped bytes
    dtype: np.dtype
    shape: tuple
    strides: tuple

    def open(self) -> np.ndarray:
        """The view, mapped read-only from the file."""
        mapped = np.memmap(
            self.filename,
            dtype=np.uint8,
            mode="r",
            offset=self.file_offset,
            shape=(self.mapped_bytes,),
        )
        view = np.ndarray(
            self.shape,
            dtype=self.dtype,
            buffer=mapped,
            offset=self.view_offset,
            strides=self.strides,
        )
        view.setflags(write=False)
        return view


def file_view(array) -> FileView | None:
    """The :class:`FileView` of ``array`` if it is (a view of) a ``np.memmap`` of a file
    that still exists, else None."""
    if not isinstance(array, np.ndarray):
        return None
    # The memmap that owns the mapping (its base is the mmap object); views of it are
    # memmaps too, but carry their parent's file offset, not their own.
    base = array
    while base is not None and not (
        isinstance(base, np.memmap) and isinstance(base.base, mmap.mmap)
    ):
        base = base.base if isinstance(base.base, np.ndarray) else None
    if base is None or not getattr(base, "filename", None):
        return None
    if base.mode == "c":  # copy-on-write: this process's edits are not in the file
        return None
    if not os.path.exists(base.filename):
        return None
    start = array.__array_interface__["data"][0]
    origin = base.__array_interface__["data"][0]
    return FileView(
        filename=os.fspath(base.filename),
        file_offset=int(base.offset),
        mapped_bytes=int(base.nbytes),
        view_offset=int(start - origin),
        dtype=array.dtype,
        shape=tuple(array.shape),
        strides=tuple(array.strides),
    )


def portable(value):
    """``value`` for pickling: a :class:`FileView` for a view of a memory-mapped file,
    anything else unchanged."""
    view = file_view(value)
    return value if view is None else view


def restored(value):
    """Undo :func:`portable` after unpickling."""
    return value.open() if isinstance(value, FileView) else value
