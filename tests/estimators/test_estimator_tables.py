"""Raw DataFrames straight into QSSClassifier / QSSRegressor (issue 41, item 3).

A table with numeric, boolean, categorical and string columns and missing values is encoded
by exact steps (forgetting.preprocessing.frames); the contract stays the estimators': a forget
equals a refit on the rows that remain, bit for bit — predictions and ``state_digest()`` —
including a category's last row, a column's last missing value and rows of the schema D°.
Also: inserts, files and pickles, bad input refused by name with nothing changed, a purely
numeric DataFrame unchanged, and two hardening items of issue 40 (id listings, labels).
"""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from helpers import assert_same, raw_table

from forgetting import QSSClassifier, QSSRegressor
from forgetting.persistence import ModelFileError
from forgetting.snapshots import SnapshotError


def refit(cls, df, y, ids, **params):
    keep = sorted(ids)
    return cls(rebuild="sync", **params).fit(df.loc[keep], y[keep], ids=keep)


@pytest.mark.parametrize("cls", [QSSClassifier, QSSRegressor])
def test_forget_equals_refit_on_a_raw_table(cls):
    df, y_class, y_reg = raw_table()
    y = y_class if cls is QSSClassifier else y_reg
    model = cls(rebuild="sync").fit(df, y, ids=range(len(df)))
    assert model.n_features_in_ == 5
    assert model.feature_names_in_.tolist() == list(df.columns)
    probe = df.drop(index=[11])
    buf = model.table_.buffer
    schema_rows = buf.get("ids")[buf.get("member")].tolist()
    ordinary = [i for i in range(20, 40) if i not in schema_rows][:3]
    assert 11 not in schema_rows and 12 not in schema_rows  # they refit for their own reason
    steps = [
        (ordinary, False),  # rows outside the table's D°: the estimator's own path
        ([schema_rows[0]], True),  # a row of the table's D°: scaler and imputer move
        ([12], True),  # the last missing value of "visits": its indicator goes
        ([11], True),  # the last row of category "only-once"
    ]
    hit_schema = False
    for gone, refits in steps:
        before = model.engine_
        receipt = model.forget(gone)
        assert (model.engine_ is not before) == refits
        hit_schema |= bool(receipt.instances_hit)
        assert receipt.state_digest == model.state_digest()
        assert_same(model, refit(cls, df, y, model.ids_), probe)
    rng = np.random.default_rng(1)
    batch = rng.choice(model.ids_, 40, replace=False).tolist()
    hit_schema |= bool(model.forget(batch).instances_hit)
    assert hit_schema, "no forget hit an instance's D°"
    assert_same(model, refit(cls, df, y, model.ids_), probe)


def test_insert_with_a_new_category_equals_a_fit_on_all_rows():
    df, y, _ = raw_table()
    first = [i for i in range(len(df)) if i != 11]
    model = QSSClassifier(rebuild="sync").fit(df.loc[first], y[first], ids=first)
    with pytest.raises(ValueError, match=r"only-once'\] in column 'plan'"):
        model.predict(df.loc[[11]])
    engine = model.engine_
    model.insert(df.loc[[11]], y[[11]], ids=[11])
    assert model.engine_ is not engine  # the encoding widened: refitted
    engine = model.engine_
    model.insert(df.loc[[600 - 1]].assign(plan="pro"), ["no"], ids=[1000])
    assert model.engine_ is engine  # known categories: the fast path
    full = pd.concat([df, df.loc[[599]].assign(plan="pro").set_axis([1000])])
    labels = np.concatenate([y, ["no"]])
    ref = QSSClassifier(rebuild="sync").fit(full, labels, ids=full.index.tolist())
    assert_same(model, ref, df)


