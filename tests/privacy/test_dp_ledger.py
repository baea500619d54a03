"""mode="dp": the privacy ledger is the model's history, and no refit resets it (issue 73).

The ledger (distinct releases, their composed ε, keyed tags of forgotten ids) used to live in
the engine and start anew at every refit: forgetting a class's last rows, a raw table's
category's last row, or a pipeline forget that moved a step (a category's last row) made a
new engine with an empty ledger. The release count dropped (composed ε under-reported) and a
forgotten id could be inserted again — through the public pipeline API alone, forget →
(a refit) → insert the forgotten id with each guessed label reproduced the earlier release bit
for bit exactly when the guess was right. These tests replay that attack and check the
ledger across every kind of refit, save/load, a store reopen and the service.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import classification_data
from sklearn.compose import ColumnTransformer
from sklearn.preprocessing import OneHotEncoder

from forgetting import QSSClassifier
from forgetting.pipeline import make_pipeline

pd = pytest.importorskip("pandas")

KEY = b"a secret of at least sixteen bytes"
DP = dict(mode="dp", epsilon=2.0, delta=1e-5, secret_key=KEY, rho=0.2, rebuild="sync")
FORGOTTEN = "forgotten earlier"
VICTIM = 7  # the only row of its category ("Quito")


def table(n: int = 160, seed: int = 0):
    """Two numbers and a city; the victim is the only row of its city, so forgetting it
    moves the one-hot encoding (the pipeline, or a raw-table model, refits)."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    city = rng.choice(["Oslo", "Paris", "Rome", "Lima"], size=n).astype(object)
    city[VICTIM] = "Quito"
    y = (x1 + (city == "Rome") + 0.3 * rng.normal(size=n) > 0.4).astype(int)
    X = pd.DataFrame({"x1": x1, "x2": x2, "city": pd.Categorical(city)})
    return X, y, np.arange(n)


def pipeline():
    steps = ColumnTransformer(
        [("cat", OneHotEncoder(handle_unknown="ignore"), ["city"])], remainder="passthrough"
    )
    return make_pipeline(steps, QSSClassifier(**DP, random_state=0), min_schema_rows=20)


def rare_class_data():
    """240 rows of three classes, class 2 held by two rows only (its last rows)."""
    X, y = classification_data()
    rare = np.flatnonzero(y == 2)
    keep = np.ones(len(y), dtype=bool)
    keep[rare[2:]] = False
    X, y = X[keep], y[keep]
    ids = np.arange(len(y))
    return X, y, ids, ids[y == 2].tolist()


def plain_row(model, ids, rare):
    """A row of a common class whose forget hits no instance's D° (a fast forget)."""
    held = [i for r in range(model.n_instances) for i in _schema_ids(model, r)]
    return next(int(i) for i in ids if i not in rare and i not in held)


def _schema_ids(model, r):
    rows = model.engine_.rows
    return [rows.ids[i] for i in np.flatnonzero(rows.members(r))]


# -- the attack ----------------------------------------------------------------------------------
def test_the_replay_through_the_pipeline_recovers_no_label():
    """Forget the victim (the pipeline refits: its city's last row), then insert it back with
    each guessed label and compare the release with the one made while it was held. Before,
    every insert succeeded and the right guess reproduced the earlier release bit for bit."""
    X, y, ids = table()
    model = pipeline().fit(X, y, ids)
    probe = X.loc[ids != VICTIM]
    before = model.predict_proba(probe)
    assert model.forget([VICTIM]).refitted
    model.predict_proba(probe)
    refused, recovered = [], []
    for guess in model.classes_.tolist():
        try:
            model.insert(X.loc[[VICTIM]], np.array([guess]), [VICTIM])
        except ValueError as err:
            assert FORGOTTEN in str(err) and "\n" not in str(err)
            refused.append(guess)
            continue
        if np.array_equal(model.predict_proba(probe), before):
            recovered.append(guess)
        model.forget([VICTIM])
    assert recovered == []
    assert refused == model.classes_.tolist()


def test_a_pipeline_refit_keeps_the_release_count_and_every_forgotten_id():
    X, y, ids = table()
    model = pipeline().fit(X, y, ids)
    est = model.steps[-1][1]
    probe = X.loc[ids != VICTIM]
    model.predict_proba(probe)
    members = set(model.ids_) - {
        i for i, m in zip(model.ids_, model._members, strict=True) if not m
    }
    plain = next(i for i in ids.tolist() if i != VICTIM and i not in members)
    assert not model.forget([plain]).refitted
    model.predict_proba(probe)
    spent = est.privacy_
    assert model.forget([VICTIM]).refitted  # a new engine under the pipeline
    assert est.privacy_.n_releases == spent.n_releases
    model.predict_proba(probe)
    after = est.privacy_
    assert after.n_releases == spent.n_releases + est.n_instances
    assert after.composed_epsilon > spent.composed_epsilon
    for gone in (plain, VICTIM):
        with pytest.raises(ValueError, match=FORGOTTEN):
            model.insert(X.loc[[gone]], y[[gone]], [gone])
    assert model.ids_ == [i for i in model.ids_ if i not in (plain, VICTIM)]


