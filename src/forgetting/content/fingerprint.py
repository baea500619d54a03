"""An order-independent, updatable hash of what each row contributed to the content.

The accumulators are integer sums of per-row (codes, residuals). Hashing each row's
contribution together with the row's identity hash, and adding the hashes modulo 2^256 (a
multiset hash), gives a fingerprint that deletions and insertions update in O(rows touched)
and that equals a from-scratch computation exactly when every row contributed the same bits.
That is what a state digest must commit to: the rows alone do not pin the content if the
per-row computation were ever to drift.
"""

from __future__ import annotations

import hashlib

import numpy as np

MODULUS = 2**256


def contribution_hash(row_hashes: np.ndarray, codes: np.ndarray, residuals: np.ndarray) -> int:
    """Σ_i H(row_hash_i, codes_i, residuals_i) mod 2^256 over the given rows."""
    total = 0
    codes = np.ascontiguousarray(codes)
    residuals = np.ascontiguousarray(residuals, dtype="<i8")
    for i in range(len(codes)):
        h = hashlib.blake2b(row_hashes[i].tobytes(), digest_size=32, person=b"qss-content")
        h.update(codes[i].tobytes())
        h.update(residuals[i].tobytes())
        total += int.from_bytes(h.digest(), "little")
    return total % MODULUS
