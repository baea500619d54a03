"""DurableModel: round trips through the store, no residue on disk, crash safety."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers import (
    FAST,
    WRITES,
    HeldCommits,
    classification_data,
    outside_all_schemas,
    postgres_dsn,
    regression_data,
    schema_ids,
    user_ids,
    wait_until,
)
from sklearn.linear_model import LogisticRegression

from forgetting import QSSClassifier, QSSRegressor
from forgetting.receipts import Receipt
from forgetting.store import DurableModel
from forgetting.store.errors import StoreError, StoreKindError

BG = {**FAST, "rebuild": "background"}
FLAT = dict(rho=0.25, n_instances=3, rebuild="background", random_state=0)


@pytest.fixture
def sqlite_db(tmp_path):
    return str(tmp_path / "model.db")


@pytest.mark.parametrize(
    "cls,data,params",
    [
        (QSSClassifier, classification_data, BG),
        (QSSClassifier, classification_data, {**FAST, "mode": "label"}),
        (QSSRegressor, regression_data, BG),
        (QSSClassifier, classification_data, {**FLAT, "partition": "hyperplanes"}),
        (QSSRegressor, regression_data, {**FLAT, "partition": "trees"}),
    ],
)
def test_reopen_is_bitwise_and_equals_refit_on_stored_rows(db, cls, data, params):
    X, y = data()
    ids = user_ids(len(y))
    model = DurableModel.create(db, cls(**params), X, y, ids)
    victims = ids[:5] + schema_ids(model.estimator, 0)[:1]
    model.forget(sorted(set(victims)))
    if params.get("mode") != "label":
        model.insert(X[:4], y[:4], ["new-a", "new-b", "new-c", "new-d"])
    model.wait_for_rebuilds()
    digest = model.state_digest()
    proba = model.predict(X)
    model.close()
    reopened = DurableModel.open(db)
    reopened.wait_for_rebuilds()
    assert reopened.state_digest() == digest
    assert np.array_equal(reopened.predict(X), proba)
    audit = reopened.verify()
    assert audit["ok"], audit
    reopened.close()


def test_forget_is_idempotent_and_unknown_ids_change_nothing(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**FAST), X, y, ids)
    first = model.forget([ids[3]])
    again = model.forget([ids[3]])
    assert again["already_forgotten"] and again["id_hashes"] == first["id_hashes"]
    digest = model.state_digest()
    with pytest.raises(KeyError):
        model.forget(["never-seen"])
    with pytest.raises(KeyError):
        model.forget([ids[4], "never-seen"])
    many = [f"never-seen-{i}" for i in range(12)]
    with pytest.raises(KeyError) as err:
        model.forget([ids[4], *many])
    listed = ", ".join(repr(v) for v in many[:10])
    assert err.value.args[0] == (
        f"unknown ids (never inserted, or with no label left): [{listed}, ... (2 more)]"
    )
    assert model.state_digest() == digest
    assert model.receipt(first["id_hashes"][0])["operation"] == "forget"
    model.close()


def _store_of_distinct_rows(db: str, params: dict, seed: int):
    """A store of rows whose bytes are unique (jittered features), to search the files for:
    (model, ids, the engine's rows)."""
    X, y = classification_data(d=10)
    X = X + np.random.default_rng(seed).normal(scale=1e-3, size=X.shape)
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**params), X, y, ids)
    return model, ids, model.estimator.engine_.rows


def test_no_residue_in_database_or_wal(sqlite_db):
    db = sqlite_db
    model, ids, rows = _store_of_distinct_rows(db, FAST, 0)
    victim = [
        i for i in ids if i not in set().union(*[schema_ids(model.estimator, r) for r in range(3)])
    ][0]
    p = rows.position[victim]
    secrets = [
        victim.encode(),
        rows.X[p].tobytes(),
        *(rows.codes[r][p].tobytes() + rows.residuals[r][p].tobytes() for r in range(3)),
    ]
    d0_victim = schema_ids(model.estimator, 1)[0]
    d0_features = rows.X[rows.position[d0_victim]].tobytes()
    for s in secrets:
        assert s in _all_bytes(db), "the row should be on disk before it is forgotten"
    model.forget([victim, d0_victim])
    model.wait_for_rebuilds()
    blob = _all_bytes(db)
    for s in secrets + [d0_victim.encode(), d0_features]:
        assert s not in blob
    model.close()
    for s in secrets:
        assert s not in _all_bytes(db)


def _all_bytes(db):
    return b"".join(Path(p).read_bytes() for p in (db, db + "-wal") if os.path.exists(p))


