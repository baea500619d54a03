"""A store is opened only if its database holds exactly what the library writes.

Someone with write access to the file (or the PostgreSQL schema) could plant objects that act
on their own: a trigger that copies every forgotten row into another table before it is
deleted (``forget`` acknowledged, ``verify`` ok, the row's features in the file for good), an
extra table holding a copy of the rows, a view over an unbounded recursive query in place of
a table (every read of it never returns), a trigger on the receipts that makes each forget run
for minutes. Every open (writable and read-only) compares the catalogue with what the code
creating the tables writes, before it reads any table, and refuses anything else with one
``StoreCorrupt`` line naming the object; ``verify`` reports the same as problems.

The recursive views are opened in a child process whose timeout is a hang guard only: a
refusal comes from the catalogue, never from a clock.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAST, classification_data, postgres_dsn, user_ids

from forgetting import ExactForestClassifier, QSSClassifier
from forgetting.store import DurableForest, DurableModel
from forgetting.store.errors import StoreCorrupt, StoreError, StoreTampered

IDS = user_ids(200)
ELSEWHERE = "forgetting_test_elsewhere"
"""A PostgreSQL schema that is not the store's: a planted trigger's function lives there, so
the trigger alone is the foreign object in the store's schema."""
HANG_GUARD_S = 120
"""A child that takes this long is hung (a refusal takes a catalogue read)."""


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text, f"not one line: {text!r}"
    assert "Traceback" not in text
    return text


def _is_pg(location: str) -> bool:
    return location.startswith("postgresql://")


def _execute(location: str, *statements: str) -> None:
    """Run statements straight on the store's database, as someone with access could."""
    if _is_pg(location):
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
        return
    conn = sqlite3.connect(location)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _query(location: str, statement: str) -> list[tuple]:
    if _is_pg(location):
        import psycopg

        with psycopg.connect(location) as conn:
            return conn.execute(statement).fetchall()
    conn = sqlite3.connect(location)
    try:
        return conn.execute(statement).fetchall()
    finally:
        conn.close()


def _drop_planted(location: str) -> None:
    """PostgreSQL: remove what a test planted outside the store's tables (a creation with
    overwrite replaces the tables, and with them their triggers, rules and policies)."""
    if not _is_pg(location):
        return
    views = _query(
        location,
        "SELECT relname FROM pg_class WHERE relkind = 'v' AND relnamespace = "
        "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())",
    )
    _execute(
        location,
        *[f"DROP VIEW {name} CASCADE" for (name,) in views],
        "DROP TABLE IF EXISTS keep, rows_kept, rows_child CASCADE",
        "DROP FUNCTION IF EXISTS keep_rows()",
        f"DROP SCHEMA IF EXISTS {ELSEWHERE} CASCADE",
    )


@pytest.fixture
def store(db):
    """A closed QSS store on each backend; what a test plants in it is removed after."""
    _drop_planted(db)
    X, y = classification_data(n=200)
    DurableModel.create(db, QSSClassifier(**FAST), X, y, IDS, overwrite=True).close()
    yield db
    _drop_planted(db)


def _plant_trigger(location: str, table: str = "rows") -> None:
    """A trigger that keeps every deleted row's features (in meta, a store table: the
    trigger is the only foreign object)."""
    if _is_pg(location):
        _execute(
            location,
            f"CREATE SCHEMA {ELSEWHERE}",
            f"CREATE FUNCTION {ELSEWHERE}.keep() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO meta (name, value) VALUES ('kept-' || encode(old.id_key, 'hex'), "
            "old.features); RETURN old; END $$",
            f"CREATE TRIGGER keep_forgotten BEFORE DELETE ON {table} FOR EACH ROW "
            f"EXECUTE FUNCTION {ELSEWHERE}.keep()",
        )
    else:
        _execute(
            location,
            f"CREATE TRIGGER keep_forgotten BEFORE DELETE ON {table} BEGIN "
            "INSERT INTO meta (name, value) VALUES ('kept-' || hex(old.id_key), old.features); "
            "END",
        )


def _refused(location: str, name: str, *, read_only: bool) -> str:
    with pytest.raises(StoreTampered) as info:
        DurableModel.open(location, read_only=read_only)
    text = _one_line(info.value)
    assert name in text, text
    return text


# -- high: a planted trigger -----------------------------------------------------------------
def test_a_trigger_keeping_forgotten_rows_is_refused_on_every_open(store):
    _plant_trigger(store)
    for read_only in (False, True):
        text = _refused(store, "keep_forgotten", read_only=read_only)
        assert "trigger" in text
    with pytest.raises(StoreTampered, match="keep_forgotten"):
        DurableForest.open(store, read_only=True)
    assert StoreTampered.__mro__[1] is StoreCorrupt  # callers treat it as corrupt contents
    # nothing was read or changed: the rows are all there, no copy was made
    assert _query(store, "SELECT COUNT(*) FROM rows")[0][0] == len(IDS)
    names = {
        bytes(n).decode() if isinstance(n, bytes) else n
        for (n,) in _query(store, "SELECT name FROM meta")
    }
    assert not [n for n in names if n.startswith("kept-")]


