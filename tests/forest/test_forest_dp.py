"""ExactForestClassifier(mode="dp"): keyed randomized response on the labels.

What must hold (docs/privacy.md §12): the trees see only ỹ = RR(key, id, y); forget and
insert equal a DP fit on the rows held, bit for bit (predict_proba and digests), through a D°
hit, a class that loses its last row, files and pickles; the draws are keyed, deterministic
and flip at the promised rate; a forgotten id is refused on insert; bad settings get one
clear error."""

from __future__ import annotations

import math
import pickle
from dataclasses import replace

import numpy as np
import pytest
from sklearn.base import clone

from forgetting import ExactForestClassifier, ExactForestRegressor
from forgetting.privacy.randomized_response import (
    RRLedger,
    debias,
    dp_min_leaf,
    flip_probability,
    keep_probability,
    keyed_uniforms,
    randomize,
    recover,
)
from forgetting.schema.membership import id_bytes
from forgetting.snapshots import SnapshotError

KEY = b"forest-dp-test-key-0123456789"
PARAMS = dict(n_estimators=6, n_instances=2, min_bin_rows=40, mode="dp", epsilon=2.0)


def table(n=500, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.6, 0.6])  # 3 classes
    X[::11, 2] = np.nan
    return X, y


def dp_forest(**extra):
    return ExactForestClassifier(**{**PARAMS, **extra}, secret_key=KEY)


def assert_same(model, X, y, ids, probe):
    """``model`` equals a DP fit on (X, y, ids): predictions and both digests."""
    model.wait_for_rebuilds()
    refit = dp_forest().fit(X, y, ids)
    assert np.array_equal(model.predict_proba(probe), refit.predict_proba(probe))
    assert model.state_digest() == refit.state_digest()
    assert model.structure_digest() == refit.structure_digest()
    assert np.array_equal(model.classes_, refit.classes_)


def test_forget_insert_file_and_pool_hit_equal_a_dp_refit(tmp_path):
    X, y = table()
    ids = [f"r{i}" for i in range(len(y))]
    model = dp_forest().fit(X[:450], y[:450], ids[:450])
    held = list(range(450))
    model.forget(["r3", "r17", "r200"])
    held = [i for i in held if i not in (3, 17, 200)]
    assert_same(model, X[held], y[held], [ids[i] for i in held], X)
    model.insert(X[450:480], y[450:480], ids[450:480])
    held += list(range(450, 480))
    assert_same(model, X[held], y[held], [ids[i] for i in held], X)
    pool = model.pool_ids_[:2]  # rows of an instance's D°: their forget rebuilds it
    receipt = model.forget(pool)
    assert receipt.instances_hit
    held = [i for i in held if ids[i] not in pool]
    assert_same(model, X[held], y[held], [ids[i] for i in held], X)
    path = tmp_path / "dp.fgt"
    model.save(path)
    loaded = ExactForestClassifier.load(path, secret_key=KEY)
    assert np.array_equal(loaded.predict_proba(X), model.predict_proba(X))
    assert loaded.privacy_ == model.privacy_
    loaded.forget(["r40"])
    held = [i for i in held if i != 40]
    assert_same(loaded, X[held], y[held], [ids[i] for i in held], X)
    with pytest.raises(ValueError, match="forgotten earlier"):
        loaded.insert(X[[3]], y[[3]], ["r3"])  # forgotten before the file was written


def test_a_class_losing_its_last_row_equals_a_dp_refit_and_counts_a_class_list():
    X, y = table(seed=1)
    ids = list(range(len(y)))
    model = dp_forest().fit(X, y, ids)
    gone = [i for i in ids if y[i] == 2]
    # the trees hold ỹ: rows of another true class may carry ỹ = 2, and rows of class 2
    # carry other ỹ; the true labels decide when the class leaves
    model.forget(gone[:-1])
    assert model.classes_.tolist() == [0, 1, 2]
    model.forget(gone[-1:])
    held = [i for i in ids if y[i] != 2]
    assert_same(model, X[held], y[held], held, X)
    report = model.privacy_
    assert (report.n_class_lists, report.composed_epsilon) == (2, 4.0)
    with pytest.raises(ValueError, match="forgotten earlier"):
        model.insert(X[gone[:1]], [0], gone[:1])


def test_the_trees_see_randomized_labels_and_predict_proba_is_debiased():
    X, y = table(seed=2)
    ids = list(range(len(y)))
    model = dp_forest(epsilon=1.0).fit(X, y, ids)
    stored = model.engine_.snapshot().rows.targets
    expected = randomize(y, model._key(), [id_bytes(i) for i in ids], 1.0, 3)
    assert np.array_equal(stored, expected)
    assert 0 < np.mean(stored != y) < 0.7
    raw = model.engine_.predict_proba(X[:50])
    proba = model.predict_proba(X[:50])
    assert np.allclose(proba.sum(axis=1), 1.0) and (proba >= 0).all()
    assert np.array_equal(np.argmax(proba, axis=1), np.argmax(raw, axis=1))
    assert np.array_equal(proba, debias(raw, 1.0, 3))