def test_a_d0_hit_leaves_no_contribution_of_the_hit_instance_on_disk(sqlite_db, monkeypatch):
    """A D° hit clears the hit instance's contributions: they come from a g trained with the
    forgotten row. Emptying its table (store format v3) must erase their bytes as the old
    in-place NULLs did — freed pages zeroed (secure_delete), the log purged. The rebuilt
    instance is never written here, so its new rows cannot overwrite the freed pages."""
    from forgetting.store.persister import Persister

    monkeypatch.setattr(Persister, "persist_now", lambda self: None)
    db = sqlite_db
    model, ids, rows = _store_of_distinct_rows(db, BG, 1)
    victim = schema_ids(model.estimator, 1)[0]
    others = [i for i in ids if i != victim][:40]
    stored = [
        rows.codes[1][rows.position[i]].tobytes() + rows.residuals[1][rows.position[i]].tobytes()
        for i in others
    ]
    for blob in stored:
        assert blob in _all_bytes(db), "the contributions should be on disk before the hit"
    assert all(i["persisted"] for i in model.stats()["instances"])
    receipt = model.forget([victim])
    assert receipt["instances_hit"] == [1]
    on_disk = _all_bytes(db)
    model.wait_for_rebuilds()  # in memory; the persister is held off
    stats = model.stats()
    assert stats["store_format"] == "forgetting-store-v3"
    assert [(i["valid"], i["persisted"]) for i in stats["instances"]] == [
        (True, True),
        (True, False),
        (True, True),
    ]
    model.close()
    assert not [b for b in stored if b in on_disk]


def _as_v2_store(location: str, n_instances: int) -> None:
    """Rewrite a store into format v2 (contributions as columns ``c_r`` of ``rows``), as the
    previous release wrote it, with the store's own SQL on either backend."""
    from forgetting.store.sql import SQLStore

    store = SQLStore(location)
    try:
        with store.transaction() as cur:
            blob = store.dialect.blob
            for r in range(n_instances):
                store.execute(cur, f"ALTER TABLE rows ADD COLUMN c{r} {blob}")
                store.execute(
                    cur,
                    f"UPDATE rows SET c{r} = (SELECT blob FROM contrib_{r} "
                    f"WHERE contrib_{r}.id_key = rows.id_key)",
                )
                store.execute(cur, f"DROP TABLE contrib_{r}")
            store.execute(
                cur, "UPDATE meta SET value = ? WHERE name = 'format'", (b"forgetting-store-v2",)
            )
    finally:
        store.close()


def _store_format(location: str) -> tuple[bytes, int]:
    from forgetting.store.sql import SQLStore

    store = SQLStore(location, read_only=True)
    try:
        found = store.meta()["format"]
        tables = store.read(store._contrib_tables)
        return found, len(tables)
    finally:
        store.close()


def test_a_v2_store_is_read_as_it_is_and_converted_by_a_writable_open(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**BG), X, y, ids)
    model.forget(ids[:3] + schema_ids(model.estimator, 2)[:1])
    model.wait_for_rebuilds()
    digest, proba = model.state_digest(), model.predict_proba(X)
    model.close()
    _as_v2_store(db, 3)
    assert _store_format(db) == (b"forgetting-store-v2", 0)

    with DurableModel.open(db, read_only=True) as seen:  # read as it is, nothing converted
        assert seen.state_digest() == digest
        assert np.array_equal(seen.predict_proba(X), proba)
        with pytest.raises(StoreError):
            seen.forget([ids[5]])
    assert _store_format(db) == (b"forgetting-store-v2", 0)

    reopened = DurableModel.open(db)  # writable: converted in one transaction
    assert _store_format(db) == (b"forgetting-store-v3", 3)
    assert reopened.state_digest() == digest
    assert np.array_equal(reopened.predict_proba(X), proba)
    reopened.forget([ids[5], schema_ids(reopened.estimator, 0)[0]])
    reopened.wait_for_rebuilds()
    digest = reopened.state_digest()
    audit = reopened.verify()
    assert audit["ok"], audit
    reopened.close()
    with DurableModel.open(db) as again:
        again.wait_for_rebuilds()
        assert again.state_digest() == digest


def test_a_reader_of_a_v2_store_follows_a_writer_that_converts_it(db):
    """A read-only model opened on a v2 store keeps working after a writer converts the store
    and changes it: its next consistent read (verify) finds format v3 in the same transaction
    as the rows, and adopts the writer's state."""
    X, y = classification_data()
    ids = user_ids(len(y))
    DurableModel.create(db, QSSClassifier(**FAST), X, y, ids).close()
    _as_v2_store(db, 3)
    reader = DurableModel.open(db, read_only=True)
    try:
        with DurableModel.open(db) as writer:  # converts, then writes in format v3
            writer.forget([ids[7], schema_ids(writer.estimator, 1)[0]])
            writer.wait_for_rebuilds()
            digest = writer.state_digest()
        assert reader.state_digest() != digest
        audit = reader.verify()
        assert audit["ok"], audit
        assert reader.state_digest() == digest
        assert reader.stats()["store_format"] == "forgetting-store-v3"
    finally:
        reader.close()


