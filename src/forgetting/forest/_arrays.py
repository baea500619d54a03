"""The forest's state as its compiled kernels see it: one bundle of flat arrays that every
tree shares (:class:`Arrays`), the names of the fields inside its two small int64 vectors
(``top``, ``params``), the kernels' shared sentinels and hash mixer, and how the bundle is
allocated and grown.

Why a module of its own: every kernel module (``_splitting``, ``_grower``, ``_stale``,
``_updates``, ``_batches``, ``_predictor``, ``_copying``) reads the same bundle, so what a
field holds is written down once, here. Kernels index ``top`` and ``params`` by the
constants below (``A.top[TOP_NODES]``, never ``A.top[0]``): numba reads module globals as
compile-time constants, so a name costs nothing.

Layout. A node v is a row of the node arrays; its children are numbered after it (a build
numbers them in preorder). An internal node splits on ``codes[r, feat[v]] <= thr[v]``; a
leaf (``feat[v] == -1``) or a stale node (``feat[v] == STALE``) owns the rows
``perm[lstart[v] : lstart[v] + n[v]]``. A node with a candidate cache points at its slot
(``slot[v]``); a slot holds the node's candidates and their left-side counts. ``top`` counts
what the arrays hold: entries below ``top[TOP_NODES]`` (``TOP_SLOTS``, ``TOP_PERM``) are in
use, of which ``TOP_DEAD_*`` are garbage left by rebuilds (a compaction drops them).

Arguments beyond the bundle come in small plain tuples named by what they are — a node's
``place`` (depth, seed, lo, hi), its counts ``node`` (P, n, L, ncand), a row's ``change``
(r, s, goes_left), a ``batch`` (sgn, work, mark) and its ``plan`` (actions, count) — so no
kernel takes more than seven positional arguments; numba unpacks them for free.

numba caches each kernel on disk keyed by its own file, and a kernel's machine code holds
what it calls from the other modules: after editing one of them, clear the forest's
``__pycache__/*.nbi``/``*.nbc`` (or use a fresh ``NUMBA_CACHE_DIR``) before testing. An
installed version replaces every file at once.
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
        "top",  # (TOP_SIZE,) int64 what the arrays hold: TOP_* below
        "roots",  # (trees,) int32
        "seeds",  # (trees,) uint64 root seeds
        "nbins",  # (d,) int32 finite bins per feature (NaN code = nbins)
        "params",  # (PARAMS_SIZE,) int64 the configuration: P_* below
    ],
)

# -- top: what the arrays hold ---------------------------------------------------------------
TOP_NODES = 0
"""Nodes in use (the next node is this one)."""
TOP_SLOTS = 1
"""Candidate-cache slots in use."""
TOP_PERM = 2
"""Perm entries in use."""
TOP_DEAD_NODES = 3
"""Nodes in use that no tree reaches any more (left by rebuilds)."""
TOP_DEAD_SLOTS = 4
"""Slots of dead nodes."""
TOP_DEAD_PERM = 5
"""Perm entries no leaf or stale node owns any more."""
TOP_STALE = 6
"""Stale nodes that trees reach (subtrees left to rebuild when read)."""
TOP_SIZE = 8
"""Length of ``top`` (its last entry is unused)."""

# -- params: the configuration ---------------------------------------------------------------
P_CLASSES = 0
"""k: count channels per node (classes; 2 for regression: rows and the sum of q)."""
P_CANDIDATES = 1
"""K: candidates drawn per node."""
P_MIN_LEAF = 2
"""Rows a leaf holds at least."""
P_MAX_DEPTH = 3
"""Deepest split level, -1 for none."""
P_CACHE_MIN = 4
"""Rows a node needs to keep a candidate cache."""
P_REGRESSION = 5
"""1 for a regression forest (squared-error gain over (rows, Σq)), 0 for Gini."""
PARAMS_SIZE = 6

# -- sentinels -------------------------------------------------------------------------------
FAIL = -1
"""A kernel's answer when an array is full: nothing was changed; grow and call again."""
STALE = -2
"""``feat`` of a stale node: a subtree whose choice changed, kept as its rows alone (a leaf's
perm range and counts) until something reads it. Rebuilding it then, from the rows it holds
then, gives what rebuilding it at each change would have: a subtree is a function of its
rows, depth, seed and feasible ranges (:mod:`._grower`). So a forget or insert costs a walk
and a copy of the subtree's rows; the build is paid by the first prediction that reaches
the node, or by whatever reads the whole structure (``flush_tree``)."""

