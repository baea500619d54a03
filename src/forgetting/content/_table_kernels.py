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

Work is shared only where the operations are identical: a cell's probe terms are rounded
from the very quotient its cross-fit terms divided out (S·scale / (n + λ), same operands,
same order), and computed once per cell for all probes in it; cells are skipped only where
every term is provably ±0 (:func:`_terms_vanish`). Prefetch hints (:func:`_prefetch`) move
no value. ``tests/test_table_updates.py`` checks these paths against numpy's definitions.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_INT64_LIMIT = 9223372036854775808.0  # 2^63: rint results in [-2^63, 2^63) cast exactly


@intrinsic
def _prefetch(typingctx, array, index):
    """Ask the CPU to start loading the cache line of ``array[index]`` (1-D, C order) now.

    A hint only (LLVM's ``llvm.prefetch``, compiled to one prefetch instruction or to nothing
    on a target without one): it reads no value and writes none, so no result can depend on
    it. Why: a one-row update touches ~64 cells scattered over ~40 MB of sums and a few
    hundred probe rows, none of them in cache after the prediction that ran in between; the
    loads that discover them depend on each other (the probe index, then the probe), so
    without the hint each waits a full memory latency in turn."""
    signature = types.void(array, index)

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # read (0), keep in all cache levels (3), data cache (1)
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def _float_bits(typingctx, x):
    """The IEEE-754 bits of float64 ``x`` as an int64 (LLVM's ``bitcast``: no instruction
    of its own, and vectorizable, unlike a view through memory)."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


_SMALL_LIMIT = 2.0**51
"""Integer-valued floats below this in magnitude convert by :func:`_small_int`."""
_SHIFT = 1.5 * 2.0**52
_SHIFT_BITS = int(np.array(_SHIFT).view(np.int64))


@numba.njit(cache=True, nogil=True, inline="always")
def _small_int(x):
    """int64(x) for an integer-valued float64 with |x| < 2^51 (the caller checks).

    Why not ``np.int64(x)``: x86-64 before AVX-512 has no vector float64 → int64
    conversion, so a loop that converts is compiled to one scalar conversion per value —
    the rounded terms below are the bulk of the tables' arithmetic. Here: x + 1.5·2^52 is
    exact (the sum lies in [2^52, 2^53), where floats are the integers) and the bits of
    floats of one binade differ by the difference of their values, so the bits less those
    of 1.5·2^52 are x — an add and a subtract, both vectorizable. −0.0 gives 0, as the cast."""
    return _float_bits(x + _SHIFT) - _SHIFT_BITS


@numba.njit(cache=True, nogil=True, inline="always")
def _cast_terms(x0, y0, x1, y1):
    """A cell's two folds' rounded cross and square terms as int64: (all four in the int64
    range, x0 + x1, y0 + y1), out-of-range values replaced by 0 before the cast (numpy's is
    platform-defined there: the caller hands those cases to numpy). Branch-free, so a loop
    over outputs or cells that calls it compiles to vector instructions."""
    in0 = (x0 >= -_INT64_LIMIT) & (x0 < _INT64_LIMIT)
    in0 = in0 & (y0 >= -_INT64_LIMIT) & (y0 < _INT64_LIMIT)
    in1 = (x1 >= -_INT64_LIMIT) & (x1 < _INT64_LIMIT)
    in1 = in1 & (y1 >= -_INT64_LIMIT) & (y1 < _INT64_LIMIT)
    cross = np.int64(x0 if in0 else 0.0) + np.int64(x1 if in1 else 0.0)
    square = np.int64(y0 if in0 else 0.0) + np.int64(y1 if in1 else 0.0)
    return in0 & in1, cross, square


@numba.njit(cache=True, nogil=True, inline="always")
def _small_terms(x0, y0, x1, y1):
    """:func:`_cast_terms` by :func:`_small_int`: (all four below 2^51 in magnitude,
    x0 + x1, y0 + y1); the sums hold only when the flag is set."""
    inside = (abs(x0) < _SMALL_LIMIT) & (abs(y0) < _SMALL_LIMIT)
    inside = inside & (abs(x1) < _SMALL_LIMIT) & (abs(y1) < _SMALL_LIMIT)
    return inside, _small_int(x0) + _small_int(x1), _small_int(y0) + _small_int(y1)


@numba.njit(cache=True, nogil=True, inline="always")
def _features_valid(features, P) -> bool:
    """Every tested feature index lies in 0..P−1 (numpy would wrap or raise otherwise)."""
    for t in range(features.shape[0]):
        for level in range(features.shape[1]):
            f = features[t, level]
            if f < 0 or f >= P:
                return False
    return True


@numba.njit(cache=True, nogil=True)
def threshold_codes(Y, features, thresholds, out) -> bool:
    """out[i, t] = Σ_l [Y[i, features[t, l]] > thresholds[t, l]] · 2^l.

    The comparisons of ``ThresholdPartition.cells`` on its projected rows, 256 rows at a
    time: the block is transposed into a (P, 256) scratch first, so each level's test runs
    over a contiguous column of the block and compiles to vector compares (2× faster than
    testing one row at a time). False, with ``out`` untouched, when a feature index lies
    outside ``0..P-1`` (numpy would wrap or raise).
    """
    n, P = Y.shape
    T, D = features.shape
    if not _features_valid(features, P):
        return False
    block = 256
    columns = np.empty((P, block), dtype=Y.dtype)
    code = np.empty(block, dtype=np.int64)
    for start in range(0, n, block):
        m = min(n, start + block) - start
        for i in range(m):
            for p in range(P):
                columns[p, i] = Y[start + i, p]
        for t in range(T):
            for i in range(m):
                code[i] = 0
            for level in range(D):
                column = columns[features[t, level]]
                threshold = thresholds[t, level]
                for i in range(m):
                    code[i] |= np.int64(column[i] > threshold) << level
            for i in range(m):
                out[start + i, t] = code[i]
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def _exact_stage(x, W, center, down, limit, y) -> None:
    """y = clip(rint(down · W (x − center)), ±limit): ``ExactLinear.apply`` on one grid row.
    Every product and partial sum is an integer below 2^52 (the stage's construction), so
    this loop's order gives BLAS's sums exactly; ``down`` = 2^-shift scales exactly."""
    for p in range(W.shape[0]):
        acc = 0.0
        for j in range(x.shape[0]):
            acc += (x[j] - center[j]) * W[p, j]
        y[p] = min(max(np.rint(acc * down), -limit), limit)


@numba.njit(cache=True, nogil=True)
def partition_codes(
    Z, grid_scale, limit, stages, W1, c1, down1, W2, c2, down2, features, thresholds, out
) -> bool:
    """``ThresholdPartition.cells`` of a few rows ``Z`` in one call: the grid (rint(Z ·
    2^GRID_BITS) clipped to ±``limit``), ``stages`` (0, 1 or 2) exact linear stages, then the
    threshold tests — one row at a time, where the numpy route makes ~15 small calls per row
    (10 µs of a one-row prediction's encode, per instance; 1 µs here). Exact integer
    arithmetic throughout, so the same codes as the numpy route and :func:`threshold_codes`.
    False when a feature index is outside the last stage's output or a feature is not finite
    (the caller then computes every row the general way)."""
    n, d = Z.shape
    P = d if stages == 0 else (W1.shape[0] if stages == 1 else W2.shape[0])
    T, D = features.shape
    if not _features_valid(features, P):
        return False
    x = np.empty(d)
    y1 = np.empty(W1.shape[0])
    y2 = np.empty(W2.shape[0])
    for i in range(n):
        for j in range(d):
            if not np.isfinite(Z[i, j]):
                return False  # numpy's clip keeps a NaN; let the numpy route decide
            x[j] = min(max(np.rint(Z[i, j] * grid_scale), -limit), limit)
        y = x
        if stages >= 1:
            _exact_stage(x, W1, c1, down1, limit, y1)
            y = y1
        if stages == 2:
            _exact_stage(y1, W2, c2, down2, limit, y2)
            y = y2
        for t in range(T):
            code = np.int64(0)
            for level in range(D):
                code |= np.int64(y[features[t, level]] > thresholds[t, level]) << level
            out[i, t] = code
    return True


_CODEBOOK_LIMIT = 2.0**51
"""What :func:`codebook_codes` accepts: ‖r‖·max‖c‖·2 + max‖c‖² below this — half the numpy
encoder's bound (schema.codebook: 2^52, where it raises), so a row the kernel accepts is one
the numpy encoder accepts too, whatever the rounding of either's norm; the rest go to numpy."""


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
def codebook_codes(residual, centroids, sq_norms, max_norm, codes) -> bool:
    """``Codebook.encode`` of a few rows whose grid values (integer-valued float64, from
    ``to_grid``) are ``residual`` (n, d), overwritten by their final residuals: per level the
    exact argmin of ‖c‖² − 2⟨r, c⟩ over the level's centroids (the lowest index on ties),
    then r −= c. The numpy encoder takes a float32 product and certifies its winner, or
    recomputes near-ties exactly (schema.codebook): in both cases the exact argmin with the
    lowest index on ties, which this computes directly.

    Exact: every value is an integer; with the bound checked here (:data:`_CODEBOOK_LIMIT`)
    every product r_j·c_j and every partial sum of ⟨r, c⟩ lies below ‖r‖·‖c‖ < 2^50 in
    magnitude (Cauchy–Schwarz on |r|, |c|), and ‖c‖² − 2⟨r, c⟩ below 2^52, so float64
    holds each exactly in any summation order — hence the fast-math flags, which only let
    LLVM reorder and fuse those sums into vector instructions. ``sq_norms`` (ℓ, b) are the
    exact ‖c‖² and ``max_norm`` (ℓ,) the largest ‖c‖ per level (Codebook._search_tables).
    False, with ``codes`` unspecified, for a row outside the bound or not finite: the numpy
    encoder then decides (and raises where it must)."""
    n, d = residual.shape
    n_levels, b, _ = centroids.shape
    for i in range(n):
        r = residual[i]
        for level in range(n_levels):
            norm2 = 0.0
            for j in range(d):
                norm2 += r[j] * r[j]
            if not np.isfinite(norm2):
                return False
            top = 0.0
            for c in range(b):
                top = max(top, sq_norms[level, c])
            if np.sqrt(norm2) * max_norm[level] * 2.0 + top >= _CODEBOOK_LIMIT:
                return False
            best = 0
            best_dist = np.inf
            for c in range(b):
                centroid = centroids[level, c]
                dot = 0.0
                for j in range(d):
                    dot += r[j] * centroid[j]
                dist = sq_norms[level, c] - 2.0 * dot
                if dist < best_dist:
                    best_dist = dist
                    best = c
            codes[i, level] = best
            centroid = centroids[level, best]
            for j in range(d):
                r[j] -= centroid[j]
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


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _cell_terms_into(sums, counts, c, grid, scale, unit, s0, s1, cross, square, sign) -> bool:
    """Add ``sign`` × the cross-fit terms of table-major cell ``c`` to ``cross``/``square``
    (G,): for λ_g and fold a (b = 1 − a),

        μ = (S_a · scale) / (n_a + λ_g)
        cross  += rint(((S_b · scale) · μ) · unit)
        square += rint(((n_b · μ) · μ) · unit)

    summed over both folds and every output as int64 (in another order than numpy's, which
    integer sums do not see). ``s0``/``s1`` are scratch (k,). False when a rounded term is
    not finite or not below 2^63 in magnitude: the numpy cast is platform-defined there, so
    numpy decides. The range test is a flag, not an early exit, and out-of-range values are
    replaced by 0 before the cast, so the loop over outputs has no branch and compiles to
    vector instructions (~2× faster). The one definition of these terms in compiled code:
    :func:`cell_terms` and :func:`update_cells` both call it."""
    k = sums.shape[2]
    G = grid.shape[0]
    n0 = np.float64(counts[0, c])
    n1 = np.float64(counts[1, c])
    for j in range(k):
        s0[j] = np.float64(sums[0, c, j]) * scale
        s1[j] = np.float64(sums[1, c, j]) * scale
    ok = True
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
            inside, c_terms, s_terms = _cast_terms(x0, y0, x1, y1)
            ok = ok & inside
            total_c += c_terms
            total_s += s_terms
        if sign > 0:
            cross[g] += total_c
            square[g] += total_s
        else:
            cross[g] -= total_c
            square[g] -= total_s
    return ok


BLOCK_CELLS = 64
"""Cells whose terms are computed side by side by :func:`_block_terms_into`."""


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _block_terms_into(
    sums, counts, cells, first, m, grid, scale, unit, scratch, means, cross, square, small
):
    """Add the terms of :func:`_cell_terms_into` of cells ``cells[first : first + m]``
    (m ≤ BLOCK_CELLS) to ``cross``/``square`` (G,): the same float operations on each cell,
    with the cells of the block in the innermost loop, so it runs as vector instructions over
    cells (~1.7× faster than one cell at a time over k = 10 outputs). ``scratch``
    (2k + 6, BLOCK_CELLS) float64. False when a term leaves the int64 range.

    ``small`` (a constant where this is inlined): the terms are converted to integers by
    :func:`_small_terms` (vector instructions where the machine has no vector float → int64
    conversion: 25 % off a refresh of every cell at 300k rows on an AVX2 machine), and False
    means a term is 2^51 or more in magnitude (or not finite) — at no realistic size: a cell
    would need ~2^27 rows — so the caller's numpy route decides (``FlatTables._all_terms``),
    as for a term out of the int64 range: the integers are the cast's in every case. For the
    passes over every cell; a one-row update's few cells keep the cast (on an AVX-512
    machine, which converts by vector anyway, the extra range test made them ~10 % slower).

    The means it divides out are left in ``means`` (2, G, k, BLOCK_CELLS): means[f, g, j, e]
    = (S_f · scale) / (n_f + λ_g) of cell e — the very operations of
    :func:`_probe_terms_into` on that fold-qualified cell, so the probe terms can be rounded
    from them without dividing again (:func:`_block_probe_terms`)."""
    k = sums.shape[2]
    G = grid.shape[0]
    n0 = scratch[2 * k]
    n1 = scratch[2 * k + 1]
    d0 = scratch[2 * k + 2]
    d1 = scratch[2 * k + 3]
    for e in range(m):
        c = cells[first + e]
        n0[e] = np.float64(counts[0, c])
        n1[e] = np.float64(counts[1, c])
        for j in range(k):
            scratch[j, e] = np.float64(sums[0, c, j]) * scale
            scratch[k + j, e] = np.float64(sums[1, c, j]) * scale
    ok = True
    for g in range(G):
        for e in range(m):
            d0[e] = n0[e] + grid[g]
            d1[e] = n1[e] + grid[g]
        total_c = np.int64(0)
        total_s = np.int64(0)
        for j in range(k):
            s0 = scratch[j]
            s1 = scratch[k + j]
            kept0 = means[0, g, j]
            kept1 = means[1, g, j]
            for e in range(m):
                mu0 = s0[e] / d0[e]  # fold 0's mean, scored on fold 1's rows
                mu1 = s1[e] / d1[e]
                kept0[e] = mu0
                kept1[e] = mu1
                x0 = np.rint(s1[e] * mu0 * unit)
                y0 = np.rint(n1[e] * mu0 * mu0 * unit)
                x1 = np.rint(s0[e] * mu1 * unit)
                y1 = np.rint(n0[e] * mu1 * mu1 * unit)
                if small:
                    inside, c_terms, s_terms = _small_terms(x0, y0, x1, y1)
                else:
                    inside, c_terms, s_terms = _cast_terms(x0, y0, x1, y1)
                ok = ok & inside
                total_c += c_terms
                total_s += s_terms
        cross[g] += total_c
        square[g] += total_s
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def cell_terms(sums, counts, cells, grid, scale, unit, cross, square) -> bool:
    """The cross-fit terms of ``FlatTables._terms`` (:func:`_cell_terms_into`) of table-major
    cells ``cells``: ``sums`` (2, cells, k), ``counts`` (2, cells); results in
    ``cross``/``square`` (m, G). False when a term leaves the int64 range (numpy decides)."""
    k = sums.shape[2]
    s0 = np.empty(k, dtype=np.float64)  # S · scale of one cell, fold 0
    s1 = np.empty(k, dtype=np.float64)  # and fold 1
    ok = True
    for e in range(cells.shape[0]):
        cross[e, :] = 0
        square[e, :] = 0
        ok = ok & _cell_terms_into(
            sums, counts, cells[e], grid, scale, unit, s0, s1, cross[e], square[e], 1
        )
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _probe_terms_into(flat_sums, flat_counts, q, grid, scale, mean_unit, square_unit, scaled, out):
    """One probe entry's terms (``out`` (G, k + 1)) of fold-qualified cell ``q``: per λ_g,
    μ = (S_q · scale) / (n_q + λ_g); out[g, j] = rint(μ_j · mean_unit) and
    out[g, k] = Σ_j rint((μ_j · μ_j) · square_unit). False as :func:`_cell_terms_into`
    (same branch-free range test). The one compiled definition of these terms."""
    k = flat_sums.shape[1]
    G = grid.shape[0]
    n = np.float64(flat_counts[q])
    for j in range(k):
        scaled[j] = np.float64(flat_sums[q, j]) * scale
    ok = True
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
            out[g, j] = np.int64(x if inside else 0.0)
            total += np.int64(y if inside else 0.0)
        out[g, k] = total
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def probe_terms(flat_sums, flat_counts, qualified, grid, scale, mean_unit, square_unit, out):
    """``FlatTables._probe_terms``: out[:, e, :] = the terms (:func:`_probe_terms_into`) of
    fold-qualified cell ``qualified[e]``. False when a term leaves the int64 range."""
    k = flat_sums.shape[1]
    G = grid.shape[0]
    scaled = np.empty(k, dtype=np.float64)  # S · scale of one cell
    one = np.empty((G, k + 1), dtype=np.int64)
    ok = True
    for e in range(qualified.shape[0]):
        ok = ok & _probe_terms_into(
            flat_sums, flat_counts, qualified[e], grid, scale, mean_unit, square_unit, scaled, one
        )
        out[:, e, :] = one
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


@numba.njit(cache=True, nogil=True)
def _codes_valid(codes, folds, C) -> bool:
    n, T = codes.shape
    for i in range(n):
        if folds[i] != 0 and folds[i] != 1:
            return False
        for t in range(T):
            if codes[i, t] < 0 or codes[i, t] >= C:
                return False
    return True


_AHEAD = 32
"""Rows the bulk scatter looks ahead to prefetch their cells (:func:`_scatter`)."""


@numba.njit(cache=True, nogil=True)
def _scatter(sums, counts, codes, folds, values, negate) -> None:
    """The scatter of :func:`scatter_codes`, fold by fold and table by table: one fold's
    cells of one table (C·k int64) stay in cache while that fold's rows add to them, and the
    rows' values and cell codes are first gathered per fold into contiguous arrays (codes
    transposed, table-major), so each table's pass streams them instead of striding through
    every row (1.4× faster at 65k rows than row-major passes over both folds; integer sums
    do not depend on the order). A table's cells of one fold are 2^12 · k int64 (~330 KB at
    k = 10) that a batch touches in random order, each line first from memory: the cell of
    the row :data:`_AHEAD` rows on is prefetched, so those misses overlap (a 20k-row batch
    on 64 × 4096 cells, k = 10: about half the time, measured; a hint changes no value)."""
    n, T = codes.shape
    C = sums.shape[1] // T
    k = values.shape[1]
    if n < 256:  # a few rows: straight in, nothing to gather
        for t in range(T):
            for i in range(n):
                f = 1 if folds[i] else 0
                r = t * C + np.int64(codes[i, t])
                for j in range(k):
                    if negate:
                        sums[f, r, j] -= values[i, j]
                    else:
                        sums[f, r, j] += values[i, j]
                counts[f, r] += -1 if negate else 1
        return
    n1 = 0
    for i in range(n):
        n1 += 1 if folds[i] else 0
    for f in range(2):
        m = n1 if f == 1 else n - n1
        if m == 0:
            continue
        rows = np.empty(m, dtype=np.int64)
        e = 0
        for i in range(n):
            if (folds[i] != 0) == (f == 1):
                rows[e] = i
                e += 1
        gathered = np.empty((m, k), dtype=np.int64)
        for e in range(m):
            for j in range(k):
                gathered[e, j] = values[rows[e], j]
        by_table = np.empty((T, m), dtype=codes.dtype)
        for s in range(0, m, 256):  # blocks of rows: a row's codes are read once
            for t in range(T):
                for e in range(s, min(m, s + 256)):
                    by_table[t, e] = codes[rows[e], t]
        fold_sums = sums[f]
        fold_counts = counts[f]
        line_sums = fold_sums.reshape(fold_sums.size)
        for t in range(T):
            base = t * C
            table_codes = by_table[t]
            for e in range(m):
                if e + _AHEAD < m:  # the cell _AHEAD rows on: its lines arrive meanwhile
                    ahead = base + np.int64(table_codes[e + _AHEAD])
                    _prefetch(line_sums, ahead * k)
                    _prefetch(line_sums, ahead * k + k - 1)
                    _prefetch(fold_counts, ahead)
                r = base + np.int64(table_codes[e])
                if negate:
                    for j in range(k):
                        fold_sums[r, j] -= gathered[e, j]
                    fold_counts[r] -= 1
                else:
                    for j in range(k):
                        fold_sums[r, j] += gathered[e, j]
                    fold_counts[r] += 1


@numba.njit(cache=True, nogil=True)
def scatter_codes(sums, counts, codes, folds, values, negate) -> bool:
    """sums[f_i, t·C + c_it, :] ±= values[i, :] and counts[f_i, t·C + c_it] ±= 1 for every
    row i and table t (− when ``negate``): the flat tables' ``add``/``subtract`` straight
    from the cell codes (n, T) and folds (n,), without the int64 index temporaries numpy
    needs (int64 arithmetic wraps like numpy's, and a − v ≡ a + (−v) mod 2^64). ``sums``
    (2, T·C, k), ``counts`` (2, T·C). False, with nothing written, when a code lies outside
    0..C−1 or a fold is not 0 or 1."""
    T = codes.shape[1]
    if T == 0 or sums.shape[1] % T != 0:
        return False
    if not _codes_valid(codes, folds, sums.shape[1] // T):
        return False
    _scatter(sums, counts, codes, folds, values, negate)
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def _fold_empty(sums, counts, f, c) -> bool:
    """Fold ``f`` of cell ``c`` holds nothing: count 0 and every sum 0."""
    bits = counts[f, c]
    for j in range(sums.shape[2]):
        bits |= sums[f, c, j]
    return bits == 0


@numba.njit(cache=True, nogil=True, inline="always")
def _terms_vanish(sums, counts, c) -> bool:
    """Every cross-fit term of cell ``c`` is exactly 0 (and in range), given λ > 0 for the
    whole grid, scale ≤ 1 and a finite unit (the caller checks those once).

    Why: with fold a empty, μ_a = 0 / (0 + λ) = 0, so fold a's terms (S_b·μ_a, n_b·μ_a·μ_a,
    times the unit) are ±0; and fold b's terms are S_a·μ_b = 0·μ_b and n_a·μ_b·μ_b = 0·μ_b·μ_b,
    ±0 as long as μ_b = (S_b·scale) / (n_b + λ) is finite — so n_b ≥ 1 (then n_b + λ > 1 and
    |μ_b| < 2^63) or fold b empty as well. rint(±0) casts to 0, which adds nothing. Cells
    with negative counts or sums without a count are never skipped: their arithmetic may give
    inf/NaN, which must reach the range test (numpy decides)."""
    e0 = _fold_empty(sums, counts, 0, c)
    e1 = _fold_empty(sums, counts, 1, c)
    return (e0 & (e1 | (counts[1, c] >= 1))) | (e1 & (counts[0, c] >= 1))


@numba.njit(cache=True, nogil=True, error_model="numpy")
def total_terms(sums, counts, chunk, grid, scale, unit, cross, square) -> bool:
    """Per block of ``chunk`` consecutive cells (a multiple of BLOCK_CELLS) and λ_g:
    cross[b, g] / square[b, g] = Σ over the block's cells of their terms
    (:func:`_block_terms_into`; int64, wrapping as numpy's sum of the block's terms would),
    without materializing per-cell terms. ``sums`` (2, cells, k), ``cross``/``square``
    (⌈cells / chunk⌉, G). False when a term leaves the int64 range (numpy decides).

    Cells whose terms are exactly 0 (:func:`_terms_vanish`: one fold empty — half the
    cells of a 300k-row build with 4096 cells per table) are left out of the blocks, the
    others are gathered 64 at a time: the divisions, which bound this pass, are spent only
    where a term can be nonzero. Adding 0 changes no sum, so the totals are the same."""
    k = sums.shape[2]
    R = sums.shape[1]
    scratch = np.empty((2 * k + 6, BLOCK_CELLS), dtype=np.float64)
    means = np.empty((2, grid.shape[0], k, BLOCK_CELLS), dtype=np.float64)
    index = np.empty(BLOCK_CELLS, dtype=np.int64)
    cross[:, :] = 0
    square[:, :] = 0
    skip = scale <= 1.0 and unit < np.inf
    for g in range(grid.shape[0]):
        skip = skip and grid[g] > 0.0  # False for NaN too
    ok = True
    for first in range(0, R, chunk):
        b = first // chunk
        m = 0
        last = min(R, first + chunk) - 1
        for c in range(first, last + 1):
            index[m] = c  # kept unless its terms vanish (no branch: half the cells do)
            m += np.int64(not (skip & _terms_vanish(sums, counts, c)))
            if m == BLOCK_CELLS or (c == last and m > 0):  # a full block, or the chunk's rest
                ok = ok & _block_terms_into(
                    sums,
                    counts,
                    index,
                    0,
                    m,
                    grid,
                    scale,
                    unit,
                    scratch,
                    means,
                    cross[b],
                    square[b],
                    True,
                )
                m = 0
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def probe_sums_by_cell(
    flat_sums, flat_counts, keys, probe_of, grid, scale, mean_unit, square_unit, out
) -> bool:
    """``FlatTables._all_probe_sums`` from the probe index: ``keys`` (the probe entries'
    fold-qualified out-of-fold cells, sorted) and ``probe_of`` (each entry's probe). The
    terms of a cell (:func:`_probe_terms_into`) are computed once per run of equal keys and
    added to every probe of the run — a cell holds ~2.3 entries at 300k rows, all with that
    cell's mean; the same integers, summed in another order (int64 sums do not see it). ``out``
    (G, m, k + 1) is overwritten. False when a term leaves the int64 range or an index is
    out of bounds."""
    R = flat_sums.shape[0]
    M = out.shape[1]
    for e in range(keys.shape[0]):
        if keys[e] < 0 or keys[e] >= R or probe_of[e] < 0 or probe_of[e] >= M:
            return False
    k = flat_sums.shape[1]
    G = grid.shape[0]
    scaled = np.empty(k, dtype=np.float64)
    one = np.empty((G, k + 1), dtype=np.int64)
    acc = np.zeros((M, G, k + 1), dtype=np.int64)
    ok = True
    e = 0
    while e < keys.shape[0]:
        q = keys[e]
        ok = ok & _probe_terms_into(
            flat_sums, flat_counts, q, grid, scale, mean_unit, square_unit, scaled, one
        )
        lo = e
        while e < keys.shape[0] and keys[e] == q:
            e += 1
        _add_probe_terms(acc, probe_of, lo, e, one)
    _probe_major_into(acc, out)
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _add_probe_terms(acc, probe_of, lo, hi, one) -> None:
    """acc[probe_of[x]] += one for every probe entry x in lo..hi−1: ``acc`` (m, G, k + 1)
    is probe-major, so one entry adds G·(k + 1) contiguous int64 (~6 cache lines at k = 10)
    where the (G, m, k + 1) layout scattered them over G rows ~m·(k + 1)·8 bytes apart
    (:func:`_probe_major_into` writes them out in that layout at the end)."""
    G, K = one.shape
    for x in range(lo, hi):
        row = acc[probe_of[x]]
        for g in range(G):
            for j in range(K):
                row[g, j] += one[g, j]


@numba.njit(cache=True, nogil=True, inline="always")
def _probe_major_into(acc, out) -> None:
    """out[g, p, j] = acc[p, g, j]."""
    M, G, K = acc.shape
    for g in range(G):
        for p in range(M):
            for j in range(K):
                out[g, p, j] = acc[p, g, j]


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _round_block_means(means, f, e, mean_unit, square_unit, one) -> bool:
    """The probe terms of the block's kept means of cell e, fold f, every λ (``one``
    (G, k + 1)): one[g, j] = rint(μ_j · mean_unit), one[g, k] = Σ_j rint((μ_j · μ_j) ·
    square_unit), as :func:`_probe_terms_into` rounds them, converted by :func:`_small_int`;
    indexed in place (a view per λ cost ~10 % of a refresh). False when a value is 2^51 or
    more in magnitude (or not finite): the probe sums are then left to the separate pass
    (``FlatTables._all_probe_sums``: the cast, and numpy beyond int64)."""
    G = means.shape[1]
    k = means.shape[2]
    ok = True
    for g in range(G):
        total = np.int64(0)
        for j in range(k):
            mu = means[f, g, j, e]
            x = np.rint(mu * mean_unit)
            y = np.rint(mu * mu * square_unit)
            ok = ok & (abs(x) < _SMALL_LIMIT) & (abs(y) < _SMALL_LIMIT)
            one[g, j] = _small_int(x)
            total += _small_int(y)
        one[g, k] = total
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _block_probe_terms(
    means, index, m, R, probe_start, probe_of, mean_unit, square_unit, one, acc
) -> bool:
    """The probe terms of both folds of the block's cells ``index[:m]`` that hold probe
    entries, rounded from the block's ``means`` (:func:`_block_terms_into`) exactly as
    :func:`_probe_terms_into` rounds the same quotients, and added to their probes."""
    ok = True
    for e in range(m):
        for f in range(2):
            q = f * R + index[e]
            lo = probe_start[q]
            hi = probe_start[q + 1]
            if hi == lo:
                continue
            ok = ok & _round_block_means(means, f, e, mean_unit, square_unit, one)
            _add_probe_terms(acc, probe_of, lo, hi, one)
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def refresh_terms(
    sums,
    counts,
    chunk,
    grid,
    scale,
    unit,
    cross,
    square,
    probe_start,
    probe_of,
    mean_unit,
    square_unit,
    probe_out,
) -> int:
    """:func:`total_terms` and :func:`probe_sums_by_cell` in one pass over the cells: a
    cell's probe terms are rounded from the means its cross-fit terms divided out, so the
    probes cost no division of their own (at 300k rows the separate probe pass spent as long
    as the totals). Cells whose cross-fit terms vanish are skipped for those; their probe
    terms, if any probe lives there, are computed as :func:`_probe_terms_into` does.

    ``probe_start`` (2·cells + 1) and ``probe_of`` are the probe index of ``FlatTables``
    (entries of fold-qualified cell q: probe_of[probe_start[q]:probe_start[q + 1]]);
    ``probe_out`` (G, m, k + 1) is overwritten. Returns bit 0 set when the totals are
    valid, bit 1 when the probe sums are (a term out of the int64 range, or an index out of
    bounds for the probes, clears its bit: numpy decides that part)."""
    k = sums.shape[2]
    R = sums.shape[1]
    G = grid.shape[0]
    M = probe_out.shape[1]
    cross[:, :] = 0
    square[:, :] = 0
    probe_out[:, :, :] = 0
    if probe_start.shape[0] != 2 * R + 1 or probe_start[0] != 0:
        return 0
    if probe_start[2 * R] != probe_of.shape[0]:
        return 0
    for q in range(2 * R):
        if probe_start[q + 1] < probe_start[q]:
            return 0
    for x in range(probe_of.shape[0]):
        if probe_of[x] < 0 or probe_of[x] >= M:
            return 0
    flat_sums = sums.reshape((2 * R, k))
    flat_counts = counts.reshape(2 * R)
    scratch = np.empty((2 * k + 6, BLOCK_CELLS), dtype=np.float64)
    means = np.empty((2, G, k, BLOCK_CELLS), dtype=np.float64)
    index = np.empty(BLOCK_CELLS, dtype=np.int64)
    acc = np.zeros((M, G, k + 1), dtype=np.int64)  # probe-major sums, copied out at the end
    scaled = np.empty(k, dtype=np.float64)
    one = np.empty((G, k + 1), dtype=np.int64)
    skip = scale <= 1.0 and unit < np.inf
    for g in range(G):
        skip = skip and grid[g] > 0.0  # False for NaN too
    ok = True
    ok_probes = True
    pending = np.empty(chunk, dtype=np.int64)  # skipped cells that hold probe entries
    for first in range(0, R, chunk):
        b = first // chunk
        m = 0
        npend = 0
        last = min(R, first + chunk) - 1
        for c in range(first, last + 1):
            vanish = skip & _terms_vanish(sums, counts, c)
            held = (probe_start[c + 1] > probe_start[c]) | (
                probe_start[R + c + 1] > probe_start[R + c]
            )
            pending[npend] = c  # no branches: which cells vanish is a coin flip
            npend += np.int64(vanish & held)
            index[m] = c
            m += np.int64(not vanish)
            if m == BLOCK_CELLS or (c == last and m > 0):  # a full block, or the chunk's rest
                ok = ok & _block_terms_into(
                    sums,
                    counts,
                    index,
                    0,
                    m,
                    grid,
                    scale,
                    unit,
                    scratch,
                    means,
                    cross[b],
                    square[b],
                    True,
                )
                ok_probes = ok_probes & _block_probe_terms(
                    means,
                    index,
                    m,
                    R,
                    probe_start,
                    probe_of,
                    mean_unit,
                    square_unit,
                    one,
                    acc,
                )
                m = 0
        for e in range(npend):
            for f in range(2):
                q = f * R + pending[e]
                if probe_start[q + 1] > probe_start[q]:
                    ok_probes = ok_probes & _probe_terms_into(
                        flat_sums, flat_counts, q, grid, scale, mean_unit, square_unit, scaled, one
                    )
                    _add_probe_terms(acc, probe_of, probe_start[q], probe_start[q + 1], one)
    _probe_major_into(acc, probe_out)
    return (1 if ok else 0) | (2 if ok_probes else 0)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _cells_terms_into(sums, counts, cells, nc, grid, scale, unit, scratch, cross, square) -> bool:
    """Add the terms of the table-major cells ``cells[:nc]`` to ``cross``/``square`` (G),
    block by block (:func:`_block_terms_into`)."""
    means = np.empty((2, grid.shape[0], sums.shape[2], BLOCK_CELLS), dtype=np.float64)
    ok = True
    for first in range(0, nc, BLOCK_CELLS):
        ok = ok & _block_terms_into(
            sums,
            counts,
            cells,
            first,
            min(nc, first + BLOCK_CELLS) - first,
            grid,
            scale,
            unit,
            scratch,
            means,
            cross,
            square,
            False,
        )
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _entries_terms_into(
    flat_sums, flat_counts, entry_cell, grid, scale, mean_unit, square_unit, scaled, out
) -> bool:
    """out[e] = the probe terms (:func:`_probe_terms_into`) of fold-qualified cell
    ``entry_cell[e]``, for every probe entry e."""
    ok = True
    for e in range(entry_cell.shape[0]):
        ok = ok & _probe_terms_into(
            flat_sums,
            flat_counts,
            entry_cell[e],
            grid,
            scale,
            mean_unit,
            square_unit,
            scaled,
            out[e],
        )
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def update_cells(
    sums,
    counts,
    codes,
    folds,
    values,
    negate,
    grid,
    scale,
    loss_unit,
    probe_start,
    probe_of,
    probe_records,
    mean_unit,
    square_unit,
    probe_folds,
    norm_unit,
    norm_terms,
    marks,
    out,
) -> bool:
    """A whole incremental ``FlatTables`` update in one call, for a few rows: the scatter
    (:func:`scatter_codes`), the change of the cross-fit totals (new − old terms of every
    touched table-major cell, :func:`_cell_terms_into`) and of the probe sums (new − old terms
    of every probe entry whose out-of-fold cell was touched, :func:`_probe_terms_into`).

    The same integers as the numpy path: the same per-cell and per-entry terms, summed as int64
    (exact in any order). The probe entries of fold-qualified cell q are
    ``probe_of[probe_start[q]:probe_start[q + 1]]`` (their probes); ``marks`` is a zeroed uint8
    scratch of 2·T·C entries (zeroed again on return) that finds each touched cell once among
    several rows' (one row's T cells are distinct: its update reads no marks). ``probe_records``
    (m, W) holds probe p's sums in one row, λ by λ — entry g·(k + 1) + j is the logical probe
    sums' [g, p, j] (content.tables._ProbeNorms) — and ``norm_terms`` (m, G) is a float64 view
    of columns G·(k + 1) … of the same rows: each probe's current norm terms
    (:func:`_norm_terms_into` with ``norm_unit``, float64 integers), rewritten here for the
    changed probes. ``out`` (6G + 2) receives Δcross (G), Δsquare (G), the rows in fold 1, then
    the change of the probes' per-fold totals: ΔN (fold 0's G, then fold 1's G) of the probes'
    norm terms and ΔQ (likewise) of their sums' last column, new − old over the probes that
    changed (``probe_folds[p]``: a probe's own fold); and last whether those deltas hold: 0 when
    some term reached 2^50 (a sum of up to 2^12 of them might leave int64: the caller recounts
    the totals and terms from the probe sums, exactly). False, with the tables as they were,
    when an index is invalid or a cell or probe term leaves the int64 range (numpy decides).

    Why it is laid out this way (measured at n = 300k, T = 64, k = 10, ~1.4k probes, in a
    process that predicts between forgets, so nothing is in cache): a touched cell holds
    ~5 probe entries, all with that cell's mean, so the probe terms are computed once per
    touched fold-qualified cell (the same operations on the same integers, hence the same
    terms) and the difference added to each of its probes; each changed probe's norm terms
    are taken once before its first change and once from its final sums (the per-fold totals
    change by new − old: the same integers as recounting them); and every cache line the
    update will touch is requested (:func:`_prefetch`) as soon as its address is known —
    cells and the probe index first, the probe rows once the index is read — so the misses
    overlap instead of queueing. A probe's sums and norm terms share one record of whole
    cache lines (6 at k = 10, G = 4): a one-row forget changes ~300 of the ~1.4k probes of
    each instance, and their lines were its largest memory traffic — G rows of 88 bytes
    125 KB apart plus a line of norm terms, 9 lines per probe, where the record is 6
    adjacent ones (in-process A/B on a 2-core EPYC VM, whose memory is slow: t_fast p50
    −174 µs, 90 % interval −227 … −43 µs).
    """
    n, T = codes.shape
    TC = sums.shape[1]
    if T == 0 or TC % T != 0:
        return False
    C = TC // T
    if not _codes_valid(codes, folds, C):
        return False
    k = sums.shape[2]
    G = grid.shape[0]
    flat_sums = sums.reshape((2 * TC, k))
    flat_counts = counts.reshape(2 * TC)
    line_sums = sums.reshape(2 * TC * k)
    for i in range(n):  # the cells' lines and their probe index, all at once
        f = np.int64(folds[i])
        for t in range(T):
            c = t * C + np.int64(codes[i, t])
            _prefetch(probe_start, f * TC + c)
            _prefetch(line_sums, c * k)
            _prefetch(line_sums, c * k + k - 1)
            _prefetch(line_sums, (TC + c) * k)
            _prefetch(line_sums, (TC + c) * k + k - 1)
            _prefetch(flat_counts, c)
            _prefetch(flat_counts, TC + c)
    # the touched fold-qualified cells (bit 1) and table-major cells (bit 2), each once
    quals = np.empty(n * T, dtype=np.int64)
    cells = np.empty(n * T, dtype=np.int64)
    nq = 0
    nc = 0
    ones = 0
    if n == 1:  # one row's T cells are distinct already (one per table): no marks read
        f = np.int64(folds[0])
        ones = f
        for t in range(T):
            c = t * C + np.int64(codes[0, t])
            quals[t] = f * TC + c
            cells[t] = c
        nq = T
        nc = T
    else:
        for i in range(n):
            f = np.int64(folds[i])
            ones += f
            for t in range(T):
                c = t * C + np.int64(codes[i, t])
                q = f * TC + c
                if marks[q] & 1 == 0:
                    marks[q] |= 1
                    quals[nq] = q
                    nq += 1
                if marks[c] & 2 == 0:
                    marks[c] |= 2
                    cells[nc] = c
                    nc += 1
        for e in range(nq):
            marks[quals[e]] = 0
        for e in range(nc):
            marks[cells[e]] = 0
    # the touched fold-qualified cells that hold probe entries (each once)
    held = np.empty(nq, dtype=np.int64)
    nh = 0
    for e in range(nq):
        q = quals[e]
        lo = probe_start[q]
        hi = probe_start[q + 1]
        if hi > lo:
            held[nh] = q
            nh += 1
            _prefetch(probe_of, lo)
            _prefetch(probe_of, hi - 1)
    s0 = np.empty(k, dtype=np.float64)  # one cell's scaled sums
    scratch = np.empty((2 * k + 6, BLOCK_CELLS), dtype=np.float64)
    old_cross = np.zeros(G, dtype=np.int64)
    old_square = np.zeros(G, dtype=np.int64)
    old = np.empty((nh, G, k + 1), dtype=np.int64)
    ok = _entries_terms_into(
        flat_sums, flat_counts, held[:nh], grid, scale, mean_unit, square_unit, s0, old
    )
    # the records of the probes about to change (their index lines have arrived meanwhile)
    m = probe_folds.shape[0]
    width = probe_records.shape[1]
    if probe_records.shape[0] != m or width < G * (k + 2) or norm_terms.shape[0] != m:
        return False
    line_records = probe_records.reshape(m * width)
    for h in range(nh):
        q = held[h]
        for x in range(probe_start[q], probe_start[q + 1]):
            p = probe_of[x]
            for at in range(0, width, 8):
                _prefetch(line_records, p * width + at)
    ok = ok & _cells_terms_into(
        sums, counts, cells, nc, grid, scale, loss_unit, scratch, old_cross, old_square
    )
    if not ok:
        return False
    _scatter(sums, counts, codes, folds, values, negate)
    d_cross = np.zeros(G, dtype=np.int64)
    d_square = np.zeros(G, dtype=np.int64)
    new = np.empty((nh, G, k + 1), dtype=np.int64)
    ok = _cells_terms_into(
        sums, counts, cells, nc, grid, scale, loss_unit, scratch, d_cross, d_square
    ) & _entries_terms_into(
        flat_sums, flat_counts, held[:nh], grid, scale, mean_unit, square_unit, s0, new
    )
    if not ok:
        _scatter(sums, counts, codes, folds, values, not negate)  # undo: exact integers
        return False
    changed = np.zeros(m, dtype=np.uint8)  # probes whose sums changed, each listed once
    listed = np.empty(m, dtype=np.int64)
    nl = 0
    d_norm = np.zeros((2, G), dtype=np.int64)  # per fold and λ: new − old norm terms
    d_last = np.zeros((2, G), dtype=np.int64)  # and of the sums' last column
    held_ok = True
    span = G * (k + 1)  # a record's sums; the new − old terms of a cell in the same order
    flat_new = new.reshape((nh, span))
    flat_old = old.reshape((nh, span))
    for h in range(nh):
        q = held[h]
        for at in range(span):
            flat_new[h, at] -= flat_old[h, at]  # int64: exact (wraps like numpy's new − old)
        for x in range(probe_start[q], probe_start[q + 1]):
            p = probe_of[x]
            if changed[p] == 0:  # its terms before its first change
                changed[p] = 1
                listed[nl] = p
                nl += 1
                held_ok = held_ok & _take_norm_terms(
                    probe_records,
                    p,
                    probe_folds[p],
                    k,
                    G,
                    norm_unit,
                    norm_terms,
                    d_norm,
                    d_last,
                    -1,
                )
            for at in range(span):
                probe_records[p, at] += flat_new[h, at]
    for e in range(nl):  # and after its last
        p = listed[e]
        held_ok = held_ok & _take_norm_terms(
            probe_records, p, probe_folds[p], k, G, norm_unit, norm_terms, d_norm, d_last, 1
        )
    for g in range(G):
        out[g] = d_cross[g] - old_cross[g]  # int64: exact (wraps like numpy's new − old)
        out[G + g] = d_square[g] - old_square[g]
        for b in range(2):
            out[2 * G + 1 + b * G + g] = d_norm[b, g]
            out[4 * G + 1 + b * G + g] = d_last[b, g]
    out[2 * G] = ones
    out[6 * G + 1] = 1 if held_ok else 0
    return True


NORM_TERM_LIMIT = 2.0**50
"""Norm terms and last-column sums below this add up exactly in int64 over ≤ 2^12 probes
(MAX_PROBES): the compiled update's per-fold deltas are trusted only then."""


@numba.njit(cache=True, nogil=True, inline="always")
def _norm_terms_into(records, p, k, G, unit, terms) -> None:
    """terms[g] = rint(Σ_j float64(S_j)² · unit) for probe p's k mean sums S under each λ_g
    (its record, :func:`update_cells`): per λ the outputs in order, one product and one sum
    each (content.tables.probe_norm_terms) — the G sums interleaved, each in its own order."""
    for g in range(G):
        terms[g] = 0.0
    for j in range(k):
        for g in range(G):
            x = np.float64(records[p, g * (k + 1) + j])
            terms[g] += x * x
    for g in range(G):
        terms[g] = np.rint(terms[g] * unit)


@numba.njit(cache=True, nogil=True, inline="always")
def _take_norm_terms(records, p, b, k, G, unit, terms, d_norm, d_last, sign) -> bool:
    """Add ``sign`` × probe p's norm terms and last-column sums (every λ) to fold b's
    deltas; False when one of them reaches NORM_TERM_LIMIT (nothing is added for it then).
    The terms before a change (``sign`` < 0) are the kept ones, ``terms[p]``; after it they
    are computed from the record and kept."""
    ok = True
    if sign > 0:
        _norm_terms_into(records, p, k, G, unit, terms[p])
    for g in range(G):
        term = terms[p, g]
        last = records[p, g * (k + 1) + k]
        if term < NORM_TERM_LIMIT and -NORM_TERM_LIMIT < last < NORM_TERM_LIMIT:
            d_norm[b, g] += sign * np.int64(term)
            d_last[b, g] += sign * last
        else:
            ok = False
    return ok


SERVE_AHEAD = 2
"""Rows ahead whose cells :func:`serve_correction` asks for while it sums the current row's:
each row reads 64 cells scattered over ~40 MB of sums, one memory latency apiece when
fetched in turn."""


@numba.njit(cache=True, nogil=True, error_model="numpy")
def serve_correction(sums, counts, codes, scale, shrinkage, mean_unit, out_unit, out) -> bool:
    """``FlatTables._correction`` for rows with cell ``codes`` (n, T), into ``out`` (n, k):
    per table μ = S·scale / (n + λ) of the cell's two folds (S, n exact int64 sums), rounded to
    the 2^-MEAN_BITS grid, summed over tables as int64, then · 2^-MEAN_BITS / T — the same
    float operations in the same order as the numpy definition, element by element, with no
    (n, T, k) temporaries (a 20k-row prediction gathered 12.8 M of them per instance).

    False, with ``out`` unspecified, on anything but ordinary numbers and valid cells (a code
    outside its table, an empty cell at λ = 0, a mean outside int64): the caller then runs
    the numpy definition, which decides (reads, raises or rounds exactly as it always did).
    """
    n_rows, T = codes.shape
    TC = sums.shape[1]
    k = sums.shape[2]
    if T == 0 or TC % T != 0:
        return False
    C = TC // T
    total = np.empty(k, dtype=np.int64)
    line_sums = sums.reshape(2 * TC * k)
    line_counts = counts.reshape(2 * TC)
    for i in range(n_rows):
        for c in range(k):
            total[c] = 0
        if i + SERVE_AHEAD < n_rows:  # the cells of a row a few ahead: their misses overlap
            ahead = i + SERVE_AHEAD
            for t in range(T):
                code = np.int64(codes[ahead, t])
                if 0 <= code < C:
                    cell = t * C + code
                    _prefetch(line_sums, cell * k)
                    _prefetch(line_sums, cell * k + k - 1)
                    _prefetch(line_sums, (TC + cell) * k)
                    _prefetch(line_sums, (TC + cell) * k + k - 1)
                    _prefetch(line_counts, cell)
                    _prefetch(line_counts, TC + cell)
        for t in range(T):
            code = codes[i, t]
            if code < 0 or code >= C:
                return False
            cell = t * C + code
            rows = np.float64(counts[0, cell] + counts[1, cell])
            denominator = rows + shrinkage
            if denominator == 0.0:
                return False
            for c in range(k):
                mu = np.float64(sums[0, cell, c] + sums[1, cell, c]) * scale / denominator
                fixed = np.rint(mu * mean_unit)
                if not (-9.2e18 < fixed < 9.2e18):
                    return False
                total[c] += np.int64(fixed)
        for c in range(k):
            out[i, c] = np.float64(total[c]) * out_unit / T
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy")
def serve_normalize(X, out) -> None:
    """Serving's L2 normalization of rows ``X`` (n, d ≥ 1) into ``out``: per row the sum of
    squares left to right (first term, then each next one added: ``np.add.accumulate``'s
    order), its square root (1 for an all-zero row), each entry divided by it —
    schema.serving's numpy definition, operation for operation (no fused multiply-add)."""
    n, d = X.shape
    for i in range(n):
        sq = X[i, 0] * X[i, 0]
        for j in range(1, d):
            sq += X[i, j] * X[i, j]
        norm = np.sqrt(sq)
        if norm == 0.0:
            norm = 1.0
        for j in range(d):
            out[i, j] = X[i, j] / norm


@numba.njit(cache=True, nogil=True, error_model="numpy")
def serve_scores(U, P, coef, b, phi, scores) -> None:
    """φ and the logistic scores of serving-normalized rows ``U`` (n, d) under s schemas at
    once: schema r's LDA directions ``P[r]`` (d, e; e = 0: no LDA, φ is u itself), its g's
    coef_ᵀ ``coef[r]`` (d + e, k) and intercept ``b[r]`` (k,), into ``phi`` (s, n, d + e) and
    ``scores`` (s, n, k). With LDA, t = u P, φ = [u, t] / ‖[u, t]‖; then scores = φ coef + b.
    Every sum runs left to right from its first term (``np.add.accumulate``'s order: the
    numpy definition in schema.serving), so each output depends on its own row and schema
    only — the same bits alone or in any batch, under one schema or several."""
    s = coef.shape[0]
    n, d = U.shape
    e = P.shape[2]
    D = d + e
    k = coef.shape[2]
    t = np.empty(max(e, 1))
    acc = np.empty(k)
    for r in range(s):
        for i in range(n):
            if e == 0:
                for j in range(d):
                    phi[r, i, j] = U[i, j]
            else:
                u0 = U[i, 0]
                for c in range(e):
                    t[c] = u0 * P[r, 0, c]
                for j in range(1, d):
                    uj = U[i, j]
                    for c in range(e):
                        t[c] += uj * P[r, j, c]
                sq = U[i, 0] * U[i, 0]
                for j in range(1, d):
                    sq += U[i, j] * U[i, j]
                for c in range(e):
                    sq += t[c] * t[c]
                norm = np.sqrt(sq)
                if norm == 0.0:
                    norm = 1.0
                for j in range(d):
                    phi[r, i, j] = U[i, j] / norm
                for c in range(e):
                    phi[r, i, d + c] = t[c] / norm
            f0 = phi[r, i, 0]
            for c in range(k):
                acc[c] = f0 * coef[r, 0, c]
            for j in range(1, D):
                f = phi[r, i, j]
                for c in range(k):
                    acc[c] += f * coef[r, j, c]
            for c in range(k):
                scores[r, i, c] = acc[c] + b[r, c]