def test_a_conversion_that_fails_leaves_the_v2_store_as_it_was(sqlite_db, monkeypatch):
    from forgetting.store import sql

    X, y = classification_data()
    ids = user_ids(len(y))
    model = DurableModel.create(sqlite_db, QSSClassifier(**FAST), X, y, ids)
    digest = model.state_digest()
    model.close()
    _as_v2_store(sqlite_db, 3)
    real = sql.SQLStore._create_contrib_table

    def fail_on_the_last(self, cur, instance):
        if instance == 2:
            raise sqlite3.OperationalError("disk I/O error")
        real(self, cur, instance)

    monkeypatch.setattr(sql.SQLStore, "_create_contrib_table", fail_on_the_last)
    with pytest.raises(StoreError) as info:
        DurableModel.open(sqlite_db)
    assert "\n" not in str(info.value) and "converting" in str(info.value)
    monkeypatch.undo()
    assert _store_format(sqlite_db) == (b"forgetting-store-v2", 0)
    with DurableModel.open(sqlite_db) as opened:
        assert opened.state_digest() == digest
    assert _store_format(sqlite_db) == (b"forgetting-store-v3", 3)


def test_deletions_during_background_rebuild_reach_the_store(db):
    X, y = classification_data(n=600)
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**BG), X, y, ids)
    engine = model.estimator.engine_
    gate = threading.Event()
    original = engine._build
    engine._build = lambda r, data, *gram: (gate.wait(timeout=30), original(r, data, *gram))[1]
    model.forget(schema_ids(model.estimator, 0)[:1])
    protected = set().union(*[schema_ids(model.estimator, r) for r in range(3)])
    later = [i for i in ids if i not in protected][:10]
    model.forget(later)
    gate.set()
    model.wait_for_rebuilds()
    digest = model.state_digest()
    model.close()
    reopened = DurableModel.open(db)
    reopened.wait_for_rebuilds()
    assert reopened.state_digest() == digest
    assert reopened.verify()["ok"]
    reopened.close()


def test_reopen_rebuilds_instances_whose_schema_was_not_persisted(db):
    X, y = classification_data()
    model = DurableModel.create(db, QSSClassifier(**FAST), X, y, user_ids(len(y)))
    digest = model.state_digest()
    with model._store.transaction() as cur:
        model._store.set_schema(cur, 1, None)
    model.close()
    reopened = DurableModel.open(db)
    reopened.wait_for_rebuilds()
    assert reopened.state_digest() == digest
    reopened.close()


def test_open_refuses_a_missing_or_foreign_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        DurableModel.open(str(tmp_path / "nope.db"))
    other = tmp_path / "other.db"
    import sqlite3

    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(ValueError, match="not a forgetting store"):
        DurableModel.open(str(other))


CRASH_TRIALS = int(os.environ.get("FORGETTING_CRASH_TRIALS", "50"))
TOKEN = "rQ6P6kAKwPxEWi_-3Bv8obNs_9ZKSgch"  # made by secrets.token_urlsafe(24)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _crash_setup(tmp_path: Path) -> tuple:
    """The crash tests' rows, ids, token file and request headers."""
    X, y = classification_data(n=400)
    token_file = tmp_path / "tokens"
    token_file.write_text(TOKEN)
    return X, y, user_ids(len(y)), token_file, {"Authorization": f"Bearer {TOKEN}"}


def _serve(db: str, token_file: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "forgetting", "serve", "--store", db, "--port", str(port),
         "--token-file", str(token_file), "--log-level", "critical", "--no-warmup"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the server did not come up within 60 s")


def test_predictions_go_on_while_a_rebuilt_instance_is_written(db, monkeypatch):
    """Writing a rebuilt instance's contributions (every labeled row: ~0.8 s at 100k rows)
    happens outside the engine lock: the copies are taken under it, and no forget or insert
    can change the rows meanwhile (they wait for the model's own lock). Predictions used to
    wait for the whole write: here the write is held open until a prediction has landed."""
    from forgetting.store.sql import SQLStore

    X, y = classification_data(n=400)
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**BG), X, y, ids, overwrite=True)
    writing, predicted = threading.Event(), threading.Event()
    waits: list[bool] = []
    original = SQLStore.set_contributions

    def slow_write(store, cur, r, items):
        if threading.current_thread().name == "qss-db":  # the persister, not a forget
            writing.set()
            waits.append(predicted.wait(5))  # False: the prediction never came meanwhile
        return original(store, cur, r, items)

    monkeypatch.setattr(SQLStore, "set_contributions", slow_write)
    model.forget(schema_ids(model.estimator, 0)[:1])
    assert writing.wait(30), "no rebuilt instance was written"
    model.predict(X[:5])  # the write waits for this prediction: it must not wait for the write
    predicted.set()
    model.wait_for_rebuilds()
    model.close()
    assert waits and all(waits), "the prediction waited for the store write"
    with DurableModel.open(db, read_only=True) as reopened:
        assert reopened.verify()["ok"]


