"""Per-row identity hashes: what the row store's multiset hash (so the state digest) sums.

A pure function of one row's id, target, pool flag and features, kept apart from the store so
that any process can hash any chunk of rows (the distributed fit's workers do, next to the
rows they read) and bring the hashes to the store with the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..content.fingerprint import digest_rows


def row_hashes(
    id_bytes: Sequence[bytes], targets: np.ndarray, in_pool: np.ndarray, X: np.ndarray
) -> np.ndarray:
    """The identity hash of each row: BLAKE2b over (framed id, target, pool flag, float32
    features), (n, 32) uint8. A pure per-row function, so any process may compute it for any
    chunk of rows (forgetting.distributed does, on the workers)."""
    framed = np.array([len(b).to_bytes(4, "little") + b for b in id_bytes], dtype=object)
    return digest_rows(
        framed,
        np.asarray(targets),
        np.asarray(in_pool, dtype=bool),
        np.asarray(X, dtype=np.float32),
        person=b"qss-row",
    )
