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
from helpers import FAST, classification_data, regression_data

from forgetting import QSSClassifier, QSSRegressor
from forgetting import cli as cli_module
from forgetting.cli import build_parser, main, redact

COMMANDS = ["fit", "predict", "forget", "insert", "inspect", "verify", "serve"]
FAST_ARGS = ["--rho", "0.25", "--n-levels", "2", "--n-centroids", "8", "--rebuild", "sync"]
TOKEN = "BTPTWrnvfJAj3_-VoRG6azdO2bbBX_hD"  # made by secrets.token_urlsafe(24)


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
    assert code == 1 and "forgetting[parquet]" in err


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
        (["predict", "--store", store, "--data", data, "--feature-cols", "f0,f1"], 2, "f0,f1,f2"),
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

    def fake_run(app, host, port, log_level, **options):
        captured.update(host=host, port=port)
        assert options["http"].guard.cap > 16 and 0 < options["backlog"] <= 2048
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

    from forgetting import warmup

    class Warming:  # the background warm-up, recorded: started, then stopped when serve ends
        def __init__(self):
            self.terminated = False

        def poll(self):
            return None

        def terminate(self):
            self.terminated = True

    started = []
    monkeypatch.setattr(
        warmup, "warm_up", lambda **kw: started.append((kw, Warming())) or started[-1][1]
    )
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
    assert [kw for kw, _ in started] == [{"wait": False, "quiet": True}]
    assert started[0][1].terminated and "compiling kernels in the background" in err
    assert captured == {
        "host": "127.0.0.1",
        "port": 8123,
        "anonymous": 401,
        "predict": 401,
        "forget": 200,
        "too_big": 413,
    }


def test_redaction():
    assert redact("postgresql://app:s3cret@db:5432/x") == "postgresql://app:***@db:5432/x"
    assert redact("/var/lib/model.db") == "/var/lib/model.db"
    assert redact("at postgres://u:pw@h/db now") == "at postgres://u:***@h/db now"
    assert build_parser().prog == "forgetting"


# -- ids are never rewritten (issue 9.4) ----------------------------------------------------


def _one_error_line(err):
    """The one line saying what went wrong: the last one on stderr (after any progress
    lines), and the only error line."""
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err
    assert "Traceback" not in err, err
    return errors[0]


def test_forget_takes_ids_exactly_as_written(tmp_path, capsys):
    """`--ids " u5 "` is the id " u5 ": it deletes that row, never u5 (the old CLI stripped it
    and deleted u5, while the Python API and HTTP keep " u5 " as an id of its own)."""
    X, y = classification_data()
    ids = [f"u{i}" for i in range(len(y))]
    ids[6] = " u5 "
    data = tmp_path / "d.csv"
    write_csv(data, X, y, ids)
    store = tmp_path / "s.db"
    code, _, err = run(capsys, "fit", "--data", data, "--store", store, *FAST_ARGS)
    assert code == 0, err

    code, out, err = run(capsys, "forget", "--store", store, "--ids", " u5 ", "--json")
    assert code == 0, err and json.loads(out)["n_rows"] == 1
    keep = np.array([i != " u5 " for i in ids])
    refit = QSSClassifier(**FAST).fit(X[keep], y[keep], [i for i in ids if i != " u5 "])
    assert _digest(capsys, store) == refit.state_digest()  # u5 is still there

    id_file = tmp_path / "ids.txt"
    id_file.write_text("# padded: not u5\n u5\n")
    code, _, err = run(capsys, "forget", "--store", store, "--ids-file", id_file)
    assert code == 1 and "u5" in _one_error_line(err)
    assert _digest(capsys, store) == refit.state_digest()


def test_padded_id_cannot_delete_the_unpadded_row(capsys, fitted):
    _, store = fitted
    before = _digest(capsys, store)
    for argv in (["--ids", " 5 "], ["--ids", "5 "], ["--ids", "05"], ["--ids", "4,,5"]):
        code, _, err = run(capsys, "forget", "--store", store, *argv)
        assert code in (1, 2), (argv, err)
        _one_error_line(err)
    assert _digest(capsys, store) == before
    code, _, err = run(capsys, "forget", "--store", store, "--ids", "5")
    assert code == 0, err and _digest(capsys, store) != before


