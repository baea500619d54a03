"""The forest's compiled loops: build a subtree, walk one row's change down a tree, predict,
serialize, compact. All trees share one set of node arrays (:class:`Arrays`).

Determinism: candidates come from a counter-based generator seeded by the node's path from
the root (never by build order); gains are float functions of integer class counts computed
in one fixed order; ties go to the lowest candidate index. So a subtree built from a set of
rows is the same whoever builds it — a fit, or a rebuild after a forget or insert.
Regression (``params[5] = 1``) keeps two channels per node, the row count and the sum of the
rows' quantized targets q, and splits by the squared-error gain S_L²/n_L + S_R²/n_R − S²/n of
those integers.
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np

Arrays = namedtuple(
    "Arrays",
    [
        "codes",  # (rows, d) uint8 bin codes of every stored row
        "y",  # (rows,) int32 class index, or a regression row's quantized target q
        "feat",  # (nodes,) int32 split feature, -1 for a leaf, STALE for a subtree to rebuild
        "thr",  # (nodes,) int32 split code: code <= thr goes left
        "left",
        "right",  # (nodes,) int32 children
        "n",  # (nodes,) int32 rows in the node
        "counts",  # (nodes, k) int32 class counts; regression: (rows, sum of q)
        "slot",  # (nodes,) int32 candidate-cache slot or -1
        "choice",  # (nodes,) int32 chosen candidate index (cached nodes)
        "lstart",  # (nodes,) int64 first row of a leaf in perm
        "hash",  # (nodes, 2) uint64 Merkle hash of the subtree
        "cfeat",  # (slots, K) int32 candidate features
        "cthr",  # (slots, K) int32 candidate thresholds
        "cleft",  # (slots, K, k) int32 class counts going left
        "ncand",  # (slots,) int32 candidates drawn
        "perm",  # (perm,) int32 rows of the leaves
        "top",  # (8,) int64: nodes, slots, perm used; dead nodes, slots, perm; stale nodes; 0
        "roots",  # (trees,) int32
        "seeds",  # (trees,) uint64 root seeds
        "nbins",  # (d,) int32 finite bins per feature (NaN code = nbins)
        "params",  # (6,) int64: k, K, min_leaf, max_depth (-1 none), cache_min, regression
    ],
)

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_ONE = np.uint64(1)
_TWO = np.uint64(2)
_LANE = np.uint64(0x632BE59BD9B4E019)
_REMOVE, _APPEND, _REBUILD = 0, 1, 2
FAIL = -1
"""A kernel's answer when an array is full: nothing was changed; grow and call again."""
STALE = -2
"""``feat`` of a stale node: a subtree whose choice changed, kept as its rows alone (a leaf's
perm range and counts) until something reads it. Rebuilding it then, from the rows it holds
then, gives what rebuilding it at each change would have: a subtree is a function of its
rows, depth, seed and feasible ranges (module docstring). So a forget or insert costs a walk
and a copy of the subtree's rows; the build is paid by the first prediction that reaches
the node, or by whatever reads the whole structure (``flush_tree``)."""

_jit = numba.njit(cache=True, nogil=True)
_NO_MARK = np.zeros(0, np.uint8)


@_jit
def _mix(x):
    z = x + _GOLD
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@_jit
def child_seed(seed, side):
    """The seed of a node's left (side 0) or right (side 1) child."""
    return _mix(seed * _TWO + np.uint64(side) + _ONE)


@_jit
def _below(r, m):
    """A draw in [0, m) from the 64-bit value r (high 32 bits times m)."""
    return np.int64(((r >> _S32) * np.uint64(m)) >> _S32)


@_jit
def draw_candidates(seed, lo, hi, K, cf, ct, feas):
    """K candidates (feature, threshold) from the node's feasible code ranges lo..hi: a
    feature uniformly among those with hi > lo, a threshold uniformly in [lo, hi - 1].
    Returns how many were drawn (0 when no feature can be split). ``feas`` is scratch of
    length d."""
    d = lo.shape[0]
    nfeas = 0
    for f in range(d):
        if hi[f] > lo[f]:
            feas[nfeas] = f
            nfeas += 1
    if nfeas == 0:
        return 0
    for j in range(K):
        r = _mix(seed + np.uint64(j + 1) * _GOLD)
        f = feas[_below(r, nfeas)]
        r2 = _mix(r ^ _LANE)
        cf[j] = f
        ct[j] = lo[f] + _below(r2, hi[f] - lo[f])
    return K


@_jit
def best_candidate(P, n, L, ncand, min_leaf, yc, s, goes_left):
    """Index of the candidate with the largest Gini gain (sum L^2/nL + sum R^2/nR - sum
    P^2/n, from integer counts), -1 when none has positive gain with min_leaf rows each side.
    With s != 0 the counts are read as if one row of class yc were added (s = 1) or removed
    (s = -1); goes_left[j] says whether it goes left at candidate j."""
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


@_jit
def best_candidate_mse(P, n, L, ncand, min_leaf, q, s, goes_left):
    """:func:`best_candidate` for regression: channels (rows, sum of q); the gain is the
    squared-error reduction S_L²/n_L + S_R²/n_R − S²/n. With s != 0 the counts are read as if
    one row of target q were added (s = 1) or removed (s = -1)."""
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


