"""Compiled row updates and gains of the gain filter (content.heads.gain_filter).

Why compiled: per changed row the filter does ~10 small BLAS/numpy operations on (D, D) and
(D, 2m) arrays (D = 129, 2m = 60 at bench.core's shape) and then ~20 elementwise passes for
the gains; each call costs Python and dispatch overhead that dwarfs the arithmetic (~110k
flops). Fused loops do it in one pass per array. The results are not
bit-identical to the numpy path (another summation order) and need not be: the filter only
has to stay within its tolerance of the exact gain (content.heads.gain_filter's docstring), which
tests/test_gain_filter.py checks for both paths. Loaded like the table kernels
(content.kernels: the kernels setting "numpy" keeps the numpy path).

Every (D, 2m) array is in Fortran order (column-major): the inner loops run down a column;
A⁻¹ and G_0 are packed lower triangles, column by column (:func:`apply_row`).

Compiled with reassociation allowed (:data:`_FAST`, no assumption about NaN or infinity): the
dot products here (vᵀX per column, the pending terms, the gains' two sums per column) are
reductions, which LLVM may only vectorize when it may reorder their adds; in strict order
each is a chain of dependent scalar adds. The sums come out in another order, which the
filter allows (above).
"""

from __future__ import annotations

import numba
import numpy as np

_FAST = {"reassoc", "contract", "nsz", "arcp"}
"""LLVM fast-math flags: reorder and fuse adds and multiplies, ignore the sign of zero,
divide by multiplying with the reciprocal — not "nnan"/"ninf": a NaN or infinity still
propagates, as in the numpy path."""


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST)
def apply_row(tracked, row, pending, lam, scores):
    """One row applied to the ``tracked`` state (Sherman–Morrison; see
    content.heads.gain_filter.GainFilter._apply for the algebra).

    IN/OUT: ``tracked`` = (Ainv, G0, X, Q, B): A⁻¹, G_0, X = A⁻¹B, Q = G_0 X and B, updated
    in place; ``pending`` = (U, fu, V, fv, counts), the rank-one terms that wait (below).
    IN: ``row`` = (v (D,) its features, b (2m,) its right-hand-side row, sigma ±1.0 its
    sign, in0 whether it is in fold 0); ``lam`` the ridge λ.
    OUT: ``scores`` = (gains, scales) of m entries each (X has 2m columns): :func:`fold_scores`
    of the result, column pair by column pair while they are in cache (empty arrays when a
    later row follows: nothing written).

    ``Ainv`` and ``G0`` are symmetric and held *packed*: their lower triangles, column by
    column (:func:`forgetting.content.heads.gain_filter.packed`). Why: the two matrix–vector
    products read them once per row, and where the filter's state (MBs) has left the cache
    between deletions (a one-row forget and its prediction touch the p instances' tables in
    between) that read is most of the row's time; the packed triangle is half the bytes, in
    one contiguous stream (the lower triangle of a full array restarts the hardware
    prefetcher at every column and is no faster).

    The rank-one terms of A⁻¹ and G_0 wait, ``pending`` = (U, fu, V, fv, counts): A⁻¹ is
    ``Ainv`` + Σ_k fu[k] U_k U_kᵀ over the ``counts[0]`` pending columns of ``U``, G_0 is
    ``G0`` + Σ_k fv[k] V_k V_kᵀ over ``counts[1]`` of ``V``; they are added to the packed
    triangles once the buffers fill (:func:`flush_rank`): a pending term costs 2D per later
    row instead of a pass over the triangle. The sums are reordered, so the rounding differs
    — within the filter's tolerance, as for the numpy path (tests/test_gain_filter.py)."""
    Ainv, G0, X, Q, B = tracked
    v, b, sigma, in0 = row
    U, fu, V, fv, counts = pending
    gains, scales = scores
    D = v.shape[0]
    m = X.shape[1] // 2
    nu = counts[0]
    nv = counts[1]
    u = np.zeros(D)
    _packed_matvec(Ainv, v, u)
    _add_pending(u, U, fu, nu, v)
    vu = 0.0
    for i in range(D):
        vu += v[i] * u[i]
    s = 1.0 + sigma * vu
    w = np.zeros(D)
    _packed_matvec(G0, u, w)
    _add_pending(w, V, fv, nv, u)
    score = gains.shape[0] == m
    state, vectors, step = (X, Q, B), (v, u, w), (sigma, s, vu, in0)
    for j in range(m):
        _update_column(state, vectors, b, j, step)
        _update_column(state, vectors, b, m + j, step)
        if score:
            gains[j], scales[j] = _column_score(X, Q, B, lam, j)
    for i in range(D):
        U[i, nu] = u[i]
    fu[nu] = -sigma / s
    nu += 1
    if in0:
        for i in range(D):
            V[i, nv] = v[i]
        fv[nv] = sigma
        nv += 1
    if nu == U.shape[1]:
        flush_rank(Ainv, U, fu, nu)
        nu = 0
    if nv == V.shape[1]:
        flush_rank(G0, V, fv, nv)
        nv = 0
    counts[0] = nu
    counts[1] = nv


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST, inline="always")
def _packed_matvec(P, x, out) -> None:
    """out += S x for the symmetric S whose lower triangle ``P`` holds, column by column:
    each stored column j (S[j:, j]) read once, for a dot product (out[j]) and an update of
    out[j + 1:]. Slices, so LLVM sees the three arrays apart and vectorizes both loops."""
    D = x.shape[0]
    at = 0
    for j in range(D):
        n = D - j
        col = P[at : at + n]
        xs = x[j:]
        outs = out[j:]
        xj = x[j]
        t = col[0] * xj
        for i in range(1, n):
            c = col[i]
            t += c * xs[i]
            outs[i] += c * xj
        out[j] += t
        at += n


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST, inline="always")
def _update_column(state, vectors, b, j, step) -> None:
    """Column j of ``state`` = (X, Q, B): B, X = A⁻¹B and Q = G_0 X after the row
    (GainFilter._apply's algebra), from ``vectors`` = (v, u = A⁻¹v, w = G_0 u), the row's
    right-hand side ``b`` and ``step`` = (σ, s = 1 + σ vᵀu, vᵀu, in fold 0)."""
    X, Q, B = state
    v, u, w = vectors
    sigma, s, vu, in0 = step
    D = v.shape[0]
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


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST, inline="always")
def _add_pending(out, U, f, n, x) -> None:
    """out += Σ_k<n f[k] U_k (U_kᵀ x): the pending rank-one terms applied to ``x``."""
    D = x.shape[0]
    for k in range(n):
        t = 0.0
        for i in range(D):
            t += U[i, k] * x[i]
        t *= f[k]
        for i in range(D):
            out[i] += U[i, k] * t


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST)
def flush_rank(P, U, f, n) -> None:
    """P += Σ_k<n f[k] U_k U_kᵀ on a packed lower triangle (:func:`apply_row`), in one pass."""
    D = U.shape[0]
    at = 0
    for j in range(D):
        col = P[at : at + D - j]
        for k in range(n):
            c = f[k] * U[j, k]
            Uk = U[j:, k]
            for i in range(D - j):
                col[i] += Uk[i] * c
        at += D - j


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST, inline="always")
def _column_score(X, Q, B, lam, j):
    """Column j's out-of-fold gain and scale (:func:`fold_scores`)."""
    D = X.shape[0]
    m = X.shape[1] // 2
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
    return 4.0 * g, 4.0 * a


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST)
def fold_scores(X, Q, B, lam):
    """content.heads.gain_filter.fold_scores in one pass: per column j < m, the out-of-fold gain
    4·(⟨Y, H − 2H_0 + λY + QY⟩ + ⟨W − Y, H_0 − (QW − QY)⟩) and its scale Σ|terms|."""
    m = X.shape[1] // 2
    gains = np.zeros(m)
    scales = np.zeros(m)
    for j in range(m):
        gains[j], scales[j] = _column_score(X, Q, B, lam, j)
    return gains, scales


