"""The forest's bin grid: per-feature edges from the D° rows only, and the uint8 codes of
any rows on it.

The grid depends on D° alone (SPEC §5.3-4), so forgetting or inserting a D• row never moves
an edge; a change to D° refits the forest. Finite values get codes 0..nbins-1 (a value v
falls in the first bin whose upper edge is >= v); NaN gets its own code, nbins, one past
the finite ones, so a split ``code <= t`` with t = nbins - 1 separates the missing values.
"""

from __future__ import annotations

import numpy as np

MAX_BINS = 255
"""Finite bins per feature at most (codes 0..254; the NaN code is at most 255)."""


def bin_edges(X_pool: np.ndarray, max_bins: int) -> list[np.ndarray]:
    """Edges per feature from the D° rows ``X_pool``: midpoints between the distinct finite
    values when there are at most ``max_bins`` of them, else midpoint quantiles."""
    edges = []
    for f in range(X_pool.shape[1]):
        col = X_pool[:, f].astype(np.float64)
        values = np.unique(col[np.isfinite(col)])
        if values.size <= max_bins:
            cut = (values[:-1] + values[1:]) / 2.0
        else:
            q = np.linspace(0.0, 100.0, max_bins + 1)[1:-1]
            cut = np.unique(np.percentile(col[np.isfinite(col)], q, method="midpoint"))
        edges.append(np.ascontiguousarray(cut, dtype=np.float64))
    return edges


def n_bins(edges: list[np.ndarray]) -> np.ndarray:
    """Finite bins per feature (the NaN code of feature f is ``n_bins[f]``)."""
    return np.array([e.size + 1 for e in edges], dtype=np.int32)


def encode(X: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    """The (n, d) uint8 codes of rows ``X`` on the grid."""
    codes = np.empty(X.shape, dtype=np.uint8)
    for f, cut in enumerate(edges):
        col = X[:, f].astype(np.float64)
        c = np.searchsorted(cut, col, side="left")
        c[np.isnan(col)] = cut.size + 1
        codes[:, f] = c
    return codes
