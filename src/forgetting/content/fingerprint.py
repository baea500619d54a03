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

MODULUS = 2**256


def multiset_sum(digests: np.ndarray) -> int:
    """Σ digests mod 2^256 for an (n, 32) uint8 array of little-endian 256-bit numbers."""
    if len(digests) == 0:
        return 0
    words = np.ascontiguousarray(digests).view("<u4").astype(np.uint64)
    column_sums = words.sum(axis=0)  # each < n · 2^32: exact for n < 2^32
    return sum(int(s) << (32 * j) for j, s in enumerate(column_sums)) % MODULUS


def digest_rows(*columns: np.ndarray, person: bytes) -> np.ndarray:
    """One BLAKE2b-256 digest per row over the rows' bytes in ``columns``; (n, 32) uint8."""
    columns = [np.ascontiguousarray(c) for c in columns]
    out = np.empty((len(columns[0]), 32), dtype=np.uint8)
    for i in range(len(out)):
        h = hashlib.blake2b(digest_size=32, person=person)
        for c in columns:
            item = c[i]
            h.update(item if isinstance(item, bytes) else item.tobytes())
        out[i] = np.frombuffer(h.digest(), dtype=np.uint8)
    return out


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
