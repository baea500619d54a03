"""Compiled passes over every cell of the flat tables: the cross-fit totals, the probe sums,
or both at once (content.tables.terms).

Built on the one compiled definition of the terms (:mod:`._terms_kernels`): the same integers
as the numpy definitions, summed in another order (int64 sums do not see it). Work is shared
only where the operations are identical: a cell's probe terms are rounded from the very
quotient its cross-fit terms divided out, and computed once per cell for all probes in it;
cells are skipped only where every term is provably ±0 (``_terms_vanish``).
``tests/test_table_updates.py`` checks these passes against numpy's definitions.
"""

from __future__ import annotations

import numba
import numpy as np

from .._intrinsics import SMALL_LIMIT, small_int
from ._terms_kernels import BLOCK_CELLS, _block_terms_into, _flat, _probe_terms_into, _terms_vanish


@numba.njit(cache=True, nogil=True, error_model="numpy")
def total_terms(tables, chunk, units, cross, square) -> bool:
    """Per block of ``chunk`` consecutive cells (a multiple of BLOCK_CELLS) and λ_g:
    cross[b, g] / square[b, g] = Σ over the block's cells of their terms
    (:func:`_block_terms_into`; int64, wrapping as numpy's sum of the block's terms would),
    without materializing per-cell terms. ``tables`` (:class:`.bundles.CellArrays`),
    ``units`` (:class:`.bundles.TermUnits`), ``cross``/``square`` (⌈cells / chunk⌉, G).
    False when a term leaves the int64 range (numpy decides).

    Cells whose terms are exactly 0 (:func:`_terms_vanish`: one fold empty — about half the
    cells of a large build) are left out of the blocks, the others are gathered 64 at a
    time: the divisions, which bound this pass, are spent only where a term can be nonzero.
    Adding 0 changes no sum, so the totals are the same."""
    sums, counts = tables
    k = sums.shape[2]
    R = sums.shape[1]
    scratch = np.empty((2 * k + 6, BLOCK_CELLS), dtype=np.float64)
    means = np.empty((2, units[0].shape[0], k, BLOCK_CELLS), dtype=np.float64)
    index = np.empty(BLOCK_CELLS, dtype=np.int64)
    cross[:, :] = 0
    square[:, :] = 0
    skip = _may_skip(units)
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
                    tables, (index, 0, m), units, scratch, means, (cross[b], square[b]), True
                )
                m = 0
    return ok


@numba.njit(cache=True, nogil=True, inline="always")
def _may_skip(units) -> bool:
    """Whether cells whose terms vanish may be skipped: λ > 0 on the whole grid (False for
    NaN too), scale ≤ 1 and a finite unit (:func:`_terms_vanish`'s conditions)."""
    grid, scale, loss_unit, _, _, _ = units
    skip = scale <= 1.0 and loss_unit < np.inf
    for g in range(grid.shape[0]):
        skip = skip and grid[g] > 0.0
    return skip


