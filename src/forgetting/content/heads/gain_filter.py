"""A floating-point filter for the head-vs-tables choice: "the head is not served" decided
without solving the head, when that is certain.

Why: an instance serves its ridge head when the head's out-of-fold gain exceeds
``TABLES_GAIN_FACTOR`` × the tables' (content.tables.build_flat_content). Where the tables
serve — bench.core's Gaussian mixture, Letter, diamonds — every change still paid the exact
gain: a factorization of the (d + 1)² system and a solve of 2·p·k columns, a large part of a
forget and its first prediction (benchmarks/results/breakdown.md), for a choice that one row
almost never moves (the gains are sums over ~n rows; a row moves them by ~1 unit, the margin
is thousands).

The choice must stay the exact rule's — a refit computes the exact gain, and a different
choice would serve different bits — so this is a *filter* in the computational-geometry sense:
an approximation with an error bound decides when the bound says the answer is certain, and
the exact computation decides otherwise. After an exact stacked solve of all p heads (one
Gram system), this keeps X = A⁻¹[H | H_0] (the same (D, 2m) layout as
content.heads.solve.solve_ridge), A⁻¹ and Q = G_0 X as floats and updates them row by row
(Sherman–Morrison) as the integer sums change: per row O(D² + D·2m) flops instead of a
factorization (O(D³)) and a 2m-column solve. The head's gain is then
read off X and Q with the exact route's formula (:func:`fold_scores`), together with the
scale Σ|terms| the rounding errors act on; the head is certainly not served when
gain + TOLERANCE · scale < threshold.

Why the tolerance holds: the penalty λ is constant between power-of-two buckets of the Gram's
trace (content.heads.gram.head_penalty), so the tracked A is the exact route's matrix in real
arithmetic and the two differ only by rounding. A is λ-regularized with
λ ≥ PENALTY/√2 · mean diag G, so cond(A) ≤ 1 + √2·D/PENALTY (1.8·10⁵ at D = 129,
1.5·10⁶ at D = 1033): a backward-stable solve is accurate to ~D·cond·ε relative
(≤ 4·10⁻⁸ at D = 129), and the row updates (at most REFRESH_ROWS between exact solves) add
about cond·ε per row. TOLERANCE = 10⁻⁵ of the scale is ≥ 100× those estimates at D = 129
(~30× at D = 1033, where they are ~3·10⁻⁷ — pessimistic bounds: the errors seen are far
smaller), and the tests hold the filter's error against the exact gain over long
forget/insert sequences below 10⁻⁹ of the scale (a scratch run of 500 changes at D = 25:
3·10⁻¹⁵, on both paths). A filter can only send a decision to the exact route, never make one
the exact route would not: when unsure (inside the tolerance, a head replaced or changed by a
path that does not log, a change of more than LOG_ROWS rows, λ's bucket moved, an instance
rebuilding) it answers "unknown".
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg.blas as blas
from scipy.linalg.lapack import dpotri as _POTRI

from ..kernels import GAIN_FILTER_KERNELS
from .fixed_point import FEATURE_BITS

TOLERANCE = 1e-5
"""The filter's error bound, relative to the scale Σ|terms| of the gain (see the module
docstring: ≥ 30× the rounding estimates, ≥ 10⁴× the errors the tests allow)."""
REFRESH_ROWS = 512
"""Rows the tracked solution may be updated by before the exact route runs again: bounds the
rounding drift of the row updates (each adds ~cond·ε)."""
LOG_ROWS = 16
"""A change of more rows than this is not logged: the exact route (one solve) is cheaper
than that many row updates, and bulk changes solve their heads on several threads anyway."""


def fold_scores(X: np.ndarray, Q: np.ndarray, B: np.ndarray, lam: float):
    """Per-column out-of-fold gain of the fold heads W_0 = 2Y, W_1 = 2(W − Y), from
    X = [W | Y] = A⁻¹B, B = [H | H_0] and Q = G_0 X (content.heads.solve's definitions), and
    the per-column scale Σ|terms| of that sum (what rounding errors are relative to).

    fold 0's head on fold 1: ⟨W_0, 2H_1 − 2H_0 + λW_0 + G_0 W_0⟩; fold 1's on fold 0:
    ⟨W_1, 2H_0 − G_0 W_1⟩ — written as few whole-array steps (one call per change for all
    p heads: ~20 small numpy calls)."""
    m = X.shape[1] // 2
    W, Y, QW, QY, H, H0 = X[:, :m], X[:, m:], Q[:, :m], Q[:, m:], B[:, :m], B[:, m:]
    # with W_0 = 2Y, W_1 = 2(W − Y), H_1 = H − H_0 the terms are 4× those of
    # a0 = ⟨Y, (H − 2H_0) + λY + QY⟩ and a1 = ⟨W − Y, H_0 − (QW − QY)⟩
    Wd = W - Y
    Qd = QW - QY
    t0 = H - 2.0 * H0
    t1 = lam * Y
    score = Y * (t0 + t1 + QY) + Wd * (H0 - Qd)
    scale = np.abs(Y) * (np.abs(t0) + np.abs(t1) + np.abs(QY)) + np.abs(Wd) * (
        np.abs(H0) + np.abs(Qd)
    )
    return 4.0 * score.sum(axis=0), 4.0 * scale.sum(axis=0)


@dataclass
class _Change:
    """One logged change: the rows' head features (integers: 2^14 per unit), their folds,
    the sign, and the array the first head was given (the others usually get the same)."""

    v: np.ndarray
    folds: np.ndarray
    sign: int
    source: object = field(repr=False)
    folds_source: object = field(repr=False, default=None)


class _Waiting:
    """The compiled row update's pending rank-one terms of A⁻¹ (columns ``U``, factors
    ``fu``) and of G_0 (``V``, ``fv``), ``counts`` of each in use
    (content.heads._gain_filter_kernel.apply_row): A⁻¹ and G_0 are the arrays plus these."""

    COLUMNS = 8
    """Terms kept before they are added to the (D, D) arrays in one pass."""

    def __init__(self, D: int):
        self.U = np.zeros((D, self.COLUMNS), order="F")
        self.fu = np.zeros(self.COLUMNS)
        self.V = np.zeros((D, self.COLUMNS), order="F")
        self.fv = np.zeros(self.COLUMNS)
        self.counts = np.zeros(2, dtype=np.int64)

    def buffers(self) -> tuple:
        """(U, fu, V, fv, counts): the pending terms as the compiled row update takes them."""
        return self.U, self.fu, self.V, self.fv, self.counts

    def flush(self, Ainv: np.ndarray, G0: np.ndarray) -> None:
        """Add the pending terms to ``Ainv`` and ``G0`` (numpy) and empty the buffers."""
        nu, nv = (int(c) for c in self.counts)
        if nu:
            Ainv += (self.U[:, :nu] * self.fu[:nu]) @ self.U[:, :nu].T
        if nv:
            G0 += (self.V[:, :nv] * self.fv[:nv]) @ self.V[:, :nv].T
        self.counts[:] = 0


class GainFilter:
    """The tracked solution of one stacked Gram system (p heads in slots), and the log of the
    changes made to their sums since it was last brought up to date. Thread-safe (one lock).

    Every method takes the heads as they are; a head is recognized by identity (weakly held)
    and by its count of sum changes (``LinearHead.changes``), so a head replaced by a rebuild
    or changed by a path that does not log here (a merge, adopted Gram sums, a bulk change)
    makes the filter answer "unknown" until the next exact solve of all p heads re-bases it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.largest_drift = 0.0
        """The largest relative difference per column seen between the tracked solution and
        an exact solve of the same sums (:meth:`_audit`)."""
        self.distrusted = False
        """Set when a difference exceeded a tenth of the weights' tolerance: from then on
        :meth:`served_estimate` answers None (certified labels take the exact route)."""
        self._reset()

    def _reset(self) -> None:
        self._base: tuple | None = None  # (factor, X, B, G0, lam) of the last exact solve
        self._heads: list[weakref.ref] = []
        self._slots: list[int] = []  # each tracked head's slot (its columns in X)
        self._changes: list[int] = []  # each slot's head's change count, tracked state
        self._served: list[bool | None] = []  # each slot's last exact choice
        self._log: list[_Change] = []  # shared part of changes not yet applied
        self._logged_rows = 0  # rows in the log
        self._residuals: list[list[np.ndarray]] = []  # per slot, in the log's order
        self._state: tuple | None = None  # (Ainv, G0, X, Q, B, lam): tracked, up to date
        self._waiting: _Waiting | None = None  # the kernel's pending rank-one terms
        self._gains: tuple[np.ndarray, np.ndarray] | None = None  # per column, current
        self._slot_gains: list[tuple[float, float]] = []  # per slot: its columns' sums
        self._rows = 0  # rows applied since the base
        self._penalty: tuple[int, float] | None = None  # (rows since the base, λ) asked

    # -- from the exact route ---------------------------------------------------------------
    def rebase(
        self,
        heads,
        slots,
        factor,
        X: np.ndarray,
        B: np.ndarray,
        G0: np.ndarray,
        lam: float,
        tolerance: float = np.inf,
    ) -> None:
        """An exact stacked solve of every serving head (``heads``, in ``slots``; an absent
        slot's columns are zero and stay so) just produced X = A⁻¹B, B = [H | H_0], with
        Cholesky ``factor`` of A; tracking starts from it (A⁻¹ and Q computed lazily, when an
        estimate is first asked). ``tolerance``: the tracked weights' relative tolerance
        (content.heads.certified.weight_tolerance), what :meth:`_audit` holds them to."""
        with self._lock:
            self._audit(heads, X, tolerance)
            self._reset()
            self._base = (factor, X, B, G0, lam)
            self._heads = [weakref.ref(h) for h in heads]
            self._slots = list(slots)
            self._changes = [h.changes for h in heads]
            self._served = [None] * len(heads)
            self._residuals = [[] for _ in heads]

    def _audit(self, heads, X: np.ndarray, tolerance: float) -> None:
        """Compare the tracked solution with an exact solve of the same sums — when the
        tracked state is current for exactly these heads' sums (every logged change applied,
        none since) — and keep the largest relative difference per column
        (:attr:`largest_drift`); past a tenth of the weights' ``tolerance`` certified labels
        stop for good
        (:attr:`distrusted`): the estimate they rest on did not hold here."""
        if (
            self._state is None
            or self._log
            or len(heads) != len(self._heads)
            or any(ref() is not h for ref, h in zip(self._heads, heads, strict=True))
            or self._changes != [h.changes for h in heads]
        ):
            return
        tracked = self._state[2]
        if tracked.shape != X.shape:
            return
        norms = np.linalg.norm(X, axis=0)
        used = norms > 0.0
        if not np.any(used):
            return
        drift = float(np.max(np.linalg.norm(tracked - X, axis=0)[used] / norms[used]))
        self.largest_drift = max(self.largest_drift, drift)
        if not drift <= tolerance / 10.0:
            self.distrusted = True

    def decided(self, head, served: bool) -> None:
        """The exact route chose for ``head``: the filter engages only once every slot's last
        exact choice was "tables" (a served head needs the exact solve anyway)."""
        with self._lock:
            slot = self._slot_of(head)
            if slot is not None and self._changes[slot] == head.changes:
                self._served[slot] = served

    def engaged(self) -> bool:
        """Whether the filter tracks a solution and no slot's head was served."""
        with self._lock:
            return self._ready()

    def behind(self) -> bool:
        """Whether logged changes wait to be applied to the tracked solution (the next
        estimate runs the row updates: a compiled pass over A⁻¹ and G_0 per row)."""
        with self._lock:
            return self._tracking() and bool(self._log)

    def invalidate(self) -> None:
        with self._lock:
            self._reset()

    # -- from the heads' changes -------------------------------------------------------------
    def log(self, head, v, residuals, unit: float, folds, sign: int) -> None:
        """A change of ``head``'s sums by rows with head features ``v`` (integers, 2^14 per
        unit), head-grid ``residuals`` (integers, ``unit`` each) and ``folds``. The p heads
        log the same rows in the same order: their features and folds are compared (the
        very array, usually: the engine computes a change's features once for all)."""
        with self._lock:
            if self._base is None:
                return
            slot = self._slot_of(head)
            if slot is None or len(v) > LOG_ROWS or not self._tracking():
                self._reset()
                return
            if self._rows + self._logged_rows + len(v) > REFRESH_ROWS:
                self._reset()  # past what an estimate vouches for: keep no log that grows
                return
            if self._changes[slot] + len(self._residuals[slot]) + 1 != head.changes:
                self._reset()  # a change this filter did not see
                return
            at = len(self._residuals[slot])
            if at < len(self._log):
                known = self._log[at]
                if known.sign != sign or not (
                    (known.source is v or np.array_equal(known.v, v))
                    and (known.folds_source is folds or np.array_equal(known.folds, folds))
                ):
                    self._reset()
                    return
            elif at == len(self._log):
                copy = np.array(v, dtype=np.float64)
                self._log.append(_Change(copy, np.array(folds), sign, v, folds))
                self._logged_rows += len(v)
            else:  # pragma: no cover - the counts above make this impossible
                self._reset()
                return
            self._residuals[slot].append(np.multiply(residuals, unit, dtype=np.float64))

    # -- the filter --------------------------------------------------------------------------
    def certainly_below(self, head, threshold: float, lam) -> bool:
        """True when ``head``'s exact out-of-fold gain is certainly ≤ ``threshold`` (the head
        is not served); False means unknown: ask the exact route. ``lam``: the penalty of the
        head's current sums (content.heads.gram.head_penalty), or a function that computes it
        (:meth:`estimate`)."""
        estimate = self.estimate(head, lam)
        if estimate is None:
            return False
        gain, scale = estimate
        return gain + TOLERANCE * scale < threshold

    def served_estimate(self, head, lam) -> tuple[float, float, np.ndarray] | None:
        """:meth:`estimate` for a head that may be served, with the head's tracked weights
        W̃ (its k columns of X = A⁻¹[H | H_0], a copy): what the certified prediction
        (forgetting.engine.core.QSSEngine.certified_labels) serves in place of the exact
        route's W, within :func:`weight_tolerance` of it. Builds the tracked state (A⁻¹ from
        the factor: O(D³), once per exact solve) when the filter has none, which
        :meth:`estimate` leaves to the tables-only case; None when the filter cannot vouch
        for its state."""
        with self._lock:
            if self.distrusted:
                return None
            estimate = self._estimate(head, lam, served=True)
            if estimate is None or self._state is None:
                return None
            X = self._state[2]
            k = head.cross.shape[-1]
            slot = self._slots[self._slot_of(head)]  # type: ignore[index]
            return estimate[0], estimate[1], np.array(X[:, slot * k : (slot + 1) * k])

    def estimate(self, head, lam, served: bool = False) -> tuple[float, float] | None:
        """The tracked gain of ``head`` and the scale Σ|terms| its error is relative to, or
        None when the filter cannot vouch for its tracked state (see the class docstring).

        ``lam``: the penalty of the head's current sums, or a function computing it — called
        at most once per tracked state, after the checks below: every tracked head's sums are
        then the base's (one Gram for all: the stacked solve's) plus the same logged rows, so
        one head's penalty is every head's (a diagonal of D int64 per head and change is not
        free on the first prediction after a one-row forget). It runs under
        this filter's lock and takes the head's flush lock (LinearHead.penalty): the one
        nesting of the two, and no head holds its flush lock while it calls the filter."""
        with self._lock:
            return self._estimate(head, lam, served)

    def _estimate(self, head, lam, served: bool) -> tuple[float, float] | None:
        """:meth:`estimate`, under the filter's lock; ``served``: also while a slot's head is
        served (:meth:`served_estimate`)."""
        slot = self._slot_of(head)
        if slot is None or not (self._tracking() if served else self._ready()):
            return None
        if not callable(lam) and lam != self._base[-1]:  # type: ignore[index]
            return None
        logged = len(self._log)
        for r, ref in enumerate(self._heads):
            h = ref()
            if len(self._residuals[r]) != logged:
                return None  # some instance did not get every change (rebuilding)
            if h is None or h.changes != self._changes[r] + logged:
                return None
        # rows applied and logged since the base: what the tracked state is known by
        since_base = self._rows + self._logged_rows
        if since_base > REFRESH_ROWS:
            return None
        if callable(lam):
            if self._penalty is None or self._penalty[0] != since_base:
                self._penalty = (since_base, lam())
            if self._penalty[1] != self._base[-1]:  # type: ignore[index]
                return None
        if self._log or self._gains is None:
            self._gains = self._apply()
            self._slot_gains = []
        if not self._slot_gains:  # each slot's sums once per state (p heads ask)
            # every slot's k columns summed in one reduction per array (the same
            # pairwise sums over k contiguous entries as slot by slot, in 2 numpy calls
            # instead of 2p)
            gains, scales = self._gains
            k = head.cross.shape[-1]
            by_slot = (gains.reshape(-1, k).sum(axis=1), scales.reshape(-1, k).sum(axis=1))
            g, a = by_slot[0].tolist(), by_slot[1].tolist()
            self._slot_gains = [(g[s], a[s]) for s in self._slots]
        return self._slot_gains[slot]

    def _slot_of(self, head) -> int | None:
        for r, ref in enumerate(self._heads):
            if ref() is head:
                return r
        return None

    def _ready(self) -> bool:
        """Whether the filter may decide "not served": it tracks a solution and every slot's
        last exact choice was the tables."""
        return self._tracking() and self._served.count(False) == len(self._served)

    def _tracking(self) -> bool:
        """Whether a solution is tracked (changes are logged against it): after an exact
        stacked solve of every slot, until a change it cannot follow."""
        return self._base is not None

    def _apply(self) -> tuple[np.ndarray, np.ndarray]:
        """Bring the tracked solution up to date with the logged rows (Sherman–Morrison per
        row: A' = A + σvvᵀ, X' = A'⁻¹[H' | H_0'], Q' = G_0'X') and return its per-column gains
        and scales (:func:`fold_scores`) — computed by the compiled kernels with the last row
        (content.heads._gain_filter_kernel) where they run, which hold A⁻¹ and G_0 packed
        (:func:`packed`); the numpy path holds them whole. A state made by one path and
        continued by the other (the kernels setting changed) is converted first."""
        if self._state is None:
            factor, X, B, G0, lam = self._base  # type: ignore[misc]
            Ainv, info = _POTRI(factor, lower=1)
            if info != 0:
                raise np.linalg.LinAlgError(f"gain filter: inverse failed ({info})")
            Ainv = np.tril(Ainv) + np.tril(Ainv, -1).T
            G0 = np.array(G0, order="F")
            Q = np.asfortranarray(G0 @ X)
            X, B = np.array(X, order="F"), np.array(B, order="F")
            self._state = (np.asfortranarray(Ainv), G0, X, Q, B, lam)
            self._waiting = _Waiting(Ainv.shape[0])
        Ainv, G0, X, Q, B, lam = self._state
        waiting = self._waiting
        m = X.shape[1] // 2
        kernel = GAIN_FILTER_KERNELS.get(REFRESH_ROWS * X.shape[0] ** 2)
        if kernel is None and Ainv.ndim == 1:  # the numpy path takes over: whole arrays
            Ainv, G0 = unpacked(Ainv), unpacked(G0)
        elif kernel is not None and Ainv.ndim == 2:  # the compiled path's layout
            Ainv, G0 = packed(Ainv), packed(G0)
        if kernel is None:  # the numpy path updates A⁻¹ and G_0 as it goes: terms due first
            waiting.flush(Ainv, G0)
        self._state = (Ainv, G0, X, Q, B, lam)
        scores: tuple[np.ndarray, np.ndarray] | None = None
        left = self._logged_rows  # rows still to apply: the last one scores (compiled path)
        for i, change in enumerate(self._log):
            scaled = np.ldexp(change.v, -FEATURE_BITS)
            for j in range(len(change.v)):
                v = scaled[j]
                sigma = float(change.sign)
                in0 = bool(change.folds[j] == 0)
                # [r | r] in fold 0, [r | 0] in fold 1, r the slots' residuals side by side
                # (absent slots: zero, like their columns)
                b = np.zeros(2 * m)
                for slot, res in zip(self._slots, self._residuals, strict=True):
                    k = res[i].shape[1]
                    b[slot * k : (slot + 1) * k] = res[i][j]
                    if in0:
                        b[m + slot * k : m + (slot + 1) * k] = res[i][j]
                left -= 1
                if kernel is not None:
                    scores = (np.empty(m), np.empty(m)) if left == 0 else (_NONE, _NONE)
                    kernel.apply_row(
                        (Ainv, G0, X, Q, B), (v, b, sigma, in0), waiting.buffers(), lam, scores
                    )
                    continue
                u = Ainv @ v
                vu = float(v @ u)
                s = 1.0 + sigma * vu
                xv = v @ X
                c = (sigma / s) * (b - xv)
                w = G0 @ u
                blas.dger(sigma, v, b, a=B, overwrite_a=1)
                blas.dger(1.0, u, c, a=X, overwrite_a=1)
                blas.dger(1.0, w, c, a=Q, overwrite_a=1)
                if in0:
                    blas.dger(sigma, v, xv + vu * c, a=Q, overwrite_a=1)
                    blas.dger(sigma, v, v, a=G0, overwrite_a=1)
                blas.dger(-sigma / s, u, u, a=Ainv, overwrite_a=1)
        self._rows += self._logged_rows
        self._log.clear()
        self._logged_rows = 0
        for r, res in enumerate(self._residuals):
            self._changes[r] += len(res)
            res.clear()
        if scores is None:  # no row applied, or numpy's path
            scores = (fold_scores if kernel is None else kernel.fold_scores)(X, Q, B, lam)
        return scores


_NONE = np.empty(0)
"""What the compiled row update gets for the gains when a later row follows (none wanted)."""


def packed(S: np.ndarray) -> np.ndarray:
    """The lower triangle of the symmetric (D, D) ``S``, column by column (S[j:, j] for
    j = 0 … D − 1): the compiled row update's layout of A⁻¹ and G_0."""
    return np.ascontiguousarray(S.T[np.triu_indices(S.shape[0])])


def unpacked(P: np.ndarray) -> np.ndarray:
    """The symmetric (D, D) Fortran-order array whose lower triangle :func:`packed` gave."""
    D = int(round((np.sqrt(8 * P.shape[0] + 1) - 1) / 2))
    S = np.zeros((D, D), order="F")
    S.T[np.triu_indices(D)] = P
    return np.asfortranarray(np.tril(S) + np.tril(S, -1).T)
