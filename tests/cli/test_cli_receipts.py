"""``forgetting receipts find|list|export``: the receipt log from the command line."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import numpy as np
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
    assert code == 3 and "present and not forgotten" in present
    code, never, _ = run(capsys, "receipts", "find", "nobody", "--store", store)
    assert code == 4 and "never present" in never
    # "1" is the integer id 1 under auto; this store's ids are strings
    code, out, _ = run(capsys, "receipts", "find", "1", "--store", store, "--json")
    assert code == 4 and json.loads(out)["status"] == "never_seen"


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


# -- the signed log -----------------------------------------------------------------------------
def _copy(store, tmp_path, name="t.db"):
    import shutil

    target = tmp_path / name
    shutil.copyfile(store, target)
    return target


@pytest.fixture
def signed(history, capsys, tmp_path):
    """The history store with a third receipt (an insert), and its public key in a file."""
    store, _ = history
    X, y = classification_data()
    extra = tmp_path / "extra.csv"
    write_csv(extra, X[:2], y[:2], ["n1", "n2"])
    code, _, err = run(capsys, "insert", "--store", store, "--data", extra, "--reason", "backfill")
    assert code == 0, err
    code, pem, _ = run(capsys, "receipts", "public-key", "--store", store)
    assert code == 0 and pem.startswith("-----BEGIN PUBLIC KEY-----")
    key = tmp_path / "log.pem"
    key.write_text(pem)
    return store, key


def test_verify_log_passes_a_signed_log_with_or_without_the_key(signed, capsys):
    store, key = signed
    code, out, _ = run(capsys, "receipts", "verify-log", "--store", store)
    assert code == 0 and "3 receipt(s), 3 signed" in out and "OK" in out
    code, out, _ = run(capsys, "receipts", "verify-log", "--store", store, "--public-key", key)
    assert code == 0 and "checked against --public-key" in out
    code, out, _ = run(capsys, "receipts", "verify-log", "--store", store, "--json")
    report = json.loads(out)
    assert report["ok"] and (report["first_seq"], report["last_seq"]) == (1, 3)


@pytest.mark.parametrize(
    ("statement", "bad", "needle"),
    [
        (
            "UPDATE receipts SET body = replace(body, '\"n_rows\": 1', '\"n_rows\": 2') "
            "WHERE seq = 2",
            2,
            "signature does not verify",
        ),
        ("DELETE FROM receipts WHERE seq = 2", 3, "previous hash is not receipt 1's"),
        (
            "UPDATE receipts SET seq = 99 WHERE seq = 1; UPDATE receipts SET seq = 1 WHERE seq = 2;"
            " UPDATE receipts SET seq = 2 WHERE seq = 99",
            1,
            "previous hash is not the log's start",
        ),
        ("DELETE FROM receipts WHERE seq = 3", 3, "missing"),
        ("UPDATE receipts SET signature = NULL, prev = NULL WHERE seq = 3", 3, "unsigned"),
        ("UPDATE receipts SET signature = NULL, prev = NULL", 3, "signatures were stripped"),
    ],
)
def test_verify_log_names_the_first_receipt_changed_removed_or_moved(
    signed, capsys, tmp_path, statement, bad, needle
):
    store, key = signed
    target = _copy(store, tmp_path)
    with sqlite3.connect(target) as con:
        con.executescript(statement)
    sqlite3.connect(target).close()
    code, out, err = run(capsys, "receipts", "verify-log", "--store", target, "--public-key", key)
    assert code == 3, out + err
    assert f"FAILED: receipt {bad}: " in out and needle in out
    code, out, _ = run(capsys, "receipts", "verify-log", "--store", target, "--json")
    assert code == 3 and json.loads(out)["bad_seq"] == bad


def test_verify_log_against_another_public_key_fails(signed, capsys, tmp_path):
    store, _ = signed
    from forgetting.store.signing import new_keys

    other = tmp_path / "other.pem"
    other.write_bytes(new_keys(b"x" * 32)["log_public_key"])
    code, out, _ = run(capsys, "receipts", "verify-log", "--store", store, "--public-key", other)
    assert code == 3 and "FAILED: receipt 1: its signature does not verify" in out
    assert "not the one given" in out
    # a log re-signed with a key put in the store in place of its own: only the kept key tells
    target = _copy(store, tmp_path)
    with sqlite3.connect(target) as con:
        con.execute(
            "UPDATE meta SET value = ? WHERE name = 'log_public_key'", (other.read_bytes(),)
        )
    sqlite3.connect(target).close()
    code, out, _ = run(capsys, "receipts", "verify-log", "--store", target)
    assert code == 3


def test_an_export_verifies_offline_and_a_tampered_one_fails(signed, capsys, tmp_path):
    store, key = signed
    export = tmp_path / "log.json"
    code, _, _ = run(
        capsys, "receipts", "export", "--store", store, "--format", "json", "-o", export
    )
    assert code == 0
    items = json.loads(export.read_text())
    assert [r["seq"] for r in items] == [1, 2, 3] and all(r["signature"] for r in items)
    assert items[2]["reason"] == "backfill" and items[0]["prev_hash"] == "0" * 64
    code, out, _ = run(capsys, "receipts", "verify-log", "--export", export, "--public-key", key)
    assert code == 0 and "OK" in out
    for change in (
        lambda log: log[1].update(operator="someone-else"),
        lambda log: log.pop(1),
        lambda log: log.reverse(),
        lambda log: log[0].update(seq=7),
    ):
        log = json.loads(export.read_text())
        change(log)
        tampered = tmp_path / "tampered.json"
        tampered.write_text(json.dumps(log))
        code, out, _ = run(
            capsys, "receipts", "verify-log", "--export", tampered, "--public-key", key
        )
        assert code == 3 and "FAILED: receipt " in out
    code, _, err = run(capsys, "receipts", "verify-log", "--export", export)
    assert code == 2 and "--public-key" in err
    code, _, err = run(capsys, "receipts", "verify-log", "--public-key", key)
    assert code == 2


def test_verify_log_help_documents_its_exit_codes(capsys):
    with pytest.raises(SystemExit):
        run(capsys, "receipts", "verify-log", "--help")
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit codes: 0 every receipt is present" in out and "3 the log fails" in out


@pytest.mark.parametrize("model", ["qss", "forest"])
def test_the_last_receipt_s_digest_is_the_one_verify_recomputes(tmp_path, capsys, model):
    """One proof digest: the state digest a forget's receipt carries is the digest `verify`
    recomputes by refitting from the stored rows alone (QSS and forest stores)."""
    X, y = classification_data()
    if model == "forest":  # enough rows that most forgets miss every instance's D°
        X = np.random.default_rng(0).normal(size=(1200, 4)).astype(np.float32)
        y = (X[:, 0] > 0).astype(int)
    data = tmp_path / "d.csv"
    write_csv(data, X, y, [f"u{i}" for i in range(len(y))])
    store = tmp_path / "s.db"
    options = FAST_ARGS if model == "qss" else ["--model", "forest", "--n-estimators", "4"]
    assert run(capsys, "fit", "--data", data, "--store", store, *options)[0] == 0
    for i in range(5, 40):  # a forget that started no background rebuild: its digest is final
        code, out, _ = run(capsys, "forget", "--store", store, "--ids", f"u{i}", "--json")
        assert code == 0
        receipt = json.loads(out)
        if not receipt["rebuild_started"]:
            break
    assert not receipt["rebuild_started"]
    code, out, _ = run(capsys, "verify", "--store", store, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"]
    assert report["refit_digest"] == report["state_digest"] == receipt["state_digest"]
    code, out, _ = run(capsys, "receipts", "list", "--store", store, "--json")
    assert json.loads(out)["receipts"][-1]["state_digest"] == receipt["state_digest"]
