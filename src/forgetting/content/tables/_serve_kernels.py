"""The compiled half of the flat tables' serving correction (content.tables.serve).

Per predicted row and table, the mean of the row's cell, rounded to fixed point and summed
over tables as int64: the same float operations in the same order as the numpy definition,
element by element, with no (n, T, k) temporaries. ``tests/test_table_updates.py`` compares
the two.
"""

from __future__ import annotations

import numba
import numpy as np

from .._intrinsics import prefetch

SERVE_AHEAD = 2
"""Rows ahead whose cells :func:`serve_correction` asks for while it sums the current row's:
each row reads 64 cells scattered over ~40 MB of sums, one memory latency apiece when
fetched in turn."""


@numba.njit(cache=True, nogil=True, error_model="numpy")
def serve_correction(tables, codes, scale, shrinkage, mean_unit, out_unit, out) -> bool:
    """``serve.correction`` of ``tables`` (:class:`.bundles.CellArrays`) for rows with cell
    ``codes`` (n, T), into ``out`` (n, k): per table μ = S·scale / (n + λ) of the cell's two
    folds (S, n exact int64 sums), rounded to the 2^-MEAN_BITS grid (``mean_unit``), summed
    over tables as int64, then · 2^-MEAN_BITS (``out_unit``) / T — the same float operations
    in the same order as the numpy definition, element by element, with no (n, T, k)
    temporaries (a large batch gathers millions of them per instance).

    False, with ``out`` unspecified, on anything but ordinary numbers and valid cells (a code
    outside its table, an empty cell at λ = 0, a mean outside int64): the caller then runs
    the numpy definition, which decides (reads, raises or rounds exactly as it always did).
    """
    sums, counts = tables
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
                    prefetch(line_sums, cell * k)
                    prefetch(line_sums, cell * k + k - 1)
                    prefetch(line_sums, (TC + cell) * k)
                    prefetch(line_sums, (TC + cell) * k + k - 1)
                    prefetch(line_counts, cell)
                    prefetch(line_counts, TC + cell)
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
