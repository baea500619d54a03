"""The two halves of a background rebuild that do not manage threads: copying the rows in
pieces while forgets and predictions go on, and bringing the rebuilt instance up to the rows
present when it lands (design.md §4).

The engine (:mod:`.core`) owns the threads, the generations that supersede a rebuild and the
lock; these functions take the lock and the row store they work on as arguments.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np

from ..content.fingerprint import Contributions
from ..instance import Instance, RowData, contributions_with_features
from ..rows import RowStore

SNAPSHOT_CHUNK_ROWS = 1 << 12
"""Rows a background rebuild copies per hold of the engine lock (:func:`copy_in_pieces`):
2 MB of features at d = 128 float32 — what a prediction may wait behind it."""
SNAPSHOT_YIELD_S = 2e-4
"""The pause between two of those holds. Python's locks are not fair: a thread that releases
a lock and takes it again at once wins against a waiter that still has to wake up, so without
a pause a prediction that arrived during the copy waits for all of it
(tests/engine/test_rebuilds.py checks it lands between pieces)."""


def copy_in_pieces(
    lock: AbstractContextManager,
    rows_now: Callable[[], RowStore],
    superseded: Callable[[], bool],
    columns: list[np.ndarray],
) -> int | None:
    """Fill ``columns`` (preallocated, one per primary column of the row store, n rows each)
    with the rows' columns, :data:`SNAPSHOT_CHUNK_ROWS` rows per hold of ``lock`` and a
    pause between holds. Returns the rows copied (fewer than n when removals shrank the
    store meanwhile), or None when ``superseded()`` says the rebuild was superseded.

    Each row's columns are copied together, so every copied row is a row as it was at some
    moment; a row moves only from the tail into a hole of a removal (``RowStore.remove``),
    i.e. towards positions already copied, so no row is copied twice — one moved meanwhile is
    missed, and the rows that changed during the copy are exactly what :func:`reconcile`
    matches by serial anyway (a missed D° row makes the build stale: it starts over)."""
    n = len(columns[0])
    copied = 0
    while copied < n:
        with lock:
            if superseded():
                return None
            rows = rows_now()
            stop = min(copied + SNAPSHOT_CHUNK_ROWS, n, rows.size)
            if stop <= copied:  # removals shrank the store below what is copied
                break
            for out, column in zip(columns, rows.primary_columns(), strict=True):
                out[copied:stop] = column[copied:stop]
        copied = stop
        time.sleep(SNAPSHOT_YIELD_S)
    return copied


def reconcile(
    rows: RowStore,
    r: int,
    label_mode: bool,
    data: RowData,
    instance: Instance,
    pos: np.ndarray,
    built: Contributions,
    order: np.ndarray | None = None,
) -> bool:
    """Bring instance ``r``, rebuilt from the snapshot ``data``, up to the current ``rows``;
    False (nothing changed) if its schema is stale.

    ``built`` holds the contributions of the snapshot's labeled rows at ``pos``. Rows are
    matched by serial (a row's serial changes whenever its content does); ``order``, the
    argsort of the snapshot's serials, when computed already (outside the lock). Rows removed
    since the snapshot are subtracted, rows added are encoded and added; a removed or added
    row of the new D°_r (or, in label mode, of the codebook's pool) makes the schema stale.
    Call under the engine lock; the caller activates the instance on True."""
    current = rows.serial[: rows.size]
    if order is None:
        order = np.argsort(data.serial)
    sorted_serials = data.serial[order]
    at = np.searchsorted(sorted_serials, current).clip(max=max(len(order) - 1, 0))
    present_before = (len(order) > 0) & (sorted_serials[at] == current)
    added = np.flatnonzero(~present_before)
    removed = np.flatnonzero(~np.isin(data.serial, current))
    stale = np.any(data.members(r, rows.membership)[removed]) or np.any(rows.members(r)[added])
    if label_mode:
        stale = stale or np.any(data.in_pool[removed]) or np.any(rows.in_pool[added])
    if stale:
        return False
    slot = np.full(len(data.serial), -1, dtype=np.intp)
    slot[pos] = np.arange(len(pos))
    gone = slot[removed]
    gone = gone[gone >= 0]
    instance.subtract_rows(built.take(gone), data.folds[pos[gone]], data.X[pos[gone]])
    labeled_now = np.flatnonzero(rows.labeled())
    kept = labeled_now[present_before[labeled_now]]
    fresh = labeled_now[~present_before[labeled_now]]
    fresh_contrib, fresh_features = contributions_with_features(
        instance.schema, rows.X[fresh], rows.targets[fresh], rows.row_hash[fresh]
    )  # one φ pass for the contributions and the head's features
    instance.add_encoded(fresh_contrib, rows.folds(fresh), fresh_features)
    rows.set_instance_rows(r, kept, built.take(slot[order[at[kept]]]))
    rows.set_instance_rows(r, fresh, fresh_contrib)
    return True