@numba.njit(cache=True, nogil=True, error_model="numpy")
def probe_sums_by_cell(tables, keys, probe_of, units, out) -> bool:
    """``terms.all_probe_sums`` from the probe index: ``keys`` (the probe entries'
    fold-qualified out-of-fold cells, sorted) and ``probe_of`` (each entry's probe). The
    terms of a cell (:func:`_probe_terms_into`) are computed once per run of equal keys and
    added to every probe of the run — all the entries of a cell share its mean; the same
    integers, summed in another order (int64 sums do not see it). ``out`` (G, m, k + 1) is
    overwritten. False when a term leaves the int64 range or an index is out of bounds."""
    flat_sums, flat_counts = _flat(tables)
    R = flat_sums.shape[0]
    M = out.shape[1]
    for e in range(keys.shape[0]):
        if keys[e] < 0 or keys[e] >= R or probe_of[e] < 0 or probe_of[e] >= M:
            return False
    k = flat_sums.shape[1]
    G = units[0].shape[0]
    scaled = np.empty(k, dtype=np.float64)
    one = np.empty((G, k + 1), dtype=np.int64)
    acc = np.zeros((M, G, k + 1), dtype=np.int64)
    ok = True
    e = 0
    while e < keys.shape[0]:
        q = keys[e]
        ok = ok & _probe_terms_into(flat_sums, flat_counts, q, units, scaled, one)
        lo = e
        while e < keys.shape[0] and keys[e] == q:
            e += 1
        _add_probe_terms(acc, probe_of, lo, e, one)
    _probe_major_into(acc, out)
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _add_probe_terms(acc, probe_of, lo, hi, one) -> None:
    """acc[probe_of[x]] += one for every probe entry x in lo..hi−1: ``acc`` (m, G, k + 1)
    is probe-major, so one entry adds G·(k + 1) contiguous int64 (a few cache lines) where
    the (G, m, k + 1) layout scattered them over G rows ~m·(k + 1)·8 bytes apart
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
def _round_block_means(means, f, e, units, one) -> bool:
    """The probe terms of the block's kept means of cell e, fold f, every λ (``one``
    (G, k + 1)): one[g, j] = rint(μ_j · mean_unit), one[g, k] = Σ_j rint((μ_j · μ_j) ·
    square_unit), as :func:`_probe_terms_into` rounds them, converted by :func:`small_int`;
    indexed in place (a view per λ costs time). False when a value is 2^51 or more in
    magnitude (or not finite): the probe sums are then left to the separate pass
    (``terms.all_probe_sums``: the cast, and numpy beyond int64)."""
    _, _, _, mean_unit, square_unit, _ = units
    G = means.shape[1]
    k = means.shape[2]
    ok = True
    for g in range(G):
        total = np.int64(0)
        for j in range(k):
            mu = means[f, g, j, e]
            x = np.rint(mu * mean_unit)
            y = np.rint(mu * mu * square_unit)
            ok = ok & (abs(x) < SMALL_LIMIT) & (abs(y) < SMALL_LIMIT)
            one[g, j] = small_int(x)
            total += small_int(y)
        one[g, k] = total
    return ok


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _block_probe_terms(means, block, R, probe_index, units, one, acc) -> bool:
    """The probe terms of both folds of the block's cells (``block`` = (cells, first, m), as
    :func:`_block_terms_into` takes it) that hold probe entries (``probe_index`` = (start,
    probe_of), :class:`.bundles.ProbeIndex`), rounded from the block's ``means``
    (:func:`_block_terms_into`) exactly as :func:`_probe_terms_into` rounds the same
    quotients, and added to their probes."""
    cells, first, m = block
    probe_start, probe_of = probe_index
    ok = True
    for e in range(m):
        for f in range(2):
            q = f * R + cells[first + e]
            lo = probe_start[q]
            hi = probe_start[q + 1]
            if hi == lo:
                continue
            ok = ok & _round_block_means(means, f, e, units, one)
            _add_probe_terms(acc, probe_of, lo, hi, one)
    return ok


@numba.njit(cache=True, nogil=True, inline="always")
def _index_valid(probe_start, probe_of, R, M) -> bool:
    """Whether ``probe_start``/``probe_of`` are a probe index of 2·R fold-qualified cells and
    M probes (nondecreasing starts from 0 to the number of entries, probes in range)."""
    if probe_start.shape[0] != 2 * R + 1 or probe_start[0] != 0:
        return False
    if probe_start[2 * R] != probe_of.shape[0]:
        return False
    for q in range(2 * R):
        if probe_start[q + 1] < probe_start[q]:
            return False
    for x in range(probe_of.shape[0]):
        if probe_of[x] < 0 or probe_of[x] >= M:
            return False
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy")
def refresh_terms(tables, chunk, units, probe_index, totals, probe_out):
    """:func:`total_terms` and :func:`probe_sums_by_cell` in one pass over the cells: a
    cell's probe terms are rounded from the means its cross-fit terms divided out, so the
    probes cost no division of their own. Cells whose cross-fit terms vanish are skipped for
    those; their probe terms, if any probe lives there, are computed as
    :func:`_probe_terms_into` does.

    IN: ``tables`` (:class:`.bundles.CellArrays`), ``units`` (:class:`.bundles.TermUnits`),
    ``chunk`` cells per totals block, ``probe_index`` (:class:`.bundles.ProbeIndex`: the entries of
    fold-qualified cell q are probe_of[start[q]:start[q + 1]]).
    OUT: ``totals`` = (cross, square), each (blocks, G) int64: per chunk of cells its
    cross-fit and square terms; ``probe_out`` (G, m, k + 1) the probe sums. All overwritten.
    Returns (totals valid, probe sums valid): a term out of the int64 range, or an index out
    of bounds for the probes, makes its part invalid and numpy decides it."""
    probe_start, probe_of = probe_index
    cross, square = totals
    sums, counts = tables
    k = sums.shape[2]
    R = sums.shape[1]
    G = units[0].shape[0]
    M = probe_out.shape[1]
    cross[:, :] = 0
    square[:, :] = 0
    probe_out[:, :, :] = 0
    if not _index_valid(probe_start, probe_of, R, M):
        return False, False
    flat_sums, flat_counts = _flat(tables)
    scratch = np.empty((2 * k + 6, BLOCK_CELLS), dtype=np.float64)
    means = np.empty((2, G, k, BLOCK_CELLS), dtype=np.float64)
    index = np.empty(BLOCK_CELLS, dtype=np.int64)
    acc = np.zeros((M, G, k + 1), dtype=np.int64)  # probe-major sums, copied out at the end
    scaled = np.empty(k, dtype=np.float64)
    one = np.empty((G, k + 1), dtype=np.int64)
    skip = _may_skip(units)
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
                block = (index, 0, m)
                ok = ok & _block_terms_into(
                    tables, block, units, scratch, means, (cross[b], square[b]), True
                )
                ok_probes = ok_probes & _block_probe_terms(
                    means, block, R, probe_index, units, one, acc
                )
                m = 0
        for e in range(npend):
            for f in range(2):
                q = f * R + pending[e]
                if probe_start[q + 1] > probe_start[q]:
                    ok_probes = ok_probes & _probe_terms_into(
                        flat_sums, flat_counts, q, units, scaled, one
                    )
                    _add_probe_terms(acc, probe_of, probe_start[q], probe_start[q + 1], one)
    _probe_major_into(acc, probe_out)
    return ok, ok_probes
