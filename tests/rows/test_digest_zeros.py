"""Digests are equal whenever predictions are equal by construction (issue 73, item 4): the
same rows in another order, −0.0 in place of +0.0, a NaN with another payload. Both are
floats that compare equal (or are all "missing") but differ in their bytes, and a digest
hashes bytes: a bin edge picked from either zero by a sort, or a row hashed with its sign of
zero, gave a forest equal to a refit in every prediction and different in both digests.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forgetting.forest.binning import bin_edges
from forgetting.forest.core import ExactForest, ForestConfig
from forgetting.rows.hashing import row_hashes
from forgetting.schema.membership import id_bytes

KEY = b"zeros and their signs"
NAN_PAYLOADS = np.array([0x7FC00001, 0xFFC00000, 0x7F800123, 0xFFFFFFFF], np.uint32)
"""float32 NaNs other than numpy's: another payload, the sign bit set, a signalling NaN."""


def _data(seed: int, n: int, d: int, zeros: float, regression: bool):
    """Rows whose features (and regression targets) hold many zeros of both signs — what
    np.round makes of small negatives — and some NaNs."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d), 1)
    X[rng.random((n, d)) < zeros] = 0.0
    X[(X == 0) & (rng.random((n, d)) < 0.5)] = -0.0
    X[rng.random((n, d)) < 0.08] = np.nan
    if regression:
        y = np.round(np.nan_to_num(X[:, 0]) * 0.3 + rng.normal(scale=0.2, size=n))
        y[y == 0] *= rng.choice([-1.0, 1.0], size=int((y == 0).sum()))
    else:
        y = (np.nan_to_num(X[:, 0]) + rng.normal(scale=0.5, size=n) > 0).astype(np.int64)
        y[rng.random(n) < 0.2] = 2
    return X.astype(np.float32), y


def _fit(X, y, ids, regression: bool, max_bins: int) -> ExactForest:
    config = ForestConfig(
        n_trees=3, n_candidates=3, min_bin_rows=40, cache_min_rows=8, max_bins=max_bins
    )
    forest = ExactForest(config, KEY, X.shape[1], None if regression else 3)
    forest.fit(list(ids), [id_bytes(i) for i in ids], X, y)
    return forest


def _outputs(forest: ExactForest, X: np.ndarray) -> np.ndarray:
    return forest.predict_values(X) if forest.regression else forest.predict_proba(X)


def _flip_zeros(a: np.ndarray) -> np.ndarray:
    """Every zero with the other sign."""
    out = a.copy()
    zero = out == 0
    out[zero] = np.where(np.signbit(out[zero]), 0.0, -0.0)
    return out


def _other_nans(X: np.ndarray, rng) -> np.ndarray:
    out = X.copy()
    nan = np.isnan(out)
    out[nan] = rng.choice(NAN_PAYLOADS, size=int(nan.sum())).view(np.float32)
    assert np.isnan(out).sum() == nan.sum()
    return out


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(60, 160),
    d=st.integers(1, 3),
    zeros=st.floats(0.2, 0.8),
    max_bins=st.integers(2, 8),
    regression=st.booleans(),
    change=st.sampled_from(["order", "signs", "nans", "forget"]),
)
def test_a_forest_equal_by_construction_has_equal_digests(
    seed, n, d, zeros, max_bins, regression, change
):
    X, y = _data(seed, n, d, zeros, regression)
    ids = np.arange(n)
    a = _fit(X, y, ids, regression, max_bins)
    rng = np.random.default_rng(seed + 1)
    if change == "order":  # the same rows, stored in another order
        p = rng.permutation(n)
        b = _fit(X[p], y[p], ids[p], regression, max_bins)
    elif change == "signs":  # every zero's sign flipped, in the features and the targets
        b = _fit(_flip_zeros(X), _flip_zeros(y) if regression else y, ids, regression, max_bins)
    elif change == "nans":  # NaNs with other bits: all missing values alike
        b = _fit(_other_nans(X, rng), y, ids, regression, max_bins)
    else:  # forget rows outside D°; the refit stores the rest in another order
        pool = set(a.pool_ids())
        gone = [i for i in rng.permutation(n).tolist() if i not in pool][: n // 5]
        a.forget(gone)
        keep = np.array([i for i in rng.permutation(n).tolist() if i not in set(gone)])
        b = _fit(X[keep], y[keep], ids[keep], regression, max_bins)
    probe = np.concatenate([X, _flip_zeros(X), _other_nans(X, rng)])
    # equal by construction: every prediction is the same bits
    assert np.array_equal(_outputs(a, probe), _outputs(b, probe))
    assert a.state_digest() == b.state_digest()
    assert a.structure_digest() == b.structure_digest()


def test_bin_edges_hold_no_negative_zero():
    """Midpoint quantiles of a column of zeros of both signs: the edge is +0.0 whatever the
    rows' order (np.percentile averages whichever two zeros the sort puts there)."""
    col = np.array([-0.0] * 50 + [0.0] * 50 + list(range(1, 101)) + [-5.0] * 100)
    for seed in range(20):
        p = np.random.default_rng(seed).permutation(col.size)
        (edges,) = bin_edges(col[p, None], max_bins=4)
        assert 0.0 in edges and not np.signbit(edges[edges == 0]).any()


