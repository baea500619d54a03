"""The head's out-of-fold gain (content.heads.solve.solve_ridge) and the head-vs-tables rule
(content.tables.build_flat_content): what is computed. That the engine serves what the rule
says: benchmarks/tests/test_head_rule_lab.py (on the lab's clustered data)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from forgetting.content.heads import GramSystem, LinearHead, head_features
from forgetting.content.heads.gram import PENALTY
from forgetting.content.heads.solve import head_gain as _gain
from forgetting.content.heads.solve import solve_ridge as _solve


def random_head(n: int, d: int, k: int, seed: int = 0) -> LinearHead:
    """A head on rows whose residuals depend linearly on the features, plus noise."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    r = Z @ rng.normal(size=(d, k)) + 0.3 * rng.normal(size=(n, k))
    head = LinearHead.empty(d, k, 32)
    residuals = np.rint(np.clip(r, -1, 1) * 2.0**32).astype(np.int64)
    head.add(head_features(Z), residuals, rng.integers(0, 2, n))
    return head


def fold_terms(head: LinearHead):
    H, H0, H1 = head.float_cross()
    G0 = head.gram[0].astype(np.float64) * 2.0**-28
    G1 = head.gram[1].astype(np.float64) * 2.0**-28
    return H, H0, H1, G0, G1


def oof_gain(W0, W1, H0, H1, G0, G1) -> float:
    return float(
        2 * np.sum(W0 * H1) - np.sum(W0 * (G1 @ W0)) + 2 * np.sum(W1 * H0) - np.sum(W1 * (G0 @ W1))
    )


def test_the_gain_scores_each_folds_half_gram_solution_on_the_other_fold():
    """W = A⁻¹H, and the gain is that of W_a = 2A⁻¹H_a (fold a's labels, half the full Gram)
    scored on the other fold's sums — computed here the slow way, with a dense solver."""
    head = random_head(3000, 12, 4)
    H, H0, H1, G0, G1 = fold_terms(head)
    G = G0 + G1
    # the penalty: c · mean diag G rounded to the nearest power of two (head_penalty)
    lam = PENALTY * 2.0 ** round(np.log2(np.trace(G) / len(G)))
    A = G + lam * np.eye(len(G))
    W, gains = _solve(GramSystem.of(head.gram), H, H0, H1)
    np.testing.assert_allclose(W, scipy.linalg.solve(A, H, assume_a="pos"), rtol=1e-9, atol=1e-12)
    W0 = 2 * scipy.linalg.solve(A, H0, assume_a="pos")
    W1 = 2 * scipy.linalg.solve(A, H1, assume_a="pos")
    assert _gain(gains) == pytest.approx(oof_gain(W0, W1, H0, H1, G0, G1), rel=1e-9)
    # a head's gain is the sum over its own columns
    assert _gain(gains, slice(0, 2)) + _gain(gains, slice(2, 4)) == pytest.approx(_gain(gains))


def test_the_gain_is_close_to_the_exact_fold_gain_on_many_rows():
    """With n ≫ d each fold's Gram is about half the full one, so the approximation is within
    a percent of the gain with each fold's own system factored."""
    head = random_head(20_000, 16, 3, seed=1)
    H, H0, H1, G0, G1 = fold_terms(head)
    D = len(G0)
    s0, s1 = (PENALTY * np.trace(Gf) / D for Gf in (G0, G1))
    W0 = scipy.linalg.solve(G0 + s0 * np.eye(D), H0, assume_a="pos")
    W1 = scipy.linalg.solve(G1 + s1 * np.eye(D), H1, assume_a="pos")
    exact = oof_gain(W0, W1, H0, H1, G0, G1)
    gain, _ = head.solution()
    assert exact > 0
    assert gain == pytest.approx(exact, rel=0.01)


def test_a_fold_without_rows_gives_no_head():
    head = LinearHead.empty(4, 2, 32)
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(20, 4))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    head.add(head_features(Z), rng.integers(-(2**31), 2**31, (20, 2)), np.zeros(20, int))
    assert GramSystem.of(head.gram).factor is None
    assert head.solution() == (-np.inf, None)
