"""The service under hostile input and load (issue 40): a tampered receipt in the store, a
float label for an integer-labelled classifier, huge unknown ids, and a flood of slow
connections beyond the process's file limit.

Runs against the real DurableModel (SQLite in a temp dir); the flood test runs
``forgetting serve`` in a subprocess with a lowered RLIMIT_NOFILE.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import FAST, classification_data
from fastapi.testclient import TestClient

from forgetting import QSSClassifier
from forgetting.ids import listing
from forgetting.service import ServiceConfig, create_app
from forgetting.store.durable import DurableModel

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _ids(n: int) -> list:
    return [i if i % 2 == 0 else f"u{i}" for i in range(n)]


@pytest.fixture
def served(tmp_path):
    X, y = classification_data()
    path = tmp_path / "s.db"
    model = DurableModel.create(str(path), QSSClassifier(**FAST), X, y, _ids(len(y)))
    client = TestClient(
        create_app(model, ServiceConfig(tokens=(TOKEN,))), raise_server_exceptions=False
    )
    yield model, client, path, X, y
    model.close()


# -- a tampered receipt ---------------------------------------------------------------------


def _valid_receipt(client) -> tuple[str, dict]:
    r = client.post("/forget", json={"ids": [8]}, headers=AUTH)
    assert r.status_code == 200, r.text
    receipt = r.json()
    return receipt["id_hashes"][0], receipt


def _tamper(path, body: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE receipts SET body = ?", (body,))


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


TAMPERED = {
    "not JSON": lambda r: "not json at all",
    "nested past the recursion limit": lambda r: _deep(100_000),
    "deep but parseable": lambda r: json.dumps({**r, "extra": 0})[:-1] + f', "x": {_deep(600)}}}',
    "wrong types": lambda r: json.dumps({**r, "n_rows": "many", "rebuild_started": "yes"}),
    "missing fields": lambda r: json.dumps({"operation": "forget"}),
    "a list, not an object": lambda r: json.dumps([r]),
    "another row's hashes": lambda r: json.dumps({**r, "id_hashes": ["ab" * 32]}),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_receipt_is_a_409_in_one_line(served, case):
    model, client, path, X, _ = served
    id_hash, receipt = _valid_receipt(client)
    assert client.get(f"/receipts/{id_hash}", headers=AUTH).json() == receipt
    _tamper(path, TAMPERED[case](receipt))
    r = client.get(f"/receipts/{id_hash}", headers=AUTH)
    assert r.status_code == 409, (r.status_code, r.text[:300])
    detail = r.json()["detail"]
    assert "damaged" in detail and id_hash in detail
    assert "\n" not in detail and len(detail) < 500
    # The service keeps serving.
    assert client.get("/health").status_code == 200
    assert client.post("/predict", json={"X": X[:2].tolist()}).status_code == 200


def test_a_retried_forget_over_a_tampered_receipt_is_a_409(served):
    """Retrying a forget returns the stored receipt: a damaged one is refused, not a 500."""
    model, client, path, _, _ = served
    _, receipt = _valid_receipt(client)
    _tamper(path, json.dumps({**receipt, "n_rows": "many"}))
    digest = model.state_digest()
    r = client.post("/forget", json={"ids": [8]}, headers=AUTH)
    assert r.status_code == 409 and "damaged" in r.json()["detail"], r.text[:300]
    assert model.state_digest() == digest


# -- labels ---------------------------------------------------------------------------------


def test_a_float_label_is_refused_by_an_integer_labelled_classifier(served):
    """JSON 1.0 is not the class 1: the types must match, as the schema's strict types say
    everywhere else (issue 40). Nothing changes; the integer is accepted."""
    model, client, _, X, _ = served
    assert model.classes == [0, 1, 2]
    digest, rows = model.state_digest(), model.stats()["n_rows"]
    for y in ([1.0], [1.5], ["1"]):
        r = client.post("/insert", json={"X": X[:1].tolist(), "y": y, "ids": ["n"]}, headers=AUTH)
        assert r.status_code == 422, (y, r.text)
        assert "y[0]" in r.json()["detail"] and "integer" in r.json()["detail"], r.text
    assert model.state_digest() == digest and model.stats()["n_rows"] == rows
    r = client.post("/insert", json={"X": X[:1].tolist(), "y": [1], "ids": ["n"]}, headers=AUTH)
    assert r.status_code == 200, r.text


def test_a_number_is_refused_by_a_string_labelled_classifier(tmp_path):
    X, y = classification_data()
    names = [["a", "b", "c"][int(v)] for v in y]
    model = DurableModel.create(
        str(tmp_path / "s.db"), QSSClassifier(**FAST), X, names, _ids(len(y))
    )
    with model:
        client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
        for label in (1, 1.0):
            r = client.post(
                "/insert", json={"X": X[:1].tolist(), "y": [label], "ids": ["n"]}, headers=AUTH
            )
            assert r.status_code == 422 and "string" in r.json()["detail"], r.text
        r = client.post(
            "/insert", json={"X": X[:1].tolist(), "y": ["b"], "ids": ["n"]}, headers=AUTH
        )
        assert r.status_code == 200, r.text


# -- long ids -------------------------------------------------------------------------------


def test_unknown_long_ids_give_a_short_answer(served):
    model, client, _, _, _ = served
    ids = ["z" * 500 + str(i) for i in range(40)]
    r = client.post("/forget", json={"ids": ids}, headers=AUTH)
    assert r.status_code == 404
    detail = r.json()["detail"]
    assert "unknown ids" in detail and "(501 characters)" in detail and "30 more" in detail
    assert len(detail) < 1_500, len(detail)
    assert len(listing(["q" * 100_000] * 50)) < 1_000