@_jit
def _best(A, P, n, L, ncand, min_leaf, r, s, goes_left):
    """The split rule of the forest's task for row r's change s (0: none)."""
    if A.params[5] == 1:
        return best_candidate_mse(P, n, L, ncand, min_leaf, np.int64(A.y[r]), s, goes_left)
    return best_candidate(P, n, L, ncand, min_leaf, A.y[r], s, goes_left)


@_jit
def _add_row(M, i, A, r, sgn):
    """Add (sgn = 1) or remove (-1) row r's channels to row i of the count matrix M."""
    if A.params[5] == 1:
        M[i, 0] += sgn
        M[i, 1] += sgn * A.y[r]
    else:
        M[i, A.y[r]] += sgn


@_jit
def _counts_max(A, v, r, sgn):
    """The largest class count of node v after row r's change (the purity stop rule); -1 for
    regression, which stops only when no candidate has a positive gain."""
    if A.params[5] == 1:
        return -1
    pmax = 0
    yc = A.y[r]
    for c in range(A.params[0]):
        pc = A.counts[v, c] + (sgn if c == yc else 0)
        pmax = max(pmax, pc)
    return pmax


@_jit
def _stops(counts_max, n, depth, min_leaf, max_depth):
    """The count-only stop rules: too few rows to split, pure, or at max_depth."""
    return n < 2 * min_leaf or counts_max == n or (max_depth >= 0 and depth >= max_depth)


@_jit
def _leaf_hash(A, v):
    h0 = np.uint64(0x1234567)
    h1 = np.uint64(0x7654321)
    for c in range(A.counts.shape[1]):
        h0 = _mix(h0 ^ np.uint64(A.counts[v, c]))
        h1 = _mix(h1 + np.uint64(A.counts[v, c]) * _LANE)
    A.hash[v, 0] = h0
    A.hash[v, 1] = h1


@_jit
def _node_hash(A, v):
    a, b = A.left[v], A.right[v]
    tag = np.uint64(A.feat[v]) * np.uint64(256) + np.uint64(A.thr[v])
    A.hash[v, 0] = _mix(_mix(tag ^ A.hash[a, 0]) + A.hash[b, 0] * _GOLD)
    A.hash[v, 1] = _mix(_mix(tag + A.hash[a, 1] * _LANE) ^ A.hash[b, 1])