jit = numba.njit(cache=True, nogil=True)
"""How every forest kernel is compiled: cached on disk, releasing the GIL."""

# -- the mixer behind seeds and Merkle hashes (splitmix64) -------------------------------------
GOLD = np.uint64(0x9E3779B97F4A7C15)
LANE = np.uint64(0x632BE59BD9B4E019)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


@jit
def mix(x):
    """splitmix64's finalizer of x + GOLD: a counter-based 64-bit draw."""
    z = x + GOLD
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@jit
def grow(x, cap):
    """A copy of the 1-d scratch stack x with room for ``cap`` entries."""
    out = np.empty(cap, x.dtype)
    out[: x.shape[0]] = x
    return out


@jit
def grow2(x, cap):
    """A copy of the 2-d scratch stack x with room for ``cap`` rows."""
    out = np.empty((cap, x.shape[1]), x.dtype)
    out[: x.shape[0]] = x
    return out


# -- allocation (Python) ---------------------------------------------------------------------
GROUPS = {
    "rows": ("codes", "y"),
    "nodes": ("feat", "thr", "left", "right", "n", "counts", "slot", "choice", "lstart", "hash"),
    "slots": ("cfeat", "cthr", "cleft", "ncand"),
    "perm": ("perm",),
}
"""The arrays that grow together, by what they are indexed by."""


def allocate(
    rows: int, d: int, k: int, K: int, nodes: int, slots: int, perm: int, trees: int
) -> Arrays:
    """Empty arrays for ``rows`` rows of d features, k channels, K candidates per node and
    room for this many nodes, cache slots and perm entries."""
    return Arrays(
        codes=np.zeros((rows, d), np.uint8),
        y=np.zeros(rows, np.int32),
        feat=np.full(nodes, -1, np.int32),
        thr=np.zeros(nodes, np.int32),
        left=np.full(nodes, -1, np.int32),
        right=np.full(nodes, -1, np.int32),
        n=np.zeros(nodes, np.int32),
        counts=np.zeros((nodes, k), np.int32),
        slot=np.full(nodes, -1, np.int32),
        choice=np.full(nodes, -1, np.int32),
        lstart=np.full(nodes, -1, np.int64),
        hash=np.zeros((nodes, 2), np.uint64),
        cfeat=np.zeros((slots, K), np.int32),
        cthr=np.zeros((slots, K), np.int32),
        cleft=np.zeros((slots, K, k), np.int32),
        ncand=np.zeros(slots, np.int32),
        perm=np.zeros(perm, np.int32),
        top=np.zeros(TOP_SIZE, np.int64),
        roots=np.zeros(trees, np.int32),
        seeds=np.zeros(trees, np.uint64),
        nbins=np.zeros(d, np.int32),
        params=np.zeros(PARAMS_SIZE, np.int64),
    )


def resized(A: Arrays, *, rows=None, nodes=None, slots=None, perm=None) -> Arrays:
    """A copy of A with the named groups of arrays grown (contents kept, the rest shared)."""
    sizes = {"rows": rows, "nodes": nodes, "slots": slots, "perm": perm}
    fields = A._asdict()
    for group, size in sizes.items():
        if size is None:
            continue
        for name in GROUPS[group]:
            old = fields[name]
            new = np.zeros((size, *old.shape[1:]), old.dtype)
            new[: old.shape[0]] = old
            fields[name] = new
    return Arrays(**fields)


def params_of(
    k: int, K: int, min_leaf: int, max_depth: int, cache_min: int, regression: bool
) -> np.ndarray:
    """The ``params`` vector of a configuration."""
    params = np.zeros(PARAMS_SIZE, np.int64)
    params[P_CLASSES], params[P_CANDIDATES], params[P_MIN_LEAF] = k, K, min_leaf
    params[P_MAX_DEPTH], params[P_CACHE_MIN] = max_depth, cache_min
    params[P_REGRESSION] = int(regression)
    return params
