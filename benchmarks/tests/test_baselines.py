"""Tests for the unlearning baselines (SISA and exact ridge).

The central property is history independence: ``fit(D); forget(R)`` must match
``fit(D \\ R)``.  For SISA that is bitwise (``numpy.array_equal``); for the ridge
baseline it holds only up to floating-point rounding (``allclose``), which is the
documented difference between the two.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import array_api_checks_run, sklearn_checks
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.datasets import make_classification, make_regression
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression, Ridge, RidgeClassifier
from sklearn.tree import DecisionTreeClassifier

from forgetting_lab.baselines import (
    ExactRidge,
    ExactRidgeClassifier,
    SISAClassifier,
    SISARegressor,
)
from forgetting_lab.baselines._ids import id_keys

N = 120
XC, YC = make_classification(
    n_samples=N, n_features=6, n_informative=4, n_classes=3, random_state=0
)
XR, YR = make_regression(n_samples=N, n_features=6, noise=0.5, random_state=0)
IDS = np.arange(N)
SIDS = np.array([f"user-{i}" for i in range(N)])
FAST = settings(max_examples=15, deadline=None)


def _without(ids: np.ndarray, gone: set) -> np.ndarray:
    return np.array([i not in gone for i in ids.tolist()])


def _snapshot(m) -> tuple:
    return (
        m.n_samples_,
        dict(m.shard_of_),
        [s.ids for s in m.shards_],
        list(m.estimators_),
    )


# ---------------------------------------------------------------------------
# id hashing
# ---------------------------------------------------------------------------


def test_id_keys_are_pinned() -> None:
    # Shard assignment must never change across releases/processes; pin the hash.
    assert id_keys([0, 1, -5, "a", "row-7"], 0).tolist() == [
        16294208416658607535,
        15204172177749531820,
        10011781438195199310,
        3602692651743367248,
        10563293977156868672,
    ]
    assert id_keys([0, "a"], 42).tolist() == [14769503741126384973, 14685163317932231241]


def test_numpy_and_python_ids_are_the_same_rows() -> None:
    a = SISAClassifier().fit(XC, YC, ids=IDS)
    b = SISAClassifier().fit(XC, YC, ids=IDS.tolist())
    assert a.shard_of_ == b.shard_of_
    a.forget([np.int64(3)])
    assert 3 not in a.shard_of_


# ---------------------------------------------------------------------------
# SISA: sklearn conventions
# ---------------------------------------------------------------------------


def test_sisa_params_and_clone() -> None:
    m = SISAClassifier()
    assert m.get_params() == {"n_shards": 5, "estimator": None, "random_state": 0, "n_slices": 1}
    lr = LogisticRegression(C=0.5)
    m = SISAClassifier(n_shards=3, estimator=lr, random_state=7).fit(XC, YC)
    assert m.estimator is lr  # stored verbatim, never fitted itself
    assert not hasattr(lr, "coef_")
    c = clone(m)
    assert not hasattr(c, "estimators_")
    assert c.get_params()["n_shards"] == 3 and c.get_params()["random_state"] == 7
    assert c.estimator is not lr and c.estimator.get_params() == lr.get_params()
    assert SISARegressor().get_params() == {
        "n_shards": 5,
        "estimator": None,
        "random_state": 0,
        "n_slices": 1,
    }
    assert 0.5 < m.score(XC, YC) <= 1.0
    r = SISARegressor().fit(XR, YR)
    assert r.score(XR, YR) > 0.9


def test_sisa_fit_is_input_order_independent() -> None:
    perm = np.random.default_rng(0).permutation(N)
    a = SISAClassifier().fit(XC, YC, SIDS)
    b = SISAClassifier().fit(XC[perm], YC[perm], SIDS[perm])
    assert np.array_equal(a.predict_proba(XC), b.predict_proba(XC))
    assert [s.ids for s in a.shards_] == [s.ids for s in b.shards_]


# ---------------------------------------------------------------------------
# SISA: history independence
# ---------------------------------------------------------------------------


@FAST
@given(
    gone=st.sets(st.integers(0, N - 1), min_size=1, max_size=N // 2),
    seed=st.integers(0, 2**16),
    string_ids=st.booleans(),
)
def test_sisa_classifier_forget_equals_refit(gone: set, seed: int, string_ids: bool) -> None:
    ids = SIDS if string_ids else IDS
    gone_ids = [ids[i].item() for i in sorted(gone)]
    m = SISAClassifier(random_state=seed).fit(XC, YC, ids)
    info = m.forget(gone_ids)
    assert info["shards_retrained"] == sorted(info["shards_retrained"])
    assert isinstance(info["seconds"], float)

    keep = _without(ids, set(gone_ids))
    perm = np.random.default_rng(seed).permutation(int(keep.sum()))
    ref = SISAClassifier(random_state=seed).fit(XC[keep][perm], YC[keep][perm], ids[keep][perm])
    assert np.array_equal(m.classes_, ref.classes_)
    assert np.array_equal(m.predict_proba(XC), ref.predict_proba(XC))
    assert np.array_equal(m.predict(XC), ref.predict(XC))
    assert m.n_samples_ == ref.n_samples_ == int(keep.sum())


@FAST
@given(gone=st.sets(st.integers(0, N - 1), min_size=1, max_size=N // 2), seed=st.integers(0, 99))
def test_sisa_regressor_forget_equals_refit(gone: set, seed: int) -> None:
    m = SISARegressor(n_shards=4, random_state=seed).fit(XR, YR)
    m.forget(sorted(gone))
    keep = _without(IDS, gone)
    ref = SISARegressor(n_shards=4, random_state=seed).fit(XR[keep], YR[keep], IDS[keep])
    assert np.array_equal(m.predict(XR), ref.predict(XR))


@FAST
@given(new=st.sets(st.integers(0, N - 1), min_size=1, max_size=N // 2))
def test_sisa_insert_equals_refit(new: set) -> None:
    later = np.array(sorted(new))
    first = _without(IDS, new)
    m = SISAClassifier().fit(XC[first], YC[first], IDS[first])
    if not np.isin(YC[later], m.classes_).all():
        return  # insert cannot introduce a class; covered by test_sisa_insert_unseen_label
    info = m.insert(XC[later], YC[later], IDS[later])
    ref = SISAClassifier().fit(XC, YC)
    assert np.array_equal(m.predict_proba(XC), ref.predict_proba(XC))
    assert info["shards_retrained"] == sorted({ref.shard_of_[i] for i in later.tolist()})


def test_sisa_forget_then_insert_roundtrip() -> None:
    m = SISARegressor().fit(XR, YR, SIDS)
    m.forget(SIDS[:30].tolist())
    m.insert(XR[:30], YR[:30], SIDS[:30])
    assert np.array_equal(m.predict(XR), SISARegressor().fit(XR, YR, SIDS).predict(XR))


def test_sisa_deterministic_stochastic_estimator() -> None:
    # History independence holds for any estimator that is deterministic given its data.
    est = DecisionTreeClassifier(max_features=2, random_state=0)
    m = SISAClassifier(estimator=est).fit(XC, YC)
    m.forget([1, 2, 3, 50])
    keep = _without(IDS, {1, 2, 3, 50})
    ref = SISAClassifier(estimator=est).fit(XC[keep], YC[keep], IDS[keep])
    assert np.array_equal(m.predict_proba(XC), ref.predict_proba(XC))


def test_sisa_forgetting_a_whole_class_drops_it() -> None:
    gone = IDS[YC == 2]
    m = SISAClassifier().fit(XC, YC)
    m.forget(gone)
    keep = YC != 2
    ref = SISAClassifier().fit(XC[keep], YC[keep], IDS[keep])
    assert m.classes_.tolist() == [0, 1]
    assert m.predict_proba(XC).shape == (N, 2)
    assert np.array_equal(m.predict_proba(XC), ref.predict_proba(XC))
    with pytest.raises(ValueError, match="labels not seen"):
        m.insert(XC[:1], [2], ["back"])


# ---------------------------------------------------------------------------
# SISA: sharding mechanics
# ---------------------------------------------------------------------------


def test_sisa_shard_assignment_is_stable() -> None:
    m = SISAClassifier(n_shards=7).fit(XC, YC, SIDS)
    before = dict(m.shard_of_)
    m.forget(SIDS[::3].tolist())
    assert all(before[i] == k for i, k in m.shard_of_.items())
    sub = SISAClassifier(n_shards=7).fit(XC[1::2], YC[1::2], SIDS[1::2])
    assert all(before[i] == k for i, k in sub.shard_of_.items())
    other_seed = SISAClassifier(n_shards=7, random_state=1).fit(XC, YC, SIDS)
    assert other_seed.shard_of_ != before


def test_sisa_edits_use_fit_state_after_set_params() -> None:
    m = SISAClassifier(random_state=3).fit(XC[:100], YC[:100])
    # not refit: forget/insert must still place and train rows as the fit did
    m.set_params(random_state=4, estimator=RidgeClassifier())
    m.insert(XC[100:], YC[100:], IDS[100:])
    ref = SISAClassifier(random_state=3).fit(XC, YC)
    assert m.shard_of_ == ref.shard_of_
    assert np.array_equal(m.predict_proba(XC), ref.predict_proba(XC))
    m.forget([0, 1, 2])
    ref.forget([0, 1, 2])
    assert np.array_equal(m.predict_proba(XC), ref.predict_proba(XC))


def test_sisa_retrains_only_affected_shards() -> None:
    m = SISAClassifier(n_shards=6).fit(XC, YC)
    old = list(m.estimators_)
    target = [0, 1]
    expected = sorted({m.shard_of_[i] for i in target})
    info = m.forget(target)
    assert info["shards_retrained"] == expected
    for k in range(6):
        assert (m.estimators_[k] is old[k]) == (k not in expected)


def test_sisa_forgotten_rows_are_gone() -> None:
    m = SISAClassifier().fit(XC, YC, SIDS)
    gone = SIDS[:10].tolist()
    m.forget(gone)
    held_ids = {i for s in m.shards_ for i in s.ids}
    assert held_ids.isdisjoint(gone) and set(m.shard_of_).isdisjoint(gone)
    assert len(held_ids) == m.n_samples_ == N - 10
    held_X = np.concatenate([s.X for s in m.shards_])
    for row in XC[:10]:
        assert not (held_X == row).all(axis=1).any()
    for s in m.shards_:  # shards stay canonically ordered and consistent
        assert len(s.ids) == len(s.keys) == s.X.shape[0] == s.y.shape[0]
        assert np.all(np.diff(s.keys.astype(np.float64)) >= 0)


def test_sisa_empty_and_single_class_shards() -> None:
    X, y = XC[:8], np.array([0, 0, 0, 0, 1, 1, 1, 1])
    m = SISAClassifier(n_shards=20).fit(X, y)
    assert any(e is None for e in m.estimators_)
    sizes = [len(s) for s in m.shards_]
    assert sum(sizes) == 8
    p = m.predict_proba(XC)
    assert p.shape == (N, 2)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    # every non-empty shard here holds <= a few rows; a one-class shard votes 1.0 for it
    k = next(k for k, s in enumerate(m.shards_) if len(s) and np.unique(s.y).size == 1)
    label = m.shards_[k].y[0]
    solo = SISAClassifier(n_shards=1).fit(X[y == label], y[y == label])
    assert np.array_equal(solo.predict(XC), np.full(N, label))
    np.testing.assert_array_equal(solo.predict_proba(XC), np.ones((N, 1)))


def test_sisa_estimator_without_predict_proba_votes() -> None:
    m = SISAClassifier(n_shards=4, estimator=RidgeClassifier()).fit(XC, YC)
    p = m.predict_proba(XC)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert set(np.unique(p * 4)).issubset({0.0, 1.0, 2.0, 3.0, 4.0})
    assert m.score(XC, YC) > 0.5


def test_sisa_string_labels_and_multioutput_regression() -> None:
    labels = np.array(["cat", "dog", "emu"])[YC]
    m = SISAClassifier().fit(XC, labels)
    assert set(m.predict(XC)) <= {"cat", "dog", "emu"}
    m.forget([0])
    Y2 = np.column_stack([YR, -YR])
    r = SISARegressor().fit(XR, Y2)
    assert r.predict(XR).shape == (N, 2)
    r.forget([5])
    with pytest.raises(ValueError, match="shape"):
        r.insert(XR[:1], YR[:1], ["x"])


# ---------------------------------------------------------------------------
# SISA: error contract
# ---------------------------------------------------------------------------


def test_sisa_forget_errors_leave_model_unchanged() -> None:
    m = SISAClassifier().fit(XC, YC)
    p0, snap = m.predict_proba(XC), _snapshot(m)
    with pytest.raises(KeyError, match="9999"):
        m.forget([1, 9999])
    with pytest.raises(KeyError, match="'ghost'"):
        m.forget(["ghost"])
    with pytest.raises(ValueError, match="unique"):
        m.forget([1, 1])
    with pytest.raises(ValueError, match="at least one"):
        m.forget([])
    with pytest.raises(ValueError, match="every row"):
        m.forget(IDS)
    with pytest.raises(TypeError):
        m.forget(3)
    with pytest.raises(TypeError):
        m.forget([1.5])
    assert _snapshot(m) == snap
    assert np.array_equal(m.predict_proba(XC), p0)


def test_sisa_insert_errors_leave_model_unchanged() -> None:
    m = SISAClassifier().fit(XC[:100], YC[:100])
    snap = _snapshot(m)
    with pytest.raises(ValueError, match="already present"):
        m.insert(XC[100:102], YC[100:102], [100, 5])
    with pytest.raises(ValueError, match="labels not seen"):
        m.insert(XC[100:101], [7], [100])
    with pytest.raises(ValueError, match="features"):
        m.insert(XC[100:101, :3], YC[100:101], [100])
    with pytest.raises(ValueError, match="NaN"):
        m.insert(np.full((1, 6), np.nan), [0], [100])
    with pytest.raises(ValueError, match="entries"):
        m.insert(XC[100:102], YC[100:101], [100, 101])
    with pytest.raises(ValueError, match="unique"):
        m.insert(XC[100:102], YC[100:102], [100, 100])
    assert _snapshot(m) == snap


@pytest.mark.parametrize("cls", [SISAClassifier, SISARegressor])
def test_sisa_fit_validation(cls) -> None:
    y = YC if cls is SISAClassifier else YR
    X = XC if cls is SISAClassifier else XR
    bad = X.copy()
    bad[3, 2] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        cls().fit(bad, y)
    with pytest.raises(ValueError, match="entries"):
        cls().fit(X, y[:-1])
    with pytest.raises(ValueError, match="unique"):
        cls().fit(X, y, ids=[0] * N)
    with pytest.raises(ValueError, match="entries"):
        cls().fit(X, y, ids=range(N - 1))
    with pytest.raises(TypeError):
        cls().fit(X, y, ids=[True] + list(range(1, N)))
    with pytest.raises(ValueError, match="n_shards"):
        cls(n_shards=0).fit(X, y)
    with pytest.raises(ValueError, match="random_state"):
        cls(random_state=None).fit(X, y)
    m = cls().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        m.predict(X[:, :4])
    with pytest.raises(ValueError, match="NaN"):
        m.predict(np.full((2, 6), np.nan))
    with pytest.raises(ValueError, match="y contains"):
        cls().fit(X, np.where(np.arange(N) == 0, np.nan, y.astype(float)))


# ---------------------------------------------------------------------------
# Exact ridge
# ---------------------------------------------------------------------------

RTOL, ATOL = 1e-9, 1e-9


@FAST
@given(
    gone=st.sets(st.integers(0, N - 1), min_size=1, max_size=N // 2),
    alpha=st.sampled_from([1e-2, 1.0, 30.0]),
    fit_intercept=st.booleans(),
)
def test_ridge_forget_matches_refit(gone: set, alpha: float, fit_intercept: bool) -> None:
    m = ExactRidge(alpha=alpha, fit_intercept=fit_intercept).fit(XR, YR)
    info = m.forget(sorted(gone))
    assert set(info) == {"seconds"}
    keep = _without(IDS, gone)
    ref = ExactRidge(alpha=alpha, fit_intercept=fit_intercept).fit(XR[keep], YR[keep])
    sk = Ridge(alpha=alpha, fit_intercept=fit_intercept, solver="cholesky").fit(XR[keep], YR[keep])
    # Not bitwise: floating-point subtraction is not the inverse of addition.
    np.testing.assert_allclose(m.predict(XR), ref.predict(XR), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.predict(XR), sk.predict(XR), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=RTOL, atol=ATOL)
    assert sorted(m.ids_) == sorted(IDS[keep].tolist())


def test_ridge_insert_and_multioutput() -> None:
    Y2 = np.column_stack([YR, 2 * YR + 1])
    m = ExactRidge().fit(XR[:80], Y2[:80], SIDS[:80])
    for lo in range(80, N, 7):  # several inserts to exercise buffer growth
        m.insert(XR[lo : lo + 7], Y2[lo : lo + 7], SIDS[lo : lo + 7])
    m.forget(SIDS[::5].tolist())
    keep = np.arange(N) % 5 != 0
    ref = ExactRidge().fit(XR[keep], Y2[keep])
    assert m.coef_.shape == (2, 6) and m.intercept_.shape == (2,)
    np.testing.assert_allclose(m.predict(XR), ref.predict(XR), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.A_, ref.A_, rtol=RTOL, atol=1e-8)
    with pytest.raises(ValueError, match="targets"):
        m.insert(XR[:1], YR[:1], ["new"])


def test_ridge_forgotten_rows_are_gone_from_buffer() -> None:
    m = ExactRidge().fit(XR, YR)
    m.forget([0, 1, N - 1, 50])
    assert m.n_samples_ == N - 4
    assert set(m.ids_) == set(range(N)) - {0, 1, N - 1, 50}
    for r in (0, 1, N - 1, 50):  # nowhere in the buffer, including spare capacity
        assert not (m._X == XR[r]).all(axis=1).any()
    # remaining ids still map to their own rows
    for i in m.ids_:
        assert np.array_equal(m._X[m._pos[i]], XR[i])


def test_ridge_refreshes_statistics_when_downdate_is_indefinite(monkeypatch) -> None:
    from scipy.linalg import LinAlgError

    m = ExactRidge().fit(XR, YR)
    real = ExactRidge._solve
    calls = {"n": 0}

    def flaky(A, B):
        calls["n"] += 1
        if calls["n"] == 1:
            raise LinAlgError("simulated loss of positive definiteness")
        return real(A, B)

    monkeypatch.setattr(ExactRidge, "_solve", staticmethod(flaky))
    m.forget(list(range(10)))
    assert m.n_refreshes_ == 1 and calls["n"] == 2
    ref = ExactRidge().fit(XR[10:], YR[10:])
    np.testing.assert_allclose(m.predict(XR), ref.predict(XR), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.A_, ref.A_, rtol=1e-12, atol=1e-9)


def test_ridge_classifier_matches_refit_and_drops_classes() -> None:
    m = ExactRidgeClassifier(alpha=0.5).fit(XC, YC)
    assert m.coef_.shape == (3, 6)
    gone = IDS[(YC == 1)].tolist() + [0, 2, 4]
    gone = sorted(set(gone))
    m.forget(gone)
    keep = _without(IDS, set(gone))
    ref = ExactRidgeClassifier(alpha=0.5).fit(XC[keep], YC[keep])
    assert m.classes_.tolist() == ref.classes_.tolist() == [0, 2]
    assert m.coef_.shape == ref.coef_.shape == (2, 6)
    assert m.B_.shape == ref.B_.shape
    assert np.array_equal(m.class_counts_, ref.class_counts_)
    np.testing.assert_allclose(
        m.decision_function(XC), ref.decision_function(XC), rtol=RTOL, atol=ATOL
    )
    assert np.array_equal(m.predict(XC), ref.predict(XC))
    with pytest.raises(ValueError, match="labels not seen"):
        m.insert(XC[:1], [1], ["again"])
    m.insert(XC[:1], [2], ["again"])  # a class still held is fine
    assert m.class_counts_[1] == ref.class_counts_[1] + 1


def test_ridge_classifier_insert_matches_refit() -> None:
    labels = np.array(["a", "bb", "ccc"])[YC]
    m = ExactRidgeClassifier().fit(XC[:90], labels[:90])
    m.insert(XC[90:], labels[90:], IDS[90:])
    ref = ExactRidgeClassifier().fit(XC, labels)
    np.testing.assert_allclose(
        m.decision_function(XC), ref.decision_function(XC), rtol=RTOL, atol=ATOL
    )
    assert np.array_equal(m.predict(XC), ref.predict(XC))
    assert 0.5 < m.score(XC, labels) <= 1.0


@pytest.mark.parametrize("cls", [ExactRidge, ExactRidgeClassifier])
def test_ridge_error_contract(cls) -> None:
    X, y = (XR, YR) if cls is ExactRidge else (XC, YC)
    assert cls().get_params() == {"alpha": 1.0, "fit_intercept": True}
    assert clone(cls(alpha=3.0)).get_params()["alpha"] == 3.0
    m = cls().fit(X, y, SIDS)
    pred, A = m.predict(X), m.A_.copy()
    with pytest.raises(KeyError, match="nope"):
        m.forget(["user-1", "nope"])
    with pytest.raises(ValueError, match="unique"):
        m.forget(["user-1", "user-1"])
    with pytest.raises(ValueError, match="at least one"):
        m.forget([])
    with pytest.raises(ValueError, match="every row"):
        m.forget(SIDS)
    with pytest.raises(ValueError, match="already present"):
        m.insert(X[:1], y[:1], ["user-3"])
    with pytest.raises(ValueError, match="features"):
        m.predict(X[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        m.insert(np.full((1, 6), np.nan), y[:1], ["z"])
    with pytest.raises(ValueError):  # failed refit keeps the old model intact
        m.fit(X, np.ones((N, 2, 2)))
    assert np.array_equal(m.predict(X), pred) and np.array_equal(m.A_, A)
    assert m.n_samples_ == N
    for bad in (0.0, -1.0, np.nan, "x"):
        with pytest.raises(ValueError, match="alpha"):
            cls(alpha=bad).fit(X, y)


# ---------------------------------------------------------------------------
# Shared: sklearn compatibility and edge validation
# ---------------------------------------------------------------------------

_DELIBERATE = {
    # Non-numeric X raises our ValueError (one exception type for all bad input).
    "check_dtype_object": "bad X raises ValueError, not TypeError",
    # A (n, 1) label column is rejected instead of being raveled with a warning.
    "check_supervised_y_2d": "2-D y rejected for classifiers",
}


def _expected_failures(est) -> dict[str, str]:
    out = {"check_dtype_object": _DELIBERATE["check_dtype_object"]}
    if isinstance(est, SISAClassifier | ExactRidgeClassifier):
        out["check_supervised_y_2d"] = _DELIBERATE["check_supervised_y_2d"]
    return out


@sklearn_checks(
    [SISAClassifier(), SISARegressor(), ExactRidge(), ExactRidgeClassifier()],
    expected_failed_checks=_expected_failures,
)
def test_sklearn_estimator_checks(estimator, check) -> None:
    check(estimator)


def test_sklearn_array_api_checks_in_a_fresh_interpreter() -> None:
    """The one check left out above (helpers.ARRAY_API_CHECK), where it runs: every one
    scikit-learn yields passes with SCIPY_ARRAY_API=1."""
    expected, passed = array_api_checks_run(
        "from forgetting_lab.baselines import ExactRidge, ExactRidgeClassifier, SISAClassifier, "
        "SISARegressor",
        "[SISAClassifier(), SISARegressor(), ExactRidge(), ExactRidgeClassifier()]",
    )
    assert passed == expected


@pytest.mark.parametrize("make", [SISAClassifier, SISARegressor, ExactRidge, ExactRidgeClassifier])
def test_unfitted_and_edge_inputs(make) -> None:
    classifier = make in (SISAClassifier, ExactRidgeClassifier)
    X, y = (XC, YC) if classifier else (XR, YR)
    with pytest.raises(NotFittedError):
        make().forget([0])
    with pytest.raises(NotFittedError):
        make().insert(X[:1], y[:1], [0])
    with pytest.raises(ValueError, match="Complex"):
        make().fit(X + 1j, y)
    with pytest.raises(ValueError, match="Reshape"):
        make().fit(X[:, 0], y)
    with pytest.raises(ValueError, match="0 rows"):
        make().fit(X[:0], y[:0])
    with pytest.raises(ValueError, match="target y is None"):
        make().fit(X, None)
    if classifier:
        with pytest.raises(ValueError, match="Unknown label type"):
            make().fit(X, XR[:, 0])
        with pytest.raises(ValueError, match="1-dimensional"):
            make().fit(X, y[:, None])


def test_ridge_classifier_binary_decision_function() -> None:
    yb = (YC > 0).astype(int)
    m = ExactRidgeClassifier().fit(XC, yb)
    d = m.decision_function(XC)
    assert d.shape == (N,)
    assert np.array_equal(m.predict(XC), m.classes_[(d > 0).astype(int)])


@pytest.mark.parametrize("n_slices", [2, 4])
def test_sliced_sisa_forget_equals_refit_and_retrains_from_the_slice(n_slices) -> None:
    ids = list(range(len(YC)))
    params = dict(n_shards=3, n_slices=n_slices, random_state=1)
    model = SISAClassifier(**params).fit(XC, YC)
    assert all(len(c) == n_slices for c in model.checkpoints_)
    before = [list(c) for c in model.checkpoints_]
    victims = ids[:7]
    report = model.forget(victims)
    assert report["slices_retrained"] <= len(report["shards_retrained"]) * n_slices
    untouched = set(range(3)) - set(report["shards_retrained"])
    for k in untouched:
        assert all(a is b for a, b in zip(model.checkpoints_[k], before[k], strict=True))
    keep = [i for i in ids if i not in set(victims)]
    fresh = SISAClassifier(**params).fit(XC[keep], YC[keep], keep)
    assert np.array_equal(model.predict_proba(XC), fresh.predict_proba(XC))
    model.insert(XC[:7], YC[:7], victims)
    assert np.array_equal(
        model.predict_proba(XC), SISAClassifier(**params).fit(XC, YC).predict_proba(XC)
    )


def test_a_deletion_in_the_last_slice_reuses_earlier_checkpoints() -> None:
    model = SISAClassifier(n_shards=1, n_slices=4, random_state=0).fit(XC, YC)
    shard = model.shards_[0]
    last = (shard.keys // np.uint64(1)) % np.uint64(4) == np.uint64(3)
    victim = shard.ids[int(np.flatnonzero(last)[0])]
    before = list(model.checkpoints_[0])
    report = model.forget([victim])
    assert report["slices_retrained"] == 1
    assert all(a is b for a, b in zip(model.checkpoints_[0][:3], before[:3], strict=True))


def test_full_retrain_oracle_forgets_by_refitting() -> None:
    from sklearn.base import clone as sk_clone

    from forgetting_lab.baselines import RetrainClassifier

    ids = list(range(len(YC)))
    model = RetrainClassifier(random_state=3).fit(XC, YC)
    assert model.get_params() == {"estimator": None, "random_state": 3}
    assert len(model.estimators_) == 1
    report = model.forget(ids[:9])
    assert report["shards_retrained"] == [0]
    fresh = RetrainClassifier(random_state=3).fit(XC[9:], YC[9:], ids[9:])
    assert np.array_equal(model.predict_proba(XC), fresh.predict_proba(XC))
    assert sk_clone(model).get_params() == model.get_params()
