"""The shared machinery of the flat partitions: :class:`ThresholdPartition` (threshold tests
on exact linear maps of the features), its exact evaluator, and the helpers the families draw
their structure with. Why exact arithmetic: see the package docstring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from ..._rowwise import kept_for
from ...content.kernels import SCHEMA_KERNELS

GRID_BITS = 20
"""Features enter on a grid of 2^-20, like the codebook's."""
INPUT_LIMIT = 2.0**21
"""Grid values are clipped to ±2^21 (features of magnitude ≤ 2; φ's rows have unit norm)."""
_EXACT_BITS = 52
"""Every product and partial sum of a projection stays below 2^52 in magnitude."""


class Partition(Protocol):
    """What the content and the predict path need from a partition."""

    @property
    def n_tables(self) -> int: ...

    @property
    def n_cells(self) -> int: ...

    def cells(self, Z: np.ndarray) -> np.ndarray:
        """(n, T) integer cell codes in ``0..n_cells-1``; row i's codes depend on row i only."""
        ...


def to_grid(Z: np.ndarray) -> np.ndarray:
    """Features on the fixed-point grid: integer-valued float64, clipped to ±2^21."""
    grid = np.multiply(np.asarray(Z, dtype=np.float64), 2.0**GRID_BITS)
    np.rint(grid, out=grid)
    return np.clip(grid, -INPUT_LIMIT, INPUT_LIMIT, out=grid)


def weight_bits(n_inputs: int, input_limit: float) -> int:
    """Grid bits of a weight matrix with entries in [-1, 1] applied to ``n_inputs`` values of
    magnitude ≤ ``input_limit``, such that every partial sum stays below 2^52."""
    headroom = _EXACT_BITS - int(np.ceil(np.log2(input_limit))) - int(np.ceil(np.log2(n_inputs)))
    if headroom < 8:
        raise ValueError(f"{n_inputs} inputs leave too few bits for an exact projection")
    return headroom


@dataclass(frozen=True)
class ExactLinear:
    """y = clip(rint(2^-shift · W (x − c)), ±2^21): an exact affine map between grids.

    ``weights`` (P, d) and ``center`` (d,) are integer-valued float64 (the weights on a grid
    of 2^-weight_bits, the center on the input grid); ``shift`` brings the integer products
    back onto a grid where D°'s outputs are below 2^20, so a following stage can be exact too.
    Rows far outside D°'s range are clipped — deterministically, which is all exactness needs.
    """

    weights: np.ndarray
    center: np.ndarray
    shift: int

    def apply(self, Xg: np.ndarray) -> np.ndarray:
        """Map grid rows (n, d) to grid rows (n, P); exact, so independent of the batch."""
        centered = Xg - self.center  # |·| ≤ 2^22, exact
        Y = centered @ self.weights.T  # integers below 2^52 in magnitude: exact in any order
        Y = np.ldexp(Y, -self.shift)
        np.rint(Y, out=Y)
        return np.clip(Y, -INPUT_LIMIT, INPUT_LIMIT, out=Y)


def fit_linear(W: np.ndarray, center_grid: np.ndarray, X_fit_grid: np.ndarray) -> ExactLinear:
    """Quantize the float map ``W`` (P, d) for inputs centered at ``center_grid`` (grid units).

    ``X_fit_grid`` (D° on the input grid) sets the output shift so its outputs land below
    2^20 (headroom for rows beyond D°'s range before clipping).
    """
    W = np.asarray(W, dtype=np.float64)
    scale = float(np.max(np.abs(W))) if W.size else 1.0
    scale = scale if scale > 0.0 else 1.0
    bits = weight_bits(W.shape[1], 2.0 * INPUT_LIMIT)
    Wg = np.rint(np.ldexp(W / scale, bits))
    center = np.asarray(center_grid, dtype=np.float64)
    Y = (X_fit_grid - center) @ Wg.T
    peak = float(np.max(np.abs(Y))) if Y.size else 0.0
    shift = max(0, int(np.ceil(np.log2(peak))) - GRID_BITS) if peak > 0.0 else 0
    return ExactLinear(weights=Wg, center=center, shift=shift)


