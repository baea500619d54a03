"""Evaluate per-row float functions in canonical, fixed-shape blocks.

Bitwise exactness needs every row-wise quantity (features, base-model outputs, codes) to be
the same bits whether a row is computed alone, in a batch of ten or in a fit of a million.
BLAS kernels choose different code paths (gemv vs gemm, edge micro-kernels) by matrix shape,
which can change the last bits of a dot product. Feeding every call the same shape — blocks of
exactly ``BLOCK_ROWS`` rows, the last one zero-padded — removes that dependence.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BLOCK_ROWS = 1024


def rowwise(fn: Callable[[np.ndarray], np.ndarray], X: np.ndarray) -> np.ndarray:
    """Apply a row-independent ``fn`` to ``X`` block by block, each block ``BLOCK_ROWS`` rows."""
    n = X.shape[0]
    if n == 0:
        probe = fn(np.zeros((BLOCK_ROWS,) + X.shape[1:], dtype=X.dtype))
        return probe[:0]
    outputs = []
    for start in range(0, n, BLOCK_ROWS):
        block = X[start : start + BLOCK_ROWS]
        if block.shape[0] < BLOCK_ROWS:
            padded = np.zeros((BLOCK_ROWS,) + X.shape[1:], dtype=X.dtype)
            padded[: block.shape[0]] = block
            outputs.append(fn(padded)[: block.shape[0]])
        else:
            outputs.append(fn(np.ascontiguousarray(block)))
    return np.concatenate(outputs, axis=0)
