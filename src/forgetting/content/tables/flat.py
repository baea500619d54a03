"""Flat multi-table content: per-cell integer sums for T tables, served without materializing.

A flat partition (:mod:`forgetting.schema.partitions`) puts every row in one cell of each of T
tables. The content keeps, per fold f ∈ {0, 1}, table t and cell c, the fixed-point residual
sum S[f, t, c] (k values) and the count n[f, t, c] — integer sums over rows, so a deletion or
insertion changes exactly the T cells of each row and subtracting restores the same integers
(design.md §5.2).

Prediction: ŷ(x) = g(x) + α · (1/T) Σ_t μ_t[c_t(x)], with μ_t[c] = S_t[c] / (n_t[c] + λ)
computed from the integers of the T cells the row falls in (:mod:`.serve`).

α and λ are cross-fitted on the two folds (design.md §5.4) with a loss that is a sum of
per-cell terms (:mod:`.terms`), summed over all cells of all tables: the out-of-fold squared
error of the tables' predictions, averaged over tables, falls by 2α·cross − α²·square. Each
term is a deterministic float function of one cell's integers, rounded to fixed point
(element-wise, before any summation), and the totals are exact integers (Python ints) updated
by difference — subtract the touched cells' old terms, add their new ones (:mod:`.update`). So
the totals after any history equal the totals of a fresh build, bit for bit, and choosing α
and λ costs O(|grid|) after each change.

Why per-table and not the loss of the average: the average's square term couples every pair of
tables (Σ_i ‖Σ_t μ_t[c_t(i)]‖² needs joint cell counts of all table pairs), which no per-cell
state can maintain. Σ_t square_t / T bounds it from above (Jensen), so the α chosen from it is
conservative; with probes (:mod:`.probes`) the square term of the average is estimated on D°
instead. :mod:`forgetting_lab.bench.partitions` measures what that costs against an α
cross-fitted on the average with all rows in sight.
"""

from __future__ import annotations

import numpy as np

from ..accumulators import MAX_ROWS
from ..kernels import TABLE_UPDATES
from ..materialize import blend_and_fall
from . import probes as probe_index
from . import serve, terms
from .probes import ProbeNorms
from .scatter import flat_cells, scatter
from .terms import add_probe_terms
from .units import SHRINKAGE_GRID, loss_bits
from .update import DEFER_ROWS_PER_CELL, CompiledUpdate, numpy_update