@dataclass(frozen=True)
class ThresholdPartition:
    """T tables of D threshold tests on the output of exact linear stages.

    ``stage1`` and ``stage2`` are optional :class:`ExactLinear` maps applied in turn to the
    gridded features (None: identity). Bit ``l`` of a row's cell in table ``t`` is
    ``y[features[t, l]] > thresholds[t, l]`` where ``y`` is the last stage's output; the
    thresholds are integer-valued float64 in that output's grid units.
    """

    features: np.ndarray
    thresholds: np.ndarray
    stage1: ExactLinear | None = None
    stage2: ExactLinear | None = None

    @property
    def n_tables(self) -> int:
        return int(self.features.shape[0])

    @property
    def depth(self) -> int:
        return int(self.features.shape[1])

    @property
    def n_cells(self) -> int:
        return 1 << self.depth

    @property
    def cell_dtype(self) -> np.dtype:
        return np.dtype(np.uint16) if self.depth <= 16 else np.dtype(np.uint32)

    def project(self, Z: np.ndarray) -> np.ndarray:
        """The last stage's output (n, P) on its grid (exact)."""
        Y = to_grid(Z)
        for stage in (self.stage1, self.stage2):
            if stage is not None:
                Y = stage.apply(Y)
        return Y

    def cells(self, Z: np.ndarray) -> np.ndarray:
        """(n, T) cell codes of rows ``Z`` (n, d); each row's codes depend on that row only."""
        n = Z.shape[0]
        out = np.empty((n, self.n_tables), dtype=self.cell_dtype)
        kernels = SCHEMA_KERNELS.get(n * self.n_tables)
        if kernels is not None and n <= _FEW_ROWS and self._few_codes(kernels, Z, out):
            return out
        features = np.ascontiguousarray(self.features, dtype=np.int64)
        thresholds = np.ascontiguousarray(self.thresholds, dtype=np.float64)
        for start in range(0, n, _CHUNK_ROWS):
            Y = self.project(Z[start : start + _CHUNK_ROWS])
            if kernels is not None and kernels.threshold_codes(
                np.ascontiguousarray(Y, dtype=np.float64),
                features,
                thresholds,
                out[start : start + _CHUNK_ROWS],
            ):
                continue
            out[start : start + _CHUNK_ROWS] = self._codes_numpy(Y)
        return out

    def _few_codes(self, kernels, Z, out: np.ndarray) -> bool:
        """The codes of a few rows in one compiled call (``partition_codes``: the grid, the
        stages and the tests row by row, exact integers — the same codes), False when the
        kernel declines (then the general route decides)."""
        kept = kept_for(self)
        args = kept.get("partition_codes")
        if args is None:
            args = kept["partition_codes"] = self._few_codes_args()
        return kernels.partition_codes(np.ascontiguousarray(Z, dtype=np.float64), *args, out)

    def _few_codes_args(self) -> tuple:
        """What ``partition_codes`` takes besides the rows (:class:`FewCodesArgs`, its
        bundles as plain tuples): built once per partition and kept by its identity, outside
        it (``_rowwise.kept_for``: its attributes are its digest); the fields never change,
        so a one-row encode does not build them again."""
        stages = [s for s in (self.stage1, self.stage2) if s is not None]
        parts = [
            (np.zeros((0, 0)), np.zeros(0), 1.0)
            if stage is None
            else (
                np.ascontiguousarray(stage.weights, dtype=np.float64),
                np.ascontiguousarray(stage.center, dtype=np.float64),
                2.0**-stage.shift,
            )
            for stage in stages + [None] * (2 - len(stages))
        ]
        return tuple(
            FewCodesArgs(
                grid=(2.0**GRID_BITS, INPUT_LIMIT, len(stages)),
                stage1=parts[0],
                stage2=parts[1],
                tests=(
                    np.ascontiguousarray(self.features, dtype=np.int64),
                    np.ascontiguousarray(self.thresholds, dtype=np.float64),
                ),
            )
        )

    def _codes_numpy(self, Y: np.ndarray) -> np.ndarray:
        """The threshold tests on projected rows ``Y`` in numpy (the definition the compiled
        kernel, :func:`forgetting.schema._kernels.threshold_codes`, reproduces)."""
        codes = np.zeros((Y.shape[0], self.n_tables), dtype=np.int64)
        for level in range(self.depth):
            bit = Y[:, self.features[:, level]] > self.thresholds[:, level]
            codes |= bit.astype(np.int64) << level
        return codes


class FewCodesArgs(NamedTuple):
    """What the compiled ``partition_codes`` (schema._kernels) takes besides the rows and its
    output, each field a plain tuple (the kernel's dispatcher types those in C)."""

    grid: tuple[float, float, int]
    """(2^GRID_BITS, INPUT_LIMIT, the number of stages: 0, 1 or 2)."""
    stage1: tuple[np.ndarray, np.ndarray, float]
    """The first exact stage: (weights (P, d) float64, center (d,) float64, 2^-shift); empty
    arrays and 1.0 when unused."""
    stage2: tuple[np.ndarray, np.ndarray, float]
    """The second, likewise."""
    tests: tuple[np.ndarray, np.ndarray]
    """(features (T, D) int64, thresholds (T, D) float64): the cells' threshold tests."""


_CHUNK_ROWS = 8192
_FEW_ROWS = 64
"""Rows up to which :meth:`ThresholdPartition.cells` runs the one-call compiled route (the
rows of a prediction or of a forget); beyond, the stages' products go to BLAS."""


def pca_directions(Xg: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray]:
    """Top principal directions (P, d) of grid rows ``Xg`` scaled to unit variance, and the
    (integer) grid mean. Whitening makes every output coordinate equally spread, so random
    directions and thresholds in that space are not dominated by the first component."""
    center = np.rint(Xg.mean(axis=0))
    centered = Xg - center
    _, s, Vt = np.linalg.svd(centered, full_matrices=False)
    P = int(min(n_components, Vt.shape[0], np.count_nonzero(s > s[0] * 1e-6) if s.size else 0))
    P = max(P, 1)
    sd = s[:P] / np.sqrt(max(Xg.shape[0] - 1, 1))
    sd[sd == 0.0] = 1.0
    return Vt[:P] / sd[:, None], center


def random_thresholds(
    Y_fit: np.ndarray, features: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """For each test, the tested coordinate's value in a random D° row (grid units)."""
    rows = rng.integers(0, Y_fit.shape[0], size=features.shape)
    return Y_fit[rows, features].astype(np.float64)


def choose_depth(n_schema: int, rho: float, rows_per_cell: float, max_depth: int = 14) -> int:
    """Depth D with ≥ ``rows_per_cell`` expected rows per cell, from D° and ρ only.

    The expected row count n ≈ n°/ρ is a function of D° and the configuration, never of D•
    (design.md §5.4), so the shape of the accumulators is fixed by the schema.
    """
    expected = max(n_schema / max(rho, 1e-12), 2.0)
    depth = int(np.floor(np.log2(max(expected / rows_per_cell, 2.0))))
    return int(min(max(depth, 1), max_depth))


__all__ = [
    "ExactLinear",
    "Partition",
    "ThresholdPartition",
    "choose_depth",
    "fit_linear",
    "pca_directions",
    "random_thresholds",
    "to_grid",
]