def test_a_trigger_planted_while_a_sqlite_writer_runs_stops_its_next_write(tmp_path):
    """A trigger on the receipts (one that could make each forget run for minutes) planted
    behind a running writer's back: its next write is refused before the trigger runs, and
    nothing of the change is in the store."""
    location = str(tmp_path / "model.db")
    X, y = classification_data(n=200)
    model = DurableModel.create(location, QSSClassifier(**FAST), X, y, IDS)
    try:
        _execute(
            location,
            "CREATE TABLE keep (body TEXT)",
            "CREATE TRIGGER slow_receipts AFTER INSERT ON receipts BEGIN "
            "INSERT INTO keep VALUES (new.body); END",
        )
        with pytest.raises(StoreError) as info:
            model.forget([IDS[3]])
        text = _one_line(info.value)
        assert "slow_receipts" in text or "keep" in text, text
        assert _query(location, "SELECT COUNT(*) FROM keep")[0][0] == 0
        keys = {bytes(k) for (k,) in _query(location, "SELECT id_key FROM rows")}
        assert len(keys) == len(IDS)
        assert not model.available  # memory cannot be restored from such a store
        with pytest.raises(StoreTampered):
            model.reload()
        _execute(location, "DROP TRIGGER slow_receipts", "DROP TABLE keep")
        model.reload()  # the store is what the library wrote again
        model.forget([IDS[3]])
        assert model.verify()["ok"]
    finally:
        model.close()


# -- high: an extra table holding a copy of the rows --------------------------------------
def test_an_extra_table_with_a_copy_of_the_rows_is_refused_and_verify_reports_it(store):
    reader = DurableModel.open(store, read_only=True)
    writer = DurableModel.open(store)
    try:
        _execute(store, "CREATE TABLE keep AS SELECT id_key, features FROM rows")
        for model in (writer, reader):
            audit = model.verify()
            assert not audit["ok"], audit
            assert any("keep" in p and "table" in p for p in audit["problems"]), audit
            assert all("\n" not in p for p in audit["problems"])
    finally:
        writer.close()
        reader.close()
    for read_only in (False, True):
        _refused(store, "keep", read_only=read_only)


@pytest.mark.parametrize(
    "change",
    [
        "extra-column",
        "extra-index",
        "contrib-table-of-no-instance",
        "changed-column-type",
        "extra-meta-entry",
    ],
)
def test_a_store_table_not_as_the_library_wrote_it_is_refused(store, change):
    pg = _is_pg(store)
    blob = "BYTEA" if pg else "BLOB"
    if change == "extra-column":  # a column the forget never clears
        statements = [f"ALTER TABLE rows ADD COLUMN kept {blob}"]
        name = "rows"
    elif change == "extra-index":
        statements = ["CREATE INDEX keep_features ON rows (features)"]
        name = "keep_features"
    elif change == "contrib-table-of-no-instance":  # a store has one per instance, no more
        statements = [
            f"CREATE TABLE contrib_7 (id_key {blob} PRIMARY KEY, blob {blob} NOT NULL)"
            + ("" if pg else " WITHOUT ROWID"),
            "INSERT INTO contrib_7 SELECT id_key, features FROM rows",
        ]
        name = "contrib_7"
    elif change == "changed-column-type":
        if pg:
            statements = ["ALTER TABLE receipt_ids ALTER COLUMN id_hash TYPE varchar(80)"]
        else:  # the same columns, spelled otherwise
            statements = [
                "ALTER TABLE receipt_ids RENAME TO old_ids",
                "CREATE TABLE receipt_ids (id_hash VARCHAR(80) NOT NULL, seq BIGINT)",
                "DROP TABLE old_ids",
                "CREATE INDEX receipt_ids_hash ON receipt_ids (id_hash)",
            ]
        name = "receipt_ids"
    else:  # a copy of a row's features kept in an entry the library never writes
        value = "decode('00ff', 'hex')" if pg else "x'00ff'"
        statements = [f"INSERT INTO meta (name, value) VALUES ('kept', {value})"]
        name = "kept"
    _execute(store, *statements)
    for read_only in (False, True):
        _refused(store, name, read_only=read_only)


def test_a_sound_store_has_no_schema_problems(store):
    with DurableModel.open(store) as model:
        model.forget(IDS[:3])
        assert model._store.schema_problems() == []
        assert model.verify()["problems"] == []
    with DurableModel.open(store, read_only=True) as reader:
        assert reader._store.schema_problems() == []


