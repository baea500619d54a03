"""The service's receipt log (lookup by raw id, pages, export), named-record predictions, the
offline API docs and the refusal of weak tokens; on SQLite and PostgreSQL where a store is
involved."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
from datetime import datetime, timedelta

import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import FAST, classification_data, schema_ids, user_ids

from forgetting import QSSClassifier
from forgetting.service import ServiceConfig, create_app
from forgetting.service.config import TOKENS_ENV, ConfigError
from forgetting.store import DurableModel
from forgetting.store.receipt_log import csv_cell, csv_lines

TOKEN = "vXYjuqBkOab0YCDe5MXeLB-5np8ZJ0d2"  # made by secrets.token_urlsafe(24)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NAMES = [f"f{i}" for i in range(6)]


@pytest.fixture
def served(db):
    """A fitted store (string ids user-00000..., named columns f0..f5) and a client."""
    X, y = classification_data()
    ids = user_ids(len(y))
    model = DurableModel.create(db, QSSClassifier(**FAST), X, y, ids, feature_names=NAMES)
    model.wait_for_rebuilds()
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
    yield model, client, X, y, ids
    model.close()


def test_a_forgotten_id_is_found_by_its_raw_id(served):
    model, client, X, y, ids = served
    victim = schema_ids(model.estimator, 1)[0]
    receipt = client.post("/forget", json={"ids": [victim]}, headers=AUTH).json()
    r = client.get("/receipts", params={"id": victim}, headers=AUTH)
    assert r.status_code == 200, r.text
    found = r.json()
    assert found["status"] == "forgotten" and found["rebuild_pending"] is False
    assert found["id_hash"] == receipt["id_hashes"][0]
    (stored,) = found["receipts"]
    for field in ("timestamp", "state_digest", "instances_hit", "operation", "scope"):
        assert stored[field] == receipt[field]
    assert 1 in stored["instances_hit"]


def test_never_seen_and_present_answer_differently(served):
    model, client, X, y, ids = served
    never = client.get("/receipts", params={"id": "nobody-at-all"}, headers=AUTH)
    present = client.get("/receipts", params={"id": ids[3]}, headers=AUTH)
    assert never.status_code == present.status_code == 404
    assert never.json()["status"] == "never_seen" and "never present" in never.json()["detail"]
    assert present.json()["status"] == "present" and "not forgotten" in present.json()["detail"]
    # the id's type: "42" is the integer 42 under auto, the string under id_type=str
    auto = client.get("/receipts", params={"id": "42"}, headers=AUTH).json()
    text = client.get("/receipts", params={"id": "42", "id_type": "str"}, headers=AUTH).json()
    assert auto["id_hash"] != text["id_hash"]
    bad = client.get("/receipts", params={"id": "x1", "id_type": "int"}, headers=AUTH)
    assert bad.status_code == 422 and "id" in bad.json()["detail"]


def test_pages_are_stable_filtered_and_exported(served):
    model, client, X, y, ids = served
    for i in range(5):
        client.post("/forget", json={"ids": [ids[40 + i]]}, headers=AUTH)
    client.post(
        "/insert", json={"X": X[:1].tolist(), "y": [int(y[0])], "ids": ["n-1"]}, headers=AUTH
    )
    whole = client.get("/receipts", params={"limit": 100}, headers=AUTH).json()
    assert whole["next_cursor"] is None and len(whole["receipts"]) == 6
    pages, cursor = [], 0
    while cursor is not None:
        page = client.get("/receipts", params={"limit": 2, "cursor": cursor}, headers=AUTH)
        pages += page.json()["receipts"]
        cursor = page.json()["next_cursor"]
    assert pages == whole["receipts"]
    forgets = client.get("/receipts", params={"operation": "forget"}, headers=AUTH).json()
    assert len(forgets["receipts"]) == 5
    first = whole["receipts"][0]["timestamp"]
    after_first = (datetime.fromisoformat(first) + timedelta(microseconds=1)).isoformat()
    later = client.get("/receipts", params={"since": after_first}, headers=AUTH).json()
    assert later["receipts"] == whole["receipts"][1:]
    at_first = client.get("/receipts", params={"until": first}, headers=AUTH).json()
    assert at_first["receipts"] == []
    day = first[:10]
    assert (
        client.get("/receipts", params={"until": day}, headers=AUTH).json()["receipts"]
        == (whole["receipts"])
    )
    for bad in ({"since": "last week"}, {"operation": "erase"}, {"limit": 0}, {"cursor": -1}):
        assert client.get("/receipts", params=bad, headers=AUTH).status_code == 422, bad

    exported = client.get("/receipts/export", params={"format": "json"}, headers=AUTH)
    assert exported.status_code == 200 and "attachment" in exported.headers["content-disposition"]
    chain = ("prev_hash", "signature")  # the signed log's own fields, for verify-log
    entries = json.loads(exported.text)
    assert [entry["seq"] for entry in entries] == list(range(1, len(entries) + 1))
    assert all(len(entry["signature"]) == 128 for entry in entries)
    assert [{k: v for k, v in e.items() if k not in chain} for e in entries] == whole["receipts"]
    table = client.get("/receipts/export", params={"format": "csv"}, headers=AUTH)
    assert table.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(table.text)))
    assert [int(r["seq"]) for r in rows] == [r["seq"] for r in whole["receipts"]]
    assert rows[0]["state_digest"] == whole["receipts"][0]["state_digest"]
    only = client.get("/receipts/export", params={"operation": "insert"}, headers=AUTH)
    assert len(list(csv.DictReader(io.StringIO(only.text)))) == 1


def test_no_receipt_route_answers_without_a_token(served):
    model, client, X, y, ids = served
    client.post("/forget", json={"ids": [ids[0]]}, headers=AUTH)
    for path, params in (
        ("/receipts", {"id": ids[0]}),
        ("/receipts", {}),
        ("/receipts/export", {"format": "csv"}),
        ("/receipts/export", {"format": "json"}),
    ):
        r = client.get(path, params=params)
        assert r.status_code == 401, (path, params)
        assert "user-" not in r.text and not re.search(r"[0-9a-f]{32}", r.text)
        wrong = client.get(path, params=params, headers={"Authorization": "Bearer " + "x" * 40})
        assert wrong.status_code == 401


def test_lookups_need_a_token_even_when_reads_by_hash_are_open(tmp_path):
    X, y = classification_data(n=120)
    estimator = QSSClassifier(**FAST, secret_key=b"a secret key of 32 bytes, really")
    ids = [f"s{i}" for i in range(len(y))]
    with DurableModel.create(str(tmp_path / "secret.db"), estimator, X, y, ids) as model:
        config = ServiceConfig(tokens=(TOKEN,), open_receipts=True)
        client = TestClient(create_app(model, config))
        receipt = client.post("/forget", json={"ids": ["s5"]}, headers=AUTH).json()
        assert client.get(f"/receipts/{receipt['id_hashes'][0]}").status_code == 200
        assert client.get("/receipts", params={"id": "s5"}).status_code == 401
        assert client.get("/receipts").status_code == 401
        assert client.get("/receipts/export").status_code == 401


def test_csv_cells_that_start_a_formula_are_escaped(tmp_path):
    assert csv_cell("=1+2") == "'=1+2" and csv_cell("@SUM(A1)") == "'@SUM(A1)"
    assert csv_cell("+1") == "'+1" and csv_cell("-1") == "'-1" and csv_cell("\t=x") == "'\t=x"
    assert csv_cell("forget") == "forget" and csv_cell([1, 2]) == "1 2" and csv_cell(None) == ""
    text = "".join(csv_lines([{"seq": 1, "scope": '=HYPERLINK("http://evil")', "n_rows": 1}]))
    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert row["scope"].startswith("'=")
    # end to end: a receipt altered in the database comes out escaped
    X, y = classification_data(n=120)
    path = str(tmp_path / "altered.db")
    ids = [f"a{i}" for i in range(len(y))]
    with DurableModel.create(path, QSSClassifier(**FAST), X, y, ids) as model:
        model.forget(["a1"])
    with sqlite3.connect(path) as db:
        (body,) = db.execute("SELECT body FROM receipts").fetchone()
        altered = {**json.loads(body), "scope": "=cmd|' /C calc'!A0", "operation": "@x"}
        db.execute("UPDATE receipts SET body = ?", (json.dumps(altered),))
    with DurableModel.open(path) as model:
        client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
        table = client.get("/receipts/export", headers=AUTH).text
    (row,) = list(csv.DictReader(io.StringIO(table)))
    assert row["scope"] == "'=cmd|' /C calc'!A0" and row["operation"] == "'@x"


def test_a_damaged_log_is_a_409_not_a_503(tmp_path):
    X, y = classification_data(n=120)
    path = str(tmp_path / "damaged.db")
    with DurableModel.create(path, QSSClassifier(**FAST), X, y, list(range(len(y)))) as model:
        model.forget([3])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE receipts SET body = '{not json'")
    with DurableModel.open(path) as model:
        client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
        for path_, params in (
            ("/receipts", {}),
            ("/receipts", {"id": "3"}),
            ("/receipts/export", {}),
        ):
            r = client.get(path_, params=params, headers=AUTH)
            assert r.status_code == 409 and "damaged" in r.json()["detail"], (path_, r.text)
        assert client.get("/health").status_code == 200


def test_predict_takes_named_records_matched_by_name(served):
    model, client, X, y, ids = served
    arrays = client.post("/predict", json={"X": X[:5].tolist()}, headers=AUTH).json()
    shuffled = [dict(reversed(list(zip(NAMES, row, strict=True)))) for row in X[:5].tolist()]
    named = client.post("/predict", json={"rows": shuffled}, headers=AUTH)
    assert named.status_code == 200, named.text
    assert named.json() == arrays
    assert np.array_equal(named.json()["predictions"], model.predict(X[:5]))
    missing = client.post("/predict", json={"rows": [{n: 0.0 for n in NAMES[1:]}]}, headers=AUTH)
    assert missing.status_code == 422 and "rows[0] lacks" in missing.json()["detail"]
    assert "f0" in missing.json()["detail"]
    extra = {**dict.fromkeys(NAMES, 0.0), "age": 1.0}
    unknown = client.post("/predict", json={"rows": [extra]}, headers=AUTH)
    assert unknown.status_code == 422 and "age" in unknown.json()["detail"]


def test_docs_load_no_external_asset(served):
    model, client, X, y, ids = served
    page = client.get("/docs")
    assert page.status_code == 200
    html = page.text
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    urls = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", html)
    assert urls and all(u.startswith("/") or u.startswith("data:") for u in urls), urls
    for url in urls:
        if url.startswith("/"):
            r = client.get(url)
            assert r.status_code == 200 and len(r.content) > 1000, url
    js = client.get("/docs/assets/swagger-ui-bundle.js")
    assert js.headers["content-type"].startswith("text/javascript")
    assert "SwaggerUIBundle" in js.text
    assert client.get("/redoc").status_code == 404


@pytest.mark.parametrize(
    "token,why",
    [
        ("change-me-16-chars-min", "placeholder"),
        ("your-token-goes-here-please", "placeholder"),
        ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "guessable"),
        ("abcdefghijklmnopqrstuvwxyz012345", "guessable"),
        ("sunshine12345678901234", "guessable"),
        ("xk9Q-xk9Q-xk9Q-xk9Q-xk9Q-xk9Q-", "guessable"),
    ],
)
def test_weak_tokens_are_refused_with_how_to_make_one(token, why, tmp_path):
    with pytest.raises(ConfigError) as err:
        ServiceConfig(tokens=(token,))
    message = str(err.value)
    assert why in message and "secrets.token_urlsafe(32)" in message
    assert token not in message
    with pytest.raises(ConfigError, match=why):
        ServiceConfig.load(environ={TOKENS_ENV: token})
