"""The HTTP service: authentication, validation that never changes the model, exactness of
what is served after a forget, receipts, and the OpenAPI schema.

Runs against the real DurableModel (SQLite in a temp dir). If the store is missing or
incomplete the tests *fail* (``durable_model_class``), they are never skipped.
"""

from __future__ import annotations

import hmac
import json
import math
import threading
import time

import numpy as np
import pytest

# FastAPI and httpx are required test dependencies: an ImportError here must fail the run.
from fastapi.testclient import TestClient
from helpers import (
    FAST,
    HeldCommits,
    classification_data,
    outside_all_schemas,
    regression_data,
    wait_until,
)

from forgetting import QSSClassifier, QSSRegressor
from forgetting.service import ConfigError, ServiceConfig, create_app
from forgetting.service import auth as auth_module
from forgetting.service.config import TOKENS_ENV

TOKEN = "Sa72f-zcyWa7LXgKHf1FD8QmR98d0156"  # made by secrets.token_urlsafe(24)
OTHER = "qczNMV6IxxXla9sA4rWrtXGWErBritFe"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def durable_model_class():
    """The real DurableModel, or a loud failure (never a skip) if it is not implemented."""
    try:
        from forgetting.store.durable import DurableModel
    except ImportError as err:  # pragma: no cover - only before the store lands
        pytest.fail(f"forgetting.store.durable.DurableModel is missing: {err}")
    missing = [
        m
        for m in ("create", "open", "forget", "insert", "receipt", "stats")
        if not hasattr(DurableModel, m)
    ]
    if missing:  # pragma: no cover
        pytest.fail(f"DurableModel is not implemented yet (missing {missing})")
    return DurableModel


def _ids(n: int) -> list:
    # Mixed integer and string ids: both kinds must travel through JSON unchanged.
    return [i if i % 2 == 0 else f"u{i}" for i in range(n)]


def make_store(tmp_path, task: str = "classification"):
    X, y = classification_data() if task == "classification" else regression_data()
    cls = QSSClassifier if task == "classification" else QSSRegressor
    model = durable_model_class().create(
        str(tmp_path / f"{task}.db"), cls(**FAST), X, y, _ids(len(y))
    )
    return model, X, y


@pytest.fixture
def store(tmp_path):
    model, X, y = make_store(tmp_path)
    yield model, X, y
    model.close()