@pytest.mark.slow  # the crash suite: a server SIGKILLed for up to 5 min
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_sigkill_of_the_server_loses_no_acknowledged_change(tmp_path, backend):
    """A real server process (`forgetting serve`) receiving a stream of forgets and inserts
    over HTTP is SIGKILLed at random moments. After restart every acknowledged change is
    there exactly once and the state equals a fit on the surviving rows (`verify`)."""
    dsn = postgres_dsn() if backend == "postgres" else None
    n_trials = CRASH_TRIALS if backend == "sqlite" else max(CRASH_TRIALS // 5, 1)
    X, y, ids, token_file, auth = _crash_setup(tmp_path)
    rng = random.Random(0)
    deadline = time.monotonic() + 300
    trials = mid_stream = 0
    for trial in range(n_trials):
        if time.monotonic() > deadline:
            break
        db = dsn or str(tmp_path / f"crash-{trial}.db")
        DurableModel.create(db, QSSClassifier(**BG), X, y, ids, overwrite=True).close()
        proc, url = _serve(db, token_file)
        pool = list(ids)
        rng.shuffle(pool)
        killer = threading.Timer(rng.uniform(0.0, 0.6), proc.kill)  # SIGKILL
        killer.start()
        acked, sent = [], []
        with httpx.Client(base_url=url, headers=auth, timeout=30) as client:
            for k in range(200):
                if k % 3 == 2:
                    rows = rng.sample(range(len(y)), 3)
                    body = {"X": X[rows].tolist(), "y": y[rows].tolist(),
                            "ids": [f"ins-{trial}-{k}-{j}" for j in range(3)]}  # fmt: skip
                    op = ("insert", body["ids"])
                    path = "/insert"
                else:
                    body = {"ids": [pool.pop() for _ in range(rng.randint(1, 4))]}
                    op = ("forget", body["ids"])
                    path = "/forget"
                sent.append(op)
                try:
                    response = client.post(path, json=body)
                except httpx.TransportError:
                    break
                assert response.status_code == 200, response.text
                acked.append(op)
        killer.join()
        proc.wait(timeout=30)
        mid_stream += 0 < len(acked) < 200
        model = DurableModel.open(db)
        try:  # closed even when a check fails: a leaked writer lock fails every later test
            model.wait_for_rebuilds()
            stored = set(model.estimator.ids_)
            for kind, op_ids in acked:
                if kind == "forget":
                    assert not set(op_ids) & stored, f"trial {trial}: acknowledged forget undone"
                else:
                    assert set(op_ids) <= stored, f"trial {trial}: acknowledged insert lost"
            touched = {i for _, op_ids in sent for i in op_ids}
            assert stored <= set(ids) | touched
            audit = model.verify()
            assert audit["ok"], f"trial {trial}: {audit}"
        finally:
            model.close()
        trials += 1
    assert trials >= min(n_trials, 10), f"only {trials} trials ran in the time bound"
    assert mid_stream >= trials // 5, f"only {mid_stream}/{trials} kills landed mid-stream"


def _forget_one_by_one(url: str, auth: dict, rows: list, acked: list, refused: list) -> None:
    """One client: a one-id forget per row until the server goes away; acknowledged ids
    go to ``acked``, any other answer to ``refused`` (list appends are atomic)."""
    with httpx.Client(base_url=url, headers=auth, timeout=30) as http:
        for row_id in rows:
            try:
                response = http.post("/forget", json={"ids": [row_id]})
            except httpx.TransportError:
                return
            (acked if response.status_code == 200 else refused).append(row_id)


@pytest.mark.slow  # the crash suite
def test_sigkill_during_concurrent_forgets_loses_no_acknowledged_one(tmp_path):
    """Forget requests from several clients at once reach the model together and are
    committed in groups; the server is SIGKILLed mid-stream. Every acknowledged forget is
    absent after the restart, every row no request named is there, and the state equals a
    fit on the surviving rows (`verify`) — a group is acknowledged only once committed."""
    X, y, ids, token_file, auth = _crash_setup(tmp_path)
    rng = random.Random(1)
    trials = max(CRASH_TRIALS // 10, 3)
    mid_stream = 0
    for trial in range(trials):
        db = str(tmp_path / f"group-crash-{trial}.db")
        DurableModel.create(db, QSSClassifier(**BG), X, y, ids, overwrite=True).close()
        proc, url = _serve(db, token_file)
        pool = list(ids)
        rng.shuffle(pool)
        queues = [pool[k::4][:40] for k in range(4)]  # four clients, disjoint rows
        acked: list[str] = []
        refused: list[str] = []
        killer = threading.Timer(rng.uniform(0.1, 0.5), proc.kill)  # SIGKILL
        threads = [
            threading.Thread(target=_forget_one_by_one, args=(url, auth, q, acked, refused))
            for q in queues
        ]
        killer.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        killer.join()
        proc.wait(timeout=30)
        assert not refused, refused
        mid_stream += 0 < len(acked) < sum(map(len, queues))
        model = DurableModel.open(db)
        try:
            model.wait_for_rebuilds()
            stored = set(model.estimator.ids_)
            assert not set(acked) & stored, f"trial {trial}: an acknowledged forget was undone"
            named = {i for q in queues for i in q}
            assert set(ids) - named <= stored
            audit = model.verify()
            assert audit["ok"], f"trial {trial}: {audit}"
        finally:
            model.close()
    assert mid_stream >= 1, "no kill landed mid-stream"


# -- labels, keys, names, read-only opens --------------------------------------------------
@pytest.mark.parametrize("mode", ["exact", "label"])
def test_string_labels_through_the_store(db, mode):
    """String classes survive the store; an unlabeled row is never stored as a class (such
    as the string '-1'), and a forget that empties a class refits and rewrites the store."""
    X, y = classification_data(k=3)
    labels = np.array(["ant", "bee", "cow"], dtype=object)[y]
    if mode == "label":
        labels = labels.astype("<U3")
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**FAST, mode=mode), X, labels, ids)
    model.forget(ids[:5])
    model.insert(X[:2], labels[:2], ["n-1", "n-2"])
    cows = [i for i, lab in zip(ids, labels, strict=True) if lab == "cow" and i not in ids[:5]]
    cows += [f"n-{j + 1}" for j in range(2) if labels[j] == "cow"]
    model.forget(cows)  # the last "cow" rows: a fit without them has two classes
    assert model.classes == ["ant", "bee"] or mode == "label"
    digest = model.state_digest()
    model.close()
    with DurableModel.open(db) as reopened:
        reopened.wait_for_rebuilds()
        assert reopened.state_digest() == digest
        assert "-1" not in reopened.classes and -1 not in reopened.classes
        assert set(reopened.predict(X)) <= {"ant", "bee", "cow"}
        assert reopened.verify()["ok"]


