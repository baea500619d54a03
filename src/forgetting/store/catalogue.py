"""The tables a store holds, as the library creates them, and the check that a database holds
exactly those.

One declaration (:data:`FIXED_TABLES`, :func:`contrib_table_spec`, :data:`INDEXES`) is both
what :meth:`.sql.SQLStore.create_tables` executes and the allowlist an open compares the
database's catalogue with. Anything else is refused, because an object in the database acts
on its own: a trigger copying every forgotten row elsewhere before it is deleted (the forget
acknowledged, the features in the file for good), an extra table or column keeping a copy of
the rows, a view over an unbounded recursive query in place of a table (every read of it never
returns), a rule, a row-level security policy hiding rows from verify, an unlogged table that
loses acknowledged rows in a crash, a child table whose rows are read and deleted through
``rows``.

The check reads the catalogue only (``sqlite_master``; PostgreSQL's ``pg_catalog`` for the
store's schema), which runs no view and fires no trigger, so it answers at once whatever the
database holds; only once the catalogue is the library's are ``meta`` and ``sqlite_sequence``
read, for the parts that depend on the store's contents: one contribution table per instance
(format v3) or one contribution column of ``rows`` per instance (v2), and meta entries the
library writes.

SQLite: each table's and index's statement, compared token by token (whitespace, case and
the quoting of a plain name aside: ``ALTER TABLE ... RENAME`` quotes the name, ``ADD`` and
``DROP COLUMN`` rewrite the statement, as v2 stores and their conversion did); no view,
trigger or other table or index; UTF-8 text. PostgreSQL: every relation of the schema (kind,
persistence, row security), every column (type, nullability, default, collation), index,
constraint, trigger, rule, policy and inheritance of its tables, and no function, operator,
type or collation of the schema's own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .connection import SQLITE, Dialect
from .signing import META_ENTRIES as SIGNING_META_ENTRIES

FORMAT = "forgetting-store-v3"
"""v1 stores held pickles; they are refused (opening one could run code). v2 stores (the
contributions as columns of ``rows``) are read, and converted by a writable open."""
FORMAT_V2 = "forgetting-store-v2"
META_NAMES = frozenset(
    {"format", "n_instances", "model", "secret_key", "privacy"} | SIGNING_META_ENTRIES
)
"""The entries of ``meta`` the library writes (any other could hold a copy of a row); the
signed log's keys and head (:mod:`.signing`)."""


@dataclass(frozen=True)
class Column:
    """One column: ``kind`` is blob, real, text, bigint, integer or serial (an
    auto-incremented integer key)."""

    name: str
    kind: str
    not_null: bool = False
    primary_key: bool = False

    def sql(self, dialect: Dialect) -> str:
        types = {"blob": dialect.blob, "real": dialect.real, "serial": dialect.serial_pk}
        text = f"{self.name} {types.get(self.kind, self.kind.upper())}"
        if self.primary_key and self.kind != "serial":
            text += " PRIMARY KEY"
        return text + (" NOT NULL" if self.not_null else "")

    def postgres(self, table: str) -> tuple:
        """(name, type, not null, default, collation) as PostgreSQL's catalogue says."""
        types = {
            "blob": "bytea",
            "real": "double precision",
            "serial": "bigint",
            "text": "text",
            "bigint": "bigint",
            "integer": "integer",
        }
        default = f"nextval('{table}_{self.name}_seq'::regclass)" if self.kind == "serial" else None
        not_null = self.not_null or self.primary_key or self.kind == "serial"
        collation = "default" if self.kind == "text" else None
        return (self.name, types[self.kind], not_null, default, collation)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    without_rowid: bool = False
    """SQLite: the primary key is the table's b-tree key (stored once)."""

    def sql(self, dialect: Dialect) -> str:
        columns = ", ".join(c.sql(dialect) for c in self.columns)
        rowid = " WITHOUT ROWID" if self.without_rowid and dialect is SQLITE else ""
        return f"CREATE TABLE {self.name} ({columns}){rowid}"

    @property
    def key(self) -> Column | None:
        return next((c for c in self.columns if c.primary_key), None)

    def sqlite_autoindex(self) -> str | None:
        """The index SQLite makes for a primary key that is not the rowid."""
        key = self.key
        if key is None or self.without_rowid or key.kind in ("integer", "serial"):
            return None
        return f"sqlite_autoindex_{self.name}_1"


