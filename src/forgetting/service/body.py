"""Request bodies of rows, parsed into numpy without a Python object per number.

Why not FastAPI's body parameter: it builds the whole body as Python objects (a list per row,
an object per number), then pydantic builds its own, and on invalid input one error record
per bad value, each holding its input. Measured on ``/predict`` of a 784-feature model
(issue 73): a 60 MB body of short numbers ending in a 422 raised the server's peak memory by
6.5 times the body (29 times in the red team's run), and a 20 MB body of ``true`` values by
12.9 GB, 630 times; such requests need no token.

So ``/predict`` and ``/insert`` read their body here. The body is read into one buffer and
decoded to text; the standard library's decoder (:meth:`json.JSONDecoder.raw_decode`, in C)
decodes one row at a time, each row is checked and copied into a matrix allocated from the
body's size, and the first problem ends the parse with a 422 naming its place (a row past
``max_batch`` with a 413). A row of d values takes at least 2d characters, so a float64
matrix holds at most 4 bytes per character of the body: the peak is the text plus the matrix,
at most 5 times an ASCII body (8 times with characters beyond the BMP, whose text takes 4
bytes each), and about 2 times a body of realistic numbers. A model fitted on a raw table
keeps an object per value (its rows are a DataFrame); equal strings share one object.

Field-level rules are the schemas' (:mod:`.schemas`): unknown and duplicate fields are refused,
numbers are finite JSON numbers (``true``, ``"1.5"``, ``NaN`` are refused), and labels and
ids, no more of them than ``max_batch``, are validated by pydantic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import HTTPException, Request, status
from pydantic import TypeAdapter, ValidationError

from ..ids import shown
from .errors import unprocessable
from .schemas import Label, RowId

#: The longest string value of a row (a category), as in :data:`.schemas.Value`.
MAX_STRING = 1024

_SPACE = re.compile(r"[ \t\n\r]*")
_LABELS = TypeAdapter(list[Label])
_IDS = TypeAdapter(list[RowId])


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


class _Malformed(Exception):
    """The body is not the JSON it should be; ``str`` says where."""


async def read_body(request: Request) -> str:
    """The request's body as text, read into one buffer (the request gate has bounded it)."""
    buffer = bytearray()
    async for chunk in request.stream():
        buffer += chunk
    try:
        return buffer.decode("utf-8")
    except UnicodeDecodeError as err:
        raise unprocessable(f"the body is not UTF-8 text (byte {err.start})") from None


class _Parser:
    """One body's text and the position reached in it."""

    def __init__(self, text: str):
        self.text = text
        self.at = 0

    def space(self) -> None:
        self.at = _SPACE.match(self.text, self.at).end()

    def peek(self) -> str:
        self.space()
        return self.text[self.at : self.at + 1]

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            found = self.text[self.at : self.at + 1] or "the end of the body"
            raise _Malformed(f"expected {what} at character {self.at}, found {found!r}")
        self.at += 1

    def value(self, where: str) -> Any:
        self.space()
        try:
            value, self.at = _DECODER.raw_decode(self.text, self.at)
        except json.JSONDecodeError as err:
            raise _Malformed(f"{err.msg} at character {err.pos}") from None
        except ValueError as err:  # NaN or Infinity, or an integer of too many digits
            why = "an integer of too many digits" if "digits" in str(err) else str(err)
            raise unprocessable(f"{where}: {why[:80]}") from None
        except RecursionError:
            raise unprocessable(f"{where}: nested too deeply") from None
        return value

    def fields(self) -> Any:
        """The top-level object's field names, one at a time; the caller reads each value."""
        self.expect("{", "a JSON object")
        seen: set[str] = set()
        if self.peek() == "}":
            self.at += 1
            return
        while True:
            if self.peek() != '"':
                self.expect('"', "a field name")
            try:
                name, self.at = json.decoder.scanstring(self.text, self.at + 1)
            except json.JSONDecodeError as err:
                raise _Malformed(f"{err.msg} at character {err.pos}") from None
            if name in seen:
                raise unprocessable(f"{shown(name)}: given twice; send each field once")
            seen.add(name)
            self.expect(":", "':'")
            yield name
            if self.peek() == ",":
                self.at += 1
                continue
            self.expect("}", "',' or '}'")
            return

    def end(self) -> None:
        self.space()
        if self.at != len(self.text):
            raise _Malformed(f"unexpected data after the object at character {self.at}")

    def array(self, where: str, limit: int, item: Callable[[int], None]) -> int:
        """Read a JSON array, calling ``item(i)`` to read each of its values; a 413 past
        ``limit`` values, a 422 for an empty one. Returns how many there were."""
        self.expect("[", f"{where} as an array")
        if self.peek() == "]":
            raise unprocessable(f"{where}: at least one entry is needed")
        count = 0
        while True:
            if count == limit:
                raise HTTPException(
                    status_code=status.HTTP_413_CONTENT_TOO_LARGE,
                    detail=f"more than {limit} {where} entries in one request; the limit is "
                    f"{limit}: split the request",
                )
            item(count)
            count += 1
            if self.peek() == ",":
                self.at += 1
                continue
            self.expect("]", f"',' or ']' in {where}")
            return count


