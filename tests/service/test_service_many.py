"""Several models behind one service, and who asked and why: named operators' tokens, one
deletion request for every model (each model's receipt naming the operator and the reason),
a failing model leaving the others' deletions durable, ``?model=`` for the rest, and the
console's "find" and deletion across models. On SQLite."""

from __future__ import annotations

import argparse
import re

import pytest
from fastapi.testclient import TestClient
from helpers import FAST, classification_data, user_ids

from forgetting import QSSClassifier
from forgetting.service import ConfigError, ServiceConfig, create_app
from forgetting.service.config import derived_name
from forgetting.store import DurableModel
from forgetting.store.errors import StoreError

TOKEN = "vXYjuqBkOab0YCDe5MXeLB-5np8ZJ0d2"  # made by secrets.token_urlsafe(24)
OTHER = "qczNMV6IxxXla9sA4rWrtXGWErBritFe"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REASON = "GDPR art. 17 request #1234"


def make(path, ids) -> DurableModel:
    X, y = classification_data()
    return DurableModel.create(str(path), QSSClassifier(**FAST), X, y, ids)


@pytest.fixture
def two(tmp_path):
    """Two stores (crm, billing) holding the same people, but billing lacks the last 40,
    served together by one app whose token belongs to the operator alice."""
    ids = user_ids(240)
    crm = make(tmp_path / "crm.db", ids)
    billing = make(tmp_path / "billing.db", ids[:200] + [f"other-{i}" for i in range(40)])
    config = ServiceConfig(tokens=(TOKEN, OTHER), operators=("alice",))
    client = TestClient(create_app({"crm": crm, "billing": billing}, config))
    yield crm, billing, client, ids, tmp_path
    crm.close()
    billing.close()


# -- operators -------------------------------------------------------------------------------


def test_token_files_name_their_operators(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"# the privacy team\nalice {TOKEN}\n{OTHER}\n")
    config = ServiceConfig.load(token_file=path, environ={})
    assert config.tokens == (TOKEN, OTHER)
    assert config.operators == ("alice", derived_name(OTHER))
    assert re.fullmatch(r"token-[0-9a-f]{8}", derived_name(OTHER))
    assert OTHER not in derived_name(OTHER) and OTHER[:8] not in derived_name(OTHER)
    assert config.operator_of(TOKEN) == "alice" and config.operator_of("x" * 32) is None
    assert TOKEN not in repr(config) and "alice" not in repr(config)
    env = ServiceConfig.load(environ={"FORGETTING_TOKENS": f"bob {TOKEN}"})
    assert env.operators == ("bob",)


@pytest.mark.parametrize(
    "line, fragment",
    [
        (f"al ice {TOKEN}", "words"),
        (f"-alice {TOKEN}", "operator's name"),
        ("alice short", "shorter than"),
    ],
)
def test_bad_token_lines_are_refused_without_showing_the_token(tmp_path, line, fragment):
    path = tmp_path / "tokens"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError, match=fragment) as err:
        ServiceConfig.load(token_file=path, environ={})
    assert TOKEN not in str(err.value)


# -- one request, every model -----------------------------------------------------------------


def test_one_forget_reaches_every_model_holding_the_id(two):
    crm, billing, client, ids, _ = two
    person = ids[7]
    r = client.post("/forget", json={"ids": [person], "reason": REASON}, headers=AUTH)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["forgotten_in"] == ["crm", "billing"] and answer["failed_in"] == []
    for entry, model in zip(answer["models"], (crm, billing), strict=True):
        receipt = entry["receipt"]
        assert entry["status"] == "forgotten"
        assert receipt["operator"] == "alice" and receipt["reason"] == REASON
        assert receipt["state_digest"] == model.state_digest()
        assert model.lookup(person)["status"] == "forgotten"
    found = client.get("/receipts", params={"id": person}, headers=AUTH)
    assert found.status_code == 200, found.text
    by_model = {m["model"]: m for m in found.json()["models"]}
    assert set(by_model) == {"crm", "billing"}
    for entry in by_model.values():
        assert entry["status"] == "forgotten"
        assert entry["receipts"][-1]["operator"] == "alice"
        assert entry["receipts"][-1]["reason"] == REASON
    # a retry is safe: each model answers with its stored receipt
    again = client.post("/forget", json={"ids": [person]}, headers=AUTH).json()
    assert [m["receipt"]["already_forgotten"] for m in again["models"]] == [True, True]


