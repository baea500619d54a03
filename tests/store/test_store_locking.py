"""One writer per store, whatever path, link or role reaches it; locations that cannot be a
store say so in one line; ``verify`` checks the contributions against the rows.

The writers here run in other processes (a subprocess holding the store open), as a running
``forgetting serve`` would, and the second writer is this process or a CLI command.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from helpers import FAST, classification_data, postgres_dsn, user_ids

from forgetting import QSSClassifier
from forgetting.store import DurableModel
from forgetting.store.errors import StoreBusy, StoreError

IDS = user_ids(200)

HOLDER = """
import sys
from forgetting.store import DurableModel
model = DurableModel.open(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    if command == "forget":
        model.forget([arg])
        print("done", flush=True)
model.close()
print("closed", flush=True)
"""


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text, f"not one line: {text!r}"
    assert "Traceback" not in text
    return text


def _small_store(location: str) -> DurableModel:
    X, y = classification_data(n=200)
    return DurableModel.create(location, QSSClassifier(**FAST), X, y, IDS, overwrite=True)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A closed SQLite store, copied per test (a fit per test is slow)."""
    path = tmp_path_factory.mktemp("template") / "model.db"
    _small_store(str(path)).close()
    return path


@pytest.fixture
def store(template, tmp_path) -> Path:
    path = tmp_path / "s.db"
    shutil.copy(template, path)
    return path


class Holder:
    """Another process holding ``location`` open as its writer (a running server)."""

    def __init__(self, location: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, location],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise AssertionError(f"the holder did not start: {line} {self.proc.stderr.read()}")

    def forget(self, row_id: str) -> None:
        self.proc.stdin.write(f"forget {row_id}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done", self.proc.stderr.read()

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.stdout.readline().strip() == "closed", self.proc.stderr.read()
        self.proc.wait(timeout=60)

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=30)


@contextlib.contextmanager
def holding(location: str) -> Iterator[Holder]:
    holder = Holder(location)
    try:
        yield holder
    finally:
        holder.kill()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forgetting", *args], capture_output=True, text=True, timeout=300
    )


def _ids_in(path: Path) -> set[str]:
    with DurableModel.open(str(path), read_only=True) as reader:
        return {str(i) for i in reader.estimator.ids_}


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


# -- H1: a symlink to the store, or to its directory ----------------------------------------
@pytest.mark.parametrize("link", ["file", "directory"])
def test_a_second_writer_through_a_symlink_is_refused(store, tmp_path, link):
    if link == "file":
        other = tmp_path / "link.db"
        other.symlink_to(store.name)
    else:
        (tmp_path / "linked").symlink_to(tmp_path, target_is_directory=True)
        other = tmp_path / "linked" / store.name
    with holding(str(store)) as holder:
        with pytest.raises(StoreBusy) as info:
            DurableModel.open(str(other))
        assert "in use by another writer" in _one_line(info.value)
        done = _cli("forget", "--store", str(other), "--ids", IDS[2])
        assert done.returncode == 1 and "busy" in done.stderr, done.stderr
        holder.forget(IDS[3])
        # a reader through the link sees the running writer's log (beside the real file)
        assert IDS[3] not in _ids_in(other)
        holder.close()
    assert IDS[2] in _ids_in(store) and IDS[3] not in _ids_in(store)
    with DurableModel.open(str(other), read_only=True) as reader:
        assert reader.verify()["ok"]


# -- H2: a hard link to the store file ------------------------------------------------------
def test_a_hard_linked_store_file_is_refused_by_every_name(store, tmp_path):
    hard = tmp_path / "hard.db"
    with holding(str(store)) as holder:
        os.link(store, hard)
        for name in (hard, store):
            with pytest.raises(StoreError) as info:
                DurableModel.open(str(name))  # the holder, or the second name, refuses it
            _one_line(info.value)
        with pytest.raises(StoreError) as info:
            DurableModel.open(str(hard), read_only=True)  # its log is beside the other name
        assert "hard link" in _one_line(info.value)
        done = _cli("forget", "--store", str(hard), "--ids", IDS[2])
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        holder.forget(IDS[3])
        holder.close()
    with pytest.raises(StoreError, match="hard link") as info:
        DurableModel.open(str(store))  # nobody holds it now: still two names
    _one_line(info.value)
    hard.unlink()
    assert _integrity(store) == "ok"
    with DurableModel.open(str(store)) as model:
        assert IDS[2] in model.estimator.ids_ and IDS[3] not in model.estimator.ids_
        assert model.verify()["ok"]


