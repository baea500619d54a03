"""The flat tables' fixed point: the grids that make every derived quantity an exact integer.

A cell's cross-fit terms, its probe terms and a prediction's per-table means are deterministic
float functions of the cell's integers, rounded to these grids element by element before any
summation; the sums are then exact integer sums, the same in any order, batch or history.
"""

from __future__ import annotations

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


def norm_unit(n_tables: int, scale_bits: int) -> float:
    """The fixed-point unit of the probes' norm terms: ‖S‖² · 2^(s − 80 − 2⌈log2 T⌉) for the
    probe's k mean sums S (2^40 per unit, T tables) is ‖m‖² · 2^s · T²/2^(2⌈log2 T⌉) ≤ ‖m‖²·2^s
    for the average mean m, s = square_bits — the bound of a per-table squared mean."""
    tb = (n_tables - 1).bit_length()
    return 2.0 ** (square_bits(scale_bits) - 2 * MEAN_BITS - 2 * tb)
