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

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import scipy.linalg  # noqa: F401 - loads scipy's BLAS before the libraries are listed
from threadpoolctl import ThreadpoolController

BLOCK_ROWS = 1024
SERVE_BLOCK_ROWS = 64

_LIBRARIES: list | None = None
"""(get, set) of every loaded BLAS library's process-wide thread count."""
_SAVED: list[int] = []
_DEPTH = 0
_LOCK = threading.Lock()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """A context in which BLAS runs on one thread, process-wide.

    Why one thread: BLAS and LAPACK round differently on one thread than on two (a logistic
    fit, LAPACK's eigensolver, even a 311 × 784 product), so every float computation behind a
    model's bits must run with one fixed count — one: row-wise blocks are small, and on a busy
    machine an oversubscribed OpenBLAS made a 1 024 × 128 projection 25× slower.

    Why process-wide, and not through threadpoolctl: OpenBLAS's count is one setting for the
    whole process, and threadpoolctl lets only the first thread that limited it change it —
    a background rebuild's limit was silently ignored, so it trained its schema on two threads
    unless the main thread happened to be inside a prediction, and the rebuilt logistic g
    differed from a refit's (tests/test_threads.py). OpenBLAS's "thread-local" setter leaked
    across threads when tried. So the libraries' own setters are called directly, under a lock
    with a depth count shared by all threads: the first entrant limits, the last one restores,
    and while any thread computes for a model every BLAS call in the process runs on one thread.
    Re-entrant and cheap when nested (a counter).
    """
    global _DEPTH
    libraries = _libraries()
    with _LOCK:
        if _DEPTH == 0:
            _SAVED[:] = [get() for get, _ in libraries]
            for (_, set_threads), n in zip(libraries, _SAVED, strict=True):
                if n != 1:
                    set_threads(1)
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                for (_, set_threads), n in zip(libraries, _SAVED, strict=True):
                    if n != 1:
                        set_threads(n)


_AFFIXES = [(p, s) for p in ("", "scipy_") for s in ("", "64_", "_64")]
"""How OpenBLAS builds name their symbols (scipy-openblas prefixes and suffixes them)."""


def _libraries() -> list:
    """(get, set) per loaded BLAS library, found once: an OpenBLAS's own process-wide
    functions via ctypes, threadpoolctl's methods for the others (MKL, BLIS)."""
    global _LIBRARIES
    if _LIBRARIES is None:
        with _LOCK:
            if _LIBRARIES is None:
                found = []
                for lib in ThreadpoolController().lib_controllers:
                    if lib.user_api != "blas":
                        continue
                    pair = _openblas_functions(lib) if lib.internal_api == "openblas" else None
                    found.append(pair or (lib.get_num_threads, lib.set_num_threads))
                _LIBRARIES = found
    return _LIBRARIES


def _openblas_functions(lib) -> tuple | None:
    if getattr(lib, "threading_layer", None) == "openmp":
        return None  # OpenMP builds: per-thread limits, threadpoolctl sets them as asked
    for prefix, suffix in _AFFIXES:
        get = getattr(lib.dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
        set_threads = getattr(lib.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
        if get is not None and set_threads is not None:
            get.restype = ctypes.c_int
            set_threads.argtypes = [ctypes.c_int]
            return get, set_threads
    return None


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
