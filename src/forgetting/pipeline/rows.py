"""The rows a pipeline holds, and the rows held after a change, as its steps see them.

:class:`Current` gives the preprocessing the input it asks for during a change — all rows
held after it, only the D° rows, or only the rows held before too — built once per selection
and in canonical order (:func:`~forgetting.preprocessing.table.canonical_order`).
:func:`rows_hash` is the order-free multiset hash of the raw rows the state digest commits to.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..content.blake2 import blake2b_many
from ..preprocessing.base import Rows
from ..preprocessing.table import (
    Layout,
    RowBuffer,
    Table,
    canonical_order,
    concat_rows,
    take,
)


class Current:
    """The rows held after a change, in canonical order, each selection computed once when
    first asked: ``current(which)`` gives the preprocessing's input (:data:`Rows`) for
    ``"all"`` of them, the D° ones (``"schema"``) or those held before too (``"staying"``)."""

    def __init__(
        self,
        buffer: RowBuffer,
        layout: Layout,
        kept: np.ndarray,
        members: np.ndarray,
        new: dict[str, Any] | None,
    ):
        self._buffer = buffer
        self._layout = layout
        self._kept = kept
        self._members = members
        self._new = new
        self._cache: dict[str, Rows] = {}
        self._ids: np.ndarray | None = None

    def _arrays(self, which: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """(X, y, ids, members) of rows ``which`` (indices into kept + new), canonical order."""
        buf = self._buffer
        n_kept = self._kept.size
        old = which[which < n_kept]
        fresh = which[which >= n_kept] - n_kept
        pos = self._kept[old]
        X = buffer_rows(buf, self._layout, pos)
        y, ids = buf.get("y")[pos], buf.get("ids")[pos]
        d, raw = buf.get("draws")[pos], buf.get("id_raw")[pos]
        if self._new is not None and fresh.size:
            new = self._new
            X = concat_rows([X, take(new["X"], fresh)])
            y = np.concatenate([y, new["y"][fresh]])
            ids = np.concatenate([ids, new["ids"][fresh]])
            d = np.concatenate([d, new["draws"][fresh]])
            raw = np.concatenate([raw, new["id_raw"][fresh]])
        order = canonical_order(d, raw.tolist())
        members = self._members[np.concatenate([old, fresh + n_kept])][order]
        return take(X, order), y[order], ids[order], members

    def __call__(self, which: str) -> Rows:
        if which == "staying" and self._new is None:
            which = "all"
        if which not in self._cache:
            rows = np.arange(self._members.size)
            if which == "schema":
                rows = rows[self._members]
            elif which == "staying":
                rows = rows[: self._kept.size]
            X, y, ids, members = self._arrays(rows)
            if which == "all":
                self._ids = ids
            self._cache[which] = Rows(X, y, None if which == "schema" else members)
        return self._cache[which]

    def ids(self) -> np.ndarray:
        """The ids of ``self("all")``, in its order."""
        self("all")
        return self._ids


def labels(y: Any, n: int) -> np.ndarray:
    if y is None:
        raise ValueError("the pipeline requires y to be passed, but the target y is None")
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {arr.shape}")
    if len(arr) != n:
        raise ValueError(
            f"Found input variables with inconsistent numbers of samples: [{n}, {len(arr)}]"
        )
    return arr


def object_array(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def x_parts(X: Any) -> dict[str, np.ndarray]:
    if isinstance(X, np.ndarray):
        return {"x": X}
    return {f"c{j}": c for j, c in enumerate(X.columns)}


def buffer_rows(buf: RowBuffer, layout: Layout, pos: np.ndarray) -> Any:
    if layout.matrix:
        return buf.get("x")[pos]
    return Table(tuple(buf.get(f"c{j}")[pos] for j in range(len(layout.kinds))), layout.names)


def _framed(b: bytes) -> bytes:
    return len(b).to_bytes(4, "little") + b


def rows_hash(buf: RowBuffer, pos: Any, stop: int | None = None) -> int:
    """Σ mod 2^256 over rows ``pos`` (or ``pos:stop``) of a BLAKE2b-256 hash of (id, label,
    raw values): the same for the same multiset of rows however held, and a forget subtracts
    its rows' terms. The rows are hashed in one compiled batch."""
    if stop is not None:
        pos = np.arange(pos, stop)
    n = len(pos)
    if n == 0:
        return 0
    pieces = [
        [_framed(b) for b in buf.get("id_raw")[pos].tolist()],
        [_framed(repr(v).encode()) for v in buf.get("y")[pos].tolist()],
    ]
    values = [buf.get(k)[pos] for k in buf.names if k == "x" or k.startswith("c")]
    numeric = [v for v in values if v.dtype != object]
    if numeric:
        M = np.ascontiguousarray(np.column_stack(numeric), dtype="<f8")
        raw, width = M.tobytes(), M.shape[1] * 8
        pieces.append([raw[i * width : (i + 1) * width] for i in range(n)])
    for column in (v for v in values if v.dtype == object):
        pieces.append(
            [b"\xff\xff\xff\xff" if v is None else _framed(v.encode()) for v in column.tolist()]
        )
    messages = [b"".join(row) for row in zip(*pieces, strict=True)]
    digests = blake2b_many(messages, digest_size=32, person=b"qss-pipe-row")
    limbs = digests.view("<u8").reshape(n, 4).astype(object).sum(axis=0)
    return sum(int(s) << (64 * k) for k, s in enumerate(limbs)) % (1 << 256)