# -- M1: the lock file deleted under a running writer ---------------------------------------
def test_deleting_the_lock_file_does_not_let_a_second_writer_in(store, tmp_path):
    with holding(str(store)) as holder:
        for lock in tmp_path.glob("*.lock"):
            lock.unlink()
        done = _cli("forget", "--store", str(store), "--ids", IDS[2])
        assert done.returncode == 1 and "busy" in done.stderr, done.stderr
        with pytest.raises(StoreBusy):
            DurableModel.open(str(store))
        holder.forget(IDS[3])
        holder.close()
    assert IDS[2] in _ids_in(store) and IDS[3] not in _ids_in(store)


def test_a_store_replaced_by_fit_overwrite_is_still_locked_for_its_new_writer(store):
    """`create(..., overwrite=True)` renames a new file into place: the writer lock must
    hold on the new file from the moment it has the store's name."""
    X, y = classification_data(n=200)
    with DurableModel.create(str(store), QSSClassifier(**FAST), X, y, IDS, overwrite=True) as m:
        with pytest.raises(StoreBusy):
            DurableModel.open(str(store))
        done = _cli("forget", "--store", str(store), "--ids", IDS[2])
        assert done.returncode == 1 and "busy" in done.stderr, done.stderr
        m.forget([IDS[3]])
    assert IDS[2] in _ids_in(store) and IDS[3] not in _ids_in(store)


def test_a_writer_in_this_process_refuses_a_second_one_and_keeps_working(store):
    with DurableModel.open(str(store)) as model:
        for _ in range(3):
            with pytest.raises(StoreBusy) as info:
                DurableModel.open(str(store))
            assert f"pid {os.getpid()}" in _one_line(info.value)
        model.forget([IDS[3]])
        with DurableModel.open(str(store), read_only=True) as reader:
            assert IDS[3] not in reader.estimator.ids_
    with DurableModel.open(str(store)) as again:  # the lock went with the writer
        assert IDS[3] not in again.estimator.ids_


# -- H3: a second PostgreSQL role with its own schema ---------------------------------------
def _as_role(dsn: str, role: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@contextlib.contextmanager
def _second_role(dsn: str) -> Iterator[str]:
    """A role ``forgetting_bob`` with a schema of its own (first in its search path), granted
    the store's tables in ``public``; yields its DSN."""
    import psycopg

    role = "forgetting_bob"

    def drop(admin) -> None:
        admin.execute(f"DROP SCHEMA IF EXISTS {role} CASCADE")
        exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if exists:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")

    with psycopg.connect(dsn, autocommit=True) as admin:
        drop(admin)
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"CREATE SCHEMA {role} AUTHORIZATION {role}")
        admin.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        admin.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    try:
        yield _as_role(dsn, role)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            drop(admin)


def test_a_second_postgres_role_reaching_the_same_tables_is_refused():
    import psycopg

    dsn = postgres_dsn()
    _small_store(dsn).close()
    with _second_role(dsn) as bob:
        with psycopg.connect(bob) as conn:  # the situation of the finding
            schema = conn.execute("SELECT current_schema()").fetchone()[0]
            assert schema == "forgetting_bob"
            assert conn.execute("SELECT COUNT(*) FROM rows").fetchone()[0] == 200
        with holding(dsn) as holder:
            with pytest.raises(StoreBusy) as info:
                DurableModel.open(bob)
            _one_line(info.value)
            holder.forget(IDS[3])
            holder.close()
        with holding(bob) as holder:  # and the other way round
            with pytest.raises(StoreBusy):
                DurableModel.open(dsn)
            holder.close()
        with DurableModel.open(bob, read_only=True) as reader:
            assert IDS[3] not in reader.estimator.ids_
            assert reader.verify()["ok"]


