"""The relational mirror of a model: rows, per-instance contributions, schemas, receipts.

One schema serves SQLite (the embedded default) and PostgreSQL (the connection, its locks and
the dialects' differences are :mod:`.connection`). The store keeps only what cannot be
recomputed: each row's id, features, label and pool flag, and for every instance with a live
schema the row's codes and integer residuals. Draws, hashes, digests and accumulators are
derived again on load.

Invariant kept by every transaction: an instance's schema is present only if every labeled
row has its contribution under that schema and none of its D° rows was removed since. A
deletion or insertion that touches D°_r clears schema r in the same transaction; a landed
rebuild writes the schema and all contributions in one transaction.

Layout (format v3): ``rows`` holds what a row *is* (id, features, label, pool flag) and each
instance r has a table ``contrib_r`` (id_key → blob) of what the row contributes under r's
schema. Why not columns of ``rows`` (format v2): clearing instance r — every D° hit, since
its contributions derive from a g trained on the forgotten row — is then an ``UPDATE rows
SET c_r = NULL`` that rewrites every page of ``rows`` (features and all p instances' blobs),
which the write-ahead log's checkpoint writes again (benchmarks/results/store-format-v2.md
against store-format-v3.md). In v3 it is a ``DELETE`` of that instance's table alone (SQLite
empties a table without a ``WHERE`` page by page), and a rebuilt instance is written as
inserts into it. A v2 store is converted on its first writable open, in one transaction
(:meth:`SQLStore.upgrade`), and read as it is by read-only opens.

**Nothing but these tables**: the tables are declared once in :mod:`.catalogue`, which
:meth:`SQLStore.create_tables` executes and every open compares the database's catalogue with
before it reads a table (:meth:`SQLStore.check_catalogue`): a trigger, view or other object
planted in the database is refused, never run.

**No code from data**: structured values are written with :mod:`forgetting.io.model_format`
(arrays + JSON, allowlisted types), never pickled.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .catalogue import (
    FIXED_TABLES,
    FORMAT,
    FORMAT_V2,
    INDEXES,
    TABLES,
    Found,
    content_problems,
    contrib_instance,
    contrib_table,
    contrib_table_spec,
    index_sql,
    layout_problems,
    postgres_catalogue,
    sqlite_catalogue,
)
from .connection import (
    POSTGRES,
    SQLITE,
    Connection,
    describe,
    driver_errors,
    store_error,
)
from .errors import ReceiptCorrupt, StoreCorrupt, StoreError, StoreTampered
from .locks import StoreLock
from .signed_log import SignedLog

__all__ = ["FORMAT", "FORMAT_V2", "TABLES", "SQLStore", "contrib_table", "is_contrib_table"]


def is_contrib_table(name: str) -> bool:
    """Whether ``name`` is a :func:`contrib_table` name (digits only after the prefix)."""
    return contrib_instance(name) is not None


class SQLStore(SignedLog, Connection):
    """A connection to one model's tables, with the operations DurableModel needs (the
    receipt log's signing and chain: :class:`~.signed_log.SignedLog`)."""

    def __init__(
        self,
        location: str,
        *,
        create: bool = False,
        read_only: bool = False,
        lock: bool | StoreLock = True,
    ):
        """``lock``: take the writer lock (True), adopt one already taken (a ``StoreLock``),
        or none (False: a scratch file of a creation, which the creator's locks cover)."""
        self.n_instances = 0
        self.format = FORMAT  # what meta says, once read: FORMAT_V2 until upgraded
        super().__init__(location, create=create, read_only=read_only, lock=lock)

    # -- creation ------------------------------------------------------------------------
    def create_tables(self, cur, meta: dict[str, bytes], n_instances: int) -> None:
        """Replace any previous tables (inside the caller's transaction)."""
        d = self.dialect
        # every contrib_r of a previous store too (it may have had more instances)
        for table in [*self._contrib_tables(cur), *reversed(TABLES)]:
            self.execute(cur, f"DROP TABLE IF EXISTS {table}")
        self.n_instances = n_instances
        self.format = FORMAT
        self.unsigned_log = False
        for table in FIXED_TABLES:  # the catalogue an open compares with (catalogue.py)
            self.execute(cur, table.sql(d))
            if table.name == "rows":
                for r in range(n_instances):
                    self._create_contrib_table(cur, r)
        for index in INDEXES:
            self.execute(cur, index_sql(index))
        self.executemany(
            cur,
            "INSERT INTO meta (name, value) VALUES (?, ?)",
            [("format", FORMAT.encode()), ("n_instances", str(n_instances).encode())]
            + list(meta.items()),
        )
        self.executemany(
            cur,
            "INSERT INTO schemas (instance, body) VALUES (?, NULL)",
            [(r,) for r in range(n_instances)],
        )
        # A PostgreSQL schema holding objects of its own cannot be a store: the next open
        # would refuse it (a new SQLite file holds nothing else).
        self.check_catalogue(cur)
        self._creating = False

    def _create_contrib_table(self, cur, instance: int) -> None:
        # WITHOUT ROWID: the id_key is the b-tree's key, stored once (SQLite)
        self.execute(cur, contrib_table_spec(instance).sql(self.dialect))

    def _contrib_tables(self, cur) -> list[str]:
        """The contrib_r tables present (any r), read from the catalog."""
        # substr, not LIKE: no escaping, and no "%" for psycopg's placeholder parsing
        if self.dialect is SQLITE:
            query = (
                "SELECT name FROM sqlite_master "
                "WHERE type = 'table' AND substr(name, 1, 8) = 'contrib_'"
            )
        else:
            query = (
                "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                "current_schema() AND substr(table_name, 1, 8) = 'contrib_'"
            )
        names = [str(name) for (name,) in self.execute(cur, query).fetchall()]
        return sorted(n for n in names if is_contrib_table(n))

    def upgrade(self) -> bool:
        """Convert a v2 store (contributions as columns ``c_r`` of ``rows``) to v3 in one
        transaction: each column copied into its ``contrib_r`` table, then dropped (which
        rewrites ``rows`` once, with SQLite's secure_delete zeroing the old pages). True when
        a conversion ran; a crash before its commit leaves the v2 store as it was."""
        if self.read_only:
            return False
        found = self.meta().get("format")
        if found != FORMAT_V2.encode():
            return False  # v3, or a format meta() refuses when the store is read
        with self.transaction("converting the store to the current format") as cur:
            self.meta(cur)  # n_instances, under the writer's transaction
            for r in range(self.n_instances):
                self._create_contrib_table(cur, r)
                self.execute(
                    cur,
                    f"INSERT INTO {contrib_table(r)} (id_key, blob) "
                    f"SELECT id_key, c{r} FROM rows WHERE c{r} IS NOT NULL",
                )
            for r in range(self.n_instances):
                self.execute(cur, f"ALTER TABLE rows DROP COLUMN c{r}")
            self.execute(cur, "UPDATE meta SET value = ? WHERE name = 'format'", (FORMAT.encode(),))
        self.format = FORMAT
        self.purge_logs()
        return True

    def set_meta(self, cur, name: str, value: bytes | None) -> None:
        """Replace (or, with None, remove) one meta entry inside the caller's transaction."""
        self.execute(cur, "DELETE FROM meta WHERE name = ?", (name,))
        if value is not None:
            self.execute(cur, "INSERT INTO meta (name, value) VALUES (?, ?)", (name, value))

    def read_all(self) -> tuple[dict[str, bytes], list[tuple], list[bytes | None]]:
        """Meta, rows (by seq) and schema bodies, read in one transaction: a consistent view
        even while another process writes (read-only opens)."""

        def read(cur) -> tuple:
            meta = self.meta(cur)
            return meta, self.load_rows(cur), self.load_schema_bodies(cur)

        everything = self.read(read)
        self.reloaded()  # the model is being rebuilt from this read
        return everything

    def meta(self, cur=None) -> dict[str, bytes]:
        where = describe(self.location)
        try:
            query = "SELECT name, value FROM meta"
            if cur is None:
                rows = self.read(lambda own: self.execute(own, query).fetchall())
            else:
                rows = self.execute(cur, query).fetchall()
        except StoreCorrupt:
            raise
        except (StoreError, *driver_errors()) as err:
            if "no such table" in str(err) or "does not exist" in str(err):
                raise StoreCorrupt(
                    f"{where} is not a forgetting store (no meta table); create one with "
                    "`forgetting fit`"
                ) from None
            if isinstance(err, StoreError):
                raise
            raise store_error(self.location, err, "reading the store") from err
        try:
            meta = {str(name): bytes(value) for name, value in rows}
        except (TypeError, ValueError) as err:
            raise StoreCorrupt(f"{where}: table meta holds a non-bytes value ({err})") from None
        found = meta.get("format")
        if found in (FORMAT.encode(), FORMAT_V2.encode()):
            self.format = found.decode()
        else:
            hint = (
                " (a v1 store, which held pickles and is refused because opening it could "
                "run code: refit with `forgetting fit --overwrite`)"
                if found == b"forgetting-store-v1"
                else "; it is damaged or not a forgetting store"
            )
            raise StoreCorrupt(f"{where}: unknown store format {found!r:.60}{hint}")
        try:
            self.n_instances = int(meta["n_instances"])
            if not 0 <= self.n_instances <= 1024:  # 0: a forest's store (forest.py)
                raise ValueError(self.n_instances)
        except (KeyError, ValueError) as err:
            raise StoreCorrupt(f"{where}: table meta has a bad n_instances ({err})") from None
        return meta

    # -- rows ----------------------------------------------------------------------------
    def insert_rows(self, cur, rows: list[tuple]) -> None:
        """rows: (id_key, seq, features bytes, target or None, in_pool, *contrib blobs), a
        blob None where the row has no contribution to that instance."""
        self._check_current()
        self.executemany(
            cur,
            "INSERT INTO rows (id_key, seq, features, target, in_pool) VALUES (?, ?, ?, ?, ?)",
            [row[:5] for row in rows],
        )
        for r in range(self.n_instances):
            self.executemany(
                cur,
                f"INSERT INTO {contrib_table(r)} (id_key, blob) VALUES (?, ?)",
                [(row[0], row[5 + r]) for row in rows if row[5 + r] is not None],
            )

    def delete_rows(self, cur, id_keys: Sequence[bytes]) -> None:
        self._check_current()
        keys = [(k,) for k in id_keys]
        self.executemany(cur, "DELETE FROM rows WHERE id_key = ?", keys)
        self._delete_contributions(cur, keys)

    def delete_all_rows(self, cur) -> None:
        self._check_current()
        self.execute(cur, "DELETE FROM rows")
        for r in range(self.n_instances):
            self.clear_contributions(cur, r)

    def unlabel_rows(self, cur, id_keys: Sequence[bytes]) -> None:
        self._check_current()
        keys = [(k,) for k in id_keys]
        self.executemany(cur, "UPDATE rows SET target = NULL WHERE id_key = ?", keys)
        self._delete_contributions(cur, keys)

    def _delete_contributions(self, cur, keys: list[tuple[bytes]]) -> None:
        for r in range(self.n_instances):
            self.executemany(cur, f"DELETE FROM {contrib_table(r)} WHERE id_key = ?", keys)

    def set_contributions(self, cur, instance: int, items: list[tuple[bytes, bytes]]) -> None:
        """items: (blob, id_key) of stored rows, written into ``instance``'s table after
        :meth:`clear_contributions` emptied it (a landed rebuild writes every row's)."""
        self._check_current()
        self.executemany(
            cur,
            f"INSERT INTO {contrib_table(instance)} (id_key, blob) VALUES (?, ?)",
            [(key, blob) for blob, key in items],
        )

    def clear_contributions(self, cur, instance: int) -> None:
        """Remove every contribution of ``instance`` (a D° hit, or before a rebuilt
        instance's are written): its own table alone, whatever the number of rows."""
        self._check_current()
        self.execute(cur, f"DELETE FROM {contrib_table(instance)}")

    def _check_current(self) -> None:
        """Writes go to the v3 layout only: a v2 store is converted first (:meth:`upgrade`,
        which a writable DurableModel.open runs)."""
        if self.format != FORMAT:
            raise StoreError(
                f"{describe(self.location)} is a {self.format} store; open it writable once "
                "to convert it (DurableModel.open / `forgetting serve`) before writing"
            )

    def load_rows(self, cur=None) -> list[tuple]:
        """(id_key, seq, features, target, in_pool, *contrib blobs or None) by seq."""
        if self.format == FORMAT_V2:
            cols = ", ".join(f"c{r}" for r in range(self.n_instances))
            query = f"SELECT id_key, seq, features, target, in_pool, {cols} FROM rows ORDER BY seq"
        else:
            blobs = "".join(f", c{r}.blob" for r in range(self.n_instances))
            joins = " ".join(
                f"LEFT JOIN {contrib_table(r)} c{r} ON c{r}.id_key = rows.id_key"
                for r in range(self.n_instances)
            )
            query = (
                "SELECT rows.id_key, rows.seq, rows.features, rows.target, rows.in_pool"
                f"{blobs} FROM rows {joins} ORDER BY rows.seq"
            )
        if cur is not None:
            return self.execute(cur, query).fetchall()
        return self.read(lambda own: self.execute(own, query).fetchall(), "reading the rows")

    # -- schemas -------------------------------------------------------------------------
    def set_schema(self, cur, instance: int, body: bytes | None) -> None:
        self.execute(cur, "UPDATE schemas SET body = ? WHERE instance = ?", (body, instance))

    def load_schema_bodies(self, cur) -> list[bytes | None]:
        """The encoded schema of every instance (None while it is being rebuilt)."""
        rows = self.execute(cur, "SELECT instance, body FROM schemas ORDER BY instance")
        rows = rows.fetchall()
        where = describe(self.location)
        if [r for r, _ in rows] != list(range(self.n_instances)):
            raise StoreCorrupt(
                f"{where}: table schemas does not list instances 0..{self.n_instances - 1}; "
                "the store is damaged — restore a backup or refit"
            )
        return [None if body is None else bytes(body) for _, body in rows]

    # -- receipts ------------------------------------------------------------------------
    def add_receipt(self, cur, receipt: dict) -> None:
        """Append a receipt to the log, chained and signed (:meth:`SignedLog.start_log`
        must have run), with its id hashes' index."""
        seq = self._append_receipt(cur, receipt)
        self.executemany(
            cur,
            "INSERT INTO receipt_ids (id_hash, seq) VALUES (?, ?)",
            [(h, seq) for h in receipt["id_hashes"]],
        )

    def receipts_for(self, id_hash: str) -> list[dict]:
        query = (
            "SELECT r.body FROM receipt_ids i JOIN receipts r ON r.seq = i.seq "
            "WHERE i.id_hash = ? ORDER BY r.seq"
        )
        rows = self.read(
            lambda cur: self.execute(cur, query, (id_hash,)).fetchall(), "reading receipts"
        )
        return [self._receipt_body(body) for (body,) in rows]

    def receipts_after(self, after: int, limit: int) -> list[tuple[int, dict]]:
        """Up to ``limit`` receipts with a sequence number above ``after``, as (seq,
        receipt), oldest first: keyset paging, stable while receipts are appended (they are
        never changed or removed)."""
        query = "SELECT seq, body FROM receipts WHERE seq > ? ORDER BY seq LIMIT ?"
        rows = self.read(
            lambda cur: self.execute(cur, query, (int(after), int(limit))).fetchall(),
            "reading receipts",
        )
        return [(int(seq), self._receipt_body(body)) for seq, body in rows]

    def _receipt_body(self, body) -> dict:
        """A stored receipt's JSON, or :class:`ReceiptCorrupt` saying why it is unreadable."""
        try:
            receipt = json.loads(body)
            if not isinstance(receipt, dict):
                raise ValueError("not an object")
        except (TypeError, ValueError, RecursionError) as err:
            err = err if not isinstance(err, RecursionError) else "nested too deeply"
            raise ReceiptCorrupt(
                f"{describe(self.location)}: table receipts holds an unreadable receipt "
                f"({err}); the store is damaged"
            ) from None
        return receipt

    # -- the catalogue -------------------------------------------------------------------
    def check_catalogue(self, cur) -> None:
        """Refuse a database that holds anything but the store's tables as the library
        writes them (:mod:`.catalogue`), reading the catalogue before any table: one
        :class:`StoreTampered` line naming what is foreign. Called by every open, and again
        by each read or write once the schema changed (:meth:`Connection._guard`)."""
        found = self._catalogue(cur)
        where = describe(self.location)
        if not found.has_meta:
            raise StoreCorrupt(
                f"{where} is not a forgetting store (no meta table); create one with "
                "`forgetting fit`"
            )
        if found.problems:
            acting = ("view ", "materialized view ", "trigger ", "rule ", "policy ")
            problems = sorted(found.problems, key=lambda p: not p.startswith(acting))
            shown = "; ".join(problems[:3])
            if len(problems) > 3:
                shown += f"; and {len(problems) - 3} more"
            hint = (
                "drop it, or keep the store in a schema of its own"
                if self.dialect is POSTGRES
                else "remove it (e.g. with sqlite3) or restore a backup"
            )
            raise StoreTampered(
                f"{where}: {shown} — the database holds what the library never writes "
                f"(tampered?), so none of it was read; {hint}"
            )

    def schema_problems(self) -> list[str]:
        """What the database holds besides the store's tables as the library writes them,
        one line each (empty for a sound store), and for SQLite what its ``quick_check``
        finds in the file's pages. The verifiers (:meth:`DurableModel.verify`,
        :meth:`DurableForest.verify`) report them before reading any table."""

        def check(cur) -> list[str]:
            problems = list(self._catalogue(cur).problems)
            if self.dialect is SQLITE and not problems:
                rows = self.execute(cur, "PRAGMA quick_check(5)").fetchall()
                problems += [
                    f"SQLite's quick_check: {' '.join(str(r[0]).split())[:160]}"
                    for r in rows
                    if r[0] != "ok"
                ]
            return problems

        return self.read(check, "checking the store's tables", check=False)

    def _catalogue(self, cur) -> Found:
        """The catalogue's problems, then (once it holds only the library's tables, so that
        reading them runs nothing) those that depend on meta: the contribution tables or
        columns against n_instances, meta entries and SQLite's sequence rows."""
        if self.dialect is SQLITE:
            found = sqlite_catalogue(lambda query: self.execute(cur, query).fetchall())
        else:
            found = postgres_catalogue(
                lambda query, params: cur.execute(query, params).fetchall(), self._schema_oid
            )
        if found.problems or not found.has_meta:
            return found
        self.unsigned_log = found.unsigned_log
        meta = self.meta(cur)
        found.problems += layout_problems(found, self.n_instances, self.format == FORMAT_V2)
        sequences = []
        if "sqlite_sequence" in found.tables:
            query = "SELECT name FROM sqlite_sequence"
            sequences = [name for (name,) in self.execute(cur, query).fetchall()]
        found.problems += content_problems(meta, sequences)
        return found

    # -- audits -------------------------------------------------------------------------
    def contribution_problems(self) -> list[str]:
        """What the contributions hold that the rows and schemas do not explain, one line per
        defect (empty for a sound store), read in one transaction: contributions of no
        labeled row (orphans, e.g. of a row deleted behind a writer's back), labeled rows
        without their contribution to an instance whose schema is stored (missing), any
        contribution of an instance stored without a schema (stale); a contribution table of
        no instance is foreign to the catalogue (:meth:`schema_problems`).
        :meth:`~forgetting.store.durable.DurableModel.verify` reports them.
        """

        def check(cur) -> list[str]:
            self.meta(cur)
            schemas = self.execute(
                cur, "SELECT instance FROM schemas WHERE body IS NOT NULL"
            ).fetchall()
            has_schema = {int(r) for (r,) in schemas}
            problems = []
            for r in range(self.n_instances):
                problems += self._contribution_problems(cur, r, r in has_schema)
            return problems

        return self.read(check, "checking the contributions")

    def _contribution_problems(self, cur, r: int, has_schema: bool) -> list[str]:
        """:meth:`contribution_problems` of instance ``r``."""
        if self.format == FORMAT_V2:  # column c_r of rows: a row's contribution has its row
            where = f"column c{r} of table rows"
            orphans = f"SELECT COUNT(*) FROM rows WHERE target IS NULL AND c{r} IS NOT NULL"
            missing = f"SELECT COUNT(*) FROM rows WHERE target IS NOT NULL AND c{r} IS NULL"
            stale = f"SELECT COUNT(*) FROM rows WHERE c{r} IS NOT NULL"
        else:
            table = contrib_table(r)
            where = f"table {table}"
            orphans = (
                f"SELECT COUNT(*) FROM {table} c LEFT JOIN rows ON rows.id_key = c.id_key "
                "WHERE rows.id_key IS NULL OR rows.target IS NULL"
            )
            missing = (
                f"SELECT COUNT(*) FROM rows LEFT JOIN {table} c ON c.id_key = rows.id_key "
                "WHERE rows.target IS NOT NULL AND c.id_key IS NULL"
            )
            stale = f"SELECT COUNT(*) FROM {table}"
        problems = []
        if has_schema:
            n = int(self.execute(cur, orphans).fetchone()[0])
            if n:
                problems.append(f"{where}: {n} orphan contribution(s), of no labeled row in rows")
            n = int(self.execute(cur, missing).fetchone()[0])
            if n:
                problems.append(
                    f"{where}: {n} labeled row(s) missing their contribution while instance "
                    f"{r} has a stored schema"
                )
        else:
            n = int(self.execute(cur, stale).fetchone()[0])
            if n:
                problems.append(
                    f"{where}: {n} stale contribution(s) while instance {r} has no stored schema"
                )
        return problems

    def size_bytes(self) -> int:
        """The bytes the store's database takes: SQLite's pages (the main file, without a
        WAL not yet checkpointed), or PostgreSQL's tables with their indexes and TOAST."""

        def size(cur) -> int:
            if self.dialect is SQLITE:
                pages = self.execute(cur, "PRAGMA page_count").fetchone()[0]
                page = self.execute(cur, "PRAGMA page_size").fetchone()[0]
                return int(pages) * int(page)
            total = 0
            for table in (*TABLES, *self._contrib_tables(cur)):
                query = "SELECT COALESCE(pg_total_relation_size(to_regclass(?)), 0)"
                total += int(self.execute(cur, query, (table,)).fetchone()[0])
            return total

        return int(self.read(size, "reading the store's size"))

    def count(self, table: str) -> int:
        if table not in TABLES and not is_contrib_table(table):
            raise ValueError(f"unknown table {table!r}")
        query = f"SELECT COUNT(*) FROM {table}"
        return int(self.read(lambda cur: self.execute(cur, query).fetchone()[0]))
