"""What the flat tables add to g for a predicted row: (1/T) Σ_t μ_t[c_t(x)], read from the
integers of the T cells the row falls in — nothing is materialized, so a change of the
statistics costs the next prediction nothing.

μ_t[c] = S_t[c] / (n_t[c] + λ) over both folds, rounded to 2^-MEAN_BITS before the sum over
tables, which is then an exact integer sum: a row's correction is the same bits alone or in
any batch. The compiled gather (``_serve_kernels.serve_correction``) performs the numpy
definition's operations in the same order, element by element.
"""

from __future__ import annotations

import numpy as np

from ..kernels import TABLE_SERVING
from .bundles import cell_arrays
from .units import MEAN_BITS

SERVE_CHUNK = 2048
"""Rows per compiled gather (bounds its output block, whatever the batch)."""


def correction(
    sums: np.ndarray, counts: np.ndarray, codes: np.ndarray, shrinkage: float, scale_bits: int
) -> np.ndarray:
    """(1/T) Σ_t μ_t[c_t(x)] (n, k) for rows with cell ``codes`` (n, T) of tables ``sums``
    (2, T, C, k) and ``counts`` (2, T, C); exact in any batch."""
    codes = np.asarray(codes)
    if 0 < codes.shape[0] <= SERVE_CHUNK:  # a prediction's row or few: one chunk
        return _correction(sums, counts, codes, shrinkage, scale_bits)
    out = np.empty((codes.shape[0], sums.shape[3]), dtype=np.float64)
    for start in range(0, codes.shape[0], SERVE_CHUNK):
        out[start : start + SERVE_CHUNK] = _correction(
            sums, counts, codes[start : start + SERVE_CHUNK], shrinkage, scale_bits
        )
    return out


def _correction(
    sums: np.ndarray, counts: np.ndarray, codes: np.ndarray, shrinkage: float, scale_bits: int
) -> np.ndarray:
    T, k = sums.shape[1], sums.shape[3]
    kernels = TABLE_SERVING.get(codes.shape[0] * T * k)
    if kernels is not None:
        out = np.empty((codes.shape[0], k), dtype=np.float64)
        if kernels.serve_correction(
            cell_arrays(sums, counts),
            np.ascontiguousarray(codes, dtype=np.int64),
            2.0**-scale_bits,
            float(shrinkage),
            2.0**MEAN_BITS,
            2.0**-MEAN_BITS,
            out,
        ):
            return out
    return correction_numpy(sums, counts, codes, shrinkage, scale_bits)


def correction_numpy(
    sums: np.ndarray, counts: np.ndarray, codes: np.ndarray, shrinkage: float, scale_bits: int
) -> np.ndarray:
    """The definition ``_serve_kernels.serve_correction`` follows."""
    T, C = sums.shape[1], sums.shape[2]
    cell = np.arange(T, dtype=np.int64)[None, :] * C + codes.astype(np.int64)
    flat_sums = sums.reshape(2, T * C, -1)
    flat_counts = counts.reshape(2, T * C)
    S = flat_sums[0][cell] + flat_sums[1][cell]  # (n, T, k) exact int64
    n = (flat_counts[0][cell] + flat_counts[1][cell]).astype(np.float64)
    mu = S.astype(np.float64) * 2.0**-scale_bits / (n + shrinkage)[:, :, None]
    fixed = np.rint(mu * 2.0**MEAN_BITS).astype(np.int64)
    total = fixed.sum(axis=1)  # integer sum: order-independent
    return total.astype(np.float64) * 2.0**-MEAN_BITS / T
