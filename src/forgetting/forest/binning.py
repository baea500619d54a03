"""The forest's bin grid: per-feature edges from the D° rows only, and the uint8 codes of
any rows on it.

The grid depends on D° alone (SPEC §5.3-4), so forgetting or inserting a D• row never moves
an edge; a change to D° refits the forest. Finite values get codes 0..nbins-1 (a value v
falls in the first bin whose upper edge is >= v); NaN gets its own code, nbins, one past
the finite ones, so a split ``code <= t`` with t = nbins - 1 separates the missing values.

The grid is a function of D°'s values, not of their bytes or order: −0.0 and +0.0 (equal,
but a sort puts either first, so a midpoint quantile may average either) give the edge
+0.0, and every NaN is one missing value. Its digest hashes the edges' bytes, so this is
what makes two forests that predict alike by construction digest alike (issue 73).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..rows.hashing import canonical_floats

MAX_BINS = 255
"""Finite bins per feature at most (codes 0..254; the NaN code is at most 255)."""


def bin_edges(X_pool: np.ndarray, max_bins: int) -> list[np.ndarray]:
    """Edges per feature from the D° rows ``X_pool``: midpoints between the distinct finite
    values when there are at most ``max_bins`` of them, else midpoint quantiles; a zero
    edge is +0.0."""
    edges = []
    for f in range(X_pool.shape[1]):
        col = canonical_floats(X_pool[:, f]).astype(np.float64)
        values = np.unique(col[np.isfinite(col)])
        if values.size <= max_bins:
            cut = (values[:-1] + values[1:]) / 2.0
        else:
            q = np.linspace(0.0, 100.0, max_bins + 1)[1:-1]
            cut = np.unique(np.percentile(col[np.isfinite(col)], q, method="midpoint"))
        edges.append(np.ascontiguousarray(canonical_floats(cut), dtype=np.float64))
    return edges


def n_bins(edges: list[np.ndarray]) -> np.ndarray:
    """Finite bins per feature (the NaN code of feature f is ``n_bins[f]``)."""
    return np.array([e.size + 1 for e in edges], dtype=np.int32)


def encode(X: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    """The (n, d) uint8 codes of rows ``X`` on the grid."""
    codes = np.empty(X.shape, dtype=np.uint8)
    for f, cut in enumerate(edges):
        col = canonical_floats(X[:, f]).astype(np.float64)
        c = np.searchsorted(cut, col, side="left")
        c[np.isnan(col)] = cut.size + 1
        codes[:, f] = c
    return codes


@dataclass(frozen=True)
class Grid:
    """A forest's grid, as its fit and its kernels use it."""

    edges: list[np.ndarray]
    """Per feature, its edges (float64, increasing)."""
    nbins: np.ndarray
    """(d,) int32 finite bins per feature."""
    table: np.ndarray
    """(d, max edges) float64: the edges padded with +inf (the compiled encoder's input)."""
    n_edges: np.ndarray
    """(d,) int64 edges per feature."""
    y_lo: float | None
    """Regression: the target grid's level 0 (None for classification)."""
    y_step: float | None
    """Regression: the target grid's step."""
    digest: bytes
    """SHA-256 over the target grid and every feature's edges."""


def grid(
    X_pool: np.ndarray, max_bins: int, y_pool: np.ndarray | None = None, levels: int = 0
) -> Grid:
    """The grid of D°'s features ``X_pool`` (and, for regression, of its targets ``y_pool``
    on ``levels`` levels: D°'s range widened by half of it on each side)."""
    edges = bin_edges(X_pool, max_bins)
    nb = n_bins(edges)
    table = np.full((len(edges), max(1, int(nb.max()) - 1)), np.inf)
    for f, e in enumerate(edges):
        table[f, : e.size] = e
    h = hashlib.sha256()
    y_lo = y_step = None
    if y_pool is not None:
        lo, hi = float(y_pool.min()), float(y_pool.max())
        width = hi - lo if hi > lo else 1.0
        y_lo, y_step = lo - 0.5 * width + 0.0, 2.0 * width / (levels - 1)
        h.update(np.array([y_lo, y_step]).tobytes())
    for e in edges:
        h.update(np.int64(e.size).tobytes())
        h.update(e.tobytes())
    return Grid(edges, nb, table, (nb - 1).astype(np.int64), y_lo, y_step, h.digest())
