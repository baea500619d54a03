"""Who else can read a store: its files are the owner's alone, and a busy store names its
holder without repeating its command line.

A SQLite store holds every row and, with ``store_key=True``, the secret key: the database
file, SQLite's ``-wal``/``-shm``/``-journal`` beside it and the scratch file of a creation are
created mode 0600 whatever the umask; a store another user may read warns once per open,
saying ``chmod 600``. A second writer's ``StoreBusy`` names the holder by pid and program name
only: its arguments may hold a DSN's password or a token.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import FAST, classification_data, postgres_dsn, user_ids

from forgetting import QSSClassifier
from forgetting.store import DurableModel
from forgetting.store.create import create_atomically
from forgetting.store.errors import StoreBusy

IDS = user_ids(200)
SECRET = "s3cr3t-token-in-argv-Zq81"


def _mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _store(location: Path, **kwargs) -> DurableModel:
    X, y = classification_data(n=200)
    return DurableModel.create(str(location), QSSClassifier(**FAST), X, y, IDS, **kwargs)


def _chmod_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, UserWarning) and "chmod 600" in str(w.message)
    ]


def test_a_new_store_and_its_log_files_are_the_owner_s_alone(tmp_path):
    location = tmp_path / "model.db"
    with _umask(0o000):  # the most permissive umask: the modes are the library's own
        model = _store(location, store_key=True)
        try:
            model.forget([IDS[3]])
            with DurableModel.open(str(location), read_only=True) as reader:
                reader.lookup(IDS[4])  # a reader beside the writer: -wal and -shm exist
                for suffix in ("", "-wal", "-shm"):
                    assert _mode(f"{location}{suffix}") == 0o600, suffix
        finally:
            model.close()
    assert _mode(location) == 0o600
    assert _mode(f"{location}.lock") == 0o600
    assert not [p.name for p in tmp_path.iterdir() if _mode(p) & 0o077]


def test_the_scratch_file_of_a_creation_is_the_owner_s_alone(tmp_path):
    """The new store is written beside the target before it is renamed into place: that
    file and its log are 0600 while they are written."""
    location = tmp_path / "model.db"
    seen: dict[str, int] = {}

    def write(new):
        with new.transaction() as cur:
            new.create_tables(cur, {}, 0)
            assert Path(new.location).name.startswith(".model.db.creating-")
            seen.update({p.name: _mode(p) for p in tmp_path.iterdir()})

    with _umask(0o000):
        store, _ = create_atomically(str(location), False, lambda: None, write)
        store.close()
    assert seen and all(mode == 0o600 for mode in seen.values()), seen
    assert any(name.endswith("-wal") for name in seen), seen


def test_a_store_other_users_can_read_warns_once_per_open_with_the_fix(tmp_path):
    location = tmp_path / "model.db"
    _store(location).close()
    for read_only in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            DurableModel.open(str(location), read_only=read_only).close()
        assert _chmod_warnings(caught) == [], read_only  # 0600: nothing to say
    os.chmod(location, 0o644)
    for read_only in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with DurableModel.open(str(location), read_only=read_only) as model:
                model.lookup(IDS[5])
                model.stats()
        found = _chmod_warnings(caught)
        assert len(found) == 1, found
        assert f"chmod 600 {location}" in found[0] and "0644" in found[0], found
        assert "\n" not in found[0]


def test_stores_made_by_earlier_releases_still_open_after_a_warning(tmp_path):
    """A store written before files were made private (0644) opens as it did, warning."""
    location = tmp_path / "model.db"
    with _store(location) as model:
        digest = model.state_digest()
    os.chmod(location, 0o644)
    with pytest.warns(UserWarning, match="chmod 600"):
        with DurableModel.open(str(location)) as model:
            assert model.state_digest() == digest


# -- StoreBusy names the holder by pid and program, not its arguments --------------------------
HOLDER = """
import sys
from forgetting.store import DurableModel
model = DurableModel.open(sys.argv[-1])
print("ready", flush=True)
sys.stdin.read()
model.close()
"""


@contextlib.contextmanager
def _holder(location: str) -> Iterator[subprocess.Popen]:
    """Another process holding the store as its writer, with a secret among its arguments
    (as ``forgetting serve --token ...`` or a DSN with a password would have)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, f"--token={SECRET}", location],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line == "ready", proc.stderr.read()
        yield proc
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()
        proc.wait(timeout=60)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_store_busy_names_the_holder_without_its_arguments(tmp_path, backend):
    location = postgres_dsn() if backend == "postgres" else str(tmp_path / "model.db")
    _store(location, overwrite=True).close()
    with _holder(location) as proc:
        with pytest.raises(StoreBusy) as info:
            DurableModel.open(location)
        text = str(info.value)
        assert "\n" not in text
        assert SECRET not in text and "--token" not in text, text
        assert f"pid {proc.pid}" in text, text
        program = Path(f"/proc/{proc.pid}/comm").read_text().strip()
        assert f"pid {proc.pid}: {program}" in text, text
    if backend == "postgres":  # every role of the database may read application names
        import psycopg

        with psycopg.connect(location) as conn:
            names = [n for (n,) in conn.execute("SELECT application_name FROM pg_stat_activity")]
        assert not [n for n in names if SECRET in (n or "")]


def _empty_store(new) -> None:
    with new.transaction() as cur:
        new.create_tables(cur, {}, 0)


def test_a_creation_in_progress_is_named_without_its_arguments(tmp_path, monkeypatch):
    """The creators' lock file names its holder for the next creator: pid and program."""
    location = tmp_path / "model.db"
    monkeypatch.setattr(sys, "argv", ["forgetting", "fit", f"--token={SECRET}"])
    refused: list[str] = []

    def fit():  # a second creation while this one runs
        with pytest.raises(StoreBusy) as info:
            create_atomically(str(location), False, lambda: None, _empty_store)
        refused.append(str(info.value))

    store, _ = create_atomically(str(location), False, fit, _empty_store)
    store.close()
    assert refused and f"pid {os.getpid()}" in refused[0], refused
    assert SECRET not in refused[0] and "--token" not in refused[0], refused
    assert SECRET not in Path(f"{location}.lock").read_text()
