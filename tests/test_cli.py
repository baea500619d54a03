"""The command line: help for every command, fit -> predict -> forget -> inspect -> verify
round trips on CSV and NPZ (bitwise against a refit), and errors that say what to do with the
right exit code and no traceback.

Needs the real DurableModel: if it is missing the tests fail (they are never skipped).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import types

import numpy as np
import pytest
from conftest import FAST, classification_data, regression_data

from forgetting import QSSClassifier, QSSRegressor
from forgetting import cli as cli_module
from forgetting.cli import build_parser, main, parse_id, redact

COMMANDS = ["fit", "predict", "forget", "insert", "inspect", "verify", "serve"]
FAST_ARGS = ["--rho", "0.25", "--n-levels", "2", "--n-centroids", "8", "--rebuild", "sync"]
TOKEN = "cli-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def _durable_model_exists():
    """Fail loudly (never skip) if the store the CLI runs on is not implemented."""
    from forgetting.store.durable import DurableModel

    for method in ("create", "open", "forget", "insert", "stats", "verify"):
        if not hasattr(DurableModel, method):  # pragma: no cover
            pytest.fail(f"DurableModel.{method} is missing: the CLI cannot work")


def write_csv(path, X, y, ids, labels=None, extra=None):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        names = [f"f{j}" for j in range(X.shape[1])]
        writer.writerow(["id", "label", *names, *(["comment"] if extra else [])])
        for i in range(len(y)):
            label = labels[y[i]] if labels else y[i]
            writer.writerow([ids[i], label, *map(repr, X[i].tolist()), *([extra] if extra else [])])


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# -- help -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"forgetting {command}" in out and "--store" in out
    assert len(out) > 300  # an explanation, not just a usage line


def test_top_level_help_lists_commands_and_runs_as_module():
    done = subprocess.run(
        [sys.executable, "-m", "forgetting", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    for command in COMMANDS:
        assert command in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "forgetting", "fit"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "required" in bad.stderr and "Traceback" not in bad.stderr


# -- round trips ----------------------------------------------------------------------------


def test_csv_round_trip_is_exact(tmp_path, capsys):
    X, y = classification_data()
    ids = [i if i % 3 else f"user-{i}" for i in range(len(y))]
    names = ["cat", "dog", "eel"]
    data = tmp_path / "train.csv"
    write_csv(data, X, y, ids, labels=names, extra="free text, ignored")
    store = tmp_path / "model.db"

    code, out, _ = run(capsys, "fit", "--data", data, "--store", store, *FAST_ARGS)
    assert code == 0, out
    assert "feature columns: f0,f1,f2,f3,f4,f5" in out

    victims = ids[5:25]
    code, out, err = run(capsys, "forget", "--store", store, "--ids", ",".join(map(str, victims)))
    assert code == 0, err
    assert "forget: 20 row(s)" in out

    code, _, err = run(
        capsys, "predict", "--store", store, "--data", data, "--out", tmp_path / "p.csv"
    )
    assert code == 0, err
    with open(tmp_path / "p.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["id", "prediction", "proba_cat", "proba_dog", "proba_eel"]
    assert len(rows) == len(y)

    keep = [i not in set(victims) for i in ids]
    labels = np.array(names)[y]
    refit = QSSClassifier(**FAST).fit(
        X[keep], labels[keep], [i for i, k in zip(ids, keep, strict=True) if k]
    )
    proba = np.array([[float(r[f"proba_{c}"]) for c in names] for r in rows])
    assert np.array_equal(proba, refit.predict_proba(X))  # repr() floats: bitwise
    assert [r["prediction"] for r in rows] == refit.predict(X).tolist()
    assert [r["id"] for r in rows] == [str(i) for i in ids]

    code, out, _ = run(capsys, "inspect", "--store", store)
    assert code == 0
    assert "rows" in out and str(len(y) - 20) in out and "instances (3 of 3 valid)" in out
    assert refit.state_digest() in out
    code, out, _ = run(capsys, "inspect", "--store", store, "--json")
    stats = json.loads(out)
    assert stats["n_rows"] == len(y) - 20 and stats["state_digest"] == refit.state_digest()

    code, out, _ = run(capsys, "verify", "--store", store)
    assert code == 0 and "OK" in out

    # A retry is idempotent and says so.
    code, out, _ = run(capsys, "forget", "--store", store, "--ids", "user-6,7", "--json")
    assert code == 0 and json.loads(out)["already_forgotten"] is True


def test_npz_round_trip_with_ids_file_and_insert(tmp_path, capsys):
    X, y = regression_data()
    ids = np.arange(1000, 1000 + len(y))
    data = tmp_path / "train.npz"
    np.savez(data, X=X[:200], y=y[:200], ids=ids[:200])
    store = tmp_path / "reg.db"
    code, _, err = run(
        capsys, "fit", "--data", data, "--store", store, "--task", "regression", *FAST_ARGS
    )
    assert code == 0, err

    more = tmp_path / "more.npz"
    np.savez(more, X=X[200:], y=y[200:], ids=ids[200:])
    code, out, err = run(capsys, "insert", "--store", store, "--data", more, "--json")
    assert code == 0, err
    assert json.loads(out)["n_rows"] == len(y) - 200

    id_file = tmp_path / "ids.txt"
    id_file.write_text("# to forget\n1003\n1010\n\n1220\n")
    code, out, err = run(capsys, "forget", "--store", store, "--ids-file", id_file)
    assert code == 0, err

    code, out, err = run(capsys, "predict", "--store", store, "--data", data)
    assert code == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert list(rows[0]) == ["id", "prediction"]

    keep = ~np.isin(ids, [1003, 1010, 1220])
    refit = QSSRegressor(**FAST).fit(X[keep], y[keep], ids[keep].tolist())
    served = np.array([float(r["prediction"]) for r in rows])
    assert np.array_equal(served, refit.predict(X[:200]))

    code, out, _ = run(capsys, "verify", "--store", store, "--json")
    result = json.loads(out)
    assert code == 0 and result["ok"] and result["state_digest"] == refit.state_digest()


def test_parquet_when_pyarrow_is_available(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")  # optional format: the CSV/NPZ paths are always tested
    import pyarrow.parquet as pq

    X, y = classification_data()
    table = {"id": [f"p{i}" for i in range(len(y))], "label": y.tolist()}
    table.update({f"f{j}": X[:, j] for j in range(X.shape[1])})
    pq.write_table(pa.table(table), tmp_path / "d.parquet")
    code, out, err = run(
        capsys, "fit", "--data", tmp_path / "d.parquet", "--store", tmp_path / "s.db", *FAST_ARGS
    )
    assert code == 0, err
    assert "feature columns: f0,f1,f2,f3,f4,f5" in out


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, capsys, monkeypatch):
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code, _, err = run(
        capsys, "fit", "--data", tmp_path / "d.parquet", "--store", tmp_path / "s.db"
    )
    assert code == 1 and "pip install pyarrow" in err


def test_text_column_uses_the_minilm_encoder(tmp_path, capsys, monkeypatch):
    """The encoder is swapped for a stub so the test needs neither torch nor the weights."""
    seen = []

    class StubEncoder:
        def __init__(self, **kwargs):
            pass

        def transform(self, texts):
            seen.extend(texts)
            rng = np.random.default_rng([len(t) for t in texts])
            return rng.normal(size=(len(texts), 8)).astype(np.float32)

    module = types.ModuleType("forgetting.encoders.text")
    module.MiniLMEncoder = StubEncoder
    module.MINILM_INSTALL = "pip install ..."  # the encoders package re-exports it
    monkeypatch.setitem(sys.modules, "forgetting.encoders.text", module)
    rng = np.random.default_rng(0)
    data = tmp_path / "texts.csv"
    with open(data, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "label", "text"])
        for i in range(240):
            writer.writerow([i, i % 2, "word " * int(rng.integers(1, 30))])
    code, out, err = run(
        capsys,
        "fit",
        "--data",
        data,
        "--store",
        tmp_path / "t.db",
        "--text-col",
        "text",
        *FAST_ARGS,
    )
    assert code == 0, err
    assert len(seen) == 240 and "feature columns: text" in out


def test_text_column_without_encoder_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "forgetting.encoders.text", None)
    data = tmp_path / "texts.csv"
    data.write_text("id,label,text\n1,0,hello\n2,1,bye\n")
    code, _, err = run(
        capsys, "fit", "--data", data, "--store", tmp_path / "t.db", "--text-col", "text"
    )
    assert code == 1 and "text encoder" in err


# -- errors ---------------------------------------------------------------------------------


@pytest.fixture
def fitted(tmp_path, capsys):
    X, y = classification_data()
    data = tmp_path / "d.csv"
    write_csv(data, X, y, list(range(len(y))))
    store = tmp_path / "s.db"
    assert run(capsys, "fit", "--data", data, "--store", store, *FAST_ARGS)[0] == 0
    return data, store


def _digest(capsys, store):
    code, out, _ = run(capsys, "inspect", "--store", store, "--json")
    assert code == 0
    return json.loads(out)["state_digest"]


def test_errors_exit_with_codes_and_change_nothing(tmp_path, capsys, fitted):
    data, store = fitted
    before = _digest(capsys, store)
    cases = [
        (["forget", "--store", store, "--ids", "3,999999"], 1, "999999"),
        (["forget", "--store", store], 2, "--ids"),
        (["forget", "--store", store, "--ids", "1", "--ids-file", data], 2, "exactly one"),
        (["forget", "--store", store, "--ids", "4", "--erase-inputs"], 1, "label"),
        (["fit", "--data", data, "--store", store], 2, "--overwrite"),
        (["fit", "--data", tmp_path / "absent.csv", "--store", tmp_path / "n.db"], 2, "exist"),
        (["fit", "--data", data, "--store", tmp_path / "n.db", "--label-col", "y"], 2, "'y'"),
        (["fit", "--data", data, "--store", tmp_path / "n.db", "--feature-cols", "f0,zz"], 2, "zz"),
        (["fit", "--data", data, "--store", tmp_path / "n.db", "--rho", "2"], 2, "(0, 1]"),
        (["inspect", "--store", tmp_path / "absent.db"], 2, "forgetting fit"),
        (["predict", "--store", store, "--data", data, "--feature-cols", "f0,f1"], 2, "6"),
        (["insert", "--store", store, "--data", data], 1, "already present"),
        (["serve", "--store", store], 2, "FORGETTING_TOKENS"),
        (["nonsense"], 2, "invalid choice"),
    ]
    for argv, expected, fragment in cases:
        try:
            code, _, err = run(capsys, *argv)
        except SystemExit as stop:  # argparse's own usage errors
            code, err = stop.code, capsys.readouterr().err
        assert code == expected, (argv, err)
        assert fragment in err, (argv, err)
        assert "Traceback" not in err
    assert _digest(capsys, store) == before
    assert not (tmp_path / "n.db").exists()


def test_verify_mismatch_exits_1(capsys, fitted, monkeypatch):
    _, store = fitted
    from forgetting.store.durable import DurableModel

    monkeypatch.setattr(
        DurableModel,
        "verify",
        lambda self: {"ok": False, "state_digest": "a", "refit_digest": "b", "seconds": 0.0},
    )
    code, out, _ = run(capsys, "verify", "--store", store)
    assert code == 1 and "MISMATCH" in out


def test_serve_builds_the_app_from_tokens(tmp_path, capsys, fitted, monkeypatch):
    """`serve` wires the store, tokens and limits into the app (uvicorn itself is stubbed)."""
    from fastapi.testclient import TestClient

    _, store = fitted
    token_file = tmp_path / "tokens"
    token_file.write_text(TOKEN + "\n")
    captured = {}

    def fake_run(app, host, port, log_level):
        captured.update(host=host, port=port)
        client = TestClient(app)
        captured["anonymous"] = client.post("/forget", json={"ids": [1]}).status_code
        captured["predict"] = client.post("/predict", json={"X": [[0.0] * 6]}).status_code
        captured["forget"] = client.post(
            "/forget", json={"ids": [1]}, headers={"Authorization": f"Bearer {TOKEN}"}
        ).status_code
        captured["too_big"] = client.post(
            "/forget", json={"ids": [2, 3, 4]}, headers={"Authorization": f"Bearer {TOKEN}"}
        ).status_code

    import uvicorn

    monkeypatch.setattr(uvicorn, "run", fake_run)
    code, _, err = run(
        capsys,
        "serve",
        "--store",
        store,
        "--token-file",
        token_file,
        "--port",
        "8123",
        "--closed-reads",
        "--max-batch",
        "2",
    )
    assert code == 0, err
    assert TOKEN not in err
    assert captured == {
        "host": "127.0.0.1",
        "port": 8123,
        "anonymous": 401,
        "predict": 401,
        "forget": 200,
        "too_big": 413,
    }


def test_id_rule_and_redaction():
    assert parse_id("42") == 42 and parse_id("-7") == -7
    assert parse_id("042") == "042" and parse_id("u1") == "u1" and parse_id(" 5 ") == 5
    assert parse_id(np.int64(3)) == 3 and parse_id(3.0) == 3
    with pytest.raises(cli_module.CLIError):
        parse_id(2.5)
    assert redact("postgresql://app:s3cret@db:5432/x") == "postgresql://app:***@db:5432/x"
    assert redact("/var/lib/model.db") == "/var/lib/model.db"
    assert build_parser().prog == "forgetting"