def test_a_forest_store_is_checked_the_same(db):
    _drop_planted(db)
    X, y = classification_data(n=200)
    forest = DurableForest.create(
        db, ExactForestClassifier(n_estimators=5, random_state=0), X, y, IDS, overwrite=True
    )
    try:
        assert forest.verify()["ok"]
        _plant_trigger(db)
        audit = forest.verify()
        assert not audit["ok"] and any("keep_forgotten" in p for p in audit["problems"]), audit
    finally:
        forest.close()
        for read_only in (False, True):
            with pytest.raises(StoreTampered, match="keep_forgotten"):
                DurableForest.open(db, read_only=read_only)
        _drop_planted(db)


# -- medium: views over an unbounded recursive query ------------------------------------------
OPENER = """
import sys
from forgetting.store import open_store
from forgetting.store.errors import StoreError
try:
    open_store(sys.argv[1], read_only=sys.argv[2] == "ro").close()
    print("opened")
except StoreError as err:
    print(type(err).__name__, err)
"""


def _endless_view(location: str) -> None:
    """``rows`` replaced by a view that never returns a row (it counts an endless series)."""
    series = "1::bigint" if _is_pg(location) else "1"
    _execute(
        location,
        "ALTER TABLE rows RENAME TO rows_kept",
        f"CREATE VIEW rows AS WITH RECURSIVE n(i) AS (SELECT {series} UNION ALL "
        "SELECT i + 1 FROM n) SELECT id_key, seq, features, target, in_pool FROM rows_kept "
        "WHERE (SELECT COUNT(*) FROM n) > 0",
    )


