"""A batch forget or insert changes every tree once for all its rows (plan per tree, then
apply) — and is still bit for bit a refit, and the same as the rows one at a time: random
batches, batches that flip the root, regression, the threaded plan and the serial one, and
arrays that must grow in the middle of a batch."""

from __future__ import annotations

import numpy as np
import pytest

from forgetting import ExactForestClassifier, ExactForestRegressor, _parallel
from forgetting.forest import _arrays as forest_arrays
from forgetting.forest import core as forest_core

PARAMS = dict(n_estimators=5, max_features=3, min_bin_rows=60, cache_min_rows=16, n_instances=1)
# one forest, one D°: a D° hit refits in the call (tests/forest/test_forest_instances.py covers the
# default n_instances=3, where it rebuilds one instance in the background)


def _data(n=900, d=6, k=3, seed=0, nan=0.05):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    score = X[:, 0] + X[:, 1] * X[:, 2] + 0.5 * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, k + 1)[1:-1]))
    X[rng.random(X.shape) < nan] = np.nan
    return X, y


def _same(a, b, X):
    assert np.array_equal(a.predict_proba(X[:40]), b.predict_proba(X[:40]))  # paths only
    assert a.state_digest() == b.state_digest()
    assert a.structure_digest() == b.structure_digest()
    for t in range(a.n_estimators):
        assert np.array_equal(a.engine_.structure(t), b.engine_.structure(t))
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))


def _outside_pool(model, ids):
    pool = set(model.pool_ids_)
    return [i for i in ids if i not in pool]


def _refit(model, X, y, keep):
    keep = sorted(keep)
    return type(model)(**model.get_params()).fit(X[keep], y[keep], keep)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_forgets_equal_one_row_forgets_and_a_refit(seed):
    X, y = _data(seed=seed)
    params = dict(PARAMS, random_state=seed, min_samples_leaf=1 + seed)
    batched = ExactForestClassifier(**params).fit(X, y)
    single = ExactForestClassifier(**params).fit(X, y)
    rng = np.random.default_rng(seed)
    victims = _outside_pool(batched, rng.permutation(len(y)).tolist())[:200]
    gone: list = []
    for size in (1, 7, 40, 150):
        chunk = [v for v in victims if v not in gone][:size]
        assert batched.forget(chunk).instances_hit == ()
        for v in chunk:
            single.forget([v])
        gone += chunk
        if size == 7:  # a one-row prediction between batches rebuilds some stale nodes
            batched.predict_proba(X[:1])
    _same(batched, single, X)
    _same(batched, _refit(batched, X, y, set(range(len(y))) - set(gone)), X)


def test_batch_inserts_equal_a_refit_and_one_row_inserts():
    X, y = _data(n=1000)
    batched = ExactForestClassifier(**PARAMS).fit(X[:600], y[:600])
    single = ExactForestClassifier(**PARAMS).fit(X[:600], y[:600])
    for lo, hi in ((600, 610), (610, 760), (760, 1000)):
        ids = list(range(lo, hi))
        batched.insert(X[lo:hi], y[lo:hi], ids)
        for i in ids:
            single.insert(X[i : i + 1], y[i : i + 1], [i])
    _same(batched, single, X)
    _same(batched, _refit(batched, X, y, range(1000)), X)


def test_a_batch_that_flips_the_root_equals_a_refit():
    X, y = _data(n=1200, k=2)
    model = ExactForestClassifier(**dict(PARAMS, n_estimators=3)).fit(X, y)
    forest = model.engine_.instance(0)
    root = forest.A.roots[0]
    f, th = forest.A.feat[root], forest.A.thr[root]
    side = {i: forest.A.codes[forest.rows.slots_of([i])[0], f] <= th for i in model.ids_}
    # each side of the root's split left with equal class counts: its gain is zero, so the
    # root must choose again — all in one batch
    victims = []
    for goes_left in (True, False):
        rows = _outside_pool(model, [i for i in model.ids_ if side[i] == goes_left])
        counts = np.bincount(y[rows], minlength=2)
        for c in (0, 1):
            victims += [i for i in rows if y[i] == c][: counts[c] - counts.min()]
    assert 0 < len(victims) < len(y) // 4
    model.forget(victims)
    assert forest.A.feat[forest.A.roots[0]] == forest_arrays.STALE  # chosen again
    _same(model, _refit(model, X, y, set(range(len(y))) - set(victims)), X)


def test_regression_batches_equal_a_refit():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(900, 5))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=900)
    model = ExactForestRegressor(n_estimators=4, max_features=3, min_bin_rows=60).fit(
        X[:700], y[:700]
    )
    model.insert(X[700:], y[700:], list(range(700, 900)))
    model.wait_for_rebuilds()  # an inserted row may join an instance's D°
    victims = _outside_pool(model, rng.permutation(900).tolist())[:180]
    assert model.forget(victims).instances_hit == ()
    refit = _refit(model, X, y, set(range(900)) - set(victims))
    assert np.array_equal(model.predict(X), refit.predict(X))
    assert model.structure_digest() == refit.structure_digest()