def test_models_that_never_held_the_id_are_named(two):
    crm, billing, client, ids, _ = two
    only_crm = ids[230]
    digest = billing.state_digest()
    headers = {"Authorization": f"Bearer {OTHER}"}
    r = client.post("/forget", json={"ids": [only_crm, ids[3]]}, headers=headers)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["forgotten_in"] == ["crm", "billing"]
    crm_receipt, billing_receipt = (m["receipt"] for m in answer["models"])
    assert crm_receipt["n_rows"] == 2 and billing_receipt["n_rows"] == 1
    assert crm_receipt["operator"] == derived_name(OTHER) and "reason" not in crm_receipt
    r = client.post("/forget", json={"ids": [ids[231]]}, headers=AUTH)
    assert r.json()["not_held_in"] == ["billing"] and billing.state_digest() != digest
    nobody = client.post("/forget", json={"ids": ["nobody"]}, headers=AUTH)
    assert nobody.status_code == 404 and nobody.json()["not_held_in"] == ["crm", "billing"]


def test_a_failing_model_leaves_the_others_deletion_durable(two, monkeypatch):
    crm, billing, client, ids, tmp_path = two
    person = ids[11]
    digest = billing.state_digest()

    def broken(ids, *, erase_inputs=False, operator=None, reason=None):
        raise StoreError("disk I/O error")

    monkeypatch.setattr(billing, "forget", broken)
    r = client.post("/forget", json={"ids": [person], "reason": REASON}, headers=AUTH)
    assert r.status_code == 503 and r.headers["Retry-After"], r.text
    answer = r.json()
    assert answer["forgotten_in"] == ["crm"] and answer["failed_in"] == ["billing"]
    failed = answer["models"][1]
    assert failed["code"] == 503 and "disk I/O error" in failed["error"]
    assert billing.state_digest() == digest
    with DurableModel.open(str(tmp_path / "crm.db"), read_only=True) as reopened:
        assert reopened.lookup(person)["status"] == "forgotten"
        assert reopened.state_digest() == crm.state_digest()
        assert reopened.lookup(person)["receipts"][-1]["reason"] == REASON
    monkeypatch.undo()
    retry = client.post("/forget", json={"ids": [person]}, headers=AUTH)
    assert retry.status_code == 200 and retry.json()["failed_in"] == []


def test_routes_about_one_model_need_its_name(two):
    crm, _, client, ids, _ = two
    X, _ = classification_data()
    r = client.post("/predict", json={"X": X[:2].tolist()})
    assert r.status_code == 422 and "crm, billing" in r.json()["detail"]
    r = client.post("/predict", params={"model": "nope"}, json={"X": X[:2].tolist()})
    assert r.status_code == 404 and "crm, billing" in r.json()["detail"]
    r = client.post("/predict", params={"model": "crm"}, json={"X": X[:2].tolist()})
    assert r.status_code == 200 and len(r.json()["predictions"]) == 2
    assert client.get("/stats").status_code == 422
    assert client.get("/stats", params={"model": "crm"}).json()["n_rows"] == 240
    assert client.get("/receipts", headers=AUTH).status_code == 422
    assert client.get("/receipts/export", params={"model": "x"}, headers=AUTH).status_code == 404
    one = client.post("/forget", params={"model": "crm"}, json={"ids": [ids[5]]}, headers=AUTH)
    assert one.status_code == 200 and one.json()["operator"] == "alice"
    assert client.get("/health").json()["models"].keys() == {"crm", "billing"}
    doc = client.get("/openapi.json").json()
    assert "crm, billing" in doc["info"]["description"]