def test_a_table_model_round_trips_through_a_file_and_a_pickle(tmp_path):
    df, y, _ = raw_table()
    model = QSSClassifier(rebuild="sync").fit(df, y, ids=[f"u{i}" for i in range(len(df))])
    model.forget(["u3", "u11"])
    path = tmp_path / "table.qss"
    model.save(path)
    for other in (QSSClassifier.load(path), pickle.loads(pickle.dumps(model))):
        assert_same(other, model, df.drop(index=[11]))
        other.forget(["u12"])  # the file's model keeps forgetting exactly
        ids = [i for i in other.ids_]
        keep = sorted(int(i[1:]) for i in ids)
        ref = QSSClassifier(rebuild="sync").fit(df.loc[keep], y[keep], ids=[f"u{i}" for i in keep])
        assert_same(other, ref, df.drop(index=[11]))


def test_a_tampered_table_in_a_snapshot_is_refused():
    df, y, _ = raw_table(200)
    model = QSSClassifier(rebuild="sync").fit(df, y)
    snapshot = model.snapshot()
    snapshot.fitted["table_"]["columns"][0][0] += 1.0
    with pytest.raises(SnapshotError, match="encoding of the stored table"):
        QSSClassifier.from_snapshot(snapshot)


def test_a_tampered_model_file_is_refused(tmp_path):
    df, y, _ = raw_table(200)
    model = QSSClassifier(rebuild="sync").fit(df, y)
    snapshot = model.snapshot()
    snapshot.fitted["table_"]["kinds"][0] = "text"
    with pytest.raises(SnapshotError, match="does not hold text"):
        QSSClassifier.from_snapshot(snapshot)
    snapshot = model.snapshot()
    snapshot.fitted["table_"]["columns"][0][3] = np.inf
    with pytest.raises(SnapshotError, match="not finite"):
        QSSClassifier.from_snapshot(snapshot)
    path = tmp_path / "m.qss"
    model.save(path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFileError):
        QSSClassifier.load(path)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.drop(columns="age"), "lacks the fitted columns \\['age'\\]"),
        (lambda d: d.assign(extra=1.0), "not seen at fit: \\['extra'\\]"),
        (lambda d: d[list(d.columns[::-1])], "another order.*'member'"),
        (lambda d: d.assign(plan=1.5), "column 'plan' holds numbers but was fitted on text"),
        (lambda d: d.assign(age="old"), "column 'age' holds text but was fitted on numbers"),
        (lambda d: d.iloc[:0], "no rows"),
        (lambda d: d.to_numpy(), "fitted on a DataFrame"),
    ],
)
def test_bad_input_at_predict_and_insert_is_refused_by_name_and_changes_nothing(change, words):
    df, y, _ = raw_table(300)
    model = QSSClassifier(rebuild="sync").fit(df, y)
    digest = model.state_digest()
    bad = change(df.head(4))
    with pytest.raises(ValueError, match=words):
        model.predict(bad)
    with pytest.raises(ValueError, match=words):
        model.insert(bad, y[:4] if len(bad) else y[:0], ids=[900, 901, 902, 903][: len(bad)])
    assert model.state_digest() == digest
    assert model.n_rows_ == 300


