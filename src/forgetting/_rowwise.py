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

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
from threadpoolctl import ThreadpoolController

BLOCK_ROWS = 1024
SERVE_BLOCK_ROWS = 64

_BLAS: list | None = None
"""The BLAS libraries loaded when first limited (threadpoolctl's per-library controllers)."""
_SAVED: list[int] = []
_DEPTH = 0
_LOCK = threading.Lock()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """A context in which BLAS runs on one thread.

    Row-wise blocks are small (64 or 1 024 rows): threads bring nothing there, and on a busy
    machine an oversubscribed OpenBLAS made a 1 024 × 128 LDA projection 25× slower (8 ms
    instead of 0.34 ms, measured while other jobs ran) — which dominated forget-and-serve.
    It also keeps a row's bits independent of the thread count the process happens to run
    with (a service with OPENBLAS_NUM_THREADS=1 and a notebook fit agree).

    Re-entrant and cheap when nested: BLAS's thread count is process-wide, so the first
    caller limits it and the last one restores it (the engine wraps a whole forget or
    prediction; the row-wise calls inside then cost a counter). The libraries' own
    ``set_num_threads`` are called directly: threadpoolctl's ``limit()`` re-reads every
    library's state and cost ~30 µs per forget or prediction.
    """
    global _BLAS, _DEPTH
    with _LOCK:
        if _DEPTH == 0:
            if _BLAS is None:
                controller = ThreadpoolController()
                _BLAS = [lib for lib in controller.lib_controllers if lib.user_api == "blas"]
            _SAVED[:] = [lib.get_num_threads() for lib in _BLAS]
            for lib, n in zip(_BLAS, _SAVED, strict=True):
                if n != 1:
                    lib.set_num_threads(1)
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                for lib, n in zip(_BLAS, _SAVED, strict=True):
                    if n != 1:
                        lib.set_num_threads(n)


def rowwise(
    fn: Callable[[np.ndarray], np.ndarray], X: np.ndarray, block_rows: int = BLOCK_ROWS
) -> np.ndarray:
    """Apply a row-independent ``fn`` to ``X`` block by block, each block ``block_rows`` rows."""
    with one_blas_thread():
        return _blocks(fn, X, block_rows)


def _blocks(fn: Callable[[np.ndarray], np.ndarray], X: np.ndarray, block_rows: int) -> np.ndarray:
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
