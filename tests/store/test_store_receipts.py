"""The receipt log of a store as an operator reads it: lookup by raw id, filtered pages,
exports (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from helpers import FAST, classification_data, schema_ids, user_ids

from forgetting import QSSClassifier
from forgetting.store import DurableModel, receipt_log
from forgetting.store.receipt_log import ReceiptFilter, parse_time


@pytest.fixture
def store(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**FAST), X, y, ids)
    model.wait_for_rebuilds()
    yield model, X, y, ids
    model.close()


def test_lookup_by_raw_id_tells_forgotten_present_and_never_seen(store):
    model, X, y, ids = store
    victim = schema_ids(model.estimator, 0)[0]
    receipt = model.forget([victim])
    found = model.lookup(victim)
    assert found["status"] == "forgotten"
    assert found["id_hash"] == model.estimator.engine_.receipt_hash(victim)
    assert found["receipts"][-1]["state_digest"] == receipt["state_digest"]
    assert found["receipts"][-1]["timestamp"] == receipt["timestamp"]
    assert found["receipts"][-1]["instances_hit"] == receipt["instances_hit"]
    assert 0 in found["receipts"][-1]["instances_hit"]
    kept = next(i for i in ids if i != victim)
    assert model.lookup(kept)["status"] == "present"
    assert model.lookup(kept)["receipts"] == []
    assert model.lookup("nobody-ever")["status"] == "never_seen"
    # the id's type is part of it: 1 and "1" are different ids
    assert model.lookup(1)["id_hash"] != model.lookup("1")["id_hash"]


def test_rebuild_pending_follows_the_instances_hit(db):
    X, y = classification_data()
    ids = user_ids(len(y))
    params = {**FAST, "rebuild": "background"}
    with DurableModel.create(db, QSSClassifier(**params), X, y, ids) as model:
        model.wait_for_rebuilds()
        victim = schema_ids(model.estimator, 0)[0]
        model.forget([victim])
        model.wait_for_rebuilds()
        assert model.lookup(victim)["rebuild_pending"] is False


def test_pages_are_stable_and_filtered(store):
    model, X, y, ids = store
    for i in range(7):
        model.forget([ids[10 + i]])
    model.insert(X[:2], y[:2], ["new-a", "new-b"])
    everything, end = model.receipts(limit=100)
    assert end is None and len(everything) == 8
    assert [r["seq"] for r in everything] == sorted(r["seq"] for r in everything)
    pages, cursor = [], 0
    while True:
        items, cursor = model.receipts(after=cursor, limit=3)
        pages += items
        if cursor is None:
            break
    assert pages == everything
    forgets, _ = model.receipts(ReceiptFilter(operation="forget"))
    assert len(forgets) == 7 and {r["operation"] for r in forgets} == {"forget"}
    inserts, _ = model.receipts(ReceiptFilter(operation="insert"))
    assert len(inserts) == 1 and inserts[0]["n_rows"] == 2
    first = parse_time(everything[0]["timestamp"])
    later, _ = model.receipts(ReceiptFilter(since=first + timedelta(microseconds=1)))
    assert later == everything[1:]
    assert model.receipts(ReceiptFilter(until=first))[0] == []
    day = first.date().isoformat()
    assert model.receipts(ReceiptFilter(until=parse_time(day, end=True)))[0] == everything
    assert model.receipts(ReceiptFilter(since=datetime.now(UTC) + timedelta(days=1)))[0] == []
    hit = everything[0]["instances_hit"]
    for r in hit:
        assert everything[0] in model.receipts(ReceiptFilter(instance=r))[0]
    assert list(model.iter_receipts(ReceiptFilter(operation="forget"))) == forgets


def test_a_rare_filter_answers_short_pages_with_a_cursor(store, monkeypatch):
    model, X, y, ids = store
    for i in range(5):
        model.forget([ids[20 + i]])
    monkeypatch.setattr(receipt_log, "BATCH", 2)
    monkeypatch.setattr(receipt_log, "MAX_SCANNED", 2)
    items, cursor = model.receipts(ReceiptFilter(operation="insert"), limit=10)
    assert items == [] and cursor is not None
    seen = 0
    while cursor is not None:
        items, cursor = model.receipts(ReceiptFilter(operation="insert"), after=cursor)
        seen += len(items)
    assert seen == 0
    assert len(list(model.iter_receipts())) == 5


def test_bad_filters_and_cursors_are_refused():
    with pytest.raises(ValueError, match="operation"):
        ReceiptFilter(operation="delete")
    with pytest.raises(ValueError, match="scope"):
        ReceiptFilter(scope="row")
    with pytest.raises(ValueError, match="instance"):
        ReceiptFilter(instance=-1)
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_time("yesterday")
    with pytest.raises(ValueError, match="limit"):
        receipt_log.page(lambda a, n: [], ReceiptFilter(), limit=0)
    with pytest.raises(ValueError, match="cursor"):
        receipt_log.page(lambda a, n: [], ReceiptFilter(), after=-3)
    assert parse_time("2026-12-05", end=True) == datetime(2026, 12, 6, tzinfo=UTC)
    assert parse_time("2026-12-05T10:00:00") == datetime(2026, 12, 5, 10, tzinfo=UTC)


def test_label_mode_forgotten_rows_are_held_but_forgotten(db):
    """In label mode a forget removes the label and keeps the inputs: the row is still held,
    and the lookup says forgotten (scope label), not present."""
    X, y = classification_data()
    ids = user_ids(len(y))
    with DurableModel.create(db, QSSClassifier(**FAST, mode="label"), X, y, ids) as model:
        model.forget([ids[5]])
        found = model.lookup(ids[5])
        assert found["status"] == "forgotten" and found["receipts"][-1]["scope"] == "label"
        assert model.receipts(ReceiptFilter(scope="label"))[0][0]["seq"] == 1
        assert model.receipts(ReceiptFilter(scope="instance"))[0] == []


# -- one Receipt type ----------------------------------------------------------------------


def test_the_store_returns_the_estimators_receipt_type(store):
    """DurableModel.forget/insert return a Receipt like the estimator's; a retried deletion
    returns the stored receipt marked already_forgotten; the dict shape is what is stored."""
    from forgetting.receipts import Receipt

    model, X, y, ids = store
    first = model.forget([ids[3]])
    assert isinstance(first, Receipt) and first.operation == "forget" and first.n_rows == 1
    assert not first.already_forgotten and "already_forgotten" not in first.to_dict()
    again = model.forget([ids[3]])
    assert isinstance(again, Receipt) and again.already_forgotten
    assert again.id_hashes == first.id_hashes and again["id_hashes"] == list(first.id_hashes)
    partly = model.forget([ids[3], ids[4]])
    assert partly.n_rows == 1 and partly.already_forgotten_ids == 1
    inserted = model.insert(X[:1], y[:1], ["brand-new"])
    assert isinstance(inserted, Receipt) and inserted.operation == "insert"
    assert Receipt.from_dict(inserted.to_dict()) == inserted


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: {**d, "n_rows": "many"}, "n_rows"),
        (lambda d: {k: v for k, v in d.items() if k != "state_digest"}, "state_digest"),
        (lambda d: {**d, "id_hashes": [1, 2]}, "id_hashes"),
        (lambda d: {**d, "rebuild_started": 1}, "rebuild_started"),
        (lambda d: {**d, "extra": 0}, "extra"),
        (lambda d: [d], "object"),
    ],
)
def test_a_receipt_read_back_is_checked_field_by_field(change, match):
    from forgetting.receipts import Receipt

    X, y = classification_data()
    receipt = QSSClassifier(**FAST).fit(X, y).forget([5]).to_dict()
    assert Receipt.from_dict(receipt).to_dict() == receipt
    with pytest.raises(ValueError, match=match):
        Receipt.from_dict(change(receipt))