def test_insert_records_the_operator_and_reason(two):
    crm, _, client, _, _ = two
    X, y = classification_data()
    body = {"X": X[:1].tolist(), "y": [int(y[0])], "ids": ["new-1"], "reason": "onboarding"}
    r = client.post("/insert", params={"model": "crm"}, json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["operator"] == "alice" and r.json()["reason"] == "onboarding"
    long = {**body, "ids": ["new-2"], "reason": "x" * 501}
    r = client.post("/insert", params={"model": "crm"}, json=long, headers=AUTH)
    assert r.status_code == 422 and "500" in r.json()["detail"]


def test_one_model_is_served_as_before_and_takes_its_name(tmp_path):
    ids = user_ids(240)
    model = make(tmp_path / "solo.db", ids)
    try:
        client = TestClient(create_app({"solo": model}, ServiceConfig(tokens=(TOKEN,))))
        X, _ = classification_data()
        assert client.post("/predict", json={"X": X[:1].tolist()}).status_code == 200
        r = client.post("/forget", json={"ids": [ids[0]], "reason": REASON}, headers=AUTH)
        assert r.status_code == 200 and r.json()["reason"] == REASON
        assert r.json()["operator"] == derived_name(TOKEN)
        assert "models" not in client.get("/health").json()
        named = client.get("/stats", params={"model": "solo"})
        assert named.status_code == 200
        assert client.get("/stats", params={"model": "other"}).status_code == 404
        missing = client.post("/forget", json={"ids": ["nobody"]}, headers=AUTH)
        assert missing.status_code == 404 and "nobody" in missing.json()["detail"]
    finally:
        model.close()


def test_serve_names_models_after_their_stores(tmp_path):
    from forgetting.cli.errors import CLIError
    from forgetting.cli.serve import served_stores

    args = argparse.Namespace(stores=["a/crm.db", "b/billing.db"], secret_key_file=["k"])
    assert [(n, o.secret_key_file) for n, o in served_stores(args)] == [
        ("crm", "k"),
        ("billing", "k"),
    ]
    args.secret_key_file = ["k1", "k2"]
    assert [o.secret_key_file for _, o in served_stores(args)] == ["k1", "k2"]
    with pytest.raises(CLIError, match="2 --secret-key-file for 3"):
        served_stores(argparse.Namespace(stores=["a", "b", "c"], secret_key_file=["1", "2"]))
    with pytest.raises(CLIError, match="two stores are named 'crm'"):
        served_stores(argparse.Namespace(stores=["a/crm.db", "b/crm.db"], secret_key_file=None))


# -- the console ------------------------------------------------------------------------------


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def test_the_console_finds_and_forgets_a_person_in_every_model(two):
    crm, billing, client, ids, _ = two
    first = client.get("/")
    signed = client.post("/console/login", data={"token": TOKEN, "csrf": csrf_of(first.text)})
    assert 'id="operator">alice<' in signed.text
    person = ids[20]
    review = client.post(
        "/console/forget/confirm", data={"csrf": csrf_of(signed.text), "id": person}
    )
    assert 'name="reason"' in review.text and "every model that holds them" in review.text
    r = client.post(
        "/console/forget",
        data={"csrf": csrf_of(review.text), "ids": [person], "reason": REASON},
    )
    assert r.status_code == 200, r.text
    for name, model in (("crm", crm), ("billing", billing)):
        assert f'id="outcome-{name}"' in r.text and model.state_digest() in r.text
        assert model.lookup(person)["receipts"][-1]["operator"] == "alice"
    assert r.text.count(REASON) == 2
    found = client.get("/console/find", params={"id": person}).text
    assert 'id="status-crm" class="status">forgotten' in found
    assert 'id="status-billing" class="status">forgotten' in found
    assert found.count(REASON) == 2 and "alice" in found
    log = client.get("/console/log", params={"model": "billing"}).text
    assert REASON in log and 'id="model-active"' in log
    assert client.get("/console/log", params={"model": "nope"}).status_code == 404
    export = client.get("/console/export", params={"model": "crm", "format": "json"})
    assert export.status_code == 200 and REASON in export.text
    assert "receipts-crm.json" in export.headers["content-disposition"]


def test_the_console_shows_times_as_the_operator_chose(two):
    crm, _, client, ids, _ = two
    receipt = crm.forget([ids[1]])
    first = client.get("/")
    client.post("/console/login", data={"token": TOKEN, "csrf": csrf_of(first.text)})
    utc = client.get("/console/find", params={"id": ids[1]}).text
    assert f'class="timestamp">{receipt["timestamp"]}<' in utc and "When (UTC)" in utc
    r = client.get("/console/times", params={"zone": "local", "back": "/console/log"})
    assert r.status_code == 200 and "local</strong>" in r.text  # followed back to the log
    local = client.get("/console/find", params={"id": ids[1]}).text
    assert "When (local time)" in local
    assert re.search(r'class="timestamp">\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d<', local)
    away = client.get(
        "/console/times", params={"back": "https://evil.example/"}, follow_redirects=False
    )
    assert away.headers["location"] == "/console/find"
    kept = client.get(
        "/console/times", params={"back": "/console/find?id=u-1"}, follow_redirects=False
    )
    assert kept.headers["location"] == "/console/find?id=u-1"
    assert "/console/times?zone=utc&amp;back=/console/find%3Fid%3D" in local


def test_console_wording_for_a_forest_beside_a_qss_model(tmp_path):
    """The health page explains each family's columns (a forest has no schema to persist),
    /docs names both families, instances read as numbers, and "Watch the rebuild" shows only
    when a deletion started one."""
    import numpy as np
    from helpers import outside_all_schemas, schema_ids

    from forgetting import ExactForestClassifier

    rng = np.random.default_rng(0)
    Xf = rng.normal(size=(300, 4)).astype(np.float32)
    yf = (Xf[:, 0] > 0).astype(int)
    forest = DurableModel.create(
        str(tmp_path / "trees.db"),
        ExactForestClassifier(n_estimators=3, random_state=2),
        Xf,
        yf,
        [f"f{i}" for i in range(300)],
    )
    qss = make(tmp_path / "crm.db", user_ids(240))
    try:
        app = create_app({"crm": qss, "trees": forest}, ServiceConfig(tokens=(TOKEN,)))
        client = TestClient(app)
        described = client.get("/openapi.json").json()["info"]["description"]
        assert "2 models (QSS model, exact random forest)" in described
        first = client.get("/")
        signed = client.post("/console/login", data={"token": TOKEN, "csrf": csrf_of(first.text)})
        trees = client.get("/console/health", params={"model": "trees"}).text
        assert "no schema to persist" in trees and "<th>Persisted</th>" not in trees
        crm = client.get("/console/health", params={"model": "crm"}).text
        assert "<th>Persisted</th>" in crm and "Instance rebuilds finished since" in crm
        assert "Rebuilds run" not in crm
        quiet = outside_all_schemas(qss.estimator)[0]
        review = client.post(
            "/console/forget/confirm", data={"csrf": csrf_of(signed.text), "id": quiet}
        )
        page = client.post(
            "/console/forget",
            data={"csrf": csrf_of(review.text), "ids": [quiet], "model": "crm"},
        ).text
        assert "Deletion committed" in page and "Watch the rebuild" not in page
        assert 'class="instances">none<' in page
        loud = schema_ids(qss.estimator, 0)[0]
        page = client.post(
            "/console/forget",
            data={"csrf": csrf_of(review.text), "ids": [loud], "model": "crm"},
        ).text
        assert "Watch the rebuild" in page and "/console/health?model=crm" in page
        assert re.search(r'class="instances">#0(, #\d)*<', page)
    finally:
        qss.close()
        forest.close()


def test_a_reason_is_text_in_every_page_that_shows_it(two):
    """A reason is the requester's free text: the console escapes it wherever it shows it
    (the deletion's outcome, find, the log), and the JSON keeps it exactly."""
    crm, _, client, ids, _ = two
    payload = '<script>alert("r")</script><img src=x onerror=alert(1)>'
    first = client.get("/")
    signed = client.post("/console/login", data={"token": TOKEN, "csrf": csrf_of(first.text)})
    person = ids[21]
    review = client.post(
        "/console/forget/confirm", data={"csrf": csrf_of(signed.text), "id": person}
    )
    r = client.post(
        "/console/forget",
        data={"csrf": csrf_of(review.text), "ids": [person], "reason": payload},
    )
    assert r.status_code == 200, r.text
    pages = [
        r.text,
        client.get("/console/find", params={"id": person}).text,
        client.get("/console/log", params={"model": "crm"}).text,
    ]
    for page in pages:
        assert payload not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(" in page
    assert crm.lookup(person)["receipts"][-1]["reason"] == payload
