"""The receipt log as an operator reads it: one id's history, and filtered pages of all.

Why filters run here rather than in SQL: a receipt is stored as one JSON body (its fields are
the engine's, and may grow), so a filter on its time, scope or instances would need each
dialect's JSON functions. Pages are read by sequence number instead (keyset paging: stable
while receipts are appended, which is all that ever happens to them) and filtered as they
come, with a bound on how many one call reads so that a rare filter answers a short page and
a cursor rather than scanning the whole log in one request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

#: Receipts read per query while paging.
BATCH = 500
#: The most receipts one page call reads before answering (possibly short) with a cursor.
MAX_SCANNED = 20_000

#: What an id's lookup can tell (:func:`id_status`).
STATUSES = {
    "forgotten": "forgotten: its latest receipt is a forget (see its time and instances)",
    "present": "present and not forgotten: the model holds this row",
    "never_seen": "never present: no row and no receipt for this id in this store",
    "absent": "not held, and no forget receipt names it (the store was refitted without it?)",
}


def parse_time(text: str, *, end: bool = False) -> datetime:
    """An ISO 8601 time (UTC when it has no zone) as an aware datetime. A date alone is the
    start of that day (UTC), or with ``end`` the start of the next one, so that
    ``until=2026-12-05`` covers that whole day. ValueError saying the expected form."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return moment + timedelta(days=1) if end else moment
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise ValueError(
            f"{str(text)[:40]!r} is not an ISO 8601 date or time (e.g. 2026-12-05 or "
            "2026-12-05T14:30:00+00:00)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ReceiptFilter:
    """Which receipts a listing keeps: ``since`` (inclusive) and ``until`` (exclusive)
    bound the receipt's time; ``operation`` is ``forget`` or ``insert``; ``scope`` is
    ``instance`` or ``label``; ``instance`` keeps receipts whose deletion hit that
    instance (``instances_hit``)."""

    since: datetime | None = None
    until: datetime | None = None
    operation: str | None = None
    scope: str | None = None
    instance: int | None = None

    def __post_init__(self) -> None:
        if self.operation not in (None, "forget", "insert"):
            raise ValueError(f"operation must be forget or insert, got {self.operation!r}")
        if self.scope not in (None, "instance", "label"):
            raise ValueError(f"scope must be instance or label, got {self.scope!r}")
        if self.instance is not None and (type(self.instance) is not int or self.instance < 0):
            raise ValueError(f"instance must be a non-negative integer, got {self.instance!r}")
        for name in ("since", "until"):
            moment = getattr(self, name)
            if moment is not None and moment.tzinfo is None:
                object.__setattr__(self, name, moment.replace(tzinfo=UTC))

    def matches(self, receipt: dict) -> bool:
        """Whether ``receipt`` passes every filter given (a receipt whose time cannot be
        read passes no time filter)."""
        if self.operation is not None and receipt.get("operation") != self.operation:
            return False
        if self.scope is not None and receipt.get("scope") != self.scope:
            return False
        if self.instance is not None and self.instance not in (receipt.get("instances_hit") or ()):
            return False
        if self.since is None and self.until is None:
            return True
        try:
            moment = parse_time(str(receipt.get("timestamp")))
        except ValueError:
            return False
        if self.since is not None and moment < self.since:
            return False
        return self.until is None or moment < self.until


def page(
    read: Callable[[int, int], list[tuple[int, dict]]],
    keep: ReceiptFilter,
    after: int = 0,
    limit: int = 100,
) -> tuple[list[dict], int | None]:
    """Up to ``limit`` receipts after the cursor ``after`` that ``keep`` matches, oldest
    first, each with its ``seq``, and the cursor of the next page (None at the end of the
    log). ``read(after, n)`` is the store's :meth:`~.sql.SQLStore.receipts_after`. A page
    may be short (even empty) with a cursor when :data:`MAX_SCANNED` receipts were read."""
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    if type(after) is not int or after < 0:
        raise ValueError(f"cursor must be a non-negative integer, got {after!r}")
    found: list[dict] = []
    scanned = 0
    while True:
        batch = read(after, BATCH)
        for seq, receipt in batch:
            after = seq
            if keep.matches(receipt):
                found.append({**receipt, "seq": seq})
                if len(found) == limit:
                    return found, after
        scanned += len(batch)
        if len(batch) < BATCH:
            return found, None
        if scanned >= MAX_SCANNED:
            return found, after


def every(
    read: Callable[[int, int], list[tuple[int, dict]]], keep: ReceiptFilter
) -> Iterator[dict]:
    """Every receipt ``keep`` matches, oldest first, read a batch at a time (an export)."""
    after = 0
    while True:
        batch = read(after, BATCH)
        for seq, receipt in batch:
            after = seq
            if keep.matches(receipt):
                yield {**receipt, "seq": seq}
        if len(batch) < BATCH:
            return


def id_status(receipts: list[dict], present: bool) -> str:
    """What is knowable of one id from its receipts (oldest first) and whether the model
    holds it now: a key of :data:`STATUSES`. In label mode a forgotten row is still held
    (its inputs), so the latest receipt decides before presence does."""
    if receipts and receipts[-1].get("operation") == "forget":
        return "forgotten"
    if present:
        return "present"
    return "absent" if receipts else "never_seen"


#: The columns of a CSV export, in order (``id_hashes`` and ``instances_hit`` space-separated).
CSV_COLUMNS = (
    "seq",
    "timestamp",
    "operation",
    "scope",
    "n_rows",
    "instances_hit",
    "rebuild_started",
    "effective_rho",
    "state_digest",
    "seconds",
    "id_hashes",
)

#: First characters that make a spreadsheet read a cell as a formula (OWASP's list).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value) -> str:
    """``value`` as CSV text a spreadsheet shows as text: a cell starting like a formula
    gets a leading ``'`` (a receipt's fields are the server's, but a damaged or altered
    store must not run formulas on an auditor's machine)."""
    if isinstance(value, list | tuple):
        value = " ".join(str(v) for v in value)
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def csv_lines(receipts) -> Iterator[str]:
    """A CSV export of ``receipts``, a header then one line per receipt (RFC 4180 quoting,
    formula-like cells escaped by :func:`csv_cell`), as text chunks to stream."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for receipt in receipts:
        writer.writerow([csv_cell(receipt.get(column)) for column in CSV_COLUMNS])
        if buffer.tell() > 1 << 16:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def json_chunks(receipts) -> Iterator[str]:
    """A JSON export of ``receipts``: one array, streamed an element at a time."""
    import json

    yield "["
    for i, receipt in enumerate(receipts):
        yield ("," if i else "") + "\n" + json.dumps(receipt, sort_keys=True)
    yield "\n]\n"
