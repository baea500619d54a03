"""Fixed random ReLU features of the normalized input: the "shared-rf" head's extra inputs.

The "shared-ridge" head (design.md §5.13) is a ridge regression of g's residuals on
v = [u, 1], u the L2-normalized input: linear in u, it trails SISA's logistic shards by
1–3 pp on digits, MNIST-HOG and Fashion-HOG (benchmarks/results/heads.md). The "newton" head
closes that gap with one weighted Gram per class and instance (k more factorizations after
every change). "shared-rf" keeps the shared ridge head's one *unweighted* Gram and instead
widens its input: v′ = [u, ψ(u), 1] with

    ψ(u) = min(1, max(0, uᵀR) / √E),   R ~ N(0, 1)^{d × E} from the fixed seed RF_SEED,

E random ReLU features (a random-features approximation of an arc-cosine kernel). R is
*data-free*: a function of (d, E, seed) alone, the same in every instance, every refit and
every process, so the Gram Σ v′v′ᵀ is still the same integers in every instance and the p
instances share one factorization and one stacked solve exactly as "shared-ridge" does.
For classification the solved weights are served as a logistic step from g's logits
(content.heads.newton.LogitRidgeHead: each class's W divided by its mean curvature p(1 − p), k more
integer sums per instance), not added to g.

Fixed point: ψ ∈ [0, 1] (the clip at 1 is almost never active — |uᵀR_j| / √E ≤ ‖R_j‖ / √E
and ‖R_j‖ ≈ √d — and exists so that the head's bound |v| ≤ 2^14 holds by construction), so
the head's integer sums keep their bounds (content.heads.fixed_point: |v| ≤ 2^14, sums below 2^62).

Exactness: a row's ψ must be the same bits alone or in any batch (the statistics hold the
leaving row's ψ as it was computed at fit, inside a chunk). ψ's only shape-sensitive step is
the product uᵀR. A fit computes it on an integer grid
(``RandomFeatures(exact=True)``, ``Schema.rf_exact``): ũ = rint(2^14 u) — the grid the head's
features are rounded to anyway — and R̃ = rint(2^b R) with b ≤ 24 chosen so that
d · 2^14 · max|R̃| < 2^52; every product and partial sum of ũᵀR̃ is then an integer below 2^53,
exact in float64 in any order, and ψ = min(1, max(0, ũᵀR̃ · 2^-(14 + b))) is the same bits
whatever BLAS kernel the batch's shape picks — a one-row forget computes one row, not a
padded block. A saved model without the flag (``rf_exact`` False) keeps the float product in
canonical blocks
(:func:`forgetting._rowwise.block_matmul` inside :func:`forgetting._rowwise.rowwise`,
HEAD_BLOCK_ROWS for the statistics, SERVE_BLOCK_ROWS for predictions): their stored sums
were computed with those bits.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from .._rowwise import BLOCK_ROWS, block_matmul, rowwise
from ..content.heads import head_features
from ..content.kernels import HEAD_KERNELS

RF_SEED = 20261201
"""Seed of R, the random projection: a constant, so every instance, refit and process draws
the same R (recorded in each schema and in its digest)."""
RF_STEP = 64
RF_MAX = 512
RF_INPUT_BITS = 14
"""ũ = rint(2^14 u): the head's own feature grid (content.heads.fixed_point.FEATURE_BITS)."""
RF_WEIGHT_BITS = 24
"""R̃ = rint(2^24 R) at most (fewer where d is so large that the sums could pass 2^52)."""


def weight_grid_bits(d: int, peak: float) -> int:
    """b for R̃ = rint(2^b R): at most RF_WEIGHT_BITS, and small enough that
    d · 2^14 · (2^b · peak + 1/2) < 2^52 (|ũ| ≤ 2^14; ``peak`` = max |R|): every partial
    sum of ũᵀR̃ is then an integer that float64 holds exactly."""
    b = RF_WEIGHT_BITS
    while b > 0 and d * 2.0**RF_INPUT_BITS * (2.0**b * peak + 0.5) >= 2.0**52:
        b -= 1
    return b


def rf_width(d: int) -> int:
    """E, the number of random features for a d-dimensional input: 64·⌈d/64⌉, at most 512.

    Why this rule (a study on validation splits of the paper benchmark's training sets,
    docs/partitions.md; the test figures below are 3 seeds, additive serving, SISA in
    brackets; the current head's are in benchmarks/results/heads-rf.md): E of the order of d
    is where the gain comes from — digits (d = 64) with E = 64 already 0.970 (0.957), Adult
    (d = 108) with E = 108 0.855 (0.853) — and 512 at d = 520 (MNIST- and Fashion-HOG) gives
    0.975 (0.977) and 0.864 (0.877), up from 0.963 and 0.848 with the linear head. The cap
    bounds the cost: the system is D = d + E + 1 and a change factors it once (cubic in D);
    1024 features bought Fashion-HOG under 1 pp more for several times the factorization.
    Rounding up to a multiple of 64 keeps the BLAS shapes regular. A function of d alone (no
    data): the same for every instance and every refit.
    """
    if d < 1:
        raise ValueError(f"random features need at least one input feature, got d = {d}")
    return min(RF_MAX, RF_STEP * math.ceil(d / RF_STEP))


