"""Growth: a subtree built from its rows, exactly as a fit builds it, and the Merkle hashes
that say what a subtree is.

Why a module of its own: :func:`build` is the one definition of a subtree. A fit calls it per
tree; a rebuild of a stale node (:mod:`._stale`) calls it on the rows the node holds then.
A subtree is a function of its rows, depth, seed and feasible code ranges — candidates are
seeded by the node's path, gains are computed from integer counts in a fixed order
(:mod:`._splitting`) — so it is the same bits whoever builds it, whenever, wherever its nodes
land in the arrays.
"""

from __future__ import annotations

import numpy as np

from ._arrays import (
    FAIL,
    GOLD,
    LANE,
    P_CACHE_MIN,
    P_CANDIDATES,
    P_CLASSES,
    P_MAX_DEPTH,
    P_MIN_LEAF,
    P_REGRESSION,
    STALE,
    TOP_NODES,
    TOP_PERM,
    TOP_SLOTS,
    TOP_STALE,
    grow,
    grow2,
    jit,
    mix,
)
from ._splitting import (
    add_row,
    best_candidate,
    best_candidate_mse,
    child_seed,
    draw_candidates,
    stop_rule,
)


@jit
def leaf_hash(A, v):
    """Set ``A.hash[v]`` of leaf v from its counts."""
    h0 = np.uint64(0x1234567)
    h1 = np.uint64(0x7654321)
    for c in range(A.counts.shape[1]):
        h0 = mix(h0 ^ np.uint64(A.counts[v, c]))
        h1 = mix(h1 + np.uint64(A.counts[v, c]) * LANE)
    A.hash[v, 0] = h0
    A.hash[v, 1] = h1


@jit
def node_hash(A, v):
    """Set ``A.hash[v]`` of internal node v from its split and its children's hashes."""
    a, b = A.left[v], A.right[v]
    tag = np.uint64(A.feat[v]) * np.uint64(256) + np.uint64(A.thr[v])
    A.hash[v, 0] = mix(mix(tag ^ A.hash[a, 0]) + A.hash[b, 0] * GOLD)
    A.hash[v, 1] = mix(mix(tag + A.hash[a, 1] * LANE) ^ A.hash[b, 1])


@jit
def build(A, buf, a, b, place, expand=False):
    """Build the subtree of rows buf[a:b] at a node of this place, exactly as a fit builds
    it.

    IN: ``buf[a:b]`` int32 the subtree's stored rows (reordered in place); ``place`` =
    (depth, seed (uint64), lo0, hi0 (d,) int32 the feasible codes): what besides its rows a
    subtree is a function of; ``expand``: build the root only, its children made STALE nodes
    holding their rows (what a prediction that reads one path needs; the rest is built when
    read).
    OUT: the new nodes, cache slots and perm entries appended to A (``A.top``); hashes set.
    Returns the subtree's root, or FAIL when the node, slot or perm arrays are full (then
    nothing is committed: ``A.top`` is unchanged)."""
    k, K, min_leaf = A.params[P_CLASSES], A.params[P_CANDIDATES], A.params[P_MIN_LEAF]
    max_depth, cache_min = A.params[P_MAX_DEPTH], A.params[P_CACHE_MIN]
    depth, seed, lo0, hi0 = place
    d = lo0.shape[0]
    n_nodes, n_slots, n_perm = A.top[TOP_NODES], A.top[TOP_SLOTS], A.top[TOP_PERM]
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
    regression = A.params[P_REGRESSION] == 1
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
            add_row(P2, 0, A, buf[i], 1)
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
        if not stop_rule(pmax, m, dep, min_leaf, max_depth):
            ncand = draw_candidates(sd, lo, hi, K, cf, ct, feas)
            L[:] = 0
            for i in range(na, nb):
                r = buf[i]
                for j in range(ncand):
                    if A.codes[r, cf[j]] <= ct[j]:
                        add_row(L, j, A, r, 1)
            if regression:
                best = best_candidate_mse((P, m, L, ncand), min_leaf, (0, 0, no_left))
            else:
                best = best_candidate((P, m, L, ncand), min_leaf, (0, 0, no_left))
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
                    add_row(A.counts, c, A, buf[j], 1)
                    A.perm[n_perm] = buf[j]
                    n_perm += 1
            new_stale += 2
            continue
        if sp + 2 > cap:
            cap *= 2
            st_a = grow(st_a, cap)
            st_b = grow(st_b, cap)
            st_depth = grow(st_depth, cap)
            st_seed = grow(st_seed, cap)
            st_parent = grow(st_parent, cap)
            st_side = grow(st_side, cap)
            st_lo = grow2(st_lo, cap)
            st_hi = grow2(st_hi, cap)
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
            leaf_hash(A, v)
        else:
            node_hash(A, v)
    A.top[TOP_NODES], A.top[TOP_SLOTS], A.top[TOP_PERM] = n_nodes, n_slots, n_perm
    A.top[TOP_STALE] += new_stale
    return root