def test_row_hashes_see_values_not_their_bytes():
    """A row's identity hash (both families' multiset hash) is a function of its values:
    −0.0 hashes as +0.0 and every NaN as one NaN, in the features and the targets; any
    other change of a value changes it."""
    X = np.array([[0.0, 1.5, np.nan], [-2.0, 0.0, 3.0]], np.float32)
    raw = [id_bytes(0), id_bytes(1)]
    pool = np.array([True, False])
    targets = np.array([0.0, 2.5])
    base = row_hashes(raw, targets, pool, X)
    other = X.copy()
    other[0, 0] = other[1, 1] = -0.0
    other[0, 2] = NAN_PAYLOADS[1:2].view(np.float32)[0]
    assert np.array_equal(row_hashes(raw, np.array([-0.0, 2.5]), pool, other), base)
    moved = X.copy()
    moved[0, 1] = np.nextafter(np.float32(1.5), np.float32(2))
    assert not np.array_equal(row_hashes(raw, targets, pool, moved)[0], base[0])
    assert np.array_equal(row_hashes(raw, targets, pool, moved)[1], base[1])


@pytest.mark.parametrize("regression", [False, True])
def test_qss_rows_in_another_order_have_equal_digests(regression):
    """QSS: D° is ordered by the keyed hash, so the schema is the same bits in any order."""
    from forgetting import QSSClassifier, QSSRegressor

    X, y = _data(3, 400, 3, 0.5, regression)
    X = np.nan_to_num(X)
    cls = QSSRegressor if regression else QSSClassifier
    kw = dict(random_state=0, secret_key=KEY, n_instances=2)
    a = cls(**kw).fit(X, y, list(range(400)))
    p = np.random.default_rng(0).permutation(400)
    b = cls(**kw).fit(X[p], y[p], p.tolist())
    assert np.array_equal(a.predict(X), b.predict(X))
    assert a.state_digest() == b.state_digest()


def test_qss_with_zeros_of_the_other_sign_has_equal_digests():
    from forgetting import QSSClassifier

    X, y = _data(3, 400, 3, 0.5, False)
    X = np.nan_to_num(X)
    kw = dict(random_state=0, secret_key=KEY, n_instances=2)
    a = QSSClassifier(**kw).fit(X, y, list(range(400)))
    b = QSSClassifier(**kw).fit(_flip_zeros(X), y, list(range(400)))
    assert np.array_equal(a.predict(X), b.predict(X))
    assert a.state_digest() == b.state_digest()
