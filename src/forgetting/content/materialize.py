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
from functools import partial

import numpy as np

from .accumulators import Accumulators, level_pairs

SHRINKAGE_GRID = (0.5, 2.0, 8.0, 32.0)


@dataclass(frozen=True)
class Content:
    """What predictions need: the cell means (ℓ, b, k) and the blend weight α."""

    means: np.ndarray
    alpha: float
    shrinkage: float


def _stats(acc: Accumulators, folds: slice | int, counts: bool = True):
    """(T, n, N) of a fold, or of both (a slice), as floats; ``counts=False``: T alone (n
    and N None)."""
    T = acc.sums[folds]
    if isinstance(folds, slice):
        T = T.sum(axis=0)
    T = T.astype(np.float64) * np.ldexp(1.0, -acc.scale_bits)
    if not counts:
        return T, None, None
    n = acc.counts[folds]
    N = acc.pair_counts[folds]
    if isinstance(folds, slice):
        n, N = n.sum(axis=0), N.sum(axis=0)
    return T, n.astype(np.float64), N.astype(np.float64)


def materialize(T: np.ndarray, n: np.ndarray, N: np.ndarray, shrinkage: float) -> np.ndarray:
    """Cell means μ (ℓ, b, k) from residual sums T, counts n and pair counts N."""
    return materialize_grid(T, n, N, (shrinkage,))[:, :, 0]


def materialize_grid(T: np.ndarray, n: np.ndarray, N: np.ndarray, shrinkages) -> np.ndarray:
    """Cell means for every shrinkage of ``shrinkages`` at once: (ℓ, b, L, k).

    Why side by side: the L values' means share every product's left factor N_{q,m}ᵀ, and
    a level's pairs (q, m), q < m, are stored together, so level m is one (b, m·b) ×
    (m·b, L·k) product instead of m·L narrow ones. RQ mode re-materializes after every
    change (4 shrinkages × 2 folds at ℓ = 4, b = 256, k = 10: ~100 products of 10 columns,
    the first prediction's whole cost); wider products are what BLAS runs efficiently. A
    deterministic function of the state all the same.
    """
    lams = np.asarray(shrinkages, dtype=np.float64)
    n_levels, b, k = T.shape
    width = len(lams) * k
    means = np.zeros((n_levels, b, len(lams), k))
    for m in range(n_levels):
        S = np.repeat(T[m][:, None, :], len(lams), axis=1)  # (b, L, k)
        if m:  # Σ_q N_{q,m}ᵀ μ_q as one product: the pairs (q, m), q < m, are stored together
            pairs = _pairs_of(m)
            S.reshape(b, width)[:] -= N[pairs].reshape(m * b, b).T @ means[:m].reshape(m * b, width)
        denom = (n[m][:, None] + lams[None, :])[:, :, None]  # (b, L, 1)
        np.divide(S, denom, out=means[m], where=denom > 0)
    return means


def _pairs_of(m: int) -> slice:
    """Where the pair counts N_{q,m} of every q < m lie (level_pairs' order: by m, then q)."""
    start = level_pairs(m + 1).index((0, m))
    return slice(start, start + m)


def _out_of_fold(means: np.ndarray, T: np.ndarray, n: np.ndarray, N: np.ndarray):
    """Σ⟨r, m(x)⟩ and Σ‖m(x)‖² over the rows summarized by (T, n, N), m(x) = Σ_m μ_m[c_m(x)]."""
    cross, square = _out_of_fold_grid(means[:, :, None, :], T, n, N)
    return float(cross[0]), float(square[0])


def _out_of_fold_grid(means: np.ndarray, T: np.ndarray, n: np.ndarray, N: np.ndarray):
    """:func:`_out_of_fold` of each of the L means side by side (``means``: (ℓ, b, L, k),
    as :func:`materialize_grid` returns them): two arrays (L,)."""
    n_levels, b, L, k = means.shape
    cross = np.einsum("mbk,mblk->l", T, means)
    square = np.einsum("mb,mblk->l", n, means * means)
    for m in range(1, n_levels):  # Σ_{q<m} ⟨μ_q, N_{q,m} μ_m⟩, every q in one product
        paired = N[_pairs_of(m)].reshape(m * b, b) @ means[m].reshape(b, L * k)
        square += 2.0 * np.einsum(
            "blk,blk->l", means[:m].reshape(m * b, L, k), paired.reshape(m * b, L, k)
        )
    return cross, square


