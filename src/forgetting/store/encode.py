"""How a model's data becomes stored values: the kinds of the encoded entries, each row's
record and each contribution's blob (read back, and checked, by :mod:`.decode`)."""

from __future__ import annotations

import json
import math
from typing import Any

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


def records(
    snap: EngineSnapshot, first_seq: int, instances, raw: list[bytes] | None = None
) -> list[tuple]:
    """Row tuples for the store, with contributions for ``instances`` (labeled rows only).
    ``raw``: a table model's rows as :func:`raw_rows` encodes them, stored in place of the
    encoded features (the encoding is refitted from them on open)."""
    rows = snap.rows
    labeled = is_labeled(rows.targets)
    wanted = [r for r in instances if snap.instances[r] is not None]
    index = np.cumsum(labeled) - 1  # position among the labeled rows
    if raw is None:
        X = np.ascontiguousarray(rows.X, dtype="<f4")
        raw = [X[p].tobytes() for p in range(len(rows.ids))]
    elif len(raw) != len(rows.ids):
        raise ValueError("one raw row per row is needed")
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
                raw[p],
                target,
                int(bool(rows.in_pool[p])),
                *blobs,
            )
        )
    return out


def stored_fitted(fitted: dict[str, Any]) -> tuple[dict[str, Any], list[bytes] | None]:
    """A snapshot's fitted attributes as the model entry keeps them, and a table model's raw
    rows (:func:`raw_rows`, in the snapshot's row order; None for numeric rows). Of a table
    model's ``table_`` the entry keeps the column names and kinds only: the raw values live
    in the rows table, one row each, so a forget deletes them."""
    table = fitted.get("table_")
    if table is None:
        return fitted, None
    meta = {"names": list(table["names"]), "kinds": list(table["kinds"])}
    return {**fitted, "table_": meta}, raw_rows(table["columns"])


def raw_rows(columns: list[np.ndarray]) -> list[bytes]:
    """A table model's raw rows (``table_.stored``'s columns: float64 with NaN for a missing
    number, or str/None) as one JSON array per row: a number as its shortest repr (read back
    to the same float64), text as a string, a missing value as null. JSON, never code."""
    n = len(columns[0]) if columns else 0
    as_lists = [
        [None if math.isnan(v) else v for v in c.tolist()] if c.dtype == np.float64 else c.tolist()
        for c in columns
    ]
    return [
        json.dumps([col[i] for col in as_lists], ensure_ascii=False, allow_nan=False).encode()
        for i in range(n)
    ]
