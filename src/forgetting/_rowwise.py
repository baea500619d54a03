"""Evaluate per-row float functions in canonical, fixed-shape blocks.

Bitwise exactness needs every row-wise quantity (features, base-model outputs, codes) to be
the same bits whether a row is computed alone, in a batch of ten or in a fit of a million.
BLAS kernels choose different code paths (gemv vs gemm, edge micro-kernels) by matrix shape,
which can change the last bits of a dot product. Feeding every call the same shape — blocks of
exactly ``BLOCK_ROWS`` rows, the last one zero-padded — removes that dependence.

Three block sizes, each used for one job and never mixed: statistics (a row's contribution,
computed at fit, insert and rebuild) use ``BLOCK_ROWS``; the head's features of those rows
``HEAD_BLOCK_ROWS``; predictions ``SERVE_BLOCK_ROWS``, so that predicting one row after a
deletion computes φ and g on 8 rows, not 1,024. Within each job a row's bits are the same in
any batch, which is what exactness needs: contributions must not depend on how rows were
batched, and a forgotten model and its refit must predict any input alike (both use the
serving blocks).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import scipy.linalg  # noqa: F401 - loads scipy's BLAS before the libraries are listed
from threadpoolctl import ThreadpoolController

BLOCK_ROWS = 1024
SERVE_BLOCK_ROWS = 8
"""Predictions: a prediction's bits are recomputed on every call, never stored, so this may
change between versions. Small, because the first prediction after a deletion evaluates φ and
g of one row per instance, and every padded row is paid for; bulk prediction loses nothing
(many blocks go through one BLAS call, :func:`rowwise`)."""
HEAD_BLOCK_ROWS = 64
"""The head's features of the rows in the statistics (content.heads): stored sums were
computed with them, so they must stay what they were — a forget recomputes the leaving
rows' features and subtracts them; other bits would leave a residue in the sums. Small,
because a one-row forget computes them for that row alone."""

_LIBRARIES: list | None = None
"""(get, set) of every loaded BLAS library's process-wide thread count."""
_SAVED: list[int] = []
_DEPTH = 0
_LOCK = threading.Lock()


def one_blas_thread() -> _OneBlasThread:
    """A context in which BLAS runs on one thread, process-wide.

    Why one thread: BLAS and LAPACK round differently on one thread than on two (a logistic
    fit, LAPACK's eigensolver, even a 311 × 784 product), so every float computation behind a
    model's bits must run with one fixed count — one: row-wise blocks are small, and on a busy
    machine an oversubscribed OpenBLAS makes even a small projection many times slower.

    Why process-wide, and not through threadpoolctl: OpenBLAS's count is one setting for the
    whole process, and threadpoolctl lets only the first thread that limited it change it —
    a background rebuild's limit was silently ignored, so it trained its schema on two threads
    unless the main thread happened to be inside a prediction, and the rebuilt logistic g
    differed from a refit's (tests/schema/test_threads.py). OpenBLAS's "thread-local" setter leaked
    across threads when tried. So the libraries' own setters are called directly, under a lock
    with a depth count shared by all threads: the first entrant limits, the last one restores,
    and while any thread computes for a model every BLAS call in the process runs on one thread.
    Re-entrant and cheap when nested (a counter). A plain object rather than a generator
    context: a one-row prediction enters it many times, and a generator context's set-up,
    paid on every entry, costs far more than this one's lock and counter.
    """
    return _ONE_BLAS_THREAD