def test_the_threaded_plan_equals_the_serial_one(monkeypatch):
    X, y = _data(n=3000, k=4)
    params = dict(PARAMS, n_estimators=7, max_features=4)
    victims = None
    digests = []
    for workers in (0, 1, 3):
        monkeypatch.setattr(_parallel, "worker_count", lambda w=workers: w)
        monkeypatch.setattr(forest_core, "worker_count", lambda w=workers: w)
        model = ExactForestClassifier(**params).fit(X, y)
        if victims is None:
            victims = _outside_pool(model, np.random.default_rng(5).permutation(3000).tolist())
            victims = victims[: 2 * forest_core.PARALLEL_ROWS]
        model.forget(victims)
        digests.append(model.structure_digest())
    assert digests[0] == digests[1] == digests[2]
    refit = _refit(model, X, y, set(range(3000)) - set(victims))
    assert digests[0] == refit.structure_digest()


def test_arrays_that_fill_mid_batch_grow_and_stay_exact(monkeypatch):
    X, y = _data(n=1500)
    model = ExactForestClassifier(**dict(PARAMS, n_estimators=8)).fit(X, y)
    grown = []
    real = forest_core._resized
    monkeypatch.setattr(
        forest_core, "_resized", lambda *a, **kw: grown.append(kw) or real(*a, **kw)
    )
    victims = _outside_pool(model, np.random.default_rng(9).permutation(1500).tolist())[:300]
    model.forget(victims)
    assert any("perm" in kw for kw in grown)  # a fit leaves one tree's worth of room
    _same(model, _refit(model, X, y, set(range(1500)) - set(victims)), X)


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_a_fit_grown_on_threads_is_the_serial_fit(monkeypatch, workers):
    """Trees grown in chunks on several threads, then copied into one set of arrays, are the
    serial fit's trees: every tree's preorder, the digests and predictions, and they stay so
    through one-row forgets, a batch, inserts and a D° hit (a refit, threaded again)."""
    X, y = _data(n=1500, k=3)
    rng = np.random.default_rng(2)
    models = []
    for w in (0, workers):
        monkeypatch.setattr(forest_core, "worker_count", lambda w=w: w)
        model = ExactForestClassifier(**dict(PARAMS, n_estimators=6)).fit(X, y)
        models.append(model)
    serial, threaded = models
    for t in range(6):
        assert np.array_equal(serial.engine_.structure(t), threaded.engine_.structure(t))
    victims = _outside_pool(serial, rng.permutation(1500).tolist())
    for model in models:
        model.forget(victims[:3])
        model.forget(victims[3 : 3 + forest_core.PARALLEL_ROWS])
        model.insert(X[:4] + 0.5, y[:4], ["n0", "n1", "n2", "n3"])
        model.forget([model.pool_ids_[0]])
    assert serial.structure_digest() == threaded.structure_digest()
    assert np.array_equal(serial.predict_proba(X), threaded.predict_proba(X))


def _cut_to_what_they_hold(forest) -> None:
    """Node and perm arrays cut to their used length: the next change that needs a node or a
    perm entry finds them full (after it has walked part of a path)."""
    A = forest.A
    fields = A._asdict()
    for name in ("feat", "thr", "left", "right", "n", "counts", "slot", "choice", "lstart", "hash"):
        fields[name] = fields[name][: A.top[0]].copy()
    fields["perm"] = fields["perm"][: A.top[2]].copy()
    forest.A = type(A)(**fields)


@pytest.mark.slow
def test_one_row_changes_that_find_the_arrays_full_undo_grow_and_stay_exact(monkeypatch):
    """A one-row forget or insert takes the change into each kept node on its way down; when
    the node it must rebuild or append to finds no room, those nodes are put back, the arrays
    grow, and the tree is walked again — still a refit, bit for bit."""
    X, y = _data(n=1500)
    n = 1400
    model = ExactForestClassifier(**dict(PARAMS, n_estimators=8)).fit(X[:n], y[:n], range(n))
    grown = []
    real = forest_core._resized
    monkeypatch.setattr(
        forest_core, "_resized", lambda *a, **kw: grown.append(kw) or real(*a, **kw)
    )
    victims = _outside_pool(model, np.random.default_rng(4).permutation(n).tolist())[:25]
    for v in victims:
        _cut_to_what_they_hold(model.engine_.instance(0))
        model.forget([v])
    for i in range(n, n + 25):
        _cut_to_what_they_hold(model.engine_.instance(0))
        model.insert(X[i : i + 1], y[i : i + 1], [i])
    assert sum("nodes" in kw for kw in grown) >= 25
    _same(model, _refit(model, X, y, (set(range(n)) - set(victims)) | set(range(n, n + 25))), X)
