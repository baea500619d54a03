"""Heads served as a logistic step from g's logits: one Newton step of one-vs-rest logistic
regression (:class:`NewtonHead`), or the ridge solution scaled by each class's mean curvature
(:class:`LogitRidgeHead`).

:class:`NewtonHead` keeps the ridge head's sums plus one weighted Gram per class and serves one
Newton step from g's logits instead of the least-squares fit: the same exactness argument
(every term a fixed function of its row, summed in int64), closer to logistic regression's
accuracy (MNIST-HOG 0.973 vs 0.963, benchmarks/results/heads.md) at k times the solve work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.linalg.lapack import dpotrf as _POTRF
from scipy.linalg.lapack import dpotrs as _POTRS
from scipy.linalg.lapack import spotrf as _SPOTRF
from scipy.linalg.lapack import spotrs as _SPOTRS

from ..._rowwise import SERVE_BLOCK_ROWS, one_blas_thread, rowwise
from ..accumulators import CLASSIFICATION_SCALE_BITS
from ..kernels import HEAD_KERNELS
from .certified import UNSURE, BoundedWeights
from .fixed_point import FEATURE_BITS, TARGET_LIMIT_BITS, FixedWeights, exact_weighted_grams
from .linear import LinearHead

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
    training sets: (k − 1)/k is the best step or within 0.04 pp of it on
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
    Cholesky and solve per class (see :meth:`solution`), when the head is served (the
    latencies: benchmarks/results/heads.md).
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

    def _certified(self, W: np.ndarray, tolerance: float):
        # served from k systems of its own, which the gain filter does not track
        return UNSURE

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


@dataclass(frozen=True)
class BoundedLogits:
    """A logistic step from g's logits whose δ is a :class:`~.certified.BoundedWeights`:
    a :class:`LogitRidgeHead`'s tracked weights scaled by its per-class step as the exact
    route scales W (what a certified label is served with: content.heads.certified)."""

    logits: BoundedWeights

    def served(self, features: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities, bounds): softmax(log g + δ̃ᵀv) for head ``features`` and g's outputs,
        and per entry a bound on its distance from what NewtonWeights serves with the exact
        δ (:func:`~.certified.logit_radius`)."""
        return self.logits.served(features, g, logistic=True, floor=PROB_FLOOR)


def _softmax_step(shift: np.ndarray, g: np.ndarray) -> np.ndarray:
    z = np.log(np.maximum(g, PROB_FLOOR)) + shift
    z -= np.max(z, axis=1, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=1, keepdims=True)


LOGIT_STEP = 0.75
"""c₀ of :class:`LogitRidgeHead`'s step, chosen on validation splits carved from the training
sets (0.75 best of {0.5, 0.75, 1, 1.25, 1.5} averaged over digits,
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
    0.3 pp better than adding W to g (the same validation splits). The weights
    p(1 − p) = |r|(1 − |r|) come from the stored residuals in integers
    (:func:`newton_weights`), summed as int64: exact under deletion like every other sum.
    The gain that decides head vs tables is the ridge head's, unchanged. Classification
    only."""

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
        return NewtonWeights(FixedWeights.of(W * self._step(W.shape[1])))

    def _certified(self, W: np.ndarray, tolerance: float) -> BoundedLogits:
        # W̃ scaled as _served scales W: the same step, so the radius scales with it (the
        # product's rounding is within BoundedWeights' D·2^-52 room)
        return BoundedLogits(BoundedWeights.around(W * self._step(W.shape[1]), tolerance))

    def _step(self, k: int) -> np.ndarray:
        """Per class, what W is multiplied by to serve: c₀ (k − 1)/k / a_c."""
        n = float(self.n_rows)
        mean_curvature = (
            self.weights.astype(np.float64) * 2.0**-WEIGHT_BITS + BOUND_ROWS / 4.0
        ) / n
        return LOGIT_STEP * newton_step(k) / mean_curvature
