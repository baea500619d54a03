"""DurableForest: an exact forest whose acknowledged changes are in the store first
(forgetting.store.forest), on SQLite and PostgreSQL.

After any sequence of forgets and inserts, a reopened store grows the forest that a fit on
the rows held gives, bit for bit; a failed commit leaves the live model equal to the store;
crafted rows are one StoreCorrupt line; a forgotten row's bytes leave the SQLite files.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from forgetting import ExactForestClassifier, ExactForestRegressor
from forgetting.store import DurableForest, DurableModel
from forgetting.store.errors import StoreBusy, StoreCorrupt, StoreError, StoreKindError


def _data(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0]) + rng.normal(size=n) > 0).astype(int)
    y[:40] = 2  # a small third class
    return X, y, [f"user-{i}" for i in range(n)]


def _refit_equals(model, X_probe) -> None:
    """``model`` is what a fit on its own rows gives (predictions and structure)."""
    ids, _, X, y = model.engine_.rows()
    labels = model.classes_[y] if hasattr(model, "classes_") else y
    refit = type(model)(**model.get_params()).fit(X, labels, ids)
    assert model.structure_digest() == refit.structure_digest()
    if hasattr(model, "classes_"):
        assert np.array_equal(model.predict_proba(X_probe), refit.predict_proba(X_probe))
    else:
        assert np.array_equal(model.predict(X_probe), refit.predict(X_probe))


def test_changes_survive_reopen_and_equal_a_refit(db):
    X, y, ids = _data()
    with DurableForest.create(
        db, ExactForestClassifier(n_estimators=6), X, y, ids, overwrite=True
    ) as store:
        pool = store.estimator.pool_ids_
        store.forget(["user-100", "user-101"])
        store.forget([pool[0]])  # a D° row: the forest refits
        store.insert(X[:2] + 1, y[:2], ["new-a", "new-b"])
        live = store.estimator
        digest, proba = live.structure_digest(), live.predict_proba(X)
        assert store.receipts_for("user-100")[-1]["operation"] == "forget"
        assert store.receipts_for("new-a")[-1]["operation"] == "insert"
    with DurableForest.open(db) as again:
        model = again.estimator
        assert model.structure_digest() == digest
        assert np.array_equal(model.predict_proba(X), proba)
        assert "user-100" not in set(model.ids_) and "new-b" in set(model.ids_)
        _refit_equals(model, X)
        again.forget(["user-5"])  # the reopened model is live
        _refit_equals(again.estimator, X)


def test_instances_rebuild_in_the_background_and_reopen_equal(db, monkeypatch):
    from forgetting.forest import core as forest_core

    X, y, ids = _data()
    params = {"n_estimators": 6, "n_instances": 3, "min_bin_rows": 30}
    with DurableForest.create(
        db, ExactForestClassifier(**params), X, y, ids, overwrite=True
    ) as store:
        model = store.estimator
        pools = [set(model.engine_.instance(r).pool_ids()) for r in range(3)]
        row = sorted(pools[2] - pools[0] - pools[1])[0]
        outside = next(i for i in ids if i not in pools[0] | pools[1] | pools[2])
        opened = threading.Event()
        real = forest_core.ExactForest.grow

        def gated(forest, *args, **kwargs):
            if threading.current_thread().name.startswith("forest-rebuild"):
                assert opened.wait(60)
            return real(forest, *args, **kwargs)

        monkeypatch.setattr(forest_core.ExactForest, "grow", gated)
        receipt = store.forget([row])
        assert receipt.rebuild_started and receipt.instances_hit == (2,)
        stats = store.stats()
        assert stats["pending_rebuilds"] == [2]
        assert [i["valid"] for i in stats["instances"]] == [True, True, False]
        assert store.lookup(row)["rebuild_pending"] is True
        store.forget([outside])  # served and acknowledged while instance 2 rebuilds
        opened.set()
        store.wait_for_rebuilds(timeout=60)
        assert store.lookup(row)["rebuild_pending"] is False
        assert store.stats()["rebuilds_run"] == 1
        assert store.verify()["ok"]
        digest = store.estimator.structure_digest()
    with DurableForest.open(db) as again:
        assert again.estimator.n_instances == 3
        assert again.estimator.structure_digest() == digest
        _refit_equals(again.estimator, X)


def test_a_vanished_class_rewrites_the_rows(db):
    X, y, ids = _data()
    with DurableForest.create(
        db, ExactForestClassifier(n_estimators=4), X, y, ids, overwrite=True
    ) as store:
        store.forget(ids[:40])  # every row of class 2: class indices move
        assert store.estimator.classes_.tolist() == [0, 1]
        store.insert(X[:1], [1], ["after"])
        digest = store.estimator.structure_digest()
    with DurableForest.open(db) as again:
        assert again.estimator.classes_.tolist() == [0, 1]
        assert again.estimator.structure_digest() == digest


def test_regressor_store(tmp_path):
    X, _, ids = _data(800)
    target = np.nan_to_num(X[:, 1]) * 2.0
    path = tmp_path / "reg.db"
    with DurableForest.create(path, ExactForestRegressor(n_estimators=4), X, target, ids) as s:
        s.forget(ids[:3])
        s.wait_for_rebuilds()  # predictions during a rebuild average the serving instances
        pred = s.predict(X)
    with DurableForest.open(path) as again:
        assert np.array_equal(again.predict(X), pred)
        _refit_equals(again.estimator, X)


def test_bad_requests_change_nothing(tmp_path):
    X, y, ids = _data(600)
    path = tmp_path / "m.db"
    with DurableForest.create(path, ExactForestClassifier(n_estimators=3), X, y, ids) as s:
        digest = s.state_digest()
        with pytest.raises(KeyError, match="unknown ids"):
            s.forget(["user-1", "nobody"])
        with pytest.raises(ValueError, match="already present"):
            s.insert(X[:1], y[:1], ["user-1"])
        assert s.state_digest() == digest
    with DurableForest.open(path) as again:
        assert again.state_digest() == digest


def test_a_failed_commit_leaves_the_model_equal_to_the_store(tmp_path, monkeypatch):
    X, y, ids = _data(600)
    path = tmp_path / "m.db"
    with DurableForest.create(path, ExactForestClassifier(n_estimators=3), X, y, ids) as s:
        digest = s.state_digest()

        def broken(*_args, **_kwargs):
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(type(s._store), "add_receipt", broken)
        with pytest.raises(StoreError, match="disk I/O error"):
            s.forget(["user-9"])
        monkeypatch.undo()
        assert s.available and s.state_digest() == digest  # grown again from the store
        assert "user-9" in set(s.estimator.ids_)
        s.forget(["user-9"])
    with DurableForest.open(path) as again:
        assert "user-9" not in set(again.estimator.ids_)


def test_locks_read_only_and_the_other_kind_of_store(tmp_path):
    X, y, ids = _data(500)
    path = tmp_path / "m.db"
    with DurableForest.create(path, ExactForestClassifier(n_estimators=3), X, y, ids):
        with pytest.raises(StoreBusy):
            DurableForest.open(path)
        with pytest.raises(StoreBusy):
            DurableModel.open(path)  # the one facade takes the same writer lock
        with DurableModel.open(path, read_only=True) as other:
            assert isinstance(other, DurableForest)
    with DurableForest.open(path, read_only=True) as ro:
        with pytest.raises(StoreError, match="read-only"):
            ro.forget(["user-1"])
    with pytest.raises(TypeError, match="DurableForest holds .* not object"):
        DurableForest.create(tmp_path / "x.db", object(), X, y)
    with pytest.raises(StoreKindError, match="no store holds a object"):
        DurableModel.create(tmp_path / "y.db", object(), X, y)


def test_a_qss_store_is_refused_by_name(tmp_path):
    from forgetting import QSSClassifier

    X, y, ids = _data(500)
    path = tmp_path / "q.db"
    DurableModel.create(path, QSSClassifier(n_instances=2), np.nan_to_num(X), y, ids).close()
    with pytest.raises(StoreKindError, match="holds a QSSClassifier, not ExactForest"):
        DurableForest.open(path)


def test_one_facade_opens_any_store_and_one_digest_proves_it(tmp_path):
    """``DurableModel`` creates and opens a forest's store as a QSS one; the digest that
    ``verify`` reports is the last receipt's ``state_digest`` and ``stats``' (what inspect
    and the console show), and a refit from the stored rows has it too."""
    X, y, ids = _data(600)
    path = tmp_path / "any.db"
    with DurableModel.create(path, ExactForestClassifier(n_estimators=4), X, y, ids) as store:
        assert type(store) is DurableForest
        pool = set(store.estimator.pool_ids_)
        gone = [i for i in ids if i not in pool][:2]  # no rebuild: the receipt's is final
        receipt = store.forget(gone)
        assert not receipt.rebuild_started
        last = store.lookup(gone[0])["receipts"][-1]
    with DurableModel.open(path) as store:
        report = store.verify()
        assert report["ok"] and report["problems"] == []
        assert report["state_digest"] == report["refit_digest"] == store.stats()["state_digest"]
        assert report["state_digest"] == receipt.state_digest == last["state_digest"]
        assert store.stats()["estimator"] == "ExactForestClassifier"
        assert store.lookup(gone[0])["status"] == "forgotten"


@pytest.mark.parametrize(
    ("statement", "needle"),
    [
        ("UPDATE rows SET features = X'00' WHERE seq = 3", "feature bytes"),
        ("UPDATE rows SET target = 7 WHERE seq = 3", "label index 7"),
        ("UPDATE rows SET target = 0.5 WHERE seq = 3", "not an integer"),
        ("UPDATE rows SET target = NULL WHERE seq = 3", "finite target"),
        ("UPDATE rows SET id_key = X'7a3a31' WHERE seq = 3", "id type tag"),
        ("UPDATE rows SET in_pool = 1 WHERE seq = 3", "in_pool"),
        ("DELETE FROM meta WHERE name = 'model'", "model entry is missing"),
    ],
)
def test_crafted_rows_are_one_store_corrupt_line(tmp_path, statement, needle):
    X, y, ids = _data(300)
    path = tmp_path / "m.db"
    DurableForest.create(path, ExactForestClassifier(n_estimators=2), X, y, ids).close()
    with sqlite3.connect(path) as conn:
        conn.execute(statement)
    with pytest.raises(StoreCorrupt, match=needle) as err:
        DurableForest.open(path)
    assert "\n" not in str(err.value)


def test_forgotten_rows_leave_the_sqlite_files(tmp_path):
    X, y, ids = _data(400)
    marker = np.float32(12345.678)
    X[7, :] = marker
    path = tmp_path / "m.db"
    with DurableForest.create(path, ExactForestClassifier(n_estimators=2), X, y, ids) as s:
        pattern = X[7].astype("<f4").tobytes()
        s.forget(["user-7"])
        for suffix in ("", "-wal"):
            try:
                data = (tmp_path / f"m.db{suffix}").read_bytes()
            except FileNotFoundError:
                continue
            assert pattern not in data, f"the row's features remain in m.db{suffix}"


def test_an_acknowledged_forget_survives_a_kill(tmp_path):
    X, y, ids = _data(400)
    path = tmp_path / "m.db"
    DurableForest.create(path, ExactForestClassifier(n_estimators=2), X, y, ids).close()
    child = textwrap.dedent(
        f"""
        import os
        from forgetting.store import DurableForest
        s = DurableForest.open({str(path)!r})
        s.forget(["user-3"])
        print("acknowledged", flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert "acknowledged" in run.stdout and run.returncode == -9, run.stderr
    with DurableForest.open(path) as again:
        assert "user-3" not in set(again.estimator.ids_)
        _refit_equals(again.estimator, X)


def test_a_busy_purge_is_finished_by_the_retry(tmp_path, monkeypatch):
    X, y, ids = _data(300)
    path = tmp_path / "m.db"
    with DurableForest.create(path, ExactForestClassifier(n_estimators=2), X, y, ids) as s:
        store_type = type(s._store)
        real, calls = store_type.purge_logs, []

        def busy_once(self):
            calls.append(1)
            if len(calls) == 1:
                raise StoreBusy("a reader still holds the write-ahead log; retry")
            return real(self)

        monkeypatch.setattr(store_type, "purge_logs", busy_once)
        with pytest.raises(StoreBusy):
            s.forget(["user-2"])
        assert "user-2" not in set(s.estimator.ids_)  # committed: memory agrees
        again = s.forget(["user-2"])
        assert again.already_forgotten and len(calls) == 2


def test_a_dp_forest_keeps_its_ledger_through_the_store(db):
    """mode="dp": the ledger is written with every change, so the reopened forest refuses a
    forgotten id as the live one did, equals a DP refit bit for bit, and a store whose ledger
    was removed is one StoreCorrupt line (the restore requires it)."""
    X, y, ids = _data(n=600)
    key = "a secret of 16+ bytes"
    params = dict(n_estimators=6, mode="dp", epsilon=2.0, secret_key=key)
    with DurableForest.create(db, ExactForestClassifier(**params), X, y, ids, overwrite=True) as s:
        s.forget(["user-10", "user-11"])
        s.insert(X[:1] + 1, y[:1], ["new-a"])
        with pytest.raises(ValueError, match="forgotten earlier"):
            s.insert(X[10:11], y[10:11], ["user-10"])
        s.wait_for_rebuilds()
        proba = s.estimator.predict_proba(X)
    with DurableForest.open(db, secret_key=key) as again:
        again.wait_for_rebuilds()
        model = again.estimator
        assert model.privacy_.n_forgotten == 2
        assert np.array_equal(model.predict_proba(X), proba)
        with pytest.raises(ValueError, match="forgotten earlier"):
            again.insert(X[11:12], y[11:12], ["user-11"])
        keep = [i for i, name in enumerate(ids) if name not in {"user-10", "user-11"}]
        refit = ExactForestClassifier(**params).fit(
            np.vstack([X[keep], X[:1] + 1]),
            np.r_[y[keep], y[:1]],
            [*(ids[i] for i in keep), "new-a"],
        )
        assert model.structure_digest() == refit.structure_digest()
        assert np.array_equal(model.predict_proba(X), refit.predict_proba(X))
    if not db.endswith(".db"):
        return  # the removal below is SQLite's
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM meta WHERE name = 'privacy'")
    with pytest.raises(StoreCorrupt, match="ledger"):
        DurableForest.open(db, secret_key=key)
