"""Served ridge weights known to within a bound: what lets a prediction's *label* be certain
without the exact solve after a change (forgetting.engine.core.QSSEngine.certified_labels).

Why: where an instance serves its ridge head, the first prediction after a change factors
the (D, D) system (D = 1033 for 520 features with "shared-rf": ~25 ms) to get the exact
route's weights W. A label needs less than W: only which class's output is largest. The gain
filter (content.heads.gain_filter) tracks W̃ = A⁻¹H row by row (Sherman–Morrison, O(D²) per
row); when W̃ is close enough to W that every output's interval leaves the winning class
ahead, the label is the one the exact W gives — the same bits a refit serves — and the
solve is not needed. When it is not certain, the exact route decides (a filter in the
computational-geometry sense, as the gain filter is for the head-vs-tables choice).

The bound. Both W (LAPACK's Cholesky, potrf + potrs) and W̃ (a solve of the same kind at the
last exact solve, then at most REFRESH_ROWS Sherman–Morrison row updates) approximate the
real solution W* of A W* = H, A = G + λI. A backward-stable solve is accurate to about
D·cond(A)·u relative (u = 2^-53), and the penalty λ ≥ PENALTY/√2 · mean diag G bounds
cond(A) ≤ 1 + √2·D/PENALTY (content.heads.gain_filter): 1.7·10⁻⁷ at D = 1033; the row
updates add about cond(A)·u per row. :func:`weight_tolerance` is 60× that estimate — the
same kind of room as the gain filter's TOLERANCE, which decides the head-vs-tables choice
on the same tracked solution (1.0·10⁻⁵ of ‖W̃_c‖ at D = 1033). It is an estimate, not a
proof: the worst-case bound (Higham, Thm 10.4) carries another factor ~3D and would
certify almost nothing. What makes it safe to rely on: the errors seen are ~10⁻¹¹ of ‖W̃‖
(benchmarks/tests/test_certified_labels.py holds them below 10⁻³ of the tolerance over long
forget and insert sequences), and every exact solve that finds the filter's state current compares
the two (GainFilter.rebase): a discrepancy above a tenth of the tolerance turns
certification off for that model.

From the weights to an output: the served weights are fixed point, Wᵢ = rint(2^e W) with one
exponent e per column from its peak |W| (content.heads.fixed_point.FixedWeights), so a served
output is within ½·2^-e ‖v‖₁ (in v's grid units) of v·W; the certified route serves v·W̃ in
floats and bounds the rest by Cauchy–Schwarz, for a row's integer features v:
|o_c − õ_c| ≤ 2^-14 (‖v‖₂ δ_c + ½ 2^-e_c ‖v‖₁), with e_c the smallest exponent any W within
the radius may get.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels import GAIN_FILTER_KERNELS
from .fixed_point import FEATURE_BITS, weight_bits
from .gram import PENALTY

UNIT_ROUNDOFF = 2.0**-53


def weight_tolerance(D: int) -> float:
    """The bound on ‖W̃_c − W_c‖₂ / ‖W̃_c‖₂ relied on for a (D, D) system: 60 × the
    normwise error estimate D·cond(A)·u of a backward-stable solve (module docstring)."""
    cond = 1.0 + math.sqrt(2.0) * D / PENALTY
    return TOLERANCE_FACTOR * D * cond * UNIT_ROUNDOFF


TOLERANCE_FACTOR = 60.0
"""How far above the error estimate the tolerance sits."""
_BINADE_MARGIN = 1e-9
"""Relative room kept when the coarsest exponent a column may get is computed: numpy's log2,
which FixedWeights uses, may round within a few ulps of a power of two."""
_ROUNDING_ROOM = 1.0 + 1e-9
"""Room for the rounding of the bound's own float arithmetic (a few ulps)."""

UNSURE = object()
"""What :meth:`LinearHead.certified_over` answers when only the exact route can tell."""


