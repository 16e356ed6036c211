"""How many data rows row-wise work handles at once.

Full-data passes, minibatch evaluations of very large index sets, the recogniser's
evaluations and the computation of per-row constants all walk the rows in blocks of
:data:`BLOCK_ROWS`, so that their temporaries (a few vectors of one block each) stay
bounded whatever N. Passes over a design matrix use :func:`rows_per_chunk` instead,
whose blocks shrink as the number of columns grows. Modules read these values through
the module (``blocks.BLOCK_ROWS``) at call time, so a test can make every block small
with one ``monkeypatch.setattr``.
"""

from __future__ import annotations

#: Rows per block of row-wise work (one ``(block,)`` float64 vector each: 512 kB).
BLOCK_ROWS = 65_536

#: Design entries per block of a full-data pass over a design matrix (4 MB of float64).
CHUNK_ENTRIES = 2**19


def rows_per_chunk(width: int) -> int:
    """Rows per block of a full-data pass over a design with ``width`` columns."""
    return max(1024, CHUNK_ENTRIES // max(1, int(width)))