@pytest.fixture
def client(store):
    model, _, _ = store
    return TestClient(create_app(model, ServiceConfig(tokens=(TOKEN, OTHER))))


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One store for the error-path tests: each of them asserts the model did not change."""
    model, X, y = make_store(tmp_path_factory.mktemp("shared"))
    app = create_app(model, ServiceConfig(tokens=(TOKEN,), max_batch=50))
    yield model, TestClient(app), X, y
    model.close()


def snapshot(model) -> tuple:
    stats = model.stats()
    return model.state_digest(), stats["n_rows"], json.dumps(stats, sort_keys=True, default=str)


# -- configuration --------------------------------------------------------------------------


def test_config_never_shows_tokens(tmp_path):
    config = ServiceConfig(tokens=(TOKEN, OTHER))
    for text in (repr(config), str(config), f"{config}"):
        assert TOKEN not in text and OTHER not in text
        assert "2 configured" in text
    with pytest.raises(ConfigError) as err:
        ServiceConfig(tokens=("short-secret",))
    assert "short-secret" not in str(err.value) and "16" in str(err.value)


def test_config_loads_file_and_environment(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"# rotated 2026-11\n{TOKEN}\n\n{OTHER}, {TOKEN}\n")
    third = "9WzkYL8d7DqnsPZTmFIL4Ofg7lFE-sxS"
    config = ServiceConfig.load(
        token_file=path, environ={TOKENS_ENV: f" {third} ,"}, open_reads=False, max_batch=7
    )
    assert set(config.tokens) == {TOKEN, OTHER, third}
    assert config.open_reads is False and config.max_batch == 7
    with pytest.raises(ConfigError, match="does not exist"):
        ServiceConfig.load(token_file=tmp_path / "absent", environ={})
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="holds no token"):
        ServiceConfig.load(token_file=empty, environ={})
    with pytest.raises(ConfigError, match="max_batch"):
        ServiceConfig(tokens=(TOKEN,), max_batch=0)


# -- authentication -------------------------------------------------------------------------


def test_mutations_need_a_valid_token(store, client):
    model, _, _ = store
    before = snapshot(model)
    r = client.post("/forget", json={"ids": [0]})
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    r = client.post("/forget", json={"ids": [0]}, headers={"Authorization": "Bearer nope-nope"})
    assert r.status_code == 401
    assert 'error="invalid_token"' in r.headers["www-authenticate"]
    assert "nope" not in r.text and TOKEN not in r.text
    r = client.post("/forget", json={"ids": [0]}, headers={"Authorization": f"Basic {TOKEN}"})
    assert r.status_code == 401
    r = client.post("/insert", json={"X": [[0.0] * 6], "y": [0], "ids": ["new"]})
    assert r.status_code == 401
    # Authentication comes before parsing: an anonymous malformed body is a 401, not a 422.
    r = client.post("/forget", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 401
    assert snapshot(model) == before
    # Any configured token works.
    r = client.post("/forget", json={"ids": [0]}, headers={"Authorization": f"Bearer {OTHER}"})
    assert r.status_code == 200, r.text
    r = client.post("/forget", json={"ids": [2]}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert model.stats()["n_rows"] == before[1] - 2


def test_comparison_is_constant_time_over_every_token(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(auth_module.hmac, "compare_digest", spy)
    tokens = (TOKEN, OTHER, "third-token-zzzzzzzzzzzzzzzz")
    assert auth_module.token_matches(TOKEN, tokens)  # matches the first ...
    assert len(calls) == 3  # ... and still compares against every token
    # Fixed-length digests are compared, so the time does not depend on the lengths either.
    assert all(a == b == 32 for a, b in calls)
    calls.clear()
    assert not auth_module.token_matches("x", tokens)
    assert len(calls) == 3


def test_requests_go_through_compare_digest(monkeypatch, store):
    model, _, _ = store
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(
        auth_module.hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b)
    )
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN, OTHER))))
    assert client.post("/forget", json={"ids": [0]}, headers=AUTH).status_code == 200
    assert len(calls) >= 2


def test_closed_reads_need_a_token(store):
    model, X, _ = store
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,), open_reads=False)))
    body = {"X": X[:2].tolist()}
    assert client.post("/predict", json=body).status_code == 401
    assert client.get("/stats").status_code == 401
    assert client.get("/receipts/" + "0" * 32).status_code == 401
    assert client.get("/health").status_code == 200  # liveness is always open
    assert client.post("/predict", json=body, headers=AUTH).status_code == 200
    assert client.get("/stats", headers=AUTH).status_code == 200
    assert client.get("/receipts/" + "0" * 32, headers=AUTH).status_code == 404


def test_open_reads_need_no_token(client, store):
    _, X, _ = store
    assert client.post("/predict", json={"X": X[:2].tolist()}).status_code == 200
    assert client.get("/stats").status_code == 200


# -- every 4xx leaves the model unchanged ---------------------------------------------------

_ROW = [0.5, -1.0, 0.25, 2.0, 0.0, 1.5]

BAD_REQUESTS = [
    # (name, method, path, body (dict or raw bytes), status, fragment of the message)
    ("predict-nan", "POST", "/predict", b'{"X": [[NaN, 1, 2, 3, 4, 5]]}', 422, "finite"),
    ("predict-inf", "POST", "/predict", b'{"X": [[Infinity, 1, 2, 3, 4, 5]]}', 422, "finite"),
    ("predict-width", "POST", "/predict", {"X": [_ROW, _ROW[:3]]}, 422, "X[1] has 3 values"),
    ("predict-string", "POST", "/predict", {"X": [["1"] + _ROW[1:]]}, 422, "X[0][0]"),
    ("predict-bool", "POST", "/predict", {"X": [[True] + _ROW[1:]]}, 422, "X[0][0]"),
    ("predict-flat", "POST", "/predict", {"X": _ROW}, 422, "X[0]"),
    ("predict-empty", "POST", "/predict", {"X": []}, 422, "X"),
    ("predict-missing", "POST", "/predict", {}, 422, "exactly one of X"),
    ("predict-both", "POST", "/predict", {"X": [_ROW], "rows": [{"a": 1.0}]}, 422, "one of X"),
    ("predict-rows-arrays", "POST", "/predict", {"rows": [_ROW]}, 422, "rows[0]"),
    ("predict-rows-unnamed", "POST", "/predict", {"rows": [{"a": 1.0}]}, 422, "without column"),
    ("predict-oversized", "POST", "/predict", {"X": [_ROW] * 51}, 413, "limit is 50"),
    ("malformed-json", "POST", "/predict", b'{"X": [[1, 2', 422, "malformed JSON"),
    ("forget-unknown", "POST", "/forget", {"ids": [4, "no-such-id"]}, 404, "no-such-id"),
    ("forget-duplicate", "POST", "/forget", {"ids": [4, 4]}, 422, "duplicate"),
    ("forget-empty", "POST", "/forget", {"ids": []}, 422, "ids"),
    ("forget-bool-id", "POST", "/forget", {"ids": [True]}, 422, "ids[0]"),
    ("forget-float-id", "POST", "/forget", {"ids": [4.5]}, 422, "ids[0]"),
    ("forget-not-list", "POST", "/forget", {"ids": "u1"}, 422, "ids"),
    ("forget-erase-exact", "POST", "/forget", {"ids": [4], "erase_inputs": True}, 422, "label"),
    ("forget-oversized", "POST", "/forget", {"ids": list(range(51))}, 413, "limit is 50"),
    ("forget-extra-field", "POST", "/forget", {"ids": [4], "force": True}, 422, "force"),
    ("forget-malformed", "POST", "/forget", b"[1, 2", 422, "malformed JSON"),
    ("insert-lengths", "POST", "/insert", {"X": [_ROW], "y": [0, 1], "ids": ["n1"]}, 422, "match"),
    ("insert-width", "POST", "/insert", {"X": [_ROW[:5]], "y": [0], "ids": ["n1"]}, 422, "5"),
    ("insert-unseen-label", "POST", "/insert", {"X": [_ROW], "y": [9], "ids": ["n1"]}, 422, "9"),
    ("insert-existing-id", "POST", "/insert", {"X": [_ROW], "y": [0], "ids": [4]}, 422, "4"),
    ("insert-nan", "POST", "/insert", b'{"X": [[NaN,0,0,0,0,0]], "y": [0], "ids": ["n"]}', 422, ""),
    (
        "insert-oversized",
        "POST",
        "/insert",
        {"X": [_ROW] * 51, "y": [0] * 51, "ids": [f"n{i}" for i in range(51)]},
        413,
        "limit",
    ),
    ("body-too-large", "POST", "/forget", b" " * (2 << 20), 413, "exceeds"),
    ("receipt-not-hex", "GET", "/receipts/not-a-hash", None, 422, "id_hash"),
    ("receipt-unknown", "GET", "/receipts/" + "ab" * 16, None, 404, "no receipt"),
]


@pytest.mark.parametrize(
    "name,method,path,body,code,fragment", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS]
)
def test_errors_change_nothing(shared, name, method, path, body, code, fragment):
    model, client, _, _ = shared
    before = snapshot(model)
    if isinstance(body, bytes):
        r = client.request(
            method, path, content=body, headers={**AUTH, "content-type": "application/json"}
        )
    else:
        r = client.request(method, path, json=body, headers=AUTH)
    assert r.status_code == code, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and fragment in detail, detail
    assert "Traceback" not in r.text
    assert snapshot(model) == before


def test_already_forgotten_is_an_idempotent_retry(client, store):
    model, _, _ = store
    first = client.post("/forget", json={"ids": ["u1", 6]}, headers=AUTH)
    assert first.status_code == 200, first.text
    digest = model.state_digest()
    again = client.post("/forget", json={"ids": ["u1", 6]}, headers=AUTH)
    assert again.status_code == 200, again.text
    assert again.json()["already_forgotten"] is True
    assert again.json()["id_hashes"] == first.json()["id_hashes"]
    assert model.state_digest() == digest


# -- exactness of what is served ------------------------------------------------------------


def test_predictions_reflect_an_acknowledged_forget(client, store):
    model, X, y = store
    ids = _ids(len(y))
    victims = ids[10:40]
    r = client.post("/forget", json={"ids": victims}, headers=AUTH)
    assert r.status_code == 200, r.text
    receipt = r.json()
    assert receipt["operation"] == "forget" and receipt["n_rows"] == len(victims)
    served = client.post("/predict", json={"X": X.tolist()}).json()

    keep = np.array([i not in set(victims) for i in ids])
    refit = QSSClassifier(**FAST).fit(X[keep], y[keep], [i for i in ids if i not in victims])
    # JSON floats round-trip exactly (shortest repr), so equality here is bitwise.
    assert np.array_equal(np.array(served["probabilities"]), refit.predict_proba(X))
    assert served["predictions"] == refit.predict(X).tolist()
    assert served["classes"] == refit.classes_.tolist()
    assert receipt["state_digest"] == refit.state_digest() == model.state_digest()


def test_receipts_lookup(client, store):
    r = client.post("/forget", json={"ids": [8, "u9"]}, headers=AUTH)
    assert r.status_code == 200
    receipt = r.json()
    assert len(receipt["id_hashes"]) == 2
    for h in receipt["id_hashes"]:
        # Receipt lookups need a token even with open reads (the key is derived here).
        assert client.get(f"/receipts/{h}").status_code == 401
        found = client.get(f"/receipts/{h}", headers=AUTH)
        assert found.status_code == 200
        assert found.json()["state_digest"] == receipt["state_digest"]
        assert found.json()["operation"] == "forget"
        assert client.get(f"/receipts/{h.upper()}", headers=AUTH).status_code == 200
    assert "u9" not in json.dumps(receipt)  # keyed hashes, never the ids


def test_insert_then_predict_and_stats(client, store):
    model, X, y = store
    n = model.stats()["n_rows"]
    body = {"X": X[:3].tolist(), "y": y[:3].tolist(), "ids": ["new-a", "new-b", 10_000]}
    r = client.post("/insert", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["operation"] == "insert" and r.json()["n_rows"] == 3
    stats = client.get("/stats").json()
    assert stats["n_rows"] == n + 3
    assert stats["state_digest"] == model.state_digest() == r.json()["state_digest"]
    assert len(stats["instances"]) == FAST["n_instances"]
    assert all(inst["valid"] for inst in stats["instances"])
    health = client.get("/health").json()
    assert health == {
        "status": "ok",
        "serving": True,
        "valid_instances": 3,
        "n_instances": 3,
        "version": health["version"],
    }


def test_regression_service(tmp_path):
    model, X, y = make_store(tmp_path, "regression")
    try:
        client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
        served = client.post("/predict", json={"X": X[:5].tolist()}).json()
        assert set(served) == {"predictions"}
        assert np.array_equal(np.array(served["predictions"]), model.predict(X[:5]))
        before = snapshot(model)
        r = client.post(
            "/insert", json={"X": [X[0].tolist()], "y": ["a"], "ids": ["r"]}, headers=AUTH
        )
        assert r.status_code == 422 and snapshot(model) == before
        r = client.post(
            "/insert", json={"X": [X[0].tolist()], "y": [1.5], "ids": ["r"]}, headers=AUTH
        )
        assert r.status_code == 200, r.text
        r = client.post("/forget", json={"ids": ["r", 0]}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert all(
            math.isfinite(v)
            for v in client.post("/predict", json={"X": X[:5].tolist()}).json()["predictions"]
        )
    finally:
        model.close()


# -- documentation --------------------------------------------------------------------------


def test_openapi_schema_documents_every_endpoint(client):
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    assert {"/predict", "/forget", "/insert", "/receipts/{id_hash}", "/stats", "/health"} <= set(
        paths
    )
    models = schema["components"]["schemas"]
    for name in (
        "PredictRequest",
        "PredictResponse",
        "ForgetRequest",
        "InsertRequest",
        "ReceiptResponse",
        "StatsResponse",
        "HealthResponse",
        "ErrorResponse",
    ):
        assert name in models, name
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert paths["/forget"]["post"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in paths["/predict"]["post"]  # open reads
    assert {"401", "404", "413", "422"} <= set(paths["/forget"]["post"]["responses"])
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# -- micro-batching of predictions ----------------------------------------------------------


def test_batcher_merges_concurrent_requests_and_keeps_each_result():
    import threading

    from forgetting.service.batcher import PredictBatcher

    sizes = []

    def fn(X):
        sizes.append(len(X))
        time.sleep(0.05)
        if np.any(X < 0):
            raise ValueError("negative rows")
        return X[:, 0] * 2, X * 3

    batcher = PredictBatcher(fn, max_rows=1000)
    results, errors = {}, {}

    def request(k):
        X = np.full((k + 1, 2), -1.0 if k == 5 else float(k))
        try:
            results[k] = batcher(X)
        except ValueError as err:
            errors[k] = str(err)

    threads = [threading.Thread(target=request, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert set(results) == set(range(12)) - {5} and errors == {5: "negative rows"}
    for k, (labels, proba) in results.items():
        assert np.array_equal(labels, np.full(k + 1, 2.0 * k))
        assert np.array_equal(proba, np.full((k + 1, 2), 3.0 * k))
    assert batcher.calls < 12  # merged (the failing batch is retried row-group by row-group)


def test_concurrent_predictions_are_bitwise_those_of_the_model(client, store):
    from concurrent.futures import ThreadPoolExecutor

    model, X, _ = store
    chunks = [X[i : i + 7] for i in range(0, 140, 7)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(lambda c: client.post("/predict", json={"X": c.tolist()}).json(), chunks)
        )
    for chunk, answer in zip(chunks, answers, strict=True):
        assert np.array_equal(np.array(answer["probabilities"]), model.predict_proba(chunk))
        assert answer["predictions"] == model.predict(chunk).tolist()


def test_labels_from_probabilities_fall_back_on_ties():
    from forgetting.service.convert import labels_from_proba

    asked = []

    def predict(rows):
        asked.extend(rows.tolist())
        return np.array(["tie"] * len(rows))

    proba = np.array([[0.1, 0.9], [0.5, 0.5], [np.nan, np.nan], [0.7, 0.3]])
    labels = labels_from_proba(proba, ["a", "b"], predict)
    assert labels.tolist() == ["b", "tie", "tie", "a"] and asked == [1, 2]
    assert labels_from_proba(proba[[0, 3]], [3, 7], predict).tolist() == [7, 3]
    mixed = labels_from_proba(proba[:2], [3, 7], lambda rows: np.array([5] * len(rows)))
    from forgetting.service.convert import jsonable

    assert jsonable(mixed) == [7, 5] and all(type(v) is int for v in jsonable(mixed))


def test_concurrent_forget_requests_share_the_store_commits(tmp_path, monkeypatch):
    """Forget requests that arrive together reach the model together (it orders them and
    commits them as one group): here the first request's commit is held open and five more
    must queue in the model meanwhile — one at a time behind the app's mutation lock, they
    could not. Each gets its own receipt; two commits in all; the store verifies."""
    model, _, _ = make_store(tmp_path)
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
    held = HeldCommits(monkeypatch)
    victims = outside_all_schemas(model.estimator)[:6]
    responses: dict = {}

    def post(row_id):
        responses[row_id] = client.post("/forget", json={"ids": [row_id]}, headers=AUTH)

    threads = [threading.Thread(target=post, args=(victims[0],))]
    threads[0].start()
    assert held.entered.wait(30)
    threads += [threading.Thread(target=post, args=(v,)) for v in victims[1:]]
    for thread in threads[1:]:
        thread.start()
    wait_until(lambda: model.queued_writes == len(victims) - 1)  # together in the model
    held.release.set()
    for thread in threads:
        thread.join(60)
    assert all(responses[v].status_code == 200 for v in victims), responses
    assert held.commits == 2
    hashes = {responses[v].json()["id_hashes"][0] for v in victims}
    assert len(hashes) == len(victims)
    model.wait_for_rebuilds()
    assert model.verify()["ok"]