class FlatTables:
    """Per fold: residual sums ``sums`` (2, T, C, k) int64 and counts ``counts`` (2, T, C),
    plus the exact cross-fit totals per shrinkage value of ``grid``.

    Derived state — the totals ``cross``/``square``, the probe sums ``probe_sums`` and the
    per-fold row counts — is an integer function of the cells, so it is computed when first
    read after a bulk change (a fit's or a batch's scatter, :meth:`set_probes` on tables not
    summed yet) and updated by difference after a small one: the same integers either way
    (a fresh build's), at the cost of one pass over the cells once instead of per-chunk work
    that a chunked build's reduction throws away. Code that writes ``sums``/``counts`` in place
    calls :meth:`rebuild_totals` (and :meth:`set_probes`) afterwards.
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
        self._norms: ProbeNorms | None = None
        self._marks: np.ndarray | None = None
        self._compiled: CompiledUpdate | None = None

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

    def rebuild_totals(self) -> None:
        """Recompute the cross-fit totals from every cell (after a bulk load or an in-place
        change of ``sums``/``counts``)."""
        self._totals_fresh = False
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
        self._cross, self._square = terms.total_terms(
            self.sums, self.counts, self.grid, self.scale_bits
        )
        self._fold_rows = self._count_fold_rows()
        self._totals_fresh = True

    def _refresh_probes(self) -> None:
        if self._probes_fresh:
            return
        if not self._totals_fresh:
            self._refresh_together()
            if self._probes_fresh:
                return
        self._probe_sums = terms.all_probe_sums(
            self.sums,
            self.counts,
            self.probe_cells,
            self.probe_folds,
            self._probe_keys(),  # kept with the probes: free after the first
            self.grid,
            self.scale_bits,
        )
        self._norms = None
        self._probes_fresh = True

    def _refresh_together(self) -> None:
        """Totals and probe sums in one compiled pass over the cells, when both are stale;
        each part it could not compute exactly stays stale for the separate passes."""
        totals, probe_sums = terms.refresh_together(
            self.sums,
            self.counts,
            self._probe_csr,
            len(self.probe_folds),
            self.grid,
            self.scale_bits,
        )
        if totals is not None:
            self._cross, self._square = totals
            self._fold_rows = self._count_fold_rows()
            self._totals_fresh = True
        if probe_sums is not None:
            self._probe_sums = probe_sums
            self._norms = None
            self._probes_fresh = True

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
        the totals and probe sums by difference (:mod:`.update`), in one compiled call when
        the kernels are loaded, else in numpy. Either way the same integers."""
        n = codes.shape[0]
        if n == 0:
            return
        if sign > 0 and self.n_rows + n > MAX_ROWS:
            raise OverflowError(f"more than {MAX_ROWS} rows cannot be accumulated exactly")
        fresh = self._totals_fresh and self._probes_fresh
        if not fresh or DEFER_ROWS_PER_CELL * n >= self.n_cells:
            scatter(self.sums, self.counts, codes, residuals, folds, sign)
            self._mark_stale()
            return
        kernels = TABLE_UPDATES.get(n * self.n_tables * self.n_outputs)
        if kernels is not None and self._update_compiled(kernels, codes, residuals, folds, sign):
            return
        self._update_numpy(codes, residuals, folds, sign)

    def _update_compiled(self, kernels, codes, residuals, folds, sign: int) -> bool:
        norms = self._probe_norms()
        update = self._compiled
        if update is None or not update.made_from(norms, self.sums, self.counts, self._probe_start):
            if self._marks is None:
                self._marks = np.zeros(2 * self.n_tables * self.n_cells, dtype=np.uint8)
            update = self._compiled = CompiledUpdate(
                self.sums,
                self.counts,
                self.grid,
                self.scale_bits,
                norms,
                self._probe_csr(),
                self._marks,
            )
        applied, ones, exact = update.run(kernels, codes, residuals, folds, sign)
        if not applied:
            return False
        deltas = update.deltas
        changes = zip(deltas.cross.tolist(), deltas.square.tolist(), strict=True)
        for g, (d_cross, d_square) in enumerate(changes):
            self._cross[g] += d_cross
            self._square[g] += d_square
        self._fold_rows[0] += sign * (codes.shape[0] - ones)
        self._fold_rows[1] += sign * ones
        if exact:
            norms.add(deltas.norm.tolist(), deltas.last.tolist())
        else:  # a term too large for the kernel's int64 deltas: recounted when next read
            self._norms = None
        return True

    def _update_numpy(self, codes, residuals, folds, sign: int) -> None:
        """The incremental update in numpy: the definition :meth:`_update_compiled` follows."""
        d_cross, d_square, ones, probes = numpy_update(
            self.sums,
            self.counts,
            codes,
            residuals,
            folds,
            sign,
            self.grid,
            self.scale_bits,
            self._probe_hits,
        )
        for g in range(len(self.grid)):
            self._cross[g] += int(d_cross[g])
            self._square[g] += int(d_square[g])
        self._fold_rows[0] += sign * (codes.shape[0] - ones)
        self._fold_rows[1] += sign * ones
        if probes is not None:
            p, delta = probes
            add_probe_terms(self._probe_sums, p, delta, delta.size)
            self._norms = None

    def _flat(self, codes, folds) -> np.ndarray:
        """Fold-qualified cell ids of every (row, table) (:func:`.scatter.flat_cells`)."""
        return flat_cells(codes, folds, self.n_tables, self.n_cells)

    def _terms(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cross and square terms (m, G) of table-major cells (:func:`.terms.cell_terms`)."""
        return terms.cell_terms(self.sums, self.counts, cells, self.grid, self.scale_bits)

    def _terms_numpy(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return terms.cell_terms_numpy(self.sums, self.counts, cells, self.grid, self.scale_bits)

    # -- probes: the square term of the tables' average, estimated on D° ------------------
    def set_probes(self, probe_codes: np.ndarray, probe_folds: np.ndarray) -> None:
        """Estimate Σ_B ‖m_A(x)‖² of the tables' *average* on probe rows (the schema's D°;
        :mod:`.probes`): for a probe in fold b, its out-of-fold means m_a(x), kept per λ as
        exact integer sums updated by difference whenever one of its cells changes in fold a.
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

    def probe_square(self, g: int) -> float | None:
        """Σ over rows of both folds of ‖m_out-of-fold(x)‖² for λ = grid[g], or None without
        probes in both folds (:meth:`.probes.ProbeNorms.squares`: a ratio estimate)."""
        if self.probe_cells is None:
            return None
        return self._probe_squares(self._probe_norms())[g]

    def _probe_squares(self, norms: ProbeNorms) -> list[float | None]:
        return norms.squares(self._fold_rows, self._square, self.n_tables, self.scale_bits)

    def _probe_norms(self) -> ProbeNorms:
        """The per-fold totals of the probe sums the square estimate reads (counted once per
        change of probes or bulk update, then kept current by the updates' differences)."""
        self._refresh_totals()
        self._refresh_probes()
        if self._norms is None:
            self._norms = ProbeNorms(
                self._probe_sums if self.probe_cells is not None else None,
                self.probe_folds,
                self.n_tables,
                self.n_outputs,
                len(self.grid),
                self.scale_bits,
            )
            if self._probe_sums is not None:  # the same integers, now in the records
                self._probe_sums = self._norms.probe_sums
        return self._norms

    def _probe_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """The probe entries' fold-qualified out-of-fold cells, sorted, and their probes."""
        if self._probe_index is None:
            self._probe_index = probe_index.probe_keys(
                self.probe_cells, self.probe_folds, self.n_tables, self.n_cells
            )
        return self._probe_index

    def _probe_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, probe): the probe entries of fold-qualified cell q are
        probe[start[q]:start[q + 1]] — the compiled update's index."""
        if self._probe_start is None:
            keys, _ = self._probe_keys()
            self._probe_start = probe_index.probe_start(keys, self.n_tables, self.n_cells)
        return self._probe_start, self._probe_keys()[1]

    def _probe_hits(self, touched_flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probe index, fold-qualified cell id) of the probe entries whose out-of-fold mean
        lives in one of the fold-qualified cells ``touched_flat``."""
        if self.probe_cells is None or len(self.probe_folds) == 0:
            return np.zeros(0, np.intp), np.zeros(0, np.int64)
        return probe_index.probe_hits(*self._probe_keys(), touched_flat)

    def _probe_terms(self, p: np.ndarray, qualified: np.ndarray) -> np.ndarray:
        """Per λ and entry: the fold mean of a fold-qualified cell in fixed point (k values)
        and its squared norm (:func:`.terms.probe_terms`)."""
        return terms.probe_terms(self.sums, self.counts, qualified, self.grid, self.scale_bits)

    def _probe_terms_numpy(self, qualified: np.ndarray) -> np.ndarray:
        return terms.probe_terms_numpy(
            self.sums, self.counts, qualified, self.grid, self.scale_bits
        )

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
        shrink the square term). Not part of the head-vs-tables rule (a loose bound, and no
        factor on it separates the sets where the head wins:
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
        return serve.correction(self.sums, self.counts, codes, shrinkage, self.scale_bits)

    def _correction_numpy(self, codes: np.ndarray, shrinkage: float) -> np.ndarray:
        return serve.correction_numpy(self.sums, self.counts, codes, shrinkage, self.scale_bits)

    # -- bookkeeping -------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        """Without the probe records and the compiled update's arguments: the probe sums are
        a view of the records, and a pickle (or deepcopy) would part the two; both are
        rebuilt from the sums on first use."""
        state = dict(self.__dict__)
        state["_norms"] = None
        state["_compiled"] = None
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