def test_minus_zero_is_the_string_id_not_zero(capsys, fitted):
    """`-0` is not a canonical decimal integer, so it is the string id "-0": it must never
    delete row 0 (issue 40)."""
    from forgetting.io import tables

    assert tables.parse_id("-0") == "-0" and tables.parse_id("0") == 0
    with pytest.raises(tables.TableError, match="not a decimal integer"):
        tables.parse_id("-0", "int")
    _, store = fitted
    before = _digest(capsys, store)
    code, _, err = run(capsys, "forget", "--store", store, "--ids=-0")
    assert code == 1 and "'-0'" in _one_error_line(err)
    assert _digest(capsys, store) == before


def test_an_unknown_huge_id_gives_a_short_error_line(tmp_path, capsys, fitted):
    """An unknown 100,000-character id is named in a line of bounded length (issue 40)."""
    _, store = fitted
    huge = "x" * 100_000
    id_file = tmp_path / "ids.txt"
    id_file.write_text("".join(f"{huge}{i}\n" for i in range(20)))
    for argv in (["--ids", huge], ["--ids-file", id_file]):
        code, _, err = run(capsys, "forget", "--store", store, *argv)
        line = _one_error_line(err)
        assert code == 1 and "unknown ids" in line and "xxxx" in line
        assert len(line) < 2_000, len(line)


def test_id_type_str_reaches_string_ids_that_look_like_integers(tmp_path, capsys):
    X, y = classification_data()
    data = tmp_path / "d.csv"
    write_csv(data, X, y, [str(i) for i in range(len(y))])
    store = tmp_path / "s.db"
    code, _, err = run(
        capsys, "fit", "--data", data, "--store", store, "--id-type", "str", *FAST_ARGS
    )
    assert code == 0, err
    code, _, err = run(capsys, "forget", "--store", store, "--ids", "7")  # the integer 7
    assert code == 1, err
    code, out, err = run(capsys, "forget", "--store", store, "--ids", "7", "--id-type", "str")
    assert code == 0, err
    keep = np.arange(len(y)) != 7
    refit = QSSClassifier(**FAST).fit(X[keep], y[keep], [str(i) for i in np.flatnonzero(keep)])
    assert _digest(capsys, store) == refit.state_digest()


# -- columns by name, bad cells named (issue 9.5) --------------------------------------------


