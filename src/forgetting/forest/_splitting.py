"""The split rule: which candidates a node draws, and which of them it splits on — from
integer counts alone.

Why a module of its own: everything that decides a node's choice is here, and nothing else
is. A fit (:mod:`._grower`), a one-row change (:mod:`._updates`) and a batch
(:mod:`._batches`) all ask these functions, so a node chooses the same whoever asks:

* candidates come from a counter-based generator seeded by the node's path from the root
  (:func:`child_seed`), never by build order;
* gains are float functions of integer counts computed in one fixed order, ties go to the
  lowest candidate index, and a gain must exceed ``1e-12·n``;
* the count-only stop rules (:func:`stop_rule`) come first.

Classification keeps k class counts per node and splits by Gini gain
``Σ L²/n_L + Σ R²/n_R − Σ P²/n``; regression (``params[P_REGRESSION] = 1``) keeps two
channels, the row count and the sum of the rows' quantized targets q, and splits by the
squared-error gain ``S_L²/n_L + S_R²/n_R − S²/n``.
"""

from __future__ import annotations

import numpy as np

from ._arrays import GOLD, LANE, P_CLASSES, P_REGRESSION, jit, mix

_ONE = np.uint64(1)
_TWO = np.uint64(2)
_S32 = np.uint64(32)


@jit
def child_seed(seed, side):
    """The seed of a node's left (side 0) or right (side 1) child."""
    return mix(seed * _TWO + np.uint64(side) + _ONE)


@jit
def _below(r, m):
    """A draw in [0, m) from the 64-bit value r (high 32 bits times m)."""
    return np.int64(((r >> _S32) * np.uint64(m)) >> _S32)


@jit
def draw_candidates(seed, lo, hi, K, cf, ct, feas):
    """K candidates (feature, threshold) from the node's feasible code ranges: a feature
    uniformly among those with hi > lo, a threshold uniformly in [lo, hi - 1].

    IN: ``seed`` (uint64) the node's seed; ``lo``, ``hi`` (d,) int32 its feasible codes per
    feature; ``K`` how many to draw.
    OUT: ``cf``, ``ct`` (≥ K,) int32 the candidates' features and thresholds.
    SCRATCH: ``feas`` (d,) int32.
    Returns how many were drawn: K, or 0 when no feature can be split."""
    d = lo.shape[0]
    nfeas = 0
    for f in range(d):
        if hi[f] > lo[f]:
            feas[nfeas] = f
            nfeas += 1
    if nfeas == 0:
        return 0
    for j in range(K):
        r = mix(seed + np.uint64(j + 1) * GOLD)
        f = feas[_below(r, nfeas)]
        r2 = mix(r ^ LANE)
        cf[j] = f
        ct[j] = lo[f] + _below(r2, hi[f] - lo[f])
    return K


@jit
def best_candidate(node, min_leaf, change):
    """Index of the candidate with the largest Gini gain, -1 when none has a positive gain
    with min_leaf rows each side.

    IN: ``node`` = (P (k,) the node's class counts, n its rows, L (≥ ncand, k) each
    candidate's left-side class counts, ncand the candidates to read); ``change`` = (yc, s,
    goes_left): with s != 0 the counts are read as if one row of class yc were added (s = 1)
    or removed (s = -1), ``goes_left`` (≥ ncand,) bool saying whether it goes left at
    candidate j (s = 0: no change)."""
    P, n, L, ncand = node
    yc, s, goes_left = change
    k = P.shape[0]
    sp = np.int64(0)
    for c in range(k):
        pc = np.int64(P[c]) + (s if c == yc else 0)
        sp += pc * pc
    base = sp / n
    best = -1
    best_gain = 1e-12 * n
    for j in range(ncand):
        nl = np.int64(0)
        sl = np.int64(0)
        sr = np.int64(0)
        for c in range(k):
            pc = np.int64(P[c])
            lc = np.int64(L[j, c])
            if c == yc and s != 0:
                pc += s
                if goes_left[j]:
                    lc += s
            rc = pc - lc
            nl += lc
            sl += lc * lc
            sr += rc * rc
        nr = n - nl
        if nl < min_leaf or nr < min_leaf:
            continue
        gain = sl / nl + sr / nr - base
        if gain > best_gain:
            best_gain = gain
            best = j
    return best


@jit
def best_candidate_mse(node, min_leaf, change):
    """:func:`best_candidate` for regression: channels (rows, sum of q); the gain is the
    squared-error reduction S_L²/n_L + S_R²/n_R − S²/n. With s != 0 in ``change`` = (q, s,
    goes_left) the counts are read as if one row of target q were added (s = 1) or removed
    (s = -1)."""
    P, n, L, ncand = node
    q, s, goes_left = change
    total = np.int64(P[1]) + s * q
    base = (total * total) / n
    best = -1
    best_gain = 1e-12 * n
    for j in range(ncand):
        nl = np.int64(L[j, 0])
        sl = np.int64(L[j, 1])
        if s != 0 and goes_left[j]:
            nl += s
            sl += s * q
        nr = n - nl
        if nl < min_leaf or nr < min_leaf:
            continue
        sr = total - sl
        gain = (sl * sl) / nl + (sr * sr) / nr - base
        if gain > best_gain:
            best_gain = gain
            best = j
    return best


@jit
def choose(A, node, min_leaf, change):
    """The split rule of the forest's task (A.params) for ``node`` = (P, n, L, ncand) and a
    stored row's ``change`` = (r, s, goes_left) (s = 0: none): :func:`best_candidate` or
    :func:`best_candidate_mse` with that row's class or target."""
    r, s, goes_left = change
    if A.params[P_REGRESSION] == 1:
        return best_candidate_mse(node, min_leaf, (np.int64(A.y[r]), s, goes_left))
    return best_candidate(node, min_leaf, (A.y[r], s, goes_left))


@jit
def add_row(M, i, A, r, sgn):
    """Add (sgn = 1) or remove (-1) stored row r's channels to row i of the count matrix M
    (class r's count; regression: one row and its q)."""
    if A.params[P_REGRESSION] == 1:
        M[i, 0] += sgn
        M[i, 1] += sgn * A.y[r]
    else:
        M[i, A.y[r]] += sgn


@jit
def max_count(A, v, r, sgn):
    """The largest class count of node v after row r's change (the purity stop rule); -1 for
    regression, which stops only when no candidate has a positive gain."""
    if A.params[P_REGRESSION] == 1:
        return -1
    pmax = 0
    yc = A.y[r]
    for c in range(A.params[P_CLASSES]):
        pc = A.counts[v, c] + (sgn if c == yc else 0)
        pmax = max(pmax, pc)
    return pmax


@jit
def stop_rule(max_count, n, depth, min_leaf, max_depth):
    """The count-only stop rules: too few rows to split, pure, or at max_depth."""
    return n < 2 * min_leaf or max_count == n or (max_depth >= 0 and depth >= max_depth)
