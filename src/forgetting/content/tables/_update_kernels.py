"""Compiled scatter and incremental update of the flat tables (content.tables.scatter,
content.tables.update).

:func:`scatter_codes` adds or subtracts rows' residuals and counts straight from their cell
codes; :func:`update_cells` does a whole small update in one call — the scatter, the change of
the cross-fit totals and of the probe sums — where numpy's dozens of small calls dominate a
one-row forget. The same integers as the numpy definitions: the same per-cell and per-entry
terms (:mod:`._terms_kernels`), summed as int64 (exact in any order); where an index is invalid
or a term leaves the int64 range the kernel writes nothing and returns False, and numpy
decides. Prefetch hints (``prefetch``) move no value. ``tests/test_table_updates.py`` checks
these paths against numpy's definitions.
"""

from __future__ import annotations

import numba
import numpy as np

from .._intrinsics import prefetch
from ._terms_kernels import BLOCK_CELLS, _cells_terms_into, _entries_terms_into


@numba.njit(cache=True, nogil=True)
def scatter_rows(target, flat, values, T) -> bool:
    """target[flat[i·T + t], :] += values[i, :] for every row i and table t (int64, wraps
    like numpy). False, with ``target`` untouched, when an index lies outside ``target``.

    Table by table: one table's cells (both folds) stay in cache while every row adds to
    them, where row by row each add missed the cache (integer sums do not depend on the
    order)."""
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
    every row (integer sums do not depend on the order). A table's cells of one fold are
    2^12 · k int64 that a batch touches in random order, each line first from memory: the
    cell of the row :data:`_AHEAD` rows on is prefetched, so those misses overlap (a hint
    changes no value)."""
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
                    prefetch(line_sums, ahead * k)
                    prefetch(line_sums, ahead * k + k - 1)
                    prefetch(fold_counts, ahead)
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
def scatter_codes(tables, codes, folds, values, negate) -> bool:
    """sums[f_i, t·C + c_it, :] ±= values[i, :] and counts[f_i, t·C + c_it] ±= 1 for every
    row i and table t (− when ``negate``) of ``tables`` (:class:`.bundles.CellArrays`): the
    flat tables' ``add``/``subtract`` straight from the cell codes (n, T) and folds (n,),
    without the int64 index temporaries numpy needs (int64 arithmetic wraps like numpy's, and
    a − v ≡ a + (−v) mod 2^64). False, with nothing written, when a code lies outside 0..C−1
    or a fold is not 0 or 1."""
    sums, counts = tables
    T = codes.shape[1]
    if T == 0 or sums.shape[1] % T != 0:
        return False
    if not _codes_valid(codes, folds, sums.shape[1] // T):
        return False
    _scatter(sums, counts, codes, folds, values, negate)
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy")
def update_cells(tables, units, probes, rows, marks, deltas):
    """A whole incremental ``FlatTables`` update in one call, for a few rows: the scatter
    (:func:`scatter_codes`), the change of the cross-fit totals (new − old terms of every
    touched table-major cell, ``_terms_kernels._block_terms_into``) and of the probe sums (new
    − old terms of every probe entry whose out-of-fold cell was touched,
    ``_terms_kernels._probe_terms_into``).

    Arguments, each bundle a plain tuple: IN/OUT ``tables`` (:class:`.bundles.CellArrays`);
    IN ``units`` (:class:`.bundles.TermUnits`); IN/OUT ``probes``
    (:class:`.bundles.ProbeArrays`: the probe index, each probe's record of sums and norm
    terms, rewritten here for the changed probes); IN ``rows``
    (:class:`.bundles.RowChange`: the rows' ``codes`` (n, T), ``folds`` (n,) and int64
    ``values`` (n, k), subtracted when ``negate``); SCRATCH ``marks``, a zeroed uint8 array of
    2·T·C entries (zeroed again on return) that finds each touched cell once among several
    rows' (one row's T cells are distinct: its update reads no marks); OUT ``deltas``
    (:class:`.bundles.UpdateDeltas`), overwritten with the changes of the totals and of the
    probes' per-fold totals (new − old over the probes that changed; a probe's own fold is
    its entry of the probes' ``folds``).

    Returns (applied, rows in fold 1, whether the probes' deltas hold). Not applied, with the
    tables as they were, when an index is invalid or a cell or probe term leaves the int64
    range (numpy decides). The probes' deltas do not hold when some term reached 2^50 (a sum
    of up to 2^12 of them might leave int64): the caller recounts them from the probe sums.

    The same integers as the numpy path: the same per-cell and per-entry terms, summed as
    int64 (exact in any order). Why it is laid out this way: a touched cell holds several
    probe entries, all with that cell's mean, so the probe terms are computed once per touched
    fold-qualified cell and the difference added to each of its probes; each changed probe's
    norm terms are taken once before its first change and once from its final sums (the
    per-fold totals change by new − old: the same integers as recounting them); and every
    cache line the update will touch is requested (``prefetch``) as soon as its address is
    known — cells and the probe index first, the probe records once the index is read — so
    the misses overlap instead of queueing. A probe's sums and norm terms share one record of
    whole cache lines, adjacent (content.tables.probes.ProbeNorms): a one-row forget changes
    a large share of the probes, and their lines are its largest memory traffic
    (benchmarks/results/breakdown.md lists where a forget's time goes).
    """
    codes, folds, values, negate = rows
    n, T = codes.shape
    sums, counts = tables
    grid, _, _, _, _, norm_unit = units
    start, _, records, probe_folds, norm_terms = probes
    TC = sums.shape[1]
    if T == 0 or TC % T != 0:
        return False, 0, False
    C = TC // T
    if not _codes_valid(codes, folds, C):
        return False, 0, False
    k = sums.shape[2]
    G = grid.shape[0]
    m = probe_folds.shape[0]
    if records.shape[0] != m or records.shape[1] < G * (k + 2) or norm_terms.shape[0] != m:
        return False, 0, False
    flat_sums = sums.reshape((2 * TC, k))
    flat_counts = counts.reshape(2 * TC)
    _prefetch_cells(sums, flat_counts, start, codes, folds, C)
    quals, cells, nq, nc, ones = _touched_cells(codes, folds, marks, TC, C)
    held, nh = _held_cells(quals, nq, probes)
    s0 = np.empty(k, dtype=np.float64)  # one cell's scaled sums
    scratch = np.empty((2 * k + 6, BLOCK_CELLS), dtype=np.float64)
    old_cross = np.zeros(G, dtype=np.int64)
    old_square = np.zeros(G, dtype=np.int64)
    old = np.empty((nh, G, k + 1), dtype=np.int64)
    ok = _entries_terms_into(flat_sums, flat_counts, held[:nh], units, s0, old)
    _prefetch_records(probes, held, nh)  # their index lines have arrived meanwhile
    ok = ok & _cells_terms_into(tables, cells, nc, units, scratch, (old_cross, old_square))
    if not ok:
        return False, 0, False
    _scatter(sums, counts, codes, folds, values, negate)
    new_cross = np.zeros(G, dtype=np.int64)
    new_square = np.zeros(G, dtype=np.int64)
    new = np.empty((nh, G, k + 1), dtype=np.int64)
    ok = _cells_terms_into(
        tables, cells, nc, units, scratch, (new_cross, new_square)
    ) & _entries_terms_into(flat_sums, flat_counts, held[:nh], units, s0, new)
    if not ok:
        _scatter(sums, counts, codes, folds, values, not negate)  # undo: exact integers
        return False, 0, False
    exact = _change_probes(probes, held, nh, new, old, norm_unit, deltas)
    d_cross, d_square, _, _ = deltas
    for g in range(G):
        d_cross[g] = new_cross[g] - old_cross[g]  # int64: exact (wraps like numpy's)
        d_square[g] = new_square[g] - old_square[g]
    return True, ones, exact


@numba.njit(cache=True, nogil=True, inline="always")
def _prefetch_cells(sums, flat_counts, probe_start, codes, folds, C) -> None:
    """Ask for the cache lines of the rows' cells (both folds) and of their probe index."""
    n, T = codes.shape
    TC = sums.shape[1]
    k = sums.shape[2]
    line_sums = sums.reshape(2 * TC * k)
    for i in range(n):
        f = np.int64(folds[i])
        for t in range(T):
            c = t * C + np.int64(codes[i, t])
            prefetch(probe_start, f * TC + c)
            prefetch(line_sums, c * k)
            prefetch(line_sums, c * k + k - 1)
            prefetch(line_sums, (TC + c) * k)
            prefetch(line_sums, (TC + c) * k + k - 1)
            prefetch(flat_counts, c)
            prefetch(flat_counts, TC + c)


@numba.njit(cache=True, nogil=True, inline="always")
def _touched_cells(codes, folds, marks, TC, C):
    """The touched fold-qualified cells (quals[:nq]) and table-major cells (cells[:nc]), each
    once (``marks``: bit 1 and bit 2, zeroed again), and the rows in fold 1."""
    n, T = codes.shape
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
        return quals, cells, T, T, ones
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
    return quals, cells, nq, nc, ones


@numba.njit(cache=True, nogil=True, inline="always")
def _held_cells(quals, nq, probes):
    """The touched fold-qualified cells that hold probe entries (held[:nh]), each once; the
    cache lines of their entries are asked for."""
    start, probe_of, _, _, _ = probes
    held = np.empty(nq, dtype=np.int64)
    nh = 0
    for e in range(nq):
        q = quals[e]
        lo = start[q]
        hi = start[q + 1]
        if hi > lo:
            held[nh] = q
            nh += 1
            prefetch(probe_of, lo)
            prefetch(probe_of, hi - 1)
    return held, nh


@numba.njit(cache=True, nogil=True, inline="always")
def _prefetch_records(probes, held, nh) -> None:
    """Ask for the records of the probes about to change (entries of cells ``held[:nh]``)."""
    start, probe_of, records, _, _ = probes
    m, width = records.shape
    line_records = records.reshape(m * width)
    for h in range(nh):
        q = held[h]
        for x in range(start[q], start[q + 1]):
            p = probe_of[x]
            for at in range(0, width, 8):
                prefetch(line_records, p * width + at)


@numba.njit(cache=True, nogil=True, inline="always")
def _change_probes(probes, held, nh, new, old, norm_unit, deltas) -> bool:
    """Add each held cell's new − old probe terms to the records of its probes, and the
    changed probes' norm terms and last-column sums, new − old per fold, to the deltas'
    ``norm`` and ``last`` (zeroed first). Whether those deltas hold (:func:`_take_norm_terms`).
    ``new`` is overwritten with the differences."""
    start, probe_of, records, probe_folds, norm_terms = probes
    _, _, d_norm, d_last = deltas
    G = new.shape[1]
    k = new.shape[2] - 1
    m = probe_folds.shape[0]
    d_norm[:, :] = 0
    d_last[:, :] = 0
    changed = np.zeros(m, dtype=np.uint8)  # probes whose sums changed, each listed once
    listed = np.empty(m, dtype=np.int64)
    nl = 0
    held_ok = True
    span = G * (k + 1)  # a record's sums; the new − old terms of a cell in the same order
    flat_new = new.reshape((nh, span))
    flat_old = old.reshape((nh, span))
    for h in range(nh):
        q = held[h]
        for at in range(span):
            flat_new[h, at] -= flat_old[h, at]  # int64: exact (wraps like numpy's new − old)
        for x in range(start[q], start[q + 1]):
            p = probe_of[x]
            if changed[p] == 0:  # its terms before its first change
                changed[p] = 1
                listed[nl] = p
                nl += 1
                held_ok = held_ok & _take_norm_terms(probes, deltas, p, k, G, norm_unit, -1)
            for at in range(span):
                records[p, at] += flat_new[h, at]
    for e in range(nl):  # and after its last
        p = listed[e]
        held_ok = held_ok & _take_norm_terms(probes, deltas, p, k, G, norm_unit, 1)
    return held_ok


NORM_TERM_LIMIT = 2.0**50
"""Norm terms and last-column sums below this add up exactly in int64 over ≤ 2^12 probes
(MAX_PROBES): the compiled update's per-fold deltas are trusted only then."""


@numba.njit(cache=True, nogil=True, inline="always")
def _norm_terms_into(records, p, k, G, unit, terms) -> None:
    """terms[g] = rint(Σ_j float64(S_j)² · unit) for probe p's k mean sums S under each λ_g
    (its record, :func:`update_cells`): per λ the outputs in order, one product and one sum
    each (content.tables.probes.probe_norm_terms) — the G sums interleaved, each in its own
    order."""
    for g in range(G):
        terms[g] = 0.0
    for j in range(k):
        for g in range(G):
            x = np.float64(records[p, g * (k + 1) + j])
            terms[g] += x * x
    for g in range(G):
        terms[g] = np.rint(terms[g] * unit)


@numba.njit(cache=True, nogil=True, inline="always")
def _take_norm_terms(probes, deltas, p, k, G, unit, sign) -> bool:
    """Add ``sign`` × probe p's norm terms and last-column sums (every λ) to its fold b's
    ``deltas`` (:class:`.bundles.UpdateDeltas`: norm, last); False when one of them reaches
    NORM_TERM_LIMIT (nothing is added for it then). The terms before a change (``sign`` < 0)
    are the kept ones, ``terms[p]`` of ``probes`` (:class:`.bundles.ProbeArrays`); after it
    they are computed from the record and kept."""
    _, _, records, probe_folds, terms = probes
    _, _, d_norm, d_last = deltas
    b = probe_folds[p]
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