def test_draws_are_keyed_deterministic_and_flip_at_the_promised_rate():
    raw = [id_bytes(i) for i in range(20_000)]
    y = np.arange(20_000) % 4
    a = randomize(y, KEY, raw, 1.0, 4)
    assert np.array_equal(a, randomize(y, KEY, raw, 1.0, 4))
    b = randomize(y, KEY[::-1], raw, 1.0, 4)
    assert np.mean(a != b) > 0.3
    p, q = keep_probability(1.0, 4), flip_probability(1.0, 4)
    assert math.isclose(p, math.e / (math.e + 3)) and math.isclose(p + 3 * q, 1.0)
    assert abs(np.mean(a == y) - p) < 0.02
    for offset in (1, 2, 3):  # each other class equally often
        assert abs(np.mean(a == (y + offset) % 4) - q) < 0.02
    assert np.array_equal(recover(a, KEY, raw, 1.0, 4), y)
    u = keyed_uniforms(KEY, raw, 4)
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    assert not np.array_equal(u, keyed_uniforms(KEY, raw, 3))  # a class count draws anew


def test_a_forgotten_id_is_refused_on_every_insert_path():
    X, y = table(seed=3)
    model = dp_forest().fit(X[:400], y[:400])
    model.forget([5])
    model.wait_for_rebuilds()  # a D° hit rebuilds in the background
    before = model.state_digest()
    with pytest.raises(ValueError, match="forgotten earlier"):
        model.insert(X[[5]], y[[5]], [5])
    with pytest.raises(ValueError, match="forgotten earlier"):
        model.partial_fit(X[[5]], y[[5]], [5])
    held = [i for i in range(400) if i != 5]
    with pytest.raises(ValueError, match="forgotten earlier"):
        model.refit(X[held + [5]], y[held + [5]], held + [5], inserted=[5])
    assert model.state_digest() == before
    model.insert(X[[5]], y[[5]], ["new-5"])  # a new id is a new row


def test_refit_continues_the_ledger():
    X, y = table(seed=4)
    model = dp_forest().fit(X[:300], y[:300])
    held = list(range(1, 300))
    model.refit(X[held], y[held], held, forgotten=[0])
    assert model.privacy_.n_forgotten == 1
    with pytest.raises(ValueError, match="forgotten earlier"):
        model.insert(X[[0]], y[[0]], [0])
    model.set_params(mode="exact", epsilon=None)
    with pytest.raises(ValueError, match="mode changed"):
        model.refit(X[held[1:]], y[held[1:]], held[1:], forgotten=[1])
    model.set_params(mode="dp", epsilon=3.0)
    with pytest.raises(ValueError, match="epsilon changed"):
        model.refit(X[held[1:]], y[held[1:]], held[1:], forgotten=[1])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (dict(mode="dp", epsilon=1.0), "needs secret_key"),
        (dict(mode="dp", epsilon=1.0, secret_key="short"), "at least 16"),
        (dict(mode="dp", secret_key=KEY), "needs epsilon"),
        (dict(mode="dp", epsilon=math.inf, secret_key=KEY), "epsilon"),
        (dict(epsilon=1.0), "mode='dp' only"),
    ],
)
def test_bad_settings_are_refused_in_one_line(params, message):
    X, y = table(n=100)
    with pytest.raises(ValueError, match=message):
        ExactForestClassifier(**params).fit(X, y)


def test_regression_dp_is_refused():
    X, y = table(n=100)
    with pytest.raises(ValueError, match="ExactForestClassifier only"):
        ExactForestRegressor(mode="dp", epsilon=1.0, secret_key=KEY).fit(X, y.astype(float))


def test_privacy_report_and_the_leaf_floor():
    X, y = table(seed=5)
    model = dp_forest(epsilon=1.0).fit(X, y)
    report = model.privacy_
    assert report.delta == 0.0 and report.epsilon == report.composed_epsilon == 1.0
    assert report.keep_probability == keep_probability(1.0, 3)
    assert report.min_samples_leaf == dp_min_leaf(1.0, 3) > 1
    assert report.n_classes == 3 and report.n_class_lists == 1
    model.forget([0, 1, 2])
    model.insert(X[:2], y[:2], ["a", "b"])
    assert model.privacy_.composed_epsilon == 1.0  # releases do not compose
    assert dp_min_leaf(8.0, 2) == 1
    with pytest.raises(AttributeError, match="mode='dp' only"):
        ExactForestClassifier(n_estimators=3).fit(X, y).privacy_  # noqa: B018


def test_clone_pickle_and_a_tampered_ledger():
    X, y = table(seed=6)
    model = dp_forest().fit(X, y)
    copy = pickle.loads(pickle.dumps(model))
    assert np.array_equal(copy.predict_proba(X), model.predict_proba(X))
    copy.forget([1])
    with pytest.raises(ValueError, match="forgotten earlier"):
        copy.insert(X[[1]], y[[1]], [1])
    fresh = clone(model)
    assert fresh.get_params()["mode"] == "dp" and not hasattr(fresh, "engine_")
    snapshot = model.snapshot()
    ledger = snapshot.engine.privacy
    with pytest.raises(ValueError, match="not a randomized-response"):
        RRLedger.from_dict({**ledger, "mechanism": "gaussian"})
    other = replace(snapshot, engine=replace(snapshot.engine, privacy={**ledger, "epsilon": 3.0}))
    with pytest.raises(SnapshotError, match="epsilon"):
        ExactForestClassifier.from_snapshot(other, secret_key=KEY)
    bare = replace(snapshot, engine=replace(snapshot.engine, privacy=None))
    with pytest.raises(SnapshotError, match="ledger"):
        ExactForestClassifier.from_snapshot(bare, secret_key=KEY)
