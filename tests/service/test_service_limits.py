"""The service's hard edges: the body limit while a body streams in, receipts under a public
key, and 503 + reload after a store error (never serving a model out of step with its store).

Most tests use ``FakeModel``, a small object implementing the app's ``ServableModel`` contract
that fails on demand; the last ones use the real DurableModel.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from forgetting.receipts import Receipt
from forgetting.service import ConfigError, ServiceConfig, create_app
from forgetting.service import recovery as recovery_module
from forgetting.service.app import max_body_bytes
from forgetting.store.errors import StoreBusy, StoreCorrupt, StoreError

TOKEN = "Sa72f-zcyWa7LXgKHf1FD8QmR98d0156"  # made by secrets.token_urlsafe(24)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HASH = "ab" * 16


def make_receipt(operation: str, n_rows: int) -> dict:
    return {
        "operation": operation,
        "scope": "exact",
        "n_rows": n_rows,
        "id_hashes": [HASH],
        "instances_hit": [],
        "rebuild_started": False,
        "state_digest": "0" * 64,
        "timestamp": "2026-11-30T00:00:00Z",
        "seconds": 0.0,
    }


class FakeModel:
    """A two-feature binary classifier that answers like DurableModel and fails on demand.

    ``fail_with``: the next forget/insert raises it (and, if ``diverge`` is set, the model
    marks itself unavailable first, as a store does when memory may be ahead of it).
    ``reload_failures``: how many reload() calls raise StoreBusy before one succeeds; the one
    that succeeds first waits for ``release`` (set it to let the reload land).
    """

    task = "classification"
    n_features = 2
    classes = [0, 1]
    estimator = None

    def __init__(self, *, key_is_derived: bool = True):
        self.key_is_derived = key_is_derived
        self.available = True
        self.fail_with: BaseException | None = None
        self.diverge = False
        self.fail_predict: BaseException | None = None
        self.diverge_during_predict = False
        self.reload_failures = 0
        self.release = threading.Event()
        self.release.set()
        self.reload_calls = 0
        self.predict_calls = 0
        self.rows = {f"u{i}" for i in range(10)}
        self.receipts: dict[str, dict] = {}

    def predict_proba(self, X):
        self.predict_calls += 1
        if self.fail_predict is not None:
            raise self.fail_predict
        if self.diverge_during_predict:
            self.available = False
        p = np.full((len(X), 2), 0.25)
        p[:, 1] = 0.75
        return p

    def predict(self, X):
        return np.argmax(self.predict_proba(X), axis=1)

    def _mutate(self) -> None:
        if self.fail_with is not None:
            err, self.fail_with = self.fail_with, None
            if self.diverge:
                self.available = False
            raise err

    def forget(self, ids, *, erase_inputs=False):
        self._mutate()
        unknown = [i for i in ids if i not in self.rows]
        if unknown:
            raise KeyError(f"unknown ids: {unknown}")
        self.rows -= set(ids)
        self.receipts[HASH] = make_receipt("forget", len(ids))
        return Receipt.from_dict(self.receipts[HASH])  # as DurableModel.forget returns

    def insert(self, X, y, ids):
        self._mutate()
        self.rows |= set(ids)
        return Receipt.from_dict(make_receipt("insert", len(ids)))

    def receipt(self, id_hash):
        return self.receipts.get(id_hash)

    def stats(self):
        return {"n_rows": len(self.rows), "mode": "exact", "task": self.task}

    def state_digest(self):
        return "0" * 64

    def reload(self):
        self.reload_calls += 1
        if self.reload_calls <= self.reload_failures:
            raise StoreBusy("database is locked")
        assert self.release.wait(10)
        self.available = True


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    monkeypatch.setattr(recovery_module, "RELOAD_FIRST_DELAY", 0.05)
    monkeypatch.setattr(recovery_module, "RELOAD_MAX_DELAY", 0.2)


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- the body limit, counted while the body streams in --------------------------------------

CHUNK = 64 * 1024


def call_asgi(app, method: str, path: str, chunks, headers=()) -> tuple[int, bytes, int, int]:
    """Run one request through the ASGI app with a lazily generated body.

    Returns (status, response body, bytes the app pulled from ``receive``, receive calls).
    """
    pulled = 0
    calls = 0
    source = iter(chunks)
    messages: list[dict] = []

    async def receive():
        nonlocal pulled, calls
        calls += 1
        chunk = next(source, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message):
        messages.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": {},
    }
    asyncio.run(app(scope, receive, send))
    starts = [m for m in messages if m["type"] == "http.response.start"]
    assert len(starts) == 1, messages  # exactly one answer, never two
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return starts[0]["status"], body, pulled, calls


def json_chunks(total: int):
    """A syntactically plausible JSON body of ``total`` bytes, made as it is consumed."""
    yield b'{"X": ['
    sent = 7
    row = b"[0.123456789, -0.987654321], " * (CHUNK // 29)
    while sent < total:
        yield row
        sent += len(row)


def test_chunked_body_is_refused_once_it_crosses_the_limit():
    model = FakeModel()
    app = create_app(model, ServiceConfig(tokens=(TOKEN,), max_batch=1))
    limit = max_body_bytes(ServiceConfig(tokens=(TOKEN,), max_batch=1), model.n_features)
    status, body, pulled, _ = call_asgi(app, "POST", "/predict", json_chunks(8 * limit))
    assert status == 413 and b"exceeds" in body
    # Read no further than the chunk that crossed the limit; parsed nothing, predicted nothing.
    assert limit < pulled <= limit + CHUNK
    assert model.predict_calls == 0
    # The same on an authenticated mutation route, and below the limit the body is served.
    status, _, pulled, _ = call_asgi(
        app,
        "POST",
        "/forget",
        json_chunks(8 * limit),
        [(b"authorization", AUTH["Authorization"].encode())],
    )
    assert status == 413 and pulled <= limit + CHUNK
    status, body, _, _ = call_asgi(app, "POST", "/predict", [b'{"X": [[1.0, ', b"2.0]]}"])
    assert status == 200 and b'"predictions":[1]' in body, body


def test_declared_oversize_and_anonymous_mutations_are_refused_unread():
    model = FakeModel()
    app = create_app(model, ServiceConfig(tokens=(TOKEN,), max_batch=1))
    declared = [(b"content-length", b"999999999")]
    status, body, pulled, calls = call_asgi(app, "POST", "/predict", json_chunks(10**9), declared)
    assert (status, pulled, calls) == (413, 0, 0) and b"999999999 bytes exceeds" in body
    status, _, pulled, calls = call_asgi(app, "POST", "/forget", json_chunks(10**9))
    assert (status, pulled, calls) == (401, 0, 0)


def test_chunked_body_over_loopback_never_read_past_limit_plus_one_chunk():
    """A real server (uvicorn, 127.0.0.1) and a client streaming 8x the limit, chunked."""
    uvicorn = pytest.importorskip("uvicorn")
    model = FakeModel()
    config = ServiceConfig(tokens=(TOKEN,), max_batch=1)
    limit = max_body_bytes(config, model.n_features)
    inner = create_app(model, config)
    seen = {"bytes": 0, "largest": 0}

    async def counting(scope, receive, send):
        async def counted():
            message = await receive()
            if message["type"] == "http.request":
                size = len(message.get("body", b""))
                seen["bytes"] += size
                seen["largest"] = max(seen["largest"], size)
            return message

        await inner(scope, counted, send)

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(counting, log_level="error", lifespan="off"))
    runner = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    runner.start()
    try:
        wait_for(lambda: server.started)
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        client.sendall(
            b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sent = {"bytes": 0}

        def stream():
            try:
                for chunk in json_chunks(8 * limit):
                    client.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    sent["bytes"] += len(chunk)
                client.sendall(b"0\r\n\r\n")
            except OSError:
                pass  # the server closed the connection after its 413: expected

        sender = threading.Thread(target=stream, daemon=True)
        sender.start()
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                data = client.recv(4096)
                if not data:
                    break
                answer += data
        except ConnectionResetError:
            pass
        sender.join(20)
        client.close()
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"connection: close" in answer.lower()
        assert limit < seen["bytes"] <= limit + seen["largest"]
        assert model.predict_calls == 0
    finally:
        server.should_exit = True
        runner.join(10)


# -- receipts under a derived (public) membership key ---------------------------------------


def test_receipts_need_a_token_under_a_derived_key(caplog):
    model = FakeModel(key_is_derived=True)
    model.receipts[HASH] = make_receipt("forget", 1)
    with caplog.at_level(logging.WARNING, logger="forgetting.service"):
        client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
    warnings = [r for r in caplog.records if "derived" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()
    assert client.get(f"/receipts/{HASH}").status_code == 401
    assert client.get(f"/receipts/{HASH}", headers=AUTH).status_code == 200
    with pytest.raises(ConfigError, match="secret membership key"):
        create_app(model, ServiceConfig(tokens=(TOKEN,), open_receipts=True))


def test_a_model_that_cannot_tell_is_treated_as_derived():
    model = FakeModel()
    del model.key_is_derived
    with pytest.raises(ConfigError, match="secret membership key"):
        create_app(model, ServiceConfig(tokens=(TOKEN,), open_receipts=True))


def test_open_receipts_only_when_the_key_is_secret_and_the_operator_asks(caplog):
    model = FakeModel(key_is_derived=False)
    model.receipts[HASH] = make_receipt("forget", 1)
    with caplog.at_level(logging.WARNING, logger="forgetting.service"):
        closed = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
        opened = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,), open_receipts=True)))
    assert not [r for r in caplog.records if "derived" in r.getMessage()]
    assert closed.get(f"/receipts/{HASH}").status_code == 401
    found = opened.get(f"/receipts/{HASH}")
    assert found.status_code == 200 and found.json()["operation"] == "forget"
    assert (
        "security" not in opened.get("/openapi.json").json()["paths"]["/receipts/{id_hash}"]["get"]
    )


# -- store errors: 503, reload, never a diverged answer -------------------------------------


def test_store_busy_is_a_503_with_retry_after_and_changes_nothing():
    model = FakeModel()
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
    model.fail_with = StoreBusy("database is locked\nby pid 4242")
    r = client.post("/forget", json={"ids": ["u1"]}, headers=AUTH)
    assert r.status_code == 503 and r.headers["retry-after"] == "2"
    assert r.json()["detail"].startswith("another writer holds the store")
    assert "\n" not in r.json()["detail"]
    assert "u1" in model.rows and model.reload_calls == 0  # still in step: no reload
    assert client.post("/forget", json={"ids": ["u1"]}, headers=AUTH).status_code == 200


def test_store_corrupt_is_a_503_not_the_clients_fault():
    model = FakeModel()
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
    model.fail_with = StoreCorrupt("schemas row 3 fails its integrity check")
    r = client.post("/insert", json={"X": [[0.0, 1.0]], "y": [1], "ids": ["n"]}, headers=AUTH)
    assert r.status_code == 503, r.text
    assert r.json()["detail"] == (
        "store error: schemas row 3 fails its integrity check; nothing was changed, retry later"
    )
    model.fail_predict = StoreError("connection lost")
    r = client.post("/predict", json={"X": [[0.0, 1.0]]})
    assert r.status_code == 503 and "connection lost" in r.json()["detail"]


def test_after_a_store_error_every_request_is_503_until_one_reload_lands():
    model = FakeModel()
    model.receipts[HASH] = make_receipt("forget", 1)
    model.reload_failures = 2  # the store stays locked for two attempts
    model.release.clear()  # and the third attempt waits until the requests below are answered
    app = create_app(model, ServiceConfig(tokens=(TOKEN,)))
    client = TestClient(app)
    model.fail_with, model.diverge = StoreError("disk I/O error"), True
    r = client.post("/forget", json={"ids": ["u1"]}, headers=AUTH)
    assert r.status_code == 503 and "disk I/O error" in r.json()["detail"]
    assert "\n" not in r.json()["detail"]
    wait_for(lambda: model.reload_calls == 3)  # backoff: two failures, the third is running
    calls = model.predict_calls
    for method, path, body in (
        ("POST", "/predict", {"X": [[0.0, 1.0]]}),
        ("GET", "/stats", None),
        ("GET", "/health", None),
        ("GET", f"/receipts/{HASH}", None),
        ("POST", "/forget", {"ids": ["u2"]}),
        ("POST", "/insert", {"X": [[0.0, 1.0]], "y": [1], "ids": ["n"]}),
    ):
        r = client.request(method, path, json=body, headers=AUTH)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", (path, r.text)
        assert "reloading" in r.json()["detail"]
    assert model.predict_calls == calls and "u2" in model.rows  # the model was not asked
    assert client.get("/docs").status_code == 200  # the API docs stay up
    model.release.set()
    wait_for(lambda: not app.state.recovery.reloading)
    assert model.reload_calls == 3 and app.state.recovery.failed_attempts == 2
    assert app.state.recovery.reloads == 1
    assert client.post("/predict", json={"X": [[0.0, 1.0]]}).status_code == 200
    assert client.get("/stats").json()["service"]["store_reloads"] == 1


def test_concurrent_refusals_start_one_reload():
    model = FakeModel()
    model.reload_failures = 1
    model.release.clear()
    app = create_app(model, ServiceConfig(tokens=(TOKEN,)))
    client = TestClient(app)
    model.available = False
    barrier = threading.Barrier(8)
    codes = []

    def hit():
        barrier.wait()
        codes.append(client.get("/stats").status_code)

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert codes == [503] * 8
    model.release.set()
    wait_for(lambda: model.available and not app.state.recovery.reloading)
    assert model.reload_calls == 2  # one thread: one failed attempt, one that landed


def test_a_prediction_from_a_model_that_went_stale_is_not_served():
    model = FakeModel()
    app = create_app(model, ServiceConfig(tokens=(TOKEN,)))
    client = TestClient(app)
    model.diverge_during_predict = True
    r = client.post("/predict", json={"X": [[0.0, 1.0]]})
    assert r.status_code == 503 and "predictions" not in r.text
    model.diverge_during_predict = False
    wait_for(lambda: model.available)
    assert client.post("/predict", json={"X": [[0.0, 1.0]]}).json()["predictions"] == [1]


def test_openapi_documents_503():
    client = TestClient(create_app(FakeModel(), ServiceConfig(tokens=(TOKEN,))))
    paths = client.get("/openapi.json").json()["paths"]
    for path, method in (("/predict", "post"), ("/forget", "post"), ("/stats", "get")):
        assert "503" in paths[path][method]["responses"], path


# -- end to end with the real DurableModel --------------------------------------------------


@pytest.fixture
def real_store(tmp_path, monkeypatch):
    """A SQLite store (FAST parameters, string ids u0..u239) whose lock waits are short."""
    from helpers import FAST, classification_data

    from forgetting import QSSClassifier
    from forgetting.store import connection
    from forgetting.store.durable import DurableModel

    monkeypatch.setattr(connection, "BUSY_TIMEOUT_S", 0.2)
    X, y = classification_data()
    path = tmp_path / "served.db"
    model = DurableModel.create(
        str(path), QSSClassifier(**FAST), X, y, [f"u{i}" for i in range(len(y))]
    )
    model.wait_for_rebuilds()
    yield model, path, X
    model.close()


def hold_write_lock(path):
    """Another connection holding SQLite's write lock (as a second writer would)."""
    import sqlite3

    intruder = sqlite3.connect(str(path), isolation_level=None, timeout=10)
    intruder.execute("BEGIN IMMEDIATE")
    return intruder


