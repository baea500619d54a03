"""An order-independent, updatable hash of what each row contributed to the content.

The accumulators are integer sums of per-row (codes, residuals). Each row's contribution is
hashed once, together with the row's identity hash, when it is computed; the content
fingerprint is the sum of those 256-bit digests modulo 2^256 (a multiset hash). Deleting or
inserting rows updates it with a vectorized sum of their stored digests, and it equals a
from-scratch computation exactly when every row contributed the same bits. That is what a
state digest must commit to: the rows alone do not pin the content if the per-row computation
were ever to drift.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .blake2 import blake2b_segments

MODULUS = 2**256
_FEW_DIGESTS = 8
"""Up to this many digests are summed as Python ints read straight from their bytes: for a
few rows that is several times cheaper than the column sums' view, cast and eight shifted
adds (a one-row forget sums four digests: its row and its contribution to each of three
instances)."""


def multiset_sum(digests: np.ndarray) -> int:
    """Σ digests mod 2^256 for an (n, 32) uint8 array of little-endian 256-bit numbers."""
    if len(digests) == 0:
        return 0
    if len(digests) == 1 and isinstance(digests, np.ndarray) and digests.dtype == np.uint8:
        return int.from_bytes(digests.tobytes(), "little")  # one row's forget: < 2^256 already
    if len(digests) <= _FEW_DIGESTS:  # a forget's few rows: each digest as one Python int
        data = np.ascontiguousarray(digests, dtype=np.uint8).tobytes()
        total = sum(int.from_bytes(data[i : i + 32], "little") for i in range(0, len(data), 32))
        return total % MODULUS
    words = np.ascontiguousarray(digests).view("<u4").astype(np.uint64)
    column_sums = words.sum(axis=0)  # each < n · 2^32: exact for n < 2^32
    return sum(int(s) << (32 * j) for j, s in enumerate(column_sums)) % MODULUS


DIGEST_CHUNK_ROWS = 1 << 16
"""Rows hashed per compiled call: bounds the temporary copy of their bytes (≈ 20 MB at 300
bytes a row) whatever n is."""
REFERENCE_ROWS = 4
"""Up to this many rows (a forget's) are hashed by the reference loop: one ``hashlib`` call
per row costs ~8 µs where the batch path's set-up costs ~90 µs (the same digests)."""


def digest_rows(*columns: np.ndarray, person: bytes) -> np.ndarray:
    """One BLAKE2b-256 digest per row over the rows' bytes in ``columns``; (n, 32) uint8.

    Row i's message is, column by column, ``c[i]`` itself when it is ``bytes`` (object
    columns: variable-length, e.g. framed ids) and ``c[i].tobytes()`` otherwise. Numeric and
    bool columns of any shape, and object columns of bytes, are hashed by the compiled batch
    hasher (:mod:`forgetting.content.blake2`); anything else (strings, records) by the
    reference loop, :func:`digest_rows_reference`. Both give the same digests.
    """
    columns = [np.ascontiguousarray(c) for c in columns]
    n = len(columns[0])
    if any(len(c) != n for c in columns):
        raise ValueError("every column needs one entry per row")
    if n <= REFERENCE_ROWS or not all(_batchable(c) for c in columns):
        return digest_rows_reference(*columns, person=person)
    out = np.empty((n, 32), dtype=np.uint8)
    for lo in range(0, n, DIGEST_CHUNK_ROWS):
        hi = min(n, lo + DIGEST_CHUNK_ROWS)
        src, starts, lengths = _segments([c[lo:hi] for c in columns], hi - lo)
        out[lo:hi] = blake2b_segments(src, starts, lengths, digest_size=32, person=person)
    return out


def digest_rows_reference(*columns: np.ndarray, person: bytes) -> np.ndarray:
    """:func:`digest_rows` one ``hashlib`` call per row: the definition the batch path must
    match bit for bit (and the path for column types it does not take)."""
    columns = [np.ascontiguousarray(c) for c in columns]
    out = np.empty((len(columns[0]), 32), dtype=np.uint8)
    for i in range(len(out)):
        h = hashlib.blake2b(digest_size=32, person=person)
        for c in columns:
            item = c[i]
            h.update(item if isinstance(item, bytes) else item.tobytes())
        out[i] = np.frombuffer(h.digest(), dtype=np.uint8)
    return out


def _batchable(c: np.ndarray) -> bool:
    if c.dtype.kind == "O":
        return c.ndim == 1 and all(isinstance(item, bytes) for item in c.tolist())
    # Plain numbers only: a string or record element's .tobytes() is not its row of the buffer.
    return c.ndim >= 1 and c.dtype.kind in "biufc" and c.dtype.fields is None


def _segments(columns: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One flat byte buffer holding every column's rows, and per (row, column) where its bytes
    start in it and how many there are."""
    pieces = []
    starts = np.empty((n, len(columns)), dtype=np.int64)
    lengths = np.empty((n, len(columns)), dtype=np.int64)
    base = 0
    for j, c in enumerate(columns):
        if c.dtype.kind == "O":
            items = c.tolist()
            lengths[:, j] = np.fromiter(map(len, items), dtype=np.int64, count=n)
            data = np.frombuffer(b"".join(items), dtype=np.uint8)
            starts[:1, j] = base
            np.cumsum(lengths[:-1, j], out=starts[1:, j])
            starts[1:, j] += base
        else:
            if c.ndim == 1 and not c.dtype.isnative:
                # c[i] of a 1-d array is a numpy scalar, always in native byte order.
                c = c.astype(c.dtype.newbyteorder("="))
            width = c.dtype.itemsize * int(np.prod(c.shape[1:], dtype=np.int64))
            data = c.reshape(-1).view(np.uint8)
            lengths[:, j] = width
            starts[:, j] = base + width * np.arange(n, dtype=np.int64)
        pieces.append(data)
        base += data.size
    src = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
    return src, starts, lengths


@dataclass
class Contributions:
    """What a set of rows adds to one instance: codes (n, ℓ), int64 residuals (n, k), and a
    digest per row binding both to the row's identity hash."""

    codes: np.ndarray
    residuals: np.ndarray
    digests: np.ndarray

    @classmethod
    def of(cls, row_hashes: np.ndarray, codes: np.ndarray, residuals: np.ndarray):
        residuals = np.ascontiguousarray(residuals, dtype="<i8")
        return cls(
            codes, residuals, digest_rows(row_hashes, codes, residuals, person=b"qss-content")
        )

    def take(self, index: np.ndarray) -> Contributions:
        return Contributions(self.codes[index], self.residuals[index], self.digests[index])
