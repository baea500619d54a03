"""Flat multi-table content: exact integer sums and exact cross-fit totals under any history."""

from __future__ import annotations

import numpy as np
import pytest

from forgetting.content.accumulators import quantize_residuals
from forgetting.content.tables import FlatTables


def _rows(n: int, T: int = 8, C: int = 16, k: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, C, (n, T)).astype(np.uint16)
    probs = rng.dirichlet(np.ones(k), n)
    onehot = np.eye(k)[rng.integers(0, k, n)]
    residuals = quantize_residuals(onehot - probs, 32)
    folds = rng.integers(0, 2, n)
    return codes, residuals, folds


def _fresh(codes, residuals, folds, T=8, C=16, k=3) -> FlatTables:
    t = FlatTables.empty(T, C, k, 32)
    t.add(codes, residuals, folds)
    return t


@pytest.mark.parametrize("batch", [1, 7, 3000])
def test_subtract_equals_fresh_build(batch: int) -> None:
    """Subtracting rows (one by one or in bulk) lands on the integers of a build without them,
    including the exact cross-fit totals, hence the same (α, λ) and the same predictions."""
    codes, res, folds = _rows(5000)
    t = _fresh(codes, res, folds)
    gone = np.random.default_rng(1).choice(5000, 3000, replace=False)
    for start in range(0, len(gone), batch):
        part = gone[start : start + batch]
        t.subtract(codes[part], res[part], folds[part])
    keep = np.setdiff1d(np.arange(5000), gone)
    ref = _fresh(codes[keep], res[keep], folds[keep])
    assert t.equals(ref)
    assert t.choose("auto", "auto") == ref.choose("auto", "auto")
    alpha, lam = t.choose("auto", "auto")
    assert np.array_equal(t.correction(codes[:50], lam), ref.correction(codes[:50], lam))


def test_insertion_order_is_irrelevant() -> None:
    codes, res, folds = _rows(2000, seed=3)
    perm = np.random.default_rng(4).permutation(2000)
    a = _fresh(codes, res, folds)
    b = FlatTables.empty(8, 16, 3, 32)
    for chunk in np.array_split(perm, 13):
        b.add(codes[chunk], res[chunk], folds[chunk])
    assert a.equals(b)


def test_totals_match_a_recount() -> None:
    codes, res, folds = _rows(4000, seed=5)
    t = _fresh(codes, res, folds)
    t.subtract(codes[:100], res[:100], folds[:100])
    again = t.copy()
    again.rebuild_totals()
    assert again.cross == t.cross and again.square == t.square


def test_correction_is_batch_independent() -> None:
    codes, res, folds = _rows(3000, seed=6)
    t = _fresh(codes, res, folds)
    whole = t.correction(codes, 2.0)
    singles = np.vstack([t.correction(codes[i : i + 1], 2.0) for i in range(0, 3000, 211)])
    assert np.array_equal(whole[::211], singles)


def test_alpha_picks_up_signal_and_refuses_noise() -> None:
    """Cells whose residuals carry the label earn α > 0; pure noise gets α = 0 (g alone)."""
    rng = np.random.default_rng(7)
    n, T, C = 6000, 8, 16
    codes = rng.integers(0, C, (n, T))
    label = codes[:, 0] % 2  # the label is a function of table 0's cell
    resid = np.eye(2)[label] - 0.5
    t = FlatTables.empty(T, C, 2, 32)
    t.add(codes, quantize_residuals(resid, 32), rng.integers(0, 2, n))
    alpha, _ = t.choose("auto", "auto")
    assert alpha > 0.5
    noise = FlatTables.empty(T, C, 2, 32)
    flip = rng.integers(0, 2, n)
    noise.add(codes, quantize_residuals(np.eye(2)[flip] - 0.5, 32), rng.integers(0, 2, n))
    assert noise.choose("auto", "auto")[0] < alpha


def test_fixed_alpha_and_shrinkage() -> None:
    codes, res, folds = _rows(1000, seed=8)
    t = _fresh(codes, res, folds)
    assert t.choose(0.5, 8.0) == (0.5, 8.0)
    assert t.choose(0.5, 3.0) == (0.5, 3.0)
    alpha, lam = t.choose("auto", 3.0)  # off the grid: recomputed from every cell
    assert lam == 3.0 and alpha >= 0.0
    t.set_probes(codes[:40], folds[:40])
    assert t.choose("auto", 3.0) == t.copy().choose("auto", 3.0)


def test_probe_sums_follow_any_history() -> None:
    """The probe estimate of the average's square term is kept exactly: after deletions it
    equals a fresh build's (same integers, same (α, λ))."""
    codes, res, folds = _rows(4000, seed=9)
    probes = np.arange(0, 4000, 97)
    t = _fresh(codes, res, folds)
    t.set_probes(codes[probes], folds[probes])
    gone = np.setdiff1d(np.random.default_rng(10).choice(4000, 1500, replace=False), probes)
    for chunk in np.array_split(gone, 40):
        t.subtract(codes[chunk], res[chunk], folds[chunk])
    keep = np.setdiff1d(np.arange(4000), gone)
    ref = _fresh(codes[keep], res[keep], folds[keep])
    ref.set_probes(codes[probes], folds[probes])
    assert t.equals(ref)
    assert t.choose("auto", "auto") == ref.choose("auto", "auto")
    assert t.probe_square(0) is not None


def test_probe_alpha_matches_the_average() -> None:
    """With every row as a probe, the (ratio) probe estimate is the square of the average:
    the probes' per-table square then equals the exact one, up to fixed-point rounding."""
    codes, res, folds = _rows(1500, seed=11)
    t = _fresh(codes, res, folds)
    t.set_probes(codes, folds)
    lam = t.grid[1]
    direct = 0.0
    T, C = t.n_tables, t.n_cells
    for b in (0, 1):
        a = 1 - b
        rows = folds == b
        cell = np.arange(T)[None, :] * C + codes[rows].astype(np.int64)
        S = np.ldexp(t.sums[a].reshape(T * C, -1)[cell].astype(np.float64), -32)
        n = t.counts[a].reshape(T * C)[cell]
        m = (S / (n + lam)[:, :, None]).mean(axis=1)
        direct += float(np.sum(m * m))
    assert t.probe_square(1) == pytest.approx(direct, rel=1e-6)
