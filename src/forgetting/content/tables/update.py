"""A small change of the flat tables by difference: the rows' scatter, and the change of the
cross-fit totals and of the probe sums it causes — new − old terms of every touched cell and
of every probe entry that reads one.

Two routes to the same integers: one compiled call (:class:`CompiledUpdate`,
``_update_kernels.update_cells``) where numpy's dozens of small calls dominate a one-row
forget, and the numpy definition it follows (:func:`numpy_update`). A bulk change (at least
C / :data:`DEFER_ROWS_PER_CELL` rows) only scatters: the totals are recounted from the cells
when next read (content.tables.flat).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .bundles import CellArrays, ProbeArrays, UpdateDeltas, term_units
from .probes import ProbeNorms
from .scatter import SPARSE_MIN_ENTRIES, flat_cells, index_arrays, scatter_rows
from .terms import cell_terms, probe_terms

DEFER_ROWS_PER_CELL = 6
"""A change of at least C / 6 rows defers the totals to the next read: there the one pass
over every cell gets cheaper than the difference (old and new terms of each touched cell, and
of its probes)."""


class CompiledUpdate:
    """What every compiled update passes besides the rows, kept between updates: the tables'
    views, the units, the probe index and records, the scratch marks and the deltas —
    building these per call was a visible part of a one-row forget. Made from the tables'
    current arrays; :meth:`made_from` tells whether they are still the ones the tables hold
    (compared by identity)."""

    def __init__(
        self,
        sums: np.ndarray,
        counts: np.ndarray,
        grid: tuple[float, ...],
        scale_bits: int,
        norms: ProbeNorms,
        probe_csr: tuple[np.ndarray, np.ndarray],
        marks: np.ndarray,
    ):
        start, probe_of = probe_csr
        self._made_from = (norms, sums, counts, start)
        self.deltas = UpdateDeltas.empty(len(grid))
        self._args = (  # the bundles as the kernel takes them (.bundles)
            tuple(CellArrays.of(sums, counts)),
            tuple(term_units(grid, scale_bits, sums.shape[1])),
            tuple(ProbeArrays(start, probe_of, norms.records, norms.folds, norms.terms)),
        )
        self._marks = marks
        self._deltas = tuple(self.deltas)
        self.result: tuple[bool, int, bool] = (False, 0, False)
        """The last call's (applied, rows in fold 1, whether the probes' deltas hold)."""

    def made_from(
        self, norms: ProbeNorms, sums: np.ndarray, counts: np.ndarray, start: np.ndarray | None
    ) -> bool:
        made = self._made_from
        return made[0] is norms and made[1] is sums and made[2] is counts and made[3] is start

    def run(self, kernels, codes, residuals, folds, sign: int) -> tuple[bool, int, bool]:
        """Apply the rows in one compiled call (``update_cells``): (applied, rows in fold 1,
        whether the probes' deltas hold), the changes in :attr:`deltas`. Not applied: the
        tables are as they were, and numpy decides."""
        codes_c, folds_c = index_arrays(codes, folds)
        tables, units, probes = self._args
        rows = (codes_c, folds_c, np.ascontiguousarray(residuals, dtype=np.int64), sign < 0)
        self.result = kernels.update_cells(  # bundles as plain tuples (.bundles.RowChange)
            tables, units, probes, rows, self._marks, self._deltas
        )
        return self.result


def numpy_update(
    sums: np.ndarray,
    counts: np.ndarray,
    codes: np.ndarray,
    residuals: np.ndarray,
    folds: np.ndarray,
    sign: int,
    grid: tuple[float, ...],
    scale_bits: int,
    probe_hits: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, int, tuple[np.ndarray, np.ndarray] | None]:
    """The incremental update in numpy, the definition :class:`CompiledUpdate` follows: the
    rows scattered into ``sums``/``counts`` in place, and (Δcross, Δsquare (G,) int64, the
    rows in fold 1, (probes, Δ probe terms) of the probe entries ``probe_hits`` finds in the
    touched fold-qualified cells, or None when none)."""
    n = codes.shape[0]
    T, C = sums.shape[1], sums.shape[2]
    flat = flat_cells(codes, folds, T, C)
    small = n * T < SPARSE_MIN_ENTRIES
    if small:
        touched_flat = np.unique(flat)
        touched = touched_flat % (T * C)
        if n > 1:
            touched = np.unique(touched)
    else:
        hits = np.bincount(flat, minlength=2 * T * C)
        touched_flat = np.flatnonzero(hits)
        by_fold = hits.reshape(2, T * C)
        touched = np.flatnonzero(by_fold[0] + by_fold[1])
    old_cross, old_square = cell_terms(sums, counts, touched, grid, scale_bits)
    probes, qualified = probe_hits(touched_flat)
    old_probe = probe_terms(sums, counts, qualified, grid, scale_bits)
    values = np.asarray(residuals, dtype=np.int64)
    if sign < 0:
        values = -values
    scatter_rows(sums.reshape(2 * T * C, -1), flat, values, T)
    if small:
        np.add.at(counts.reshape(-1), flat, sign)
    else:
        counts.reshape(-1)[:] += sign * hits
    new_cross, new_square = cell_terms(sums, counts, touched, grid, scale_bits)
    d_cross = new_cross.sum(axis=0) - old_cross.sum(axis=0)  # exact int64
    d_square = new_square.sum(axis=0) - old_square.sum(axis=0)
    ones = int(np.count_nonzero(np.asarray(folds)))
    if not probes.size:
        return d_cross, d_square, ones, None
    delta = probe_terms(sums, counts, qualified, grid, scale_bits) - old_probe
    return d_cross, d_square, ones, (probes, delta)
