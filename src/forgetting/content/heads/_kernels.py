"""Compiled pieces of the ridge heads' hot paths: the finishing pass of the "shared-rf" head's
fixed-point features (schema.random_features.RandomFeatures.fixed_point_into) and a one-row
change of a head's integer sums (content.heads.linear.LinearHead._update_one).

Why compiled: after the one matrix product, the features are five elementwise steps on ψ and
one on u, written into the columns of an (n, d + E + 1) array. numpy runs an elementwise step
on such a column block as one inner loop per row, several times slower than the same step on
a contiguous array, so the composed form spent much of a batch forget there. One compiled
pass writes each row once.

The same bits as numpy's steps: multiplying by a power of two is ``np.ldexp`` (both are the
exact product, rounded once when it is not representable), ``min(max(x, lo), hi)`` is
``np.clip``, and ``np.rint`` rounds half to even in both; tests/test_rf_head.py compares the
two paths. A one-row change is a (D, k) outer product, D squares and k Newton weights of
int64 values — a handful of small numpy calls per instance, one call here; int64 arithmetic
wraps in both, so the same integers (tests/test_head.py). Loaded like the table
kernels (content.kernels).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, error_model="numpy")
def fixed_point_rows(ui, P, down, unit, out) -> None:
    """out[i] = [clip(ui[i], ±unit), clip(rint(clip(P[i] · down, 0, 1) · unit), ±unit), unit]
    for ũ = ``ui`` (n, d) and the products ``P`` = ũ R̃ (n, E); ``down`` = 2^-(14 + b),
    ``unit`` = 2^14."""
    n, d = ui.shape
    E = P.shape[1]
    for i in range(n):
        row = out[i]
        for j in range(d):
            row[j] = min(max(ui[i, j], -unit), unit)
        for j in range(E):
            psi = min(max(P[i, j] * down, 0.0), 1.0)
            row[d + j] = min(max(np.rint(psi * unit), -unit), unit)
        row[d + E] = unit


@numba.njit(cache=True, nogil=True)
def one_row_sums(cross, diag, v, r, sign) -> None:
    """cross += sign · v rᵀ (D, k) and diag += sign · v² (D,), int64: the cross sums and the
    pending Gram diagonal of one row with features ``v`` (int64) and head targets ``r``."""
    for i in range(v.shape[0]):
        vi = v[i]
        diag[i] += sign * (vi * vi)
        for j in range(r.shape[0]):
            cross[i, j] += sign * (vi * r[j])


@numba.njit(cache=True, nogil=True)
def newton_weight_sums(weights, residuals, one, shift, sign) -> None:
    """weights += sign · Σ_rows content.heads.newton.newton_weights(residuals): per class
    (min(|r|, one) · (one − min(|r|, one)) + 2^(shift − 1)) >> shift, int64."""
    half = np.int64(1) << (shift - 1)
    for i in range(residuals.shape[0]):
        for j in range(residuals.shape[1]):
            a = min(abs(residuals[i, j]), one)
            weights[j] += sign * ((a * (one - a) + half) >> shift)


@numba.njit(cache=True, nogil=True)
def gram_floats(gram, scale, G, G0) -> None:
    """G = float64(gram[0] + gram[1]) · scale and G0 = float64(gram[0]) · scale, in one pass
    over the (2, D, D) int64 fold Grams: numpy's ``np.add(...).astype(np.float64)``, its
    ``astype`` and two in-place products are four passes over D² entries. The same
    operations on the same operands: an int64 add (wrapping alike), one rounding to float64,
    a product by a power of two (content.heads.gram.GramSystem.of)."""
    D = gram.shape[1]
    for i in range(D):
        for j in range(D):
            a = gram[0, i, j]
            G[i, j] = np.float64(a + gram[1, i, j]) * scale
            G0[i, j] = np.float64(a) * scale


@numba.njit(cache=True, nogil=True)
def gram_with_rows(gram, V, folds, signs, out) -> None:
    """out[f] = gram[f] + Σ_r signs[r] · V_r V_rᵀ over the rows r in fold f, int64: a copy of
    the (2, D, D) fold Grams with a few pending rows added, in one pass (not a copy, a
    one-row int64 product and an add per fold). Integer sums, exact in any order (and
    wrapping like numpy's), so the same integers as content.heads.gram.add_pending."""
    n, D = V.shape
    for f in range(2):
        for i in range(D):
            row = out[f, i]
            src = gram[f, i]
            for j in range(D):
                row[j] = src[j]
            for r in range(n):
                if folds[r] == f:
                    c = signs[r] * V[r, i]
                    for j in range(D):
                        row[j] += c * V[r, j]
