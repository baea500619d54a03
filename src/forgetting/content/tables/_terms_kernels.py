"""Compiled cross-fit and probe terms of the flat tables' cells (content.tables.terms).

The one compiled definition of a cell's terms — cross and square for each λ of the grid
(:func:`_cell_terms_into`, and :func:`_block_terms_into` for a block of cells side by side) and
a probe entry's fixed-point mean and squared norm (:func:`_probe_terms_into`) — with the calls
that compute them for a list of cells. The refresh and update kernels build on these.

Why these give the numpy definitions' integers bit for bit: every kernel performs the *same*
IEEE-754 operations on the same operands in the same order as its numpy twin (no fastmath:
no reassociation, no fused multiply-add — the float expressions here are products and
quotients only), rounds with ``rint`` (round half to even, as ``np.rint``) and sums only
integers (int64 addition wraps identically in any order). Where the numpy twin would cast a
non-finite or out-of-range float to int64 (platform-defined), the kernel returns False so the
caller runs the numpy code instead. ``error_model="numpy"``: a division by zero gives IEEE
inf/NaN, as in numpy, instead of raising. ``tests/test_table_kernels.py`` compares both on
random and extreme inputs.
"""

from __future__ import annotations

import numba
import numpy as np

from .._intrinsics import INT64_LIMIT, SMALL_LIMIT, small_int


@numba.njit(cache=True, nogil=True, inline="always")
def _cast_terms(x0, y0, x1, y1):
    """A cell's two folds' rounded cross and square terms as int64: (all four in the int64
    range, x0 + x1, y0 + y1), out-of-range values replaced by 0 before the cast (numpy's is
    platform-defined there: the caller hands those cases to numpy). Branch-free, so a loop
    over outputs or cells that calls it compiles to vector instructions."""
    in0 = (x0 >= -INT64_LIMIT) & (x0 < INT64_LIMIT)
    in0 = in0 & (y0 >= -INT64_LIMIT) & (y0 < INT64_LIMIT)
    in1 = (x1 >= -INT64_LIMIT) & (x1 < INT64_LIMIT)
    in1 = in1 & (y1 >= -INT64_LIMIT) & (y1 < INT64_LIMIT)
    cross = np.int64(x0 if in0 else 0.0) + np.int64(x1 if in1 else 0.0)
    square = np.int64(y0 if in0 else 0.0) + np.int64(y1 if in1 else 0.0)
    return in0 & in1, cross, square


