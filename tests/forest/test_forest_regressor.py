"""ExactForestRegressor is exact: after forget or insert its predictions, digest and every
tree's structure are bit for bit those of a fit on the rows held — random deletions, D° hits,
inserts, deletions that flip the root split, missing values and pandas categories."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import array_api_checks_run, sklearn_checks

from forgetting import ExactForestRegressor
from forgetting.forest.core import TARGET_LEVELS
from forgetting.schema.membership import draws, id_bytes

PARAMS = dict(n_estimators=6, max_features=8, min_bin_rows=60, cache_min_rows=16, n_instances=1)
# one forest, one D°: a D° hit refits in the call (tests/forest/test_forest_instances.py covers the
# default n_instances=3, where it rebuilds one instance in the background)


def _data(n=600, d=5, seed=0, nan=0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = 3 * X[:, 0] + np.sin(2 * X[:, 1]) + X[:, 2] * X[:, 3 % d] + 0.2 * rng.normal(size=n)
    if nan:
        X[rng.random(X.shape) < nan] = np.nan
    return X, y


def _refit(model, X, y, keep_ids):
    keep_ids = list(keep_ids)
    return ExactForestRegressor(**model.get_params()).fit(X[keep_ids], y[keep_ids], keep_ids)


def _assert_same(a, b, X):
    assert np.array_equal(a.predict(X), b.predict(X))
    assert a.state_digest() == b.state_digest()
    assert a.structure_digest() == b.structure_digest()
    for t in range(a.n_estimators):
        assert np.array_equal(a.engine_.structure(t), b.engine_.structure(t))


def _outside_pool(model, ids):
    pool = set(model.pool_ids_)
    return [i for i in ids if i not in pool]


@sklearn_checks([ExactForestRegressor(n_estimators=5)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_sklearn_array_api_checks_in_a_fresh_interpreter():
    """The one check left out above (helpers.ARRAY_API_CHECK), where it runs: every one
    scikit-learn yields passes with SCIPY_ARRAY_API=1."""
    expected, passed = array_api_checks_run(
        "from forgetting import ExactForestRegressor", "[ExactForestRegressor(n_estimators=5)]"
    )
    assert passed == expected


def test_it_learns_a_smooth_function():
    X, y = _data(n=2000)
    Xt, yt = _data(n=500, seed=9)
    model = ExactForestRegressor(n_estimators=20, max_features=16, min_bin_rows=200).fit(X, y)
    rmse = np.sqrt(np.mean((model.predict(Xt) - yt) ** 2))
    assert rmse < 0.35 * yt.std(), rmse


def test_random_deletions_and_pool_hits_equal_a_refit():
    X, y = _data()
    model = ExactForestRegressor(**PARAMS).fit(X, y)
    rng = np.random.default_rng(1)
    victims = _outside_pool(model, rng.permutation(len(y)).tolist())[:60]
    for chunk in np.array_split(np.array(victims), 12):
        assert model.forget(chunk.tolist()).instances_hit == ()
    pool = model.pool_ids_
    assert len(pool) >= PARAMS["min_bin_rows"] and set(pool) <= set(model.ids_)
    assert model.forget(pool[:2]).instances_hit == (0,)  # D° moves the grid: a refit
    gone = set(victims) | set(pool[:2])
    _assert_same(model, _refit(model, X, y, sorted(set(range(len(y))) - gone)), X)


def test_inserts_and_history_independence():
    X, y = _data(n=500, seed=5)
    a = ExactForestRegressor(**PARAMS).fit(X, y)
    ids = _outside_pool(a, list(range(500)))
    gone = ids[:40]
    a.forget(gone[:20])
    a.forget(gone[20:])
    b = ExactForestRegressor(**PARAMS).fit(X, y)
    for i in reversed(gone):
        b.forget([i])
    start = ids[40:200]
    c = ExactForestRegressor(**PARAMS).fit(X[start], y[start], start)
    rest = sorted(set(range(500)) - set(gone) - set(start))
    for chunk in np.array_split(np.array(rest), 7):
        c.insert(X[chunk], y[chunk], chunk.tolist())
    _assert_same(a, b, X)
    _assert_same(a, c, X)


def _sse_gains(P, L, min_leaf=1):
    n, total = P[0], P[1]
    gains = np.full(len(L), -np.inf)
    for j, (nl, sl) in enumerate(L):
        nr, sr = n - nl, total - sl
        if nl >= min_leaf and nr >= min_leaf:
            gains[j] = sl * sl / nl + sr * sr / nr - total * total / n
    return gains


def test_adversarial_deletions_that_flip_the_root_split_equal_a_refit():
    X, y = _data(n=400, seed=3)
    model = ExactForestRegressor(**PARAMS).fit(X, y)
    A = model.engine_.instance(0).A
    root, slot = int(A.roots[0]), int(A.slot[A.roots[0]])
    assert slot >= 0, "the root keeps cached candidate sums"
    before = model.engine_.structure(0)
    chosen = int(A.choice[root])
    feats, thrs = A.cfeat[slot].copy(), A.cthr[slot].copy()
    alive = _outside_pool(model, list(range(len(y))))
    gone = []
    for _ in range(300):  # greedy: delete the row that most narrows the chosen split's lead
        A = model.engine_.instance(0).A
        if int(A.roots[0]) != root or int(A.feat[root]) != int(feats[chosen]):
            break
        P = A.counts[root].astype(np.int64)
        L = A.cleft[slot][: A.ncand[slot]].astype(np.int64)
        best_row, best_margin = None, np.inf
        for r in alive[:: max(1, len(alive) // 120)]:
            p = model.engine_.instance(0).rows.slots_of([r])[0]
            q = int(A.y[p])
            goes = A.codes[p, feats[: len(L)]] <= thrs[: len(L)]
            Lr = L - np.outer(goes, [1, q])
            g = _sse_gains(P - [1, q], Lr)
            margin = g[chosen] - np.max(np.delete(g, chosen))
            if margin < best_margin:
                best_row, best_margin = r, margin
        model.forget([best_row])
        alive.remove(best_row)
        gone.append(best_row)
    after = model.engine_.structure(0)
    assert not np.array_equal(before[:2], after[:2]), "the deletions flipped the root split"
    _assert_same(model, _refit(model, X, y, sorted(set(range(len(y))) - set(gone))), X)


def test_missing_values_stay_exact_and_targets_beyond_the_grid_are_clipped():
    X, y = _data(n=500, nan=0.2, seed=7)
    model = ExactForestRegressor(**PARAMS).fit(X, y)
    forest = model.engine_.instance(0)
    assert np.all(np.isfinite(model.predict(X)))
    outside = [
        i
        for i in range(10_000, 10_100)
        if draws(model.engine_.membership_key, [id_bytes(i)], 1)[0, 0] >= forest.pool_threshold
    ]
    far = outside[:3]
    receipt = model.insert(X[:3], np.array([1e6, -1e6, 0.0]), far)  # beyond the grid: clipped
    assert receipt.instances_hit == ()
    levels = forest.A.y[forest.rows.slots_of(far[:2])]
    assert levels.tolist() == [TARGET_LEVELS - 1, 0]
    victims = _outside_pool(model, list(range(0, 500, 7)))
    model.forget(victims)
    keep = sorted(set(range(500)) - set(victims))
    Xr = np.vstack([X[keep], X[:3]])
    yr = np.concatenate([y[keep], [1e6, -1e6, 0.0]])
    refit = ExactForestRegressor(**model.get_params()).fit(Xr, yr, keep + far)
    _assert_same(model, refit, X)


def test_a_dataframe_with_categories_fits_and_forgets_exactly():
    pd = pytest.importorskip("pandas")
    X, y = _data(n=500, seed=11)
    rng = np.random.default_rng(2)
    kind = pd.Categorical(rng.choice(["a", "b", "c", None], size=500), categories=["c", "a", "b"])
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])]).assign(kind=kind)
    y = y + np.where(frame["kind"] == "a", 2.0, 0.0)
    model = ExactForestRegressor(**PARAMS).fit(frame, y)
    assert model.categories_ == {"kind": ["c", "a", "b"]}
    victims = _outside_pool(model, list(range(0, 500, 9)))
    model.forget(victims)
    keep = sorted(set(range(500)) - set(victims))
    refit = ExactForestRegressor(**PARAMS).fit(frame.iloc[keep], y[keep], keep)
    assert np.array_equal(model.predict(frame), refit.predict(frame))
    assert model.state_digest() == refit.state_digest()
    assert model.structure_digest() == refit.structure_digest()
    unseen = frame.head(3).assign(kind=pd.Categorical(["zzz"] * 3))
    missing = frame.head(3).assign(kind=pd.Categorical([None] * 3, categories=["c", "a", "b"]))
    assert np.array_equal(model.predict(unseen), model.predict(missing))  # unseen = missing
    with pytest.raises(ValueError, match="x0"):
        model.predict(frame.drop(columns="x0"))


def test_bad_requests_change_nothing():
    X, y = _data(n=300)
    model = ExactForestRegressor(**PARAMS).fit(X, y)
    digest = model.structure_digest()
    with pytest.raises(KeyError, match="unknown ids"):
        model.forget([10_000])
    with pytest.raises(ValueError, match="already present"):
        model.insert(X[:1], y[:1], [0])
    with pytest.raises(ValueError, match="finite"):
        model.insert(X[:1], [np.nan], ["new"])
    with pytest.raises(ValueError, match="fewer than 2"):
        model.forget(list(range(299)))
    assert model.structure_digest() == digest
    with pytest.raises(ValueError, match="finite"):
        ExactForestRegressor().fit(X, np.full(len(y), np.inf))


def test_pickle_round_trip_forgets_the_same():
    X, y = _data(n=400)
    model = ExactForestRegressor(n_estimators=5, min_bin_rows=50).fit(X, y)
    twin = pickle.loads(pickle.dumps(model))
    assert np.array_equal(model.predict(X), twin.predict(X))
    assert model.forget([3, 4]).state_digest == twin.forget([3, 4]).state_digest
    model.wait_for_rebuilds()  # a D° hit of the default three instances rebuilds one of them
    twin.wait_for_rebuilds()
    assert model.state_digest() == twin.state_digest()
    assert np.array_equal(model.predict(X), twin.predict(X))
