"""An exact linear head on all rows: ridge regression from integer sums ΣvvᵀΣ and Σvrᵀ.

The base model g is trained on D° only (design.md §1), so in exact mode it sees ~0.5 % of the
rows; on image and text features it is the weak part of the model (benchmarks/results/
partitions.md: g alone 0.63 on MNIST-HOG where SISA reaches 0.96). A ridge regression of the
residual r = y − g(x) on the features v = [φ(x), 1] depends on the rows only through
G = Σ v vᵀ and H = Σ v rᵀ — sums over rows. Accumulated as int64 (v and r on fixed-point
grids), they are exact under deletion: subtracting a row's outer products restores the very
integers a fit without the row would produce, so the head solved from them is the refit's head
bit for bit (the solve is a deterministic float function of those integers).

Fixed point: φ's rows have unit L2 norm, so every |φ_j| ≤ 1 and v = rint(2^14 φ) has
|v| ≤ 2^14 (the bias column is 2^14 too); residuals are put on a grid with |r| ≤ 2^20
(classification: |r| ≤ 1 at 2^-20; regression: |r| ≤ 2^10 standard deviations at 2^-10).
A product is below 2^34 and at most 2^28 rows are summed (``MAX_ROWS``): every sum stays
below 2^62.

The penalty is c · mean(diag G) with a fixed c (:data:`PENALTY`): cross-fitting it over a
grid would cost a factorization per value after every change. Both statistic folds are kept
so that the head's out-of-fold gain (a fold-A head scored on fold-B sums, a deterministic
function of the integers) can be compared with the tables'
(:func:`forgetting.content.tables.build_flat_content`): an instance serves its head when that
gain exceeds :data:`TABLES_GAIN_FACTOR` times theirs.

:class:`NewtonHead` keeps these sums plus one weighted Gram per class and serves one Newton step
of one-vs-rest logistic regression from g's logits instead of the least-squares fit: the same
exactness argument (every term a fixed function of its row, summed in int64), closer to
logistic regression's accuracy (MNIST-HOG 0.973 vs 0.963) at k times the solve work.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.linalg.lapack import dpotrf as _POTRF
from scipy.linalg.lapack import dpotrs as _POTRS
from scipy.linalg.lapack import spotrf as _SPOTRF
from scipy.linalg.lapack import spotrs as _SPOTRS

from .._parallel import map_instances, serial_map
from .._rowwise import SERVE_BLOCK_ROWS, one_blas_thread, rowwise
from .accumulators import CLASSIFICATION_SCALE_BITS, MAX_ROWS
from .gain_filter import GainFilter
from .kernels import HEAD_KERNELS

FEATURE_BITS = 14
"""v = rint(2^14 · φ(x)); φ's rows have unit norm, so |v| ≤ 2^14."""
TARGET_LIMIT_BITS = 20
"""Head residuals lie in ±2^20 on their grid."""
PENALTY = 1e-3
"""Ridge penalty relative to the mean diagonal of G (features on a common scale: φ's rows
have unit norm). benchmarks/results/partitions.md's prototype cross-fitted it on
(1e-4 … 1e-1); fixed here so a change costs one factorization per fold, not one per value."""
_EXACT_BITS = 52
TABLES_GAIN_FACTOR = 0.65
"""An instance serves its head when the head's out-of-fold gain exceeds this fraction of the
tables' (their cross-fitted gain with the D°-probe square term, ``FlatTables.best``): the rule
of :func:`forgetting.content.tables.build_flat_content`.

Why this statistic, and why below 1: on validation splits carved from the training sets
(benchmarks/results/head_rule.md: `python -m forgetting_lab.bench.head_rule`, 4 splits × 3
instances per set) the ratio head gain / tables' probe gain separates, instance by instance,
the sets where the head is the better model on validation (digits ≥ 0.70, MNIST-HOG ≥ 1.05,
Fashion-HOG, Adult and sentiment ≥ 1.18) from those where the tables are (bench.core's Gaussian
mixture ≤ 0.61, diamonds ≤ 0.59, letter ≤ 0.42); 0.65 is the geometric middle of that gap
(0.606 … 0.704 — narrow: a set between the two groups could fall either way). It is below 1
because the probe estimate is optimistic (the tables' gain on the validation rows is below it
on 81 of 96 instances, median 0.93 times it) and because squared error is not accuracy: on
digits the tables' squared-error gain on the validation rows exceeds the head's on 10 of 12
instances while the head is the more accurate on every one. The former rule compared the head
with the geometric mean of the probe estimate and the exact per-table gain; it served the head
on the Gaussian mixture (every instance; tables 0.993 vs 0.984 on validation) and on a third of
diamonds' instances, and no constant factor on that mean separates the sets. On diabetes (247
fitting rows, 62 validation rows) no rule of these statistics tracks the validation winner
(both get 8–9 of 12 wrong; squared errors within 1 %).

Out of sample — synthetic sets that played no part in choosing it
(benchmarks/results/head_rule_heldout.md) — it picks the better model on 61 of 72 instances
where the former rule picked it on 31, and it is not a complete answer: on make_classification
with 3 clusters per class the tables are better while the ratio (0.59–0.92) overlaps digits',
and a per-instance rule cannot see that averaging p instances' tables (each built on its own
D°) cancels much of their noise while the instances' heads are nearly one model (bench.core's
mixture at k = 20: the head is the better instance on 10 of 12, the tables' average the better
ensemble, 0.998 vs 0.978 on validation). A deterministic function of the current integer sums,
like both gains."""


def weight_bits(n_features: int) -> int:
    """Served weights are rounded to integers below 2^bits in magnitude (per output column's
    own power-of-two scale) with 2^14 · 2^bits · D ≤ 2^52, so v · W is an exact float64 integer
    sum and a row's output is the same bits in any batch."""
    return _EXACT_BITS - FEATURE_BITS - int(np.ceil(np.log2(max(n_features, 2))))


def head_target_shift(scale_bits: int) -> int:
    """Right shift from the content's residual grid (2^scale_bits) to the head's: residuals
    are bounded by 1 (classification, 2^32) or 2^10 (regression, 2^24), and the head keeps
    them below 2^20."""
    return scale_bits - TARGET_LIMIT_BITS if scale_bits >= 32 else scale_bits - 10


def head_features(Z: np.ndarray, dtype=np.int64) -> np.ndarray:
    """[rint(2^14 φ), 2^14] (n, d + 1): exact, row by row. int64 for the sums; serving asks
    for float64 — the same integers (|v| ≤ 2^14), without a round trip through int64 before
    the float product (a third of a 50k-row prediction's head time)."""
    n = Z.shape[0]
    v = np.empty((n, Z.shape[1] + 1), dtype=dtype)
    grid = np.rint(np.ldexp(np.asarray(Z, dtype=np.float64), FEATURE_BITS))
    np.clip(grid, -(2**FEATURE_BITS), 2**FEATURE_BITS, out=grid)
    v[:, :-1] = grid
    v[:, -1] = 2**FEATURE_BITS
    return v


def head_targets(residuals: np.ndarray, scale_bits: int) -> np.ndarray:
    """The content's int64 residuals moved to the head's grid (round half up, exact)."""
    shift = head_target_shift(scale_bits)
    r = np.asarray(residuals, dtype=np.int64)
    if shift <= 0:
        return r << -shift
    return (r + (1 << (shift - 1))) >> shift


_SMALL_ROWS = 64
_CHUNK_ROWS = 1 << 18
"""Rows per BLAS product: |v·v| ≤ 2^28 and |v·r| ≤ 2^34, so 2^18 of them sum below 2^53."""