def test_label_mode_forget_retries_return_the_stored_receipt(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**FAST, mode="label"), X, y, ids)
    first = model.forget(ids[7:9])
    again = model.forget(ids[7:9])
    assert again["already_forgotten"] and again["id_hashes"] == first["id_hashes"]
    partly = model.forget([ids[8], ids[9]])  # one done, one new: only the new one is forgotten
    assert partly["n_rows"] == 1 and partly["already_forgotten_ids"] == 1
    stored = model.receipt(partly["id_hashes"][0])  # the reply's count is not stored
    assert stored["state_digest"] == partly["state_digest"]
    assert "already_forgotten_ids" not in stored
    erased = model.forget([ids[7]], erase_inputs=True)  # erasing inputs is a new operation
    assert erased["scope"] == "instance"
    model.close()


def test_a_secret_key_is_not_stored_unless_asked(db, tmp_path):
    X, y = classification_data()
    key = "store-secret-key-0123456789abcdef"
    model = DurableModel.create(db, QSSClassifier(**FAST, secret_key=key), X, y, user_ids(len(y)))
    assert not model.key_is_derived
    digest = model.state_digest()
    model.close()
    if not db.startswith("postgresql://"):
        assert key.encode() not in Path(db).read_bytes()
    with pytest.raises(ValueError, match="secret key"):
        DurableModel.open(db)
    with pytest.raises(ValueError, match="does not match"):
        DurableModel.open(db, secret_key="wrong")
    with DurableModel.open(db, secret_key=key) as reopened:
        assert reopened.state_digest() == digest
    kept = DurableModel.create(
        db, QSSClassifier(**FAST, secret_key=key), X, y, user_ids(len(y)), overwrite=True,
        store_key=True,
    )  # fmt: skip
    kept.close()
    with DurableModel.open(db) as reopened:  # the key came from the store, as asked
        assert reopened.state_digest() == digest