# -- low: locations that cannot be a store --------------------------------------------------
def test_a_directory_as_store_path_says_so_without_retry(tmp_path):
    directory = tmp_path / "dir.db"
    directory.mkdir()
    X, y = classification_data(n=200)
    calls = [
        lambda: DurableModel.open(str(directory), read_only=True),
        lambda: DurableModel.open(str(directory)),
        lambda: DurableModel.create(str(directory), QSSClassifier(**FAST), X, y, overwrite=True),
    ]
    for call in calls:
        with pytest.raises(StoreError) as info:
            call()
        text = _one_line(info.value)
        assert "directory" in text and "retry" not in text and "I/O" not in text, text
    assert list(directory.iterdir()) == []


@contextlib.contextmanager
def _read_only_mount(path: Path) -> Iterator[Path]:
    """A small tmpfs mounted at ``path`` (the test remounts it read-only); root only."""
    path.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a file system needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_read_only_file_system_is_named_once_and_not_retried(store, tmp_path):
    with _read_only_mount(tmp_path / "ro") as ro:
        shutil.copy(store, ro / "model.db")
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        with pytest.raises(StoreError) as info:
            DurableModel.open(str(ro / "model.db"))
        text = _one_line(info.value)
        assert "read-only" in text and "retry" not in text, text
        done = _cli("forget", "--store", str(ro / "model.db"), "--ids", IDS[2])
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "read-only" in done.stderr and "retry" not in done.stderr, done.stderr
        with DurableModel.open(str(ro / "model.db"), read_only=True) as reader:
            assert reader.verify()["ok"]


# -- low: verify checks the contributions against the rows ----------------------------------
def _execute(location: str, statement: str, params: tuple = ()) -> None:
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(statement.replace("?", "%s"), params)
        return
    conn = sqlite3.connect(location)
    try:
        conn.execute(statement, params)
        conn.commit()
    finally:
        conn.close()


def _first_key(location: str, statement: str) -> bytes:
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location) as conn:
            return bytes(conn.execute(statement).fetchone()[0])
    conn = sqlite3.connect(location)
    try:
        return bytes(conn.execute(statement).fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("defect", ["orphan", "missing"])
def test_verify_checks_the_contributions_against_the_rows(db, defect):
    _small_store(db).close()
    if defect == "orphan":  # a contribution whose row is gone (what a lost forget leaves)
        blob = _first_key(db, "SELECT blob FROM contrib_0")
        _execute(db, "INSERT INTO contrib_0 (id_key, blob) VALUES (?, ?)", (b"s:ghost", blob))
    else:  # a labeled row without its contribution to an instance that has a schema
        key = _first_key(db, "SELECT id_key FROM contrib_1 ORDER BY id_key")
        _execute(db, "DELETE FROM contrib_1 WHERE id_key = ?", (key,))
    word, table = ("orphan", "contrib_0") if defect == "orphan" else ("missing", "contrib_1")
    with DurableModel.open(db, read_only=True) as reader:
        audit = reader.verify()
    assert not audit["ok"] and audit["state_digest"] == audit["refit_digest"], audit
    assert word in " ".join(audit["problems"]) and table in " ".join(audit["problems"]), audit
    if not db.startswith("postgresql://"):
        done = _cli("verify", "--store", db)
        assert done.returncode == 1 and word in done.stdout, (done.stdout, done.stderr)
    with DurableModel.open(db) as model:
        audit = model.verify()
    if defect == "orphan":
        assert not audit["ok"] and word in " ".join(audit["problems"]), audit
    else:  # a writer rebuilds an instance missing a contribution and writes it whole again
        assert audit["ok"] and audit["problems"] == [], audit


def test_verify_of_a_sound_store_reports_no_problems(db):
    model = _small_store(db)
    model.forget(IDS[:3])
    audit = model.verify()
    model.close()
    assert audit["ok"] and audit["problems"] == [], audit
    with DurableModel.open(db, read_only=True) as reader:
        audit = reader.verify()
    assert audit["ok"] and audit["problems"] == [], audit