_ROW_COLUMNS = (
    Column("id_key", "blob", primary_key=True),
    Column("seq", "bigint", not_null=True),
    Column("features", "blob", not_null=True),
    Column("target", "real"),
    Column("in_pool", "integer", not_null=True),
)
FIXED_TABLES = (
    Table("meta", (Column("name", "text", primary_key=True), Column("value", "blob"))),
    Table("rows", _ROW_COLUMNS),
    Table("schemas", (Column("instance", "integer", primary_key=True), Column("body", "blob"))),
    Table(
        "receipts",
        (
            Column("seq", "serial", primary_key=True),
            Column("body", "text", True),
            Column("prev", "text"),
            Column("signature", "text"),
        ),
    ),
    Table("receipt_ids", (Column("id_hash", "text", not_null=True), Column("seq", "bigint"))),
)
"""The tables every store has, in creation order; besides them one ``contrib_r`` per instance
(:func:`contrib_table_spec`). ``receipts.prev`` and ``receipts.signature`` chain and sign the
log (:mod:`.signing`; NULL for receipts written before the log was signed)."""
UNSIGNED_RECEIPTS = Table(
    "receipts", (Column("seq", "serial", primary_key=True), Column("body", "text", True))
)
"""``receipts`` as stores made before the log was signed have it (a writable open adds the
two columns: :meth:`.sql.SQLStore.start_log`)."""
TABLES = tuple(t.name for t in FIXED_TABLES)
INDEXES = {"rows_seq": ("rows", "seq"), "receipt_ids_hash": ("receipt_ids", "id_hash")}
"""The indexes besides the primary keys': name → (table, column)."""
SEQUENCES = {"receipts_seq_seq"}
"""PostgreSQL: the sequence of ``receipts.seq``."""


def contrib_table(instance: int) -> str:
    """The table of instance ``instance``'s contributions (id_key → blob)."""
    return f"contrib_{int(instance)}"


def contrib_instance(name: str) -> int | None:
    """The instance of a :func:`contrib_table` name, or None (leading zeros are not one)."""
    digits = name.removeprefix("contrib_")
    if not name.startswith("contrib_") or not digits.isdigit() or digits != str(int(digits)):
        return None
    return int(digits)


def contrib_table_spec(instance: int) -> Table:
    return Table(
        contrib_table(instance),
        (Column("id_key", "blob", primary_key=True), Column("blob", "blob", not_null=True)),
        without_rowid=True,
    )


def rows_v2_spec(n_instances: int) -> Table:
    """Format v2's ``rows``: instance r's contribution in column ``c_r``."""
    extra = tuple(Column(f"c{r}", "blob") for r in range(n_instances))
    return Table("rows", _ROW_COLUMNS + extra)


def index_sql(name: str) -> str:
    table, column = INDEXES[name]
    return f"CREATE INDEX {name} ON {table} ({column})"


# -- SQLite ----------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"""\s+|(?P<quoted>"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\])|(?P<string>'(?:[^']|'')*')"""
    r"""|(?P<word>[A-Za-z_][A-Za-z0-9_$]*)|(?P<other>[0-9]+|.)""",
    re.S,
)


@functools.lru_cache(maxsize=4096)
def sql_tokens(sql: str) -> tuple[str, ...]:
    """A statement as tokens: words and plain quoted names in lower case (SQLite's names
    are case-insensitive and ``"rows"`` is ``rows``), string literals as written, no
    whitespace."""
    tokens = []
    for match in _TOKEN.finditer(sql):
        if match.group("quoted"):
            inner = match.group("quoted")[1:-1]
            plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", inner)
            tokens.append(inner.lower() if plain else match.group("quoted"))
        elif match.group("string"):
            tokens.append(match.group("string"))
        elif match.group("word") or match.group("other"):
            tokens.append(match.group(0).lower())
    return tuple(tokens)


