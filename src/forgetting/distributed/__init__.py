"""Fit, insert and rebuild QSS models on a dask.distributed cluster (docs/distributed.md).

dask is optional (``pip install "forgetting[distributed]"``): importing this package does not
import it; the functions that need it import it when called. The chunked row work itself
(:mod:`.chunks`) is plain numpy and is what every local build runs too.
"""

from __future__ import annotations

from ..engine.builds import DEFAULT_CHUNK_ROWS, LocalRowWork, check_chunk_rows
from .fit import (
    ChunkDone,
    fit_distributed,
    fit_progress,
    insert_distributed,
    is_distributed_input,
    keep_rows_on_disk,
)
from .work import DaskRowWork

__all__ = [
    "ChunkDone",
    "DEFAULT_CHUNK_ROWS",
    "DaskRowWork",
    "LocalRowWork",
    "check_chunk_rows",
    "fit_distributed",
    "fit_progress",
    "insert_distributed",
    "is_distributed_input",
    "keep_rows_on_disk",
]
