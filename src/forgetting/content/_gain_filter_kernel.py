"""Compiled row updates and gains of the gain filter (content.gain_filter).

Why compiled: per changed row the filter does ~10 small BLAS/numpy operations on (D, D) and
(D, 2m) arrays (D = 129, 2m = 60 at bench.core's shape) and then ~20 elementwise passes for
the gains; each call costs a few µs of Python and dispatch, ~75 µs per change in all, where
the arithmetic is ~110k flops. Fused loops do it in one pass per array. The results are not
bit-identical to the numpy path (another summation order) and need not be: the filter only
has to stay within its tolerance of the exact gain (content.gain_filter's docstring), which
tests/test_gain_filter.py checks for both paths. Loaded like the table kernels
(content.kernels.LazyKernel): FORGETTING_KERNELS=numpy keeps the numpy path.

Every array is in Fortran order (column-major): the inner loops run down a column.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, error_model="numpy")
def apply_row(Ainv, G0, X, Q, B, v, b, sigma, in0) -> None:
    """One row (features ``v``, right-hand-side row ``b``, sign ``sigma``, in fold 0 or not)
    applied to A⁻¹, G_0, X = A⁻¹B, Q = G_0 X and B (Sherman–Morrison; see
    content.gain_filter.GainFilter._apply for the algebra)."""
    D = v.shape[0]
    M = X.shape[1]
    u = np.zeros(D)
    for j in range(D):
        vj = v[j]
        for i in range(D):
            u[i] += Ainv[i, j] * vj
    vu = 0.0
    for i in range(D):
        vu += v[i] * u[i]
    s = 1.0 + sigma * vu
    w = np.zeros(D)
    for j in range(D):
        uj = u[j]
        for i in range(D):
            w[i] += G0[i, j] * uj
    for j in range(M):
        xv = 0.0
        for i in range(D):
            xv += v[i] * X[i, j]
        c = sigma / s * (b[j] - xv)
        after = sigma * (xv + vu * c)  # σ vᵀX' for the fold-0 term of Q
        bj = sigma * b[j]
        for i in range(D):
            B[i, j] += v[i] * bj
            X[i, j] += u[i] * c
            if in0:
                Q[i, j] += w[i] * c + v[i] * after
            else:
                Q[i, j] += w[i] * c
    if in0:
        for j in range(D):
            svj = sigma * v[j]
            for i in range(D):
                G0[i, j] += v[i] * svj
    f = -sigma / s
    for j in range(D):
        fu = f * u[j]
        for i in range(D):
            Ainv[i, j] += u[i] * fu


@numba.njit(cache=True, nogil=True, error_model="numpy")
def fold_scores(X, Q, B, lam):
    """content.gain_filter.fold_scores in one pass: per column j < m, the out-of-fold gain
    4·(⟨Y, H − 2H_0 + λY + QY⟩ + ⟨W − Y, H_0 − (QW − QY)⟩) and its scale Σ|terms|."""
    D = X.shape[0]
    m = X.shape[1] // 2
    gains = np.zeros(m)
    scales = np.zeros(m)
    for j in range(m):
        g = 0.0
        a = 0.0
        for i in range(D):
            y = X[i, m + j]
            wd = X[i, j] - y
            qy = Q[i, m + j]
            qd = Q[i, j] - qy
            h0 = B[i, m + j]
            t0 = B[i, j] - 2.0 * h0
            t1 = lam * y
            g += y * (t0 + t1 + qy) + wd * (h0 - qd)
            a += abs(y) * (abs(t0) + abs(t1) + abs(qy)) + abs(wd) * (abs(h0) + abs(qd))
        gains[j] = 4.0 * g
        scales[j] = 4.0 * a
    return gains, scales
