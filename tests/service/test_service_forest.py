"""An exact forest's store behind the HTTP service, the console and the CLI
(forgetting.store.DurableForest through forgetting.store.open_store).

What is served after a forget equals a forest fitted without the rows; a retried forget
answers its stored receipt; lookups, the receipt log, /stats, the console's health page and
`forgetting predict/forget/inspect/verify` work on a forest store as on a QSS one.
"""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
from fastapi.testclient import TestClient

from forgetting import ExactForestClassifier
from forgetting.cli import main
from forgetting.service import ServiceConfig, create_app
from forgetting.store import DurableForest, open_store

TOKEN = "Sa72f-zcyWa7LXgKHf1FD8QmR98d0156"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PARAMS = {"n_estimators": 5, "random_state": 2}


def _data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] > rng.normal(size=n)).astype(int)
    ids = [i if i % 2 == 0 else f"u{i}" for i in range(n)]
    return X, y, ids


def _refit(X, y, ids, gone) -> ExactForestClassifier:
    keep = [i not in set(gone) for i in ids]
    kept = [i for i, k in zip(ids, keep, strict=True) if k]
    return ExactForestClassifier(**PARAMS).fit(X[keep], y[keep], kept)


@pytest.fixture
def served(tmp_path):
    X, y, ids = _data()
    path = tmp_path / "forest.db"
    DurableForest.create(path, ExactForestClassifier(**PARAMS), X, y, ids).close()
    model = open_store(str(path))
    assert isinstance(model, DurableForest)
    yield model, X, y, ids
    model.close()


def test_the_service_serves_a_forest_exactly(served):
    model, X, y, ids = served
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
    assert client.get("/health").json()["status"] == "ok"
    first = client.post("/forget", json={"ids": ["u1", 6]}, headers=AUTH)
    assert first.status_code == 200, first.text
    receipt = first.json()
    again = client.post("/forget", json={"ids": ["u1", 6]}, headers=AUTH).json()
    assert again["already_forgotten"] is True and again["state_digest"] == receipt["state_digest"]
    assert client.post("/forget", json={"ids": ["nobody"]}, headers=AUTH).status_code == 404
    model.wait_for_rebuilds()  # a D° row of one of the three instances rebuilds it meanwhile
    served_proba = client.post("/predict", json={"X": X.tolist()}, headers=AUTH).json()
    refit = _refit(X, y, ids, ["u1", 6])
    assert np.array_equal(np.array(served_proba["probabilities"]), refit.predict_proba(X))
    assert model.estimator.state_digest() == refit.state_digest()
    if not receipt["rebuild_started"]:  # else the receipt's digest marks the instance invalid
        assert receipt["state_digest"] == refit.state_digest()
    stats = client.get("/stats", headers=AUTH).json()
    assert stats["mode"] == "forest" and stats["n_rows"] == len(ids) - 2
    found = client.get(f"/receipts/{receipt['id_hashes'][0]}", headers=AUTH)
    assert found.status_code == 200 and found.json()["operation"] == "forget"
    log = client.get("/receipts", headers=AUTH).json()
    assert [r["operation"] for r in log["receipts"]] == ["forget"]
    status = model.lookup(6)
    assert status["status"] == "forgotten" and model.lookup(8)["status"] == "present"
    assert model.lookup("never")["status"] == "never_seen"
    inserted = client.post(
        "/insert", json={"X": X[:1].tolist(), "y": [int(y[0])], "ids": ["new"]}, headers=AUTH
    )
    assert inserted.status_code == 200, inserted.text
    assert model.verify()["ok"]