@numba.njit(cache=True, nogil=True, error_model="numpy")
def bounded_columns(W, tolerance, bits, radius, step) -> None:
    """content.heads.certified.BoundedWeights.around in one pass over W (D, k): per column
    the radius (tolerance + D·2^-52)·‖W_c‖₂ and the coarsest grid step 2^-e_c. Strict
    order (no fast-math): these are bounds, each within a few ulps of the numpy path's, which
    the bounds' room (certified._ROUNDING_ROOM, _BINADE_MARGIN) covers."""
    D, k = W.shape
    room = tolerance + D * 2.0**-52
    for c in range(k):
        squares = 0.0
        peak = 0.0
        for i in range(D):
            w = W[i, c]
            squares += w * w
            peak = max(peak, abs(w))
        r = room * np.sqrt(squares)
        radius[c] = r
        high = max((peak + r) * (1.0 + 1e-9), 1e-300)
        e = min(bits - np.ceil(np.log2(high)) - 1.0, bits - 1.0)
        step[c] = np.exp2(-e)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def bounded_outputs(v, g, bounded, link, served) -> None:
    """content.heads.certified.BoundedWeights.served (``logistic`` False: g + v·W̃ and the
    bounds) or BoundedLogits.served (True: softmax(log max(g, floor) + v·W̃) and
    certified.logit_radius) for rows ``v``, in one pass per row.

    IN: ``v`` (n, D) head features; ``g`` (n, k) g's outputs; ``bounded`` = (W̃ (D, k),
    radius (k,), step (k,)): a BoundedWeights; ``link`` = (logistic, floor, room): the link,
    g's floor under the logarithm, the bounds' rounding room.
    OUT: ``served`` = (out, near), both (n, k): the outputs and their bounds."""
    W, radius, step = bounded
    logistic, floor, room = link
    out, near = served
    n, D = v.shape
    k = W.shape[1]
    unit = 2.0**-14
    u = 2.0**-53
    relative = (2 * k + 16) * u
    s = np.empty(k)
    b = np.empty(k)
    for i in range(n):
        l2 = 0.0
        l1 = 0.0
        for j in range(D):
            x = v[i, j]
            l2 += x * x
            l1 += abs(x)
        l2 = np.sqrt(l2)
        for c in range(k):
            t = 0.0
            for j in range(D):
                t += v[i, j] * W[j, c]
            s[c] = t * unit
            b[c] = (l2 * radius[c] + l1 * (0.5 * step[c])) * unit * room
        if not logistic:
            for c in range(k):
                out[i, c] = g[i, c] + s[c]
                near[i, c] = b[c]
            continue
        top = -np.inf
        peak = 0.0
        for c in range(k):
            s[c] += np.log(max(g[i, c], floor))  # z_c
            top = max(top, s[c])
            peak = max(peak, abs(s[c]) + b[c])
        widest = 0.0
        for c in range(k):
            widest = max(widest, b[c] + 4.0 * u * (abs(s[c]) + b[c] + peak))
        total = 0.0
        for c in range(k):
            out[i, c] = np.exp(s[c] - top)
            total += out[i, c]
        factor = (np.expm1(2.0 * widest) * (1.0 + relative) + relative) * room
        for c in range(k):
            out[i, c] /= total
            near[i, c] = out[i, c] * factor