def out_of_fold_scores(folds, shrinkages, means=None) -> tuple[np.ndarray, np.ndarray]:
    """Σ⟨r, m(x)⟩ and Σ‖m(x)‖² with m's means from the other fold, summed over both folds,
    for each shrinkage of ``shrinkages`` (arrays (L,)).

    ``folds`` holds the two folds' (T, n, N) as returned by ``_stats``; ``means`` each fold's
    :func:`materialize_grid` of them, where the caller has them (else computed here).
    """
    cross = square = 0.0
    for train, score in ((0, 1), (1, 0)):
        grid_means = materialize_grid(*folds[train], shrinkages) if means is None else means[train]
        c, s = _out_of_fold_grid(grid_means, *folds[score])
        cross = cross + c
        square = square + s
    return cross, square


def blend_and_fall(alpha: float | str, cross: float, square: float) -> tuple[float, float]:
    """(α, the fall 2α·cross − α²·square of the out-of-fold squared error it achieves) for
    one λ's cross-fitted sums: α given, or "auto" — the best, cross/square, never negative
    (α = 0 is g alone). The one definition of the choice, for the RQ contents here and the
    flat tables' totals (content.tables)."""
    if alpha == "auto":
        a = cross / square if cross > 0.0 and square > 0.0 else 0.0
    else:
        a = float(alpha)
    return a, 2.0 * a * cross - a * a * square


def build_content(acc: Accumulators, alpha: float | str, shrinkage: float | str) -> Content:
    """Materialize μ on all rows with α and λ given, or cross-fitted when "auto".

    For a λ, the out-of-fold squared error falls by 2α·cross − α²·square; the best α is
    cross/square (never negative: α = 0 is g alone), and λ is the grid value with the largest
    fall.
    """
    jobs, finish = content_jobs(acc, alpha, shrinkage)
    return finish([job() for job in jobs])


def content_jobs(
    acc: Accumulators, alpha: float | str, shrinkage: float | str, likely: float | None = None
):
    """:func:`build_content` in two steps: ``(jobs, finish)``, ``finish(results)`` given the
    jobs' results in their order.

    Why: the cross-fit's two directions — fold 0's means scored on fold 1's rows, and the
    reverse — depend on different folds' statistics, so each is a job of its own (its fold's
    grid means, kept or computed, then its products). The p instances' 2p jobs pack onto two
    cores where p whole instances did not (3 on 2: the last ran alone), and a one-row change
    makes one job per instance long (its fold's means computed again) and one short. The same
    operations on the same floats whichever thread runs them (BLAS on one thread per call),
    and ``finish`` adds the two directions in the order :func:`out_of_fold_scores` does, so
    the same bits. The statistics' floats are read here, before any job runs: the jobs only
    read them.

    ``likely``: the λ the cross-fit probably chooses (the last one: a one-row change rarely
    moves it). Then a third job computes the means on all rows at that λ beside the
    directions, and ``finish`` uses them when the cross-fit does choose it — the same
    deterministic function of the same floats — leaving only the choice after the jobs
    (that last step was a second round on the pool, three jobs on two cores again)."""
    grid = SHRINKAGE_GRID if shrinkage == "auto" else (float(shrinkage),)
    # all rows' counts from the folds' floats: integers below 2^53, so the same numbers as
    # converting the summed integers (the sums T are not: they are added as integers)
    T = _stats(acc, slice(None), counts=False)[0]
    if alpha != "auto" and len(grid) == 1:
        content = Content(materialize(T, *acc.total_count_floats(), grid[0]), float(alpha), grid[0])
        return [], lambda results: content
    n_all, N_all = acc.total_count_floats()
    # each fold's float statistics and its means on the grid depend on that fold alone: kept
    # by the accumulators until a change touches the fold (a one-row change touches one)
    folds = [acc.fold_floats(f) for f in (0, 1)]

    def direction(train: int, score: int):
        means = acc.fold_kept(
            train, ("means", grid), partial(materialize_grid, *folds[train], grid)
        )
        return _out_of_fold_grid(means, *folds[score])

    guess = likely if likely in grid else None

    def finish(results) -> Content:
        (c01, s01), (c10, s10) = results[:2]
        crosses, squares = (0.0 + c01) + c10, (0.0 + s01) + s10  # out_of_fold_scores' order
        best = (-np.inf, 0.0, grid[0])
        for lam, cross, square in zip(grid, crosses.tolist(), squares.tolist(), strict=True):
            a, gain = blend_and_fall(alpha, cross, square)
            if gain > best[0]:
                best = (gain, a, lam)
        _, best_alpha, best_lam = best
        if guess is not None and best_lam == guess:
            means = results[2]
        else:
            means = materialize(T, n_all, N_all, best_lam)
        return Content(means=means, alpha=best_alpha, shrinkage=best_lam)

    jobs = [partial(direction, 0, 1), partial(direction, 1, 0)]
    if guess is not None:
        jobs.append(partial(materialize, T, n_all, N_all, guess))
    return jobs, finish
