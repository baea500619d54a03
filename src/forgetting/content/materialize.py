"""From integer statistics to cell means μ, and α/λ chosen from the statistics alone.

Materialization is boosting over levels without touching rows (design.md §2):
S_m = T_m − Σ_{q<m} N_{q,m}ᵀ μ_q and μ_m = S_m / (n_m + λ). It is a deterministic float
function of the integer state, so equal states give equal bits.

α and λ must not be tuned on D• rows (design.md §5.4), and tuning them on D° in-sample is biased
because g was fitted there. Instead they are cross-fitted on the two folds of the statistics:
μ from fold A is scored on the rows of fold B (and vice versa), and both the score's numerator
Σ_B ⟨r, m_A(x)⟩ and denominator Σ_B ‖m_A(x)‖² are linear in fold B's T, n and N — so the
out-of-fold loss of every (α, λ) is computed in O(ℓ² b² k) with no row in sight, and is
recomputed after every insertion or deletion like the means themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .accumulators import Accumulators, level_pairs

SHRINKAGE_GRID = (0.5, 2.0, 8.0, 32.0)


@dataclass(frozen=True)
class Content:
    """What predictions need: the cell means (ℓ, b, k) and the blend weight α."""

    means: np.ndarray
    alpha: float
    shrinkage: float


def _stats(acc: Accumulators, folds: slice | int):
    T = acc.sums[folds]
    n = acc.counts[folds]
    N = acc.pair_counts[folds]
    if isinstance(folds, slice):
        T, n, N = T.sum(axis=0), n.sum(axis=0), N.sum(axis=0)
    scale = np.ldexp(1.0, -acc.scale_bits)
    return T.astype(np.float64) * scale, n.astype(np.float64), N.astype(np.float64)


def materialize(T: np.ndarray, n: np.ndarray, N: np.ndarray, shrinkage: float) -> np.ndarray:
    """Cell means μ (ℓ, b, k) from residual sums T, counts n and pair counts N."""
    n_levels = T.shape[0]
    pair_index = {pair: i for i, pair in enumerate(level_pairs(n_levels))}
    means = np.zeros_like(T)
    for m in range(n_levels):
        S = T[m].copy()
        for q in range(m):
            S -= N[pair_index[(q, m)]].T @ means[q]
        denom = n[m] + shrinkage
        filled = denom > 0
        means[m][filled] = S[filled] / denom[filled][:, None]
    return means


def _out_of_fold(means: np.ndarray, T: np.ndarray, n: np.ndarray, N: np.ndarray):
    """Σ⟨r, m(x)⟩ and Σ‖m(x)‖² over the rows summarized by (T, n, N), m(x) = Σ_m μ_m[c_m(x)]."""
    cross = float(np.sum(T * means))
    square = float(np.sum(n[:, :, None] * means * means))
    for p, (q, m) in enumerate(level_pairs(means.shape[0])):
        square += 2.0 * float(np.sum(means[q] * (N[p] @ means[m])))
    return cross, square


def out_of_fold_scores(folds, shrinkage: float) -> tuple[float, float]:
    """Σ⟨r, m(x)⟩ and Σ‖m(x)‖² with m's means from the other fold, summed over both folds.

    ``folds`` holds the two folds' (T, n, N) as returned by ``_stats``.
    """
    cross = square = 0.0
    for train, score in ((0, 1), (1, 0)):
        c, s = _out_of_fold(materialize(*folds[train], shrinkage), *folds[score])
        cross += c
        square += s
    return cross, square


def build_content(acc: Accumulators, alpha: float | str, shrinkage: float | str) -> Content:
    """Materialize μ on all rows with α and λ given, or cross-fitted when "auto".

    For a λ, the out-of-fold squared error falls by 2α·cross − α²·square; the best α is
    cross/square (never negative: α = 0 is g alone), and λ is the grid value with the largest
    fall.
    """
    grid = SHRINKAGE_GRID if shrinkage == "auto" else (float(shrinkage),)
    if alpha != "auto" and len(grid) == 1:
        return Content(materialize(*_stats(acc, slice(None)), grid[0]), float(alpha), grid[0])
    best = (-np.inf, 0.0, grid[0])
    folds = [_stats(acc, f) for f in (0, 1)]
    for lam in grid:
        cross, square = out_of_fold_scores(folds, lam)
        if alpha == "auto":
            a = cross / square if cross > 0.0 and square > 0.0 else 0.0
        else:
            a = float(alpha)
        gain = 2.0 * a * cross - a * a * square
        if gain > best[0]:
            best = (gain, a, lam)
    _, best_alpha, best_lam = best
    means = materialize(*_stats(acc, slice(None)), best_lam)
    return Content(means=means, alpha=best_alpha, shrinkage=best_lam)