@_jit
def build(A, buf, a, b, depth, seed, lo0, hi0, expand=False):
    """Build the subtree of rows buf[a:b] (reordered in place) at a node of this depth, seed
    and feasible ranges, exactly as a fit builds it. Returns its root, or FAIL when the node,
    slot or perm arrays are full (then nothing is committed). With ``expand`` only the root
    is built: its children are STALE nodes holding their rows (what a prediction that reads
    one path needs; the rest is built when read)."""
    k, K, min_leaf, max_depth, cache_min = (
        A.params[0],
        A.params[1],
        A.params[2],
        A.params[3],
        A.params[4],
    )
    d = lo0.shape[0]
    n_nodes, n_slots, n_perm = A.top[0], A.top[1], A.top[2]
    first = n_nodes
    cap = 16
    st_a = np.empty(cap, np.int64)
    st_b = np.empty(cap, np.int64)
    st_depth = np.empty(cap, np.int64)
    st_seed = np.empty(cap, np.uint64)
    st_parent = np.empty(cap, np.int64)
    st_side = np.empty(cap, np.int64)
    st_lo = np.empty((cap, d), np.int32)
    st_hi = np.empty((cap, d), np.int32)
    sp = 0
    st_a[0], st_b[0], st_depth[0], st_seed[0], st_parent[0], st_side[0] = a, b, depth, seed, -1, 0
    st_lo[0] = lo0
    st_hi[0] = hi0
    sp = 1
    P = np.zeros(k, np.int64)
    P2 = np.zeros((1, k), np.int64)
    regression = A.params[5] == 1
    cf = np.empty(K, np.int32)
    ct = np.empty(K, np.int32)
    L = np.zeros((K, k), np.int64)
    no_left = np.zeros(K, np.bool_)
    root = -1
    new_stale = 0
    lo = np.empty(d, np.int32)
    hi = np.empty(d, np.int32)
    feas = np.empty(d, np.int32)
    while sp > 0:
        sp -= 1
        na, nb, dep, sd = st_a[sp], st_b[sp], st_depth[sp], st_seed[sp]
        parent, side = st_parent[sp], st_side[sp]
        lo[:] = st_lo[sp]
        hi[:] = st_hi[sp]
        if n_nodes >= A.feat.shape[0]:
            return FAIL
        v = n_nodes
        n_nodes += 1
        if parent < 0:
            root = v
        elif side == 0:
            A.left[parent] = v
        else:
            A.right[parent] = v
        m = nb - na
        P[:] = 0
        for i in range(na, nb):
            _add_row(P2, 0, A, buf[i], 1)
        A.n[v] = m
        pmax = 0
        for c in range(k):
            P[c] = P2[0, c]
            P2[0, c] = 0
            A.counts[v, c] = P[c]
            pmax = max(pmax, P[c])
        if regression:
            pmax = -1
        A.slot[v] = -1
        A.choice[v] = -1
        best = -1
        ncand = 0
        if not _stops(pmax, m, dep, min_leaf, max_depth):
            ncand = draw_candidates(sd, lo, hi, K, cf, ct, feas)
            L[:] = 0
            for i in range(na, nb):
                r = buf[i]
                for j in range(ncand):
                    if A.codes[r, cf[j]] <= ct[j]:
                        _add_row(L, j, A, r, 1)
            if regression:
                best = best_candidate_mse(P, m, L, ncand, min_leaf, 0, 0, no_left)
            else:
                best = best_candidate(P, m, L, ncand, min_leaf, 0, 0, no_left)
        if (best >= 0 or ncand > 0) and m >= cache_min:
            # cache the candidates of big nodes: internal ones, and leaves no candidate could
            # split (a forget or insert re-evaluates them from these counts, not the rows)
            if n_slots >= A.ncand.shape[0]:
                return FAIL
            s = n_slots
            n_slots += 1
            A.slot[v] = s
            A.choice[v] = best
            A.ncand[s] = ncand
            for j in range(ncand):
                A.cfeat[s, j] = cf[j]
                A.cthr[s, j] = ct[j]
                for c in range(k):
                    A.cleft[s, j, c] = L[j, c]
        if best < 0:
            if n_perm + m > A.perm.shape[0]:
                return FAIL
            A.feat[v] = -1
            A.thr[v] = 0
            A.left[v] = -1
            A.right[v] = -1
            A.lstart[v] = n_perm
            for i in range(na, nb):
                A.perm[n_perm] = buf[i]
                n_perm += 1
            continue
        f, t = cf[best], ct[best]
        A.feat[v] = f
        A.thr[v] = t
        A.lstart[v] = -1
        # partition rows: code <= t to the front
        i, e = na, nb - 1
        while i <= e:
            if A.codes[buf[i], f] <= t:
                i += 1
            else:
                tmp = buf[i]
                buf[i] = buf[e]
                buf[e] = tmp
                e -= 1
        if expand and v == root:
            if n_nodes + 2 > A.feat.shape[0] or n_perm + m > A.perm.shape[0]:
                return FAIL
            for side_, ca, cb in ((0, na, i), (1, i, nb)):
                c = n_nodes
                n_nodes += 1
                if side_ == 0:
                    A.left[v] = c
                else:
                    A.right[v] = c
                A.feat[c] = STALE
                A.thr[c] = 0
                A.left[c] = -1
                A.right[c] = -1
                A.slot[c] = -1
                A.choice[c] = -1
                A.n[c] = cb - ca
                A.counts[c, :] = 0
                A.lstart[c] = n_perm
                for j in range(ca, cb):
                    _add_row(A.counts, c, A, buf[j], 1)
                    A.perm[n_perm] = buf[j]
                    n_perm += 1
            new_stale += 2
            continue
        if sp + 2 > cap:
            cap *= 2
            st_a = _grow(st_a, cap)
            st_b = _grow(st_b, cap)
            st_depth = _grow(st_depth, cap)
            st_seed = _grow(st_seed, cap)
            st_parent = _grow(st_parent, cap)
            st_side = _grow(st_side, cap)
            st_lo = _grow2(st_lo, cap)
            st_hi = _grow2(st_hi, cap)
        # push right first so the left subtree is built (and numbered) first
        for side_, ca, cb in ((1, i, nb), (0, na, i)):
            st_a[sp], st_b[sp], st_depth[sp] = ca, cb, dep + 1
            st_seed[sp] = child_seed(sd, side_)
            st_parent[sp], st_side[sp] = v, side_
            st_lo[sp] = lo
            st_hi[sp] = hi
            if side_ == 0:
                st_hi[sp, f] = t
            else:
                st_lo[sp, f] = t + 1
            sp += 1
    # hashes bottom-up: children are numbered after their parent
    for v in range(n_nodes - 1, first - 1, -1):
        if A.feat[v] == STALE:
            A.hash[v, 0] = 0
            A.hash[v, 1] = 0
        elif A.feat[v] < 0:
            _leaf_hash(A, v)
        else:
            _node_hash(A, v)
    A.top[0], A.top[1], A.top[2] = n_nodes, n_slots, n_perm
    A.top[6] += new_stale
    return root


@_jit
def _grow(x, cap):
    out = np.empty(cap, x.dtype)
    out[: x.shape[0]] = x
    return out


@_jit
def _grow2(x, cap):
    out = np.empty((cap, x.shape[1]), x.dtype)
    out[: x.shape[0]] = x
    return out


@_jit
def _collect(A, v, buf, skip, mark):
    """Rows of the leaves under node v into buf, all but row ``skip`` and the rows ``mark``
    flags (an empty ``mark`` flags none); returns how many."""
    m = 0
    stack = np.empty(64, np.int64)
    stack[0] = v
    sp = 1
    while sp > 0:
        sp -= 1
        u = stack[sp]
        if A.feat[u] < 0:
            for i in range(A.lstart[u], A.lstart[u] + A.n[u]):
                r = A.perm[i]
                if r != skip and (mark.shape[0] == 0 or mark[r] == 0):
                    buf[m] = r
                    m += 1
        else:
            if sp + 2 > stack.shape[0]:
                stack = _grow(stack, 2 * stack.shape[0])
            stack[sp] = A.right[u]
            stack[sp + 1] = A.left[u]
            sp += 2
    return m


