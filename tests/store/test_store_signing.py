"""Who and why on every receipt, and the signed, hash-chained receipt log
(forgetting.store.signing), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest
from helpers import FAST, classification_data, user_ids

from forgetting import ExactForestClassifier, QSSClassifier
from forgetting.receipts import Receipt
from forgetting.store import DurableModel
from forgetting.store.reads import verify_store_log
from forgetting.store.signing import (
    GENESIS,
    Signer,
    SigningKeyError,
    load_public_key,
    new_keys,
    verify_log,
)
from forgetting.store.sql import SQLStore


@pytest.fixture(params=["qss", "forest"])
def family(request):
    return request.param


def _estimator(family: str):
    if family == "qss":
        return QSSClassifier(**FAST)
    return ExactForestClassifier(n_estimators=4, random_state=0)


def test_operator_and_reason_are_in_the_stored_receipt(db, family):
    X, y = classification_data()
    ids = user_ids(len(y))
    with DurableModel.create(db, _estimator(family), X[:-5], y[:-5], ids[:-5]) as model:
        receipt = model.forget([ids[3]], operator="alice", reason="GDPR art. 17, ticket 12")
        assert (receipt.operator, receipt.reason) == ("alice", "GDPR art. 17, ticket 12")
        plain = model.forget([ids[4]])
        assert "operator" not in plain.to_dict() and "reason" not in plain.to_dict()
        added = model.insert(X[-5:], y[-5:], ids[-5:], operator="svc:loader", reason="backfill")
        assert added.operator == "svc:loader"
        again = model.forget([ids[3]], operator="bob", reason="retry")
        assert again.already_forgotten and again.operator == "alice"  # the stored receipt
    with DurableModel.open(db, read_only=True) as model:
        (stored,) = model.lookup(ids[3])["receipts"]
        assert stored["operator"] == "alice" and stored["reason"] == "GDPR art. 17, ticket 12"
        assert Receipt.from_dict(stored) == receipt
        inserted = model.lookup(ids[-1])["receipts"][-1]
        assert (inserted["operator"], inserted["reason"]) == ("svc:loader", "backfill")


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"operator": "x" * 101}, "at most 100"),
        ({"operator": "alice\nbob"}, "printable"),
        ({"operator": b"alice"}, "must be a string"),
        ({"reason": "r" * 501}, "at most 500"),
        ({"reason": 7}, "must be a string"),
    ],
)
def test_a_bad_operator_or_reason_is_refused_before_anything_changes(tmp_path, options, needle):
    X, y = classification_data()
    ids = user_ids(len(y))
    path = tmp_path / "s.db"
    with DurableModel.create(path, QSSClassifier(**FAST), X, y, ids) as model:
        digest = model.state_digest()
        with pytest.raises(ValueError, match=needle) as err:
            model.forget([ids[3]], **options)
        assert "\n" not in str(err.value)
        with pytest.raises(ValueError, match=needle):
            model.insert(X[:1], y[:1], ["new-1"], **options)
        assert model.state_digest() == digest
        assert model.lookup(ids[3])["status"] == "present"
        assert model.receipts()[0] == []


def test_old_receipts_without_operator_still_read():
    old = {
        "operation": "forget",
        "scope": "instance",
        "n_rows": 1,
        "id_hashes": ["ab"],
        "instances_hit": [],
        "rebuild_started": False,
        "state_digest": "00",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "seconds": 0.1,
    }
    receipt = Receipt.from_dict(old)
    assert receipt.operator == "" and receipt.reason == ""
    assert receipt.to_dict() == {**old, "effective_rho": 0.0}


# -- the signed log -----------------------------------------------------------------------------
def test_every_receipt_is_chained_signed_and_verifies(db, family):
    X, y = classification_data()
    ids = user_ids(len(y))
    with DurableModel.create(db, _estimator(family), X[:-5], y[:-5], ids[:-5]) as model:
        assert verify_store_log(db).ok  # no receipt yet: an empty log checks
        model.forget([ids[1]], operator="alice")
        model.insert(X[-5:], y[-5:], ids[-5:])
        if model.groups_writes:  # several receipts in one group commit
            threads = [
                threading.Thread(target=model.forget, args=([ids[10 + i]],)) for i in range(6)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        else:
            model.forget([ids[10], ids[11]])
        n = len(list(model.iter_receipts()))
        report = verify_store_log(db)
        assert report.ok and report.signed == report.receipts == n and report.unsigned == 0
        log = list(model.iter_log())
    assert [r["seq"] for r in log] == sorted(r["seq"] for r in log)
    assert log[0]["prev_hash"] == GENESIS and all(len(r["signature"]) == 128 for r in log)
    with DurableModel.open(db, read_only=True) as model:
        assert list(model.iter_log()) == log
    with DurableModel.open(db) as model:  # a second writer continues the same chain
        model.forget([ids[2]])
    report = verify_store_log(db)
    assert report.ok and report.receipts == n + 1


def _execute(location: str, *statements: str, params: tuple = ()) -> None:
    """Run statements on a store's database behind the library's back (SQLite or PG)."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location) as con:
            for statement in statements:
                con.execute(statement.replace("?", "%s"), params or None)
        return
    with sqlite3.connect(location) as con:
        for statement in statements:
            con.execute(statement, params)
    sqlite3.connect(location).close()


