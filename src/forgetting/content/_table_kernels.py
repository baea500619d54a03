"""The compiled half of the flat tables (:mod:`forgetting.content.tables`) and of
:meth:`forgetting.schema.partitions.ThresholdPartition.cells`.

Imported only through :func:`forgetting.content.kernels.table_kernels` (importing numba costs
a few hundred milliseconds, and ``import forgetting`` must stay cheap). ``cache=True`` keeps
the machine code on disk beside this file; ``nogil=True`` lets a background rebuild run while
the serving thread answers.

Why these give the numpy versions' integers bit for bit: every kernel performs the *same*
IEEE-754 operations on the same operands in the same order as its numpy twin (no fastmath:
no reassociation, no fused multiply-add — the float expressions here are products and
quotients only), rounds with ``rint`` (round half to even, as ``np.rint``) and sums only
integers (int64 addition wraps identically in any order). Where the numpy twin would cast a
non-finite or out-of-range float to int64 (platform-defined), or index out of bounds, the
kernel writes nothing and returns False so the caller runs the numpy code instead. The
float kernels use numba's ``error_model="numpy"``: a division by zero gives IEEE inf/NaN, as
in numpy, instead of raising.
``tests/test_table_kernels.py`` compares both on random and extreme inputs.
"""

from __future__ import annotations

import numba
import numpy as np

_INT64_LIMIT = 9223372036854775808.0  # 2^63: rint results in [-2^63, 2^63) cast exactly


@numba.njit(cache=True, nogil=True)
def threshold_codes(Y, features, thresholds, out) -> bool:
    """out[i, t] = Σ_l [Y[i, features[t, l]] > thresholds[t, l]] · 2^l.

    The comparisons of ``ThresholdPartition.cells`` on its projected rows, one row at a time
    (the row stays in cache while every table reads it). False, with ``out`` untouched, when
    a feature index lies outside ``0..P-1`` (numpy would wrap or raise).
    """
    n, P = Y.shape
    T, D = features.shape
    for t in range(T):
        for level in range(D):
            f = features[t, level]
            if f < 0 or f >= P:
                return False
    for i in range(n):
        for t in range(T):
            code = 0
            for level in range(D):
                if Y[i, features[t, level]] > thresholds[t, level]:
                    code |= 1 << level
            out[i, t] = code
    return True