@_jit
def _kill(A, v):
    """Count the nodes, slots and perm entries of the subtree at v as dead."""
    stack = np.empty(64, np.int64)
    stack[0] = v
    sp = 1
    while sp > 0:
        sp -= 1
        u = stack[sp]
        A.top[3] += 1
        if A.feat[u] == STALE:
            A.top[6] -= 1
        if A.slot[u] >= 0:
            A.top[4] += 1
        if A.feat[u] < 0:
            A.top[5] += A.n[u]
        else:
            if sp + 2 > stack.shape[0]:
                stack = _grow(stack, 2 * stack.shape[0])
            stack[sp] = A.right[u]
            stack[sp + 1] = A.left[u]
            sp += 2


@_jit
def _goes_left(A, s, r, goes):
    for j in range(A.ncand[s]):
        goes[j] = A.codes[r, A.cfeat[s, j]] <= A.cthr[s, j]


@_jit
def _cache_row(A, v, r, sgn, goes):
    """Add (sgn = 1) or remove (-1) row r in node v's candidate cache, if any."""
    s = A.slot[v]
    if s < 0:
        return
    _goes_left(A, s, r, goes)
    _cache_goes(A, s, r, sgn, goes)


@_jit
def _cache_goes(A, s, r, sgn, goes):
    """Add (sgn = 1) or remove (-1) row r in cache slot s, whose candidates it goes left at
    where ``goes`` says: one multiply-add per candidate, no branch (half of them would be
    mispredicted)."""
    cleft = A.cleft[s]
    if A.params[5] == 1:
        q = sgn * A.y[r]
        for j in range(A.ncand[s]):
            g = np.int32(goes[j])
            cleft[j, 0] += sgn * g
            cleft[j, 1] += q * g
    else:
        c = A.y[r]
        for j in range(A.ncand[s]):
            cleft[j, c] += sgn * np.int32(goes[j])


@_jit
def update_tree(A, t, r, sgn, buf, path, goes):
    """Add (sgn = 1) or remove (sgn = -1) stored row r in tree t: re-evaluate the choice at
    each cached node on its path; the first subtree whose choice (or leaf-ness) changes, or
    whose node keeps no cache, becomes a STALE node holding its rows (rebuilt when read); a
    stale node on the path just drops or gains the row. A node that keeps its choice takes
    the change into its counts and cache on the way down (its candidates' sides are read
    once). Returns 0, or FAIL with tree t untouched (those changes undone) when an array is
    full. ``goes`` is scratch of length K."""
    min_leaf, max_depth = A.params[2], A.params[3]
    v = A.roots[t]
    depth = 0
    action = _REBUILD
    while True:
        if A.feat[v] == STALE:  # rows only, rebuilt when read: drop or add the row
            action = _REMOVE if sgn < 0 else _APPEND
            break
        n_after = A.n[v] + sgn
        stops = _stops(_counts_max(A, v, r, sgn), n_after, depth, min_leaf, max_depth)
        s = A.slot[v]
        if A.feat[v] < 0:
            keep = stops
            if not stops and s >= 0:
                _goes_left(A, s, r, goes)
                n_c = A.ncand[s]
                keep = _best(A, A.counts[v], n_after, A.cleft[s], n_c, min_leaf, r, sgn, goes) < 0
            action = (_REMOVE if sgn < 0 else _APPEND) if keep else _REBUILD
            break
        if s < 0 or stops:
            action = _REBUILD
            break
        _goes_left(A, s, r, goes)
        best = _best(A, A.counts[v], n_after, A.cleft[s], A.ncand[s], min_leaf, r, sgn, goes)
        if best != A.choice[v]:
            action = _REBUILD
            break
        # v keeps its choice: its counts and cache take the change now
        A.n[v] = n_after
        _add_row(A.counts, v, A, r, sgn)
        _cache_goes(A, s, r, sgn, goes)
        path[depth] = v
        v = A.left[v] if A.codes[r, A.feat[v]] <= A.thr[v] else A.right[v]
        depth += 1
    # the change at v: the step that may fail for want of room
    new = v
    if action == _REBUILD:
        new = _mark_stale(A, v, r, sgn, buf)
    elif action == _APPEND and A.top[2] + A.n[v] + 1 > A.perm.shape[0]:
        new = FAIL
    if new < 0:
        for i in range(depth):  # undo the ancestors' counts and caches
            u = path[i]
            A.n[u] -= sgn
            _add_row(A.counts, u, A, r, -sgn)
            _cache_row(A, u, r, -sgn, goes)
        return FAIL
    if action == _APPEND:
        m = A.n[v]
        start = A.top[2]
        for i in range(m):
            A.perm[start + i] = A.perm[A.lstart[v] + i]
        A.perm[start + m] = r
        A.top[2] += m + 1
        A.top[5] += m
        A.lstart[v] = start
        A.n[v] += 1
        _add_row(A.counts, v, A, r, 1)
        _leaf_hash(A, v)
        _cache_row(A, v, r, 1, goes)
    elif action == _REMOVE:
        base, m = A.lstart[v], A.n[v]
        for i in range(base, base + m):
            if A.perm[i] == r:
                A.perm[i] = A.perm[base + m - 1]
                break
        A.n[v] -= 1
        _add_row(A.counts, v, A, r, -1)
        A.top[5] += 1
        _leaf_hash(A, v)
        _cache_row(A, v, r, -1, goes)
    # link the changed node and rehash the path
    if depth == 0:
        A.roots[t] = new
    else:
        u = path[depth - 1]
        if A.codes[r, A.feat[u]] <= A.thr[u]:
            A.left[u] = new
        else:
            A.right[u] = new
    for i in range(depth - 1, -1, -1):
        _node_hash(A, path[i])
    return 0