# -- the estimator's own refits ------------------------------------------------------------------
def test_a_class_vanishing_forget_keeps_the_ledger():
    X, y, ids, rare = rare_class_data()
    model = QSSClassifier(**DP, random_state=0).fit(X, y, ids)
    model.predict(X)
    plain = plain_row(model, ids, rare)
    assert not model.forget([plain]).rebuild_started
    model.predict(X)
    spent = model.privacy_
    assert spent.n_releases == 2 * model.n_instances
    receipt = model.forget(rare)  # class 2's last rows: a refit on the two classes left
    assert model.classes_.tolist() == [0, 1] and receipt.instances_hit == (0, 1, 2)
    assert model.privacy_.n_releases == spent.n_releases
    model.predict(X)
    assert model.privacy_.n_releases == spent.n_releases + model.n_instances
    assert model.privacy_.composed_epsilon > spent.composed_epsilon
    for gone in (plain, rare[0]):
        with pytest.raises(ValueError, match=FORGOTTEN):
            model.insert(X[[gone]], [0], [gone])
        with pytest.raises(ValueError, match=FORGOTTEN):
            model.partial_fit(X[[gone]], [0], [gone])
    fresh = ids.max() + 1  # a new id is welcome
    model.insert(X[[plain]], [int(y[plain])], [fresh])


def test_a_raw_table_model_refit_keeps_the_ledger():
    X, y, ids = table()
    model = QSSClassifier(**DP, random_state=0).fit(X, y, ids)
    model.predict(X)
    spent = model.privacy_.n_releases
    model.forget([VICTIM])  # the city's last row: the table encoding moves, the engine refits
    assert model.privacy_.n_releases == spent
    model.predict(X.loc[ids != VICTIM])
    assert model.privacy_.n_releases == spent + model.n_instances
    for guess in (0, 1):  # its city comes back with it: an insert that refits refuses too
        with pytest.raises(ValueError, match=FORGOTTEN):
            model.insert(X.loc[[VICTIM]], [guess], [VICTIM])


def test_a_user_fit_starts_a_new_model_and_a_new_ledger():
    """``fit`` is the curator's act: a new model on the rows given, with a ledger of its own
    (docs/privacy.md says what that leaves to the curator)."""
    X, y, ids, rare = rare_class_data()
    model = QSSClassifier(**DP, random_state=0).fit(X, y, ids)
    model.predict(X)
    model.forget([plain_row(model, ids, rare)])
    model.fit(X, y, ids)
    assert model.privacy_.n_releases == 0


# -- save/load, a store reopen, the service ------------------------------------------------------
def test_the_ledger_survives_a_refit_then_save_and_load(tmp_path):
    X, y, ids, rare = rare_class_data()
    model = QSSClassifier(**DP, random_state=0).fit(X, y, ids)
    model.predict(X)
    plain = plain_row(model, ids, rare)
    model.forget([plain])
    model.predict(X)
    model.forget(rare)
    model.predict(X)
    spent = model.privacy_
    model.save(tmp_path / "model.bin")
    loaded = QSSClassifier.load(tmp_path / "model.bin", secret_key=KEY)
    assert loaded.privacy_.n_releases == spent.n_releases == 3 * model.n_instances
    assert loaded.privacy_.composed_epsilon == spent.composed_epsilon
    for gone in (plain, rare[1]):
        with pytest.raises(ValueError, match=FORGOTTEN):
            loaded.insert(X[[gone]], [1], [gone])


def test_the_ledger_survives_a_refit_in_a_store_and_its_reopening(tmp_path):
    from forgetting.store import DurableModel

    X, y, ids, rare = rare_class_data()
    path = str(tmp_path / "dp.db")
    model = DurableModel.create(path, QSSClassifier(**DP, random_state=0), X, y, ids.tolist())
    model.predict(X)
    plain = plain_row(model.estimator, ids, rare)
    model.forget([plain])
    model.predict(X)
    model.forget(rare)  # the refit goes through the store (its rows and model rewritten)
    model.predict(X)
    spent = model.estimator.privacy_.n_releases
    assert spent == 3 * model.estimator.n_instances
    model.close()
    with DurableModel.open(path, secret_key=KEY) as reopened:
        assert reopened.estimator.privacy_.n_releases == spent
        for gone in (plain, rare[0]):
            with pytest.raises(ValueError, match=FORGOTTEN):
                reopened.insert(X[[gone]], [1], [gone])
        assert reopened.verify()["ok"]


def test_the_service_refuses_a_forgotten_id_after_a_refit(tmp_path):
    from fastapi.testclient import TestClient

    from forgetting.service import ServiceConfig, create_app
    from forgetting.store import DurableModel

    token = "Sa72f-zcyWa7LXgKHf1FD8QmR98d0156"
    X, y, ids, rare = rare_class_data()
    path = str(tmp_path / "dp.db")
    with DurableModel.create(
        path, QSSClassifier(**DP, random_state=0), X, y, ids.tolist()
    ) as model:
        client = TestClient(create_app(model, ServiceConfig(tokens=(token,))))
        auth = {"Authorization": f"Bearer {token}"}
        assert client.post("/forget", json={"ids": rare}, headers=auth).status_code == 200
        body = {"X": X[[rare[0]]].tolist(), "y": [1], "ids": [rare[0]]}
        reply = client.post("/insert", json=body, headers=auth)
        assert reply.status_code == 422 and FORGOTTEN in reply.text
