"""Features kept on disk: the row store's X in a file instead of RAM (``RowStore.spill``).

Only the features leave memory; everything a deletion subtracts stays in RAM, so a forget
costs what it costs in memory while a rebuild streams the features in bounded chunks.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np


class DiskRows:
    """float32 feature rows of fixed width in a file: the row store's X out of RAM.

    Rows are read and written with ``pread``/``pwrite`` (no memory map), so the memory a read
    costs is the rows it returns: a rebuild streaming chunks of ``chunk_rows`` rows holds one
    chunk, whatever the file's size. Supports the slice of the ndarray interface the engine
    uses on X — ``shape``, ``dtype``, ``len``, reads by int / slice / int array / bool mask,
    writes by slice / int array (values or a scalar) — so the store's code is the same for
    both. A freed slot is overwritten with zeros *in the file* (design.md §5.7); the file
    holds nothing but the live rows' features (no ids, labels or codes).
    """

    dtype = np.dtype("<f4")
    ndim = 2

    def __init__(self, path: str | os.PathLike, n_features: int, n_rows: int, *, temp: bool):
        self.path = Path(path)
        self.n_features = int(n_features)
        self._row_bytes = self.n_features * self.dtype.itemsize
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._n_rows = 0
        self._finalizer = weakref.finalize(self, _close_row_file, self._fd, self.path, temp)
        self.resize(n_rows)

    @classmethod
    def create(cls, directory: str | os.PathLike, n_features: int, n_rows: int) -> DiskRows:
        """A new zero-filled file of ``n_rows`` rows in ``directory``, removed with the object."""
        Path(directory).mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="rows-", suffix=".f32", dir=directory)
        os.close(fd)
        return cls(name, n_features, n_rows, temp=True)

    @property
    def shape(self) -> tuple[int, int]:
        return (self._n_rows, self.n_features)

    def __len__(self) -> int:
        return self._n_rows

    def resize(self, n_rows: int) -> None:
        """Grow (zero-filled) or shrink the file to ``n_rows`` rows."""
        os.ftruncate(self._fd, int(n_rows) * self._row_bytes)
        self._n_rows = int(n_rows)

    def close(self) -> None:
        self._finalizer()

    def _index(self, key) -> tuple[np.ndarray | None, int, int]:
        """(positions, or None for the contiguous range [start, stop))."""
        if isinstance(key, slice):
            start, stop, step = key.indices(self._n_rows)
            if step == 1:
                return None, start, max(start, stop)
            return np.arange(start, stop, step, dtype=np.intp), 0, 0
        idx = np.asarray(key)
        if idx.dtype == bool:
            if idx.shape != (self._n_rows,):
                raise IndexError(f"boolean index of shape {idx.shape} for {self._n_rows} rows")
            return np.flatnonzero(idx), 0, 0
        idx = idx.astype(np.intp, copy=False).reshape(-1)
        idx = np.where(idx < 0, idx + self._n_rows, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= self._n_rows):
            raise IndexError(f"row index out of range for {self._n_rows} rows")
        return idx, 0, 0

    def _runs(self, idx: np.ndarray) -> Iterator[tuple[int, int, int]]:
        """(offset into idx, first row, count) of each run of consecutive rows in ``idx``."""
        if idx.size == 0:
            return
        breaks = np.flatnonzero(np.diff(idx) != 1) + 1
        starts = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [idx.size]])
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            yield a, int(idx[a]), b - a

    def _read(self, first: int, count: int, out: np.ndarray) -> None:
        view = memoryview(out.reshape(-1).view(np.uint8))
        done, want, offset = 0, count * self._row_bytes, first * self._row_bytes
        while done < want:
            got = os.preadv(self._fd, [view[done:want]], offset + done)
            if got <= 0:
                raise OSError(f"short read from {self.path}")
            done += got

    def _write(self, first: int, rows: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(rows, dtype=self.dtype).reshape(-1).view(np.uint8))
        done, offset = 0, first * self._row_bytes
        while done < len(data):
            done += os.pwrite(self._fd, data[done:], offset + done)

    def __getitem__(self, key) -> np.ndarray:
        columns = None
        if isinstance(key, tuple):
            key, columns = key
        scalar = isinstance(key, int | np.integer)
        idx, start, stop = self._index([key] if scalar else key)
        if idx is None:
            out = np.empty((stop - start, self.n_features), dtype=self.dtype)
            self._read(start, stop - start, out)
        else:
            out = np.empty((idx.size, self.n_features), dtype=self.dtype)
            for at, first, count in self._runs(idx):
                self._read(first, count, out[at : at + count])
        if scalar:
            out = out[0]
        return out if columns is None else out[..., columns]

    def __setitem__(self, key, values) -> None:
        idx, start, stop = self._index(key)
        n = (stop - start) if idx is None else idx.size
        values = np.broadcast_to(np.asarray(values, dtype=self.dtype), (n, self.n_features))
        if idx is None:
            for a in range(0, n, _IO_ROWS):
                self._write(start + a, values[a : a + _IO_ROWS])
            return
        for at, first, count in self._runs(idx):
            self._write(first, values[at : at + count])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def head(self, n_rows: int) -> DiskRows:
        """A view of the first ``n_rows`` rows (same file, no copy)."""
        view = object.__new__(DiskRows)
        view.path, view.n_features, view._row_bytes = self.path, self.n_features, self._row_bytes
        view._fd, view._n_rows = self._fd, int(n_rows)
        view._finalizer = weakref.finalize(view, lambda _owner: None, self)  # keeps self alive
        return view

    def snapshot(self, n_rows: int, directory: str | os.PathLike | None = None) -> DiskRows:
        """A private copy of the first ``n_rows`` rows (a background rebuild's snapshot), copied
        file to file in bounded pieces; removed when the copy is dropped."""
        copy = DiskRows.create(directory or self.path.parent, self.n_features, n_rows)
        for a in range(0, n_rows, _IO_ROWS):
            copy[a : min(a + _IO_ROWS, n_rows)] = self[a : min(a + _IO_ROWS, n_rows)]
        return copy


_IO_ROWS = 1 << 16
"""Rows per read or write when DiskRows copies ranges: bounds the copy's buffer."""


def _close_row_file(fd: int, path: Path, temp: bool) -> None:
    os.close(fd)
    if temp:
        path.unlink(missing_ok=True)


def copy_rows(dst, dst_start: int, src, n_rows: int) -> None:
    """dst[dst_start : dst_start + n_rows] = src[:n_rows], in pieces when either is on disk."""
    if not isinstance(dst, DiskRows) and not isinstance(src, DiskRows):
        dst[dst_start : dst_start + n_rows] = src[:n_rows]
        return
    for a in range(0, n_rows, _IO_ROWS):
        b = min(a + _IO_ROWS, n_rows)
        dst[dst_start + a : dst_start + b] = src[a:b]