@_jit
def update_rows(A, rows, sgn, start_row, start_tree, buf, path):
    """update_tree for rows[start_row:] over every tree (from start_tree for the first).
    Returns -1 when done, else the index i * trees + t of the (row, tree) that found an
    array full: grow, and call again from there."""
    T = A.roots.shape[0]
    goes = np.zeros(A.params[1], np.bool_)
    for i in range(start_row, rows.shape[0]):
        for t in range(start_tree if i == start_row else 0, T):
            if update_tree(A, t, rows[i], sgn, buf, path, goes) < 0:
                return i * T + t
    return -1


@_jit
def _change_rows(A, v, work, a, b, sgn, old_n, mark):
    """The leaf or stale node v (whose counts already hold the change) drops the marked rows
    (sgn = -1: compacted in place) or gains work[a:b] (1: copied to a new perm range after
    its old_n rows)."""
    base = A.lstart[v]
    if sgn < 0:
        w = base
        for i in range(base, base + old_n):
            r = A.perm[i]
            if mark[r] == 0:
                A.perm[w] = r
                w += 1
        A.top[5] += old_n - (w - base)
        return
    start = A.top[2]
    for i in range(old_n):
        A.perm[start + i] = A.perm[base + i]
    for i in range(a, b):
        A.perm[start + old_n + i - a] = work[i]
    A.top[2] += old_n + b - a
    A.top[5] += old_n
    A.lstart[v] = start


@_jit
def _stale_batch(A, v, work, a, b, sgn, mark, buf):
    """Replace the subtree at v (its counts already changed) by a STALE node holding its
    rows after the change: without the marked rows (sgn = -1), or with work[a:b] (1)."""
    m = _collect(A, v, buf, -1, mark)
    if sgn > 0:
        for i in range(a, b):
            buf[m] = work[i]
            m += 1
    return _new_stale(A, v, buf, m)


@_jit
def _new_stale(A, v, buf, m):
    """A new STALE node in place of the subtree at v: v's counts, the m rows buf[:m] in a
    fresh perm range (a leaf's layout); v's subtree is counted dead. Returns the new node."""
    new = A.top[0]
    A.top[0] += 1
    A.feat[new] = STALE
    A.thr[new] = 0
    A.left[new] = -1
    A.right[new] = -1
    A.slot[new] = -1
    A.choice[new] = -1
    A.n[new] = m
    for c in range(A.counts.shape[1]):
        A.counts[new, c] = A.counts[v, c]
    A.hash[new, 0] = 0
    A.hash[new, 1] = 0
    start = A.top[2]
    A.lstart[new] = start
    for i in range(m):
        A.perm[start + i] = buf[i]
    A.top[2] += m
    _kill(A, v)
    A.top[6] += 1
    return new


@_jit
def _cache_rows(A, s, work, a, b, sgn):
    """Add (sgn = 1) or remove (-1) rows work[a:b] in candidate-cache slot s (the batch's
    inner loop: one compare and one add per row and candidate, no branch)."""
    cf, ct, cleft, nc = A.cfeat[s], A.cthr[s], A.cleft[s], A.ncand[s]
    if A.params[5] == 1:
        for i in range(a, b):
            r = work[i]
            q = sgn * A.y[r]
            for j in range(nc):
                left = np.int32(A.codes[r, cf[j]] <= ct[j])
                cleft[j, 0] += sgn * left
                cleft[j, 1] += q * left
        return
    for i in range(a, b):
        r = work[i]
        yr = A.y[r]
        for j in range(nc):
            cleft[j, yr] += sgn * np.int32(A.codes[r, cf[j]] <= ct[j])


_KEEP_STALE, _KEEP_LEAF, _MAKE_STALE, _REHASH = 0, 1, 2, 3
"""Actions of a batch plan (:func:`plan_batch_tree`): a stale node drops or gains rows; a kept
leaf drops or gains rows; a subtree becomes one stale node; a kept internal node is rehashed."""