def _run_guarded(args: list[str], location: str) -> subprocess.CompletedProcess:
    """Run a child; a child still running after HANG_GUARD_S is hung (a failure), and on
    PostgreSQL its server session is ended (the view would run on without it)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        if _is_pg(location):
            _execute(
                location,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                f"application_name LIKE 'forgetting pid {proc.pid}:%'",
            )
        pytest.fail(f"{' '.join(args[3:])}: hung on a recursive view (no answer)")
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.mark.parametrize("mode", ["rw", "ro"])
def test_a_table_replaced_by_an_endless_recursive_view_is_refused_not_read(store, mode):
    _endless_view(store)
    done = _run_guarded([sys.executable, "-c", OPENER, store, mode], store)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("StoreTampered") and "view rows" in done.stdout, done.stdout
    assert done.stdout.count("\n") == 1, done.stdout


# SQLite only: the CLI's store argument is the same on both backends
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_the_cli_refuses_an_endless_view_in_one_line(store, command):
    _endless_view(store)
    args = [sys.executable, "-m", "forgetting", command, "--store", store]
    done = _run_guarded(args, store)
    assert done.returncode != 0
    assert "view rows" in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr


# -- PostgreSQL: what its catalogue can hold besides tables ------------------------------------
@pytest.mark.parametrize("plant", ["rule", "policy", "unlogged", "child", "function", "view"])
def test_postgres_objects_acting_on_the_store_are_refused(plant):
    location = postgres_dsn()
    _drop_planted(location)
    X, y = classification_data(n=200)
    DurableModel.create(location, QSSClassifier(**FAST), X, y, IDS, overwrite=True).close()
    try:
        statements, name = {
            # a rule copying every deleted row (a rewrite, not a trigger)
            "rule": (
                [
                    "CREATE TABLE keep (id_key bytea, features bytea)",
                    "CREATE RULE keep_forgotten AS ON DELETE TO rows DO ALSO "
                    "INSERT INTO keep VALUES (old.id_key, old.features)",
                ],
                "keep_forgotten",
            ),
            # row-level security hiding rows from the reader (verify would not see them)
            "policy": (
                [
                    "ALTER TABLE rows ENABLE ROW LEVEL SECURITY",
                    "ALTER TABLE rows FORCE ROW LEVEL SECURITY",
                    "CREATE POLICY hide_some ON rows USING (seq % 2 = 0)",
                ],
                "hide_some",
            ),
            # an unlogged table loses its acknowledged rows in a crash
            "unlogged": (["ALTER TABLE receipts SET UNLOGGED"], "receipts"),
            # rows of a child table are read and deleted through rows
            "child": (["CREATE TABLE rows_child () INHERITS (rows)"], "rows_child"),
            "function": (
                [
                    "CREATE FUNCTION keep_rows() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
                ],
                "keep_rows",
            ),
            "view": (
                ["CREATE VIEW keep AS SELECT id_key, features FROM rows"],
                "keep",
            ),
        }[plant]
        _execute(location, *statements)
        for read_only in (False, True):
            _refused(location, name, read_only=read_only)
    finally:
        _drop_planted(location)
        DurableModel.create(location, QSSClassifier(**FAST), X, y, IDS, overwrite=True).close()


def test_a_postgres_schema_with_foreign_objects_cannot_become_a_store():
    """A creation into a schema that already holds another table refuses in one line and
    leaves no store behind: the next open would refuse it anyway."""
    location = postgres_dsn()
    _drop_planted(location)
    X, y = classification_data(n=200)
    _execute(location, "CREATE TABLE keep (x integer)")
    try:
        with pytest.raises(StoreError) as info:
            DurableModel.create(location, QSSClassifier(**FAST), X, y, IDS, overwrite=True)
        assert "keep" in _one_line(info.value)
    finally:
        _drop_planted(location)
    DurableModel.create(location, QSSClassifier(**FAST), X, y, IDS, overwrite=True).close()


# -- SQLite: the file's format ------------------------------------------------------------------
def _copy_with_encoding(source: Path, target: Path, encoding: str) -> None:
    """A copy of the store with every object and row, in another text encoding."""
    src = sqlite3.connect(source)
    conn = sqlite3.connect(target)
    conn.execute(f"PRAGMA encoding = '{encoding}'")
    objects = src.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
        "AND name NOT LIKE 'sqlite_%' ORDER BY type DESC"
    ).fetchall()
    for kind, name, sql in objects:
        conn.execute(sql)
        if kind == "table":
            rows = src.execute(f"SELECT * FROM {name}").fetchall()
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                conn.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)
    conn.commit()
    conn.close()
    src.close()


def test_a_sqlite_store_in_another_text_encoding_is_refused(tmp_path):
    location = tmp_path / "model.db"
    X, y = classification_data(n=200)
    DurableModel.create(str(location), QSSClassifier(**FAST), X, y, IDS).close()
    copy = tmp_path / "utf16.db"
    _copy_with_encoding(location, copy, "UTF-16le")
    os.chmod(copy, 0o600)
    for read_only in (False, True):
        _refused(str(copy), "UTF-16", read_only=read_only)


def test_verify_finds_a_damaged_page_that_open_does_not_read(tmp_path):
    """SQLite's quick_check runs in verify: a damaged index page that no open reads (the
    receipts' id index) makes verify fail with a problem line."""
    location = tmp_path / "model.db"
    X, y = classification_data(n=200)
    with DurableModel.create(str(location), QSSClassifier(**FAST), X, y, IDS) as model:
        for i in range(20):
            model.forget([IDS[i]])
    (root,) = _query(
        str(location), "SELECT rootpage FROM sqlite_master WHERE name = 'receipt_ids_hash'"
    )[0]
    (page_size,) = _query(str(location), "PRAGMA page_size")[0]
    with open(location, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\x0d" + b"\xff" * 64)  # a leaf page with garbage where its header was
    with DurableModel.open(str(location), read_only=True) as reader:
        audit = reader.verify()
    assert not audit["ok"] and any("quick_check" in p for p in audit["problems"]), audit


def test_stores_written_by_the_previous_release_still_open(tmp_path):
    """A v2 store with the previous release's exact CREATE statements (contributions as
    columns of rows) is read by a read-only open and converted by a writable one; the
    rename that builds it here makes SQLite quote the table's name in its statement
    (``CREATE TABLE "rows" ...``), which is still the same table, token for token."""
    location = str(tmp_path / "model.db")
    X, y = classification_data(n=200)
    with DurableModel.create(location, QSSClassifier(**FAST), X, y, IDS) as model:
        digest = model.state_digest()
    conn = sqlite3.connect(location)
    conn.execute(
        "CREATE TABLE rows_v2 (id_key BLOB PRIMARY KEY, seq BIGINT NOT NULL, "
        "features BLOB NOT NULL, target REAL, in_pool INTEGER NOT NULL, "
        "c0 BLOB, c1 BLOB, c2 BLOB)"
    )
    conn.execute(
        "INSERT INTO rows_v2 SELECT rows.*, c0.blob, c1.blob, c2.blob FROM rows "
        "LEFT JOIN contrib_0 c0 USING (id_key) LEFT JOIN contrib_1 c1 USING (id_key) "
        "LEFT JOIN contrib_2 c2 USING (id_key)"
    )
    for statement in (
        "DROP TABLE rows",
        "DROP TABLE contrib_0",
        "DROP TABLE contrib_1",
        "DROP TABLE contrib_2",
        "ALTER TABLE rows_v2 RENAME TO rows",
        "CREATE INDEX rows_seq ON rows (seq)",
        "UPDATE meta SET value = CAST('forgetting-store-v2' AS BLOB) WHERE name = 'format'",
    ):
        conn.execute(statement)
    conn.commit()
    conn.close()
    with DurableModel.open(location, read_only=True) as reader:
        assert reader.state_digest() == digest
    with DurableModel.open(location) as writer:  # converted
        assert writer.state_digest() == digest
        assert writer.verify()["ok"]
        assert writer._store.schema_problems() == []
