"""A model fitted on a raw DataFrame in the durable store (issue 41).

The store keeps such a model's raw rows, one JSON array per row in the rows table (never in
the model entry), so a forget deletes a row's raw values with the row; on open the estimator
refits the table encoding from them. The contract is the store's: a reopened model is the
live one bit for bit, and both equal a fit on the rows that remain — through forgets that
move the encoding (a category's last row, a column's last missing value, the table's D°),
inserts that widen it, and a crafted raw row refused in one line.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import assert_same as _assert_same
from helpers import raw_table

from forgetting import QSSClassifier, QSSRegressor
from forgetting.store import DurableModel
from forgetting.store.errors import StoreCorrupt


def _refit(cls, df, y, ids):
    """A fit on the rows ``ids`` of ``df`` (labels ``y`` in df's row order)."""
    keep = sorted(ids)
    labels = pd.Series(list(y), index=df.index).loc[keep].to_numpy()
    return cls(rebuild="sync").fit(df.loc[keep], labels, ids=keep)


@pytest.mark.parametrize("cls", [QSSClassifier, QSSRegressor])
def test_a_raw_table_model_round_trips_through_the_store(db, cls):
    df, y_class, y_reg = raw_table()
    y = y_class if cls is QSSClassifier else y_reg
    probe = df.drop(index=[11])
    model = DurableModel.create(db, cls(rebuild="sync"), df, y, list(range(len(df))))
    assert model.feature_names == list(df.columns)
    buf = model.estimator.table_.buffer
    schema_rows = buf.get("ids")[buf.get("member")].tolist()
    ordinary = [i for i in range(20, 40) if i not in schema_rows][:3]
    for gone, moves in (
        (ordinary, False),  # the estimator's own path
        ([schema_rows[0]], True),  # a row of the table's D°: the encoding is refitted
        ([12], True),  # the last missing value of "visits"
        ([11], True),  # the last row of category "only-once"
    ):
        before = model.estimator.engine_
        model.forget(gone)
        assert (model.estimator.engine_ is not before) == moves
        _assert_same(model, _refit(cls, df, y, model.estimator.ids_), probe)
    model.insert(df.loc[[11]], y[[11]], ids=[5000])  # "only-once" again: the encoding widens
    model.insert(df.loc[[30]], y[[30]], ids=[5001])  # known categories: the fast path
    grown = pd.concat([df, df.loc[[11, 30]].set_axis([5000, 5001])])
    labels = np.concatenate([y, y[[11, 30]]])
    _assert_same(model, _refit(cls, grown, labels, model.estimator.ids_), probe)
    digest, served = model.state_digest(), model.predict(probe)
    assert model.verify()["ok"]
    model.close()
    with DurableModel.open(db) as reopened:
        assert reopened.state_digest() == digest
        assert np.array_equal(reopened.predict(probe), served)
        reopened.forget([5000])
        _assert_same(reopened, _refit(cls, grown, labels, reopened.estimator.ids_), probe)


def test_a_forgotten_rows_raw_values_leave_the_store(tmp_path):
    """The model entry keeps the table's names and kinds only; a row's raw values are in its
    row, and a forget (with the log purge) leaves none of them on disk."""
    df, y, _ = raw_table()
    df.loc[11, "plan"] = "secret-plan-4711"  # a category only row 11 has
    path = str(tmp_path / "model.db")
    model = DurableModel.create(path, QSSClassifier(rebuild="sync"), df, y, list(range(len(df))))
    assert b"secret-plan-4711" in _all_bytes(path)
    with sqlite3.connect(path) as con:
        (entry,) = con.execute("SELECT value FROM meta WHERE name = 'model'").fetchone()
    assert b"Oslo" not in bytes(entry) and b"basic" not in bytes(entry)
    model.forget([11])
    assert b"secret-plan-4711" not in _all_bytes(path)
    model.close()
    assert b"secret-plan-4711" not in _all_bytes(path)


@pytest.mark.parametrize(
    "payload,words",
    [
        (b"not json", "not JSON"),
        (b"[1.0, 2.0]", "array of 5 values"),
        (b'[NaN, 1.0, "Oslo", "basic", 0.0]', "holds NaN"),
        (b'["x", 1.0, "Oslo", "basic", 0.0]', "value 0 is not a finite number"),
        (b"[40.0, 1.0, 7, null, 0.0]", "value 2 is not text"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b'{"age": 1}', "array of 5 values"),
    ],
)
def test_a_crafted_raw_row_is_refused_in_one_line(tmp_path, payload, words):
    df, y, _ = raw_table(n=300)
    path = str(tmp_path / "model.db")
    DurableModel.create(path, QSSClassifier(rebuild="sync"), df, y).close()
    with sqlite3.connect(path) as con:
        con.execute("UPDATE rows SET features = ? WHERE seq = 3", (payload,))
    with pytest.raises(StoreCorrupt, match=f"table rows, row seq 3: .*{words}") as err:
        DurableModel.open(path)
    assert "\n" not in str(err.value)


def _all_bytes(db):
    return b"".join(Path(p).read_bytes() for p in (db, db + "-wal") if os.path.exists(p))


def test_the_service_serves_a_raw_table_model(tmp_path):
    """JSON rows with strings (categories) and null (missing values), by position or by
    name; a forget and an insert that widens the encoding over HTTP equal a refit; a value
    of the wrong kind is one 422 naming the column, and changes nothing."""
    from fastapi.testclient import TestClient

    from forgetting.service import ServiceConfig, create_app

    df, y, _ = raw_table()
    token = "Sa72f-zcyWa7LXgKHf1FD8QmR98d0156"
    auth = {"Authorization": f"Bearer {token}"}
    path = str(tmp_path / "model.db")
    model = DurableModel.create(path, QSSClassifier(rebuild="sync"), df, y, list(range(len(df))))
    client = TestClient(create_app(model, ServiceConfig(tokens=(token,))))
    probe = df.loc[[0, 1, 2, 3]].astype(object).where(df.loc[[0, 1, 2, 3]].notna(), None)
    as_rows = [
        {c: (float(v) if isinstance(v, bool | np.bool_) else v) for c, v in r.items()}
        for r in probe.to_dict("records")
    ]
    as_x = [[r[c] for c in df.columns] for r in as_rows]
    by_x = client.post("/predict", json={"X": as_x}, headers=auth)
    by_name = client.post("/predict", json={"rows": as_rows}, headers=auth)
    assert by_x.status_code == by_name.status_code == 200, by_x.text
    expected = model.predict_proba(df.loc[[0, 1, 2, 3]]).tolist()
    assert by_x.json()["probabilities"] == by_name.json()["probabilities"] == expected
    assert client.post("/forget", json={"ids": [11, 40]}, headers=auth).status_code == 200
    new = [*as_x[0][:3], "brand-new-plan", 1.0]  # a category no row has: the encoding widens
    r = client.post("/insert", json={"X": [new], "y": [y[0]], "ids": [9000]}, headers=auth)
    assert r.status_code == 200, r.text
    grown = pd.concat([df, df.loc[[0]].assign(plan="brand-new-plan", member=True).set_axis([9000])])
    labels = np.concatenate([y, y[[0]]])
    _assert_same(model, _refit(QSSClassifier, grown, labels, model.estimator.ids_), probe)
    before = model.state_digest()
    for bad, words in (
        ([as_x[0][0], 1.0, 7.0, "basic", 0.0], "column 'city'"),
        (["forty", *as_x[0][1:]], "column 'age'"),
    ):
        r = client.post("/insert", json={"X": [bad], "y": [y[0]], "ids": [9001]}, headers=auth)
        assert r.status_code == 422 and words in r.json()["detail"], r.text
        r = client.post("/predict", json={"X": [bad]}, headers=auth)
        assert r.status_code == 422 and words in r.json()["detail"], r.text
    assert model.state_digest() == before
    model.close()
