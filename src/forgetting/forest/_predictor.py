"""Prediction: rows' bin codes on the grid, and the mean of the leaves they reach.

Why a module of its own: serving reads the trees and changes nothing — it is all that runs
between forgets on a model that only predicts. A prediction reads built trees only: the
caller first builds the stale nodes on the rows' paths (:func:`._stale.flush_rows`, or all
of them: :func:`._stale.flush_tree`).
"""

from __future__ import annotations

import numpy as np

from ._arrays import P_CLASSES, P_REGRESSION, jit


@jit
def leaf_of(A, t, code_row):
    """The leaf of tree t that a row with these bin codes falls in."""
    v = A.roots[t]
    while A.feat[v] >= 0:
        if code_row[A.feat[v]] <= A.thr[v]:
            v = A.left[v]
        else:
            v = A.right[v]
    return v


@jit
def predict(A, codes):
    """Mean over trees of each leaf's class distribution counts / n (trees summed in
    order); regression: of each leaf's mean quantized target, one column."""
    k = A.params[P_CLASSES]
    T = A.roots.shape[0]
    if A.params[P_REGRESSION] == 1:
        mean = np.zeros((codes.shape[0], 1), np.float64)
        for i in range(codes.shape[0]):
            for t in range(T):
                v = leaf_of(A, t, codes[i])
                mean[i, 0] += A.counts[v, 1] / A.n[v]
            mean[i, 0] /= T
        return mean
    out = np.zeros((codes.shape[0], k), np.float64)
    for i in range(codes.shape[0]):
        for t in range(T):
            v = leaf_of(A, t, codes[i])
            inv = A.n[v]
            for c in range(k):
                out[i, c] += A.counts[v, c] / inv
        for c in range(k):
            out[i, c] /= T
    return out


@jit
def encode(X, edges, n_edges):
    """Bin codes of rows X on padded edges (d, max) with n_edges per feature: the compiled
    twin of :func:`forgetting.forest.binning.encode` (the first edge >= the value; NaN ->
    n_edges + 1)."""
    n, d = X.shape
    out = np.empty((n, d), np.uint8)
    for i in range(n):
        for f in range(d):
            x = np.float64(X[i, f])
            m = n_edges[f]
            if np.isnan(x):
                out[i, f] = m + 1
                continue
            lo, hi = 0, m
            while lo < hi:
                mid = (lo + hi) // 2
                if edges[f, mid] < x:
                    lo = mid + 1
                else:
                    hi = mid
            out[i, f] = lo
    return out