def write_columns(path, columns):
    """A CSV from {name: values}, in the dict's order."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(list(columns))
        writer.writerows(zip(*columns.values(), strict=True))


def _columns(X, y, ids, order=None):
    cols = {"id": list(ids), "label": list(y)}
    cols.update({f"f{j}": [repr(v) for v in X[:, j].tolist()] for j in range(X.shape[1])})
    return {name: cols[name] for name in (order or cols)}


def test_fit_refuses_a_bad_cell_instead_of_dropping_its_column(tmp_path, capsys):
    X, y = classification_data()
    cols = _columns(X, y, range(len(y)))
    cols["f2"][10] = "n/a"
    write_columns(tmp_path / "d.csv", cols)
    store = tmp_path / "s.db"
    code, _, err = run(capsys, "fit", "--data", tmp_path / "d.csv", "--store", store, *FAST_ARGS)
    line = _one_error_line(err)
    assert code == 1 and "line 12" in line and "column 'f2'" in line and "'n/a'" in line
    assert not store.exists()


def test_insert_and_predict_select_the_recorded_columns_by_name(tmp_path, capsys):
    X, y = classification_data()
    ids = list(range(len(y)))
    write_columns(tmp_path / "fit.csv", _columns(X[:200], y[:200], ids[:200]))
    store = tmp_path / "s.db"
    code, _, err = run(capsys, "fit", "--data", tmp_path / "fit.csv", "--store", store, *FAST_ARGS)
    assert code == 0, err
    before = _digest(capsys, store)

    # Another column order, plus a column the model never saw with a bad cell in it.
    order = ["f5", "label", "f3", "id", "f1", "f0", "f4", "f2"]
    later = _columns(X[200:], y[200:], ids[200:], order)
    later["junk"] = ["x"] * 39 + ["1"]
    write_columns(tmp_path / "more.csv", later)
    missing = {k: v for k, v in later.items() if k != "f3"}
    write_columns(tmp_path / "missing.csv", missing)
    code, _, err = run(capsys, "insert", "--store", store, "--data", tmp_path / "missing.csv")
    assert code == 2 and "f3" in _one_error_line(err)
    assert _digest(capsys, store) == before

    code, _, err = run(capsys, "insert", "--store", store, "--data", tmp_path / "more.csv")
    assert code == 0, err
    assert "ignored: junk" in err
    refit = QSSClassifier(**FAST).fit(X, y, ids)
    assert _digest(capsys, store) == refit.state_digest()

    code, out, err = run(capsys, "predict", "--store", store, "--data", tmp_path / "more.csv")
    assert code == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert [int(r["prediction"]) for r in rows] == refit.predict(X[200:]).tolist()


# -- the membership key (issue 9.3) -----------------------------------------------------------


def test_fit_warns_once_when_the_key_is_derived(tmp_path, capsys, fitted):
    data, _ = fitted
    code, _, err = run(capsys, "fit", "--data", data, "--store", tmp_path / "a.db", *FAST_ARGS)
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert code == 0 and len(warnings) == 1
    assert "random_state=0" in warnings[0] and "--secret-key-file" in warnings[0]

    key = tmp_path / "key"
    key.write_text("a secret membership key\n")
    code, _, err = run(
        capsys, "fit", "--data", data, "--store", tmp_path / "b.db", "--secret-key-file", key,
        *FAST_ARGS,
    )  # fmt: skip
    assert code == 0 and "warning" not in err
    code, _, err = run(
        capsys, "fit", "--data", data, "--store", tmp_path / "c.db", "--store-key", *FAST_ARGS
    )
    assert code == 2 and "--secret-key-file" in _one_error_line(err)


def test_a_secret_key_is_passed_to_the_store_and_kept_only_on_request(tmp_path, capsys, fitted):
    data, _ = fitted
    key = tmp_path / "key"
    key.write_text("a secret membership key\n")
    kept, apart = tmp_path / "kept.db", tmp_path / "apart.db"
    for store, extra in ((kept, ["--store-key"]), (apart, [])):
        code, _, err = run(
            capsys, "fit", "--data", data, "--store", store, "--secret-key-file", key,
            *extra, *FAST_ARGS,
        )  # fmt: skip
        assert code == 0, err
    assert key.read_bytes().strip() not in apart.read_bytes()
    code, _, err = run(capsys, "forget", "--store", apart, "--ids", "3")
    assert code == 1
    _one_error_line(err)
    code, _, err = run(capsys, "forget", "--store", apart, "--ids", "3", "--secret-key-file", key)
    assert code == 0, err
    code, _, err = run(capsys, "forget", "--store", kept, "--ids", "3")
    assert code == 0, err


# -- read-only commands, one writer (issue 9.2) -----------------------------------------------


def _listing(folder):
    return {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()
    }


def test_inspect_on_a_missing_or_empty_file_creates_nothing(tmp_path, capsys):
    code, _, err = run(capsys, "inspect", "--store", tmp_path / "absent.db")
    assert code == 2 and "forgetting fit" in _one_error_line(err)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty.db").write_bytes(b"")
    before = _listing(tmp_path)
    for command in ("inspect", "verify"):
        code, _, err = run(capsys, command, "--store", tmp_path / "empty.db")
        assert code == 1
        _one_error_line(err)
        assert _listing(tmp_path) == before


def test_read_only_commands_change_no_file(tmp_path, capsys, fitted):
    """inspect/verify/predict neither write the store nor take its writer lock. (SQLite itself
    may leave an empty -wal and its -shm index beside a WAL database that a reader opened:
    those hold no data and are not compared.)"""
    data, store = fitted

    def files():
        listing = _listing(store.parent)
        wal = listing.pop(store.name + "-wal", (0,))
        assert wal[0] == 0, "a read-only command wrote to the WAL"
        listing.pop(store.name + "-shm", None)
        return listing

    before = files()
    for argv in (
        ["inspect", "--store", store],
        ["verify", "--store", store],
        ["predict", "--store", store, "--data", data],
    ):
        code, _, err = run(capsys, *argv)
        assert code == 0, (argv, err)
    assert files() == before


def test_a_second_writer_is_refused_with_one_line(capsys, fitted):
    """A running writer (what `forgetting serve` is) holds the store: CLI mutations get one
    clear line and change nothing; read-only commands still work beside it."""
    from forgetting.store.durable import DurableModel

    data, store = fitted
    with DurableModel.open(str(store)) as server:
        digest = server.state_digest()
        for argv in (
            ["forget", "--store", store, "--ids", "3"],
            ["insert", "--store", store, "--data", data],
            ["fit", "--data", data, "--store", store, "--overwrite", *FAST_ARGS],
        ):
            code, _, err = run(capsys, *argv)
            assert code == 1 and "busy" in _one_error_line(err), (argv, err)
        code, out, err = run(capsys, "inspect", "--store", store, "--json")
        assert code == 0, err and json.loads(out)["state_digest"] == digest
    code, _, err = run(capsys, "forget", "--store", store, "--ids", "3")
    assert code == 0, err


@pytest.mark.parametrize(
    "error, fragment",
    [
        ("StoreCorrupt", "unreadable store: table rows: row 3 fails its check"),
        ("StoreError", "retry later"),
        ("StoreBusy", "busy"),
    ],
)
def test_store_errors_are_one_line(capsys, fitted, monkeypatch, error, fragment):
    from forgetting.store import errors
    from forgetting.store.durable import DurableModel

    _, store = fitted

    def refuse(*args, **kwargs):
        raise getattr(errors, error)("table rows:\nrow 3 fails its check")

    monkeypatch.setattr(DurableModel, "open", refuse)
    for command in ("inspect", "verify"):
        code, _, err = run(capsys, command, "--store", store)
        assert code == 1 and fragment in _one_error_line(err)


# -- defaults come from the estimators (issue 8.5) --------------------------------------------


def test_fit_options_default_to_the_estimators_own(capsys):
    args = build_parser().parse_args(["fit", "--data", "d.csv", "--store", "s.db"])
    assert not any(hasattr(args, name) for name in cli_module.ESTIMATOR_OPTIONS)
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    defaults = QSSClassifier().get_params()
    assert defaults == QSSRegressor().get_params()  # else the help shows both
    for name in ("rho", "n_instances", "mode", "rebuild", "random_state"):
        assert f"Default {defaults[name]}" in out, name


def test_serve_refuses_open_receipts_under_a_derived_key(tmp_path, capsys, fitted, monkeypatch):
    import uvicorn

    _, store = fitted
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("must not serve"))
    monkeypatch.setenv("FORGETTING_TOKENS", TOKEN)
    code, _, err = run(capsys, "serve", "--store", store, "--open-receipts", "--no-warmup")
    assert code == 2 and "secret" in _one_error_line(err)


def test_a_store_without_recorded_names_is_matched_by_width(tmp_path, capsys):
    """Stores made from Python without feature_names: columns are taken by position, as
    before, and a different width is refused."""
    from forgetting.store.durable import DurableModel

    X, y = classification_data()
    ids = list(range(len(y)))
    store = tmp_path / "py.db"
    DurableModel.create(str(store), QSSClassifier(**FAST), X, y, ids).close()
    write_csv(tmp_path / "d.csv", X, y, ids)
    code, out, err = run(capsys, "predict", "--store", store, "--data", tmp_path / "d.csv")
    assert code == 0, err
    expected = QSSClassifier(**FAST).fit(X, y, ids).predict(X)
    assert [int(r["prediction"]) for r in csv.DictReader(out.splitlines())] == expected.tolist()
    code, _, err = run(
        capsys, "predict", "--store", store, "--data", tmp_path / "d.csv", "--feature-cols", "f0"
    )
    assert code == 2 and "fitted with 6" in _one_error_line(err)


def test_a_store_error_that_already_says_retry_says_it_once():
    from forgetting.cli.errors import _failure
    from forgetting.store.errors import StoreError

    message, code = _failure("forget", StoreError("database is locked; retry in a moment"), "")
    assert code == 1 and str(message).count("retry") == 1
    message, _ = _failure("forget", StoreError("disk I/O error"), "")
    assert str(message).endswith("the change was not acknowledged; retry later")


def test_a_raw_table_round_trips_through_the_cli(tmp_path, capsys):
    """fit --raw-table keeps a CSV's categories and empty cells; predict, insert (a new
    category), forget and verify read each column as fitted, and the stored model equals a
    fit of the estimator on the same DataFrame; a non-number in a numeric column is one
    error line naming it."""
    pd = pytest.importorskip("pandas")
    from forgetting.store import DurableModel

    rng = np.random.default_rng(0)
    n = 300
    ages = [("" if rng.random() < 0.05 else f"{v:.1f}") for v in rng.normal(40, 10, n)]
    cities = rng.choice(["Oslo", "Rome", "Paris"], n).tolist()
    labels = [
        int((a != "" and float(a) > 40) or c == "Oslo") for a, c in zip(ages, cities, strict=True)
    ]
    data = tmp_path / "people.csv"
    with open(data, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "age", "city", "label"])
        writer.writerows(zip(range(n), ages, cities, labels, strict=True))
    store = tmp_path / "m.db"
    code, out, err = run(
        capsys, "fit", "--data", data, "--store", store, "--raw-table", "--random-state", "0",
        *FAST_ARGS,
    )  # fmt: skip
    assert code == 0, err
    new = tmp_path / "new.csv"
    new.write_text("id,age,city,label\n5000,33.0,Bergen,1\n")
    assert run(capsys, "insert", "--data", new, "--store", store)[0] == 0
    assert run(capsys, "forget", "--ids", "3,4", "--store", store)[0] == 0
    code, out, _ = run(capsys, "predict", "--data", data, "--store", store)
    assert code == 0 and out.count("\n") == n + 1
    assert run(capsys, "verify", "--store", store)[0] == 0
    frame = pd.DataFrame(
        {
            "age": [float(a) if a else np.nan for a in ages] + [33.0],
            "city": [*cities, "Bergen"],
        },
        index=[*range(n), 5000],
    )
    keep = [i for i in frame.index if i not in (3, 4)]
    y = np.array([*labels, 1])[[i for i, r in enumerate(frame.index) if r in set(keep)]]
    ref = QSSClassifier(**{**FAST, "random_state": 0}).fit(frame.loc[keep], y, ids=keep)
    with DurableModel.open(str(store), read_only=True) as model:
        assert model.state_digest() == ref.state_digest()
    bad = tmp_path / "bad.csv"
    bad.write_text("id,age,city\n1,abc,Rome\n")
    code, _, err = run(capsys, "predict", "--data", bad, "--store", store)
    assert code != 0 and "line 2, column 'age': 'abc' is not a finite number" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("given", "dataset", "raw_table", "text", "chosen", "reason"),
    [
        (set(), False, False, False, "forest", "exact forest"),
        ({"rho", "n_instances", "random_state"}, False, False, False, "forest", "exact forest"),
        ({"n_estimators"}, False, False, False, "forest", "exact forest"),
        (set(), True, False, False, "forest", "exact forest"),
        (set(), False, True, False, "qss", "--raw-table"),
        (set(), False, False, True, "qss", "--text-col"),
        ({"mode=label"}, False, False, False, "qss", "--mode label"),
        ({"mode=exact"}, False, False, False, "forest", "exact forest"),
        ({"mode=dp"}, False, False, False, "forest", "exact forest"),  # the rows decide later
        ({"n_levels", "rebuild"}, False, False, False, "qss", "--n-levels, --rebuild"),
        ({"delta", "mode=dp"}, False, False, False, "qss", "--delta"),
    ],
)
def test_model_auto_fits_the_forest_unless_only_qss_goes_or_is_asked_for(
    given, dataset, raw_table, text, chosen, reason
):
    from forgetting.cli.estimator import resolve_model

    mode = next((g.split("=")[1] for g in given if g.startswith("mode=")), None)
    given = {g.split("=")[0] for g in given}
    model, why = resolve_model(
        "auto", given=given, dataset=dataset, raw_table=raw_table, text=text, mode=mode
    )
    assert model == chosen and reason in why and why.startswith("--model auto chose")
    # an explicit model is taken as it is, without a reason
    assert resolve_model("qss", given=set(), dataset=False, raw_table=False, text=False) == (
        "qss",
        "",
    )
    assert build_parser().parse_args(["fit", "--data", "d.csv", "--store", "s"]).model == "auto"