@_jit
def plan_batch_tree(A, t, rows, sgn, work):
    """The first half of removing (sgn = -1) or adding (1) the stored rows ``rows`` in tree t
    at once, top-down: every node on their paths takes all their counts (and its candidate
    cache the rows' left counts), then re-evaluates its choice once. A node whose final rows
    choose as before (leaf-ness included) is kept and its children visited; one whose choice
    differs, or that keeps no cache, is planned to become one STALE node holding its final
    rows. Equal to :func:`update_tree` row after row: a kept node is what its final rows
    choose (the choice is a function of its counts), a stale one is rebuilt from its final
    rows when read. Touches only tree t's nodes (trees may be planned in parallel) and
    reorders ``work`` (the rows, grouped by node). Returns (actions, count), rows
    ``(kind, node, parent, side, a, b, old_n)`` in preorder for :func:`apply_batch_tree`."""
    B = rows.shape[0]
    min_leaf, max_depth = A.params[2], A.params[3]
    goes = np.zeros(A.params[1], np.bool_)
    for i in range(B):
        work[i] = rows[i]
    acts = np.empty((64, 7), np.int64)
    n_acts = 0
    cap = 64
    st_v = np.empty(cap, np.int64)
    st_parent = np.empty(cap, np.int64)
    st_side = np.empty(cap, np.int64)
    st_depth = np.empty(cap, np.int64)
    st_a = np.empty(cap, np.int64)
    st_b = np.empty(cap, np.int64)
    st_v[0], st_parent[0], st_side[0], st_depth[0], st_a[0], st_b[0] = A.roots[t], -1, 0, 0, 0, B
    sp = 1
    while sp > 0:
        sp -= 1
        v, parent, side = st_v[sp], st_parent[sp], st_side[sp]
        depth, a, b = st_depth[sp], st_a[sp], st_b[sp]
        old_n = A.n[v]
        A.n[v] += sgn * (b - a)
        for i in range(a, b):
            _add_row(A.counts, v, A, work[i], sgn)
        if A.feat[v] == STALE:
            kind = _KEEP_STALE
        else:
            s = A.slot[v]
            if s >= 0:
                _cache_rows(A, s, work, a, b, sgn)
            r0 = work[a]
            n_v = A.n[v]
            stops = _stops(_counts_max(A, v, r0, 0), n_v, depth, min_leaf, max_depth)
            if A.feat[v] < 0:
                keep = stops
                if not stops and s >= 0:
                    keep = (
                        _best(A, A.counts[v], n_v, A.cleft[s], A.ncand[s], min_leaf, r0, 0, goes)
                        < 0
                    )
                kind = _KEEP_LEAF if keep else _MAKE_STALE
            else:
                keep = s >= 0 and not stops
                if keep:
                    best = _best(A, A.counts[v], n_v, A.cleft[s], A.ncand[s], min_leaf, r0, 0, goes)
                    keep = best == A.choice[v]
                kind = _REHASH if keep else _MAKE_STALE
        if kind == _MAKE_STALE:
            A.n[v] = old_n  # the subtree's leaves are read (and counted dead) as they are
        if n_acts >= acts.shape[0]:
            acts = _grow2(acts, 2 * acts.shape[0])
        acts[n_acts, 0], acts[n_acts, 1], acts[n_acts, 2] = kind, v, parent
        acts[n_acts, 3], acts[n_acts, 4], acts[n_acts, 5], acts[n_acts, 6] = side, a, b, old_n
        n_acts += 1
        if kind != _REHASH:
            continue
        f, th = A.feat[v], A.thr[v]
        i, e = a, b - 1
        while i <= e:
            if A.codes[work[i], f] <= th:
                i += 1
            else:
                tmp = work[i]
                work[i] = work[e]
                work[e] = tmp
                e -= 1
        if sp + 2 > cap:
            cap *= 2
            st_v = _grow(st_v, cap)
            st_parent = _grow(st_parent, cap)
            st_side = _grow(st_side, cap)
            st_depth = _grow(st_depth, cap)
            st_a = _grow(st_a, cap)
            st_b = _grow(st_b, cap)
        for side_, ca, cb in ((1, i, b), (0, a, i)):
            if cb > ca:
                st_v[sp] = A.right[v] if side_ == 1 else A.left[v]
                st_parent[sp], st_side[sp], st_depth[sp] = v, side_, depth + 1
                st_a[sp], st_b[sp] = ca, cb
                sp += 1
    return acts, n_acts


@_jit
def batch_needs(acts, n_acts):
    """(nodes, perm entries) that carrying out a plan may take: a node per new stale node,
    and the rows it copies (at most the node's rows and the batch's there)."""
    n_stale = 0
    rows_needed = 0
    for i in range(n_acts):
        if acts[i, 0] == _MAKE_STALE:
            n_stale += 1
        if acts[i, 0] != _REHASH:
            rows_needed += acts[i, 6] + acts[i, 5] - acts[i, 4]
    return n_stale, rows_needed


@_jit
def apply_batch_tree(A, t, sgn, work, acts, n_acts, mark, buf):
    """The second half (serial: it allocates): carry out tree t's plan — rows dropped
    (``mark`` flags them) or added (work[a:b]) at stale nodes and kept leaves, stale nodes
    made and linked, kept nodes rehashed bottom-up. Returns 0, or FAIL with nothing done
    when the arrays may not hold it (grow, and call again)."""
    n_stale, rows_needed = batch_needs(acts, n_acts)
    if A.top[0] + n_stale > A.feat.shape[0] or A.top[2] + rows_needed > A.perm.shape[0]:
        return FAIL
    for i in range(n_acts):
        kind, v, parent, side = acts[i, 0], acts[i, 1], acts[i, 2], acts[i, 3]
        a, b, old_n = acts[i, 4], acts[i, 5], acts[i, 6]
        if kind == _KEEP_STALE or kind == _KEEP_LEAF:
            _change_rows(A, v, work, a, b, sgn, old_n, mark)
            if kind == _KEEP_LEAF:
                _leaf_hash(A, v)
        elif kind == _MAKE_STALE:
            new = _stale_batch(A, v, work, a, b, sgn, mark, buf)
            if parent < 0:
                A.roots[t] = new
            elif side == 0:
                A.left[parent] = new
            else:
                A.right[parent] = new
    for i in range(n_acts - 1, -1, -1):
        if acts[i, 0] == _REHASH:
            _node_hash(A, acts[i, 1])
    return 0


