"""The typed arguments of the flat tables' compiled kernels: named tuples of arrays and
scalars, so a kernel's call names what it passes and what it gets back instead of a long
positional list and offsets into one output array.

Built here (no numba); a kernel takes each bundle as a plain tuple (``tuple(bundle)``) and
unpacks it in field order (``sums, counts = tables``). Why not the named tuple itself: numba
types a plain tuple of arrays in its C dispatcher, a named tuple field by field in Python —
several µs per call, on the path of every one-row forget and prediction.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .units import MEAN_BITS, loss_bits, norm_unit, square_bits


class CellArrays(NamedTuple):
    """The tables' integers as the kernels see them: cells table-major, both folds."""

    sums: np.ndarray
    """(2, T·C, k) int64: fold f's residual sum of cell t·C + c."""
    counts: np.ndarray
    """(2, T·C) int64: fold f's row count of that cell."""

    @classmethod
    def of(cls, sums: np.ndarray, counts: np.ndarray) -> CellArrays:
        """Views of the tables' ``sums`` (2, T, C, k) and ``counts`` (2, T, C)."""
        return cls(*cell_arrays(sums, counts))


def cell_arrays(sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:class:`CellArrays` of the tables' ``sums`` and ``counts`` as the kernels take it (a
    plain tuple), built directly: a prediction passes it once per instance."""
    T, C, k = sums.shape[1], sums.shape[2], sums.shape[3]
    return sums.reshape(2, T * C, k), counts.reshape(2, T * C)


class TermUnits(NamedTuple):
    """The shrinkage grid and the fixed-point units of the terms (:mod:`.units`)."""

    grid: np.ndarray
    """(G,) float64: the λ values."""
    scale: float
    """2^-scale_bits: a residual sum's unit."""
    loss: float
    """2^loss_bits: the cross-fit terms' grid."""
    mean: float
    """2^MEAN_BITS: the probe terms' means."""
    square: float
    """2^square_bits: the probe terms' squared norms."""
    norm: float
    """:func:`.units.norm_unit`: the probes' norm terms."""


@lru_cache(maxsize=64)
def term_units(grid: tuple[float, ...], scale_bits: int, n_tables: int) -> TermUnits:
    """The units of tables with this grid, scale and number of tables (one object per
    combination: the kernels only read it)."""
    return TermUnits(
        np.asarray(grid, dtype=np.float64),
        2.0**-scale_bits,
        2.0 ** loss_bits(scale_bits),
        2.0**MEAN_BITS,
        2.0 ** square_bits(scale_bits),
        norm_unit(n_tables, scale_bits),
    )


class ProbeArrays(NamedTuple):
    """The probes as the compiled update reads and changes them."""

    start: np.ndarray
    """(2·T·C + 1,) int64: the entries of fold-qualified cell q are start[q]:start[q + 1]."""
    probe_of: np.ndarray
    """(entries,) int64: each entry's probe."""
    records: np.ndarray
    """(m, W) int64: probe p's sums λ by λ (entry g·(k + 1) + j is the probe sums' [g, p, j]),
    then its norm terms (content.tables.probes.ProbeNorms)."""
    folds: np.ndarray
    """(m,) int64: each probe's own fold."""
    terms: np.ndarray
    """(m, G) float64 view of the records' norm terms (integers), kept current."""


class ProbeIndex(NamedTuple):
    """Which probes sit in each fold-qualified cell (the first two fields of
    :class:`ProbeArrays`): what the compiled bulk refresh reads."""

    start: np.ndarray
    """(2·T·C + 1,) int64: the entries of fold-qualified cell q are start[q]:start[q + 1]."""
    probe_of: np.ndarray
    """(entries,) int64: each entry's probe."""


class RowChange(NamedTuple):
    """Rows added to or subtracted from the tables, as a compiled update reads them."""

    codes: np.ndarray
    """(n, T) uint: each row's cell in every table."""
    folds: np.ndarray
    """(n,) uint8: each row's fold, 0 or 1."""
    values: np.ndarray
    """(n, k) int64: each row's fixed-point residuals."""
    negate: bool
    """Whether the rows are subtracted (a forget) rather than added."""


class UpdateDeltas(NamedTuple):
    """What a compiled update changed, new − old (int64, wrapping like numpy's)."""

    cross: np.ndarray
    """(G,): the cross-fit totals."""
    square: np.ndarray
    """(G,): the square totals."""
    norm: np.ndarray
    """(2, G): per probe fold, Σ of the changed probes' norm terms."""
    last: np.ndarray
    """(2, G): per probe fold, Σ of the changed probes' last column (Σ_t ‖μ_t‖²)."""

    @classmethod
    def empty(cls, n_grid: int) -> UpdateDeltas:
        G = n_grid
        return cls(
            np.zeros(G, np.int64),
            np.zeros(G, np.int64),
            np.zeros((2, G), np.int64),
            np.zeros((2, G), np.int64),
        )
