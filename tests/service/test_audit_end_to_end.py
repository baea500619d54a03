"""Issue 70's audit, end to end through the API and the command line: two models (a QSS store
and a forest store) hold the same person; one API request forgets both; each receipt names
the operator (from the token file) and the reason; ``forgetting receipts verify-log`` passes
against the public keys kept apart, and fails naming the receipt once a row is edited in
SQLite; the digest ``forgetting verify`` recomputes from the stored rows is the receipt's.
The browser half is tests/service/test_console_browser_many.py."""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import FAST, user_ids

from forgetting import ExactForestClassifier, QSSClassifier
from forgetting.cli import main
from forgetting.service import ServiceConfig, create_app
from forgetting.store import DurableModel

TOKEN = "Q7v1mWk0dR3xYb9pLs2eNc8uTf4hJa6G"  # made by secrets.token_urlsafe(24)
KEY = bytes(range(32))
REASON = "GDPR art. 17, ticket DSR-2291"


def cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def audit(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 5)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    ids = user_ids(600)
    qss = {**FAST, "rho": 0.02, "rebuild": "background"}
    crm = DurableModel.create(
        str(tmp_path / "crm.db"), QSSClassifier(**qss, secret_key=KEY), X, y, ids
    )
    forest = ExactForestClassifier(n_estimators=4, random_state=0, secret_key=KEY)
    billing = DurableModel.create(str(tmp_path / "billing.db"), forest, X, y, ids)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {TOKEN}\n")
    config = ServiceConfig.load(token_file=tokens, environ={})
    client = TestClient(create_app({"crm": crm, "billing": billing}, config))
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    yield crm, billing, client, ids, tmp_path, key_file
    crm.close()
    billing.close()


def test_one_request_two_models_signed_receipts_and_one_digest(audit, capsys):
    crm, billing, client, ids, tmp_path, key_file = audit
    auth = {"Authorization": f"Bearer {TOKEN}"}
    # Public keys taken out of band before anything is deleted: what an auditor keeps.
    keys = {}
    for name in ("crm", "billing"):
        code, pem, err = cli(capsys, "receipts", "public-key", "--store", tmp_path / f"{name}.db")
        assert code == 0, err
        keys[name] = tmp_path / f"{name}.pem"
        keys[name].write_text(pem)

    # One request forgets the person in both models; choose one whose deletion starts no
    # background rebuild in either, so that each receipt's digest is already final.
    for person in ids[5:60]:
        r = client.post("/forget", json={"ids": [person], "reason": REASON}, headers=auth)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["forgotten_in"] == ["crm", "billing"] and answer["failed_in"] == []
        receipts = {m["model"]: m["receipt"] for m in answer["models"]}
        for receipt in receipts.values():
            assert receipt["operator"] == "alice" and receipt["reason"] == REASON
            assert TOKEN not in json.dumps(receipt)
        if not any(receipt["rebuild_started"] for receipt in receipts.values()):
            break
    else:
        pytest.fail("every deletion started a rebuild")
    found = client.get("/receipts", params={"id": person}, headers=auth).json()
    assert {m["model"]: m["status"] for m in found["models"]} == {
        "crm": "forgotten",
        "billing": "forgotten",
    }
    # The API's JSON export is the signed log: an auditor checks it offline, with the key.
    exports = {}
    for name in ("crm", "billing"):
        r = client.get("/receipts/export", params={"model": name, "format": "json"}, headers=auth)
        assert r.status_code == 200, r.text
        exports[name] = tmp_path / f"{name}.json"
        exports[name].write_bytes(r.content)
        assert all("signature" in entry for entry in json.loads(r.content))
    crm.wait_for_rebuilds()
    billing.wait_for_rebuilds()
    crm.close()
    billing.close()

    for name in ("crm", "billing"):
        store = tmp_path / f"{name}.db"
        code, out, err = cli(
            capsys, "receipts", "verify-log", "--store", store, "--public-key", keys[name]
        )
        assert code == 0, out + err
        code, out, err = cli(
            capsys, "receipts", "verify-log", "--export", exports[name], "--public-key", keys[name]
        )
        assert code == 0, out + err
        swapped = tmp_path / f"{name}-other.json"  # signed, but by the other store's key
        swapped.write_bytes(exports["billing" if name == "crm" else "crm"].read_bytes())
        code, out, err = cli(
            capsys, "receipts", "verify-log", "--export", swapped, "--public-key", keys[name]
        )
        assert code == 3, out + err
        code, out, err = cli(
            capsys, "verify", "--store", store, "--secret-key-file", key_file, "--json"
        )
        report = json.loads(out)
        assert code == 0 and report["ok"], out + err
        assert report["refit_digest"] == report["state_digest"] == receipts[name]["state_digest"]

        # One receipt row edited in SQLite: the log fails and names that receipt.
        edited = tmp_path / f"{name}-edited.db"
        shutil.copyfile(store, edited)
        edited.chmod(0o600)
        with sqlite3.connect(edited) as con:
            (last,) = con.execute("SELECT max(seq) FROM receipts").fetchone()
            con.execute(
                "UPDATE receipts SET body = replace(body, ?, ?) WHERE seq = ?",
                (REASON, "no reason given", last),
            )
        sqlite3.connect(edited).close()
        code, out, err = cli(
            capsys, "receipts", "verify-log", "--store", edited, "--public-key", keys[name]
        )
        assert code == 3, out + err
        assert f"FAILED: receipt {last}: " in out