@_jit
def _mark_stale(A, v, r, sgn, buf):
    """Replace the subtree at v by a new STALE node holding its rows, row r dropped (sgn =
    -1) or added (1): a perm range and counts, as a leaf keeps them. Returns the new node, or
    FAIL (nothing changed) when the node or perm array is full."""
    if A.top[0] + 1 > A.feat.shape[0] or A.top[2] + A.n[v] + 1 > A.perm.shape[0]:
        return FAIL
    m = _collect(A, v, buf, r if sgn < 0 else -1, _NO_MARK)
    if sgn > 0:
        buf[m] = r
        m += 1
    new = _new_stale(A, v, buf, m)
    _add_row(A.counts, new, A, r, sgn)
    return new


@_jit
def _rebuild_stale(A, v, depth, seed, lo, hi, buf, expand):
    """Build stale node v's subtree from the rows it holds (FAIL when an array is full:
    nothing committed); v becomes dead. Returns the new subtree's root."""
    m = A.n[v]
    for i in range(m):
        buf[i] = A.perm[A.lstart[v] + i]
    new = build(A, buf, 0, m, depth, seed, lo, hi, expand)
    if new < 0:
        return FAIL
    _kill(A, v)
    return new


@_jit
def flush_tree(A, t, lo0, hi0, buf):
    """Rebuild every stale node of tree t, then recompute the tree's hashes bottom-up.
    Returns 0, or FAIL when an array is full (the nodes rebuilt so far stay rebuilt: call
    again after growing)."""
    d = lo0.shape[0]
    cap = 64
    st_v = np.empty(cap, np.int64)
    st_parent = np.empty(cap, np.int64)
    st_side = np.empty(cap, np.int64)
    st_depth = np.empty(cap, np.int64)
    st_seed = np.empty(cap, np.uint64)
    st_lo = np.empty((cap, d), np.int32)
    st_hi = np.empty((cap, d), np.int32)
    st_v[0], st_parent[0], st_side[0], st_depth[0], st_seed[0] = A.roots[t], -1, 0, 0, A.seeds[t]
    st_lo[0] = lo0
    st_hi[0] = hi0
    sp = 1
    order = np.empty(64, np.int64)
    n_order = 0
    while sp > 0:
        sp -= 1
        v, parent, side = st_v[sp], st_parent[sp], st_side[sp]
        if A.feat[v] == STALE:
            new = _rebuild_stale(A, v, st_depth[sp], st_seed[sp], st_lo[sp], st_hi[sp], buf, False)
            if new < 0:
                return FAIL
            if parent < 0:
                A.roots[t] = new
            elif side == 0:
                A.left[parent] = new
            else:
                A.right[parent] = new
            v = new
        if n_order >= order.shape[0]:
            order = _grow(order, 2 * order.shape[0])
        order[n_order] = v
        n_order += 1
        f = A.feat[v]
        if f < 0:
            continue
        if sp + 2 > cap:
            cap *= 2
            st_v = _grow(st_v, cap)
            st_parent = _grow(st_parent, cap)
            st_side = _grow(st_side, cap)
            st_depth = _grow(st_depth, cap)
            st_seed = _grow(st_seed, cap)
            st_lo = _grow2(st_lo, cap)
            st_hi = _grow2(st_hi, cap)
        here = sp  # the popped entry's ranges are still in slot ``sp``: copy before reuse
        for side_ in (1, 0):
            st_lo[sp + 1 - side_] = st_lo[here]
            st_hi[sp + 1 - side_] = st_hi[here]
        depth, seed, th = st_depth[here], st_seed[here], A.thr[v]
        for side_ in (1, 0):
            j = sp + 1 - side_
            st_v[j] = A.right[v] if side_ == 1 else A.left[v]
            st_parent[j], st_side[j], st_depth[j] = v, side_, depth + 1
            st_seed[j] = child_seed(seed, side_)
            if side_ == 0:
                st_hi[j, f] = th
            else:
                st_lo[j, f] = th + 1
        sp += 2
    # every internal node after its children: reverse preorder
    for i in range(n_order - 1, -1, -1):
        if A.feat[order[i]] >= 0:
            _node_hash(A, order[i])
    return 0


@_jit
def flush_rows(A, codes, start_row, lo0, hi0, buf, path, budget):
    """Build the stale nodes on the paths of rows with these bin codes (what a prediction
    of them reads), rows[start_row:] in every tree, rehashing each rebuilt node's ancestors:
    whole subtrees while the rows rebuilt stay within ``budget``, then one node at a time
    (``build(expand=True)``: a stale node becomes its split over two stale children, so a
    path costs its nodes' rows, not whole subtrees). Whole rebuilds leave nothing stale for
    later forgets to walk into (a stale node drops a row by a scan of its rows); node at a
    time bounds the wait after a batch that left much of the forest stale.
    Returns -1 when done, else the index i * trees + t of the (row, tree) that found an
    array full: grow, and call again from there."""
    T = A.roots.shape[0]
    lo = lo0.copy()
    hi = hi0.copy()
    for i in range(start_row, codes.shape[0]):
        for t in range(T):
            lo[:] = lo0
            hi[:] = hi0
            v = A.roots[t]
            depth = 0
            seed = A.seeds[t]
            while True:
                if A.feat[v] == STALE:
                    whole = A.n[v] <= budget
                    if whole:
                        budget -= A.n[v]
                    new = _rebuild_stale(A, v, depth, seed, lo, hi, buf, not whole)
                    if new < 0:
                        return i * T + t
                    if depth == 0:
                        A.roots[t] = new
                    else:
                        u = path[depth - 1]
                        if codes[i, A.feat[u]] <= A.thr[u]:
                            A.left[u] = new
                        else:
                            A.right[u] = new
                    for j in range(depth - 1, -1, -1):
                        _node_hash(A, path[j])
                    v = new
                f = A.feat[v]
                if f < 0:
                    break
                path[depth] = v
                if codes[i, f] <= A.thr[v]:
                    hi[f] = A.thr[v]
                    v = A.left[v]
                    seed = child_seed(seed, 0)
                else:
                    lo[f] = A.thr[v] + 1
                    v = A.right[v]
                    seed = child_seed(seed, 1)
                depth += 1
    return -1


