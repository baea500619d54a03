"""Many rows' change at once: a batch forget (sgn = -1) or insert (1) in two halves per tree,
a plan and its application.

Why a module of its own: a batch walks each node on the rows' paths once for all of them,
not once per row, and its first half may run on several cores. :func:`plan_batch_tree` goes
down tree t top-down: every node on the rows' paths takes all their counts (and its
candidate cache their left-side counts) and re-evaluates its choice once; a node whose final
rows choose as before is kept and its children visited, one whose choice differs (or that
keeps no cache) is planned to become one stale node (:mod:`._stale`). It touches tree t's
nodes only and allocates nothing in A, so trees are planned in parallel.
:func:`apply_batch_tree` then carries each plan out, tree after tree (it appends to the
shared arrays). Equal to :mod:`._updates` row after row: a kept node is what its final rows
choose (a choice is a function of its counts), a stale one is built from its final rows when
read.

A plan is an (actions, ACT_SIZE) int64 array, one row per node visited, in preorder; its
columns are the ACT_* constants below.
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
    TOP_NODES,
    TOP_PERM,
    grow,
    grow2,
    jit,
)
from ._grower import leaf_hash, node_hash
from ._splitting import add_row, choose, max_count, stop_rule
from ._stale import collect, new_stale

_KEEP_STALE, _KEEP_LEAF, _MAKE_STALE, _REHASH = 0, 1, 2, 3
"""Actions of a plan: a stale node drops or gains rows; a kept leaf drops or gains rows; a
subtree becomes one stale node; a kept internal node is rehashed."""

ACT_KIND = 0
"""The action (_KEEP_STALE, _KEEP_LEAF, _MAKE_STALE or _REHASH)."""
ACT_NODE = 1
"""The node it acts on."""
ACT_PARENT = 2
"""Its parent, -1 for the root."""
ACT_SIDE = 3
"""0 when it is its parent's left child, 1 when the right."""
ACT_A = 4
ACT_B = 5
"""The rows of the batch that reach it: ``work[a:b]``."""
ACT_OLD_N = 6
"""Its rows before the batch."""
ACT_SIZE = 7


@jit
def cache_rows(A, s, work, a, b, sgn):
    """Add (sgn = 1) or remove (-1) rows work[a:b] in candidate-cache slot s (the batch's
    inner loop: one compare and one add per row and candidate, no branch)."""
    cf, ct, cleft, nc = A.cfeat[s], A.cthr[s], A.cleft[s], A.ncand[s]
    if A.params[P_REGRESSION] == 1:
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


@jit
def change_rows(A, v, batch, a, b, old_n):
    """The leaf or stale node v (whose counts already hold the change) drops the marked rows
    (sgn = -1: compacted in place) or gains work[a:b] (1: copied to a new perm range after
    its old_n rows); ``batch`` = (sgn, work, mark) (:func:`apply_batch_tree`)."""
    sgn, work, mark = batch
    base = A.lstart[v]
    if sgn < 0:
        w = base
        for i in range(base, base + old_n):
            r = A.perm[i]
            if mark[r] == 0:
                A.perm[w] = r
                w += 1
        A.top[TOP_DEAD_PERM] += old_n - (w - base)
        return
    start = A.top[TOP_PERM]
    for i in range(old_n):
        A.perm[start + i] = A.perm[base + i]
    for i in range(a, b):
        A.perm[start + old_n + i - a] = work[i]
    A.top[TOP_PERM] += old_n + b - a
    A.top[TOP_DEAD_PERM] += old_n
    A.lstart[v] = start


@jit
def stale_batch(A, v, batch, a, b, buf):
    """Replace the subtree at v (its counts already changed) by a STALE node holding its
    rows after the change: without the marked rows (sgn = -1), or with work[a:b] (1);
    ``batch`` = (sgn, work, mark) (:func:`apply_batch_tree`)."""
    sgn, work, mark = batch
    m = collect(A, v, buf, -1, mark)
    if sgn > 0:
        for i in range(a, b):
            buf[m] = work[i]
            m += 1
    return new_stale(A, v, buf, m)