@numba.njit(cache=True, nogil=True)
def scatter_rows(target, flat, values, T) -> bool:
    """target[flat[i·T + t], :] += values[i, :] for every row i and table t (int64, wraps
    like numpy). False, with ``target`` untouched, when an index lies outside ``target``.

    Table by table: one table's cells (both folds) stay in cache while every row adds to
    them, where row by row each add missed the cache (1.5× faster at 20k–60k rows; integer
    sums do not depend on the order)."""
    R = target.shape[0]
    for e in range(flat.shape[0]):
        if flat[e] < 0 or flat[e] >= R:
            return False
    n, k = values.shape
    for t in range(T):
        for i in range(n):
            r = flat[i * T + t]
            for j in range(k):
                target[r, j] += values[i, j]
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy")
def cell_terms(sums, counts, cells, grid, scale, unit, cross, square) -> bool:
    """The cross-fit terms of ``FlatTables._terms``: for cell c, λ_g and fold a (b = 1 − a),

        μ = (S_a · scale) / (n_a + λ_g)
        cross  += rint(((S_b · scale) · μ) · unit)
        square += rint(((n_b · μ) · μ) · unit)

    summed over both folds and every output as int64 (in another order than numpy's, which
    integer sums do not see). ``sums`` (2, cells, k), ``counts`` (2, cells); results in
    ``cross``/``square`` (m, G). False when a rounded term is not finite or not below 2^63
    in magnitude: the numpy cast is platform-defined there, so numpy decides. The range test
    is a flag, not an early exit, and out-of-range values are replaced by 0 before the cast,
    so the loop over outputs has no branch and compiles to vector instructions (~2× faster).
    """
    k = sums.shape[2]
    m = cells.shape[0]
    G = grid.shape[0]
    s0 = np.empty(k, dtype=np.float64)  # S · scale of one cell, fold 0
    s1 = np.empty(k, dtype=np.float64)  # and fold 1
    ok = True
    for e in range(m):
        c = cells[e]
        n0 = np.float64(counts[0, c])
        n1 = np.float64(counts[1, c])
        for j in range(k):
            s0[j] = np.float64(sums[0, c, j]) * scale
            s1[j] = np.float64(sums[1, c, j]) * scale
        for g in range(G):
            d0 = n0 + grid[g]
            d1 = n1 + grid[g]
            total_c = np.int64(0)
            total_s = np.int64(0)
            for j in range(k):
                mu0 = s0[j] / d0  # fold 0's mean, scored on fold 1's rows
                mu1 = s1[j] / d1
                x0 = np.rint(s1[j] * mu0 * unit)
                y0 = np.rint(n1 * mu0 * mu0 * unit)
                x1 = np.rint(s0[j] * mu1 * unit)
                y1 = np.rint(n0 * mu1 * mu1 * unit)
                in0 = (x0 >= -_INT64_LIMIT) & (x0 < _INT64_LIMIT)
                in0 = in0 & (y0 >= -_INT64_LIMIT) & (y0 < _INT64_LIMIT)
                in1 = (x1 >= -_INT64_LIMIT) & (x1 < _INT64_LIMIT)
                in1 = in1 & (y1 >= -_INT64_LIMIT) & (y1 < _INT64_LIMIT)
                ok = ok & in0 & in1
                total_c += np.int64(x0 if in0 else 0.0) + np.int64(x1 if in1 else 0.0)
                total_s += np.int64(y0 if in0 else 0.0) + np.int64(y1 if in1 else 0.0)
            cross[e, g] = total_c
            square[e, g] = total_s
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def probe_terms(flat_sums, flat_counts, qualified, grid, scale, mean_unit, square_unit, out):
    """``FlatTables._probe_terms``: per λ_g and entry e (a fold-qualified cell q),
    μ = (S_q · scale) / (n_q + λ_g); out[g, e, j] = rint(μ_j · mean_unit) and
    out[g, e, k] = Σ_j rint((μ_j · μ_j) · square_unit). False as :func:`cell_terms` (same
    branch-free range test)."""
    k = flat_sums.shape[1]
    G = grid.shape[0]
    scaled = np.empty(k, dtype=np.float64)  # S · scale of one cell
    ok = True
    for e in range(qualified.shape[0]):
        q = qualified[e]
        n = np.float64(flat_counts[q])
        for j in range(k):
            scaled[j] = np.float64(flat_sums[q, j]) * scale
        for g in range(G):
            denom = n + grid[g]
            total = np.int64(0)
            for j in range(k):
                mu = scaled[j] / denom
                x = np.rint(mu * mean_unit)
                y = np.rint(mu * mu * square_unit)
                inside = (x >= -_INT64_LIMIT) & (x < _INT64_LIMIT)
                inside = inside & (y >= -_INT64_LIMIT) & (y < _INT64_LIMIT)
                ok = ok & inside
                out[g, e, j] = np.int64(x if inside else 0.0)
                total += np.int64(y if inside else 0.0)
            out[g, e, k] = total
    return ok


@numba.njit(cache=True, nogil=True)
def add_rows_at(target, index, values) -> bool:
    """target[:, index[e], :] += values[:, e, :] for every entry e, repeats included (the
    ``np.add.at`` of the probe sums; int64, wraps like numpy). False, with ``target``
    untouched, when an index lies outside ``0..target.shape[1]-1``."""
    G, M, K = target.shape
    for e in range(index.shape[0]):
        if index[e] < 0 or index[e] >= M:
            return False
    for g in range(G):
        for e in range(index.shape[0]):
            r = index[e]
            for j in range(K):
                target[g, r, j] += values[g, e, j]
    return True