@_jit
def _leaf_of(A, t, code_row):
    """The leaf of tree t that a row with these bin codes falls in."""
    v = A.roots[t]
    while A.feat[v] >= 0:
        if code_row[A.feat[v]] <= A.thr[v]:
            v = A.left[v]
        else:
            v = A.right[v]
    return v


@_jit
def predict(A, codes):
    """Mean over trees of each leaf's class distribution counts / n (trees summed in
    order); regression: of each leaf's mean quantized target, one column."""
    k = A.params[0]
    T = A.roots.shape[0]
    if A.params[5] == 1:
        mean = np.zeros((codes.shape[0], 1), np.float64)
        for i in range(codes.shape[0]):
            for t in range(T):
                v = _leaf_of(A, t, codes[i])
                mean[i, 0] += A.counts[v, 1] / A.n[v]
            mean[i, 0] /= T
        return mean
    out = np.zeros((codes.shape[0], k), np.float64)
    for i in range(codes.shape[0]):
        for t in range(T):
            v = _leaf_of(A, t, codes[i])
            inv = A.n[v]
            for c in range(k):
                out[i, c] += A.counts[v, c] / inv
        for c in range(k):
            out[i, c] /= T
    return out


@_jit
def serialize(A, t, out):
    """Tree t in preorder, 3 + k int64 per node (feature, threshold, rows, class counts);
    returns the number of values written (the canonical form of a structure)."""
    k = A.params[0]
    m = 0
    stack = np.empty(64, np.int64)
    stack[0] = A.roots[t]
    sp = 1
    while sp > 0:
        sp -= 1
        u = stack[sp]
        out[m] = A.feat[u]
        out[m + 1] = A.thr[u] if A.feat[u] >= 0 else 0
        out[m + 2] = A.n[u]
        for c in range(k):
            out[m + 3 + c] = A.counts[u, c]
        m += 3 + k
        if A.feat[u] >= 0:
            if sp + 2 > stack.shape[0]:
                stack = _grow(stack, 2 * stack.shape[0])
            stack[sp] = A.right[u]
            stack[sp + 1] = A.left[u]
            sp += 2
    return m


@_jit
def compact(A, B):
    """Copy every tree's live nodes, slots and leaf rows from A into the empty arrays B in
    preorder (dropping what rebuilds left dead)."""
    B.top[:] = 0
    copy_trees(A, B, 0, A.roots.shape[0])


@_jit
def copy_trees(A, B, t0, t1):
    """Append trees t0..t1-1 of A — their live nodes, slots and leaf rows, in preorder — to B
    after what B holds (B.top), and point B.roots there. B has room for them (the caller
    sized it). Children stay numbered after their parents, as a build numbers them."""
    k = A.params[0]
    nb = B.top[0]
    ns = B.top[1]
    npm = B.top[2]
    stack = np.empty(64, np.int64)
    parent = np.empty(64, np.int64)
    for t in range(t0, t1):
        stack[0] = A.roots[t]
        parent[0] = -1
        sp = 1
        while sp > 0:
            sp -= 1
            u, p = stack[sp], parent[sp]
            v = nb
            nb += 1
            if p < 0:
                B.roots[t] = v
            elif p >= 0 and B.left[p] == -2:
                B.left[p] = v
            else:
                B.right[p] = v
            B.feat[v], B.thr[v], B.n[v] = A.feat[u], A.thr[u], A.n[u]
            B.hash[v, 0], B.hash[v, 1] = A.hash[u, 0], A.hash[u, 1]
            B.choice[v] = A.choice[u]
            for c in range(k):
                B.counts[v, c] = A.counts[u, c]
            s = A.slot[u]
            B.slot[v] = -1
            if s >= 0:
                B.slot[v] = ns
                B.ncand[ns] = A.ncand[s]
                B.cfeat[ns] = A.cfeat[s]
                B.cthr[ns] = A.cthr[s]
                B.cleft[ns] = A.cleft[s]
                ns += 1
            if A.feat[u] < 0:
                if A.feat[u] == STALE:
                    B.top[6] += 1
                B.left[v] = -1
                B.right[v] = -1
                B.lstart[v] = npm
                for i in range(A.lstart[u], A.lstart[u] + A.n[u]):
                    B.perm[npm] = A.perm[i]
                    npm += 1
            else:
                B.left[v] = -2
                B.right[v] = -2
                B.lstart[v] = -1
                if sp + 2 > stack.shape[0]:
                    stack = _grow(stack, 2 * stack.shape[0])
                    parent = _grow(parent, 2 * parent.shape[0])
                stack[sp], parent[sp] = A.right[u], v
                stack[sp + 1], parent[sp + 1] = A.left[u], v
                sp += 2
    B.top[0], B.top[1], B.top[2] = nb, ns, npm


@_jit
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