@dataclass
class Found:
    """What a catalogue holds, as far as the store's layout depends on meta."""

    problems: list[str]
    has_meta: bool
    contrib: set[int]
    """The instances with a contribution table."""
    v2_columns: int | None
    """The contribution columns of ``rows`` (format v2), None when ``rows`` is v3's."""
    tables: set[str]
    """The tables found (any name)."""
    unsigned_log: bool = False
    """``receipts`` has no ``prev`` and ``signature`` columns (:data:`UNSIGNED_RECEIPTS`)."""


def sqlite_catalogue(execute: Callable[[str], list[tuple]]) -> Found:
    """The problems of a SQLite database's catalogue (``sqlite_master``), read with
    ``execute`` (a statement → its rows)."""
    fixed = {t.name: t for t in FIXED_TABLES}
    autoindexes = {t.sqlite_autoindex(): t.name for t in FIXED_TABLES if t.sqlite_autoindex()}
    found = Found([], False, set(), None, set())
    problems = found.problems
    encoding = execute("PRAGMA encoding")[0][0]
    if str(encoding).upper() != "UTF-8":
        problems.append(f"the database's text encoding is {encoding}, not the library's UTF-8")
    for kind, name, table, sql in execute("SELECT type, name, tbl_name, sql FROM sqlite_master"):
        kind, name, table = str(kind), str(name), str(table)
        tokens = sql_tokens(sql) if isinstance(sql, str) else None
        if kind == "table":
            found.tables.add(name)
            if name == "rows":
                found.v2_columns = _sqlite_rows_layout(tokens, problems)
            elif name == "receipts" and tokens == sql_tokens(UNSIGNED_RECEIPTS.sql(SQLITE)):
                found.unsigned_log = True
            elif name in fixed:
                if tokens != sql_tokens(fixed[name].sql(SQLITE)):
                    problems.append(_changed("table", name, sql))
            elif contrib_instance(name) is not None:
                found.contrib.add(contrib_instance(name))
                if tokens != sql_tokens(contrib_table_spec(contrib_instance(name)).sql(SQLITE)):
                    problems.append(_changed("table", name, sql))
            elif name == "sqlite_sequence":  # SQLite's own, made for receipts' AUTOINCREMENT
                if tokens != sql_tokens("CREATE TABLE sqlite_sequence(name,seq)"):
                    problems.append(_changed("table", name, sql))
            else:
                problems.append(f"table {name} is not a store table")
        elif kind == "index":
            if sql is None and autoindexes.get(name) == table:
                continue
            if name in INDEXES and tokens == sql_tokens(index_sql(name)):
                continue
            problems.append(f"index {name} on {table} is not one of the store's indexes")
        elif kind in ("view", "trigger"):
            on = f" on {table}" if kind == "trigger" else ""
            problems.append(f"{kind} {name}{on}: a store holds no {kind}s")
        else:
            problems.append(f"{kind} {name} is not one of the store's objects")
    found.has_meta = "meta" in found.tables
    problems += [f"table {name} is missing" for name in fixed if name not in found.tables]
    return found


def _sqlite_rows_layout(tokens: tuple[str, ...] | None, problems: list[str]) -> int | None:
    """``rows`` as format v3 (None) or v2 with k contribution columns (k); else a problem."""
    if tokens == sql_tokens(FIXED_TABLES[1].sql(SQLITE)):
        return None
    k = (tokens or ()).count(",") - (len(_ROW_COLUMNS) - 1)
    if k >= 1 and tokens == sql_tokens(rows_v2_spec(k).sql(SQLITE)):
        return k
    problems.append(_changed("table", "rows", None))
    return None


def _changed(kind: str, name: str, sql) -> str:
    shown = f": {' '.join(str(sql).split())[:120]!r}" if isinstance(sql, str) else ""
    return f"{kind} {name} is not defined as the library defines it{shown}"


# -- PostgreSQL ---------------------------------------------------------------------------------
_RELKINDS = {
    "v": "view",
    "m": "materialized view",
    "f": "foreign table",
    "p": "partitioned table",
    "c": "composite type",
    "I": "partitioned index",
}


