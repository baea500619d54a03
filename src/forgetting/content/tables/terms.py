"""The cross-fit terms of the flat tables' cells and of their probe entries: the numpy
definitions, and the dispatch to the compiled kernels that reproduce them bit for bit.

For table t, cell c, fold a (b = 1 − a) and each λ of the grid, with μ_a = S_a / (n_a + λ):

    cross_c(λ)  = ⟨S_b, μ_a⟩ + ⟨S_a, μ_b⟩        (Σ over fold-b rows of ⟨r, μ_a⟩)
    square_c(λ) = n_b ‖μ_a‖² + n_a ‖μ_b‖²        (Σ over fold-b rows of ‖μ_a‖²)

each rounded to fixed point element by element (:func:`.units.loss_bits`) before the
integer sums, so a term is the same integer whenever the cell holds the same integers. A probe
entry's terms are the fold mean of a fold-qualified cell on the 2^-MEAN_BITS grid (k values)
and its squared norm (one more column). The compiled kernels (``_terms_kernels``,
``_refresh_kernels``) perform the same float operations in the same order and decline (return
False) where numpy must decide; ``tests/content/test_table_kernels.py`` compares the two.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..kernels import TABLE_REFRESH, TABLE_TERMS, TABLE_UPDATES
from .bundles import cell_arrays, term_units
from .units import MEAN_BITS, loss_bits, square_bits

TOTALS_CHUNK = 1 << 16
"""Cells per int64 partial sum of the totals (then added as Python ints): the blocks every
recount has used, so even sums past int64 (beyond the documented limits) wrap alike."""
_EMPTY_CHECK_MIN_CELLS = 1 << 12


def cell_terms(
    sums: np.ndarray,
    counts: np.ndarray,
    cells: np.ndarray,
    grid: tuple[float, ...],
    scale_bits: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-point cross and square terms (m, G) of table-major cell ids ``cells`` of tables
    ``sums`` (2, T, C, k) and ``counts`` (2, T, C).

    Cells that hold nothing (zero counts and sums, λ > 0) have zero terms: a fit's first
    ``add`` asks for the old terms of every cell it touches, all empty.
    """
    T, C = sums.shape[1], sums.shape[2]
    cells = np.asarray(cells, dtype=np.int64)
    G = len(grid)
    flat_counts = counts.reshape(2, T * C)
    kernels = TABLE_TERMS.get(len(cells) * sums.shape[3])
    # the emptiness check costs more than the compiled terms of a few cells
    check = kernels is None or len(cells) >= _EMPTY_CHECK_MIN_CELLS
    if check and min(grid, default=0.0) > 0.0 and not flat_counts[:, cells].any():
        if not sums.reshape(2, T * C, -1)[:, cells].any():
            zeros = np.zeros((len(cells), G), dtype=np.int64)
            return zeros, zeros.copy()
    if kernels is not None:
        cross = np.empty((len(cells), G), dtype=np.int64)
        square = np.empty((len(cells), G), dtype=np.int64)
        if kernels.cell_terms(
            cell_arrays(sums, counts),
            np.ascontiguousarray(cells),
            tuple(term_units(grid, scale_bits, T)),
            cross,
            square,
        ):
            return cross, square
    return cell_terms_numpy(sums, counts, cells, grid, scale_bits)