@dataclass(frozen=True)
class BoundedWeights:
    """Weights W̃ that serve in place of the exact route's (real-valued, not rounded to the
    fixed point) with, per output column, the radius δ_c ≥ ‖W̃_c − W_c‖₂ and the coarsest
    grid step 2^-e_c the exact weights' fixed point may have."""

    weights: np.ndarray
    radius: np.ndarray
    step: np.ndarray

    @classmethod
    def around(cls, W: np.ndarray, tolerance: float) -> BoundedWeights:
        """``W`` (= W̃) with radius ``tolerance`` · ‖W̃_c‖₂ — widened by the rounding of the
        float products that apply it (γ_D ≤ D·2^-52 relative, Cauchy–Schwarz)."""
        D, k = W.shape
        W = np.asarray(W, dtype=np.float64)
        bits = weight_bits(D)
        kernel = GAIN_FILTER_KERNELS.get(0)  # compiled once the filter's kernels are loaded
        if kernel is not None:
            radius, step = np.empty(k), np.empty(k)
            kernel.bounded_columns(W, tolerance, float(bits), radius, step)
            return cls(W, radius, step)
        radius = (tolerance + D * 2.0**-52) * np.linalg.norm(W, axis=0)
        # the exact weights' exponent e = bits − ⌈log2 peak⌉ − 1 (FixedWeights.of) is at its
        # smallest — the coarsest grid — at the largest peak the radius allows; a column that
        # may be all zero is served with peak 1 (bits − 1)
        high = (np.max(np.abs(W), axis=0) + radius) * (1.0 + _BINADE_MARGIN)
        exponents = bits - np.ceil(np.log2(np.maximum(high, 1e-300))) - 1.0
        exponents = np.minimum(exponents, float(bits - 1))
        return cls(W, radius, np.exp2(-exponents))

    def apply(self, features: np.ndarray) -> np.ndarray:
        """Outputs (n, k) in real residual units for head ``features`` (n, D), integer-valued
        (:func:`~.fixed_point.head_features`): v·W̃ (what FixedWeights.apply serves from W)."""
        return np.ldexp(np.asarray(features, dtype=np.float64) @ self.weights, -FEATURE_BITS)

    def bounds(self, features: np.ndarray) -> np.ndarray:
        """(n, k): per row and output, a bound on |served output − :meth:`apply`'s| for the
        same ``features``: 2^-14 (‖v‖₂ δ_c + ½ 2^-e_c ‖v‖₁) — the weights' radius, and the
        rounding of the exact weights to their fixed point (|rint(x) − x| ≤ ½)."""
        v = np.asarray(features, dtype=np.float64)
        l2 = np.sqrt(np.einsum("ij,ij->i", v, v))
        l1 = np.sum(np.abs(v), axis=1)
        out = l2[:, None] * self.radius[None, :] + l1[:, None] * (0.5 * self.step[None, :])
        return np.ldexp(out * _ROUNDING_ROOM, -FEATURE_BITS)

    def served(
        self, features: np.ndarray, g: np.ndarray, logistic: bool = False, floor: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """(outputs, bounds) for head ``features`` and g's outputs: g + :meth:`apply` and
        :meth:`bounds` (an instance serving g + the head's correction, FlatContent.outputs; the
        addition's rounding is the caller's room) — or with ``logistic``, softmax(log max(g,
        ``floor``) + :meth:`apply`) and :func:`logit_radius` (a logistic step,
        content.heads.newton.BoundedLogits)."""
        v = np.asarray(features, dtype=np.float64)
        g = np.asarray(g, dtype=np.float64)
        kernel = GAIN_FILTER_KERNELS.get(0)
        if kernel is not None:
            out, near = np.empty(g.shape), np.empty(g.shape)
            kernel.bounded_outputs(
                v,
                g,
                (self.weights, self.radius, self.step),
                (logistic, floor, _ROUNDING_ROOM),
                (out, near),
            )
            return out, near
        if not logistic:
            return g + self.apply(v), self.bounds(v)
        z = np.log(np.maximum(g, floor))
        z += self.apply(v)
        e = np.exp(z - np.max(z, axis=1, keepdims=True))
        probabilities = e / np.sum(e, axis=1, keepdims=True)
        return probabilities, logit_radius(z, self.bounds(v), probabilities)


def logit_radius(logits: np.ndarray, shift: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
    """(n, k) bounds on |softmax(z) − ``probabilities``| where ``probabilities`` =
    softmax(``logits``) as NewtonWeights serves it and every exact z_c is within ``shift``
    (n, k) of logits_c.

    Each exact probability is p_c = e^{z_c} / Σ_j e^{z_j}; moving every z_j by at most B (the
    row's largest shift) moves the ratio p_c / p̃_c by at most e^{±2B}. The float steps — the
    addition to log g, the subtraction of the row's maximum, exp, the row sum, the division —
    round in both computations: the first two are absorbed into B (u |z| each), the rest bound
    the ratio by (2k + 16) u more."""
    k = logits.shape[1]
    u = UNIT_ROUNDOFF
    size = np.abs(logits) + shift
    peak = np.max(size, axis=1, keepdims=True)
    B = np.max(shift + 4.0 * u * (size + peak), axis=1, keepdims=True)
    relative = (2 * k + 16) * u
    out = probabilities * (np.expm1(2.0 * B) * (1.0 + relative) + relative)
    return out * _ROUNDING_ROOM