class _Matrix:
    """Rows of ``d`` values copied into a matrix as they are read (module docstring)."""

    def __init__(self, parser: _Parser, d: int, table: bool, limit: int):
        capacity = min(limit, len(parser.text) // (2 * d + 1) + 1)
        self.X = np.empty((capacity, d), dtype=object if table else np.float64)
        self.d = d
        self.table = table
        self.strings: dict[str, str] = {}  # equal strings share one object

    def store(self, i: int, row: list, where: Callable[[int], str]) -> None:
        if set(map(type, row)) <= {int, float}:  # the common case, checked in C
            try:
                values = np.asarray(row, dtype=np.float64)
            except OverflowError:  # an integer beyond float64
                values = np.asarray([v if _finite(v) else np.inf for v in row])
            if not np.isfinite(values).all():
                bad = int(np.flatnonzero(~np.isfinite(values))[0])
                raise unprocessable(f"{where(bad)} is not a finite number")
            self.X[i] = row if self.table else values
            return
        for j, v in enumerate(row):
            kind = type(v)
            if kind is int or kind is float:
                if not _finite(v):
                    raise unprocessable(f"{where(j)} is not a finite number")
            elif v is None or kind is str:
                if not self.table:
                    raise unprocessable(
                        f"{where(j)} is {'null' if v is None else 'a string'}; this model was "
                        "fitted on numbers: send finite numbers (strings and null are for a "
                        "model fitted on a raw table)"
                    )
                if v is not None:
                    if len(v) > MAX_STRING:
                        raise unprocessable(
                            f"{where(j)}: a string of at most {MAX_STRING} characters"
                        )
                    row[j] = self.strings.setdefault(v, v)
            else:
                named = {bool: "a boolean", list: "an array", dict: "an object"}[kind]
                raise unprocessable(f"{where(j)} is {named}: send a finite number")
        self.X[i] = row


def _finite(v: int | float) -> bool:
    try:
        return bool(np.isfinite(float(v)))
    except OverflowError:
        return False


def parse_rows(
    text: str,
    *,
    n_features: int,
    names: list[str] | None,
    table: bool,
    max_batch: int,
    extra: tuple[str, ...] = (),
    scalars: tuple[str, ...] = (),
) -> tuple[np.ndarray, dict[str, Any]]:
    """The rows of a body ``{"X": [[...], ...]}`` or ``{"rows": [{...}, ...]}`` (exactly one)
    as a matrix (float64; object for a model fitted on a raw table), and the values of the
    ``extra`` fields (``y``, ``ids`` for an insert: lists of at most ``max_batch`` labels or
    ids, validated) and of the optional ``scalars`` (one JSON value each, e.g. an insert's
    ``reason``, checked by the caller). Raises a 422 (or 413) saying what is wrong."""
    parser = _Parser(text)
    rows: np.ndarray | None = None
    values: dict[str, Any] = {}
    try:
        for name in parser.fields():
            if name == "X" or (name == "rows" and not extra):
                if rows is not None:
                    raise unprocessable("send exactly one of X (arrays) or rows (named records)")
                rows = _read_rows(parser, name, n_features, names, table, max_batch)
            elif name in extra:
                values[name] = _read_list(parser, name, max_batch)
            elif name in scalars:
                values[name] = parser.value(name)
            else:
                allowed = ", ".join(("X", "rows") if not extra else ("X", *extra, *scalars))
                raise unprocessable(f"{shown(name)}: unknown field; the fields are {allowed}")
        parser.end()
    except _Malformed as err:
        raise unprocessable(f"invalid request: body: malformed JSON: {err}") from None
    if rows is None:
        raise unprocessable(
            "send exactly one of X (arrays) or rows (named records)"
            if not extra
            else "X: the rows to insert are missing"
        )
    for name in extra:
        if name not in values:
            raise unprocessable(f"{name}: missing")
    return rows, values


def _read_rows(
    parser: _Parser,
    field: str,
    d: int,
    names: list[str] | None,
    table: bool,
    limit: int,
) -> np.ndarray:
    matrix = _Matrix(parser, d, table, limit)

    def row_of_values(i: int) -> None:
        row = parser.value(f"X[{i}]")
        if type(row) is not list:
            raise unprocessable(f"X[{i}] is not an array of values")
        if len(row) != d:
            raise unprocessable(
                f"X[{i}] has {len(row)} values; the model expects {d} features per row"
            )
        matrix.store(i, row, lambda j: f"X[{i}][{j}]")

    def named_row(i: int) -> None:
        record = parser.value(f"rows[{i}]")
        if type(record) is not dict:
            raise unprocessable(f"rows[{i}] is not an object of named values")
        if names is None:
            raise unprocessable(
                "this model was fitted without column names, so rows cannot be matched by "
                "name: send X, each row a list of values in the fitted column order"
            )
        unknown = [c for c in record if c not in known]
        if unknown:
            raise unprocessable(
                f"rows[{i}] has unknown column(s) {_listing(unknown)}; the model's columns are "
                f"{_listing(names)}"
            )
        missing = [c for c in names if c not in record]
        if missing:
            raise unprocessable(f"rows[{i}] lacks column(s) {_listing(missing)}")
        matrix.store(i, [record[c] for c in names], lambda j: f"rows[{i}][{names[j]!r}]")

    known = set(names or ())
    count = parser.array(field, limit, row_of_values if field == "X" else named_row)
    return matrix.X[:count]


def _listing(items: list) -> str:
    from ..ids import listing

    return listing(items)


def _read_list(parser: _Parser, field: str, limit: int) -> list:
    """A list field (labels or ids): at most ``limit`` entries, then validated."""
    items: list = []
    parser.array(field, limit, lambda i: items.append(parser.value(f"{field}[{i}]")))
    adapter = _IDS if field == "ids" else _LABELS
    try:
        return adapter.validate_python(items, strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"][:1])
        raise unprocessable(f"{field}{where}: {first['msg']}") from None
