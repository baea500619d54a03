"""Whole-structure reads and copies: a tree's canonical serialization, compaction, and the
copy of trees from one set of arrays into another.

Why a module of its own: these walk whole trees and write nothing a forget reads; they run
when a fit's per-core chunks are joined into one set of arrays (:func:`copy_trees`), when
rebuilds have left enough dead entries to be worth dropping (:func:`compact`), and when a
test or a digest needs a tree's exact form (:func:`serialize`).
"""

from __future__ import annotations

import numpy as np

from ._arrays import P_CLASSES, STALE, TOP_NODES, TOP_PERM, TOP_SLOTS, TOP_STALE, grow, jit

_UNSET = -2
"""A copied internal node's child not copied yet (:func:`copy_trees`)."""


@jit
def serialize(A, t, out):
    """Tree t in preorder, 3 + k int64 per node (feature, threshold, rows, class counts);
    returns the number of values written (the canonical form of a structure)."""
    k = A.params[P_CLASSES]
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
                stack = grow(stack, 2 * stack.shape[0])
            stack[sp] = A.right[u]
            stack[sp + 1] = A.left[u]
            sp += 2
    return m


@jit
def compact(A, B):
    """Copy every tree's live nodes, slots and leaf rows from A into the empty arrays B in
    preorder (dropping what rebuilds left dead)."""
    B.top[:] = 0
    copy_trees(A, B, 0, A.roots.shape[0])


@jit
def copy_trees(A, B, t0, t1):
    """Append trees t0..t1-1 of A — their live nodes, slots and leaf rows, in preorder — to B
    after what B holds (B.top), and point B.roots there. B has room for them (the caller
    sized it). Children stay numbered after their parents, as a build numbers them."""
    k = A.params[P_CLASSES]
    nb = B.top[TOP_NODES]
    ns = B.top[TOP_SLOTS]
    npm = B.top[TOP_PERM]
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
            elif p >= 0 and B.left[p] == _UNSET:
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
                    B.top[TOP_STALE] += 1
                B.left[v] = -1
                B.right[v] = -1
                B.lstart[v] = npm
                for i in range(A.lstart[u], A.lstart[u] + A.n[u]):
                    B.perm[npm] = A.perm[i]
                    npm += 1
            else:
                B.left[v] = _UNSET
                B.right[v] = _UNSET
                B.lstart[v] = -1
                if sp + 2 > stack.shape[0]:
                    stack = grow(stack, 2 * stack.shape[0])
                    parent = grow(parent, 2 * parent.shape[0])
                stack[sp], parent[sp] = A.right[u], v
                stack[sp + 1], parent[sp + 1] = A.left[u], v
                sp += 2
    B.top[TOP_NODES], B.top[TOP_SLOTS], B.top[TOP_PERM] = nb, ns, npm
