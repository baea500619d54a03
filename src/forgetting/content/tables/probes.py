"""The D° probes of the flat tables: where their out-of-fold cells are, and the exact
per-fold totals of their terms that estimate the square term of the tables' average.

The cross term of the tables' average is linear in the cells and kept exactly for all rows;
its square term couples the tables, so it is estimated on the probes (the schema's D° rows):
for a probe in fold b, m_a(x) = (1/T) Σ_t μ^a_t[c_t(x)] with a = 1 − b (out of fold), kept per
λ as an exact integer sum of fixed-point means (the probe sums, content.tables.terms). The
probes are part of the schema (D° only), so the estimate stays a pure function of (schema,
statistics). This module holds the probe index (which probe entries live in a fold-qualified
cell) and :class:`ProbeNorms`, the per-fold totals the estimate reads, kept by difference.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .units import MEAN_BITS, loss_bits, norm_unit, square_bits


def probe_keys(
    probe_cells: np.ndarray | None, probe_folds: np.ndarray | None, n_tables: int, n_cells: int
) -> tuple[np.ndarray, np.ndarray]:
    """The probe entries' fold-qualified out-of-fold cells, sorted, and their probes."""
    if probe_cells is None or probe_folds is None or len(probe_folds) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    T, C = n_tables, n_cells
    qualified = ((1 - probe_folds)[:, None] * (T * C) + probe_cells).ravel()
    order = np.argsort(qualified, kind="stable")
    return (
        np.ascontiguousarray(qualified[order], dtype=np.int64),
        np.ascontiguousarray(order // T, dtype=np.int64),
    )


def probe_start(keys: np.ndarray, n_tables: int, n_cells: int) -> np.ndarray:
    """start (2·T·C + 1): the probe entries of fold-qualified cell q are entries
    start[q]:start[q + 1] of the sorted :func:`probe_keys` — the compiled update's index
    (O(1) per touched cell)."""
    start = np.zeros(2 * n_tables * n_cells + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=2 * n_tables * n_cells), out=start[1:])
    return start


