"""Who and why on every receipt, and the signed, hash-chained receipt log
(forgetting.store.signing), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from helpers import FAST, classification_data, user_ids

from forgetting import ExactForestClassifier, QSSClassifier
from forgetting.receipts import Receipt
from forgetting.store import DurableModel


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