def test_feature_names_are_recorded(db):
    X, y = classification_data(d=4)
    model = DurableModel.create(
        db, QSSClassifier(**FAST), X, y, user_ids(len(y)), feature_names=["a", "b", "c", "d"]
    )
    assert model.feature_names == ["a", "b", "c", "d"] and model.key_is_derived
    model.close()
    with DurableModel.open(db, read_only=True) as reopened:
        assert reopened.feature_names == ["a", "b", "c", "d"]
        assert reopened.stats()["feature_names"] == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="feature names"):
        DurableModel.create(
            db, QSSClassifier(**FAST), X, y, user_ids(len(y)), feature_names=["a"], overwrite=True
        )


def test_feature_names_default_to_the_dataframe_columns(sqlite_db):
    pd = pytest.importorskip("pandas")
    X, y = classification_data(d=5)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(5)])
    with DurableModel.create(sqlite_db, QSSClassifier(**FAST), frame, y) as model:
        assert model.feature_names == [f"x{j}" for j in range(5)]


def test_another_estimator_is_refused_before_anything_is_written(tmp_path):
    """A family's store takes its own estimators only; the facade any of the library's."""
    from forgetting import ExactForestClassifier
    from forgetting.store import QSSDurable

    X, y = classification_data(d=5)
    path = tmp_path / "model.db"
    with pytest.raises(TypeError, match="not ExactForestClassifier"):
        QSSDurable.create(str(path), ExactForestClassifier(n_estimators=2), X, y)
    with pytest.raises(StoreKindError, match="no store holds a LogisticRegression"):
        DurableModel.create(str(path), LogisticRegression(), X, y)
    assert not path.exists()
    with DurableModel.create(str(path), ExactForestClassifier(n_estimators=2), X, y) as m:
        assert m.stats()["estimator"] == "ExactForestClassifier"


def test_a_read_only_open_sees_receipts_and_refuses_writes(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**FAST), X, y, ids)
    receipt = model.forget(ids[:1])
    with DurableModel.open(db, read_only=True) as reader:  # beside the running writer
        assert reader.receipt(receipt["id_hashes"][0])["operation"] == "forget"
        assert reader.read_only and reader.stats()["read_only"]
        with pytest.raises(StoreError, match="read-only"):
            reader.forget(ids[1:2])
    model.close()


def test_a_fit_that_fails_leaves_no_store(tmp_path):
    X, y = classification_data()
    path = tmp_path / "model.db"
    with pytest.raises(ValueError):
        DurableModel.create(str(path), QSSClassifier(**FAST), X, y[:-1])
    assert not path.exists()
    assert [p.name for p in tmp_path.iterdir()] in ([], ["model.db.lock"])


def test_the_privacy_ledger_of_a_dp_model_survives_reopening(db):
    """mode="dp": releases and forgotten-id tags are written with every change, so a reopened
    model neither forgets its spend nor lets a forgotten id back in."""
    X, y = classification_data()
    ids = user_ids(len(y))
    key = b"a secret of at least sixteen bytes"
    params = dict(mode="dp", epsilon=2.0, delta=1e-5, secret_key=key, rho=0.25, rebuild="sync")
    model = DurableModel.create(db, QSSClassifier(**params), X, y, ids)
    model.predict(X)
    model.forget(ids[:3])
    served = model.predict_proba(X)
    releases = model.estimator.privacy_.n_releases
    model.close()
    with DurableModel.open(db, secret_key=key) as reopened:
        assert reopened.estimator.privacy_.n_releases == releases
        assert np.array_equal(reopened.predict_proba(X), served)  # the same release again
        assert reopened.estimator.privacy_.n_releases == releases
        with pytest.raises(ValueError, match="forgotten earlier"):
            reopened.insert(X[:1], y[:1], ids[:1])
        assert reopened.verify()["ok"]


