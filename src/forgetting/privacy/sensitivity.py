"""L2 sensitivity of QSS's residual sums to one label change (the proof is in docs/privacy.md).

The released statistic of one instance is the pair of fold sums (T_A, T_B), each holding one
table T_g (cells × k) per *group* g — a level of the RQ codebook, or a table of a flat
partition. A row of D• sits in exactly one fold (a keyed hash of its id) and in exactly one
cell per group (its codes depend on its input and the D°-only schema, never on its label).
Changing its label from y to y' changes its residual from r to r' and nothing else, so

    ‖Δ(T_A, T_B)‖₂² = Σ_g ‖r − r'‖₂² = G · ‖r − r'‖₂².

Classification: r = e_y − g(x), so r − r' = e_y − e_y' (g(x) cancels), ‖r − r'‖₂ = √2.
Regression (k = 1): r = clip(y − g(x), −C, C), so |r − r'| ≤ 2C.

Fixed point adds a hair: residuals are rounded to multiples of 2^−s before summing, and each
coordinate that changes can move by at most one extra quantum (plus float rounding far below
it). :func:`label_sensitivity` includes that slack, so the bound holds for the integer sums
actually stored, not just for real arithmetic.
"""

from __future__ import annotations

import math

import numpy as np

TASKS = ("classification", "regression")


def quantization_slack(scale_bits: int | None) -> float:
    """Largest extra change of one coordinate from rounding residuals to 2^−scale_bits.

    |rint(a) − rint(b) − (a − b)| ≤ 1 quantum, and the float error of forming a residual
    (one subtraction, ≤ 2^−52 relative on values ≤ 2^10) is far below another quantum.
    """
    if scale_bits is None:
        return 0.0
    return 2.0 * math.ldexp(1.0, -int(scale_bits))


def label_sensitivity(
    task: str,
    n_groups: int,
    *,
    clip: float | None = None,
    scale_bits: int | None = None,
) -> float:
    """L2 sensitivity of one instance's fold sums (T_A, T_B) to changing one row's label.

    ``n_groups`` is G: the number of codebook levels (RQ) or tables (flat partition) — every
    row touches one cell in each. ``clip`` is C for regression (residuals clipped to
    [−C, C]; required there, refused for classification). ``scale_bits`` adds the fixed-point
    slack of :func:`quantization_slack`.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if isinstance(n_groups, bool) or not isinstance(n_groups, int | np.integer) or n_groups < 1:
        raise ValueError(f"n_groups must be a positive int, got {n_groups!r}")
    slack = quantization_slack(scale_bits)
    if task == "classification":
        if clip is not None:
            raise ValueError("clip applies to regression only (one-hot residuals are bounded)")
        per_group = math.sqrt(2.0) * (1.0 + slack)  # two coordinates change, by ≤ 1 + slack
    else:
        clip = check_clip(clip)
        per_group = 2.0 * clip + slack
    return per_group * math.sqrt(int(n_groups))


def check_clip(clip: float | None) -> float:
    """C must be given for regression: unbounded residuals have unbounded sensitivity."""
    if clip is None:
        raise ValueError(
            "mode='dp' regression needs clip=C: residuals y − g(x) (in D°-standardized units) "
            "are clipped to [−C, C], which bounds one label's influence; without it no finite "
            "noise is private"
        )
    if isinstance(clip, bool) or not isinstance(clip, float | int | np.floating | np.integer):
        raise ValueError(f"clip must be a number > 0, got {clip!r}")
    clip = float(clip)
    if not (math.isfinite(clip) and clip > 0.0):
        raise ValueError(f"clip must be a finite number > 0, got {clip!r}")
    return clip


def clip_residuals(residuals: np.ndarray, clip: float) -> np.ndarray:
    """Regression residuals clipped to [−C, C] (float64), before fixed-point quantization."""
    clip = check_clip(clip)
    return np.clip(np.asarray(residuals, dtype=np.float64), -clip, clip)


HEAD_FEATURE_BITS = 14
"""The head's features lie on a 2^-14 grid (content.heads.fixed_point.FEATURE_BITS)."""
HEAD_TARGET_BITS = {"classification": 20, "regression": 10}
"""The head's residual grid (content.heads.fixed_point: 2^-20 classification, 2^-10
regression), onto which the content's residuals (2^-32, 2^-24) are rounded."""
CURVATURE_BITS = 8
"""The logistic step's per-class curvature sums Σ p(1 − p) lie on a 2^-8 grid
(content.heads.newton.WEIGHT_BITS)."""


def head_quantization_slack(task: str) -> float:
    """Largest extra change of one head residual coordinate from its two roundings: to the
    content's grid (2^-32 / 2^-24, plus the float error of forming the residual, far below)
    and then to the head's (2^-20 / 2^-10), at each end of the change."""
    content = 32 if task == "classification" else 24
    return 2.0 * math.ldexp(1.0, -HEAD_TARGET_BITS[task]) + 4.0 * math.ldexp(1.0, -content)


def head_label_sensitivity(
    task: str,
    feature_norm: float,
    *,
    clip: float | None = None,
    curvature: bool = False,
) -> float:
    """L2 sensitivity of one instance's head release to changing one row's label.

    The release is the fold cross sums H_f = Σ_{fold(i)=f} v_i r_iᵀ (real units, v = [φ, 1]
    on the 2^-14 grid) and, with ``curvature`` (the logistic step's head, classification),
    the per-class sums Σ p_c(1 − p_c). A label change moves one fold's H by v_i (r_i − r'_i)ᵀ,
    a rank-one matrix of Frobenius norm ‖v_i‖₂ · ‖r_i − r'_i‖₂ ≤ ``feature_norm`` · (√2 ·
    (1 + slack) classification, 2C + slack regression). The curvature sums are p(1 − p) =
    |r|(1 − |r|) for either label in real arithmetic; the fixed-point residuals of the two
    classes whose label bit flips may round one step apart, moving those two sums by at
    most one 2^-8 step each: √2 · 2^-8. ``feature_norm`` must bound ‖v‖₂ for *every* row
    (docs/privacy.md, Theorem 3).
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    feature_norm = float(feature_norm)
    if not (math.isfinite(feature_norm) and feature_norm > 0.0):
        raise ValueError(f"feature_norm must be a finite number > 0, got {feature_norm!r}")
    slack = head_quantization_slack(task)
    if task == "classification":
        if clip is not None:
            raise ValueError("clip applies to regression only (one-hot residuals are bounded)")
        residual = math.sqrt(2.0) * (1.0 + slack)
    else:
        if curvature:
            raise ValueError("the curvature sums are a classification head's")
        residual = 2.0 * check_clip(clip) + slack
    cross = feature_norm * residual
    if not curvature:
        return cross
    return math.hypot(cross, math.sqrt(2.0) * math.ldexp(1.0, -CURVATURE_BITS))


def grid_feature_norm(norm: float, n_features: int) -> float:
    """Bound on ‖v‖₂ of v = [rint(2^14 φ)/2^14, 1] for rows with ‖φ‖₂ ≤ ``norm``: rounding
    to the grid moves each of the ``n_features`` coordinates by ≤ 2^-15 (clipping to ±1
    only shrinks them), and the bias adds 1 in quadrature. A relative margin of 1e-9 covers
    the float error of the normalization that made ‖φ‖ ≤ norm."""
    rounding = math.sqrt(int(n_features)) * math.ldexp(1.0, -HEAD_FEATURE_BITS - 1)
    return math.hypot(float(norm) * (1.0 + 1e-9) + rounding, 1.0)