def cell_terms_numpy(
    sums: np.ndarray,
    counts: np.ndarray,
    cells: np.ndarray,
    grid: tuple[float, ...],
    scale_bits: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`cell_terms` in numpy: the definition the compiled kernel reproduces."""
    T, C = sums.shape[1], sums.shape[2]
    # (fold, output, cell): sums over outputs become adds of contiguous vectors
    S = sums.reshape(2, T * C, -1)[:, cells].transpose(0, 2, 1).astype(np.float64)
    S *= 2.0**-scale_bits
    n = counts.reshape(2, T * C)[:, cells].astype(np.float64)
    bits = loss_bits(scale_bits)
    lam = np.asarray(grid, dtype=np.float64)[None, :, None, None]
    # mu[a, g]: fold a's means under λ_g (k, m), scored on the other fold's rows
    mu = S[:, None] / (n[:, None, None, :] + lam)
    other_S, other_n = S[::-1, None], n[::-1, None, None, :]
    unit = 2.0**bits  # scaling by a power of two is exact: the same bits as ldexp
    c = np.rint(other_S * mu * unit).astype(np.int64)
    sq = np.rint(other_n * mu * mu * unit).astype(np.int64)
    # integer sums over both directions and the outputs: order-independent
    return c.sum(axis=(0, 2)).T, sq.sum(axis=(0, 2)).T


def total_terms(
    sums: np.ndarray, counts: np.ndarray, grid: tuple[float, ...], scale_bits: int
) -> tuple[list[int], list[int]]:
    """The cross and square totals over every cell, per λ (exact Python ints): int64 sums per
    block of :data:`TOTALS_CHUNK` cells, in one compiled pass (no per-cell terms in memory) or
    from numpy's terms; added as Python ints."""
    G = len(grid)
    T, C, k = sums.shape[1], sums.shape[2], sums.shape[3]
    if min(grid, default=0.0) > 0.0 and not counts.any() and not sums.any():
        return [0] * G, [0] * G  # empty cells have zero terms (λ > 0)
    kernels = TABLE_REFRESH.get(T * C * k)
    if kernels is not None:
        blocks = -(-(T * C) // TOTALS_CHUNK)
        cross = np.empty((blocks, G), dtype=np.int64)
        square = np.empty((blocks, G), dtype=np.int64)
        if kernels.total_terms(
            cell_arrays(sums, counts),
            TOTALS_CHUNK,
            tuple(term_units(grid, scale_bits, T)),
            cross,
            square,
        ):
            return column_totals(cross), column_totals(square)
    total_cross, total_square = [0] * G, [0] * G
    cells = np.arange(T * C, dtype=np.int64)
    for start in range(0, len(cells), TOTALS_CHUNK):
        c, s = cell_terms(sums, counts, cells[start : start + TOTALS_CHUNK], grid, scale_bits)
        for g in range(G):
            total_cross[g] += int(c[:, g].sum())
            total_square[g] += int(s[:, g].sum())
    return total_cross, total_square


def column_totals(blocks: np.ndarray) -> list[int]:
    """Σ over the rows of an int64 (blocks, G) array, per column, as Python ints."""
    return [sum(int(v) for v in blocks[:, g]) for g in range(blocks.shape[1])]


def probe_terms(
    sums: np.ndarray,
    counts: np.ndarray,
    qualified: np.ndarray,
    grid: tuple[float, ...],
    scale_bits: int,
) -> np.ndarray:
    """Per λ and entry (G, m, k + 1): the fold mean of fold-qualified cell ``qualified[e]`` in
    fixed point (k values) and its squared norm, element-wise then integer-summed: exact."""
    k = sums.shape[3]
    m = len(qualified)
    if m == 0:
        return np.zeros((len(grid), 0, k + 1), dtype=np.int64)
    kernels = TABLE_TERMS.get(m * k * len(grid))
    # empty cells have zero terms (λ > 0): every entry of fresh tables (set_probes, a
    # fit's first add) costs a gather instead of the arithmetic
    check = kernels is None or m >= _EMPTY_CHECK_MIN_CELLS
    if (
        check
        and min(grid, default=0.0) > 0.0
        and not counts.reshape(-1)[qualified].any()
        and not sums.reshape(-1, k)[qualified].any()
    ):
        return np.zeros((len(grid), m, k + 1), dtype=np.int64)
    if kernels is not None:
        out = np.empty((len(grid), m, k + 1), dtype=np.int64)
        if kernels.probe_terms(
            cell_arrays(sums, counts),
            np.ascontiguousarray(qualified, dtype=np.int64),
            tuple(term_units(grid, scale_bits, sums.shape[1])),
            out,
        ):
            return out
    return probe_terms_numpy(sums, counts, qualified, grid, scale_bits)


def probe_terms_numpy(
    sums: np.ndarray,
    counts: np.ndarray,
    qualified: np.ndarray,
    grid: tuple[float, ...],
    scale_bits: int,
) -> np.ndarray:
    """:func:`probe_terms` in numpy: the definition the compiled kernel reproduces."""
    k = sums.shape[3]
    S = sums.reshape(-1, k)[qualified].astype(np.float64)
    S *= 2.0**-scale_bits
    n = counts.reshape(-1)[qualified].astype(np.float64)
    out = np.empty((len(grid), len(qualified), k + 1), dtype=np.int64)
    for g, lam in enumerate(grid):
        mu = S / (n + lam)[:, None]
        out[g, :, :k] = np.rint(mu * 2.0**MEAN_BITS).astype(np.int64)
        out[g, :, k] = (
            np.rint(mu * mu * 2.0 ** square_bits(scale_bits)).astype(np.int64).sum(axis=1)
        )
    return out


def add_probe_terms(target: np.ndarray, probes: np.ndarray, terms: np.ndarray, work: int) -> None:
    """target[:, probes[e], :] += terms[:, e, :] for every entry e, repeats included (int64,
    wrapping like numpy): compiled for a piece of ``work`` the kernels take, else
    ``np.add.at``."""
    kernels = TABLE_UPDATES.get(work)
    if kernels is None or not kernels.add_rows_at(
        target, np.ascontiguousarray(probes, dtype=np.int64), terms
    ):
        np.add.at(target, (slice(None), probes), terms)


def all_probe_sums(
    sums: np.ndarray,
    counts: np.ndarray,
    probe_cells: np.ndarray,
    probe_folds: np.ndarray,
    index: tuple[np.ndarray, np.ndarray],
    grid: tuple[float, ...],
    scale_bits: int,
) -> np.ndarray:
    """The probe sums (G, m, k + 1) from every probe entry: one compiled pass over the probe
    index ``index`` = (keys, probe_of) (a cell's terms once, added to each probe in it), or
    numpy's terms scattered with ``np.add.at`` (the same integers). Each probe sums, per λ,
    the terms of its T out-of-fold cells."""
    T, C, k = sums.shape[1], sums.shape[2], sums.shape[3]
    m = len(probe_folds)
    qualified = (1 - probe_folds)[:, None] * (T * C) + probe_cells
    out = np.zeros((len(grid), m, k + 1), dtype=np.int64)
    work = m * T * k * len(grid)
    kernels = TABLE_REFRESH.get(work)
    if kernels is not None and m and T:
        keys, probe_of = index
        if kernels.probe_sums_by_cell(
            cell_arrays(sums, counts), keys, probe_of, tuple(term_units(grid, scale_bits, T)), out
        ):
            return out
        out[:] = 0
    p = np.repeat(np.arange(m), T)
    terms = probe_terms(sums, counts, qualified.ravel(), grid, scale_bits)
    add_probe_terms(out, p, terms, work)
    return out


def refresh_together(
    sums: np.ndarray,
    counts: np.ndarray,
    probe_csr: Callable[[], tuple[np.ndarray, np.ndarray]],
    n_probes: int,
    grid: tuple[float, ...],
    scale_bits: int,
) -> tuple[tuple[list[int], list[int]] | None, np.ndarray | None]:
    """The totals (:func:`total_terms`) and the probe sums (:func:`all_probe_sums`) in one
    compiled pass over the cells — the probe terms are rounded from the means the totals
    divide out — given the probe index ``probe_csr()`` = (start, probe_of). Each part the pass
    could not compute exactly (a term beyond int64), and both without the compiled kernels,
    come back None: the separate passes then hand them to numpy."""
    T, C, k, G = sums.shape[1], sums.shape[2], sums.shape[3], len(grid)
    kernels = TABLE_REFRESH.get(T * C * k)
    if kernels is None or T == 0:
        return None, None
    start, probe_of = probe_csr()
    blocks = -(-(T * C) // TOTALS_CHUNK)
    cross = np.empty((blocks, G), dtype=np.int64)
    square = np.empty((blocks, G), dtype=np.int64)
    probe_sums = np.empty((G, n_probes, k + 1), dtype=np.int64)
    totals_ok, probes_ok = kernels.refresh_terms(  # bundles as plain tuples (.bundles)
        cell_arrays(sums, counts),
        TOTALS_CHUNK,
        tuple(term_units(grid, scale_bits, T)),
        (start, probe_of),
        (cross, square),
        probe_sums,
    )
    totals = (column_totals(cross), column_totals(square)) if totals_ok else None
    return totals, (probe_sums if probes_ok else None)
