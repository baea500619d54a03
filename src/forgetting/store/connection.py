"""Connections to a store's database: SQLite (embedded default) or PostgreSQL, one writer.

This module knows how to reach a database safely, not what the model's tables hold (that is
:mod:`.sql`). It holds the two dialects' few differences, the translation of driver errors
into store errors, the writer locks, transactions and consistent reads.

Safety rules enforced here:

* **One writer per store, whatever reaches it.** A writable connection holds an exclusive
  lock for its lifetime. SQLite: an ``flock`` on the database file itself, reached through
  its resolved path, so a symlink, a symlinked directory or a deleted lock file cannot let a
  second writer in, and a hard-linked database file is refused (:mod:`.locks`). PostgreSQL:
  ``pg_try_advisory_lock`` keyed by the schema the store's tables resolve to (and the session
  is pinned to that schema), so every role and search path reaching those tables takes the
  same lock; it is taken by the writing session itself, so a killed writer's last commit
  lands first. A second writer gets :class:`StoreBusy` naming the holder, instead of
  silently writing behind a running server's back.
* **The database holds the store's tables only**: every open compares the catalogue with
  what the library writes before it reads a table, and a read or write checks again once
  the schema changed (:meth:`Connection._guard`; :mod:`.catalogue`), so a planted trigger,
  view or extra table is refused, never run or read.
* **Files only their owner reads**: a new SQLite store file is created mode 0600 (SQLite
  gives its ``-wal``, ``-shm`` and ``-journal`` the database file's mode), and opening a
  store whose files other users may read warns, saying ``chmod 600``.
* **Read-only opens change nothing**: SQLite is opened with ``mode=ro`` (``immutable=1`` in a
  read-only directory, where no writer can exist), PostgreSQL with read-only transactions;
  no lock is taken and no file is created.
* **Every failure is a store error**: driver exceptions become :class:`StoreError` (retry),
  :class:`StoreBusy` (lock held), :class:`StoreCorrupt` (unreadable contents) or
  :class:`StoreUnusable` (a location that cannot be the store as given: a directory, a
  read-only file system), each with one line saying what to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .errors import StoreBusy, StoreCorrupt, StoreError, StoreUnusable
from .locks import (
    StoreLock,
    check_location,
    create_private,
    os_error,
    program,
    resolved,
    warn_if_shared,
)

BUSY_TIMEOUT_S = 5.0
"""How long a statement waits for a lock held by another connection before failing."""
CHECKPOINT_TRIES = 3
SQLITE_PRAGMAS = ["journal_mode=WAL", "synchronous=FULL", "secure_delete=ON", "trusted_schema=OFF"]
"""Set on every writable SQLite connection (tests append e.g. ``max_page_count`` to simulate a
full disk). ``trusted_schema=OFF`` (read-only connections too): no function with side effects
runs from the schema, a second guard behind the catalogue check."""
PG_LOCK_GRACE_S = 5.0
"""How long a PostgreSQL writer waits for a lock still held by a crashed writer's session."""


@dataclass(frozen=True)
class Dialect:
    """What SQLite and PostgreSQL spell differently: types and the parameter placeholder."""

    name: str
    blob: str
    real: str
    serial_pk: str
    param: str

    def sql(self, statement: str) -> str:
        """Statements are written with ``?`` placeholders; PostgreSQL wants ``%s``."""
        return statement if self.param == "?" else statement.replace("?", self.param)


SQLITE = Dialect("sqlite", "BLOB", "REAL", "INTEGER PRIMARY KEY AUTOINCREMENT", "?")
POSTGRES = Dialect("postgres", "BYTEA", "DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY", "%s")


