"""One row's change: forgetting (sgn = -1) or inserting (1) a stored row, walked down every
tree.

Why a module of its own: this is the path a one-row forget or insert takes, and the cost it
must keep small. In each tree the row's path is walked from the root; every node that keeps
a candidate cache re-evaluates its choice from its cached integer counts with the row's
change applied (:func:`._splitting.choose`), never from its rows. A node whose choice stands
takes the change into its counts and cache and the walk goes on; the first node whose choice
(or leaf-ness) changes, or that keeps no cache, becomes a stale node holding its rows after
the change (:mod:`._stale`); a leaf or stale node reached drops or gains the row. The path's
hashes are then recomputed. Many rows at once take :mod:`._batches` instead.

Buffers (shared by every call of a forest, sized by the caller): ``buf`` (rows + 1,) int32
receives a replaced subtree's rows; ``path`` (≥ depth + 1,) int64 the walked nodes; ``goes``
(K,) bool whether the row goes left at each of a node's candidates. All three are scratch:
nothing is read from them between calls.
"""

from __future__ import annotations

import numpy as np

from ._arrays import (
    FAIL,
    P_CANDIDATES,
    P_MAX_DEPTH,
    P_MIN_LEAF,
    P_REGRESSION,
    STALE,
    TOP_DEAD_PERM,
    TOP_PERM,
    jit,
)
from ._grower import leaf_hash, node_hash
from ._splitting import add_row, choose, max_count, stop_rule
from ._stale import mark_stale

_REMOVE, _APPEND, _REBUILD = 0, 1, 2
"""What a walk does where it stops: drop the row from a leaf or stale node, add it to one,
or replace the subtree by a stale node."""


@jit
def goes_left_of(A, s, r, goes):
    """OUT ``goes[j]``: whether row r goes left at candidate j of cache slot s."""
    for j in range(A.ncand[s]):
        goes[j] = A.codes[r, A.cfeat[s, j]] <= A.cthr[s, j]


@jit
def cache_row(A, v, r, sgn, goes):
    """Add (sgn = 1) or remove (-1) row r in node v's candidate cache, if any."""
    s = A.slot[v]
    if s < 0:
        return
    goes_left_of(A, s, r, goes)
    cache_goes(A, s, r, sgn, goes)


@jit
def cache_goes(A, s, r, sgn, goes):
    """Add (sgn = 1) or remove (-1) row r in cache slot s, whose candidates it goes left at
    where ``goes`` says: one multiply-add per candidate, no branch (half of them would be
    mispredicted)."""
    cleft = A.cleft[s]
    if A.params[P_REGRESSION] == 1:
        q = sgn * A.y[r]
        for j in range(A.ncand[s]):
            g = np.int32(goes[j])
            cleft[j, 0] += sgn * g
            cleft[j, 1] += q * g
    else:
        c = A.y[r]
        for j in range(A.ncand[s]):
            cleft[j, c] += sgn * np.int32(goes[j])


@jit
def update_tree(A, t, r, sgn, buf, path, goes):
    """Add (sgn = 1) or remove (sgn = -1) stored row r in tree t: re-evaluate the choice at
    each cached node on its path; the first subtree whose choice (or leaf-ness) changes, or
    whose node keeps no cache, becomes a STALE node holding its rows (rebuilt when read); a
    stale node on the path just drops or gains the row. A node that keeps its choice takes
    the change into its counts and cache on the way down (its candidates' sides are read
    once). Returns 0, or FAIL with tree t untouched (those changes undone) when an array is
    full. ``goes`` is scratch of length K."""
    min_leaf, max_depth = A.params[P_MIN_LEAF], A.params[P_MAX_DEPTH]
    v = A.roots[t]
    depth = 0
    action = _REBUILD
    while True:
        if A.feat[v] == STALE:  # rows only, rebuilt when read: drop or add the row
            action = _REMOVE if sgn < 0 else _APPEND
            break
        n_after = A.n[v] + sgn
        stops = stop_rule(max_count(A, v, r, sgn), n_after, depth, min_leaf, max_depth)
        s = A.slot[v]
        if A.feat[v] < 0:
            keep = stops
            if not stops and s >= 0:
                goes_left_of(A, s, r, goes)
                n_c = A.ncand[s]
                node = (A.counts[v], n_after, A.cleft[s], n_c)
                keep = choose(A, node, min_leaf, (r, sgn, goes)) < 0
            action = (_REMOVE if sgn < 0 else _APPEND) if keep else _REBUILD
            break
        if s < 0 or stops:
            action = _REBUILD
            break
        goes_left_of(A, s, r, goes)
        node = (A.counts[v], n_after, A.cleft[s], A.ncand[s])
        best = choose(A, node, min_leaf, (r, sgn, goes))
        if best != A.choice[v]:
            action = _REBUILD
            break
        # v keeps its choice: its counts and cache take the change now
        A.n[v] = n_after
        add_row(A.counts, v, A, r, sgn)
        cache_goes(A, s, r, sgn, goes)
        path[depth] = v
        v = A.left[v] if A.codes[r, A.feat[v]] <= A.thr[v] else A.right[v]
        depth += 1
    # the change at v: the step that may fail for want of room
    new = v
    if action == _REBUILD:
        new = mark_stale(A, v, r, sgn, buf)
    elif action == _APPEND and A.top[TOP_PERM] + A.n[v] + 1 > A.perm.shape[0]:
        new = FAIL
    if new < 0:
        for i in range(depth):  # undo the ancestors' counts and caches
            u = path[i]
            A.n[u] -= sgn
            add_row(A.counts, u, A, r, -sgn)
            cache_row(A, u, r, -sgn, goes)
        return FAIL
    if action == _APPEND:
        m = A.n[v]
        start = A.top[TOP_PERM]
        for i in range(m):
            A.perm[start + i] = A.perm[A.lstart[v] + i]
        A.perm[start + m] = r
        A.top[TOP_PERM] += m + 1
        A.top[TOP_DEAD_PERM] += m
        A.lstart[v] = start
        A.n[v] += 1
        add_row(A.counts, v, A, r, 1)
        leaf_hash(A, v)
        cache_row(A, v, r, 1, goes)
    elif action == _REMOVE:
        base, m = A.lstart[v], A.n[v]
        for i in range(base, base + m):
            if A.perm[i] == r:
                A.perm[i] = A.perm[base + m - 1]
                break
        A.n[v] -= 1
        add_row(A.counts, v, A, r, -1)
        A.top[TOP_DEAD_PERM] += 1
        leaf_hash(A, v)
        cache_row(A, v, r, -1, goes)
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
        node_hash(A, path[i])
    return 0


@jit
def update_rows(A, rows, sgn, start_row, start_tree, buf, path):
    """update_tree for rows[start_row:] over every tree (from start_tree for the first).
    Returns -1 when done, else the index i * trees + t of the (row, tree) that found an
    array full: grow, and call again from there."""
    T = A.roots.shape[0]
    goes = np.zeros(A.params[P_CANDIDATES], np.bool_)
    for i in range(start_row, rows.shape[0]):
        for t in range(start_tree if i == start_row else 0, T):
            if update_tree(A, t, rows[i], sgn, buf, path, goes) < 0:
                return i * T + t
    return -1
