"""The relational mirror of a model: rows, per-instance contributions, schemas, receipts.

One schema serves SQLite (the embedded default) and PostgreSQL; :class:`Dialect` holds the
few differences. The store keeps only what cannot be recomputed: each row's id, features,
label and pool flag, and for every instance with a live schema the row's codes and integer
residuals. Draws, hashes, digests and accumulators are derived again on load.

Invariant kept by every transaction: an instance's schema is present only if every labeled
row has its contribution under that schema and none of its D° rows was removed since. A
deletion or insertion that touches D°_r clears schema r in the same transaction; a landed
rebuild writes the schema and all contributions in one transaction.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "forgetting-store-v1"


@dataclass(frozen=True)
class Dialect:
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


class SQLStore:
    """A connection to one model's tables, with the operations DurableModel needs."""

    def __init__(self, location: str, create: bool = False):
        self.location = location
        if is_postgres(location):
            import psycopg

            self.dialect = POSTGRES
            self._conn = psycopg.connect(location, autocommit=False)
        else:
            path = Path(location)
            if not create and not path.exists():
                raise FileNotFoundError(f"no store at {location}; create one with `fit`")
            self.dialect = SQLITE
            self._conn = sqlite3.connect(location, isolation_level=None, check_same_thread=False)
            for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON"):
                self._conn.execute(f"PRAGMA {pragma}")
        self.n_instances = 0

    # -- plumbing ------------------------------------------------------------------------
    def _execute(self, cur, statement: str, params: Sequence = ()) -> Any:
        return cur.execute(self.dialect.sql(statement), params)

    def _executemany(self, cur, statement: str, rows: list) -> None:
        if rows:
            cur.executemany(self.dialect.sql(statement), rows)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """One atomic, durable unit: committed (and fsynced) on exit, rolled back on error."""
        cur = self._conn.cursor()
        if self.dialect is SQLITE:
            cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            self._conn.rollback()
            raise
        else:
            self._conn.commit()
        finally:
            cur.close()

    def purge_logs(self) -> None:
        """Drop old page images that may still hold removed rows (SQLite's WAL)."""
        if self.dialect is SQLITE:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        self._conn.close()

    # -- creation ------------------------------------------------------------------------
    def create(self, meta: dict[str, bytes], n_instances: int) -> None:
        d = self.dialect
        self.n_instances = n_instances
        contrib = ", ".join(f"c{r} {d.blob}" for r in range(n_instances))
        with self.transaction() as cur:
            for table in ("receipt_ids", "receipts", "schemas", "rows", "meta"):
                self._execute(cur, f"DROP TABLE IF EXISTS {table}")
            self._execute(cur, f"CREATE TABLE meta (name TEXT PRIMARY KEY, value {d.blob})")
            self._execute(
                cur,
                f"CREATE TABLE rows (id_key {d.blob} PRIMARY KEY, seq BIGINT NOT NULL, "
                f"features {d.blob} NOT NULL, target {d.real}, in_pool INTEGER NOT NULL, "
                f"{contrib})",
            )
            self._execute(cur, "CREATE INDEX rows_seq ON rows (seq)")
            self._execute(
                cur, f"CREATE TABLE schemas (instance INTEGER PRIMARY KEY, body {d.blob})"
            )
            self._execute(cur, f"CREATE TABLE receipts (seq {d.serial_pk}, body TEXT NOT NULL)")
            self._execute(cur, "CREATE TABLE receipt_ids (id_hash TEXT NOT NULL, seq BIGINT)")
            self._execute(cur, "CREATE INDEX receipt_ids_hash ON receipt_ids (id_hash)")
            self._executemany(
                cur,
                "INSERT INTO meta (name, value) VALUES (?, ?)",
                [("format", FORMAT.encode()), *meta.items()],
            )
            self._executemany(
                cur,
                "INSERT INTO schemas (instance, body) VALUES (?, NULL)",
                [(r,) for r in range(n_instances)],
            )

    def meta(self) -> dict[str, bytes]:
        cur = self._conn.cursor()
        try:
            rows = self._execute(cur, "SELECT name, value FROM meta").fetchall()
        except Exception as err:
            raise ValueError(f"{self.location} is not a forgetting store: {err}") from err
        finally:
            cur.close()
        self._conn.rollback() if self.dialect is POSTGRES else None
        meta = {name: bytes(value) for name, value in rows}
        if meta.get("format") != FORMAT.encode():
            raise ValueError(f"{self.location}: unknown store format {meta.get('format')!r}")
        self.n_instances = int(json.loads(meta["n_instances"]))
        return meta

    # -- rows ----------------------------------------------------------------------------
    def insert_rows(self, cur, rows: list[tuple]) -> None:
        """rows: (id_key, seq, features bytes, target or None, in_pool, *contrib blobs)."""
        cols = ", ".join(f"c{r}" for r in range(self.n_instances))
        marks = ", ".join("?" for _ in range(5 + self.n_instances))
        self._executemany(
            cur,
            f"INSERT INTO rows (id_key, seq, features, target, in_pool, {cols}) VALUES ({marks})",
            rows,
        )

    def delete_rows(self, cur, id_keys: Sequence[bytes]) -> None:
        self._executemany(cur, "DELETE FROM rows WHERE id_key = ?", [(k,) for k in id_keys])

    def unlabel_rows(self, cur, id_keys: Sequence[bytes]) -> None:
        cols = ", ".join(f"c{r} = NULL" for r in range(self.n_instances))
        self._executemany(
            cur, f"UPDATE rows SET target = NULL, {cols} WHERE id_key = ?", [(k,) for k in id_keys]
        )

    def set_contributions(self, cur, instance: int, items: list[tuple[bytes, bytes]]) -> None:
        """items: (blob, id_key); a blob of None clears the contribution."""
        self._executemany(cur, f"UPDATE rows SET c{instance} = ? WHERE id_key = ?", items)

    def clear_contributions(self, cur, instance: int) -> None:
        self._execute(cur, f"UPDATE rows SET c{instance} = NULL")

    def load_rows(self) -> list[tuple]:
        cols = ", ".join(f"c{r}" for r in range(self.n_instances))
        cur = self._conn.cursor()
        try:
            return self._execute(
                cur, f"SELECT id_key, seq, features, target, in_pool, {cols} FROM rows ORDER BY seq"
            ).fetchall()
        finally:
            cur.close()
            if self.dialect is POSTGRES:
                self._conn.rollback()

    def max_seq(self) -> int:
        cur = self._conn.cursor()
        try:
            value = self._execute(cur, "SELECT MAX(seq) FROM rows").fetchone()[0]
        finally:
            cur.close()
            if self.dialect is POSTGRES:
                self._conn.rollback()
        return -1 if value is None else int(value)

    # -- schemas -------------------------------------------------------------------------
    def set_schema(self, cur, instance: int, schema: Any | None) -> None:
        body = None if schema is None else pickle.dumps(schema, protocol=5)
        self._execute(cur, "UPDATE schemas SET body = ? WHERE instance = ?", (body, instance))

    def load_schemas(self) -> list[Any | None]:
        cur = self._conn.cursor()
        try:
            rows = self._execute(cur, "SELECT instance, body FROM schemas ORDER BY instance")
            out = [None if body is None else pickle.loads(bytes(body)) for _, body in rows]
        finally:
            cur.close()
            if self.dialect is POSTGRES:
                self._conn.rollback()
        return out

    # -- receipts ------------------------------------------------------------------------
    def add_receipt(self, cur, receipt: dict) -> None:
        body = json.dumps(receipt, sort_keys=True)
        if self.dialect is POSTGRES:
            seq = self._execute(
                cur, "INSERT INTO receipts (body) VALUES (?) RETURNING seq", (body,)
            ).fetchone()[0]
        else:
            seq = self._execute(cur, "INSERT INTO receipts (body) VALUES (?)", (body,)).lastrowid
        self._executemany(
            cur,
            "INSERT INTO receipt_ids (id_hash, seq) VALUES (?, ?)",
            [(h, seq) for h in receipt["id_hashes"]],
        )

    def receipts_for(self, id_hash: str) -> list[dict]:
        cur = self._conn.cursor()
        try:
            rows = self._execute(
                cur,
                "SELECT r.body FROM receipt_ids i JOIN receipts r ON r.seq = i.seq "
                "WHERE i.id_hash = ? ORDER BY r.seq",
                (id_hash,),
            ).fetchall()
        finally:
            cur.close()
            if self.dialect is POSTGRES:
                self._conn.rollback()
        return [json.loads(body) for (body,) in rows]

    def count(self, table: str) -> int:
        cur = self._conn.cursor()
        try:
            return int(self._execute(cur, f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        finally:
            cur.close()
            if self.dialect is POSTGRES:
                self._conn.rollback()
