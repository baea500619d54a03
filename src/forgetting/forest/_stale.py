"""Stale subtrees: a subtree replaced by one STALE node holding its rows (what a change does
when a node's choice flips), and stale nodes built again when something reads them.

Why a module of its own: staleness is how a forget or insert stays cheap. A change walks the
rows' paths (:mod:`._updates`, :mod:`._batches`) and, where a node's choice changes, only
copies the subtree's rows into a stale node (:func:`new_stale`); the build is paid by the
first prediction that reaches it (:func:`flush_rows`) or by whatever reads the whole
structure (:func:`flush_tree`). Building a stale node then, from the rows it holds then,
gives what building it at each change would have (:mod:`._grower`). A replaced subtree's
nodes, slots and perm entries are counted dead (:func:`kill`) for a later compaction
(:mod:`._copying`).

Buffers: ``lo0``, ``hi0`` (d,) int32 IN, a root's feasible codes (0 and nbins per feature:
the NaN code is a bin too); ``buf`` (rows + 1,) int32 and ``path`` (≥ depth + 1,) int64 are
scratch (a subtree's rows; the nodes above the one being built), read by nothing between
calls; ``mark`` (rows,) uint8 IN flags the rows a batch removes (empty: none).
"""

from __future__ import annotations

import numpy as np

from ._arrays import (
    FAIL,
    STALE,
    TOP_DEAD_NODES,
    TOP_DEAD_PERM,
    TOP_DEAD_SLOTS,
    TOP_NODES,
    TOP_PERM,
    TOP_STALE,
    grow,
    grow2,
    jit,
)
from ._grower import build, node_hash
from ._predictor import predict
from ._splitting import add_row, child_seed

_NO_MARK = np.zeros(0, np.uint8)


@jit
def collect(A, v, buf, skip, mark):
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
                stack = grow(stack, 2 * stack.shape[0])
            stack[sp] = A.right[u]
            stack[sp + 1] = A.left[u]
            sp += 2
    return m


@jit
def kill(A, v):
    """Count the nodes, slots and perm entries of the subtree at v as dead."""
    stack = np.empty(64, np.int64)
    stack[0] = v
    sp = 1
    while sp > 0:
        sp -= 1
        u = stack[sp]
        A.top[TOP_DEAD_NODES] += 1
        if A.feat[u] == STALE:
            A.top[TOP_STALE] -= 1
        if A.slot[u] >= 0:
            A.top[TOP_DEAD_SLOTS] += 1
        if A.feat[u] < 0:
            A.top[TOP_DEAD_PERM] += A.n[u]
        else:
            if sp + 2 > stack.shape[0]:
                stack = grow(stack, 2 * stack.shape[0])
            stack[sp] = A.right[u]
            stack[sp + 1] = A.left[u]
            sp += 2


@jit
def new_stale(A, v, buf, m):
    """A new STALE node in place of the subtree at v: v's counts, the m rows buf[:m] in a
    fresh perm range (a leaf's layout); v's subtree is counted dead. Returns the new node."""
    new = A.top[TOP_NODES]
    A.top[TOP_NODES] += 1
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
    start = A.top[TOP_PERM]
    A.lstart[new] = start
    for i in range(m):
        A.perm[start + i] = buf[i]
    A.top[TOP_PERM] += m
    kill(A, v)
    A.top[TOP_STALE] += 1
    return new


@jit
def mark_stale(A, v, r, sgn, buf):
    """Replace the subtree at v by a new STALE node holding its rows, row r dropped (sgn =
    -1) or added (1): a perm range and counts, as a leaf keeps them. Returns the new node, or
    FAIL (nothing changed) when the node or perm array is full."""
    if A.top[TOP_NODES] + 1 > A.feat.shape[0] or A.top[TOP_PERM] + A.n[v] + 1 > A.perm.shape[0]:
        return FAIL
    m = collect(A, v, buf, r if sgn < 0 else -1, _NO_MARK)
    if sgn > 0:
        buf[m] = r
        m += 1
    new = new_stale(A, v, buf, m)
    add_row(A.counts, new, A, r, sgn)
    return new


