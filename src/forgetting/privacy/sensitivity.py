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
