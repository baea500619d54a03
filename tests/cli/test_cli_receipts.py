"""``forgetting receipts find|list|export``: the receipt log from the command line."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers import classification_data
from test_cli import FAST_ARGS, run, write_csv
from test_import_cost import HEAVY, among, loaded_by


@pytest.fixture
def history(tmp_path, capsys):
    """A store with string ids u0..., u1 and u2 forgotten together, then u7 alone."""
    X, y = classification_data()
    data = tmp_path / "d.csv"
    write_csv(data, X, y, [f"u{i}" for i in range(len(y))])
    store = tmp_path / "s.db"
    assert run(capsys, "fit", "--data", data, "--store", store, *FAST_ARGS)[0] == 0
    code, out, _ = run(capsys, "forget", "--store", store, "--ids", "u1,u2", "--json")
    assert code == 0
    first = json.loads(out)
    assert run(capsys, "forget", "--store", store, "--ids", "u7")[0] == 0
    return store, first


def test_find_shows_when_and_what_a_forget_did(history, capsys):
    store, first = history
    code, out, _ = run(capsys, "receipts", "find", "u2", "--store", store, "--json")
    assert code == 0
    found = json.loads(out)
    assert found["status"] == "forgotten" and found["id_hash"] in first["id_hashes"]
    (receipt,) = found["receipts"]
    assert receipt["timestamp"] == first["timestamp"]
    assert receipt["state_digest"] == first["state_digest"]
    assert receipt["instances_hit"] == first["instances_hit"]
    code, out, _ = run(capsys, "receipts", "find", "u2", "--store", store)
    assert code == 0 and first["timestamp"] in out and first["state_digest"] in out


def test_find_tells_present_from_never_seen(history, capsys):
    store, _ = history
    code, present, _ = run(capsys, "receipts", "find", "u3", "--store", store)
    assert code == 1 and "present and not forgotten" in present
    code, never, _ = run(capsys, "receipts", "find", "nobody", "--store", store)
    assert code == 1 and "never present" in never
    # "1" is the integer id 1 under auto; this store's ids are strings
    code, out, _ = run(capsys, "receipts", "find", "1", "--store", store, "--json")
    assert code == 1 and json.loads(out)["status"] == "never_seen"


def test_list_pages_and_filters(history, capsys):
    store, first = history
    code, out, _ = run(capsys, "receipts", "list", "--store", store, "--json")
    assert code == 0
    whole = json.loads(out)
    assert whole["next_cursor"] is None and [r["n_rows"] for r in whole["receipts"]] == [2, 1]
    code, out, err = run(capsys, "receipts", "list", "--store", store, "--limit", "1")
    assert code == 0 and "--cursor 1" in err and first["state_digest"][:16] in out
    code, out, _ = run(capsys, "receipts", "list", "--store", store, "--cursor", "1", "--json")
    assert json.loads(out)["receipts"] == whole["receipts"][1:]
    code, out, _ = run(
        capsys, "receipts", "list", "--store", store, "--operation", "insert", "--json"
    )
    assert json.loads(out)["receipts"] == []
    day = first["timestamp"][:10]
    code, out, _ = run(capsys, "receipts", "list", "--store", store, "--until", day, "--json")
    assert len(json.loads(out)["receipts"]) == 2
    code, out, _ = run(capsys, "receipts", "list", "--store", store, "--since", "2999-01-01")
    assert code == 0 and len(out.splitlines()) == 1  # the header alone


def test_export_writes_csv_and_json(history, capsys, tmp_path):
    store, first = history
    target = tmp_path / "evidence.csv"
    code, _, err = run(capsys, "receipts", "export", "--store", store, "-o", target)
    assert code == 0 and "wrote 2 receipts" in err
    rows = list(csv.DictReader(io.StringIO(target.read_text(encoding="utf-8"))))
    assert rows[0]["state_digest"] == first["state_digest"]
    assert rows[0]["id_hashes"].split() == first["id_hashes"]
    code, out, _ = run(capsys, "receipts", "export", "--store", store, "--format", "json")
    assert code == 0 and [r["seq"] for r in json.loads(out)] == [1, 2]


@pytest.mark.parametrize(
    "argv,message,want",
    [
        (["list", "--since", "yesterday"], "ISO 8601", 2),
        (["list", "--instance", "-2"], "instance", 2),
        (["list", "--cursor", "-1"], "--cursor", 2),
        (["find", "x1", "--id-type", "int"], "x1", 1),  # refused data, as `forget` does
    ],
)
def test_bad_options_are_one_line_errors(history, capsys, argv, message, want):
    store, _ = history
    code, out, err = run(capsys, "receipts", *argv, "--store", store)
    assert code == want and message in err and len(err.strip().splitlines()) == 1


def test_a_missing_store_is_one_line(tmp_path, capsys):
    code, _, err = run(capsys, "receipts", "list", "--store", tmp_path / "none.db")
    assert code == 2 and "no store" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("action", ["find", "list", "export"])
def test_help_is_instant_and_explains(action):
    code, modules, out = loaded_by(
        f"from forgetting.cli import main\n    main(['receipts', '{action}', '--help'])"
    )
    assert code == 0 and among(modules, HEAVY) == []
    assert f"forgetting receipts {action}" in out and "--store" in out and len(out) > 400


def test_the_commands_read_a_postgresql_store(capsys):
    from helpers import FAST, postgres_dsn

    from forgetting import QSSClassifier
    from forgetting.store import DurableModel

    dsn = postgres_dsn()
    X, y = classification_data()
    ids = [f"p{i}" for i in range(len(y))]
    with DurableModel.create(dsn, QSSClassifier(**FAST), X, y, ids) as model:
        receipt = model.forget(["p4"])
    code, out, _ = run(capsys, "receipts", "find", "p4", "--store", dsn, "--json")
    assert code == 0 and json.loads(out)["receipts"][-1]["state_digest"] == receipt["state_digest"]
    code, out, _ = run(capsys, "receipts", "export", "--store", dsn, "--format", "json")
    assert code == 0 and [r["n_rows"] for r in json.loads(out)] == [1]


def test_forget_and_insert_record_operator_and_reason(history, capsys, tmp_path, monkeypatch):
    store, first = history
    import getpass

    monkeypatch.setattr(getpass, "getuser", lambda: "carol")
    assert first["operator"].startswith("cli")
    code, out, _ = run(
        capsys, "forget", "--store", store, "--ids", "u9", "--reason", "ticket 42", "--json"
    )
    assert code == 0
    receipt = json.loads(out)
    assert (receipt["operator"], receipt["reason"]) == ("cli:carol", "ticket 42")
    code, out, _ = run(
        capsys,
        "forget",
        "--store",
        store,
        "--ids",
        "u10",
        "--operator",
        "dpo-team",
        "--reason",
        "GDPR art. 17",
    )
    assert code == 0 and "operator:      dpo-team" in out and "GDPR art. 17" in out
    code, out, _ = run(capsys, "receipts", "find", "u10", "--store", store, "--json")
    assert json.loads(out)["receipts"][-1]["operator"] == "dpo-team"
    code, _, err = run(capsys, "forget", "--store", store, "--ids", "u11", "--reason", "r" * 501)
    assert code == 2 and "at most 500" in err
    code, out, _ = run(capsys, "receipts", "find", "u11", "--store", store, "--json")
    assert json.loads(out)["status"] == "present"
