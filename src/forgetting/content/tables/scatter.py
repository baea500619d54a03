"""Adding rows to the flat tables' cells: sums[f, t, c_t] += r and counts[f, t, c_t] += 1 for
each row (fold f, codes c, int64 residuals r) and table t — or −= when rows leave.

Integer sums: any order, batch or path gives the same integers, and subtracting a row
restores them exactly. The compiled scatter (``_update_kernels.scatter_codes``) works straight
from the codes; without it, a few rows go through ``np.add.at`` and a batch through one
sparse product.
"""

from __future__ import annotations

import numpy as np

from ..kernels import TABLE_UPDATES
from .bundles import cell_arrays

SPARSE_MIN_ENTRIES = 1 << 15
"""(row, table) entries from which numpy adds rows by a sparse product, not ``np.add.at``."""


def scatter(
    sums: np.ndarray,
    counts: np.ndarray,
    codes: np.ndarray,
    residuals: np.ndarray,
    folds: np.ndarray,
    sign: int,
) -> None:
    """Add (``sign`` > 0) or subtract rows with cell ``codes`` (n, T), ``residuals`` (n, k)
    and ``folds`` (n,) to tables ``sums`` (2, T, C, k) and ``counts`` (2, T, C), in place."""
    T, C = sums.shape[1], sums.shape[2]
    n = codes.shape[0]
    kernels = TABLE_UPDATES.get(n * T * sums.shape[3])
    if kernels is not None:
        codes_c, folds_c = index_arrays(codes, folds)
        if kernels.scatter_codes(
            cell_arrays(sums, counts),
            codes_c,
            folds_c,
            np.ascontiguousarray(residuals, dtype=np.int64),
            sign < 0,
        ):
            return
    flat = flat_cells(codes, folds, T, C)
    values = np.asarray(residuals, dtype=np.int64)
    scatter_rows(sums.reshape(2 * T * C, -1), flat, -values if sign < 0 else values, T)
    if n * T < SPARSE_MIN_ENTRIES:
        np.add.at(counts.reshape(-1), flat, sign)
    else:
        counts.reshape(-1)[:] += sign * np.bincount(flat, minlength=2 * T * C)


def flat_cells(codes: np.ndarray, folds: np.ndarray, n_tables: int, n_cells: int) -> np.ndarray:
    """Fold-qualified cell ids f·T·C + t·C + c of every (row, table), row-major; an
    IndexError for codes or folds outside the tables."""
    T, C = n_tables, n_cells
    codes = np.asarray(codes, dtype=np.int64)
    folds = np.asarray(folds, dtype=np.int64)
    if codes.size and (codes.min() < 0 or codes.max() >= C):
        raise IndexError("a cell code lies outside the tables")
    if folds.size and (folds.min() < 0 or folds.max() > 1):
        raise IndexError("a fold is not 0 or 1")
    cell = np.arange(T, dtype=np.int64)[None, :] * C + codes  # (n, T) table-major cell id
    return (folds[:, None] * (T * C) + cell).ravel()


def scatter_rows(target: np.ndarray, flat: np.ndarray, values: np.ndarray, T: int) -> None:
    """target[flat[i·T + t]] += values[i] for every row i and table t (exact int64).

    Without the compiled loop: small updates (a handful of rows) use ``np.add.at``; large
    batches one sparse product (rows × cells incidence, transposed, times the residuals):
    integer arithmetic, so exact, and far faster than ``np.add.at`` for many rows. The
    compiled loop, when loaded, adds the same int64 values without building the matrix.
    """
    n = values.shape[0]
    kernels = TABLE_UPDATES.get(n * T)
    if kernels is None and n * T < SPARSE_MIN_ENTRIES:
        np.add.at(target, flat, np.repeat(values, T, axis=0))
        return
    if kernels is not None:
        flat = np.ascontiguousarray(flat, dtype=np.int64)
        values = np.ascontiguousarray(values, dtype=np.int64)
        if not kernels.scatter_rows(target, flat, values, T):
            raise IndexError("a cell index lies outside the tables")
        return
    scatter_rows_sparse(target, flat, values, T)


def scatter_rows_sparse(target: np.ndarray, flat: np.ndarray, values: np.ndarray, T: int) -> None:
    """:func:`scatter_rows` for large batches in numpy/scipy (the compiled kernel's twin)."""
    import scipy.sparse as sp  # here: importing it costs every `import forgetting` otherwise

    n = values.shape[0]
    A = sp.csr_matrix(
        (np.ones(n * T, dtype=np.int64), flat, np.arange(0, n * T + 1, T)),
        shape=(n, target.shape[0]),
    )
    target += np.asarray(A.T @ values)


def index_arrays(codes: np.ndarray, folds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and folds as contiguous integer arrays for the kernels (any integer dtype)."""
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        codes = codes.astype(np.int64)
    folds = np.asarray(folds)
    if folds.dtype.kind not in "iu":
        folds = folds.astype(np.int64)
    return np.ascontiguousarray(codes), np.ascontiguousarray(folds)