@jit
def rebuild_stale(A, v, place, buf, expand):
    """Build stale node v's subtree from the rows it holds, at its ``place`` (depth, seed,
    lo, hi: :func:`._grower.build`), FAIL when an array is full (nothing committed); v
    becomes dead. Returns the new subtree's root."""
    m = A.n[v]
    for i in range(m):
        buf[i] = A.perm[A.lstart[v] + i]
    # in slot order, as a fit reads them: the build's passes over the rows' codes then walk
    # memory forwards instead of jumping (a subtree is a function of its rows' set, so the
    # bits do not change; a stale node's rows are in leaf order, and 120,000 of them read
    # out of order cost a one-row prediction on flights ~80 ms)
    buf[:m].sort()
    new = build(A, buf, 0, m, place, expand)
    if new < 0:
        return FAIL
    kill(A, v)
    return new


@jit
def flush_tree(A, t, ranges, buf):
    """Rebuild every stale node of tree t, then recompute the tree's hashes bottom-up.
    ``ranges`` = (lo0, hi0): the root's feasible codes. Returns 0, or FAIL when an array is
    full (the nodes rebuilt so far stay rebuilt: call again after growing)."""
    lo0, hi0 = ranges
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
            place = (st_depth[sp], st_seed[sp], st_lo[sp], st_hi[sp])
            new = rebuild_stale(A, v, place, buf, False)
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
            order = grow(order, 2 * order.shape[0])
        order[n_order] = v
        n_order += 1
        f = A.feat[v]
        if f < 0:
            continue
        if sp + 2 > cap:
            cap *= 2
            st_v = grow(st_v, cap)
            st_parent = grow(st_parent, cap)
            st_side = grow(st_side, cap)
            st_depth = grow(st_depth, cap)
            st_seed = grow(st_seed, cap)
            st_lo = grow2(st_lo, cap)
            st_hi = grow2(st_hi, cap)
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
            node_hash(A, order[i])
    return 0


@jit
def flush_rows(A, codes, start_row, ranges, scratch, budget, whole_rows):
    """Build the stale nodes on the paths of rows with these bin codes (what a prediction
    of them reads), rows[start_row:] in every tree, rehashing each rebuilt node's ancestors:
    whole subtrees while the rows rebuilt stay within ``budget``, then one node at a time
    (``build(expand=True)``: a stale node becomes its split over two stale children, so a
    path costs its nodes' rows, not whole subtrees). A stale node of more than
    ``whole_rows`` rows is always built one node at a time: its split costs its rows once,
    a whole rebuild about their number times the depth, so one forget that flipped a node
    high in a tree does not make the next prediction wait for that whole subtree. Whole
    rebuilds leave nothing stale for later forgets to walk into (a stale node drops a row
    by a scan of its rows); node at a time bounds the wait.

    IN: ``codes`` (n, d) uint8 the rows' bin codes; ``ranges`` = (lo0, hi0) the root's
    feasible codes; ``budget`` rows that whole rebuilds may take in all, ``whole_rows``
    the most rows of one stale node built whole. SCRATCH: ``scratch`` = (buf, path).
    Returns -1 when done, else the index i * trees + t of the (row, tree) that found an
    array full: grow, and call again from there."""
    lo0, hi0 = ranges
    buf, path = scratch
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
                    whole = A.n[v] <= budget and A.n[v] <= whole_rows
                    if whole:
                        budget -= A.n[v]
                    new = rebuild_stale(A, v, (depth, seed, lo, hi), buf, not whole)
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
                        node_hash(A, path[j])
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


@jit
def flush_rows_predict(A, codes, start_row, ranges, scratch, budget, whole_rows):
    """:func:`flush_rows`, then the prediction of the same rows (:func:`._predictor.predict`)
    in the same compiled call: a one-row prediction after a change pays one call's unboxing
    of ``A`` instead of two. Returns (-1, the predictions), or (what :func:`flush_rows`
    returned, an empty array) when an array is full: grow, and call again from there."""
    stop = flush_rows(A, codes, start_row, ranges, scratch, budget, whole_rows)
    if stop >= 0:
        return stop, np.zeros((0, 1), np.float64)
    return -1, predict(A, codes)
