"""How a model's data becomes stored values: the kinds of the encoded entries, each row's
record and each contribution's blob (read back, and checked, by :mod:`.decode`)."""

from __future__ import annotations

import numpy as np

from ..labels import is_labeled
from ..schema.membership import id_bytes
from ..snapshots import EngineSnapshot, InstanceSnapshot

META_KIND = "forgetting-store-meta"
SCHEMA_KIND = "forgetting-schema"
KEY_KIND = "forgetting-secret-key"
PRIVACY_KIND = "forgetting-privacy-ledger"


def blob(inst: InstanceSnapshot, j: int) -> bytes:
    """A row's contribution: its codes, then its int64 residuals (little-endian)."""
    return inst.codes[j].tobytes() + inst.residuals[j].astype("<i8", copy=False).tobytes()


def records(snap: EngineSnapshot, first_seq: int, instances) -> list[tuple]:
    """Row tuples for the store, with contributions for ``instances`` (labeled rows only)."""
    rows = snap.rows
    labeled = is_labeled(rows.targets)
    wanted = [r for r in instances if snap.instances[r] is not None]
    index = np.cumsum(labeled) - 1  # position among the labeled rows
    X = np.ascontiguousarray(rows.X, dtype="<f4")
    out = []
    for p, row_id in enumerate(rows.ids):
        blobs: list[bytes | None] = [None] * len(snap.instances)
        target = None
        if labeled[p]:
            target = float(rows.targets[p])
            for r in wanted:
                blobs[r] = blob(snap.instances[r], int(index[p]))
        out.append(
            (
                id_bytes(row_id),
                first_seq + p,
                X[p].tobytes(),
                target,
                int(bool(rows.in_pool[p])),
                *blobs,
            )
        )
    return out
