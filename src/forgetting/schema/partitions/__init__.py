"""Flat partitions: many random tables of cells, their structure learned from D° only.

The RQ codebook (:mod:`..codebook`) is one way to cut the feature space into cells; design.md §5.8
lets us choose another as long as the structure depends on D° (and the seed) only. A flat
partition is ``T`` independent tables, each cutting the space into ``2^D`` cells by ``D``
threshold tests; every row falls into exactly one cell per table, and the content is the
residual sum and count of every cell (:mod:`forgetting.content.tables`). Two families:

* :mod:`.trees` — random *oblivious trees*: each level tests one random coordinate against
  the value of that coordinate in a random D° row (cheap, low-variance choices that need few
  D° rows);
* :mod:`.hyperplanes` — random hyperplane hashes: each bit is the side of a random direction
  (in D°-standardized or D°-PCA-whitened coordinates) on which the row falls, offset at a
  random D° row.

Both are threshold tests on exact linear maps of the features, so they share one
representation, :class:`ThresholdPartition`, and one exact evaluator.

Why exact arithmetic: a row's cells must be a pure function of the row — the same bits
whether it is encoded alone, in a batch or during a refit — or a refit would file rows in
other cells than the deletion path subtracts them from. Features are therefore put on a
fixed-point grid (2^-20), every projection matrix on a grid too, and each projection is
computed in float64 on integer values small enough that every product and every partial sum
is an exactly representable integer (< 2^53): the result does not depend on the order of the
summation, the BLAS kernel, the batch shape or the thread count. The comparisons with
thresholds are then exact. Nothing is stored per row beyond the cell codes.
"""

from __future__ import annotations

import numpy as np

from .base import (
    ExactLinear,
    Partition,
    ThresholdPartition,
    choose_depth,
    fit_linear,
    pca_directions,
    random_thresholds,
    to_grid,
)
from .hyperplanes import fit_hyperplanes
from .trees import fit_trees

__all__ = [
    "KINDS",
    "N_TABLES",
    "ExactLinear",
    "Partition",
    "ThresholdPartition",
    "choose_depth",
    "fit_linear",
    "fit_partition",
    "partition_depth",
    "pca_directions",
    "random_thresholds",
    "to_grid",
]


# --------------------------------------------------------------------------- defaults

KINDS = ("trees", "hyperplanes")
N_TABLES = 64
"""Tables per instance: accuracy still rose from 32 to 64 (benchmarks/results/partitions.md);
each table costs a cell update per deletion and 2·k int64 per cell of memory."""
ROWS_PER_CELL = 2.0
"""Expected rows per cell setting the depth (deep, sparse tables with shrinkage won on every
validation split measured; see benchmarks/results/partitions.md)."""
MAX_DEPTH = 12
MAX_TABLE_ENTRIES = 1 << 22
"""T · 2^D · k stays below this (≤ 64 MiB of int64 sums for both folds per instance)."""
PROJECTION = {"trees": "none", "hyperplanes": "standardize"}


def partition_depth(n_schema: int, rho: float, n_tables: int, n_outputs: int) -> int:
    """Depth from D° and ρ (:func:`choose_depth`), capped by :data:`MAX_DEPTH` and memory."""
    depth = choose_depth(n_schema, rho, ROWS_PER_CELL, MAX_DEPTH)
    budget = MAX_TABLE_ENTRIES // max(n_tables * n_outputs, 1)
    return int(max(1, min(depth, budget.bit_length() - 1)))


def fit_partition(
    kind: str, Z_fit: np.ndarray, n_schema: int, rho: float, n_outputs: int, seed: int
) -> ThresholdPartition:
    """The default flat partition of ``kind`` drawn from the rows ``Z_fit`` (D°, or label
    mode's pool); its shape depends on D°'s size, ρ and k only."""
    if kind not in KINDS:
        raise ValueError(f"partition must be one of {KINDS}, got {kind!r}")
    depth = partition_depth(n_schema, rho, N_TABLES, n_outputs)
    fit = fit_trees if kind == "trees" else fit_hyperplanes
    return fit(Z_fit, N_TABLES, depth, seed, PROJECTION[kind])
