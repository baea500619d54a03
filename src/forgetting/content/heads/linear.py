"""An exact linear head on all rows: ridge regression from integer sums ΣvvᵀΣ and Σvrᵀ.

The base model g is trained on D° only (design.md §1), so in exact mode it sees ~0.5 % of the
rows; on image and text features it is the weak part of the model (benchmarks/results/
partitions.md: g alone 0.63 on MNIST-HOG where SISA reaches 0.96). A ridge regression of the
residual r = y − g(x) on the features v = [φ(x), 1] depends on the rows only through
G = Σ v vᵀ and H = Σ v rᵀ — sums over rows. Accumulated as int64 (v and r on the fixed-point
grids of :mod:`.fixed_point`), they are exact under deletion: subtracting a row's outer
products restores the very integers a fit without the row would produce, so the head solved
from them is the refit's head bit for bit (the solve is a deterministic float function of
those integers).

The penalty is c · mean(diag G) with a fixed c (:data:`.gram.PENALTY`): cross-fitting it over
a grid would cost a factorization per value after every change. Both statistic folds are kept
so that the head's out-of-fold gain (a fold-A head scored on fold-B sums, a deterministic
function of the integers) can be compared with the tables'
(:func:`forgetting.content.tables.build_flat_content`): an instance serves its head when that
gain exceeds ``TABLES_GAIN_FACTOR`` times theirs.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..accumulators import MAX_ROWS
from ..kernels import HEAD_KERNELS
from . import gram as _gram
from .certified import UNSURE, BoundedWeights, weight_tolerance
from .fixed_point import (
    FEATURE_BITS,
    TARGET_LIMIT_BITS,
    FixedWeights,
    fold_cross,
    fold_grams,
    head_targets,
)
from .gain_filter import TOLERANCE
from .gram import GramCache, GramSystem, add_pending, penalty_of_diagonal
from .solve import head_gain, solve_ridge, solve_stacked

PENDING_ROWS = 1024
"""Pending rows are added to the Gram sums once this many wait (bounds their memory)."""


@dataclass
class LinearHead:
    """Per fold f: G[f] = Σ v vᵀ (D, D) and H[f] = Σ v rᵀ (D, k), int64, D = d + 1.

    The Gram terms of small changes wait (``_pending``) until something reads :attr:`gram`
    (content.heads.gram: why, and the bounds ``LAZY_ROWS`` and :data:`PENDING_ROWS`). Integer
    sums: adding the pending rows later gives the same integers."""

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
        if gram and len(v) == 1 and _gram.LAZY_ROWS >= 1:
            self._update_one(v, r, folds, sign)
            return
        lazy = gram and len(v) <= _gram.LAZY_ROWS
        if lazy:
            self._defer(v, folds, sign)
        if not gram or lazy:
            grams: list[np.ndarray | None] = [None, None]
        elif cache is not None and len(v) <= _gram.SHARED_DELTA_ROWS:
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
            # the gain filter tracks the head's solution through this change (content.heads.
            # gain_filter); a change without its Gram terms is not logged, so it resets there
            cache.gains.log(self, v, r, self.target_unit(), folds, sign)

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
        else:  # the same integers in one compiled call (content.heads._kernels)
            row = r[0]

            def add() -> None:
                kernel.one_row_sums(cross, self._pending_diag, vi, row, sign)

            self._pend(vi[None, :], folds.copy(), sign, None, add)
        self.counts[f] += sign
        cache = self._gram_cache
        if cache is not None and self._slot is not None:
            cache.gains.log(self, v, r, self.target_unit(), folds, sign)

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
            add_pending(self._own_gram(), self._pending)
            self._pending.clear()
            self._pending_rows = 0
            self._pending_diag[...] = 0

    def penalty(self) -> float:
        """:func:`head_penalty` of the current Gram sums, from their diagonal alone (the
        pending rows' squares included): what the gain filter compares without reading
        :attr:`gram`."""
        with self._flush_lock:
            diag = np.diagonal(self._gram[0]) + np.diagonal(self._gram[1])
            return penalty_of_diagonal(diag + self._pending_diag)

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
        """The sums alone (a chunk's partial head travels to the client: engine.builds);
        pending rows added first. The solve cache, the slot and the lock stay behind."""
        self._flush()
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    @property
    def changes(self) -> int:
        """How many times the sums changed since this head was made: how the gain filter
        (content.heads.gain_filter) knows it saw every change."""
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

    @property
    def slot(self) -> tuple[int, int] | None:
        """(r, p) when the head is solved in the stacked layout as slot r of p, else None."""
        return self._slot

    @property
    def solved(self) -> tuple[float, np.ndarray | None] | None:
        """The stacked solve's (gain, W) for the current sums, or None until solved."""
        return self._solved

    def keep_solved(self, gain: float, W: np.ndarray | None) -> None:
        """Keep the stacked solve's result for the current sums (:func:`solve_stacked`)."""
        self._solved = (gain, W)

    def served_over(self, threshold: float):
        """The served weights when the head's out-of-fold gain exceeds ``threshold`` (the
        rule of content.tables.build_flat_content), else None.

        A stacked head asks the engine's gain filter first (content.heads.gain_filter): when it
        is certain the gain is below the threshold, the head is not served and nothing is solved
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

    def certified_over(self, threshold: float):
        """What :meth:`served_over` would serve, known without the exact solve where the gain
        filter is certain (content.heads.certified): None (the tables serve), or
        :class:`~.certified.BoundedWeights` around the filter's tracked weights — or
        :data:`~.certified.UNSURE`: the head is already solved (:meth:`served_over` is then
        cheap and exact), not in a slot, served by another rule (a Newton step), or the
        filter cannot vouch for its state or for the choice."""
        cache = self._gram_cache
        if cache is None or self._slot is None or self._solved is not None:
            return UNSURE
        estimate = cache.gains.served_estimate(self, self.penalty)
        if estimate is None:
            return UNSURE
        gain, scale, W = estimate
        if gain + TOLERANCE * scale < threshold:
            return None
        if gain - TOLERANCE * scale > threshold:
            return self._certified(W, weight_tolerance(W.shape[0]))
        return UNSURE

    def _certified(self, W: np.ndarray, tolerance: float):
        """What serves the tracked weights W̃ in place of :meth:`_served`'s (a certified
        label's weights, within ``tolerance`` · ‖W̃_c‖ of the exact ones), or UNSURE."""
        return BoundedWeights.around(W, tolerance)

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
        labels, half the full Gram (:func:`.solve.solve_ridge`: one triangular solve of 2k
        columns and one product with G_0). The approximation is a fixed, deterministic
        function of the sums, so the gain — and the choice it drives — is the same after any
        history: exactness needs determinism, not an exact W_a.

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
            W, gains = solve_ridge(system, *self.float_cross())
            gain = head_gain(gains)
        if W is None or (serve_if is not None and not serve_if(gain)):
            return gain, None
        return gain, self._served(W)

    def _served(self, W: np.ndarray):
        """What serves the solved weights W: their fixed-point copy, added to g."""
        return FixedWeights.of(W)

    def target_unit(self) -> float:
        """A head residual's grid step in real units (2^-20 classification, 2^-10 regression)."""
        return 2.0**-TARGET_LIMIT_BITS if self.scale_bits >= 32 else 2.0**-10

    def float_cross(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """H = H_0 + H_1, H_0 and H_1 as floats in real units (integer sums, then one rounding)."""
        H = np.add(self.cross[0], self.cross[1]).astype(np.float64)
        H0 = self.cross[0].astype(np.float64)
        H1 = self.cross[1].astype(np.float64)
        unit = 2.0**-FEATURE_BITS * self.target_unit()  # powers of two: exact
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