def test_the_console_finds_forgets_and_verifies_a_forest(served):
    model, *_ = served
    client = TestClient(create_app(model, ServiceConfig(tokens=(TOKEN,))))
    first = client.get("/")
    signed = client.post("/console/login", data={"token": TOKEN, "csrf": _csrf(first.text)})
    assert signed.status_code == 200, signed.text
    csrf = _csrf(signed.text)
    found = client.get("/console/find", params={"id": "u5"})
    assert found.status_code == 200 and "present and not forgotten" in found.text
    health = client.get("/console/health")
    assert health.status_code == 200 and "forest" in health.text
    verify = client.post("/console/verify", data={"csrf": csrf}, follow_redirects=True)
    assert verify.status_code == 200
    model.wait_for_rebuilds()


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_the_cli_works_on_a_forest_store(tmp_path, capsys):
    X, y, ids = _data(400)
    store = tmp_path / "forest.db"
    DurableForest.create(store, ExactForestClassifier(**PARAMS), X, y, ids).close()
    data = tmp_path / "rows.csv"
    with open(data, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", *[f"f{j}" for j in range(X.shape[1])]])
        for i, row in zip(ids, X.tolist(), strict=True):
            writer.writerow([i, *map(repr, row)])
    code, out, err = _run(capsys, "forget", "--store", store, "--ids", "u3,4", "--json")
    assert code == 0, err
    assert json.loads(out)["n_rows"] == 2
    code, _, err = _run(
        capsys, "predict", "--store", store, "--data", data, "--out", tmp_path / "p.csv"
    )
    assert code == 0, err
    with open(tmp_path / "p.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    proba = np.array([[float(r["proba_0"]), float(r["proba_1"])] for r in rows])
    assert np.array_equal(proba, _refit(X, y, ids, ["u3", 4]).predict_proba(X))
    code, out, _ = _run(capsys, "inspect", "--store", store, "--json")
    assert code == 0 and json.loads(out)["mode"] == "forest"
    code, out, _ = _run(capsys, "verify", "--store", store)
    assert code == 0 and "OK" in out
    code, out, _ = _run(capsys, "forget", "--store", store, "--ids", "u3", "--json")
    assert code == 0 and json.loads(out)["already_forgotten"] is True


def test_fit_model_forest_from_the_command_line(tmp_path, capsys):
    X, y, ids = _data(300)
    X[np.random.default_rng(3).random(X.shape) < 0.05] = np.nan  # empty cells: missing
    data = tmp_path / "train.csv"
    with open(data, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "label", *[f"f{j}" for j in range(X.shape[1])]])
        for i, label, row in zip(ids, y.tolist(), X.tolist(), strict=True):
            writer.writerow([i, label, *("" if np.isnan(v) else repr(v) for v in row)])
    store = tmp_path / "forest.db"
    argv = ["fit", "--data", data, "--store", store, "--model", "forest"]
    code, out, err = _run(capsys, *argv, "--n-estimators", 5, "--random-state", 2)
    assert code == 0, err
    assert "5 trees" in out
    with open_store(str(store), read_only=True) as model:
        assert isinstance(model, DurableForest) and model.feature_names == ["f0", "f1", "f2", "f3"]
        refit = ExactForestClassifier(**PARAMS).fit(X.astype(np.float64), y, ids)
        assert model.state_digest() == refit.state_digest()
    code, _, err = _run(
        capsys, "predict", "--store", store, "--data", data, "--out", tmp_path / "p.csv"
    )
    assert code == 0, err
    with open(tmp_path / "p.csv", newline="") as f:
        proba = np.array([[float(r["proba_0"]), float(r["proba_1"])] for r in csv.DictReader(f)])
    assert np.array_equal(proba, refit.predict_proba(X.astype(np.float64)))
    code, _, err = _run(
        capsys, "fit", "--data", data, "--store", tmp_path / "q.db", "--model", "qss"
    )
    assert code != 0 and "an empty cell is not a finite number" in err  # QSS: refused
    # the default, --model auto, fits the forest on a file (and says so) ...
    code, out, err = _run(capsys, "fit", "--data", data, "--store", tmp_path / "a.db")
    assert code == 0 and "fitting ExactForestClassifier" in err, err
    assert "--model auto chose the exact forest" in err and "trees" in out
    # ... and QSS when an option only QSS takes is given
    code, _, err = _run(
        capsys,
        "fit",
        "--data",
        data,
        "--store",
        tmp_path / "b.db",
        "--mode",
        "label",
        "--n-estimators",
        3,
    )
    assert code == 2 and "--n-estimators applies to --model forest only" in err
    code, _, err = _run(capsys, *argv, "--overwrite", "--mode", "label")
    assert code == 2 and "--mode label applies to --model qss only" in err
    code, _, err = _run(
        capsys, "fit", "--data", data, "--store", store, "--model", "qss", "--n-estimators", 3
    )
    assert code == 2 and "--n-estimators applies to --model forest only" in err
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in (*argv, "--overwrite", "--max-features", "1.5")])
    assert exit_.value.code == 2 and "fraction in (0, 1]" in capsys.readouterr().err
