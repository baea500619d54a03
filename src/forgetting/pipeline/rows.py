"""The rows a pipeline holds, and the rows held after a change, as its steps see them.

:class:`Current` gives the preprocessing the input it asks for during a change — all rows
held after it, only the D° rows, or only the rows held before too — built once per selection
and in canonical order (:func:`~forgetting.preprocessing.table.canonical_order`).
:func:`rows_hash` is the order-free multiset hash of the raw rows the state digest commits to.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

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


def rows_hash(buf: RowBuffer, pos: Any, stop: int | None = None) -> int:
    """Σ over rows ``pos`` (or ``pos:stop``) of a 256-bit hash of (id, raw values, label)."""
    if stop is not None:
        pos = np.arange(pos, stop)
    id_raw = buf.get("id_raw")[pos].tolist()
    y = buf.get("y")[pos].tolist()
    parts = [buf.get(k)[pos] for k in buf.names if k == "x" or k.startswith("c")]
    total = 0
    for r in range(len(id_raw)):
        h = hashlib.blake2b(digest_size=32, person=b"qss-pipe-row")
        h.update(len(id_raw[r]).to_bytes(4, "little") + id_raw[r])
        h.update(repr(y[r]).encode())
        for part in parts:
            v = part[r]
            if isinstance(v, np.ndarray):
                h.update(np.ascontiguousarray(v, dtype="<f8").tobytes())
            elif v is None:
                h.update(b"\x00")
            elif isinstance(v, str):
                b = v.encode("utf-8")
                h.update(b"s" + len(b).to_bytes(8, "little") + b)
            else:
                h.update(b"f" + np.float64(v).tobytes())
        total += int.from_bytes(h.digest(), "little")
    return total % (1 << 256)