def is_postgres(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def describe(location: str) -> str:
    """The location for messages: a DSN without its password."""
    if not is_postgres(location):
        return location
    head, sep, tail = location.partition("@")
    if not sep:
        return location
    scheme, _, creds = head.partition("://")
    return f"{scheme}://{creds.split(':')[0]}@{tail}"


def driver_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a driver call may raise (psycopg's only once it is imported)."""
    errors: list[type[BaseException]] = [sqlite3.Error, OSError]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.Error)
    return tuple(errors)


def store_error(location: str, err: BaseException, doing: str) -> StoreError:
    """Translate a driver or OS error into the store error a caller can act on."""
    where = describe(location)
    if isinstance(err, OSError):
        return os_error(where, err, doing)
    text = " ".join(str(err).split()) or type(err).__name__
    low = text.lower()
    if "readonly database" in low or "read-only file system" in low:
        return StoreUnusable(
            f"{where}: {doing} failed, the store cannot be written here ({text}); open it "
            "read-only (inspect, verify, predict) or copy it to a writable place"
        )
    if any(w in low for w in ("locked", "busy", "could not obtain lock", "lock timeout")):
        return StoreBusy(
            f"{where}: {doing} failed because another connection holds a lock ({text}); "
            "nothing was changed, retry later"
        )
    if any(w in low for w in ("malformed", "not a database", "could not decode", "datatype")):
        return StoreCorrupt(
            f"{where}: the database file is damaged ({text}); restore it from a backup "
            "or refit with `forgetting fit --overwrite`"
        )
    if "disk is full" in low or "no space" in low or "disk full" in low:
        return StoreError(
            f"{where}: {doing} failed, the disk is full ({text}); nothing was acknowledged, "
            "free space and retry"
        )
    return StoreError(f"{where}: {doing} failed ({text}); nothing was acknowledged, retry")


def _application_name() -> str:
    """Who we are, for another writer's StoreBusy message (PostgreSQL keeps 63 bytes):
    the pid and program name, never the arguments (every role of the database may read
    it in ``pg_stat_activity``, and a command line may hold a DSN's password or a token)."""
    return f"forgetting pid {os.getpid()}: {program(os.getpid())}"[:63]


def _holder_name(backend: int, application: str | None) -> str:
    """A PostgreSQL lock holder for a message: its backend, and the pid and program of a
    writer of ours (an application name of another kind, or of an older release that
    recorded arguments, is not repeated)."""
    found = re.match(r"forgetting pid (\d+): (\S+)", application or "")
    if found is None:
        return f"backend {backend}"
    return f"backend {backend}: forgetting pid {found[1]}: {Path(found[2]).name}"


class Connection:
    """A connection to one store's database: opened, locked (writers), reconnected
    (PostgreSQL), with atomic transactions and consistent reads. :class:`.sql.SQLStore`
    adds the model's tables to it."""

    def __init__(
        self,
        location: str,
        *,
        create: bool = False,
        read_only: bool = False,
        lock: bool | StoreLock = True,
    ):
        """``lock``: take the writer lock (True), adopt one already taken (a ``StoreLock``
        on the file, see :mod:`.create`), or none (False: a scratch file of a creation,
        which the creator's locks cover)."""
        self.location = location
        self.read_only = read_only
        self._creating = create
        """A store being created: its tables are not there yet to check (the creation
        checks them once written: :meth:`.sql.SQLStore.create_tables`)."""
        self._schema_cookie: int | None = None
        """SQLite writer: the schema version its catalogue was last checked at."""
        self._checked_session: Any = None
        """PostgreSQL: the session whose catalogue was checked (once per session)."""
        self._lock: StoreLock | None = None
        self._schema_oid: int | None = None
        """PostgreSQL: the schema the store's tables resolve to (:meth:`_pin_schema`)."""
        self._conn: Any = None
        self._must_reload = False
        """PostgreSQL writer: the writer lock was lost and retaken; another writer may have
        changed the store, so writes are refused until the model is read again
        (:meth:`reloaded`)."""
        if is_postgres(location):
            self._open_postgres()
        else:
            self._open_sqlite(Path(location), create, lock)
        if not create:
            try:  # the catalogue, before anything reads a table
                self.read(lambda cur: None, "opening the store")
            except BaseException:
                self.close()
                raise

    # -- connecting ----------------------------------------------------------------------
    def _open_sqlite(self, path: Path, create: bool, lock: bool | StoreLock) -> None:
        """Open the file by its resolved path (so SQLite's -wal/-shm are the real file's,
        whatever name was given); a directory or a hard-linked file is refused."""
        self.dialect = SQLITE
        real = resolved(path)
        found = check_location(path, real)
        if not create:
            if found is None:
                raise FileNotFoundError(f"no store at {path}; create one with `forgetting fit`")
            if found.st_size == 0:
                raise StoreCorrupt(
                    f"{path} is an empty file, not a forgetting store; create one with "
                    "`forgetting fit`"
                )
            warn_if_shared(path, real, found)
        elif found is None:
            create_private(path, real)  # before SQLite creates it 0644
        self._path = real
        if self.read_only:
            return  # a connection per read: see _read_only_connection
        try:
            if isinstance(lock, StoreLock):
                self._lock = lock
            elif lock:
                self._lock = StoreLock(path)
            self._conn = sqlite3.connect(
                str(real), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S
            )
            for pragma in SQLITE_PRAGMAS:
                self._conn.execute(f"PRAGMA {pragma}")
            if self._lock is not None:
                self._lock.still_named()  # the file opened is the file locked
        except BaseException as err:
            self.close()
            if isinstance(err, sqlite3.Error):
                raise store_error(str(path), err, "opening the store") from err
            raise

    def _open_postgres(self) -> None:
        import psycopg

        self.dialect = POSTGRES
        try:
            self._connect_postgres()
            if not self.read_only:
                self._take_advisory_lock()
        except BaseException as err:
            self.close()
            if isinstance(err, psycopg.Error):
                raise store_error(self.location, err, "opening the store") from err
            raise

    def _connect_postgres(self) -> None:
        import psycopg

        # A statement waits for another session's lock as long as SQLite would, then fails.
        options = f"-c lock_timeout={int(BUSY_TIMEOUT_S * 1000)}"
        if self.read_only:
            options += " -c default_transaction_read_only=on"
        self._conn = psycopg.connect(
            self.location, autocommit=False, options=options, application_name=_application_name()
        )
        try:
            self._pin_schema()
        except BaseException:
            with contextlib.suppress(Exception):
                self._conn.close()  # no session of ours goes on with another search_path
            raise

    def _pin_schema(self) -> None:
        """Find the schema this store's tables live in and make it the session's only one.

        Unqualified names resolve through the role's ``search_path``: a role with a schema
        of its own (first in its default ``"$user", public``) has a different
        ``current_schema()`` from the owner's, yet reaches the same tables in ``public``.
        The store's schema is the one its ``meta`` table resolves to (or, before the store
        exists, the schema a new table would be created in), found once per connection
        object; every session of it then sets ``search_path`` to that schema alone, so
        creation, reads, writes and the writer lock (:meth:`_advisory_key`) all name the same
        tables whatever the role or its search path.
        """
        conn = self._conn
        with conn.cursor() as cur:
            if self._schema_oid is None:
                cur.execute(
                    "SELECT COALESCE((SELECT relnamespace FROM pg_class "
                    "WHERE oid = to_regclass('meta')), "
                    "(SELECT oid FROM pg_namespace WHERE nspname = current_schema()))"
                )
                found = cur.fetchone()[0]
                if found is None:
                    conn.rollback()
                    raise StoreUnusable(
                        f"{describe(self.location)}: no store tables are visible and no schema "
                        "of the search_path exists to create them in; create a schema or set "
                        "the role's search_path"
                    )
                self._schema_oid = int(found)
            cur.execute(
                "SELECT set_config('search_path', quote_ident(nspname), false) "
                "FROM pg_namespace WHERE oid = %s",
                (self._schema_oid,),
            )
            if cur.fetchone() is None:
                conn.rollback()
                raise StoreError(
                    f"{describe(self.location)}: the schema holding the store was dropped; "
                    "nothing was acknowledged"
                )
        conn.commit()  # a session setting made in a rolled-back transaction would be undone

    @staticmethod
    def _alive(conn: Any) -> bool:
        return conn is not None and not conn.closed and not conn.broken

    def _reconnect(self, doing: str, *, check_lock: bool) -> None:
        """PostgreSQL: re-establish a lost connection. The writer lock lives and dies with the
        writing session, so for a writer a lost session is a lost lock: it is taken again, and
        since another writer may have changed the store meanwhile, writes are refused with
        StoreError until the model has been read again (:meth:`reloaded`) — however
        the loss was found. ``check_lock`` (before each transaction) probes the session first,
        since a server restart drops it silently; reads find it dead by failing."""
        if self.dialect is not POSTGRES:
            return
        import psycopg

        try:
            if check_lock and self._alive(self._conn):
                with contextlib.suppress(psycopg.Error):  # a dead session is now marked broken
                    self._conn.execute("SELECT 1")
            if not self._alive(self._conn):
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._connect_postgres()
                if not self.read_only:
                    self._must_reload = True
                    self._take_advisory_lock()
        except psycopg.Error as err:
            raise store_error(self.location, err, doing) from err
        if check_lock and self._must_reload:
            with contextlib.suppress(Exception):
                self._conn.rollback()  # the probe's transaction: the reload reads afresh
            raise StoreError(
                f"{describe(self.location)}: the connection holding the writer lock was lost "
                f"and the lock has been taken again; {doing} was not done, retry after the "
                "model reloads"
            )

    def _advisory_key(self, cur) -> int:
        """The writer lock's key: the database and the schema the store's tables are in
        (:meth:`_pin_schema`), the same for every role and search path reaching them. Not a
        store id kept in ``meta``: ``create(..., overwrite=True)`` replaces the tables (and
        would replace such an id) while its writer must keep holding the same lock."""
        cur.execute("SELECT current_database()")
        db = cur.fetchone()[0]
        name = f"forgetting-store:{db}:{self._schema_oid}"
        digest = hashlib.blake2b(name.encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big", signed=True)

    def _take_advisory_lock(self) -> None:
        """A session-level advisory lock taken by the writing connection itself, held until
        that session ends.

        Why not a connection of its own: the sessions of a killed writer end independently.
        An idle lock session ends at once, while the writing session may still be running a
        COMMIT it had received, which lands after the kill; a new writer holding the lock
        meanwhile would load the store without that change and serve a model out of step
        with it. Held by the writing session, the lock is free only after its last commit.

        When the lock cannot be taken the session is closed: a writer keeps no session
        without its lock (a later probe would find it alive, and a write would go out without
        the lock), so every later call reconnects and tries again.
        """
        try:
            self._lock_session()
        except BaseException:
            with contextlib.suppress(Exception):
                self._conn.close()
            raise

    def _lock_session(self) -> None:
        """:meth:`_take_advisory_lock`'s attempt: StoreBusy naming the holder if it fails."""
        conn = self._conn
        with conn.cursor() as cur:
            key = self._advisory_key(cur)
            # A writer that was killed leaves its lock to its backend session until that
            # session has finished what it was doing and noticed the dropped connection
            # (usually milliseconds): wait briefly for that before calling the store busy.
            deadline = time.monotonic() + PG_LOCK_GRACE_S
            while True:
                cur.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                taken = cur.fetchone()[0]
                conn.rollback()  # a session lock outlives the transaction; no snapshot is kept
                if taken:
                    return
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
            cur.execute(
                "SELECT a.pid, a.application_name, a.client_addr FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                "AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
                (key,),  # the shift wraps into the same signed bigint
            )
            found = cur.fetchone()
            conn.rollback()
        holder = "unknown session" if found is None else _holder_name(found[0], found[1])
        raise StoreBusy(
            f"{describe(self.location)} is in use by another writer ({holder}); stop it, or "
            "open read-only for inspect/verify"
        )

    def check_catalogue(self, cur) -> None:
        """Refuse a database holding anything but the store's tables
        (:meth:`.sql.SQLStore.check_catalogue`); nothing to check for a bare connection."""

    def _guard(self, cur) -> None:
        """Check the catalogue at the start of a read or write transaction, before ``cur``
        reads a table: on each read-only SQLite connection (a new one per read), on a SQLite
        writer whenever the schema version moved since its last check (someone changed the
        schema behind its back; SQLite itself re-reads the schema on that version), and
        once per PostgreSQL session (at open and after a reconnect)."""
        if self._creating:
            return
        if self.dialect is POSTGRES:
            if self._checked_session is not self._conn:
                self.check_catalogue(cur)
                self._checked_session = self._conn
        elif self.read_only:
            self.check_catalogue(cur)
        else:
            cookie = cur.execute("PRAGMA schema_version").fetchone()[0]
            if cookie != self._schema_cookie:
                self.check_catalogue(cur)
                self._schema_cookie = cookie

    def reloaded(self) -> None:
        """The model is being rebuilt from a read just made: writes may go again after a
        retaken writer lock (:meth:`_reconnect`)."""
        self._must_reload = False

    # -- plumbing ------------------------------------------------------------------------
    def execute(self, cur, statement: str, params: Sequence = ()) -> Any:
        return cur.execute(self.dialect.sql(statement), params)

    def executemany(self, cur, statement: str, rows: list) -> None:
        if rows:
            cur.executemany(self.dialect.sql(statement), rows)

    @contextlib.contextmanager
    def transaction(self, doing: str = "writing to the store") -> Iterator[Any]:
        """One atomic, durable unit: committed (and fsynced) on exit, rolled back on error.

        Driver errors become :class:`StoreError` (or a subclass); nothing of the transaction
        is then in the store.
        """
        if self.read_only:
            raise StoreError(f"{describe(self.location)} was opened read-only; {doing} refused")
        self._reconnect(doing, check_lock=True)
        errors = driver_errors()
        try:
            cur = self._conn.cursor()
        except errors as err:
            raise store_error(self.location, err, doing) from err
        try:
            if self.dialect is SQLITE:
                cur.execute("BEGIN IMMEDIATE")
            self._guard(cur)
            yield cur
            self._conn.commit()
        except BaseException as err:
            with contextlib.suppress(*errors):
                self._conn.rollback()
            if isinstance(err, errors):
                raise store_error(self.location, err, doing) from err
            raise
        finally:
            with contextlib.suppress(*errors):
                cur.close()

    def _read_only_connection(self, force_ro: bool) -> tuple[sqlite3.Connection, Any]:
        """A connection that creates no file; returns it and a fingerprint of the files, or
        None when the fingerprint need not be checked.

        ``mode=ro`` alone would create ``-wal``/``-shm`` files beside a WAL database (and fail
        in a read-only directory). When no log exists no writer has the file open, so
        ``immutable=1`` reads the file as it is; :meth:`read` then checks that no writer
        appeared meanwhile (a log file would exist) and otherwise reads again with
        ``mode=ro``, which is safe once the writer's log files exist.
        """
        path = self._path
        wal = path.with_name(path.name + "-wal")
        uri = f"file:{quote(str(path.resolve()))}?mode=ro"
        fingerprint = None
        if not force_ro and not wal.exists():
            fingerprint = self._files_fingerprint()
            uri += "&immutable=1"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA trusted_schema=OFF")
        return conn, fingerprint

    def _files_fingerprint(self) -> tuple:
        path = self._path
        wal = path.with_name(path.name + "-wal")
        st = path.stat()
        return (st.st_ino, st.st_size, st.st_mtime_ns, wal.exists())

    def read(self, fn, doing: str = "reading the store", *, check: bool = True) -> Any:
        """Run ``fn(cursor)`` in one read transaction (a consistent view even while another
        process writes), the catalogue checked first (:meth:`_guard`; ``check=False`` for a
        reader of the catalogue itself); driver errors become store errors."""
        errors = driver_errors()
        if self.dialect is SQLITE and self.read_only:
            for attempt in range(2):
                try:
                    conn, fingerprint = self._read_only_connection(force_ro=attempt > 0)
                except (*errors,) as err:
                    raise store_error(self.location, err, doing) from err
                try:
                    cur = conn.cursor()
                    cur.execute("BEGIN")
                    if check:
                        self._guard(cur)
                    out = fn(cur)
                    cur.execute("COMMIT")
                except errors as err:
                    raise store_error(self.location, err, doing) from err
                finally:
                    conn.close()
                if fingerprint is None or fingerprint == self._files_fingerprint():
                    return out
            return out
        self._reconnect(doing, check_lock=False)
        cur = None
        try:
            cur = self._conn.cursor()
            if self.dialect is SQLITE:
                cur.execute("BEGIN")
            else:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if check:
                self._guard(cur)
            out = fn(cur)
            if self.dialect is SQLITE:
                cur.execute("COMMIT")
            return out
        except errors as err:
            raise store_error(self.location, err, doing) from err
        finally:
            with contextlib.suppress(*errors):
                if cur is not None:
                    if self.dialect is SQLITE and self._conn.in_transaction:
                        cur.execute("ROLLBACK")
                    cur.close()
                if self.dialect is POSTGRES:
                    self._conn.rollback()

    def purge_logs(self) -> None:
        """Drop old page images that may still hold removed rows (SQLite's WAL).

        ``wal_checkpoint(TRUNCATE)`` reports ``busy`` when a reader still uses the log; the
        old images are then still on disk, so that is an error, not a success.
        """
        if self.dialect is not SQLITE or self.read_only:
            return
        try:
            for _ in range(CHECKPOINT_TRIES):
                busy, _log, _done = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    return
        except sqlite3.Error as err:
            raise store_error(self.location, err, "purging the write-ahead log") from err
        raise StoreBusy(
            f"{self.location}: the change is committed, but a reader still holds the "
            "write-ahead log that contains the old rows; retry the same request to finish "
            "purging it"
        )

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