class RandomFeatures:
    """ψ for one (d, E, seed): R drawn once, kept read-only. Instances come from
    :func:`random_features` (one object per key in the process, which also keys
    :func:`rowwise`'s stacking verdict)."""

    def __init__(self, d: int, width: int, seed: int, exact: bool = False) -> None:
        self.d, self.width, self.seed = int(d), int(width), int(seed)
        self.exact = bool(exact)
        R = np.random.default_rng(self.seed).standard_normal((self.d, self.width))
        R /= math.sqrt(self.width)  # ψ = relu(uᵀR) / √E: the scale folded into R, exactly
        # once (the same division for every process), so a block is one product and a clip
        self.weight_bits = 0
        if self.exact:  # R̃ = rint(2^b R): integers, as float64 (module docstring)
            self.weight_bits = weight_grid_bits(self.d, float(np.max(np.abs(R), initial=0.0)))
            R = np.rint(np.ldexp(R, self.weight_bits))
        R.setflags(write=False)
        self.R = R

    def block(self, U: np.ndarray) -> np.ndarray:
        """ψ of a block of normalized rows (elementwise after one product)."""
        out = block_matmul(np.asarray(U, dtype=np.float64), self.R)
        np.clip(out, 0.0, 1.0, out=out)
        return out

    def on_grid(self, U: np.ndarray) -> np.ndarray:
        """ψ of normalized rows on the integer grid: exact, so any batch gives each row's bits
        (one product for all rows, no blocks)."""
        out = self._grid_product(U)[1]
        out = np.ldexp(out, -(RF_INPUT_BITS + self.weight_bits), out=out)  # a power of two
        np.clip(out, 0.0, 1.0, out=out)
        return out

    def _grid_product(self, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ũ, ũ R̃): ũ = rint(2^14 u) and the product, integer-valued float64 below 2^52 —
        exact in any order."""
        ui = np.rint(np.ldexp(np.asarray(U, dtype=np.float64), RF_INPUT_BITS))
        return ui, ui @ self.R

    def fixed_point_into(self, U: np.ndarray, out: np.ndarray) -> None:
        """The head's fixed-point features of normalized rows ``U`` (n, d), written into
        ``out`` (n, d + E + 1) float64: [rint(2^14 u), rint(2^14 ψ(u)), 2^14], each clipped
        to ±2^14 — ``content.heads.head_features(np.hstack([U, ψ(U)]), np.float64)``, the same
        float operations on the same numbers, so the same bits (tests/content/test_rf_head.py).
        Grid only (``exact``): the product is exact in any order, so a caller may split the
        rows between threads, each writing its own rows of ``out``.

        Why: the composed form makes four (n, D) float64 arrays — ψ, the stacked [u, ψ], its
        scaled copy and the integer features — and runs its elementwise steps on column blocks
        (one inner loop per row): a sizeable share of a large batch forget besides the product
        itself. Here the steps after the product are one compiled pass over the
        rows (content.heads._kernels); without the kernels, the composed form."""
        if not self.exact:
            raise ValueError("fixed-point features in one pass need ψ on the integer grid")
        d, E = self.d, self.width
        if U.shape[1] != d or out.shape != (U.shape[0], d + E + 1):
            raise ValueError(f"fixed-point features: U {U.shape} and out {out.shape} disagree")
        kernel = HEAD_KERNELS.get(U.shape[0] * E)
        if kernel is None:  # the composed definition itself
            out[...] = head_features(np.hstack([U, self.on_grid(U)]), np.float64)
            return
        ui, P = self._grid_product(U)
        down = 2.0 ** -(RF_INPUT_BITS + self.weight_bits)
        kernel.fixed_point_rows(ui, P, down, 2.0**RF_INPUT_BITS, out)

    def __call__(self, U: np.ndarray, block_rows: int = BLOCK_ROWS) -> np.ndarray:
        """ψ of normalized rows ``U`` (n, d): on the integer grid, or (``exact`` False) in
        canonical blocks of ``block_rows`` rows."""
        if U.shape[1] != self.d:
            raise ValueError(f"random features for d = {self.d}, got {U.shape[1]} columns")
        if self.exact:
            return self.on_grid(U)
        return rowwise(self.block, U, block_rows, owner=self)


_CACHE: dict[tuple[int, int, int, bool], RandomFeatures] = {}
_LOCK = threading.Lock()


def random_features(d: int, width: int, seed: int = RF_SEED, exact: bool = False) -> RandomFeatures:
    """The process's ψ for (d, E, seed, on the grid or not), drawn on first use (R is d·E
    float64: 2 MB at d = 520, E = 512) and kept: every instance of every model with that key
    shares it."""
    key = (int(d), int(width), int(seed), bool(exact))
    found = _CACHE.get(key)
    if found is None:
        with _LOCK:
            found = _CACHE.get(key)
            if found is None:
                found = _CACHE[key] = RandomFeatures(*key)
    return found