def probe_hits(
    keys: np.ndarray, probe_of: np.ndarray, touched_flat: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(probe index, fold-qualified cell id) of the probe entries whose out-of-fold mean
    lives in one of the fold-qualified cells ``touched_flat``."""
    lo = np.searchsorted(keys, touched_flat, side="left")
    hi = np.searchsorted(keys, touched_flat, side="right")
    sizes = hi - lo
    total = int(sizes.sum())
    # the concatenation of the ranges lo[j]..hi[j], vectorized
    starts = np.repeat(lo - np.cumsum(sizes) + sizes, sizes)
    entries = starts + np.arange(total)
    return probe_of[entries], keys[entries]


class ProbeNorms:
    """What the square estimate reads, kept between changes: per λ and fold b of the probes
    (a probe's own fold), N_b = Σ_p N_p, the probes' norm terms (:func:`probe_norm_terms`:
    ‖Σ_t μ_t‖² of the probe's out-of-fold means in fixed point), and Q_b = Σ_p of the probe
    sums' last column (Σ_t ‖μ_t‖², fixed point) — exact Python ints, counted from the probe
    sums once and then changed by the updates' new − old terms of the probes they touch.

    Why integers: as float reductions over every probe of a fold, redone after every change,
    they were a large part of a forget and its first prediction; an integer total is the same
    after any history, so it can be kept by difference, like the cells' totals.

    The probe sums live here after construction, one record per probe: its sums λ by λ, then
    its norm terms (float64), padded to whole cache lines — the compiled update's layout
    (``_update_kernels.update_cells``); :attr:`probe_sums` is the (G, m, k + 1) view of them
    that the tables and numpy read."""

    def __init__(
        self,
        probe_sums: np.ndarray | None,
        probe_folds: np.ndarray | None,
        n_tables: int,
        n_outputs: int,
        n_grid: int,
        scale_bits: int,
    ):
        T, k, G = n_tables, n_outputs, n_grid
        sums, folds = probe_sums, probe_folds
        if sums is None or folds is None:  # no probes: nothing to keep
            folds, sums = np.zeros(0, np.int64), np.zeros((G, 0, k + 1), np.int64)
        m, span = sums.shape[1], G * (k + 1)
        self.records = _line_aligned(m, span + G + (-(span + G) % 8))
        self.probe_sums = as_strided(
            self.records, shape=(G, m, k + 1), strides=(8 * (k + 1), 8 * self.records.shape[1], 8)
        )
        self.probe_sums[...] = sums
        self.folds = np.ascontiguousarray(folds, dtype=np.int64)
        self.n_probes = [int((self.folds == 0).sum()), int((self.folds == 1).sum())]
        unit = norm_unit(T, scale_bits)
        # a term is ‖S‖² · unit and ‖m‖² = ‖S‖² · 2^-80 / T²: powers of two divide exactly
        self.mean_scale = 2.0 ** (-2 * MEAN_BITS) / unit / (T * T)
        self.square_scale = 2.0 ** -square_bits(scale_bits) / T
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

    def add(self, d_norm: list[list[int]], d_last: list[list[int]]) -> None:
        """An update's deltas per probe fold and λ (``UpdateDeltas.norm``/``last``)."""
        G = len(self.norm_totals)
        for b in (0, 1):
            for g in range(G):
                self.norm_totals[g][b] += d_norm[b][g]
                self.last_totals[g][b] += d_last[b][g]

    def norms(self, g: int, b: int) -> tuple[float, float]:
        """Σ ‖m‖² and Σ q over fold b's probes for λ_g (the two sums of the square estimate):
        m a probe's average out-of-fold mean, q its per-table average of ‖μ_t‖²."""
        return (
            float(self.norm_totals[g][b]) * self.mean_scale,
            float(self.last_totals[g][b]) * self.square_scale,
        )

    def squares(
        self, fold_rows: list[int], square_totals: list[int], n_tables: int, scale_bits: int
    ) -> list[float | None]:
        """Per λ of the grid, Σ over rows of both folds of ‖m_out-of-fold(x)‖², or None
        without probes in both folds: the exact per-table square (``square_totals``, all rows,
        maintained per cell) times Σ_probes ‖(1/T) Σ_t μ_t‖² / Σ_probes (1/T) Σ_t ‖μ_t‖².
        Numerator and denominator come from the same few probes, so their noise largely
        cancels (the plain probe estimate of the square alone let α overshoot on small D°).
        ``fold_rows`` are the tables' rows per fold (the probes' weights)."""
        G = len(self.norm_totals)
        n_probes = self.n_probes
        if min(n_probes) == 0:
            return [None] * G
        weights = [float(fold_rows[b]) / n_probes[b] for b in (0, 1)]
        unit = 2.0 ** -loss_bits(scale_bits)
        squares: list[float | None] = []
        for g in range(G):
            average = per_table = 0.0
            norm_totals, last_totals = self.norm_totals[g], self.last_totals[g]
            for b in (0, 1):  # self.norms(g, b), inlined: G·2 calls per prediction
                mean_norm = float(norm_totals[b]) * self.mean_scale
                square_norm = float(last_totals[b]) * self.square_scale
                average += mean_norm * weights[b]
                per_table += square_norm * weights[b]
            exact_per_table = float(square_totals[g]) * unit / n_tables
            squares.append(average if per_table <= 0.0 else exact_per_table * average / per_table)
        return squares


def _line_aligned(rows: int, width: int) -> np.ndarray:
    """A zeroed (rows, width) int64 array whose rows start on 64-byte cache lines (width a
    multiple of 8): a record then spans exactly width / 8 lines."""
    buffer = np.zeros(rows * width + 8, dtype=np.int64)
    skip = (-buffer.ctypes.data % 64) // 8
    return buffer[skip : skip + rows * width].reshape(rows, width)


def probe_norm_terms(probe_sums: np.ndarray, unit: float) -> np.ndarray:
    """Per λ and probe, N = rint(Σ_j float64(S_j)² · unit) for the probe's k mean sums S
    (``probe_sums[..., :k]``): the outputs summed in order, one product and one sum each —
    the compiled update's order (``_update_kernels._norm_terms_into``), so the same
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
