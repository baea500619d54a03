"""Per-row identity hashes: what the row store's multiset hash (so the state digest) sums.

A pure function of one row's id, target, pool flag and features, kept apart from the store so
that any process can hash any chunk of rows (the distributed fit's workers do, next to the
rows they read) and bring the hashes to the store with the rows.

It hashes a row's values, not their bytes: −0.0 is hashed as +0.0 and every NaN as numpy's
one NaN (:func:`canonical_floats`), since no model tells them apart — two fits whose
predictions are equal by construction must digest alike (issue 73). Every other value is
hashed as it is stored.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..content.fingerprint import digest_rows

CANONICAL_CHUNK = 1 << 22
"""Feature values made canonical at a time (a float copy of this many: 16 MB in float32)."""


_FLOAT_BITS = {
    4: (np.uint32, 0x7FFFFFFF, 0x7F800000, 0x7FC00000),
    8: (np.uint64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000, 0x7FF8000000000000),
}
"""Per float width: its bits as an unsigned integer, the magnitude mask, the bits of
infinity (a larger magnitude is a NaN) and numpy's NaN."""


def canonical_floats(a: np.ndarray) -> np.ndarray:
    """A copy of float array ``a`` (native byte order) with every zero +0.0 and every NaN
    numpy's NaN, the bits of every other value kept; any other array as it is. Done on the
    bits, so no floating-point mode (flush-to-zero) can touch a subnormal."""
    a = np.asarray(a)
    if a.dtype.kind not in "fc":
        return a
    out = np.array(a, dtype=a.dtype.newbyteorder("="), order="C", copy=True)
    if a.dtype.kind == "f" and a.dtype.itemsize in _FLOAT_BITS:
        uint, magnitude_mask, infinity, nan = _FLOAT_BITS[a.dtype.itemsize]
        bits = out.view(uint)
        magnitude = bits & uint(magnitude_mask)
        bits[magnitude == 0] = 0
        bits[magnitude > uint(infinity)] = uint(nan)
        return out
    with np.errstate(invalid="ignore"):  # float16, longdouble, complex: by arithmetic
        out += a.dtype.type(0)  # -0.0 + 0.0 = +0.0
    out[np.isnan(out)] = np.nan
    return out


def row_hashes(
    id_bytes: Sequence[bytes], targets: np.ndarray, in_pool: np.ndarray, X: np.ndarray
) -> np.ndarray:
    """The identity hash of each row: BLAKE2b over (framed id, target, pool flag, float32
    features), (n, 32) uint8, of canonical floats. A pure per-row function, so any process
    may compute it for any chunk of rows (forgetting.distributed does, on the workers)."""
    X = np.asarray(X, dtype=np.float32)
    targets = canonical_floats(np.asarray(targets))
    in_pool = np.asarray(in_pool, dtype=bool)
    framed = np.array([len(b).to_bytes(4, "little") + b for b in id_bytes], dtype=object)
    step = max(1, CANONICAL_CHUNK // max(X[:1].size, 1))
    if len(framed) <= step:
        return _hashes(framed, targets, in_pool, canonical_floats(X))
    out = np.empty((len(framed), 32), np.uint8)
    for lo in range(0, len(framed), step):
        at = slice(lo, lo + step)
        out[at] = _hashes(framed[at], targets[at], in_pool[at], canonical_floats(X[at]))
    return out


def _hashes(framed, targets, in_pool, X) -> np.ndarray:
    return digest_rows(framed, targets, in_pool, X, person=b"qss-row")