def test_a_read_only_verify_beside_a_running_writer_reads_one_consistent_state(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    writer = DurableModel.create(db, QSSClassifier(**FAST), X, y, ids)
    with DurableModel.open(db, read_only=True) as reader:
        writer.forget(ids[:4])  # after the reader loaded its copy
        audit = reader.verify()
        assert audit["ok"], audit
        assert audit["n_rows"] == len(ids) - 4
        assert audit["state_digest"] == writer.state_digest()
    writer.close()


GROUP_KEY = b"a secret of at least sixteen bytes"


def _model_and_rows_outside(location: str, mode: str = "exact") -> tuple:
    """A durable model of 400 rows (background rebuilds; ``mode`` exact, label or dp), its
    ids, and the ids in no D°."""
    X, y = classification_data(n=400)
    ids = user_ids(len(y))
    params = {**BG, "mode": mode, "secret_key": GROUP_KEY}
    if mode == "dp":
        params.update(epsilon=2.0, delta=1e-5)
    model = DurableModel.create(location, QSSClassifier(**params), X, y, ids, overwrite=True)
    return model, ids, outside_all_schemas(model.estimator)


def _forget_in_threads(model, requests: dict, first: list, held: HeldCommits) -> dict:
    """``first`` forgotten in a thread whose commit is held; then every request of
    ``requests`` (name → ids) from a thread of its own, released once all are queued.
    Returns name → receipt or the exception raised."""
    results: dict = {}

    def call(name, ids):
        try:
            results[name] = model.forget(ids)
        except Exception as err:  # noqa: BLE001 - the test looks at it
            results[name] = err

    leader = threading.Thread(target=call, args=("first", first))
    leader.start()
    assert held.entered.wait(30)
    threads = [threading.Thread(target=call, args=item) for item in requests.items()]
    for thread in threads:
        thread.start()
    wait_until(lambda: model.queued_writes == len(requests))
    held.release.set()
    for thread in [leader, *threads]:
        thread.join(60)
    return results


@pytest.mark.parametrize("mode", ["exact", "label", "dp"])
def test_concurrent_forgets_share_one_commit_and_each_gets_its_own_answer(db, mode, monkeypatch):
    """Forgets that arrive while another one commits wait for it and are then applied and
    written together, in one transaction (group commit): each caller still gets its own
    receipt, or its own error, and the store ends equal to memory and to a refit — in label
    mode too (labels removed, rows kept) and in mode="dp" (the ledger written with the group:
    a reopened model still refuses the forgotten ids)."""
    model, ids, outside = _model_and_rows_outside(db, mode)
    hit = sorted(set(schema_ids(model.estimator, 0)))[0]
    held = HeldCommits(monkeypatch)
    requests = {
        "b": [outside[1]],
        "c": [outside[2], outside[3]],
        "hit": [hit],
        "unknown": ["never-seen"],
        "again": [outside[1]],  # the same row as "b", in the same group
    }
    results = _forget_in_threads(model, requests, [outside[0]], held)
    assert held.commits == 2  # the first request's, then one for all that queued behind it
    assert isinstance(results["unknown"], KeyError)
    for name, n in (("first", 1), ("c", 2), ("hit", 1)):
        assert isinstance(results[name], Receipt) and results[name]["n_rows"] == n, name
    assert results["hit"]["instances_hit"]
    twice = [results["b"], results["again"]]
    assert sorted(bool(r.get("already_forgotten")) for r in twice) == [False, True]
    assert twice[0]["id_hashes"] == twice[1]["id_hashes"]
    stored = model.receipt(results["c"]["id_hashes"][1])
    assert stored["state_digest"] == results["c"]["state_digest"]
    model.wait_for_rebuilds()
    digest = model.state_digest()
    assert model.verify()["ok"]
    assert model.stats()["queued_writes"] == 0
    model.close()
    with DurableModel.open(db, secret_key=GROUP_KEY) as reopened:
        reopened.wait_for_rebuilds()
        assert reopened.state_digest() == digest
        kept = len(ids) if mode == "label" else len(ids) - 5  # label mode keeps the inputs
        assert reopened.estimator.n_rows_ == kept
        if mode == "dp":
            with pytest.raises(ValueError, match="forgotten earlier"):
                reopened.insert(np.zeros((1, reopened.n_features)), [0], [outside[2]])


def test_inserts_and_forgets_that_come_together_commit_together_in_their_order(db, monkeypatch):
    """Inserts join the group commit too, in arrival order with the forgets: a row inserted
    and then forgotten in the same group is gone, an insert of an existing id fails alone,
    and one transaction writes the rest — the store then equals memory and a refit."""
    model, ids, outside = _model_and_rows_outside(db)
    X, y = classification_data(n=400)
    held = HeldCommits(monkeypatch)
    results: dict = {}

    def call(name, method, *args):
        try:
            results[name] = method(*args)
        except Exception as err:  # noqa: BLE001 - the test looks at it
            results[name] = err

    first = threading.Thread(target=call, args=("first", model.forget, [outside[0]]))
    first.start()
    assert held.entered.wait(30)
    requests = [
        ("insert-ab", model.insert, X[:2], y[:2], ["new-a", "new-b"]),
        ("forget-a", model.forget, ["new-a"]),  # inserted just before, in the same group
        ("insert-c", model.insert, X[2:3], y[2:3], ["new-c"]),
        ("forget-1", model.forget, [outside[1]]),
        ("insert-again", model.insert, X[3:4], y[3:4], [outside[2]]),  # present: fails alone
    ]
    threads = []
    for k, request in enumerate(requests):  # queued one by one: their order is fixed
        threads.append(threading.Thread(target=call, args=request))
        threads[-1].start()
        wait_until(lambda k=k: model.queued_writes == k + 1)
    held.release.set()
    for thread in [first, *threads]:
        thread.join(60)
    assert held.commits == 2, held.commits
    assert isinstance(results["insert-again"], ValueError)
    assert results["insert-ab"]["n_rows"] == 2 and results["insert-c"]["n_rows"] == 1
    assert results["forget-a"]["n_rows"] == 1 and results["forget-1"]["n_rows"] == 1
    stored = set(model.estimator.ids_)
    assert {"new-b", "new-c"} <= stored and not {"new-a", outside[0], outside[1]} & stored
    model.wait_for_rebuilds()
    digest = model.state_digest()
    assert model.verify()["ok"]
    model.close()
    with DurableModel.open(db, secret_key=GROUP_KEY) as reopened:
        reopened.wait_for_rebuilds()
        assert reopened.state_digest() == digest
        assert set(reopened.estimator.ids_) == stored


def test_a_prediction_never_serves_a_write_of_a_group_before_its_commit(sqlite_db, monkeypatch):
    """The group holds the engine lock from its first change to its commit: a prediction
    asked for in between waits and then serves the committed state — here asked for right
    after a group's first in-memory forget, it must not finish before that group's commit."""
    from forgetting.store.sql import SQLStore

    model, _ids, outside = _model_and_rows_outside(sqlite_db)
    X, _ = classification_data(n=400)
    events: list[str] = []
    original_forget, original_tx = QSSClassifier.forget, SQLStore.transaction

    def forget_then_predict(self, ids, **kwargs):
        receipt = original_forget(self, ids, **kwargs)
        if outside[0] in list(ids):  # memory changed, the store not yet
            predictor = threading.Thread(
                target=lambda: (model.predict(X[:1]), events.append("predicted"))
            )
            predictor.start()
            predictor.join(0.5)  # finishes now only if the prediction did not wait
            events.append("forgot")
        return receipt

    def noted(store, doing="writing to the store"):
        if doing in WRITES:
            events.append("transaction")
        return original_tx(store, doing)

    monkeypatch.setattr(QSSClassifier, "forget", forget_then_predict)
    monkeypatch.setattr(SQLStore, "transaction", noted)
    model.forget([outside[0]])
    wait_until(lambda: "predicted" in events)
    assert events == ["forgot", "transaction", "predicted"], events
    model.close()


def test_a_group_whose_commit_fails_fails_each_request_and_memory_follows_the_store(
    sqlite_db, monkeypatch
):
    """The shared transaction fails: every request in the group raises the store's error,
    memory is restored from the store (those rows are back), and the next forget of them
    works — the invariant of a single forget, for a group."""
    model, ids, outside = _model_and_rows_outside(sqlite_db)
    held = HeldCommits(monkeypatch, fail_after_first=True)
    results = _forget_in_threads(model, {"b": [outside[1]], "c": [outside[2]]}, [outside[0]], held)
    assert results["first"]["n_rows"] == 1
    for name in ("b", "c"):
        assert isinstance(results[name], StoreError) and "disk is full" in str(results[name])
    assert model.estimator.n_rows_ == len(ids) - 1  # b and c are back: the store's rows
    monkeypatch.undo()
    assert model.forget([outside[1]])["n_rows"] == 1
    assert model.verify()["ok"]
    model.close()


def test_a_forget_that_fails_after_changing_memory_restores_the_group_from_the_store(
    sqlite_db, monkeypatch
):
    """A request whose in-memory forget raises after it changed the model (nothing the
    estimator does today, but nothing the group may then commit on top of): the model is
    reloaded from the store and every request of the group raises — none is half written."""
    model, ids, outside = _model_and_rows_outside(sqlite_db)
    original = QSSClassifier.forget

    def breaks_after(self, ids, **kwargs):
        receipt = original(self, ids, **kwargs)
        if outside[2] in list(ids):
            raise RuntimeError("simulated failure after the rows left memory")
        return receipt

    monkeypatch.setattr(QSSClassifier, "forget", breaks_after)
    held = HeldCommits(monkeypatch)
    results = _forget_in_threads(
        model, {"b": [outside[1]], "c": [outside[2]], "d": [outside[3]]}, [outside[0]], held
    )
    assert results["first"]["n_rows"] == 1
    for name in ("b", "c", "d"):
        assert isinstance(results[name], RuntimeError), (name, results[name])
    assert held.commits == 1  # the broken group wrote nothing
    assert model.estimator.n_rows_ == len(ids) - 1
    assert model.verify()["ok"]
    model.close()


def test_stats_report_the_store_s_size(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    with DurableModel.create(db, QSSClassifier(**FAST), X, y, ids) as model:
        before = model.stats()["store_bytes"]
        assert isinstance(before, int) and before > X.nbytes // 2
        more = np.random.default_rng(0).normal(size=(2000, X.shape[1]))
        model.insert(more, np.resize(y, 2000), [f"n-{i}" for i in range(2000)])
        assert model.stats()["store_bytes"] > before