class _OneBlasThread:
    """The context :func:`one_blas_thread` returns (one shared object: its state is the
    process-wide depth count)."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _DEPTH
        libraries = _LIBRARIES if _LIBRARIES is not None else _libraries()
        with _LOCK:
            if _DEPTH == 0:
                _SAVED[:] = [get() for get, _ in libraries]
                for (_, set_threads), n in zip(libraries, _SAVED, strict=True):
                    if n != 1:
                        set_threads(1)
            _DEPTH += 1

    def __exit__(self, *exc) -> None:
        global _DEPTH
        libraries = _LIBRARIES
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                for (_, set_threads), n in zip(libraries, _SAVED, strict=True):
                    if n != 1:
                        set_threads(n)


_ONE_BLAS_THREAD = _OneBlasThread()


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
    """An OpenBLAS's (get, set) of its thread count as ctypes functions: its own process-wide
    pair, or for an OpenMP build the OpenMP pair it links (per-thread limits:
    omp_get_max_threads / omp_set_num_threads, the functions threadpoolctl calls there).
    Why not threadpoolctl's methods: a one-row forget and its prediction enter
    :func:`one_blas_thread` twice, and for faiss's OpenMP OpenBLAS threadpoolctl's methods
    add four Python-level calls to that; these ctypes functions add none."""
    openmp = getattr(lib, "threading_layer", None) == "openmp"
    get_name, set_name = (
        ("omp_get_max_threads", "omp_set_num_threads")
        if openmp
        else ("openblas_get_num_threads", "openblas_set_num_threads")
    )
    for prefix, suffix in [("", "")] if openmp else _AFFIXES:
        get = getattr(lib.dynlib, f"{prefix}{get_name}{suffix}", None)
        set_threads = getattr(lib.dynlib, f"{prefix}{set_name}{suffix}", None)
        if get is not None and set_threads is not None:
            get.restype = ctypes.c_int
            set_threads.argtypes = [ctypes.c_int]
            return get, set_threads
    return None


def rowwise(
    fn: Callable[[np.ndarray], np.ndarray],
    X: np.ndarray,
    block_rows: int = BLOCK_ROWS,
    owner: object | None = None,
    variant: str = "",
) -> np.ndarray:
    """Apply a row-independent ``fn`` to ``X`` block by block, each block ``block_rows`` rows.

    With an ``owner`` (the fitted object ``fn`` belongs to), many blocks may go through one
    call of ``fn`` (:func:`block_matmul`), once that is checked to give the same bits;
    ``variant`` names which of the owner's functions ``fn`` is when it has several (each is
    checked on its own).
    """
    with one_blas_thread():
        n = X.shape[0]
        if owner is None or n <= block_rows:
            return _blocks(fn, X, block_rows)
        verdicts = _verdicts_of(owner)
        key = (
            (block_rows, X.shape[1:], X.dtype.str)
            if not variant
            else (variant, block_rows, X.shape[1:], X.dtype.str)
        )
        if key not in verdicts:
            probe = X[: 3 * block_rows]
            expected = _blocks(fn, probe, block_rows)
            try:
                same = np.array_equal(_stacked(fn, probe, block_rows), expected)
            except Exception:  # noqa: BLE001 - a function that cannot take many blocks
                same = False
            verdicts[key] = same
            if len(probe) == n:
                return expected
        if not verdicts[key]:
            return _blocks(fn, X, block_rows)
        return _stacked(fn, X, block_rows)


STACK_ROWS = 16_384
"""Rows per call when blocks are evaluated together: ~17 MB of float64 at 128 columns."""

_HEIGHT = threading.local()
"""The block height of the stacked evaluation running in this thread (None: none is)."""


def block_matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A @ B``, computed as one BLAS product per canonical block of ``A``'s rows.

    Why: a Python loop over 64-row blocks costs more than their arithmetic (a 20k-row batch is
    ~310 calls per function and instance). The row-wise functions φ and g are elementwise
    work, per-row reductions and one matrix product; only the product's bits depend on the
    number of rows (BLAS picks kernels by shape). Inside :func:`rowwise`'s stacked
    evaluation this multiplies a (b·h, d) array as b separate (h, d) products — numpy's
    matmul over a stack calls the same BLAS routine on each (h, d) slice as on one block —
    and anywhere else it is the plain product. :func:`rowwise` checks, once per fitted object
    and shape, that a stacked call returns exactly what block-by-block calls return, and
    falls back to blocks otherwise (e.g. scikit-learn's own MLP forward pass, which does not
    use this function).
    """
    h = getattr(_HEIGHT, "rows", None)
    n = A.shape[0]
    if h is None or n <= h:
        return A @ B
    out = np.matmul(A.reshape(n // h, h, A.shape[1]), B)
    return out.reshape(n, out.shape[-1])


@contextmanager
def unstacked() -> Iterator[None]:
    """Plain products in this thread (a check comparing with scikit-learn's own product on a
    probe block must not be split into smaller blocks)."""
    previous = getattr(_HEIGHT, "rows", None)
    _HEIGHT.rows = None
    try:
        yield
    finally:
        _HEIGHT.rows = previous


def _stacked(fn: Callable[[np.ndarray], np.ndarray], X: np.ndarray, h: int) -> np.ndarray:
    """``fn`` on up to :data:`STACK_ROWS` rows at a time, zero-padded to whole blocks as
    :func:`_blocks` pads its last block."""
    previous = getattr(_HEIGHT, "rows", None)
    _HEIGHT.rows = h
    try:
        outputs = []
        step = max(STACK_ROWS // h, 1) * h
        for start in range(0, X.shape[0], step):
            chunk = X[start : start + step]
            m = chunk.shape[0]
            if m % h:
                padded = np.zeros((-(-m // h) * h,) + X.shape[1:], dtype=X.dtype)
                padded[:m] = chunk
                outputs.append(fn(padded)[:m])
            else:
                outputs.append(fn(np.ascontiguousarray(chunk)))
    finally:
        _HEIGHT.rows = previous
    return np.concatenate(outputs, axis=0)


_KEPT: dict[int, tuple[weakref.ref, dict]] = {}


def kept_for(owner: object) -> dict:
    """A dict of what is kept for a fitted object outside it — by its identity, forgotten
    with it. For objects that are neither hashable (frozen dataclasses of arrays) nor free
    to carry the state themselves (their attributes are a digest's input): the stacking
    verdicts here, a partition's kernel arguments, the schemas' stacked arrays."""
    key = id(owner)
    entry = _KEPT.get(key)
    if entry is None or entry[0]() is not owner:
        entry = (weakref.ref(owner, lambda _ref: _KEPT.pop(key, None)), {})
        _KEPT[key] = entry
    return entry[1]


def _verdicts_of(owner: object) -> dict:
    """The stacking verdicts of a fitted object, forgotten with the object."""
    return kept_for(owner).setdefault("rowwise verdicts", {})


def _blocks(fn: Callable[[np.ndarray], np.ndarray], X: np.ndarray, block_rows: int) -> np.ndarray:
    n = X.shape[0]
    if n == 0:
        probe = fn(np.zeros((block_rows,) + X.shape[1:], dtype=X.dtype))
        return probe[:0]
    if n < block_rows:  # one padded block (a one-row prediction): no concatenation
        padded = np.zeros((block_rows,) + X.shape[1:], dtype=X.dtype)
        padded[:n] = X
        return fn(padded)[:n]
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