def _unsign(location: str) -> None:
    """Make a store look as stores made before the log was signed do."""
    _execute(
        location,
        "ALTER TABLE receipts DROP COLUMN prev",
        "ALTER TABLE receipts DROP COLUMN signature",
        "DELETE FROM meta WHERE name IN ('log_public_key', 'log_private_key', 'log_head')",
    )


def test_a_store_made_before_the_log_was_signed_signs_from_its_first_writable_open(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    path = db
    with DurableModel.create(path, QSSClassifier(**FAST), X, y, ids) as model:
        model.forget([ids[1]])
        model.forget([ids[2]])
    _unsign(path)
    with DurableModel.open(path, read_only=True) as model:  # read as it is, changed in nothing
        assert model.lookup(ids[1])["status"] == "forgotten"
        assert [r["signature"] for r in model.iter_log()] == [None, None]
    report = verify_store_log(path)
    assert not report.ok and report.problem is None and report.unsigned == 2
    assert any("no signing key" in note for note in report.notes)
    with DurableModel.open(path) as model:
        model.forget([ids[3]])
        first = model.lookup(ids[1])["receipts"][0]
    report = verify_store_log(path)
    assert (report.unsigned, report.signed, report.problem) == (2, 1, None) and not report.ok
    # an unsigned receipt slipped in after the log was signed is found
    _execute(path, "INSERT INTO receipts (seq, body) VALUES (99, ?)", params=(json.dumps(first),))
    report = verify_store_log(path)
    assert report.bad_seq == 99 and "unsigned" in report.problem


def test_before_the_first_signed_receipt_the_head_names_the_last_older_one(tmp_path):
    """Before the first signed receipt, the signed head names the last older receipt: one
    unsigned receipt added, or one cut off, is found."""
    X, y = classification_data()
    ids = user_ids(len(y))
    path = str(tmp_path / "old.db")
    with DurableModel.create(path, QSSClassifier(**FAST), X, y, ids) as model:
        model.forget([ids[1]])
        model.forget([ids[2]])
    _unsign(path)
    DurableModel.open(path).close()  # the key pair and the head; no receipt signed yet
    assert verify_store_log(path).unsigned == 2
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM receipts WHERE seq = 2")
    report = verify_store_log(path)
    assert report.bad_seq == 2 and "missing" in report.problem


def test_the_signing_key_opens_only_with_the_membership_key():
    keys = new_keys(b"k" * 32)
    assert Signer.unlock(keys, b"k" * 32).head(1, GENESIS)
    with pytest.raises(SigningKeyError, match="does not decrypt"):
        Signer.unlock(keys, b"j" * 32)
    other = new_keys(b"k" * 32)
    with pytest.raises(SigningKeyError):  # one key pair's public key, another's private key
        Signer.unlock({**keys, "log_public_key": other["log_public_key"]}, b"k" * 32)
    assert b"PRIVATE" not in keys["log_private_key"] and len(keys["log_private_key"]) == 64


def test_receipts_added_while_the_log_is_checked_do_not_fail_it(tmp_path):
    """The head is read before the entries: a receipt a writer adds in between is checked by
    its chain, not reported as a head mismatch."""
    X, y = classification_data()
    ids = user_ids(len(y))
    path = str(tmp_path / "s.db")
    with DurableModel.create(path, QSSClassifier(**FAST), X, y, ids) as model:
        model.forget([ids[1]])
        reader = SQLStore(path, read_only=True)
        try:
            pem, head = reader.log_keys()
            model.forget([ids[2]])
            model.forget([ids[3]])
            report = verify_log(reader.log_entries(), load_public_key(pem), head)
        finally:
            reader.close()
    assert report.ok and report.receipts == 3