def exact_products(v: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(vᵀv, vᵀr) as int64, computed with float64 BLAS on integer values (``v`` int64, or
    float64 holding integers).

    Every product and partial sum of a chunk is an integer below 2^53, so float64 holds it
    exactly whatever order the kernel sums in (numpy's int64 matmul is exact too, but runs
    without BLAS, ~50× slower); chunks are then added as int64.
    """
    return exact_gram(v), exact_cross(v, r)


def exact_gram(v: np.ndarray) -> np.ndarray:
    """vᵀv as int64 (see :func:`exact_products`).

    A general product (numpy's matmul) rather than BLAS's symmetric rank-k update: it does
    twice the multiplications and still takes ~2/3 of the time with the OpenBLAS builds
    measured here (10k × 257: 17 vs 25 ms; 5k × 1033: 107 vs 134 ms), and two threads
    computing two folds' Grams overlap (the symmetric update from scipy did not: 58 ms for
    both folds on two threads against 23 now). The same integers: every product and partial
    sum is an integer below 2^53."""
    D = v.shape[1]
    if len(v) <= _SMALL_ROWS:  # a forget or insert of a few rows: int64 matmul, exact
        vi = v.astype(np.int64, copy=False)
        return vi.T @ vi
    gram = np.zeros((D, D), dtype=np.int64)
    for start in range(0, len(v), _CHUNK_ROWS):
        # features given as float64 (the same integers: head_features(Z, np.float64)) are
        # used as they are — no int64 → float64 copy of every row
        vf = np.asarray(v[start : start + _CHUNK_ROWS], dtype=np.float64)
        gram += (vf.T @ vf).astype(np.int64)
    return gram


def exact_cross(v: np.ndarray, r: np.ndarray) -> np.ndarray:
    """vᵀr as int64 (see :func:`exact_products`)."""
    D, k = v.shape[1], r.shape[1]
    if len(v) <= _SMALL_ROWS:
        return v.astype(np.int64, copy=False).T @ r
    cross = np.zeros((D, k), dtype=np.int64)
    for start in range(0, len(v), _CHUNK_ROWS):
        vf = np.asarray(v[start : start + _CHUNK_ROWS], dtype=np.float64)
        rf = r[start : start + _CHUNK_ROWS].astype(np.float64)
        cross += (rf.T @ vf).T.astype(np.int64)
    return cross


def fold_cross(v: np.ndarray, r: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """Σ v rᵀ over the rows of each statistic fold, (2, D, k) int64: :func:`exact_cross` of
    each fold's rows, without selecting them. One product per chunk, rᵀ's rows split by fold
    (a row's residuals in fold 0's k columns or fold 1's, zeros in the other) against all of
    v: at 20k rows, D = 257, k = 10 one 8 ms product where two row selections of v (20 MB
    copies) and two products took ~16 ms, per instance. Exact as exact_cross (integers
    below 2^53; the zeros add nothing)."""
    D, k = v.shape[1], r.shape[1]
    folds = np.asarray(folds)
    if len(v) <= _SMALL_ROWS:
        return np.stack([exact_cross(v[folds == f], r[folds == f]) for f in (0, 1)])
    cross = np.zeros((2, D, k), dtype=np.int64)
    for start in range(0, len(v), _CHUNK_ROWS):
        stop = min(len(v), start + _CHUNK_ROWS)
        vf = np.asarray(v[start:stop], dtype=np.float64)
        split = np.zeros((stop - start, 2 * k), dtype=np.float64)
        in1 = np.asarray(folds[start:stop]) == 1
        split[~in1, :k] = r[start:stop][~in1]
        split[in1, k:] = r[start:stop][in1]
        both = (split.T @ vf).astype(np.int64)  # (2k, D)
        cross[0] += both[:k].T
        cross[1] += both[k:].T
    return cross


def _same_pending(a: list, b: list) -> bool:
    """Whether two heads' pending rows are the same rows, folds and signs, in the same order."""
    return len(a) == len(b) and all(
        sa == sb and va.shape == vb.shape and np.array_equal(va, vb) and np.array_equal(fa, fb)
        for (va, fa, sa), (vb, fb, sb) in zip(a, b, strict=True)
    )


def fold_grams(v: np.ndarray, folds: np.ndarray, parallel: bool = False) -> list[np.ndarray | None]:
    """Σ v vᵀ over the rows of each statistic fold (None for a fold without rows).

    ``parallel``: the two folds on two threads (forgetting._parallel; each BLAS call on one
    thread) — the same integers, every product and partial sum of :func:`exact_gram` being an
    integer that float64 holds, in about half the time for a large batch (O(n·D²): 23 ms for
    20k rows at D = 257 on two threads, 41 ms on one)."""

    def one(f: int) -> np.ndarray | None:
        mine = folds == f
        return exact_gram(v[mine]) if np.any(mine) else None

    return (map_instances if parallel else serial_map)(one, [0, 1])


PENDING_PASS_ROWS = 8
"""Pending rows up to this many are added while copying the Gram, in one compiled pass
(content._head_kernels.gram_with_rows); more go through :func:`_add_pending`'s products."""


def _with_pending(gram: np.ndarray, pending: list) -> np.ndarray:
    """A new (2, D, D) int64 array: ``gram`` plus the Gram terms of ``pending`` rows — the
    integers of a copy followed by :func:`_add_pending`, in one pass when the rows are few."""
    D = gram.shape[1]
    n = sum(len(v) for v, _, _ in pending)
    kernel = HEAD_KERNELS.get(D * D) if 0 < n <= PENDING_PASS_ROWS else None
    if kernel is None or gram.dtype != np.int64:
        new = np.array(gram)
        _add_pending(new, pending)
        return new
    V = np.concatenate([np.asarray(v).astype(np.int64, copy=False) for v, _, _ in pending])
    folds = np.concatenate([np.asarray(f).astype(np.int64, copy=False) for _, f, _ in pending])
    signs = np.concatenate([np.full(len(v), s, dtype=np.int64) for v, _, s in pending])
    new = np.empty_like(gram)
    kernel.gram_with_rows(np.ascontiguousarray(gram), V, folds, signs, new)
    return new


def _add_pending(gram: np.ndarray, pending: list) -> None:
    """Add the Gram terms of ``pending`` rows — (v, folds, sign) triples — to ``gram``
    (2, D, D) in place: the rows of each sign together, one fold Gram each."""
    for sign in (1, -1):
        group = [(v, folds) for v, folds, s in pending if s == sign]
        if not group:
            continue
        grams = fold_grams(
            np.concatenate([v for v, _ in group]), np.concatenate([folds for _, folds in group])
        )
        for f in (0, 1):
            if grams[f] is not None:
                (np.add if sign > 0 else np.subtract)(gram[f], grams[f], out=gram[f])


SHARED_DELTA_ROWS = 1 << 15
"""A change of at most this many rows hands its Gram terms to the other instances' heads
(:meth:`GramCache.fold_grams_for`); larger ones (a fit's chunks) compute their own rather
than keep a copy of the rows' features to compare with. The copy kept is at most
2^15 · (d + 1) float64 (34 MB at d = 128), replaced by the next change's."""


LAZY_ROWS = 16
"""A change of at most this many rows leaves its Gram terms pending (:attr:`LinearHead.gram`)."""
PENDING_ROWS = 1024
"""Pending rows are added to the Gram sums once this many wait (bounds their memory)."""


@dataclass
class LinearHead:
    """Per fold f: G[f] = Σ v vᵀ (D, D) and H[f] = Σ v rᵀ (D, k), int64, D = d + 1.

    The Gram terms of small changes wait (``_pending``) until something reads :attr:`gram`:
    where the tables serve and the gain filter decides without a solve
    (content.gain_filter), nothing reads it between changes, and p heads adding the same
    (D, D) outer product after every one-row change was ~10 % of a forget + first predict
    at d = 128. Integer sums: adding the pending rows later gives the same integers."""

    _gram: np.ndarray
    cross: np.ndarray
    counts: np.ndarray
    scale_bits: int

    @classmethod
    def empty(cls, n_features: int, n_outputs: int, scale_bits: int) -> LinearHead:
        D = n_features + 1
        return cls(
            np.zeros((2, D, D), dtype=np.int64),
            np.zeros((2, D, n_outputs), dtype=np.int64),
            np.zeros(2, dtype=np.int64),
            scale_bits,
        )

    @property
    def n_rows(self) -> int:
        return int(self.counts.sum())

    def add(self, features: np.ndarray, residuals: np.ndarray, folds: np.ndarray) -> None:
        """Add rows: head ``features`` (n, D) int64, content ``residuals`` (n, k), ``folds``."""
        self._update(features, residuals, folds, 1)

    def add_cross(self, features: np.ndarray, residuals: np.ndarray, folds: np.ndarray) -> None:
        """Add rows' cross sums and counts but not their Gram terms: a rebuild whose Gram sums
        come from a sibling instance over the same rows (:meth:`adopt_gram`)."""
        LinearHead._update(self, features, residuals, folds, 1, gram=False)

    def adopt_gram(self, gram: np.ndarray, counts: np.ndarray) -> None:
        """Take Gram sums computed over the very rows this head's cross sums were (a sibling's
        with the same features: "shared-ridge"); their row counts must match, else the rows
        were not the same and this raises."""
        if gram.shape != self._gram.shape or not np.array_equal(counts, self.counts):
            raise RuntimeError("adopted Gram sums are not over this head's rows")
        self._changed()
        with self._flush_lock:
            self._pending.clear()  # the adopted sums are over every row, these included
            self._pending_rows = 0
            self._pending_diag[...] = 0
            self._own_gram()[...] = gram

    def subtract(self, features: np.ndarray, residuals: np.ndarray, folds: np.ndarray) -> None:
        self._update(features, residuals, folds, -1)

    def _update(self, features, residuals, folds, sign: int, gram: bool = True) -> None:
        if len(features) == 0:
            return
        if sign > 0 and self.n_rows + len(features) > MAX_ROWS:
            raise OverflowError(f"more than {MAX_ROWS} rows cannot be accumulated exactly")
        v = np.asarray(features)
        if v.dtype != np.float64:  # float64 holds the same integers (|v| ≤ 2^14): kept
            v = v.astype(np.int64, copy=False)
        self._changed()
        r = head_targets(residuals, self.scale_bits)
        folds = np.asarray(folds)
        cache = self._gram_cache
        if gram and len(v) == 1 and LAZY_ROWS >= 1:
            self._update_one(v, r, folds, sign)
            return
        lazy = gram and len(v) <= LAZY_ROWS
        if lazy:
            self._defer(v, folds, sign)
        if not gram or lazy:
            grams: list[np.ndarray | None] = [None, None]
        elif cache is not None and len(v) <= SHARED_DELTA_ROWS:
            grams = cache.fold_grams_for(v, folds)
        else:
            grams = fold_grams(v, folds)
        update = np.add if sign > 0 else np.subtract
        crosses = fold_cross(v, r, folds)
        for f in (0, 1):
            mine = folds == f
            if not mine.any():
                continue
            if grams[f] is not None:
                if self._pending:  # pending rows added first: the order does not matter
                    self._flush()
                gram_f = self._own_gram()[f]
                update(gram_f, grams[f], out=gram_f)
            update(self.cross[f], crosses[f], out=self.cross[f])
            self.counts[f] += sign * int(mine.sum())
        if gram and cache is not None and self._slot is not None:
            # the gain filter tracks the head's solution through this change (content.
            # gain_filter); a change without its Gram terms is not logged, so it resets there
            cache.gains.log(self, v, r, self._target_unit(), folds, sign)

    def _update_one(self, v: np.ndarray, r: np.ndarray, folds: np.ndarray, sign: int) -> None:
        """:meth:`_update` of one row (a one-row forget or insert, the latency path): the
        same integers — its cross terms v rᵀ as one outer product, its Gram terms pending —
        with a fraction of the general path's calls."""
        vi = v[0].astype(np.int64)
        f = int(folds[0])
        cross = self.cross[f]
        kernel = HEAD_KERNELS.get(cross.size)
        if kernel is None:
            (np.add if sign > 0 else np.subtract)(cross, np.multiply.outer(vi, r[0]), out=cross)
            self._pend(vi[None, :], folds.copy(), sign, vi * vi)
        else:  # the same integers in one compiled call (content._head_kernels)
            row = r[0]

            def add() -> None:
                kernel.one_row_sums(cross, self._pending_diag, vi, row, sign)

            self._pend(vi[None, :], folds.copy(), sign, None, add)
        self.counts[f] += sign
        cache = self._gram_cache
        if cache is not None and self._slot is not None:
            cache.gains.log(self, v, r, self._target_unit(), folds, sign)

    def _defer(self, v: np.ndarray, folds: np.ndarray, sign: int) -> None:
        """Keep a small change's rows for the Gram sums (:attr:`gram` adds them)."""
        vi = np.array(v, dtype=np.int64)
        self._pend(vi, np.array(folds), sign, np.einsum("ij,ij->j", vi, vi))

    def _pend(
        self,
        vi: np.ndarray,
        folds: np.ndarray,
        sign: int,
        squares: np.ndarray | None,
        add: Callable[[], None] | None = None,
    ) -> None:
        """Record rows ``vi`` (int64, owned here) as pending, with their diagonal terms
        ``squares`` = Σ_rows v² per column, or ``add`` — the caller's update of the pending
        diagonal, run under the same lock — and add them to the sums past PENDING_ROWS."""
        with self._flush_lock:
            self._pending.append((vi, folds, sign))
            self._pending_rows += len(vi)
            if add is not None:
                add()
            elif sign > 0:
                self._pending_diag += squares
            else:
                self._pending_diag -= squares
        if self._pending_rows > PENDING_ROWS:
            self._flush()

    @property
    def gram(self) -> np.ndarray:
        """G[f] = Σ v vᵀ per fold (2, D, D) int64, every pending row added; read-only (the
        head changes it through its methods: the array may be shared with sibling heads)."""
        if self._pending:
            self._flush()
        if not self._gram.flags.writeable:
            return self._gram
        view = self._gram.view()
        view.flags.writeable = False
        return view

    @property
    def gram_token(self) -> int | None:
        """Names the current Gram sums within the head's :class:`GramCache`: heads with the
        same token hold the same integers (None: not known to the cache)."""
        return self._gram_token

    def _own_gram(self) -> np.ndarray:
        """The Gram sums, writable by this head alone (a copy first when they are shared:
        :meth:`GramCache.flushed`); the cache no longer knows them by a token."""
        if not self._gram.flags.writeable:
            self._gram = self._gram.copy()
        self._gram_token = None
        return self._gram

    def share_gram(self, gram: np.ndarray, token: int, seen: np.ndarray) -> None:
        """Hold ``gram`` — read-only integers the caller (GramCache) checked equal to ``seen``,
        what :attr:`gram` returned — in place of its own copy, known by ``token``; nothing
        when the sums moved on since ``seen`` was read."""
        if gram.flags.writeable:
            raise ValueError("a shared Gram is read-only")
        with self._flush_lock:
            if seen is self._gram or seen.base is self._gram:
                self._gram = gram
                self._gram_token = token

    def _flush(self) -> None:
        with self._flush_lock:
            if not self._pending:
                return
            cache = self._gram_cache
            if cache is not None:
                # heads at the same sums with the same rows pending (every instance of a
                # shared head after a change) get one new array, computed once, shared
                self._gram, self._gram_token = cache.flushed(
                    self._gram, self._gram_token, self._pending
                )
                self._pending.clear()
                self._pending_rows = 0
                self._pending_diag[...] = 0
                return
            _add_pending(self._own_gram(), self._pending)
            self._pending.clear()
            self._pending_rows = 0
            self._pending_diag[...] = 0

    def penalty(self) -> float:
        """:func:`head_penalty` of the current Gram sums, from their diagonal alone (the
        pending rows' squares included): what the gain filter compares without reading
        :attr:`gram`."""
        with self._flush_lock:
            diag = np.diagonal(self._gram[0]) + np.diagonal(self._gram[1])
            return _penalty_of_diagonal(diag + self._pending_diag)

    def merge(self, other: LinearHead) -> None:
        """Add another head's sums (a chunk's partial sums): integer adds, exact in any order."""
        self._changed()
        if self._pending:
            self._flush()
        own = self._own_gram()  # (both with their pending rows added)
        own += other.gram
        self.cross += other.cross
        self.counts += other.counts
        if self.n_rows > MAX_ROWS:
            raise OverflowError(f"more than {MAX_ROWS} rows cannot be accumulated exactly")

    # -- solving ------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        self._gram_cache: GramCache | None = None
        self._slot: tuple[int, int] | None = None
        """(r, p): this head is solved in the stacked layout, as slot r of p (solve_stacked)."""
        self._solved: tuple[float, np.ndarray | None] | None = None
        """The stacked solve's (gain, W) for the current sums, or None until solved."""
        self._changes = 0
        self._flush_lock = threading.Lock()
        self._pending: list[tuple[np.ndarray, np.ndarray, int]] = []
        self._pending_rows = 0
        self._pending_diag = np.zeros(self._gram.shape[-1], dtype=np.int64)
        self._gram_token: int | None = None

    def __getstate__(self) -> dict:
        """The sums alone (a chunk's partial head travels to the client: distributed.chunks);
        pending rows added first. The solve cache, the slot and the lock stay behind."""
        self._flush()
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    @property
    def changes(self) -> int:
        """How many times the sums changed since this head was made: how the gain filter
        (content.gain_filter) knows it saw every change."""
        return self._changes

    def _changed(self) -> None:
        self._solved = None
        self._changes += 1

    def share_solves(self, cache: GramCache | None, slot: tuple[int, int] | None = None) -> None:
        """Use ``cache`` for the part of :meth:`solution` that depends on the Gram sums alone
        (heads whose sums are equal factor them once per change); with ``slot`` = (r, p) the
        head is solved in the stacked layout of p heads (:func:`solve_stacked`)."""
        self._gram_cache = cache
        self._slot = slot
        self._solved = None
        if cache is not None and slot is not None:
            cache.register(self, slot)

    def served_over(self, threshold: float):
        """The served weights when the head's out-of-fold gain exceeds ``threshold`` (the
        rule of content.tables.build_flat_content), else None.

        A stacked head asks the engine's gain filter first (content.gain_filter): when it is
        certain the gain is below the threshold, the head is not served and nothing is solved
        — the same choice the exact gain makes, so the same bits as a refit. Otherwise (the
        filter unsure, or the head served: its weights need the exact solve anyway) the exact
        route decides, and tells the filter what it chose."""
        cache = self._gram_cache
        filtered = cache is not None and self._slot is not None
        if filtered and self._solved is None:
            # the penalty as a function: the filter computes it once for the p heads
            if cache.gains.certainly_below(self, threshold, self.penalty):  # type: ignore[union-attr]
                return None
        _, weights = self.solution(serve_if=lambda gain: gain > threshold)
        if filtered:
            cache.gains.decided(self, weights is not None)  # type: ignore[union-attr]
        return weights

    def solution(
        self, serve_if: Callable[[float], bool] | None = None
    ) -> tuple[float, FixedWeights | None]:
        """The out-of-fold gain and the served weights, from one factorization (weights None
        when ``serve_if(gain)`` says the head will not be served: the caller compares the gain
        with the tables' first).

        The served W solves the full-data system (Cholesky). The gain needs each fold's own
        solution W_a, scored on the other fold's sums: Σ_b 2⟨W_a, H_b⟩ − ⟨W_a, G_b W_a⟩ (the
        fall in squared error of the residuals, comparable to the tables' cross-fitted gain).
        Factoring each fold's system too would triple the cost of the first prediction after
        a change, so W_a is approximated by 2A⁻¹H_a with the full factorization — fold a's
        labels, half the full Gram (:func:`_solve`: one triangular solve of 2k columns and
        one product with G_0). The approximation is a fixed, deterministic function of the
        sums, so the gain — and the choice it drives — is the same after any history:
        exactness needs determinism, not an exact W_a.

        Everything that depends on the Gram sums alone — their floats, the penalties, the
        factorization (:class:`GramSystem`) — comes from the shared :class:`GramCache` when
        another head with the same sums computed it since the last change: a function of the
        integers, so the same bits as computing it here. A head placed in a slot
        (:meth:`share_solves`) is solved in the stacked layout (:func:`solve_stacked`) —
        usually already, with its siblings, before the engine asks.
        """
        if self._slot is not None:
            if self._solved is None:  # solved with the siblings in their slots, if any
                cache = self._gram_cache
                members = cache.members() if cache is not None else []
                solve_stacked(members if any(h is self for h in members) else [self], cache)
            gain, W = self._solved  # type: ignore[misc]
        else:
            cache = self._gram_cache
            system = GramSystem.of(self.gram) if cache is None else cache.system_for(self)
            if system.factor is None:  # no rows, or a fold without rows: no penalty, no head
                return -np.inf, None
            W, gains = _solve(system, *self.float_cross())
            gain = _gain(gains)
        if W is None or (serve_if is not None and not serve_if(gain)):
            return gain, None
        return gain, self._served(W)

    def _served(self, W: np.ndarray):
        """What serves the solved weights W: their fixed-point copy, added to g."""
        return FixedWeights.of(W)

    def _target_unit(self) -> float:
        """A head residual's grid step in real units (2^-20 classification, 2^-10 regression)."""
        return 2.0**-TARGET_LIMIT_BITS if self.scale_bits >= 32 else 2.0**-10

    def float_cross(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """H = H_0 + H_1, H_0 and H_1 as floats in real units (integer sums, then one rounding)."""
        H = np.add(self.cross[0], self.cross[1]).astype(np.float64)
        H0 = self.cross[0].astype(np.float64)
        H1 = self.cross[1].astype(np.float64)
        unit = 2.0**-FEATURE_BITS * self._target_unit()  # powers of two: exact
        H *= unit
        H0 *= unit
        H1 *= unit
        return H, H0, H1

    # -- bookkeeping ----------------------------------------------------------------------------
    def equals(self, other: LinearHead) -> bool:
        return (
            self.scale_bits == other.scale_bits
            and np.array_equal(self.gram, other.gram)
            and np.array_equal(self.cross, other.cross)
            and np.array_equal(self.counts, other.counts)
        )


def head_penalty(gram: np.ndarray) -> float:
    """The ridge penalty: c times mean diag G rounded to the nearest power of two (0 when
    G is empty: no rows), from the integer sums ``gram`` (2, D, D).

    Why rounded: the penalty then stays the same number while rows come and go (it moves
    only when mean diag G crosses a boundary 2^(j + 1/2): at most once per ~30 % change of
    the row count, the next deletion only for a set that sits on a boundary), so the system
    A = G + λI changes by the rows' outer products alone and the gain filter
    (content.gain_filter) can track its solution row by row. The penalty's size was chosen
    on a 1000× grid (:data:`PENALTY`); within √2 of it is the same choice."""
    return _penalty_of_diagonal(np.add(np.diagonal(gram[0]), np.diagonal(gram[1])))


def _penalty_of_diagonal(diag: np.ndarray) -> float:
    """:func:`head_penalty` from the integer diagonal of G = G_0 + G_1."""
    D = diag.shape[0]
    mean = float(diag.astype(np.float64).sum()) * 2.0 ** (-2 * FEATURE_BITS) / D
    if not mean > 0.0:
        return 0.0
    return PENALTY * 2.0 ** round(math.log2(mean))


def _solve_columns(system: GramSystem, H: np.ndarray, H0: np.ndarray, H1: np.ndarray):
    """W = A⁻¹H and, per column of ``H``, the out-of-fold gain of approximate fold solutions
    (one head's k columns, or p heads' stacked side by side: every step is column by column).

    W_a, fold a's ridge solution A_a⁻¹H_a (A_a = G_a + s_a I), is approximated by
    W_a ≈ 2A⁻¹H_a: fold a's penalized Gram replaced by half the full one (the folds are a
    random halving of the rows, so A_a ≈ A/2; the labels fold a's head sees are still H_a
    alone, so the gain stays out of fold). Then everything comes from one triangular solve of
    the stacked columns [H | H_0] and one product with G_0:

        X = A⁻¹[H | H_0]:  W = X[:, :m],  W_0 = 2X[:, m:],  W_1 = 2W − W_0;
        P = G_0 [W_0 | W_1];  G_1 W_0 = G W_0 − G_0 W_0 = 2H_0 − λW_0 − G_0 W_0 (A W_0 = 2H_0).

    Why not the fold solutions themselves, or Richardson steps towards them: factoring each
    fold's system would triple the factorizations after every change, and the two
    preconditioned Richardson steps from W this replaced cost three solves and three G_0
    products (the solve of 30 columns at D = 129: 0.21 vs 0.40 ms; D = 521: 2.1 vs 3.8 ms).
    Against the exact fold gain, on validation splits carved from the benchmark's training
    sets (benchmarks/results/head_rule.md): within −0.8 … +0.2 % of it on the sets with
    n ≥ 12k rows but sentiment (−0.9 … −3.3 %), and −2.4 … −4.5 % on digits' 1k rows (the
    steps: 0 … +1.6 %); on diabetes' 247 rows the gains are near zero and both approximations
    miss the exact one by more than its size. The head-vs-tables choice, under the current
    rule and the former one, is the same with any of the three gains on every instance there
    (content.tables.build_flat_content). What exactness needs is
    determinism, not an exact W_a: every step here is a fixed float function of the integer
    sums. LAPACK's potrs is called directly (what scipy's ``cho_solve`` calls, without its
    wrapper) on a Fortran-order right-hand side it overwrites (no copies).

    Returns X = A⁻¹[H | H_0] (what the gain filter tracks, content.gain_filter), W (a view of
    X) and the per-column gain Σ_b 2⟨W_a, H_b⟩ − ⟨W_a, G_b W_a⟩ (summed over a head's
    columns by :func:`_gain`).
    """
    factor, G0, lam = system.factor, system.G0, system.lam
    D, m = H.shape
    # the right-hand side in Fortran order, solved in place (no copies inside the wrapper)
    rhs = np.empty((D, 2 * m), order="F")
    rhs[:, :m] = H
    rhs[:, m:] = H0
    # One BLAS thread: a (d + 1)² system is too small to gain from threads, and on a busy
    # machine oversubscribed threads made it 10× slower (measured at d = 520).
    with one_blas_thread():
        X, _ = _POTRS(factor, rhs, lower=1, overwrite_b=1)
        W = X[:, :m]
        folds = np.empty((D, 2 * m))  # [W_0 | W_1]
        W0, W1 = folds[:, :m], folds[:, m:]
        np.multiply(X[:, m:], 2.0, out=W0)
        np.multiply(W, 2.0, out=W1)
        W1 -= W0
        P = G0 @ folds  # [G_0 W_0 | G_0 W_1]
    # fold 0's head on fold 1: 2⟨W_0, H_1⟩ − ⟨W_0, G_1 W_0⟩ = ⟨W_0, 2H_1 − 2H_0 + λW_0 + G_0 W_0⟩
    score0 = np.subtract(H1, H0)
    score0 *= 2.0
    score0 += lam * W0
    score0 += P[:, :m]
    score0 *= W0
    # fold 1's head on fold 0: 2⟨W_1, H_0⟩ − ⟨W_1, G_0 W_1⟩
    score1 = 2.0 * H0
    score1 -= P[:, m:]
    score1 *= W1
    score0 += score1
    return X, W, np.sum(score0, axis=0)


def _solve(system: GramSystem, H: np.ndarray, H0: np.ndarray, H1: np.ndarray):
    """(W, per-column gains) of :func:`_solve_columns`."""
    _, W, gains = _solve_columns(system, H, H0, H1)
    return W, gains


def _gain(gains: np.ndarray, columns: slice = slice(None)) -> float:
    """The out-of-fold gain of one head: :func:`_solve`'s per-column gains summed over the
    head's ``columns`` — the fall in squared error of each fold's head on the other fold's
    rows."""
    return float(np.sum(gains[columns]))


def solve_stacked(heads: Sequence[LinearHead], cache: GramCache | None = None) -> None:
    """Solve every head of ``heads`` placed in a slot and not solved since its last change,
    in the stacked layout: slot r of p holds its H in columns [r·k, (r + 1)·k) of one
    (D, p·k) right-hand side, the other columns its siblings' H (zero for a sibling that is
    absent, rebuilding or already solved); heads with the same Gram sums share one stacked
    solve (design.md §5.13).

    Why the fixed layout: a head's bits must not depend on which siblings happen to be
    solved with it (a rebuilding instance, a refit where all p are there). Every step of
    :func:`_solve` treats columns independently — a triangular solve or a product does not mix
    columns, elementwise operations do not — but a BLAS kernel may pick its blocking, and so
    its summation order, from the matrix's shape; with the shape (D, p·k) and the slot's
    position fixed, a head's columns get the same operations whatever the other columns hold.
    Two BLAS/LAPACK calls (a triangular solve of 2·p·k columns, a product with G_0) for p heads
    instead of 2p: after a one-row change the p solves cost about what one did.
    """
    groups: list[tuple[GramSystem, list[LinearHead]]] = []
    for head in heads:
        if head._slot is None or head._solved is not None:
            continue
        system = GramSystem.of(head.gram) if cache is None else cache.system_for(head)
        for known, members in groups:
            if known is system or known.serves(head.gram):
                members.append(head)
                break
        else:
            groups.append((system, [head]))
    for system, members in groups:
        if system.factor is None:  # no rows, or a fold without rows: no penalty, no head
            for head in members:
                head._solved = (-np.inf, None)
            continue
        p = members[0]._slot[1]  # type: ignore[index]
        D, k = members[0].cross.shape[1], members[0].cross.shape[2]
        H, H0, H1 = (np.zeros((D, p * k)) for _ in range(3))
        for head in members:
            r, slots = head._slot  # type: ignore[misc]
            if slots != p or head.cross.shape[1:] != (D, k):
                raise ValueError("heads solved together must share one layout")
            at = slice(r * k, (r + 1) * k)
            H[:, at], H0[:, at], H1[:, at] = head.float_cross()
        X, W, gains = _solve_columns(system, H, H0, H1)
        for head in members:
            at = slice(head._slot[0] * k, (head._slot[0] + 1) * k)  # type: ignore[index]
            head._solved = (_gain(gains, at), np.ascontiguousarray(W[:, at]))
        if cache is not None and cache.complete(members):
            # every slot solved together: the filter tracks this solution from here on
            slots = [h._slot[0] for h in members]  # type: ignore[index]
            B = np.concatenate([H, H0], axis=1)
            cache.gains.rebase(members, slots, system.factor, X, B, system.G0, system.lam)


@dataclass(frozen=True)
class GramSystem:
    """The part of :meth:`LinearHead.solution` that depends on the Gram sums alone: G_0 as
    floats, the penalty λ of G = G_0 + G_1, and the Cholesky factor of G + λI (None when
    a fold has no rows: no out-of-fold gain, no head). A deterministic float function of the
    integers ``gram``, kept with them so a cache can tell whom it serves."""

    gram: np.ndarray
    G0: np.ndarray
    lam: float
    factor: np.ndarray | None
    token: int | None = None
    """What :class:`GramCache` knows these integers by (None outside a cache)."""

    @classmethod
    def of(cls, gram: np.ndarray) -> GramSystem:
        scale = 2.0 ** (-2 * FEATURE_BITS)
        D = gram.shape[1]
        kernel = HEAD_KERNELS.get(D * D)
        if kernel is not None and gram.dtype == np.int64:  # one pass: the same floats
            G, G0 = np.empty((D, D)), np.empty((D, D))
            kernel.gram_floats(np.ascontiguousarray(gram), scale, G, G0)
        else:
            G = np.add(gram[0], gram[1]).astype(np.float64)  # integer sums: exact, one rounding
            G *= scale
            G0 = gram[0].astype(np.float64)
            G0 *= scale
        lam = head_penalty(gram)
        # a fold has rows iff its Gram's trace is positive (every row adds 2^28 for the bias)
        folds_filled = all(int(np.trace(gram[f])) > 0 for f in (0, 1))
        factor = None
        if lam > 0.0 and folds_filled:
            G[np.diag_indices_from(G)] += lam
            # G + λI is symmetric: its transpose is the same matrix in Fortran order, factored
            # in place without LAPACK's copy (the same input values, so the same factor)
            with one_blas_thread():
                factor, info = _POTRF(G.T, lower=1, clean=0, overwrite_a=1)
            if info != 0:
                raise np.linalg.LinAlgError(f"ridge head: system not positive definite ({info})")
        return cls(_read_only(gram), G0, lam, factor)

    def serves(self, gram: np.ndarray) -> bool:
        """Whether ``gram`` holds the integers this system was built from: the same array, or
        equal ones — their diagonals first (O(D): every row adds 2^28 to its fold's bias
        entry, so after any change of rows they differ), then every entry."""
        if self.gram is gram:
            return True
        if self.gram.shape != gram.shape:
            return False
        return bool(
            np.array_equal(
                np.diagonal(self.gram, axis1=1, axis2=2), np.diagonal(gram, axis1=1, axis2=2)
            )
            and np.array_equal(self.gram, gram)
        )


def _read_only(gram: np.ndarray) -> np.ndarray:
    """``gram`` itself when it is a read-only array of its own (no one may change it), else
    a read-only copy."""
    if not gram.flags.writeable and gram.base is None:
        return gram
    out = gram.copy()
    out.flags.writeable = False
    return out


class GramCache:
    """The :class:`GramSystem` of the Gram sums last asked for, shared by the heads of one
    engine: with "shared-ridge" (design.md §5.13) every instance's Gram sums are equal, so
    after a change the first head to solve factors them and the others reuse it — checked
    against the integers (an equality test of (2, D, D) int64, ~20 µs), never assumed.
    Thread-safe: the first read after a bulk change solves the instances' heads on several
    threads (forgetting._parallel)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: GramSystem | None = None
        self._rows: tuple[np.ndarray, np.ndarray, list] | None = None
        self._next_token = 0
        self._successor: tuple[int, list, np.ndarray, int] | None = None
        """(token, pending rows, the Gram they lead to, its token): the last shared flush."""
        self._slots: dict[int, LinearHead] = {}
        self._n_slots = 0
        self.gains = GainFilter()
        """The filter that decides "not served" without solving when that is certain."""

    def register(self, head: LinearHead, slot: tuple[int, int]) -> None:
        """``head`` now holds slot ``slot`` = (r, p) of the stacked solve (an instance built
        or rebuilt); the filter forgets what it tracked for the head it replaces."""
        with self._lock:
            r, p = slot
            if p != self._n_slots:
                self._slots.clear()
                self._n_slots = p
            if self._slots.get(r) is not head:
                self._slots[r] = head
                self.gains.invalidate()

    def release(self, slot: int) -> None:
        """Slot ``slot``'s instance stopped serving (a rebuild): its head gets no more changes,
        so it leaves the stacked solve and the filter until its successor registers."""
        with self._lock:
            if self._slots.pop(slot, None) is not None:
                self.gains.invalidate()

    def members(self) -> list[LinearHead]:
        """The heads in the slots, in slot order."""
        with self._lock:
            return [self._slots[r] for r in sorted(self._slots)]

    def complete(self, heads: Sequence[LinearHead]) -> bool:
        """Whether ``heads`` are exactly the registered slot heads (every serving one)."""
        with self._lock:
            return len(heads) == len(self._slots) > 0 and all(
                self._slots.get(h._slot[0]) is h  # type: ignore[index]
                for h in heads
            )

    def filter_engaged(self, heads: Sequence[LinearHead]) -> bool:
        """Whether the filter may decide for ``heads`` (the engine then leaves their solve to
        the first head the filter cannot decide for: LinearHead.served_over)."""
        return self.complete(heads) and self.gains.engaged()

    def fold_grams_for(
        self, v: np.ndarray, folds: np.ndarray, parallel: bool = False
    ) -> list[np.ndarray | None]:
        """:func:`fold_grams` of a change's head features ``v`` and ``folds``: computed by the
        first head the change reaches and handed to the others when their rows' features are
        the same numbers (every instance's, with "shared-ridge") — compared, not assumed. The
        integers are the same whoever computes them.

        A read-only ``v`` that owns its memory (the engine's features of a batch, computed once
        for every instance) is kept by reference and recognized by identity: no one can have
        changed it, and a 20k-row batch at D = 257 spent ~50 ms copying and comparing 41 MB.
        ``parallel``: the two folds' Grams on two threads (:func:`fold_grams`) — for a
        caller outside the pool's workers."""
        with self._lock:
            last = self._rows
            if (
                last is not None
                and (last[0] is v or (last[0].shape == v.shape and np.array_equal(last[0], v)))
                and np.array_equal(last[1], folds)
            ):
                return last[2]
            grams = fold_grams(v, folds, parallel=True) if parallel else fold_grams(v, folds)
            kept = v if not v.flags.writeable and v.base is None else v.copy()
            self._rows = (kept, folds.copy(), grams)
            return grams

    def prepare(self, v: np.ndarray, folds: np.ndarray) -> None:
        """Compute a change's fold Grams ahead of the heads, on two threads, where the heads
        will ask this cache for them (a change of more than LAZY_ROWS and at most
        SHARED_DELTA_ROWS rows: :meth:`LinearHead._update`); the caller must be outside the
        pool's workers (inside one, the heads' own requests run inline)."""
        if LAZY_ROWS < len(v) <= SHARED_DELTA_ROWS:
            self.fold_grams_for(v, folds, parallel=True)

    def _token(self) -> int:
        self._next_token += 1
        return self._next_token

    def flushed(self, gram: np.ndarray, token: int | None, pending: list) -> tuple[np.ndarray, int]:
        """(``gram`` with the ``pending`` rows' terms added, its token): a new read-only
        array. Heads at the same sums (the same token) flushing the same rows — every
        instance of a shared head after a change; the rows compared, not assumed — get the
        array the first one computed: one (2, D, D) add per change instead of p (~1.2 ms
        each at D = 1033), and one array in memory instead of p."""
        with self._lock:
            last = self._successor
            if (
                token is not None
                and last is not None
                and last[0] == token
                and _same_pending(last[1], pending)
            ):
                return last[2], last[3]
            new = _with_pending(gram, pending)  # a new array: the given one is shared
            new.flags.writeable = False
            new_token = self._token()
            if token is not None:
                self._successor = (token, list(pending), new, new_token)
            return new, new_token

    def system_for(self, head: LinearHead) -> GramSystem:
        """The :class:`GramSystem` of ``head``'s Gram sums: the last one built when it is of
        the same integers — known by the head's token, else compared (the head then shares
        the system's array and token, known without a comparison from then on)."""
        gram = head.gram
        token = head.gram_token
        with self._lock:
            system = self._last
            if system is not None and token is not None and system.token == token:
                return system
            if system is None or not system.serves(gram):
                known = token if token is not None else self._token()
                system = dataclasses.replace(GramSystem.of(gram), token=known)
                self._last = system
        # outside the cache's lock (a flush takes the head's lock, then the cache's)
        head.share_gram(system.gram, system.token, gram)  # type: ignore[arg-type]
        return system


@dataclass(frozen=True)
class FixedWeights:
    """Head weights as integers (D, k) with a power-of-two exponent per output column."""

    weights: np.ndarray
    exponents: np.ndarray

    @classmethod
    def of(cls, W: np.ndarray) -> FixedWeights:
        peak = np.max(np.abs(W), axis=0)
        peak[peak == 0.0] = 1.0
        exponents = weight_bits(W.shape[0]) - np.ceil(np.log2(peak)).astype(np.int64) - 1
        Wi = np.rint(np.ldexp(W, exponents[None, :]))
        return cls(Wi, exponents)

    def apply(self, features: np.ndarray) -> np.ndarray:
        """Outputs (n, k) in real residual units for head ``features`` (n, D): int64, or the
        same integers as float64 (``head_features(Z, np.float64)``)."""
        # integer-valued float64 products and sums below 2^53: exact in any order
        Y = np.asarray(features, dtype=np.float64) @ self.weights
        return np.ldexp(Y, -(self.exponents[None, :] + FEATURE_BITS))


# -- one Newton step of logistic regression ------------------------------------------------------
WEIGHT_BITS = 8
"""Newton weights w = p(1 − p) ≤ 1/4 lie on a 2^-8 grid (integers ≤ 2^6). With |v_a v_b| ≤ 2^28
a row's weighted product is below 2^34, and MAX_ROWS = 2^28 rows sum below 2^62 — the same
bound as the cross sums. A finer grid would need a lower row limit; 8 bits lost nothing on the
benchmark's validation splits (MNIST-HOG 0.9755 with 8-bit and with float weights)."""
NEWTON_PENALTY = 1e-3
"""Per-class ridge penalty relative to the mean diagonal of that class's Hessian; chosen on
validation splits carved from the training sets: over MNIST-HOG, Fashion-HOG and digits the
mean accuracy ties within 0.01 pp for 1e-5 … 1e-3, and the largest of the tie bounds the
condition number by D/c, which keeps the float32 solves accurate. Fixed (not cross-fitted) so a
change costs one factorization per class."""
BOUND_ROWS = 300
"""Each class's Hessian W_c gets (BOUND_ROWS / n) · G / 4 added: the curvature of BOUND_ROWS
average rows at the bound p(1 − p) ≤ 1/4 (Böhning's bound; G = Σ v vᵀ, the ridge head's Gram,
already kept). Why: on small sets the weighted Grams, with weights from a g fitted on a few
dozen rows, are noisy and a pure Newton step overshoots (digits, n = 1257: 5-fold
cross-validation inside the training split, 3 seeds, 0.9276 with none, 0.9336 with 300 rows,
ridge head 0.9295); on large sets it vanishes (n = 60,000: μ = 0.005; validation MNIST-HOG 0.9756
vs 0.9758, Fashion-HOG 0.8747 vs 0.8751, Adult and sentiment equal or better). Chosen among
0, 30, 100, 300, 1000 on those training-split validations."""
PROB_FLOOR = 2.0**-TARGET_LIMIT_BITS
"""g's probabilities are floored here before the log: the head sees residuals on this grid, so
a probability below it is 0 to the head as well (a class missing from D° gets p = 0 from g)."""


def newton_step(n_classes: int) -> float:
    """The factor (k − 1)/k applied to the one-vs-rest step δ_c.

    Why: the one-vs-rest Hessian diag(p_c(1 − p_c)) ignores the softmax's coupling −p_c p_c'.
    For k = 2 the coupled step is exactly half the one-vs-rest one (both logits move by δ, their
    difference — all that the prediction sees — by 2δ; binary logistic regression's own Newton
    step moves it by δ), and for k classes at uniform p the multinomial Hessian on zero-sum
    logits is k/(k − 1) times the one-vs-rest one. Chosen on validation splits carved from the
    training sets (helper H19's report): (k − 1)/k is the best step or within 0.04 pp of it on
    MNIST-HOG, Fashion-HOG, digits, Adult and sentiment; a full step loses 0.3–0.6 pp on the two
    binary sets (Adult 0.8512 vs 0.8537, sentiment 0.7729 vs 0.7784), a half step ~0.5–0.8 pp
    on the 10-class sets.
    """
    return (n_classes - 1) / n_classes


def newton_weights(residuals: np.ndarray, scale_bits: int) -> np.ndarray:
    """Per class w = p_c(1 − p_c), as int64 on the 2^-WEIGHT_BITS grid, from the content's int64
    residuals r = y_c − p_c (2^-scale_bits units).

    Why from the residuals: |r| = p_c when y_c = 0 and 1 − p_c when y_c = 1, so in both cases
    p_c(1 − p_c) = |r|(1 − |r|) — a fixed function of what the head is already handed for a row,
    computed in integers (exact, no float rounding that could depend on the batch):
    a = |r| · 2^s ≤ 2^s, a(2^s − a) ≤ 2^(2s − 2) ≤ 2^62, then rounded (half up) to the grid.
    """
    if scale_bits != CLASSIFICATION_SCALE_BITS:
        raise ValueError("the Newton head is for classification residuals (one-hot minus p)")
    one = np.int64(1) << scale_bits
    a = np.minimum(np.abs(np.asarray(residuals, dtype=np.int64)), one)
    shift = 2 * scale_bits - WEIGHT_BITS
    return (a * (one - a) + (np.int64(1) << (shift - 1))) >> shift


def exact_weighted_grams(v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_i w_ic v_i v_iᵀ per class c, (k, D, D) int64, exact.

    Small batches (a forget or insert of a few rows) use numpy's int64 products. Larger ones use
    float64 BLAS on integer values in chunks of at most 2^18 rows: every product is below 2^34 and a
    chunk's sum below 2^52, so float64 holds them exactly whatever order the kernel sums in; the
    chunks are then added as int64. A class whose weights are all zero in a batch is skipped.
    """
    n, D = v.shape
    k = w.shape[1]
    out = np.zeros((k, D, D), dtype=np.int64)
    if n <= _SMALL_ROWS:
        for c in range(k):
            if w[:, c].any():
                out[c] = (v * w[:, c, None]).T @ v
        return out
    if k * D <= _STACKED_WIDTH:  # small systems: all classes in one product per block
        rows = min(_CHUNK_ROWS, _STACKED_FLOATS // (k * D))
        for start in range(0, n, rows):
            vf = v[start : start + rows].astype(np.float64)
            wf = w[start : start + rows].astype(np.float64)
            stacked = (wf[:, :, None] * vf[:, None, :]).reshape(len(vf), k * D)
            out += (stacked.T @ vf).astype(np.int64).reshape(k, D, D)
        return out
    for start in range(0, n, _CHUNK_ROWS):
        vf = v[start : start + _CHUNK_ROWS].astype(np.float64)
        wf = w[start : start + _CHUNK_ROWS].astype(np.float64)
        for c in range(k):
            if wf[:, c].any():
                out[c] += ((vf * wf[:, c, None]).T @ vf).astype(np.int64)
    return out


_STACKED_WIDTH = 4096
_STACKED_FLOATS = 1 << 23
"""With k (d + 1) ≤ 4096 the weighted rows of all classes are stacked side by side (≤ 64 MB per
block) and multiplied in one BLAS call: at small d a loop over classes is dominated by its
per-class elementwise products (letter, d = 16, k = 26: 0.64 s of a 1.8 s fit)."""


@dataclass
class NewtonHead(LinearHead):
    """The ridge head's sums plus, per class c, W_c = Σ w_c v vᵀ with w_c = p_c(1 − p_c) from g.

    Why: the ridge head fits the residual y − g(x) by least squares, which caps it at a linear
    least-squares classifier (MNIST-HOG 0.963, where SISA's logistic shards reach 0.977). One
    Newton step of one-vs-rest logistic regression, started from g's logits, needs the
    gradient Σ (y_c − p_c) v — the ridge head's cross sums already — and the per-class Hessian
    Σ p_c(1 − p_c) v vᵀ; with g fixed (trained on D° only), both are sums of fixed per-row
    terms, so the step is exact under deletion like the ridge head. The served logits are
    log g(x) + s δ_cᵀ v with δ_c = (W_c + μ G/4 + λ_c I)⁻¹ H_c, s = :func:`newton_step` and
    μ = BOUND_ROWS / n (:data:`BOUND_ROWS`: a little of the bound curvature, for small sets).
    Classification only: for squared loss one Newton step *is* the ridge head.

    The weighted Grams are kept for both folds together (the step has no cross-fitted
    parameter; ``gram``/``cross`` keep their folds for the ridge gain, which decides head vs
    tables exactly as for :class:`LinearHead`). Memory: k (d + 1)² int64 more per instance
    (21.7 MB at d = 520, k = 10). Cost of a change: the ridge solution plus one float32
    Cholesky and solve per class (see :meth:`solution`) — forget + first predict 3.3× the ridge
    head's at d = 520, k = 10 and 1.3–1.7× on the benchmark's other sets (p = 3, one process).
    """

    weighted: np.ndarray = None  # type: ignore[assignment]

    @classmethod
    def empty(cls, n_features: int, n_outputs: int, scale_bits: int) -> NewtonHead:
        ridge = LinearHead.empty(n_features, n_outputs, scale_bits)
        D = n_features + 1
        weighted = np.zeros((n_outputs, D, D), dtype=np.int64)
        return cls(ridge._gram, ridge.cross, ridge.counts, ridge.scale_bits, weighted)

    def _update(self, features, residuals, folds, sign: int) -> None:
        if len(features) == 0:
            return
        super()._update(features, residuals, folds, sign)  # checks the row limit first
        v = np.asarray(features, dtype=np.int64)
        w = newton_weights(residuals, self.scale_bits)
        update = np.add if sign > 0 else np.subtract
        if len(v) == 1:  # a one-row forget or insert: one outer product, scaled per class
            outer = np.multiply.outer(v[0], v[0])
            scaled = np.empty_like(outer)
            for c in np.flatnonzero(w[0]):
                np.multiply(outer, w[0, c], out=scaled)
                update(self.weighted[c], scaled, out=self.weighted[c])
            return
        update(self.weighted, exact_weighted_grams(v, w), out=self.weighted)

    def merge(self, other: LinearHead) -> None:
        if not isinstance(other, NewtonHead):
            raise TypeError("a Newton head merges with a Newton head's sums only")
        super().merge(other)
        self.weighted += other.weighted

    def solution(  # type: ignore[override]
        self, serve_if: Callable[[float], bool] | None = None
    ) -> tuple[float, NewtonWeights | None]:
        """The ridge head's out-of-fold gain (what decides head vs tables) and the Newton step
        — computed only when ``serve_if(gain)`` (or no ``serve_if``) says the head is served:
        where the tables win (e.g. Letter) a change costs the ridge gain alone, not k more
        factorizations.

        δ_c solves (A_c + λ_c I) δ_c = H_c per class, A_c = W_c + (BOUND_ROWS / n) G / 4 and
        λ_c = NEWTON_PENALTY · mean diag A_c, in float32 (LAPACK spotrf/spotrs on one BLAS
        thread): a deterministic function of the integer sums, so any history of adds and
        subtracts serves the refit's bits. Why float32: half the cost of float64 at the same
        served accuracy (relative difference in δ 6e-4 on MNIST-HOG, validation accuracy
        equal); a class whose float32 factorization fails falls back to float64.
        """
        gain, ridge = LinearHead.solution(self, serve_if)
        if ridge is None:
            return gain, None
        D, k = self.cross.shape[1], self.cross.shape[2]
        H = np.add(self.cross[0], self.cross[1]).astype(np.float64)
        H *= 2.0 ** -(FEATURE_BITS + TARGET_LIMIT_BITS)
        delta = np.zeros((D, k), dtype=np.float64)
        scale = 2.0 ** -(2 * FEATURE_BITS + WEIGHT_BITS)
        bound = np.add(self.gram[0], self.gram[1]).astype(np.float64)
        bound *= BOUND_ROWS / (4.0 * self.n_rows) * 2.0 ** (-2 * FEATURE_BITS)
        bound_trace = float(np.trace(bound))
        bound32 = bound.astype(np.float32)
        # Two classes have the same curvature (p(1 − p) of either class is the same number,
        # so the integer sums are equal — checked, not assumed): factored once. A function of
        # the sums either way, so the bits are the same as factoring both.
        shared = k == 2 and _same_curvature(self.weighted)
        single = False  # whether the factor in hand is float32
        with one_blas_thread():
            for c in range(k):
                if not (shared and c == 1):
                    factor, single = self._factor(c, scale, bound, bound32, bound_trace)
                if single:
                    x, _ = _SPOTRS(factor, H[:, c].astype(np.float32), lower=1)
                else:
                    x, _ = _POTRS(factor, H[:, c], lower=1)
                delta[:, c] = x
        return gain, NewtonWeights(FixedWeights.of(delta * newton_step(k)))

    def _factor(self, c: int, scale: float, bound, bound32, bound_trace: float):
        """Cholesky factor of class ``c``'s penalized curvature, and whether it is float32."""
        D = self.weighted.shape[1]
        diag = np.diag_indices(D)
        trace = float(np.diagonal(self.weighted[c]).astype(np.float64).sum()) * scale
        lam = NEWTON_PENALTY * (trace + bound_trace) / D
        # int64 → float32 in one pass, scaled by a power of two (exact); the transpose is the
        # same symmetric matrix in Fortran order, factored in place without a copy
        A = self.weighted[c].astype(np.float32)
        A *= np.float32(scale)
        A += bound32
        A[diag] += np.float32(lam)
        factor, info = _SPOTRF(A.T, lower=1, clean=0, overwrite_a=1)
        if info == 0:
            return factor, True
        # float32 too coarse for this system: the same solve in float64
        A64 = self.weighted[c].astype(np.float64) * scale + bound
        A64[diag] += lam
        factor, info = _POTRF(A64.T, lower=1, clean=0, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"Newton head: class {c} not positive definite")
        return factor, False

    def equals(self, other: LinearHead) -> bool:
        return (
            isinstance(other, NewtonHead)
            and LinearHead.equals(self, other)
            and np.array_equal(self.weighted, other.weighted)
        )


def _same_curvature(weighted: np.ndarray) -> bool:
    """Whether a two-class head's curvature sums are equal (then one factor serves both)."""
    return bool(np.array_equal(weighted[0], weighted[1]))


@dataclass(frozen=True)
class NewtonWeights:
    """The Newton step δ (D, k) as fixed-point weights; serves softmax(log g(x) + δᵀ v)."""

    logits: FixedWeights

    def outputs(self, features: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Class probabilities (n, k) for head ``features`` (n, D) and g's outputs (n, k).

        δᵀv is exact (integer sums, :meth:`FixedWeights.apply`); log, exp and the row sum run
        in canonical blocks (:func:`forgetting._rowwise.rowwise`), so a row gets the same bits
        in any batch.
        """
        shift = self.logits.apply(features)
        k = shift.shape[1]
        stacked = np.hstack([shift, np.asarray(g, dtype=np.float64)])
        return rowwise(
            lambda b: _softmax_step(b[:, :k], b[:, k:]), stacked, SERVE_BLOCK_ROWS, owner=self
        )

    def correction(self, features: np.ndarray, g: np.ndarray) -> np.ndarray:
        """outputs − g: the correction added to g where a caller serves g + correction."""
        return self.outputs(features, g) - g


def _softmax_step(shift: np.ndarray, g: np.ndarray) -> np.ndarray:
    z = np.log(np.maximum(g, PROB_FLOOR)) + shift
    z -= np.max(z, axis=1, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=1, keepdims=True)


LOGIT_STEP = 0.75
"""c₀ of :class:`LogitRidgeHead`'s step, chosen on validation splits carved from the training
sets (helper H23's study: 0.75 best of {0.5, 0.75, 1, 1.25, 1.5} averaged over digits,
MNIST-HOG, Fashion-HOG, Adult and sentiment)."""


@dataclass
class LogitRidgeHead(LinearHead):
    """The ridge head's sums plus, per class, Σ p_c(1 − p_c) over the rows; its solution is
    served as a logistic step from g's logits: softmax(log g + δᵀv) with
    δ_c = c₀ · (k − 1)/k · W_c / a_c, a_c = (Σ p_c(1 − p_c) + BOUND_ROWS / 4) / n.

    Why: the ridge W fits the residual y − p in probability units; a Newton step of
    one-vs-rest logistic regression would divide each class's curvature out — per row, which
    needs k weighted Gram sums (:class:`NewtonHead`). Dividing by the class's *mean* curvature
    a_c keeps the one unweighted Gram every instance shares (design.md §5.13) and k more
    integers per instance; with the random features of "shared-rf" it served Fashion-HOG
    0.3 pp better than adding W to g (H23's study). The weights p(1 − p) = |r|(1 − |r|) come
    from the stored residuals in integers (:func:`newton_weights`), summed as int64: exact
    under deletion like every other sum. The gain that decides head vs tables is the ridge
    head's, unchanged. Classification only."""

    weights: np.ndarray = None  # type: ignore[assignment]
    """Σ_i p_ic(1 − p_ic) per class (k,), int64 on the 2^-WEIGHT_BITS grid, both folds."""

    @classmethod
    def empty(cls, n_features: int, n_outputs: int, scale_bits: int) -> LogitRidgeHead:
        ridge = LinearHead.empty(n_features, n_outputs, scale_bits)
        weights = np.zeros(n_outputs, dtype=np.int64)
        return cls(ridge._gram, ridge.cross, ridge.counts, ridge.scale_bits, weights)

    def _update(self, features, residuals, folds, sign: int, gram: bool = True) -> None:
        if len(features) == 0:
            return
        super()._update(features, residuals, folds, sign, gram)  # checks the row limit first
        self._add_weights(residuals, sign)

    def add_cross(self, features: np.ndarray, residuals: np.ndarray, folds: np.ndarray) -> None:
        # a rebuild adopting a sibling's Gram sums: the weights are per residual, like the
        # cross sums, so they are added here
        self._update(features, residuals, folds, 1, gram=False)

    def _add_weights(self, residuals: np.ndarray, sign: int) -> None:
        kernel = HEAD_KERNELS.get(0) if len(residuals) == 1 else None
        if kernel is not None and self.scale_bits == CLASSIFICATION_SCALE_BITS:
            one = np.int64(1) << self.scale_bits
            shift = 2 * self.scale_bits - WEIGHT_BITS
            kernel.newton_weight_sums(
                self.weights, np.asarray(residuals, dtype=np.int64), one, shift, sign
            )
            return
        total = newton_weights(residuals, self.scale_bits).sum(axis=0)
        if sign > 0:
            self.weights += total
        else:
            self.weights -= total

    def merge(self, other: LinearHead) -> None:
        if not isinstance(other, LogitRidgeHead):
            raise TypeError("a logit ridge head merges with a logit ridge head's sums only")
        super().merge(other)
        self.weights += other.weights

    def equals(self, other: LinearHead) -> bool:
        return (
            isinstance(other, LogitRidgeHead)
            and super().equals(other)
            and np.array_equal(self.weights, other.weights)
        )

    def _served(self, W: np.ndarray) -> NewtonWeights:
        k = W.shape[1]
        n = float(self.n_rows)
        mean_curvature = (
            self.weights.astype(np.float64) * 2.0**-WEIGHT_BITS + BOUND_ROWS / 4.0
        ) / n
        step = LOGIT_STEP * newton_step(k) / mean_curvature
        return NewtonWeights(FixedWeights.of(W * step))