@numba.njit(cache=True, nogil=True, inline="always")
def _small_terms(x0, y0, x1, y1):
    """:func:`_cast_terms` by :func:`small_int`: (all four below 2^51 in magnitude,
    x0 + x1, y0 + y1); the sums hold only when the flag is set."""
    inside = (abs(x0) < SMALL_LIMIT) & (abs(y0) < SMALL_LIMIT)
    inside = inside & (abs(x1) < SMALL_LIMIT) & (abs(y1) < SMALL_LIMIT)
    return inside, small_int(x0) + small_int(x1), small_int(y0) + small_int(y1)


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _cell_terms_into(tables, c, units, scaled, totals, sign) -> bool:
    """Add ``sign`` × the cross-fit terms of table-major cell ``c`` of ``tables``
    (:class:`.bundles.CellArrays`) to ``totals`` = (cross, square), each (G,): for λ_g and
    fold a (b = 1 − a), with ``units`` (:class:`.bundles.TermUnits`) scale and unit = loss
    unit,

        μ = (S_a · scale) / (n_a + λ_g)
        cross  += rint(((S_b · scale) · μ) · unit)
        square += rint(((n_b · μ) · μ) · unit)

    summed over both folds and every output as int64 (in another order than numpy's, which
    integer sums do not see). ``scaled`` = (s0, s1) is scratch, (k,) each. False when a
    rounded term is not finite or not below 2^63 in magnitude: the numpy cast is
    platform-defined there, so numpy decides. The range test is a flag, not an early exit,
    and out-of-range values are replaced by 0 before the cast, so the loop over outputs has
    no branch and compiles to vector instructions. The one definition of these terms in
    compiled code, which :func:`_block_terms_into` repeats for a block of cells side by
    side."""
    sums, counts = tables
    grid, scale, unit, _, _, _ = units
    s0, s1 = scaled
    cross, square = totals
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
def _block_terms_into(tables, block, units, scratch, means, totals, small):
    """Add the terms of :func:`_cell_terms_into` of the cells ``block`` = (cells, first, m):
    ``cells[first : first + m]`` (m ≤ BLOCK_CELLS), to ``totals`` = (cross, square), each
    (G,): the same float operations on each cell,
    with the cells of the block in the innermost loop, so it runs as vector instructions over
    cells. ``scratch`` (2k + 6, BLOCK_CELLS) float64. False when a term leaves the int64
    range.

    ``small`` (a constant where this is inlined): the terms are converted to integers by
    :func:`_small_terms` (vector instructions where the machine has no vector float → int64
    conversion), and False means a term is 2^51 or more in magnitude (or not finite) — at no
    realistic size: a cell would need ~2^27 rows — so the caller's numpy route decides
    (``terms.total_terms``), as for a term out of the int64 range: the integers are the
    cast's in every case. For the passes over every cell; a one-row update's few cells keep
    the cast (on a machine that converts by vector anyway, the extra range test cost time).

    The means it divides out are left in ``means`` (2, G, k, BLOCK_CELLS): means[f, g, j, e]
    = (S_f · scale) / (n_f + λ_g) of cell e — the very operations of
    :func:`_probe_terms_into` on that fold-qualified cell, so the probe terms can be rounded
    from them without dividing again (``_refresh_kernels._block_probe_terms``)."""
    sums, counts = tables
    grid, scale, unit, _, _, _ = units
    cells, first, m = block
    cross, square = totals
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
def cell_terms(tables, cells, units, cross, square) -> bool:
    """The cross-fit terms (``terms.cell_terms``, :func:`_cell_terms_into`) of table-major
    cells ``cells`` of ``tables``; results in ``cross``/``square`` (m, G). False when a term
    leaves the int64 range (numpy decides)."""
    k = tables[0].shape[2]
    s0 = np.empty(k, dtype=np.float64)  # S · scale of one cell, fold 0
    s1 = np.empty(k, dtype=np.float64)  # and fold 1
    ok = True
    for e in range(cells.shape[0]):
        cross[e, :] = 0
        square[e, :] = 0
        ok = ok & _cell_terms_into(tables, cells[e], units, (s0, s1), (cross[e], square[e]), 1)
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _probe_terms_into(flat_sums, flat_counts, q, units, scaled, out):
    """One probe entry's terms (``out`` (G, k + 1)) of fold-qualified cell ``q`` of the flat
    (2·T·C, k) sums and (2·T·C,) counts: per λ_g, μ = (S_q · scale) / (n_q + λ_g);
    out[g, j] = rint(μ_j · mean_unit) and out[g, k] = Σ_j rint((μ_j · μ_j) · square_unit)
    (``units``). False as :func:`_cell_terms_into` (same branch-free range test). The one
    compiled definition of these terms."""
    grid, scale, _, mean_unit, square_unit, _ = units
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
            inside = (x >= -INT64_LIMIT) & (x < INT64_LIMIT)
            inside = inside & (y >= -INT64_LIMIT) & (y < INT64_LIMIT)
            ok = ok & inside
            out[g, j] = np.int64(x if inside else 0.0)
            total += np.int64(y if inside else 0.0)
        out[g, k] = total
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def probe_terms(tables, qualified, units, out):
    """``terms.probe_terms``: out[:, e, :] = the terms (:func:`_probe_terms_into`) of
    fold-qualified cell ``qualified[e]`` of ``tables``. False when a term leaves the int64
    range."""
    flat_sums, flat_counts = _flat(tables)
    k = flat_sums.shape[1]
    G = units[0].shape[0]
    scaled = np.empty(k, dtype=np.float64)  # S · scale of one cell
    one = np.empty((G, k + 1), dtype=np.int64)
    ok = True
    for e in range(qualified.shape[0]):
        ok = ok & _probe_terms_into(flat_sums, flat_counts, qualified[e], units, scaled, one)
        out[:, e, :] = one
    return ok


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
def _cells_terms_into(tables, cells, nc, units, scratch, totals) -> bool:
    """Add the terms of the table-major cells ``cells[:nc]`` to ``totals`` = (cross,
    square), each (G,), block by block (:func:`_block_terms_into`)."""
    means = np.empty((2, units[0].shape[0], tables[0].shape[2], BLOCK_CELLS))
    ok = True
    for first in range(0, nc, BLOCK_CELLS):
        m = min(nc, first + BLOCK_CELLS) - first
        ok = ok & _block_terms_into(tables, (cells, first, m), units, scratch, means, totals, False)
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _entries_terms_into(flat_sums, flat_counts, entry_cell, units, scaled, out) -> bool:
    """out[e] = the probe terms (:func:`_probe_terms_into`) of fold-qualified cell
    ``entry_cell[e]``, for every probe entry e."""
    ok = True
    for e in range(entry_cell.shape[0]):
        ok = ok & _probe_terms_into(flat_sums, flat_counts, entry_cell[e], units, scaled, out[e])
    return ok


@numba.njit(cache=True, nogil=True, inline="always")
def _flat(tables):
    """The tables' sums (2·T·C, k) and counts (2·T·C,): fold-qualified cells in one axis."""
    sums, counts = tables
    R, k = sums.shape[1], sums.shape[2]
    return sums.reshape((2 * R, k)), counts.reshape(2 * R)