def test_real_store_lock_contention_is_a_503_and_memory_stays_with_the_store(real_store):
    """Issue: a forget failing on a locked store answered 500 yet removed the row from memory
    (the retry said 404; a restart brought the row back). Insert was the mirror image."""
    from forgetting.store.durable import DurableModel

    model, path, X = real_store
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
    digest, n = model.state_digest(), model.stats()["n_rows"]

    intruder = hold_write_lock(path)
    r = client.post("/forget", json={"ids": ["u100"]}, headers=AUTH)
    assert r.status_code == 503 and r.headers["retry-after"] == "2", r.text
    assert r.json()["detail"].startswith("another writer holds the store")
    stats = client.get("/stats").json()
    assert (stats["n_rows"], stats["state_digest"]) == (n, digest)
    intruder.execute("ROLLBACK")
    intruder.close()
    r = client.post("/forget", json={"ids": ["u100"]}, headers=AUTH)
    assert r.status_code == 200 and r.json()["n_rows"] == 1, r.text

    intruder = hold_write_lock(path)
    row = {"X": [X[0].tolist()], "y": [0], "ids": ["fresh"]}
    assert client.post("/insert", json=row, headers=AUTH).status_code == 503
    assert client.get("/stats").json()["n_rows"] == n - 1
    intruder.execute("ROLLBACK")
    intruder.close()
    r = client.post("/insert", json=row, headers=AUTH)
    assert r.status_code == 200, r.text

    served = client.post("/predict", json={"X": X[:20].tolist()}).json()
    model.wait_for_rebuilds()
    digest = model.state_digest()
    with DurableModel.open(str(path), read_only=True) as reopened:
        assert reopened.state_digest() == digest
        assert reopened.stats()["n_rows"] == n
        assert np.array_equal(np.array(served["probabilities"]), reopened.predict_proba(X[:20]))


