"""Flat multi-table content: per-cell integer sums for T tables, served without materializing.

A flat partition (:mod:`forgetting.schema.partitions`) puts every row in one cell of each of T
tables. The content keeps, per fold f ∈ {0, 1}, table t and cell c, the fixed-point residual
sum S[f, t, c] (k values) and the count n[f, t, c] — integer sums over rows, so a deletion or
insertion changes exactly the T cells of each row and subtracting restores the same integers
(design.md §5.2).

Prediction: ŷ(x) = g(x) + α · (1/T) Σ_t μ_t[c_t(x)], with μ_t[c] = S_t[c] / (n_t[c] + λ)
computed from the integers of the T cells the row falls in — nothing is materialized, so a
change to the statistics costs the next prediction nothing.

α and λ are cross-fitted on the two folds (design.md §5.4) with a loss that is a sum of per-cell
terms: for table t, cell c and each λ of the grid,

    cross_c(λ)  = ⟨S¹_c, μ⁰_c(λ)⟩ + ⟨S⁰_c, μ¹_c(λ)⟩        (Σ over fold-B rows of ⟨r, μ^A⟩)
    square_c(λ) = n¹_c ‖μ⁰_c(λ)‖² + n⁰_c ‖μ¹_c(λ)‖²        (Σ over fold-B rows of ‖μ^A‖²)

summed over all cells of all tables: the out-of-fold squared error of the tables' predictions,
averaged over tables, falls by 2α·cross − α²·square. Each term is a deterministic float
function of one cell's integers, rounded to fixed point (element-wise, before any summation),
and the totals are exact integers (Python ints) updated by difference — subtract the touched
cells' old terms, add their new ones. So the totals after any history equal the totals of a
fresh build, bit for bit, and choosing α and λ costs O(|grid|) after each change.

Why per-table and not the loss of the average: the average's square term couples every pair of
tables (Σ_i ‖Σ_t μ_t[c_t(i)]‖² needs joint cell counts of all table pairs), which no per-cell
state can maintain. Σ_t square_t / T bounds it from above (Jensen), so the α chosen here is
conservative; :mod:`forgetting_lab.bench.partitions` measures what that costs against an α
cross-fitted on the average with all rows in sight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .accumulators import MAX_ROWS
from .heads import FixedWeights, LinearHead, NewtonWeights, head_features
from .kernels import table_kernels
from .materialize import blend_and_fall

SHRINKAGE_GRID = (0.5, 2.0, 8.0, 32.0)
MEAN_BITS = 40
"""Cell means are rounded to 2^-40 before the sum over tables, which then is an exact integer
sum: the prediction does not depend on the order tables are added in (or on the batch)."""


def square_bits(scale_bits: int) -> int:
    """Fixed-point bits of squared cell means in the probe sums: a squared mean is ≤ 2 for
    classification and ≤ 2^20 for regression, and T ≤ 2^10 of them are summed."""
    return 40 if scale_bits >= 32 else 24


def loss_bits(scale_bits: int) -> int:
    """Fixed-point bits of the per-cell loss terms, such that no int64 partial sum overflows.

    Per row and output a term is at most |r|·|μ| ≤ 1 for classification (scale 2^32) and
    ≤ 2^20 for regression (|r| ≤ 2^10 standard deviations); a table holds ≤ 2^28 rows, and
    a row's residual has an L1 norm ≤ 2 (classification).
    """
    return 24 if scale_bits >= 32 else 12


class FlatTables:
    """Per fold: residual sums ``sums`` (2, T, C, k) int64 and counts ``counts`` (2, T, C),
    plus the exact cross-fit totals per shrinkage value of ``grid``.

    Derived state — the totals ``cross``/``square``, the probe sums ``probe_sums`` and the
    per-fold row counts — is an integer function of the cells, so it is computed when first
    read after a bulk change (a fit's or a batch's scatter, :meth:`set_probes` on tables not
    summed yet) and updated by difference after a small one: the same integers either way
    (a fresh build's), at the cost of one pass over the cells once instead of per-chunk work
    that a chunked build's reduction throws away. Code that writes ``sums``/``counts`` in place
    calls :meth:`rebuild_totals` (and :meth:`set_probes`) afterwards, as before.
    """

    def __init__(
        self,
        sums: np.ndarray,
        counts: np.ndarray,
        scale_bits: int,
        grid: tuple[float, ...] = SHRINKAGE_GRID,
        cross: list[int] | None = None,
        square: list[int] | None = None,
        probe_cells: np.ndarray | None = None,
        probe_folds: np.ndarray | None = None,
        probe_sums: np.ndarray | None = None,
    ):
        self.sums = sums
        self.counts = counts
        self.scale_bits = scale_bits
        self.grid = grid
        self._totals_fresh = cross is not None and square is not None
        self._cross = list(cross) if cross is not None else []
        self._square = list(square) if square is not None else []
        self._fold_rows: list[int] = []
        if self._totals_fresh:
            self._fold_rows = self._count_fold_rows()
        self.probe_cells = probe_cells
        self.probe_folds = probe_folds
        self._probe_sums = probe_sums
        self._probes_fresh = probe_cells is None or probe_sums is not None
        self._probe_index: tuple[np.ndarray, np.ndarray] | None = None
        self._probe_start: np.ndarray | None = None
        self._norms: _ProbeNorms | None = None
        self._marks: np.ndarray | None = None
        self._update_args: tuple | None = None

    @classmethod
    def empty(
        cls,
        n_tables: int,
        n_cells: int,
        n_outputs: int,
        scale_bits: int,
        grid: tuple[float, ...] = SHRINKAGE_GRID,
    ) -> FlatTables:
        """Tables with no rows; their totals are computed when first read (a chunk of a
        build adds its rows and is summed into another table, never read)."""
        return cls(
            sums=np.zeros((2, n_tables, n_cells, n_outputs), dtype=np.int64),
            counts=np.zeros((2, n_tables, n_cells), dtype=np.int64),
            scale_bits=scale_bits,
            grid=tuple(float(g) for g in grid),
        )

    @property
    def n_tables(self) -> int:
        return self.sums.shape[1]

    @property
    def n_cells(self) -> int:
        return self.sums.shape[2]

    @property
    def n_outputs(self) -> int:
        return self.sums.shape[3]

    @property
    def n_rows(self) -> int:
        if self._totals_fresh:
            return self._fold_rows[0] + self._fold_rows[1]
        return int(self.counts[:, 0].sum())

    @property
    def cross(self) -> list[int]:
        """Σ over cells of the cross terms, per λ of the grid (exact Python ints)."""
        self._refresh_totals()
        return self._cross

    @property
    def square(self) -> list[int]:
        """Σ over cells of the per-table square terms, per λ of the grid."""
        self._refresh_totals()
        return self._square

    @property
    def probe_sums(self) -> np.ndarray | None:
        """Per λ, probe and output: Σ_t of the fixed-point out-of-fold means of the probe's
        cells, and (last column) Σ_t of their squared norms; None without probes."""
        self._refresh_probes()
        return self._probe_sums

    # -- derived state ------------------------------------------------------------------------
    def refresh(self) -> None:
        """Compute now whatever derived state a bulk change left for the next read (totals,
        probe sums and their per-fold totals): a caller that builds or catches up tables off the
        serving path (a background rebuild, a model load) calls it there, so the first
        prediction does not pay the pass over every cell. A no-op on current tables."""
        if self.probe_cells is not None:
            self._probe_norms()
            self._probe_csr()  # the compiled update's probe index, else built by the 1st forget
        else:
            self._refresh_totals()

    def _count_fold_rows(self) -> list[int]:
        return [int(self.counts[0, 0].sum()), int(self.counts[1, 0].sum())]

    def _refresh_totals(self) -> None:
        if self._totals_fresh:
            return
        if self.probe_cells is not None and not self._probes_fresh:
            self._refresh_together()
            if self._totals_fresh:
                return
        self._cross, self._square = self._all_terms()
        self._fold_rows = self._count_fold_rows()
        self._totals_fresh = True

    def _refresh_together(self) -> None:
        """Totals and probe sums in one compiled pass over the cells
        (:func:`._table_kernels.refresh_terms`: the probe terms are rounded from the means
        the totals divide out), when both are stale; each part it could not compute exactly
        (a term beyond int64) stays stale for the separate passes, which hand it to numpy."""
        T, C, k, G = self.n_tables, self.n_cells, self.n_outputs, len(self.grid)
        kernels = table_kernels(T * C * k)
        if kernels is None or T == 0:
            return
        start, probe_of = self._probe_csr()
        blocks = -(-(T * C) // _TOTALS_CHUNK)
        cross = np.empty((blocks, G), dtype=np.int64)
        square = np.empty((blocks, G), dtype=np.int64)
        probe_sums = np.empty((G, len(self.probe_folds), k + 1), dtype=np.int64)
        grid, scale, mean_unit, square_unit = self._probe_units()
        done = kernels.refresh_terms(
            self.sums.reshape(2, T * C, k),
            self.counts.reshape(2, T * C),
            _TOTALS_CHUNK,
            grid,
            scale,
            2.0 ** loss_bits(self.scale_bits),
            cross,
            square,
            start,
            probe_of,
            mean_unit,
            square_unit,
            probe_sums,
        )
        if done & 1:
            self._cross = [sum(int(v) for v in cross[:, g]) for g in range(G)]
            self._square = [sum(int(v) for v in square[:, g]) for g in range(G)]
            self._fold_rows = self._count_fold_rows()
            self._totals_fresh = True
        if done & 2:
            self._probe_sums = probe_sums
            self._norms = None
            self._probes_fresh = True

    def _all_terms(self) -> tuple[list[int], list[int]]:
        """The totals from every cell: int64 sums per block of 2^16 cells, in one compiled
        pass (no per-cell terms in memory) or from numpy's terms; added as Python ints."""
        G = len(self.grid)
        T, C = self.n_tables, self.n_cells
        if min(self.grid, default=0.0) > 0.0 and not self.counts.any() and not self.sums.any():
            return [0] * G, [0] * G  # empty cells have zero terms (λ > 0)
        kernels = table_kernels(T * C * self.n_outputs)
        if kernels is not None:
            blocks = -(-(T * C) // _TOTALS_CHUNK)
            cross = np.empty((blocks, G), dtype=np.int64)
            square = np.empty((blocks, G), dtype=np.int64)
            if kernels.total_terms(
                self.sums.reshape(2, T * C, -1),
                self.counts.reshape(2, T * C),
                _TOTALS_CHUNK,
                np.asarray(self.grid, dtype=np.float64),
                2.0**-self.scale_bits,
                2.0 ** loss_bits(self.scale_bits),
                cross,
                square,
            ):
                return (
                    [sum(int(v) for v in cross[:, g]) for g in range(G)],
                    [sum(int(v) for v in square[:, g]) for g in range(G)],
                )
        total_cross, total_square = [0] * G, [0] * G
        cells = np.arange(T * C, dtype=np.int64)
        for start in range(0, len(cells), _TOTALS_CHUNK):
            c, s = self._terms(cells[start : start + _TOTALS_CHUNK])
            for g in range(G):
                total_cross[g] += int(c[:, g].sum())
                total_square[g] += int(s[:, g].sum())
        return total_cross, total_square

    def _refresh_probes(self) -> None:
        if self._probes_fresh:
            return
        if not self._totals_fresh:
            self._refresh_together()
            if self._probes_fresh:
                return
        self._probe_sums = self._all_probe_sums()
        self._norms = None
        self._probes_fresh = True

    def _probe_units(self) -> tuple[np.ndarray, float, float, float]:
        """The grid and the fixed-point scales the compiled probe-term kernels take."""
        return (
            np.asarray(self.grid, dtype=np.float64),
            2.0**-self.scale_bits,
            2.0**MEAN_BITS,
            2.0 ** square_bits(self.scale_bits),
        )

    def _all_probe_sums(self) -> np.ndarray:
        """:meth:`set_probes`' sums from every probe entry: one compiled pass over the probe
        index (a cell's terms once, added to each probe in it), or numpy's terms scattered
        with ``np.add.at`` (the same integers)."""
        T, C = self.n_tables, self.n_cells
        m = len(self.probe_folds)
        qualified = (1 - self.probe_folds)[:, None] * (T * C) + self.probe_cells
        out = np.zeros((len(self.grid), m, self.n_outputs + 1), dtype=np.int64)
        kernels = table_kernels(m * T * self.n_outputs * len(self.grid))
        if kernels is not None and m and T:
            keys, probe_of = self._probe_keys()  # kept with the probes: free after the 1st
            if kernels.probe_sums_by_cell(
                self.sums.reshape(2 * T * C, -1),
                self.counts.reshape(-1),
                keys,
                probe_of,
                *self._probe_units(),
                out,
            ):
                return out
            out[:] = 0
        p = np.repeat(np.arange(m), T)
        terms = self._probe_terms(p, qualified.ravel())
        if kernels is None or not kernels.add_rows_at(
            out, np.ascontiguousarray(p, dtype=np.int64), terms
        ):
            np.add.at(out, (slice(None), p), terms)
        return out

    def _mark_stale(self) -> None:
        self._totals_fresh = False
        self._fold_rows = []
        self._norms = None
        if self.probe_cells is not None:
            self._probes_fresh = False

    # -- updates ----------------------------------------------------------------------------
    def add(self, codes: np.ndarray, residuals: np.ndarray, folds: np.ndarray) -> None:
        """Add rows: cell ``codes`` (n, T), int64 ``residuals`` (n, k), ``folds`` (n,)."""
        self._update(codes, residuals, folds, 1)

    def subtract(self, codes: np.ndarray, residuals: np.ndarray, folds: np.ndarray) -> None:
        """Remove rows previously added with exactly these codes, residuals and folds."""
        self._update(codes, residuals, folds, -1)

    def _update(self, codes, residuals, folds, sign: int) -> None:
        """Bulk changes (tables whose totals are not computed yet, or at least C/6 rows) only
        scatter: the totals are recomputed from the cells when next read. Small ones update
        the totals and probe sums by difference, in one compiled call when the kernels are
        loaded (:func:`._table_kernels.update_cells`), else in numpy. Either way the same
        integers; the bound is where the one pass over every cell gets cheaper than the
        difference (old and new terms of each touched cell, and of its probes): measured on
        one instance's tables at 300k rows (64 × 4096 cells, k = 10, ~1.4k probes; CPU time,
        update + first read): 512 rows 14.2 ms by difference vs 18.4 ms deferred, 1024 rows
        26.3 vs 19.3 ms (C/2 = 2048 rows, the bound before: 49.9 vs 20.9 ms)."""
        n = codes.shape[0]
        if n == 0:
            return
        if sign > 0 and self.n_rows + n > MAX_ROWS:
            raise OverflowError(f"more than {MAX_ROWS} rows cannot be accumulated exactly")
        fresh = self._totals_fresh and self._probes_fresh
        if not fresh or _DEFER_ROWS_PER_CELL * n >= self.n_cells:
            self._scatter(codes, residuals, folds, sign)
            self._mark_stale()
            return
        kernels = table_kernels(n * self.n_tables * self.n_outputs)
        if kernels is not None and self._update_compiled(kernels, codes, residuals, folds, sign):
            return
        self._update_numpy(codes, residuals, folds, sign)

    def _scatter(self, codes, residuals, folds, sign: int) -> None:
        """sums and counts only (the totals are left for :meth:`_mark_stale`'s callers)."""
        T, C = self.n_tables, self.n_cells
        n = codes.shape[0]
        kernels = table_kernels(n * T * self.n_outputs)
        if kernels is not None:
            codes_c, folds_c = _index_arrays(codes, folds)
            if kernels.scatter_codes(
                self.sums.reshape(2, T * C, -1),
                self.counts.reshape(2, T * C),
                codes_c,
                folds_c,
                np.ascontiguousarray(residuals, dtype=np.int64),
                sign < 0,
            ):
                return
        flat = self._flat(codes, folds)
        values = np.asarray(residuals, dtype=np.int64)
        _scatter_rows(self.sums.reshape(2 * T * C, -1), flat, -values if sign < 0 else values, T)
        if n * T < _SPARSE_MIN_ENTRIES:
            np.add.at(self.counts.reshape(-1), flat, sign)
        else:
            self.counts.reshape(-1)[:] += sign * np.bincount(flat, minlength=2 * T * C)

    def _flat(self, codes, folds) -> np.ndarray:
        """Fold-qualified cell ids f·T·C + t·C + c of every (row, table), row-major; an
        IndexError for codes or folds outside the tables."""
        T, C = self.n_tables, self.n_cells
        codes = np.asarray(codes, dtype=np.int64)
        folds = np.asarray(folds, dtype=np.int64)
        if codes.size and (codes.min() < 0 or codes.max() >= C):
            raise IndexError("a cell code lies outside the tables")
        if folds.size and (folds.min() < 0 or folds.max() > 1):
            raise IndexError("a fold is not 0 or 1")
        cell = np.arange(T, dtype=np.int64)[None, :] * C + codes  # (n, T) table-major cell id
        return (folds[:, None] * (T * C) + cell).ravel()

    def _update_compiled(self, kernels, codes, residuals, folds, sign: int) -> bool:
        norms = self._probe_norms()
        args = self._update_args
        if (
            args is None
            or args[0] is not norms
            or args[1] is not self.sums
            or args[2] is not self.counts
            or args[3] is not self._probe_start
        ):
            args = self._update_args = self._compiled_args(norms)
        tables, probes, out = args[4], args[5], args[6]
        codes_c, folds_c = _index_arrays(codes, folds)
        ok = kernels.update_cells(
            *tables,
            codes_c,
            folds_c,
            np.ascontiguousarray(residuals, dtype=np.int64),
            sign < 0,
            *probes,
            out,
        )
        G = len(self.grid)
        if not ok:
            return False
        values = out.tolist()
        for g in range(G):
            self._cross[g] += values[g]
            self._square[g] += values[G + g]
        ones = values[2 * G]
        self._fold_rows[0] += sign * (codes.shape[0] - ones)
        self._fold_rows[1] += sign * ones
        if values[6 * G + 1]:
            norms.add(values[2 * G + 1 : 4 * G + 1], values[4 * G + 1 : 6 * G + 1])
        else:  # a term too large for the kernel's int64 deltas: recounted when next read
            self._norms = None
        return True

    def _compiled_args(self, norms: _ProbeNorms) -> tuple:
        """What every compiled update passes besides the rows, kept between updates: the
        reshaped views, the probe index and folds, the fixed-point units, the scratch
        marks and the result array. A one-row forget is ~0.1 ms, so building these ~20
        objects per call was a visible part of it. Rebuilt when any of the objects it was
        made from is replaced (``_update_compiled`` compares them by identity)."""
        T, C, k = self.n_tables, self.n_cells, self.n_outputs
        if self._marks is None:
            self._marks = np.zeros(2 * T * C, dtype=np.uint8)
        start, probe_of = self._probe_csr()
        tables = (self.sums.reshape(2, T * C, k), self.counts.reshape(2, T * C))
        probes = (
            np.asarray(self.grid, dtype=np.float64),
            2.0**-self.scale_bits,
            2.0 ** loss_bits(self.scale_bits),
            start,
            probe_of,
            norms.records,
            2.0**MEAN_BITS,
            2.0 ** square_bits(self.scale_bits),
            norms.folds,
            norm_unit(T, self.scale_bits),
            norms.terms,
            self._marks,
        )
        out = np.empty(6 * len(self.grid) + 2, dtype=np.int64)
        return (norms, self.sums, self.counts, start, tables, probes, out)

    def _update_numpy(self, codes, residuals, folds, sign: int) -> None:
        """The incremental update in numpy: the definition :meth:`_update_compiled` follows."""
        n = codes.shape[0]
        T, C = self.n_tables, self.n_cells
        flat = self._flat(codes, folds)
        small = n * T < _SPARSE_MIN_ENTRIES
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
        old_cross, old_square = self._terms(touched)
        probes = self._probe_hits(touched_flat)
        old_probe = self._probe_terms(*probes)
        values = np.asarray(residuals, dtype=np.int64)
        if sign < 0:
            values = -values
        _scatter_rows(self.sums.reshape(2 * T * C, -1), flat, values, T)
        if small:
            np.add.at(self.counts.reshape(-1), flat, sign)
        else:
            self.counts.reshape(-1)[:] += sign * hits
        new_cross, new_square = self._terms(touched)
        d_cross = new_cross.sum(axis=0) - old_cross.sum(axis=0)  # exact int64
        d_square = new_square.sum(axis=0) - old_square.sum(axis=0)
        for g in range(len(self.grid)):
            self._cross[g] += int(d_cross[g])
            self._square[g] += int(d_square[g])
        ones = int(np.count_nonzero(np.asarray(folds)))
        self._fold_rows[0] += sign * (n - ones)
        self._fold_rows[1] += sign * ones
        if probes[0].size:
            delta = self._probe_terms(*probes) - old_probe
            kernels = table_kernels(delta.size)
            if kernels is None or not kernels.add_rows_at(
                self._probe_sums, np.ascontiguousarray(probes[0], dtype=np.int64), delta
            ):
                np.add.at(self._probe_sums, (slice(None), probes[0]), delta)
            self._norms = None

    # -- probes: the square term of the tables' average, estimated on D° ------------------
    def set_probes(self, probe_codes: np.ndarray, probe_folds: np.ndarray) -> None:
        """Estimate Σ_B ‖m_A(x)‖² of the tables' *average* on probe rows (the schema's D°).

        The cross term of the average is linear in the cells and kept exactly for all rows;
        its square term couples the tables, so it is estimated on the probes: for a probe in
        fold b, m_a(x) = (1/T) Σ_t μ^a_t[c_t(x)] with a = 1 − b (out of fold), kept per λ as
        an exact integer sum of fixed-point means and updated by difference whenever one of
        its cells changes in fold a. The probes are part of the schema (D° only), so this
        stays a pure function of (schema, statistics).
        """
        T, C = self.n_tables, self.n_cells
        self.probe_cells = np.arange(T, dtype=np.int64)[None, :] * C + np.asarray(
            probe_codes, dtype=np.int64
        )
        self.probe_folds = np.asarray(probe_folds, dtype=np.int64)
        self._probe_index = None
        self._probe_start = None
        self._norms = None
        self._probe_sums = None
        self._probes_fresh = False
        if self._totals_fresh:  # summed tables (a reduced build): computed now, off the
            self._refresh_probes()  # serving path; fresh ones when first read

    def _probe_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """The probe entries' fold-qualified out-of-fold cells, sorted, and their probes."""
        if self._probe_index is None:
            if self.probe_cells is None or len(self.probe_folds) == 0:
                self._probe_index = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            else:
                T, C = self.n_tables, self.n_cells
                qualified = ((1 - self.probe_folds)[:, None] * (T * C) + self.probe_cells).ravel()
                order = np.argsort(qualified, kind="stable")
                self._probe_index = (
                    np.ascontiguousarray(qualified[order], dtype=np.int64),
                    np.ascontiguousarray(order // T, dtype=np.int64),
                )
        return self._probe_index

    def _probe_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, probe): the probe entries of fold-qualified cell q are
        probe[start[q]:start[q + 1]] — the compiled update's index (O(1) per touched cell)."""
        if self._probe_start is None:
            keys, _ = self._probe_keys()
            T, C = self.n_tables, self.n_cells
            start = np.zeros(2 * T * C + 1, dtype=np.int64)
            np.cumsum(np.bincount(keys, minlength=2 * T * C), out=start[1:])
            self._probe_start = start
        return self._probe_start, self._probe_keys()[1]

    def _probe_hits(self, touched_flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probe index, fold-qualified cell id) of the probe entries whose out-of-fold mean
        lives in one of the fold-qualified cells ``touched_flat``."""
        if self.probe_cells is None or len(self.probe_folds) == 0:
            return np.zeros(0, np.intp), np.zeros(0, np.int64)
        keys, probe_of = self._probe_keys()
        lo = np.searchsorted(keys, touched_flat, side="left")
        hi = np.searchsorted(keys, touched_flat, side="right")
        sizes = hi - lo
        total = int(sizes.sum())
        # the concatenation of the ranges lo[j]..hi[j], vectorized
        starts = np.repeat(lo - np.cumsum(sizes) + sizes, sizes)
        entries = starts + np.arange(total)
        return probe_of[entries], keys[entries]

    def _probe_terms(self, p: np.ndarray, qualified: np.ndarray) -> np.ndarray:
        """Per λ and entry: the fold mean of a fold-qualified cell in fixed point (k values)
        and its squared norm (one more column), element-wise then integer-summed: exact."""
        k = self.n_outputs
        if p.size == 0:
            return np.zeros((len(self.grid), 0, k + 1), dtype=np.int64)
        kernels = table_kernels(len(p) * k * len(self.grid))
        # empty cells have zero terms (λ > 0): every entry of fresh tables (set_probes, a
        # fit's first add) costs a gather instead of the arithmetic
        check = kernels is None or len(p) >= _EMPTY_CHECK_MIN_CELLS
        if (
            check
            and min(self.grid, default=0.0) > 0.0
            and not self.counts.reshape(-1)[qualified].any()
            and not self.sums.reshape(-1, k)[qualified].any()
        ):
            return np.zeros((len(self.grid), len(p), k + 1), dtype=np.int64)
        if kernels is not None:
            out = np.empty((len(self.grid), len(p), k + 1), dtype=np.int64)
            if kernels.probe_terms(
                self.sums.reshape(-1, k),
                self.counts.reshape(-1),
                np.ascontiguousarray(qualified, dtype=np.int64),
                *self._probe_units(),
                out,
            ):
                return out
        return self._probe_terms_numpy(qualified)

    def _probe_terms_numpy(self, qualified: np.ndarray) -> np.ndarray:
        """:meth:`_probe_terms` in numpy: the definition the compiled kernel reproduces."""
        k = self.n_outputs
        S = self.sums.reshape(-1, k)[qualified].astype(np.float64)
        S *= 2.0**-self.scale_bits
        n = self.counts.reshape(-1)[qualified].astype(np.float64)
        out = np.empty((len(self.grid), len(qualified), k + 1), dtype=np.int64)
        for g, lam in enumerate(self.grid):
            mu = S / (n + lam)[:, None]
            out[g, :, :k] = np.rint(mu * 2.0**MEAN_BITS).astype(np.int64)
            out[g, :, k] = (
                np.rint(mu * mu * 2.0 ** square_bits(self.scale_bits)).astype(np.int64).sum(axis=1)
            )
        return out

    def probe_square(self, g: int) -> float | None:
        """Σ over rows of both folds of ‖m_out-of-fold(x)‖² for λ = grid[g], or None without
        probes in both folds.

        A ratio estimate: the exact per-table square (all rows, maintained per cell) times
        Σ_probes ‖(1/T) Σ_t μ_t‖² / Σ_probes (1/T) Σ_t ‖μ_t‖². Numerator and denominator come
        from the same few probes, so their noise largely cancels (the plain probe estimate of
        the square alone let α overshoot on small D°).
        """
        if self.probe_cells is None:
            return None
        return self._probe_square(self._probe_norms(), g)

    def _probe_square(self, norms: _ProbeNorms, g: int) -> float | None:
        """:meth:`probe_square` from current per-fold totals."""
        return self._probe_squares(norms)[g]

    def _probe_squares(self, norms: _ProbeNorms) -> list[float | None]:
        """:meth:`probe_square` of every λ of the grid from current per-fold totals, in one
        pass (``best`` asks for all of them after every change: per λ and fold, two calls
        each were ~40 Python calls of a one-row forget's first prediction)."""
        G = len(self.grid)
        n_probes = norms.n_probes
        if min(n_probes) == 0:
            return [None] * G
        weights = [float(self._fold_rows[b]) / n_probes[b] for b in (0, 1)]
        unit = 2.0 ** -loss_bits(self.scale_bits)
        T = self.n_tables
        squares: list[float | None] = []
        for g in range(G):
            average = per_table = 0.0
            norm_totals, last_totals = norms.norm_totals[g], norms.last_totals[g]
            for b in (0, 1):  # norms.norms(g, b), inlined
                mean_norm = float(norm_totals[b]) * norms.mean_scale
                square_norm = float(last_totals[b]) * norms.square_scale
                average += mean_norm * weights[b]
                per_table += square_norm * weights[b]
            exact_per_table = float(self._square[g]) * unit / T
            squares.append(average if per_table <= 0.0 else exact_per_table * average / per_table)
        return squares

    def _probe_norms(self) -> _ProbeNorms:
        """The per-fold totals of the probe sums :meth:`probe_square` reads (counted once per
        change of probes or bulk update, then kept current by the updates' differences)."""
        self._refresh_totals()
        self._refresh_probes()
        if self._norms is None:
            self._norms = _ProbeNorms(self)
            if self._probe_sums is not None:  # the same integers, now in the records
                self._probe_sums = self._norms.probe_sums
        return self._norms

    def _terms(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fixed-point cross and square terms (m, G) of table-major cell ids ``cells``.

        Element-wise float operations on one cell's integers, rounded per element before any
        summation, so a term is the same integer whenever the cell holds the same integers.
        Cells that hold nothing (zero counts and sums, λ > 0) have zero terms: a fit's first
        ``add`` asks for the old terms of every cell it touches, all empty.
        """
        T, C = self.n_tables, self.n_cells
        cells = np.asarray(cells, dtype=np.int64)
        G = len(self.grid)
        counts = self.counts.reshape(2, T * C)
        kernels = table_kernels(len(cells) * self.n_outputs)
        # the emptiness check costs more than the compiled terms of a few cells
        check = kernels is None or len(cells) >= _EMPTY_CHECK_MIN_CELLS
        if check and min(self.grid, default=0.0) > 0.0 and not counts[:, cells].any():
            if not self.sums.reshape(2, T * C, -1)[:, cells].any():
                zeros = np.zeros((len(cells), G), dtype=np.int64)
                return zeros, zeros.copy()
        if kernels is not None:
            cross = np.empty((len(cells), G), dtype=np.int64)
            square = np.empty((len(cells), G), dtype=np.int64)
            if kernels.cell_terms(
                self.sums.reshape(2, T * C, -1),
                counts,
                np.ascontiguousarray(cells),
                np.asarray(self.grid, dtype=np.float64),
                2.0**-self.scale_bits,
                2.0 ** loss_bits(self.scale_bits),
                cross,
                square,
            ):
                return cross, square
        return self._terms_numpy(cells)

    def _terms_numpy(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_terms` in numpy: the definition the compiled kernel reproduces."""
        T, C = self.n_tables, self.n_cells
        # (fold, output, cell): sums over outputs become adds of contiguous vectors
        S = self.sums.reshape(2, T * C, -1)[:, cells].transpose(0, 2, 1).astype(np.float64)
        S *= 2.0**-self.scale_bits
        n = self.counts.reshape(2, T * C)[:, cells].astype(np.float64)
        bits = loss_bits(self.scale_bits)
        lam = np.asarray(self.grid, dtype=np.float64)[None, :, None, None]
        # mu[a, g]: fold a's means under λ_g (k, m), scored on the other fold's rows
        mu = S[:, None] / (n[:, None, None, :] + lam)
        other_S, other_n = S[::-1, None], n[::-1, None, None, :]
        unit = 2.0**bits  # scaling by a power of two is exact: the same bits as ldexp
        c = np.rint(other_S * mu * unit).astype(np.int64)
        sq = np.rint(other_n * mu * mu * unit).astype(np.int64)
        # integer sums over both directions and the outputs: order-independent
        return c.sum(axis=(0, 2)).T, sq.sum(axis=(0, 2)).T

    def rebuild_totals(self) -> None:
        """Recompute the cross-fit totals from every cell (after a bulk load or an in-place
        change of ``sums``/``counts``)."""
        self._totals_fresh = False
        self._refresh_totals()

    # -- choosing α and λ -------------------------------------------------------------------
    def choose(self, alpha: float | str, shrinkage: float | str) -> tuple[float, float]:
        """(α, λ) from the exact totals: λ on the grid (or given) with the largest fall of
        the out-of-fold loss, α = cross/square (≥ 0) or as given.

        With probes (:meth:`set_probes`) the loss is that of the tables' average (exact cross
        term, square term estimated on the probes); without, the per-table loss.
        """
        a, lam, _ = self.best(alpha, shrinkage)
        return a, lam

    def best(self, alpha: float | str, shrinkage: float | str) -> tuple[float, float, float]:
        """:meth:`choose` with the out-of-fold fall in squared error it achieves (summed over
        the rows of both folds, residual units; NaN when not computed for an off-grid λ)."""
        if shrinkage != "auto" and float(shrinkage) not in self.grid:
            if alpha != "auto":
                return float(alpha), float(shrinkage), float("nan")
            return self._alpha_off_grid(float(shrinkage)), float(shrinkage), float("nan")
        options = (
            list(range(len(self.grid)))
            if shrinkage == "auto"
            else [self.grid.index(float(shrinkage))]
        )
        scale = 2.0 ** -loss_bits(self.scale_bits) / self.n_tables
        best = (-np.inf, 0.0, self.grid[options[0]])
        totals_cross, totals_square = self.cross, self.square  # brought up to date once
        squares = None if self.probe_cells is None else self._probe_squares(self._probe_norms())
        for g in options:
            cross = float(totals_cross[g]) * scale  # exact integers → the same float every time
            square = None if squares is None else squares[g]
            if square is None:
                square = float(totals_square[g]) * scale
            a, gain = blend_and_fall(alpha, cross, square)
            if gain > best[0]:
                best = (gain, a, self.grid[g])
        return best[1], best[2], best[0]

    def per_table_gain(self) -> float:
        """The largest cross-fitted gain of the per-table loss over the grid: exact, and a
        lower bound on the gain of the tables' average (Jensen: averaging tables can only
        shrink the square term). Not part of the head-vs-tables rule any more (a loose bound:
        2–25× below the probe estimate on the benchmark's sets, and no factor on it or on its
        geometric mean with the probe estimate separates the sets where the head wins —
        benchmarks/results/head_rule.md); reported there for the record."""
        scale = 2.0 ** -loss_bits(self.scale_bits) / self.n_tables
        best = 0.0
        for g in range(len(self.grid)):
            cross, square = float(self.cross[g]) * scale, float(self.square[g]) * scale
            if cross > 0.0 and square > 0.0:
                best = max(best, cross * cross / square)
        return best

    def _alpha_off_grid(self, lam: float) -> float:
        """α for a shrinkage the totals are not kept for: recomputed from every cell (O(T·C),
        a deterministic function of the integers like everything else)."""
        other = FlatTables.empty(
            self.n_tables, self.n_cells, self.n_outputs, self.scale_bits, (lam,)
        )
        other.sums, other.counts = self.sums, self.counts
        other.rebuild_totals()
        if self.probe_cells is not None:
            other.set_probes(
                self.probe_cells - np.arange(self.n_tables) * self.n_cells, self.probe_folds
            )
        return other.choose("auto", lam)[0]

    # -- serving ----------------------------------------------------------------------------
    def correction(self, codes: np.ndarray, shrinkage: float) -> np.ndarray:
        """(1/T) Σ_t μ_t[c_t(x)] for rows with cell ``codes`` (n, T); exact in any batch."""
        codes = np.asarray(codes)
        if 0 < codes.shape[0] <= _SERVE_CHUNK:  # a prediction's row or few: one chunk
            return self._correction(codes, shrinkage)
        out = np.empty((codes.shape[0], self.n_outputs), dtype=np.float64)
        for start in range(0, codes.shape[0], _SERVE_CHUNK):
            out[start : start + _SERVE_CHUNK] = self._correction(
                codes[start : start + _SERVE_CHUNK], shrinkage
            )
        return out

    def _correction(self, codes: np.ndarray, shrinkage: float) -> np.ndarray:
        kernels = table_kernels(codes.shape[0] * self.n_tables * self.n_outputs)
        if kernels is not None:
            out = np.empty((codes.shape[0], self.n_outputs), dtype=np.float64)
            T, C = self.n_tables, self.n_cells
            if kernels.serve_correction(
                self.sums.reshape(2, T * C, -1),
                self.counts.reshape(2, T * C),
                np.ascontiguousarray(codes, dtype=np.int64),
                2.0**-self.scale_bits,
                float(shrinkage),
                2.0**MEAN_BITS,
                2.0**-MEAN_BITS,
                out,
            ):
                return out
        return self._correction_numpy(codes, shrinkage)

    def _correction_numpy(self, codes: np.ndarray, shrinkage: float) -> np.ndarray:
        """The definition :func:`._table_kernels.serve_correction` follows."""
        T, C = self.n_tables, self.n_cells
        cell = np.arange(T, dtype=np.int64)[None, :] * C + codes.astype(np.int64)
        flat_sums = self.sums.reshape(2, T * C, -1)
        flat_counts = self.counts.reshape(2, T * C)
        S = flat_sums[0][cell] + flat_sums[1][cell]  # (n, T, k) exact int64
        n = (flat_counts[0][cell] + flat_counts[1][cell]).astype(np.float64)
        mu = S.astype(np.float64) * 2.0**-self.scale_bits / (n + shrinkage)[:, :, None]
        fixed = np.rint(mu * 2.0**MEAN_BITS).astype(np.int64)
        total = fixed.sum(axis=1)  # integer sum: order-independent
        return total.astype(np.float64) * 2.0**-MEAN_BITS / T

    # -- bookkeeping -------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        """Without the probe records and the compiled update's arguments: the probe sums are
        a view of the records, and a pickle (or deepcopy) would part the two; both are
        rebuilt from the sums on first use."""
        state = dict(self.__dict__)
        state["_norms"] = None
        state["_update_args"] = None
        if state["_probe_sums"] is not None:
            state["_probe_sums"] = np.ascontiguousarray(state["_probe_sums"])
        return state

    def copy(self) -> FlatTables:
        def dup(a):
            return None if a is None else a.copy()

        fresh = self._totals_fresh and self._probes_fresh
        return FlatTables(
            self.sums.copy(),
            self.counts.copy(),
            self.scale_bits,
            self.grid,
            list(self._cross) if fresh else None,
            list(self._square) if fresh else None,
            dup(self.probe_cells),
            dup(self.probe_folds),
            dup(self._probe_sums) if fresh else None,
        )

    def equals(self, other: FlatTables) -> bool:
        def same(a, b):
            return (a is None and b is None) or (
                a is not None and b is not None and np.array_equal(a, b)
            )

        return (
            self.scale_bits == other.scale_bits
            and self.grid == other.grid
            and np.array_equal(self.sums, other.sums)
            and np.array_equal(self.counts, other.counts)
            and self.cross == other.cross
            and self.square == other.square
            and same(self.probe_cells, other.probe_cells)
            and same(self.probe_folds, other.probe_folds)
            and same(self.probe_sums, other.probe_sums)
        )


_SPARSE_MIN_ENTRIES = 1 << 15
_DEFER_ROWS_PER_CELL = 6
"""A change of at least C / 6 rows defers the totals to the next read (``_update``)."""
_TOTALS_CHUNK = 1 << 16
"""Cells per int64 partial sum of the totals (then added as Python ints): the blocks every
recount has used, so even sums past int64 (beyond the documented limits) wrap alike."""
_EMPTY_CHECK_MIN_CELLS = 1 << 12
_SERVE_CHUNK = 2048


def _scatter_rows(target: np.ndarray, flat: np.ndarray, values: np.ndarray, T: int) -> None:
    """target[flat[i·T + t]] += values[i] for every row i and table t (exact int64).

    Without the compiled loop (:mod:`.kernels`): small updates (a handful of rows) use
    ``np.add.at``; large batches one sparse product
    (rows × cells incidence, transposed, times the residuals): integer arithmetic, so exact,
    and ~30× faster than ``np.add.at`` for 10⁴ rows. The compiled loop, when loaded, adds the
    same int64 values without building the matrix (and in a few µs for one row).
    """
    n = values.shape[0]
    kernels = table_kernels(n * T)
    if kernels is None and n * T < _SPARSE_MIN_ENTRIES:
        np.add.at(target, flat, np.repeat(values, T, axis=0))
        return
    if kernels is not None:
        flat = np.ascontiguousarray(flat, dtype=np.int64)
        values = np.ascontiguousarray(values, dtype=np.int64)
        if not kernels.scatter_rows(target, flat, values, T):
            raise IndexError("a cell index lies outside the tables")
        return
    _scatter_rows_sparse(target, flat, values, T)


def _scatter_rows_sparse(target: np.ndarray, flat: np.ndarray, values: np.ndarray, T: int) -> None:
    """:func:`_scatter_rows` for large batches in numpy/scipy (the compiled kernel's twin)."""
    n = values.shape[0]
    import scipy.sparse as sp

    A = sp.csr_matrix(
        (np.ones(n * T, dtype=np.int64), flat, np.arange(0, n * T + 1, T)),
        shape=(n, target.shape[0]),
    )
    target += np.asarray(A.T @ values)


class _ProbeNorms:
    """What :meth:`FlatTables.probe_square` reads, kept between changes: per λ and fold b of
    the probes (a probe's own fold), N_b = Σ_p N_p, the probes' norm terms
    (:func:`probe_norm_terms`: ‖Σ_t μ_t‖² of the probe's out-of-fold means in fixed point),
    and Q_b = Σ_p of the probe sums' last column (Σ_t ‖μ_t‖², fixed point) — exact Python
    ints, counted from the probe sums once and then changed by the updates' new − old terms
    of the probes they touch.

    Why integers: these were float reductions over every probe of a fold (an ``einsum`` over
    (G, m_b, k) float copies of the sums), redone after every change — at n = 300k, ~1.4k
    probes, the float copies' upkeep and the reductions were ~0.4 of a 3.5 ms forget + first
    predict (this machine; A/B). An integer total is the same after any history, so it can
    be kept by difference, like the cells' totals."""

    def __init__(self, tables: FlatTables):
        T, k, G = tables.n_tables, tables.n_outputs, len(tables.grid)
        sums = tables._probe_sums
        folds = tables.probe_folds
        if tables.probe_cells is None or sums is None:  # no probes: nothing to keep
            folds, sums = np.zeros(0, np.int64), np.zeros((G, 0, k + 1), np.int64)
        # one record per probe: its sums λ by λ, then its norm terms (float64), padded to
        # whole cache lines (the compiled update's layout: _table_kernels.update_cells);
        # probe_sums is the (G, m, k + 1) view of it that the tables and numpy read
        m, span = sums.shape[1], G * (k + 1)
        self.records = _line_aligned(m, span + G + (-(span + G) % 8))
        self.probe_sums = as_strided(
            self.records, shape=(G, m, k + 1), strides=(8 * (k + 1), 8 * self.records.shape[1], 8)
        )
        self.probe_sums[...] = sums
        self.folds = np.ascontiguousarray(folds, dtype=np.int64)
        self.n_probes = [int((self.folds == 0).sum()), int((self.folds == 1).sum())]
        unit = norm_unit(T, tables.scale_bits)
        # a term is ‖S‖² · unit and ‖m‖² = ‖S‖² · 2^-80 / T²: powers of two divide exactly
        self.mean_scale = 2.0 ** (-2 * MEAN_BITS) / unit / (T * T)
        self.square_scale = 2.0 ** -square_bits(tables.scale_bits) / T
        terms = probe_norm_terms(sums, unit)
        # each probe's G terms in its record, kept current by the compiled update, which
        # reads a changed probe's old terms from here
        self.terms = self.records.view(np.float64)[:, span : span + G]
        self.terms[...] = terms.T
        self.norm_totals = [[0, 0] for _ in range(G)]
        self.last_totals = [[0, 0] for _ in range(G)]
        for b in (0, 1):
            mine = self.folds == b
            for g in range(G):
                self.norm_totals[g][b] = _exact_total(terms[g, mine])
                self.last_totals[g][b] = _exact_total(sums[g, mine, k])

    def add(self, d_norm: list[int], d_last: list[int]) -> None:
        """An update's deltas, fold 0's G values then fold 1's (``update_cells``' layout)."""
        G = len(self.norm_totals)
        for b in (0, 1):
            for g in range(G):
                self.norm_totals[g][b] += d_norm[b * G + g]
                self.last_totals[g][b] += d_last[b * G + g]

    def norms(self, g: int, b: int) -> tuple[float, float]:
        """Σ ‖m‖² and Σ q over fold b's probes for λ_g (the two sums of probe_square): m a
        probe's average out-of-fold mean, q its per-table average of ‖μ_t‖²."""
        return (
            float(self.norm_totals[g][b]) * self.mean_scale,
            float(self.last_totals[g][b]) * self.square_scale,
        )


def _line_aligned(rows: int, width: int) -> np.ndarray:
    """A zeroed (rows, width) int64 array whose rows start on 64-byte cache lines (width a
    multiple of 8): a record then spans exactly width / 8 lines."""
    buffer = np.zeros(rows * width + 8, dtype=np.int64)
    skip = (-buffer.ctypes.data % 64) // 8
    return buffer[skip : skip + rows * width].reshape(rows, width)


def norm_unit(n_tables: int, scale_bits: int) -> float:
    """The fixed-point unit of the probes' norm terms: ‖S‖² · 2^(s − 80 − 2⌈log2 T⌉) for the
    probe's k mean sums S (2^40 per unit, T tables) is ‖m‖² · 2^s · T²/2^(2⌈log2 T⌉) ≤ ‖m‖²·2^s
    for the average mean m, s = square_bits — the bound of a per-table squared mean."""
    tb = (n_tables - 1).bit_length()
    return 2.0 ** (square_bits(scale_bits) - 2 * MEAN_BITS - 2 * tb)


def probe_norm_terms(probe_sums: np.ndarray, unit: float) -> np.ndarray:
    """Per λ and probe, N = rint(Σ_j float64(S_j)² · unit) for the probe's k mean sums S
    (``probe_sums[..., :k]``): the outputs summed in order, one product and one sum each —
    the compiled update's order (:func:`._table_kernels._norm_terms_into`), so the same
    integers (as float64; exact below 2^53, and integers beyond)."""
    k = probe_sums.shape[-1] - 1
    acc = np.zeros(probe_sums.shape[:-1], dtype=np.float64)
    for j in range(k):
        x = probe_sums[..., j].astype(np.float64)
        acc += x * x
    return np.rint(acc * unit)


def _exact_total(values: np.ndarray) -> int:
    """Σ values as a Python int (integers, as int64 or integral float64): one int64 sum when
    no partial sum can overflow, else value by value."""
    if values.size == 0:
        return 0
    if float(np.max(np.abs(values))) < 2.0**50 and values.size <= 1 << 12:
        return int(values.astype(np.int64).sum())
    return sum(int(v) for v in values.tolist())


def _index_arrays(codes, folds) -> tuple[np.ndarray, np.ndarray]:
    """Codes and folds as contiguous integer arrays for the kernels (any integer dtype)."""
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        codes = codes.astype(np.int64)
    folds = np.asarray(folds)
    if folds.dtype.kind not in "iu":
        folds = folds.astype(np.int64)
    return np.ascontiguousarray(codes), np.ascontiguousarray(folds)


TABLES_GAIN_FACTOR = 0.65
"""An instance serves its head when the head's out-of-fold gain exceeds this fraction of the
tables' (their cross-fitted gain with the D°-probe square term, ``FlatTables.best``): the rule
of :func:`forgetting.content.tables.build_flat_content`.

Why this statistic, and why below 1: on validation splits carved from the training sets
(benchmarks/results/head_rule.md: `python -m forgetting_lab.bench.head_rule`, 4 splits × 3
instances per set) the ratio head gain / tables' probe gain separates, instance by instance,
the sets where the head is the better model on validation (digits ≥ 0.70, MNIST-HOG ≥ 1.05,
Fashion-HOG, Adult and sentiment ≥ 1.18) from those where the tables are (bench.core's Gaussian
mixture ≤ 0.61, diamonds ≤ 0.59, letter ≤ 0.42); 0.65 is the geometric middle of that gap
(0.606 … 0.704 — narrow: a set between the two groups could fall either way). It is below 1
because the probe estimate is optimistic (the tables' gain on the validation rows is below it
on 81 of 96 instances, median 0.93 times it) and because squared error is not accuracy: on
digits the tables' squared-error gain on the validation rows exceeds the head's on 10 of 12
instances while the head is the more accurate on every one. The former rule compared the head
with the geometric mean of the probe estimate and the exact per-table gain; it served the head
on the Gaussian mixture (every instance; tables 0.993 vs 0.984 on validation) and on a third of
diamonds' instances, and no constant factor on that mean separates the sets. On diabetes (247
fitting rows, 62 validation rows) no rule of these statistics tracks the validation winner
(both get 8–9 of 12 wrong; squared errors within 1 %).

Out of sample — synthetic sets that played no part in choosing it
(benchmarks/results/head_rule_heldout.md) — it picks the better model on 61 of 72 instances
where the former rule picked it on 31, and it is not a complete answer: on make_classification
with 3 clusters per class the tables are better while the ratio (0.59–0.92) overlaps digits',
and a per-instance rule cannot see that averaging p instances' tables (each built on its own
D°) cancels much of their noise while the instances' heads are nearly one model (bench.core's
mixture at k = 20: the head is the better instance on 10 of 12, the tables' average the better
ensemble, 0.998 vs 0.978 on validation). A deterministic function of the current integer sums,
like both gains."""


@dataclass(frozen=True)
class FlatContent:
    """What a prediction needs from flat tables: (α, λ) chosen from the exact totals, and the
    tables themselves (read at prediction time: nothing is materialized) — or, when the
    instance's ridge head corrects g better out of fold, the head's weights instead."""

    tables: FlatTables
    alpha: float
    shrinkage: float
    head: FixedWeights | NewtonWeights | None = None

    def correction(self, codes: np.ndarray, Z: np.ndarray | None = None) -> np.ndarray:
        """The correction added to g(x) for rows with cell ``codes`` and features ``Z`` (φ)
        (a ridge head's output, or the tables'); a Newton head is served by :meth:`outputs`."""
        if isinstance(self.head, NewtonWeights):
            raise TypeError("a Newton head is not added to g: serve it with outputs()")
        if self.head is not None:
            return self.head.apply(head_features(Z, np.float64))
        return self.alpha * self.tables.correction(codes, self.shrinkage)

    def outputs(self, codes: np.ndarray, g: np.ndarray, Z: np.ndarray | None) -> np.ndarray:
        """What the instance serves: softmax(log g + δᵀv) with a Newton head (one Newton step
        of logistic regression from g, content.heads.NewtonHead), else g + the correction."""
        if isinstance(self.head, NewtonWeights):
            return self.head.outputs(head_features(Z, np.float64), g)
        return g + self.correction(codes, Z)


def build_flat_content(
    tables: FlatTables,
    alpha: float | str,
    shrinkage: float | str,
    head: LinearHead | None = None,
) -> FlatContent:
    """O(|grid|) after any change: the totals are maintained per cell, exactly.

    With a ridge head (content.heads) the head is served instead of the tables when its exact
    out-of-fold gain exceeds :data:`TABLES_GAIN_FACTOR` (0.65) times
    the tables' — both falls in the squared error of the same residuals on the same rows, the
    tables' with the square term of their average estimated on the D° probes. The factor was
    chosen on validation splits carved from the training sets
    (benchmarks/results/head_rule.md): it picks the model that is better on validation on every
    instance of every classification set there (including bench.core's Gaussian mixture, where
    the former rule — the geometric mean of the probe estimate and the exact per-table gain —
    served the head on every instance: validation accuracy 0.984 against the tables' 0.993)
    and on diamonds. Both gains are
    deterministic functions of the current integer sums, so a refit makes the same choice.
    The head costs one (d + 1)² factorization after each change plus one solve and one
    product over 2k columns (LinearHead.solution) — unless the engine's gain filter is certain
    the head's gain is below the threshold (content.heads.gain_filter: the same choice, no solve).
    """
    a, lam, gain = tables.best(alpha, shrinkage)
    if head is not None and alpha == "auto" and shrinkage == "auto":
        threshold = TABLES_GAIN_FACTOR * max(gain, 0.0)
        weights = head.served_over(threshold)
        if weights is not None:  # the head's gain beat the tables'
            return FlatContent(tables, a, lam, weights)
    return FlatContent(tables, a, lam)