@jit
def plan_batch_tree(A, t, rows, sgn, work):
    """The first half of removing (sgn = -1) or adding (1) the stored rows ``rows`` in tree t
    at once, top-down: every node on their paths takes all their counts (and its candidate
    cache the rows' left counts), then re-evaluates its choice once. A node whose final rows
    choose as before (leaf-ness included) is kept and its children visited; one whose choice
    differs, or that keeps no cache, is planned to become one STALE node holding its final
    rows. Equal to :func:`._updates.update_tree` row after row: a kept node is what its final rows
    choose (the choice is a function of its counts), a stale one is rebuilt from its final
    rows when read. Touches only tree t's nodes (trees may be planned in parallel) and
    reorders ``work`` (the rows, grouped by node).

    IN: ``rows`` (B,) int32 the stored rows of the batch. OUT: ``work`` (B,) int32 the rows
    grouped by the node they reach; tree t's counts and caches hold the batch.
    Returns (actions, count): the plan's rows (ACT_* columns), in preorder, for
    :func:`apply_batch_tree`."""
    B = rows.shape[0]
    min_leaf, max_depth = A.params[P_MIN_LEAF], A.params[P_MAX_DEPTH]
    goes = np.zeros(A.params[P_CANDIDATES], np.bool_)
    for i in range(B):
        work[i] = rows[i]
    acts = np.empty((64, ACT_SIZE), np.int64)
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
            add_row(A.counts, v, A, work[i], sgn)
        if A.feat[v] == STALE:
            kind = _KEEP_STALE
        else:
            s = A.slot[v]
            if s >= 0:
                cache_rows(A, s, work, a, b, sgn)
            r0 = work[a]
            n_v = A.n[v]
            stops = stop_rule(max_count(A, v, r0, 0), n_v, depth, min_leaf, max_depth)
            if A.feat[v] < 0:
                keep = stops
                if not stops and s >= 0:
                    node = (A.counts[v], n_v, A.cleft[s], A.ncand[s])
                    keep = choose(A, node, min_leaf, (r0, 0, goes)) < 0
                kind = _KEEP_LEAF if keep else _MAKE_STALE
            else:
                keep = s >= 0 and not stops
                if keep:
                    node = (A.counts[v], n_v, A.cleft[s], A.ncand[s])
                    best = choose(A, node, min_leaf, (r0, 0, goes))
                    keep = best == A.choice[v]
                kind = _REHASH if keep else _MAKE_STALE
        if kind == _MAKE_STALE:
            A.n[v] = old_n  # the subtree's leaves are read (and counted dead) as they are
        if n_acts >= acts.shape[0]:
            acts = grow2(acts, 2 * acts.shape[0])
        acts[n_acts, ACT_KIND], acts[n_acts, ACT_NODE], acts[n_acts, ACT_PARENT] = kind, v, parent
        acts[n_acts, ACT_SIDE], acts[n_acts, ACT_A], acts[n_acts, ACT_B] = side, a, b
        acts[n_acts, ACT_OLD_N] = old_n
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
            st_v = grow(st_v, cap)
            st_parent = grow(st_parent, cap)
            st_side = grow(st_side, cap)
            st_depth = grow(st_depth, cap)
            st_a = grow(st_a, cap)
            st_b = grow(st_b, cap)
        for side_, ca, cb in ((1, i, b), (0, a, i)):
            if cb > ca:
                st_v[sp] = A.right[v] if side_ == 1 else A.left[v]
                st_parent[sp], st_side[sp], st_depth[sp] = v, side_, depth + 1
                st_a[sp], st_b[sp] = ca, cb
                sp += 1
    return acts, n_acts


@jit
def batch_needs(plan):
    """(nodes, perm entries) that carrying out a ``plan`` = (actions, count) may take: a node
    per new stale node, and the rows it copies (at most the node's rows and the batch's
    there)."""
    acts, n_acts = plan
    n_stale = 0
    rows_needed = 0
    for i in range(n_acts):
        if acts[i, ACT_KIND] == _MAKE_STALE:
            n_stale += 1
        if acts[i, ACT_KIND] != _REHASH:
            rows_needed += acts[i, ACT_OLD_N] + acts[i, ACT_B] - acts[i, ACT_A]
    return n_stale, rows_needed


@jit
def apply_batch_tree(A, t, batch, plan, buf):
    """The second half (serial: it allocates): carry out tree t's plan — rows dropped
    (``mark`` flags them) or added (work[a:b]) at stale nodes and kept leaves, stale nodes
    made and linked, kept nodes rehashed bottom-up.

    IN: ``batch`` = (sgn, work (B,) int32 the rows as :func:`plan_batch_tree` grouped them,
    mark (rows,) uint8 flagging the rows removed, all 0 to add); ``plan`` = (actions, count)
    from :func:`plan_batch_tree`. SCRATCH: ``buf`` (rows + 1,) int32.
    Returns 0, or FAIL with nothing done when the arrays may not hold it (grow, and call
    again)."""
    acts, n_acts = plan
    n_stale, rows_needed = batch_needs(plan)
    if (
        A.top[TOP_NODES] + n_stale > A.feat.shape[0]
        or A.top[TOP_PERM] + rows_needed > A.perm.shape[0]
    ):
        return FAIL
    for i in range(n_acts):
        kind, v, parent = acts[i, ACT_KIND], acts[i, ACT_NODE], acts[i, ACT_PARENT]
        side, a, b, old_n = acts[i, ACT_SIDE], acts[i, ACT_A], acts[i, ACT_B], acts[i, ACT_OLD_N]
        if kind == _KEEP_STALE or kind == _KEEP_LEAF:
            change_rows(A, v, batch, a, b, old_n)
            if kind == _KEEP_LEAF:
                leaf_hash(A, v)
        elif kind == _MAKE_STALE:
            new = stale_batch(A, v, batch, a, b, buf)
            if parent < 0:
                A.roots[t] = new
            elif side == 0:
                A.left[parent] = new
            else:
                A.right[parent] = new
    for i in range(n_acts - 1, -1, -1):
        if acts[i, ACT_KIND] == _REHASH:
            node_hash(A, acts[i, ACT_NODE])
    return 0
