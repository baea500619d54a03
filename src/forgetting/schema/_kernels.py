"""The schema's compiled kernels: the cells of a few rows under a flat partition or an RQ
codebook, and serving's φ and g (schema.partitions, schema.codebook, schema.serving).

Imported only through :mod:`forgetting.content.kernels` (``SCHEMA_KERNELS``: numba is never
imported by ``import forgetting``). ``cache=True`` keeps the machine code on disk beside this
file; ``nogil=True`` lets a background rebuild run while the serving thread answers. Each
kernel computes exactly what the numpy route beside its caller computes — exact integer
arithmetic, or the same float operations in the same order — and declines (returns False)
where that route must decide; tests/test_table_kernels.py, test_partitions.py,
test_codebook.py and test_serving.py compare the two.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _features_valid(features, P) -> bool:
    """Every tested feature index lies in 0..P−1 (numpy would wrap or raise otherwise)."""
    for t in range(features.shape[0]):
        for level in range(features.shape[1]):
            f = features[t, level]
            if f < 0 or f >= P:
                return False
    return True


@numba.njit(cache=True, nogil=True)
def threshold_codes(Y, features, thresholds, out) -> bool:
    """out[i, t] = Σ_l [Y[i, features[t, l]] > thresholds[t, l]] · 2^l.

    The comparisons of ``ThresholdPartition.cells`` on its projected rows, 256 rows at a
    time: the block is transposed into a (P, 256) scratch first, so each level's test runs
    over a contiguous column of the block and compiles to vector compares (where testing one
    row at a time does not). False, with ``out`` untouched, when a feature index lies
    outside ``0..P-1`` (numpy would wrap or raise).
    """
    n, P = Y.shape
    T, D = features.shape
    if not _features_valid(features, P):
        return False
    block = 256
    columns = np.empty((P, block), dtype=Y.dtype)
    code = np.empty(block, dtype=np.int64)
    for start in range(0, n, block):
        m = min(n, start + block) - start
        for i in range(m):
            for p in range(P):
                columns[p, i] = Y[start + i, p]
        for t in range(T):
            for i in range(m):
                code[i] = 0
            for level in range(D):
                column = columns[features[t, level]]
                threshold = thresholds[t, level]
                for i in range(m):
                    code[i] |= np.int64(column[i] > threshold) << level
            for i in range(m):
                out[start + i, t] = code[i]
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def _exact_stage(x, W, center, down, limit, y) -> None:
    """y = clip(rint(down · W (x − center)), ±limit): ``ExactLinear.apply`` on one grid row.
    Every product and partial sum is an integer below 2^52 (the stage's construction), so
    this loop's order gives BLAS's sums exactly; ``down`` = 2^-shift scales exactly."""
    for p in range(W.shape[0]):
        acc = 0.0
        for j in range(x.shape[0]):
            acc += (x[j] - center[j]) * W[p, j]
        y[p] = min(max(np.rint(acc * down), -limit), limit)


@numba.njit(cache=True, nogil=True)
def partition_codes(Z, grid, stage1, stage2, tests, out) -> bool:
    """``ThresholdPartition.cells`` of a few rows ``Z`` in one call: the grid (rint(Z ·
    2^GRID_BITS) clipped to ±limit), 0, 1 or 2 exact linear stages, then the threshold tests
    — one row at a time, where the numpy route makes ~15 small calls per row (most of a
    one-row prediction's encode, per instance). Exact integer arithmetic throughout, so the
    same codes as the numpy route and :func:`threshold_codes`.

    IN: ``Z`` (n, d) float64 rows; the partition's bundles
    (:class:`forgetting.schema.partitions.base.FewCodesArgs`, as plain tuples):
    ``grid`` = (scale 2^GRID_BITS, limit, stages used); ``stage1``, ``stage2`` = (weights
    (P, d_in), center (d_in,), down 2^-shift) each, empty arrays for an unused stage;
    ``tests`` = (features (T, D) int64, thresholds (T, D) float64).
    OUT: ``out`` (n, T) the cell codes.
    Returns False when a feature index is outside the last stage's output or a feature is
    not finite (the caller then computes every row the general way)."""
    grid_scale, limit, stages = grid
    W1, c1, down1 = stage1
    W2, c2, down2 = stage2
    features, thresholds = tests
    n, d = Z.shape
    P = d if stages == 0 else (W1.shape[0] if stages == 1 else W2.shape[0])
    T, D = features.shape
    if not _features_valid(features, P):
        return False
    x = np.empty(d)
    y1 = np.empty(W1.shape[0])
    y2 = np.empty(W2.shape[0])
    for i in range(n):
        for j in range(d):
            if not np.isfinite(Z[i, j]):
                return False  # numpy's clip keeps a NaN; let the numpy route decide
            x[j] = min(max(np.rint(Z[i, j] * grid_scale), -limit), limit)
        y = x
        if stages >= 1:
            _exact_stage(x, W1, c1, down1, limit, y1)
            y = y1
        if stages == 2:
            _exact_stage(y1, W2, c2, down2, limit, y2)
            y = y2
        for t in range(T):
            code = np.int64(0)
            for level in range(D):
                code |= np.int64(y[features[t, level]] > thresholds[t, level]) << level
            out[i, t] = code
    return True


_CODEBOOK_LIMIT = 2.0**51
"""What :func:`codebook_codes` accepts: ‖r‖·max‖c‖·2 + max‖c‖² below this — half the numpy
encoder's bound (schema.codebook: 2^52, where it raises), so a row the kernel accepts is one
the numpy encoder accepts too, whatever the rounding of either's norm; the rest go to numpy."""


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
def codebook_codes(residual, centroids, sq_norms, max_norm, codes) -> bool:
    """``Codebook.encode`` of a few rows whose grid values (integer-valued float64, from
    ``to_grid``) are ``residual`` (n, d), overwritten by their final residuals: per level the
    exact argmin of ‖c‖² − 2⟨r, c⟩ over the level's centroids (the lowest index on ties),
    then r −= c. The numpy encoder takes a float32 product and certifies its winner, or
    recomputes near-ties exactly (schema.codebook): in both cases the exact argmin with the
    lowest index on ties, which this computes directly.

    Exact: every value is an integer; with the bound checked here (:data:`_CODEBOOK_LIMIT`)
    every product r_j·c_j and every partial sum of ⟨r, c⟩ lies below ‖r‖·‖c‖ < 2^50 in
    magnitude (Cauchy–Schwarz on |r|, |c|), and ‖c‖² − 2⟨r, c⟩ below 2^52, so float64
    holds each exactly in any summation order — hence the fast-math flags, which only let
    LLVM reorder and fuse those sums into vector instructions. ``sq_norms`` (ℓ, b) are the
    exact ‖c‖² and ``max_norm`` (ℓ,) the largest ‖c‖ per level (Codebook._search_tables).
    False, with ``codes`` unspecified, for a row outside the bound or not finite: the numpy
    encoder then decides (and raises where it must)."""
    n, d = residual.shape
    n_levels, b, _ = centroids.shape
    for i in range(n):
        r = residual[i]
        for level in range(n_levels):
            norm2 = 0.0
            for j in range(d):
                norm2 += r[j] * r[j]
            if not np.isfinite(norm2):
                return False
            top = 0.0
            for c in range(b):
                top = max(top, sq_norms[level, c])
            if np.sqrt(norm2) * max_norm[level] * 2.0 + top >= _CODEBOOK_LIMIT:
                return False
            best = 0
            best_dist = np.inf
            for c in range(b):
                centroid = centroids[level, c]
                dot = 0.0
                for j in range(d):
                    dot += r[j] * centroid[j]
                dist = sq_norms[level, c] - 2.0 * dot
                if dist < best_dist:
                    best_dist = dist
                    best = c
            codes[i, level] = best
            centroid = centroids[level, best]
            for j in range(d):
                r[j] -= centroid[j]
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy")
def serve_normalize(X, out) -> None:
    """Serving's L2 normalization of rows ``X`` (n, d ≥ 1) into ``out``: per row the sum of
    squares left to right (first term, then each next one added: ``np.add.accumulate``'s
    order), its square root (1 for an all-zero row), each entry divided by it —
    schema.serving's numpy definition, operation for operation (no fused multiply-add)."""
    n, d = X.shape
    for i in range(n):
        sq = X[i, 0] * X[i, 0]
        for j in range(1, d):
            sq += X[i, j] * X[i, j]
        norm = np.sqrt(sq)
        if norm == 0.0:
            norm = 1.0
        for j in range(d):
            out[i, j] = X[i, j] / norm


@numba.njit(cache=True, nogil=True, error_model="numpy")
def serve_scores(U, P, coef, b, phi, scores) -> None:
    """φ and the logistic scores of serving-normalized rows ``U`` (n, d) under s schemas at
    once: schema r's LDA directions ``P[r]`` (d, e; e = 0: no LDA, φ is u itself), its g's
    coef_ᵀ ``coef[r]`` (d + e, k) and intercept ``b[r]`` (k,), into ``phi`` (s, n, d + e) and
    ``scores`` (s, n, k). With LDA, t = u P, φ = [u, t] / ‖[u, t]‖; then scores = φ coef + b.
    Every sum runs left to right from its first term (``np.add.accumulate``'s order: the
    numpy definition in schema.serving), so each output depends on its own row and schema
    only — the same bits alone or in any batch, under one schema or several."""
    s = coef.shape[0]
    n, d = U.shape
    e = P.shape[2]
    D = d + e
    k = coef.shape[2]
    t = np.empty(max(e, 1))
    acc = np.empty(k)
    for r in range(s):
        for i in range(n):
            if e == 0:
                for j in range(d):
                    phi[r, i, j] = U[i, j]
            else:
                u0 = U[i, 0]
                for c in range(e):
                    t[c] = u0 * P[r, 0, c]
                for j in range(1, d):
                    uj = U[i, j]
                    for c in range(e):
                        t[c] += uj * P[r, j, c]
                sq = U[i, 0] * U[i, 0]
                for j in range(1, d):
                    sq += U[i, j] * U[i, j]
                for c in range(e):
                    sq += t[c] * t[c]
                norm = np.sqrt(sq)
                if norm == 0.0:
                    norm = 1.0
                for j in range(d):
                    phi[r, i, j] = U[i, j] / norm
                for c in range(e):
                    phi[r, i, d + c] = t[c] / norm
            f0 = phi[r, i, 0]
            for c in range(k):
                acc[c] = f0 * coef[r, 0, c]
            for j in range(1, D):
                f = phi[r, i, j]
                for c in range(k):
                    acc[c] += f * coef[r, j, c]
            for c in range(k):
                scores[r, i, c] = acc[c] + b[r, c]
