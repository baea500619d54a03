"""Numeric columns and feature matrices: which number in a table is feature ``j`` of row
``i``.

At fit time :func:`select_features` picks the columns (named, or every numeric column but the
id and label ones); at predict and insert time :func:`match_features` selects the recorded
names *by name*. A feature cell must be a finite number: anything else is an error naming its
row and column. The rules are written down in :mod:`forgetting.io.tables`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..ids import shown
from .table_types import DEFAULT_NPZ_FEATURES, Features, Table, TableError, TableUsageError

_MATRIX_NAME = re.compile(r"(.+)\[(0|[1-9][0-9]*)\]")
_EMBEDDING_NAME = re.compile(r"minilm\((.+)\)\[(0|[1-9][0-9]*)\]")
#: The column names pyarrow and dask give a frame's unnamed index when writing Parquet.
_INDEX_NAME = re.compile(r"__index_level_[0-9]+__|__null_dask_index__")

#: Embeds a list of texts into an ``(n, d)`` matrix (the CLI passes the MiniLM encoder).
Embedder = Callable[[list[str]], np.ndarray]


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _bad_cell(table: Table, column: str, row: int, value: Any) -> TableError:
    if isinstance(value, np.generic):  # nan, not np.float64(nan)
        value = value.item()
    cell = "an empty cell" if value is None or value == "" else shown(value)
    return TableError(
        f"{table.at(row, column)}: {cell} is not a finite number; "
        "fix the cell, or leave the column out with --feature-cols"
    )


def _is_missing(value: Any) -> bool:
    """An empty CSV cell, a Parquet null, or a NaN."""
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def numeric_column(table: Table, name: str, *, missing: bool = False) -> np.ndarray:
    """A 1-D column as float64; the first empty, non-numeric or non-finite cell is an error
    naming its row and column. With ``missing`` an empty cell (a Parquet null, a NaN) is a
    missing value, NaN — for models that take them (the exact forests)."""
    values = table.column(name, "--feature-cols")
    if table.kind == "csv":
        try:
            out = np.fromiter(map(float, values), dtype=np.float64, count=len(values))
        except ValueError:
            out = None
        if out is None or not np.all(np.isfinite(out)):
            cells = []
            for row, value in enumerate(values):
                if missing and _is_missing(value):
                    cells.append(math.nan)
                    continue
                number = _finite(value)
                if number is None:
                    raise _bad_cell(table, name, row, value) from None
                cells.append(number)
            out = np.array(cells, dtype=np.float64)
        return out
    array = np.asarray(values)
    if array.ndim != 1:
        raise TableUsageError(
            f"{table.path}: array {name!r} is {array.ndim}-D; name it alone to use it as the "
            "feature matrix"
        )
    if array.dtype.kind not in "biuf":  # strings, or objects (Parquet nulls, mixed values)
        for row, value in enumerate(array):
            if missing and _is_missing(value):
                continue
            if not isinstance(value, int | float | np.number) or isinstance(value, bool):
                raise _bad_cell(table, name, row, value)
        if missing:
            array = np.array([math.nan if v is None else v for v in array.tolist()])
    out = array.astype(np.float64)
    bad = np.flatnonzero(np.isinf(out) if missing else ~np.isfinite(out))
    if bad.size:
        raise _bad_cell(table, name, int(bad[0]), out[int(bad[0])])
    return out


def _matrix(table: Table, name: str, *, missing: bool = False) -> np.ndarray:
    """A 2-D NPZ array as float64, every entry finite (or NaN, with ``missing``)."""
    array = np.asarray(table.column(name, "--feature-cols"))
    if array.dtype.kind not in "biuf":
        raise TableError(f"{table.path}: array {name!r} is not numeric (dtype {array.dtype})")
    out = array.astype(np.float64)
    bad = np.argwhere(np.isinf(out) if missing else ~np.isfinite(out))
    if bad.size:
        row, col = (int(v) for v in bad[0])
        raise TableError(
            f"{table.path}, array {name!r}, row {row + 1}, column {col}: {out[row, col]!r} "
            "is not a finite number"
        )
    return out


def _is_text_column(table: Table, name: str) -> bool:
    """True for a column with no number in it (left out of the default features)."""
    values = table.columns[name]
    if table.kind == "csv":
        return not any(_finite(value) is not None for value in values)
    array = np.asarray(values)
    return array.ndim == 1 and array.dtype.kind not in "biuf"


def matrix_names(array: str, width: int) -> list[str]:
    """The recorded names of the columns of a 2-D array: ``X[0]``, ``X[1]``, ..."""
    return [f"{array}[{j}]" for j in range(width)]


def embedding_names(column: str, width: int) -> list[str]:
    """The recorded names of an embedded text column: ``minilm(text)[0]``, ..."""
    return [f"minilm({column})[{j}]" for j in range(width)]


def _source(names: Sequence[str], pattern: re.Pattern[str]) -> str | None:
    """The one array/column ``names`` enumerate as ``source[0..d-1]`` under ``pattern``."""
    matches = [pattern.fullmatch(name) for name in names]
    if not names or not all(matches):
        return None
    sources = {m.group(1) for m in matches if m}
    indices = [int(m.group(2)) for m in matches if m]
    return sources.pop() if len(sources) == 1 and indices == list(range(len(names))) else None


def text_column(table: Table, name: str) -> list[str]:
    """The cells of a text column as strings (an empty cell is an error naming its row)."""
    values = table.column(name, "--text-col")
    texts = []
    for row, value in enumerate(values):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            raise TableError(f"{table.at(row, name)}: empty text")
        texts.append(value.decode() if isinstance(value, bytes) else str(value))
    return texts


def _embed(table: Table, column: str, embed: Embedder | None) -> Features:
    if embed is None:
        raise TableUsageError(f"column {column!r} must be embedded, and no text encoder was given")
    matrix = np.asarray(embed(text_column(table, column)), dtype=np.float64)
    if matrix.ndim != 2 or len(matrix) != len(table.columns[column]):
        raise TableError(f"the text encoder returned shape {matrix.shape} for column {column!r}")
    return Features(matrix, embedding_names(column, matrix.shape[1]), [column])


def select_features(
    table: Table,
    *,
    columns: Sequence[str] | None = None,
    exclude: Iterable[str] = (),
    text_column: str | None = None,
    embed: Embedder | None = None,
    missing: bool = False,
) -> Features:
    """The fit-time feature matrix: ``columns`` as given, else the default selection
    (``missing``: empty cells are NaN, :func:`numeric_column`).

    Defaults: NPZ uses the array ``X`` (2-D, or 1-D as one column); CSV and Parquet use every
    column not in ``exclude`` (the id and label columns), leaving out text columns (listed in
    :attr:`Features.skipped`). ``text_column`` embeds that column instead (``embed`` does the
    work). ``columns`` naming one 2-D NPZ array uses it as the whole matrix.
    """
    if text_column is not None:
        if columns:
            raise TableUsageError("give feature columns or a text column, not both")
        return _embed(table, text_column, embed)
    if columns is None and table.kind == "npz":
        names, skipped = [DEFAULT_NPZ_FEATURES], []
    else:
        names, skipped = choose_features(
            table.path, table.names, lambda name: _is_text_column(table, name), columns, exclude
        )
    for name in names:
        table.column(name, "--feature-cols")
    if len(names) == 1 and np.ndim(table.columns[names[0]]) == 2:
        matrix = _matrix(table, names[0], missing=missing)
        return Features(matrix, matrix_names(names[0], matrix.shape[1]), names, skipped)
    matrix = np.column_stack([numeric_column(table, name, missing=missing) for name in names])
    return Features(matrix, names, names, skipped)


def choose_features(
    path: str,
    available: Sequence[str],
    is_text: Callable[[str], bool],
    columns: Sequence[str] | None,
    exclude: Iterable[str],
) -> tuple[list[str], list[str]]:
    """(feature names, skipped text columns): ``columns`` as given, else every column of
    ``available`` but the excluded ones, unnamed index columns and text columns. One rule for
    a table in memory and a dataset known only by its schema."""
    if columns is not None:
        names = list(columns)
        if not names:
            raise TableUsageError("the list of feature columns is empty")
        if len(set(names)) != len(names):
            raise TableUsageError(f"a feature column is named twice: {names}")
        return names, []
    excluded = set(exclude)
    candidates = [
        name for name in available if name not in excluded and not _INDEX_NAME.fullmatch(name)
    ]
    skipped = [name for name in candidates if is_text(name)]
    names = [name for name in candidates if name not in skipped]
    if not names:
        raise TableUsageError(
            f"{path} has no numeric feature columns besides the id and label: name "
            "them with --feature-cols, or embed a text column with --text-col"
        )
    return names, skipped


def match_features(
    table: Table,
    recorded: Sequence[str],
    *,
    columns: Sequence[str] | None = None,
    ignore: Iterable[str] = (),
    embed: Embedder | None = None,
    missing: bool = False,
) -> Features:
    """The feature matrix for a model fitted on the columns ``recorded``, selected by name
    (``missing``: empty cells are NaN, :func:`numeric_column`).

    The file's column order does not matter; a recorded column the file lacks is an error
    naming it; columns the model does not use are ignored and listed in
    :attr:`Features.unused` (except those in ``ignore``: the id and label columns). ``columns``
    (``--feature-cols`` at predict/insert) must name the recorded columns, in any order.
    """
    recorded = list(recorded)
    if columns is not None and sorted(columns) != sorted(recorded):
        raise TableUsageError(
            f"the model was fitted on the columns {','.join(recorded)}; the feature columns "
            f"given are {','.join(columns)} (leave the option out to select them by name)"
        )
    if all(name in table.columns and np.ndim(table.columns[name]) == 1 for name in recorded):
        matrix = np.column_stack([numeric_column(table, n, missing=missing) for n in recorded])
        used = set(recorded) | set(ignore)
        unused = [name for name in table.names if name not in used]
        return Features(matrix, recorded, recorded, unused=unused)
    array = _source(recorded, _MATRIX_NAME)
    if array is not None and array in table.columns and np.ndim(table.columns[array]) == 2:
        matrix = _matrix(table, array, missing=missing)
        if matrix.shape[1] != len(recorded):
            raise TableError(
                f"{table.path}: array {array!r} has {matrix.shape[1]} columns, the model was "
                f"fitted on {len(recorded)}"
            )
        return Features(matrix, recorded, [array])
    text = _source(recorded, _EMBEDDING_NAME)
    if text is not None and text in table.columns:
        features = _embed(table, text, embed)
        if features.names != recorded:
            raise TableError(
                f"embedding column {text!r} gave {len(features.names)} dimensions, the model "
                f"was fitted on {len(recorded)}"
            )
        return features
    wanted = [text] if text else [array] if array else recorded
    missing = [name for name in wanted if name not in table.columns]
    raise TableUsageError(
        f"{table.path} lacks the column(s) the model was fitted on: {', '.join(missing or wanted)}"
        f" (the model's features: {_describe(recorded)}; the file has: {', '.join(table.names)})"
    )


def _describe(names: Sequence[str]) -> str:
    for pattern, what in ((_MATRIX_NAME, "array"), (_EMBEDDING_NAME, "embedded text column")):
        source = _source(names, pattern)
        if source is not None:
            return f"{len(names)} columns of the {what} {source!r}"
    return ", ".join(names)


def raw_frame(table: Table, names: Sequence[str], kinds: Sequence[str] | None = None) -> Any:
    """A CSV or Parquet file's columns ``names`` as a pandas DataFrame for a model fitted on
    a raw table (``fit --raw-table``): a number column as float64 with NaN for an empty (or
    null) cell, a category column as strings with None for an empty cell. ``kinds`` ("num" or
    "text" per name: the fitted model's) fixes each column's kind; without them (at fit) a
    column whose non-empty cells are all finite numbers is numeric, any other is categories.
    A cell that is not a number in a numeric column is an error naming its row and column."""
    if table.kind == "npz":
        raise TableUsageError(
            "--raw-table reads CSV or Parquet columns (categories and empty cells); an NPZ "
            "holds numeric arrays: fit it without --raw-table"
        )
    import pandas as pd

    data = {}
    for j, name in enumerate(names):
        values = table.column(name, "--feature-cols" if kinds is None else None)
        cells = list(values) if table.kind == "csv" else np.asarray(values).tolist()
        empty = [c is None or c == "" or (isinstance(c, float) and math.isnan(c)) for c in cells]
        kind = kinds[j] if kinds is not None else None
        if kind is None:
            numbers = all(
                e or (not isinstance(c, str) or _finite(c) is not None)
                for c, e in zip(cells, empty, strict=True)
            )
            kind = "num" if numbers and not all(empty) else "text"
        if kind == "num":
            column = np.full(len(cells), np.nan)
            for row, (cell, e) in enumerate(zip(cells, empty, strict=True)):
                if e:
                    continue
                value = _finite(cell) if isinstance(cell, str) else cell
                if isinstance(value, bool):
                    value = float(value)
                if not isinstance(value, int | float) or not math.isfinite(value):
                    raise _bad_cell(table, name, row, cell)
                column[row] = value
            data[name] = column
        else:
            column = np.empty(len(cells), dtype=object)
            column[:] = [None if e else str(c) for c, e in zip(cells, empty, strict=True)]
            data[name] = column
    return pd.DataFrame(data, columns=list(names))
