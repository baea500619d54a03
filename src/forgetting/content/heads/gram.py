"""The heads' Gram sums G = Σ v vᵀ: rows whose terms wait, the penalty, the factorization,
and a cache that shares all three between the instances whose sums are equal.

Why pending rows: where the tables serve and the gain filter decides without a solve
(content.heads.gain_filter), nothing reads the Gram sums between changes, and p heads adding
the same (D, D) outer product after every one-row change is a visible part of a forget. The
terms of a small change wait until the sums are read; integer sums give the same integers
whenever they are added.

Why a cache: with "shared-ridge" (design.md §5.13) every instance's Gram sums are equal, so the
first head to read them after a change adds the pending rows, factors the system and computes
the fold Grams of a batch, and the others reuse the results — found by a token or by
comparing the integers, never assumed. Everything here is a deterministic function of the
integer sums, so a shared result is the same bits as one computed by each head.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.linalg.lapack import dpotrf as _POTRF

from ..._rowwise import one_blas_thread
from ..kernels import HEAD_KERNELS
from .fixed_point import FEATURE_BITS, fold_grams
from .gain_filter import GainFilter

PENALTY = 1e-3
"""Ridge penalty relative to the mean diagonal of G (features on a common scale: φ's rows
have unit norm). benchmarks/results/partitions.md's prototype cross-fitted it on
(1e-4 … 1e-1); fixed here so a change costs one factorization per fold, not one per value."""


def head_penalty(gram: np.ndarray) -> float:
    """The ridge penalty: c times mean diag G rounded to the nearest power of two (0 when
    G is empty: no rows), from the integer sums ``gram`` (2, D, D).

    Why rounded: the penalty then stays the same number while rows come and go (it moves
    only when mean diag G crosses a boundary 2^(j + 1/2): at most once per ~30 % change of
    the row count, the next deletion only for a set that sits on a boundary), so the system
    A = G + λI changes by the rows' outer products alone and the gain filter
    (content.heads.gain_filter) can track its solution row by row. The penalty's size was chosen
    on a 1000× grid (:data:`PENALTY`); within √2 of it is the same choice."""
    return penalty_of_diagonal(np.add(np.diagonal(gram[0]), np.diagonal(gram[1])))


def penalty_of_diagonal(diag: np.ndarray) -> float:
    """:func:`head_penalty` from the integer diagonal of G = G_0 + G_1."""
    D = diag.shape[0]
    mean = float(diag.astype(np.float64).sum()) * 2.0 ** (-2 * FEATURE_BITS) / D
    if not mean > 0.0:
        return 0.0
    return PENALTY * 2.0 ** round(math.log2(mean))


def _same_pending(a: list, b: list) -> bool:
    """Whether two heads' pending rows are the same rows, folds and signs, in the same order."""
    return len(a) == len(b) and all(
        sa == sb and va.shape == vb.shape and np.array_equal(va, vb) and np.array_equal(fa, fb)
        for (va, fa, sa), (vb, fb, sb) in zip(a, b, strict=True)
    )


PENDING_PASS_ROWS = 8
"""Pending rows up to this many are added while copying the Gram, in one compiled pass
(content.heads._kernels.gram_with_rows); more go through :func:`add_pending`'s products."""


def _with_pending(gram: np.ndarray, pending: list) -> np.ndarray:
    """A new (2, D, D) int64 array: ``gram`` plus the Gram terms of ``pending`` rows — the
    integers of a copy followed by :func:`add_pending`, in one pass when the rows are few."""
    D = gram.shape[1]
    n = sum(len(v) for v, _, _ in pending)
    kernel = HEAD_KERNELS.get(D * D) if 0 < n <= PENDING_PASS_ROWS else None
    if kernel is None or gram.dtype != np.int64:
        new = np.array(gram)
        add_pending(new, pending)
        return new
    V = np.concatenate([np.asarray(v).astype(np.int64, copy=False) for v, _, _ in pending])
    folds = np.concatenate([np.asarray(f).astype(np.int64, copy=False) for _, f, _ in pending])
    signs = np.concatenate([np.full(len(v), s, dtype=np.int64) for v, _, s in pending])
    new = np.empty_like(gram)
    kernel.gram_with_rows(np.ascontiguousarray(gram), V, folds, signs, new)
    return new


def add_pending(gram: np.ndarray, pending: list) -> None:
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
"""A change of at most this many rows leaves its Gram terms pending (``LinearHead.gram``).
Both bounds are read here by :meth:`GramCache.prepare` and through this module by the head
(content.heads.linear), so setting one here changes both."""


class SharedHead(Protocol):
    """What the cache and the stacked solve (content.heads.solve) use of a head
    (content.heads.linear.LinearHead)."""

    cross: np.ndarray

    @property
    def gram(self) -> np.ndarray: ...

    @property
    def gram_token(self) -> int | None: ...

    @property
    def slot(self) -> tuple[int, int] | None: ...

    @property
    def solved(self) -> tuple[float, np.ndarray | None] | None: ...

    def share_gram(self, gram: np.ndarray, token: int, seen: np.ndarray) -> None: ...

    def keep_solved(self, gain: float, W: np.ndarray | None) -> None: ...

    def float_cross(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


@dataclass(frozen=True)
class GramSystem:
    """The part of ``LinearHead.solution`` that depends on the Gram sums alone: G_0 as
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
    against the integers (an equality test of (2, D, D) int64), never assumed.
    Thread-safe: the first read after a bulk change solves the instances' heads on several
    threads (forgetting._parallel)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: GramSystem | None = None
        self._rows: tuple[np.ndarray, np.ndarray, list] | None = None
        self._next_token = 0
        self._successor: tuple[int, list, np.ndarray, int] | None = None
        """(token, pending rows, the Gram they lead to, its token): the last shared flush."""
        self._slots: dict[int, SharedHead] = {}
        self._n_slots = 0
        self.gains = GainFilter()
        """The filter that decides "not served" without solving when that is certain."""

    def register(self, head: SharedHead, slot: tuple[int, int]) -> None:
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

    def members(self) -> list[SharedHead]:
        """The heads in the slots, in slot order."""
        with self._lock:
            return [self._slots[r] for r in sorted(self._slots)]

    def complete(self, heads: Sequence[SharedHead]) -> bool:
        """Whether ``heads`` are exactly the registered slot heads (every serving one)."""
        with self._lock:
            return len(heads) == len(self._slots) > 0 and all(
                self._slots.get(h.slot[0]) is h  # type: ignore[index]
                for h in heads
            )

    def filter_engaged(self, heads: Sequence[SharedHead]) -> bool:
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
        changed it, and copying and comparing a large batch's features costs more than the
        Grams' share of the change.
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
        SHARED_DELTA_ROWS rows: ``LinearHead._update``); the caller must be outside the
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
        array the first one computed: one (2, D, D) add per change instead of p, and one
        array in memory instead of p."""
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

    def system_for(self, head: SharedHead) -> GramSystem:
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