def test_real_store_failed_reload_means_503_until_the_background_reload_lands(
    real_store, monkeypatch
):
    """When the store cannot even be read back after a failed write, the model is
    unavailable: every request is a 503 until the app's background reload succeeds."""
    from forgetting.store import qss_store as durable  # QSS's store reads its model

    model, path, X = real_store
    app = create_app(model, ServiceConfig(tokens=(TOKEN,)))
    client = TestClient(app)
    digest, n = model.state_digest(), model.stats()["n_rows"]
    real_load, calls, release = durable.read_model, [], threading.Event()

    def flaky_load(*args, **kwargs):
        calls.append(1)
        if len(calls) <= 2:  # the reload inside the failed forget, then the first retry
            raise StoreError("disk I/O error while reading the store")
        assert release.wait(10)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(durable, "read_model", flaky_load)
    intruder = hold_write_lock(path)
    r = client.post("/forget", json={"ids": ["u7"]}, headers=AUTH)
    intruder.execute("ROLLBACK")
    intruder.close()
    assert r.status_code == 503 and not model.available, r.text
    wait_for(lambda: len(calls) == 3)  # the background reload, retried after a failure
    for method, path_, body in (
        ("POST", "/predict", {"X": X[:2].tolist()}),
        ("GET", "/stats", None),
        ("GET", "/health", None),
        ("POST", "/forget", {"ids": ["u8"]}),
    ):
        r = client.request(method, path_, json=body, headers=AUTH)
        assert r.status_code == 503 and "reloading" in r.json()["detail"], (path_, r.text)
    release.set()
    wait_for(lambda: model.available and not app.state.recovery.reloading)
    stats = client.get("/stats").json()
    assert (stats["n_rows"], stats["state_digest"]) == (n, digest)
    assert client.post("/forget", json={"ids": ["u7"]}, headers=AUTH).status_code == 200


def test_real_store_receipt_reads_follow_the_membership_key(real_store, tmp_path):
    from helpers import FAST, classification_data

    from forgetting import QSSClassifier
    from forgetting.store.durable import DurableModel

    derived, _, _ = real_store
    assert derived.key_is_derived
    with pytest.raises(ConfigError, match="secret membership key"):
        create_app(derived, ServiceConfig(tokens=(TOKEN,), open_receipts=True))
    X, y = classification_data(n=120)
    estimator = QSSClassifier(**FAST, secret_key=b"a secret key of 32 bytes, really")
    with DurableModel.create(
        str(tmp_path / "secret.db"), estimator, X, y, [f"s{i}" for i in range(len(y))]
    ) as secret:
        assert not secret.key_is_derived
        client = TestClient(create_app(secret, ServiceConfig(tokens=(TOKEN,), open_receipts=True)))
        receipt = client.post("/forget", json={"ids": ["s5"]}, headers=AUTH).json()
        found = client.get(f"/receipts/{receipt['id_hashes'][0]}")
        assert found.status_code == 200 and found.json()["state_digest"] == receipt["state_digest"]
