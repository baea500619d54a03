"""Ids and labels from table files and command-line text.

Ids follow one rule, stated in :mod:`forgetting.io.tables`: text is taken exactly as written
(a canonical decimal integer is the integer id under ``id_type="auto"``), typed columns keep
their type, and every id then goes through
:func:`forgetting.schema.membership.canonical_id`, the normalization the estimators and the
store use, so a value the model would refuse is refused here with its row. Labels are class
names (integers when every label is one) or, for regression, finite numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..ids import shown
from ..schema.membership import canonical_id
from .table_columns import numeric_column
from .table_types import (
    DEFAULT_ID_COLUMN,
    DEFAULT_LABEL_COLUMN,
    ID_TYPES,
    Table,
    TableError,
    TableUsageError,
)

#: A canonical decimal integer: no sign on zero, no leading zeros, no ``+``, no spaces. ``-0``
#: is not one (it would alias the id 0 while reading as another).
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")


def parse_id(token: str, id_type: str = "auto") -> int | str:
    """One id from text, exactly as written (the rule is in :mod:`forgetting.io.tables`)."""
    if id_type not in ID_TYPES:
        raise ValueError(f"id_type must be one of {ID_TYPES}, got {id_type!r}")
    if not isinstance(token, str):
        raise TypeError(f"parse_id reads text, got {type(token).__name__}")
    if id_type != "str" and _CANONICAL_INT.fullmatch(token):
        return canonical_id(int(token))
    if id_type == "int":
        raise TableError(f"{shown(token)} is not a decimal integer id (id type int)")
    return canonical_id(token)


def parse_ids(tokens: Iterable[str], id_type: str = "auto") -> list[int | str]:
    """Ids from text tokens (``--ids`` entries, lines of an ids file)."""
    return [parse_id(token, id_type) for token in tokens]


def split_ids(text: str) -> list[str]:
    """The comma-separated tokens of ``--ids``, exactly as written.

    An empty token (``a,,b``, a trailing comma) is an error rather than dropped: the text is
    never rewritten, and a stray comma usually means a mistyped list.
    """
    tokens = text.split(",")
    for position, token in enumerate(tokens, 1):
        if token == "":
            raise TableUsageError(
                f"id {position} of {len(tokens)} is empty: ids are taken exactly as written, "
                "so remove the extra comma (an id containing a comma needs an ids file)"
            )
    return tokens


def read_id_lines(text: str) -> list[str]:
    """Ids from an ids file: one per line, exactly as written (only the line ending is
    removed); empty lines are skipped and lines starting with ``#`` are comments."""
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def id_column(
    table: Table, name: str | None = None, *, id_type: str = "auto", required: bool = True
) -> list[int | str] | None:
    """The ids of every row, or ``None`` when the column is absent and not ``required``.

    ``name`` defaults to ``id`` (NPZ: ``ids``); a named column must exist.
    """
    column = name or DEFAULT_ID_COLUMN[table.kind]
    if column not in table.columns and not required and name is None:
        return None
    values = table.column(column, "--id-col")
    if np.ndim(values) != 1:
        raise TableUsageError(f"{table.path}: id column {column!r} must be 1-D")
    # A typed string column holds string ids as written; CSV cells are text, read by the rule.
    text_type = "str" if table.kind != "csv" and id_type == "auto" else id_type
    ids = []
    for row, value in enumerate(values):
        try:
            ids.append(_id_value(value, id_type, text_type))
        except (ValueError, TypeError) as err:  # TableError, or canonical_id refusing it
            raise TableError(f"{table.at(row, column)}: {err}") from None
    return ids


def _id_value(value: Any, id_type: str, text_type: str) -> int | str:
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, np.str_):
        value = str(value)
    if isinstance(value, str):
        return parse_id(value, text_type)
    if value is None:
        raise TableError("the id is empty (null)")
    if id_type == "str" and isinstance(value, int | np.integer) and not isinstance(value, bool):
        return str(int(value))
    return canonical_id(value)


# -- labels ---------------------------------------------------------------------------------


def label_column(table: Table, name: str | None = None, *, task: str) -> np.ndarray:
    """The labels: finite numbers for ``task="regression"``; for classification integers when
    every label is a canonical integer, else strings (CSV cells have surrounding spaces
    removed: labels are class names, not ids, which are never rewritten)."""
    column = name or DEFAULT_LABEL_COLUMN[table.kind]
    values = table.column(column, "--label-col")
    if task == "regression":
        return numeric_column(table, column)
    if table.kind == "csv":
        texts = [value.strip() for value in values]
        for row, text in enumerate(texts):
            if not text:
                raise TableError(f"{table.at(row, column)}: empty label")
        if all(_CANONICAL_INT.fullmatch(text) for text in texts):
            return np.array([int(text) for text in texts], dtype=np.int64)
        return np.array(texts, dtype=str)
    array = np.asarray(values)
    if array.ndim != 1:
        raise TableUsageError(f"{table.path}: label column {column!r} must be 1-D")
    if array.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(array) | (array != np.round(array)))
        if bad.size:
            row = int(bad[0])
            raise TableError(
                f"{table.at(row, column)}: {array[row].item()!r} is not an "
                "integer class (use --task regression for numeric targets)"
            )
        return array.astype(np.int64)
    if array.dtype.kind in "OSU":
        for row, value in enumerate(array):
            if value is None or (isinstance(value, str | bytes) and not value):
                raise TableError(f"{table.at(row, column)}: empty label")
        return np.array([v.decode() if isinstance(v, bytes) else str(v) for v in array], dtype=str)
    return array