def postgres_catalogue(execute: Callable[[str, tuple], list[tuple]], schema: int) -> Found:
    """The problems of the PostgreSQL schema (oid ``schema``) holding a store, read from
    ``pg_catalog`` with ``execute`` (a statement with ``%s`` placeholders, its parameters →
    its rows)."""
    found = Found([], False, set(), None, set())
    problems = found.problems
    fixed = {t.name: t for t in FIXED_TABLES}
    tables: dict[str, list] = {}
    indexes, sequences = set(), set()
    relations = execute(
        "SELECT relname, relkind, relpersistence, relrowsecurity OR relforcerowsecurity "
        "FROM pg_class WHERE relnamespace = %s",
        (schema,),
    )
    for name, kind, persistence, secured in relations:
        if kind == "r":
            found.tables.add(name)
            known = name in fixed or contrib_instance(name) is not None
            if not known:
                problems.append(f"table {name} is not a store table")
                continue
            tables[name] = []
            if contrib_instance(name) is not None:
                found.contrib.add(contrib_instance(name))
            if persistence != "p":
                problems.append(f"table {name} is unlogged or temporary (a crash would lose rows)")
            if secured:
                problems.append(f"table {name} has row-level security (rows hidden from reads)")
        elif kind == "i":
            indexes.add(name)
        elif kind == "S":
            sequences.add(name)
            if name not in SEQUENCES:
                problems.append(f"sequence {name} is not the store's")
        elif kind != "t":
            problems.append(f"{_RELKINDS.get(kind, f'relation of kind {kind}')} {name}")
    found.has_meta = "meta" in tables
    problems += [f"table {name} is missing" for name in fixed if name not in tables]
    for table, *column in execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
        "pg_get_expr(d.adbin, d.adrelid), co.collname, a.attgenerated <> '' "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        "LEFT JOIN pg_collation co ON co.oid = a.attcollation "
        "WHERE c.relnamespace = %s AND c.relkind = 'r' AND a.attnum > 0 "
        "AND NOT a.attisdropped ORDER BY c.relname, a.attnum",
        (schema,),
    ):
        if table in tables:
            generated = column.pop()
            tables[table].append((*column, generated) if generated else tuple(column))
    for name, columns in tables.items():
        if name == "receipts" and columns == [c.postgres(name) for c in UNSIGNED_RECEIPTS.columns]:
            found.unsigned_log = True
            continue
        found.v2_columns = _postgres_columns(name, columns, problems, found.v2_columns)
    _postgres_indexes(execute, schema, indexes, tables, problems)
    _postgres_attached(execute, schema, problems)
    return found


def _postgres_columns(name: str, columns: list, problems: list[str], v2: int | None):
    """Check one table's columns; returns the v2 contribution columns found (``rows``)."""
    if contrib_instance(name) is not None:
        spec = contrib_table_spec(contrib_instance(name))
    else:
        spec = next(t for t in FIXED_TABLES if t.name == name)
    expected = [c.postgres(name) for c in spec.columns]
    if name == "rows" and len(columns) > len(expected):
        k = len(columns) - len(expected)
        if columns == [c.postgres(name) for c in rows_v2_spec(k).columns]:
            return k
    if columns != expected:
        problems.append(f"table {name} is not defined as the library defines it")
    return v2


def _postgres_indexes(execute, schema: int, indexes: set, tables: dict, problems: list) -> None:
    """Each index is a primary key's or one of :data:`INDEXES`, on its table and column."""
    keys = {}
    for name in tables:
        spec = contrib_table_spec(0) if contrib_instance(name) is not None else None
        spec = spec or next(t for t in FIXED_TABLES if t.name == name)
        if spec.key is not None:
            keys[f"{name}_pkey"] = (name, spec.key.name)
    rows = execute(
        "SELECT i.relname, t.relname, pg_get_indexdef(x.indexrelid), x.indisunique, "
        "x.indisprimary FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_class t ON t.oid = x.indrelid WHERE i.relnamespace = %s "
        "OR t.relnamespace = %s",
        (schema, schema),
    )
    listed = set()
    for name, table, definition, unique, primary in rows:
        listed.add(name)
        expected = keys.get(name) if primary else INDEXES.get(name)
        if expected is None or primary != unique or expected[0] != table:
            problems.append(f"index {name} on {table} is not one of the store's indexes")
            continue
        using = definition.partition(" USING ")[2]
        if using != f"btree ({expected[1]})":
            problems.append(f"index {name} on {table} is not defined as the library defines it")
    for name in indexes - listed:
        problems.append(f"index {name} is not one of the store's indexes")


