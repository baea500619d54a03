"""The heads' fixed point: features and targets on integer grids, and exact products of them.

Every sum a head keeps is an int64 sum of per-row integer terms, so subtracting a row restores
the integers a fit without it produces. That needs each term on a grid: v = rint(2^14 φ) with
|v| ≤ 2^14 (φ's rows have unit L2 norm; the bias column is 2^14 too), residuals on a grid with
|r| ≤ 2^20 (classification: |r| ≤ 1 at 2^-20; regression: |r| ≤ 2^10 standard deviations at
2^-10). A product is below 2^34 and at most 2^28 rows are summed (``MAX_ROWS``): every sum
stays below 2^62. The products of many rows run through float64 BLAS on these integers, in
chunks small enough that every partial sum is an integer float64 holds exactly; the served
weights are fixed point too (:class:`FixedWeights`), so a row's output is the same bits in any
batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._parallel import map_instances, serial_map

FEATURE_BITS = 14
"""v = rint(2^14 · φ(x)); φ's rows have unit norm, so |v| ≤ 2^14."""
TARGET_LIMIT_BITS = 20
"""Head residuals lie in ±2^20 on their grid."""
_EXACT_BITS = 52


def weight_bits(n_features: int) -> int:
    """Served weights are rounded to integers below 2^bits in magnitude (per output column's
    own power-of-two scale) with 2^14 · 2^bits · D ≤ 2^52, so v · W is an exact float64 integer
    sum and a row's output is the same bits in any batch."""
    return _EXACT_BITS - FEATURE_BITS - int(np.ceil(np.log2(max(n_features, 2))))


def head_target_shift(scale_bits: int) -> int:
    """Right shift from the content's residual grid (2^scale_bits) to the head's: residuals
    are bounded by 1 (classification, 2^32) or 2^10 (regression, 2^24), and the head keeps
    them below 2^20."""
    return scale_bits - TARGET_LIMIT_BITS if scale_bits >= 32 else scale_bits - 10


def head_features(Z: np.ndarray, dtype=np.int64) -> np.ndarray:
    """[rint(2^14 φ), 2^14] (n, d + 1): exact, row by row. int64 for the sums; serving asks
    for float64 — the same integers (|v| ≤ 2^14), without a round trip through int64 before
    the float product (a third of a 50k-row prediction's head time)."""
    n = Z.shape[0]
    v = np.empty((n, Z.shape[1] + 1), dtype=dtype)
    grid = np.rint(np.ldexp(np.asarray(Z, dtype=np.float64), FEATURE_BITS))
    np.clip(grid, -(2**FEATURE_BITS), 2**FEATURE_BITS, out=grid)
    v[:, :-1] = grid
    v[:, -1] = 2**FEATURE_BITS
    return v


def head_targets(residuals: np.ndarray, scale_bits: int) -> np.ndarray:
    """The content's int64 residuals moved to the head's grid (round half up, exact)."""
    shift = head_target_shift(scale_bits)
    r = np.asarray(residuals, dtype=np.int64)
    if shift <= 0:
        return r << -shift
    return (r + (1 << (shift - 1))) >> shift


_SMALL_ROWS = 64
_CHUNK_ROWS = 1 << 18
"""Rows per BLAS product: |v·v| ≤ 2^28 and |v·r| ≤ 2^34, so 2^18 of them sum below 2^53."""


