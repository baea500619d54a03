"""Evaluate per-row float functions in canonical, fixed-shape blocks.

Bitwise exactness needs every row-wise quantity (features, base-model outputs, codes) to be
the same bits whether a row is computed alone, in a batch of ten or in a fit of a million.
BLAS kernels choose different code paths (gemv vs gemm, edge micro-kernels) by matrix shape,
which can change the last bits of a dot product. Feeding every call the same shape — blocks of
exactly ``BLOCK_ROWS`` rows, the last one zero-padded — removes that dependence.

Two block sizes, each used for one job and never mixed: statistics (a row's contribution,
computed at fit, insert and rebuild) use ``BLOCK_ROWS``; predictions use
``SERVE_BLOCK_ROWS``, so that predicting one row after a deletion computes φ and g on 64 rows,
not 1,024. Within each job a row's bits are the same in any batch, which is what exactness
needs: contributions must not depend on how rows were batched, and a forgotten model and its
refit must predict any input alike (both use the serving blocks).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BLOCK_ROWS = 1024
SERVE_BLOCK_ROWS = 64


def rowwise(
    fn: Callable[[np.ndarray], np.ndarray], X: np.ndarray, block_rows: int = BLOCK_ROWS
) -> np.ndarray:
    """Apply a row-independent ``fn`` to ``X`` block by block, each block ``block_rows`` rows."""
    n = X.shape[0]
    if n == 0:
        probe = fn(np.zeros((block_rows,) + X.shape[1:], dtype=X.dtype))
        return probe[:0]
    outputs = []
    for start in range(0, n, block_rows):
        block = X[start : start + block_rows]
        if block.shape[0] < block_rows:
            padded = np.zeros((block_rows,) + X.shape[1:], dtype=X.dtype)
            padded[: block.shape[0]] = block
            outputs.append(fn(padded)[: block.shape[0]])
        else:
            outputs.append(fn(np.ascontiguousarray(block)))
    return np.concatenate(outputs, axis=0)