def _postgres_attached(execute, schema: int, problems: list[str]) -> None:
    """Constraints, triggers, rules, policies, inheritance, and the schema's own code and
    types: a store has primary keys and nothing else."""
    queries: list[tuple[str, str]] = [
        (
            "SELECT con.conname, COALESCE(t.relname, '?'), con.contype, "
            "pg_get_constraintdef(con.oid) FROM pg_constraint con "
            "LEFT JOIN pg_class t ON t.oid = con.conrelid WHERE con.connamespace = %s",
            "constraint",
        ),
        (
            "SELECT tg.tgname, t.relname FROM pg_trigger tg JOIN pg_class t "
            "ON t.oid = tg.tgrelid WHERE t.relnamespace = %s AND NOT tg.tgisinternal",
            "trigger",
        ),
        (
            "SELECT r.rulename, t.relname FROM pg_rewrite r JOIN pg_class t "
            "ON t.oid = r.ev_class WHERE t.relnamespace = %s AND t.relkind = 'r'",
            "rule",
        ),
        (
            "SELECT p.polname, t.relname FROM pg_policy p JOIN pg_class t "
            "ON t.oid = p.polrelid WHERE t.relnamespace = %s",
            "policy",
        ),
        (
            "SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c "
            "ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
            "WHERE c.relnamespace = %s OR p.relnamespace = %s",
            "inherits",
        ),
        ("SELECT proname, '' FROM pg_proc WHERE pronamespace = %s", "function"),
        ("SELECT oprname, '' FROM pg_operator WHERE oprnamespace = %s", "operator"),
        (
            "SELECT typname, '' FROM pg_type WHERE typnamespace = %s AND typrelid = 0 "
            "AND typcategory <> 'A'",
            "type",
        ),
        ("SELECT collname, '' FROM pg_collation WHERE collnamespace = %s", "collation"),
    ]
    for query, what in queries:
        params = (schema,) * query.count("%s")
        for name, table, *rest in execute(query, params):
            if what == "constraint":
                key = f"{table}_pkey"
                if name == key and rest[0] == "p" or rest[0] == "n":  # keys; PG 18's NOT NULL
                    continue
                problems.append(f"constraint {name} on {table} ({rest[1][:80]})")
            elif what == "inherits":
                problems.append(f"table {name} inherits from {table} (its rows are read as rows)")
            elif table:
                problems.append(f"{what} {name} on {table}: a store holds no {what}s")
            else:
                problems.append(f"{what} {name}: a store's schema holds its tables only")


def layout_problems(found: Found, n_instances: int, v2: bool) -> list[str]:
    """What the catalogue holds against meta: one contribution table per instance (v3) or
    one contribution column of ``rows`` per instance (v2), no more, no fewer."""
    problems = []
    if v2:
        if found.v2_columns != n_instances:
            columns = found.v2_columns or 0
            problems.append(
                f"table rows has {columns} contribution columns for {n_instances} instances"
            )
        expected: set[int] = set()
    else:
        if found.v2_columns is not None:
            problems.append("table rows has contribution columns (format v2) in a v3 store")
        expected = set(range(n_instances))
    for r in sorted(found.contrib - expected):
        problems.append(
            f"table {contrib_table(r)} is a contribution table of no instance "
            f"(n_instances is {n_instances})"
        )
    for r in sorted(expected - found.contrib):
        problems.append(f"table {contrib_table(r)} is missing")
    return problems


def content_problems(meta_names: Iterable[str], sequences: Iterable[str]) -> list[str]:
    """Entries the library never writes: meta names, SQLite's sequence rows."""
    problems = [
        f"table meta holds an entry {name[:40]!r} the library never writes"
        for name in sorted(set(meta_names) - META_NAMES)
    ]
    problems += [
        f"table sqlite_sequence holds an entry {str(name)[:40]!r} of no table"
        for name in sequences
        if name != "receipts"
    ]
    return problems