def test_an_unseen_category_is_refused_at_predict_and_learned_by_insert():
    df, y, _ = raw_table(300)
    model = QSSClassifier(rebuild="sync").fit(df, y)
    digest = model.state_digest()
    lima = df.head(2).assign(city="Lima")
    with pytest.raises(ValueError, match="unknown categories \\['Lima'\\] in column 'city'"):
        model.predict(lima)
    assert model.state_digest() == digest
    model.insert(lima, y[:2], ids=[900, 901])
    assert model.predict(lima).shape == (2,)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.assign(age=np.nan), "column 'age' has no values"),
        (lambda d: d.assign(plan=None), "column 'plan' has no values"),
        (lambda d: d.assign(plan=["a", 1] * (len(d) // 2)), "column 'plan' mixes strings"),
        (lambda d: d.iloc[:0], "no rows"),
        (lambda d: d.iloc[:, :0], "no columns"),
    ],
)
def test_bad_tables_at_fit_are_refused_by_name_and_keep_the_previous_fit(change, words):
    df, y, _ = raw_table(300)
    model = QSSClassifier(rebuild="sync").fit(df, y)
    digest = model.state_digest()
    bad = change(df)
    with pytest.raises(ValueError, match=words):
        model.fit(bad, y[: len(bad)])
    assert model.state_digest() == digest
    assert model.feature_names_in_.tolist() == list(df.columns)


def test_label_mode_refuses_a_raw_table():
    df, y, _ = raw_table(200)
    with pytest.raises(ValueError, match="mode='exact'"):
        QSSClassifier(mode="label").fit(df, y)


def test_a_numeric_dataframe_without_missing_values_takes_the_plain_path():
    df, y, _ = raw_table(300)
    numeric = df[["age", "visits", "member"]].fillna(0.0)
    model = QSSClassifier(rebuild="sync").fit(numeric, y)
    plain = QSSClassifier(rebuild="sync").fit(numeric.to_numpy(dtype=float), y)
    assert "table_" not in model.__dict__
    assert model.state_digest() == plain.state_digest()
    # refitting a table model on numbers drops the table
    table_model = QSSClassifier(rebuild="sync").fit(df, y)
    table_model.fit(numeric, y)
    assert "table_" not in table_model.__dict__
    assert table_model.state_digest() == plain.state_digest()


def test_an_unknown_id_and_the_last_rows_of_a_class_change_nothing():
    df, y, _ = raw_table(300)
    model = QSSClassifier(rebuild="sync").fit(df, y)
    digest = model.state_digest()
    with pytest.raises(KeyError, match="unknown ids"):
        model.forget([5, 10_000])
    with pytest.raises(ValueError, match="2 classes"):
        model.forget(np.flatnonzero(y == "yes").tolist())
    assert model.state_digest() == digest
    assert model.n_rows_ == 300


# -- issue 40: id listings and labels ----------------------------------------------------------
def test_insert_lists_known_ids_with_the_shortening_helper():
    X = np.random.default_rng(0).normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    model = QSSClassifier(rebuild="sync").fit(X, y)
    with pytest.raises(ValueError, match=r"ids already present: \[0, 1, .*more\)\]"):
        model.insert(X[:30], y[:30], ids=range(30))
    long_id = "x" * 500
    model.insert(X[:1], y[:1], ids=[long_id])
    with pytest.raises(ValueError, match=r"characters\)\]; forget them first") as err:
        model.insert(X[:1], y[:1], ids=[long_id])
    assert len(str(err.value)) < 200


def test_labels_equal_in_value_to_a_class_are_that_class_as_in_scikit_learn():
    X = np.random.default_rng(0).normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    digests = []
    for label in (1, 1.0, True, np.int8(1)):
        model = QSSClassifier(rebuild="sync").fit(X, y)
        model.insert(X[:1], [label], ids=[1000])
        digests.append(model.state_digest())
    assert len(set(digests)) == 1
    model = QSSClassifier(rebuild="sync").fit(X, y)
    for label, words in ((1.5, "Unknown label type"), ("1", "unseen labels"), (2, "unseen")):
        with pytest.raises(ValueError, match=words):
            model.insert(X[:1], [label], ids=[1000])


def test_predictions_beside_forgets_that_move_the_encoding_never_mix_two_states():
    import threading

    df, y, _ = raw_table(300)
    model = QSSClassifier(rebuild="sync").fit(df, y)
    probe = df.drop(index=[11]).head(20)
    errors: list[BaseException] = []
    done = threading.Event()

    def predict_loop():
        while not done.is_set():
            try:
                model.predict_proba(probe)
            except BaseException as err:  # noqa: BLE001 - collected for the assertion
                errors.append(err)
                return

    worker = threading.Thread(target=predict_loop)
    worker.start()
    try:
        model.forget([11])  # a category's last row: the encoding narrows, the engine refits
        model.forget([12])  # the last missing value of "visits": its indicator goes
    finally:
        done.set()
        worker.join()
    assert not errors