def exact_products(v: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(vᵀv, vᵀr) as int64, computed with float64 BLAS on integer values (``v`` int64, or
    float64 holding integers).

    Every product and partial sum of a chunk is an integer below 2^53, so float64 holds it
    exactly whatever order the kernel sums in (numpy's int64 matmul is exact too, but runs
    without BLAS, far slower); chunks are then added as int64.
    """
    return exact_gram(v), exact_cross(v, r)


def exact_gram(v: np.ndarray) -> np.ndarray:
    """vᵀv as int64 (see :func:`exact_products`).

    A general product (numpy's matmul) rather than BLAS's symmetric rank-k update: it does
    twice the multiplications and still takes less time with the OpenBLAS builds in use, and
    two threads computing two folds' Grams overlap (the symmetric update from scipy did not).
    The same integers: every product and partial sum is an integer below 2^53."""
    D = v.shape[1]
    if len(v) <= _SMALL_ROWS:  # a forget or insert of a few rows: int64 matmul, exact
        vi = v.astype(np.int64, copy=False)
        return vi.T @ vi
    gram = np.zeros((D, D), dtype=np.int64)
    for start in range(0, len(v), _CHUNK_ROWS):
        # features given as float64 (the same integers: head_features(Z, np.float64)) are
        # used as they are — no int64 → float64 copy of every row
        vf = np.asarray(v[start : start + _CHUNK_ROWS], dtype=np.float64)
        gram += (vf.T @ vf).astype(np.int64)
    return gram


def exact_cross(v: np.ndarray, r: np.ndarray) -> np.ndarray:
    """vᵀr as int64 (see :func:`exact_products`)."""
    D, k = v.shape[1], r.shape[1]
    if len(v) <= _SMALL_ROWS:
        return v.astype(np.int64, copy=False).T @ r
    cross = np.zeros((D, k), dtype=np.int64)
    for start in range(0, len(v), _CHUNK_ROWS):
        vf = np.asarray(v[start : start + _CHUNK_ROWS], dtype=np.float64)
        rf = r[start : start + _CHUNK_ROWS].astype(np.float64)
        cross += (rf.T @ vf).T.astype(np.int64)
    return cross


def fold_cross(v: np.ndarray, r: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """Σ v rᵀ over the rows of each statistic fold, (2, D, k) int64: :func:`exact_cross` of
    each fold's rows, without selecting them. One product per chunk, rᵀ's rows split by fold
    (a row's residuals in fold 0's k columns or fold 1's, zeros in the other) against all of
    v: one product where two row selections of v (copies of every row) and two products took
    about twice as long. Exact as exact_cross (integers below 2^53; the zeros add nothing)."""
    D, k = v.shape[1], r.shape[1]
    folds = np.asarray(folds)
    if len(v) <= _SMALL_ROWS:
        return np.stack([exact_cross(v[folds == f], r[folds == f]) for f in (0, 1)])
    cross = np.zeros((2, D, k), dtype=np.int64)
    for start in range(0, len(v), _CHUNK_ROWS):
        stop = min(len(v), start + _CHUNK_ROWS)
        vf = np.asarray(v[start:stop], dtype=np.float64)
        split = np.zeros((stop - start, 2 * k), dtype=np.float64)
        in1 = np.asarray(folds[start:stop]) == 1
        split[~in1, :k] = r[start:stop][~in1]
        split[in1, k:] = r[start:stop][in1]
        both = (split.T @ vf).astype(np.int64)  # (2k, D)
        cross[0] += both[:k].T
        cross[1] += both[k:].T
    return cross


def fold_grams(v: np.ndarray, folds: np.ndarray, parallel: bool = False) -> list[np.ndarray | None]:
    """Σ v vᵀ over the rows of each statistic fold (None for a fold without rows).

    ``parallel``: the two folds on two threads (forgetting._parallel; each BLAS call on one
    thread) — the same integers, every product and partial sum of :func:`exact_gram` being an
    integer that float64 holds, in about half the time for a large batch (O(n·D²))."""

    def one(f: int) -> np.ndarray | None:
        mine = folds == f
        return exact_gram(v[mine]) if np.any(mine) else None

    return (map_instances if parallel else serial_map)(one, [0, 1])


def exact_weighted_grams(v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_i w_ic v_i v_iᵀ per class c, (k, D, D) int64, exact.

    Small batches (a forget or insert of a few rows) use numpy's int64 products. Larger ones use
    float64 BLAS on integer values in chunks of at most 2^18 rows: every product is below 2^34 and a
    chunk's sum below 2^52, so float64 holds them exactly whatever order the kernel sums in; the
    chunks are then added as int64. A class whose weights are all zero in a batch is skipped.
    """
    n, D = v.shape
    k = w.shape[1]
    out = np.zeros((k, D, D), dtype=np.int64)
    if n <= _SMALL_ROWS:
        for c in range(k):
            if w[:, c].any():
                out[c] = (v * w[:, c, None]).T @ v
        return out
    if k * D <= _STACKED_WIDTH:  # small systems: all classes in one product per block
        rows = min(_CHUNK_ROWS, _STACKED_FLOATS // (k * D))
        for start in range(0, n, rows):
            vf = v[start : start + rows].astype(np.float64)
            wf = w[start : start + rows].astype(np.float64)
            stacked = (wf[:, :, None] * vf[:, None, :]).reshape(len(vf), k * D)
            out += (stacked.T @ vf).astype(np.int64).reshape(k, D, D)
        return out
    for start in range(0, n, _CHUNK_ROWS):
        vf = v[start : start + _CHUNK_ROWS].astype(np.float64)
        wf = w[start : start + _CHUNK_ROWS].astype(np.float64)
        for c in range(k):
            if wf[:, c].any():
                out[c] += ((vf * wf[:, c, None]).T @ vf).astype(np.int64)
    return out


_STACKED_WIDTH = 4096
_STACKED_FLOATS = 1 << 23
"""With k (d + 1) ≤ 4096 the weighted rows of all classes are stacked side by side (≤ 64 MB per
block) and multiplied in one BLAS call: at small d a loop over classes is dominated by its
per-class elementwise products (letter, d = 16, k = 26: a third of the fit)."""


@dataclass(frozen=True)
class FixedWeights:
    """Head weights as integers (D, k) with a power-of-two exponent per output column."""

    weights: np.ndarray
    exponents: np.ndarray

    @classmethod
    def of(cls, W: np.ndarray) -> FixedWeights:
        peak = np.max(np.abs(W), axis=0)
        peak[peak == 0.0] = 1.0
        exponents = weight_bits(W.shape[0]) - np.ceil(np.log2(peak)).astype(np.int64) - 1
        Wi = np.rint(np.ldexp(W, exponents[None, :]))
        return cls(Wi, exponents)

    def apply(self, features: np.ndarray) -> np.ndarray:
        """Outputs (n, k) in real residual units for head ``features`` (n, D): int64, or the
        same integers as float64 (``head_features(Z, np.float64)``)."""
        # integer-valued float64 products and sums below 2^53: exact in any order
        Y = np.asarray(features, dtype=np.float64) @ self.weights
        return np.ldexp(Y, -(self.exponents[None, :] + FEATURE_BITS))
