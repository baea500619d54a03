"""User table files (CSV/TSV, Parquet, NPZ) turned into ids, labels and a feature matrix.

Why a module of its own: the command line, the service's bulk tools and the tests all need the
same answer to "which number in this file is feature j of row i, and which row is id u5?". A
wrong answer is not a crash but a model fitted on shifted features, or a deletion of someone
else's row, so the rules live in one place, are written down here, and every deviation from
them is an error that names the file, the row and the column.

**Ids.** Text ids (CSV cells, ``--ids``, lines of an ids file) follow one rule, applied to the
text exactly as written (never stripped or otherwise rewritten, so ``" u5 "`` is its own id,
as it is in the Python API and over HTTP):

* ``id_type="auto"`` (the default): a canonical decimal integer (``42``, ``-7``; not ``042``,
  ``+4`` or `` 42``) is the integer id, anything else the string id;
* ``id_type="str"``: every token is a string id (how to address the string ``"42"``);
* ``id_type="int"``: every token must be a canonical decimal integer.

Typed columns (Parquet, NPZ) keep their type under ``"auto"``: an integer column holds integer
ids and a string column string ids, exactly as written. Every id then goes through
:func:`forgetting.schema.membership.canonical_id`, the one normalization the estimators and
the store use, so a value the model would refuse is refused here with its row.

**Features.** At fit time the features are the columns named (``columns=``), or by default
every column but the id and label columns. A CSV column with no number in it at all is a text
column: it is left out and reported in :attr:`Features.skipped`. A column with at least one
number is a feature column, and then every cell must be a finite number: an empty or
non-numeric cell is an error naming its line and column, never a silently dropped column.
Each matrix column gets a name (:attr:`Features.names`) which the store records; at predict
and insert time :func:`match_features` selects the recorded names *by name*: the file's column
order does not matter (columns are reordered by name), a missing column is an error, and
columns the model does not use are ignored and listed in :attr:`Features.unused`.

Names of matrix columns that are not table columns: column ``j`` of a 2-D NPZ array ``X`` is
``X[j]``; dimension ``j`` of the MiniLM embedding of text column ``t`` is ``minilm(t)[j]``.

**Parquet datasets.** A directory is a Parquet dataset: its files (names starting with ``.``
or ``_`` -- ``_SUCCESS``, ``_metadata``, ``.crc`` files -- are skipped; nothing else may be in
it, subdirectories included) must all be readable Parquet files with the same columns and
types. Its rows are the files' rows, files in natural name order (``part.2`` before
``part.10``: the order ``dask.dataframe.read_parquet`` reads them in), each file's rows in
file order. Every column is converted exactly as a single Parquet file's is, so a dataset means
what one file holding the same rows in that order means; an error names the file and its row.
:func:`read_table` reads a dataset into memory; :func:`open_dataset` only reads the footers,
and :func:`dataset_feature_array` gives the features as a lazy dask array read on the workers.
An unnamed pandas/dask index written as a column (``__index_level_0__``,
``__null_dask_index__``: what ``to_parquet`` writes for a frame's default index) is row
bookkeeping, not data: it is never a default feature, in a file or a dataset.

**Errors.** :class:`TableError` (a ``ValueError``) means the data cannot be used as asked;
its subclass :class:`TableUsageError` means the request does not fit the file (no such file,
column or format) and is fixed by changing the command.

Nothing here runs code from the bytes it reads: NPZ files are loaded with
``allow_pickle=False``.
"""

from __future__ import annotations

import bisect
import csv
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..schema.membership import canonical_id

#: How text tokens become ids (see the module docstring).
ID_TYPES = ("auto", "int", "str")

#: Default id / label column names per file kind.
DEFAULT_ID_COLUMN = {"csv": "id", "parquet": "id", "npz": "ids"}
DEFAULT_LABEL_COLUMN = {"csv": "label", "parquet": "label", "npz": "y"}
#: The NPZ array used as the feature matrix when no columns are named.
DEFAULT_NPZ_FEATURES = "X"

_CANONICAL_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_MATRIX_NAME = re.compile(r"(.+)\[(0|[1-9][0-9]*)\]")
_EMBEDDING_NAME = re.compile(r"minilm\((.+)\)\[(0|[1-9][0-9]*)\]")
#: The column names pyarrow and dask give a frame's unnamed index when writing Parquet.
_INDEX_NAME = re.compile(r"__index_level_[0-9]+__|__null_dask_index__")
#: File names a dataset directory may hold besides its Parquet files (markers, checksums,
#: dask's ``_metadata``): skipped, as pyarrow and dask skip them.
DATASET_SKIPPED_PREFIXES = (".", "_")

#: Embeds a list of texts into an ``(n, d)`` matrix (the CLI passes the MiniLM encoder).
Embedder = Callable[[list[str]], np.ndarray]


class TableError(ValueError):
    """The data cannot be used as asked; the message names the file, row and column."""


class TableUsageError(TableError):
    """The request does not fit the file: no such file, column or format."""


@dataclass(frozen=True)
class Table:
    """A file's columns by name, in file order.

    CSV columns are lists of the cells' text; Parquet and NPZ columns are numpy arrays (an NPZ
    array may be 2-D: a whole feature matrix). ``lines[i]`` is the 1-based line on which CSV
    data row ``i`` starts (blank lines and quoted newlines make it differ from ``i + 2``).
    """

    path: str
    kind: str
    columns: dict[str, Any]
    lines: list[int] | None = None
    #: A dataset's files as (first row, file path), in row order; None for one file.
    parts: tuple[tuple[int, str], ...] | None = None

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def where(self, row: int) -> str:
        """Where data row ``row`` (0-based) is, as a person opening the file would count."""
        if self.lines is not None:
            return f"line {self.lines[row]}"
        if self.parts:
            starts = [start for start, _ in self.parts]
            start, file = self.parts[bisect.bisect_right(starts, row) - 1]
            return f"{file}, row {row - start + 1}"
        return f"row {row + 1}"

    def at(self, row: int, column: str) -> str:
        """A cell's place for an error message: file, line (or row) and column."""
        if self.parts:  # the file itself, not the directory
            return f"{self.where(row)}, column {column!r}"
        return f"{self.path}, {self.where(row)}, column {column!r}"

    def column(self, name: str, option: str | None = None) -> Any:
        """The column ``name``; a missing one is a usage error naming ``option`` to set."""
        if name not in self.columns:
            hint = f" (set {option})" if option else ""
            raise TableUsageError(
                f"{self.path} has no column {name!r}{hint}; it has: " + ", ".join(self.names)
            )
        return self.columns[name]


@dataclass(frozen=True)
class Features:
    """A feature matrix and where it came from.

    ``names`` has one entry per matrix column (what the store records at fit); ``columns`` are
    the file's columns that were read (for messages); ``skipped`` are text columns left out by
    the default selection; ``unused`` are columns :func:`match_features` did not need.
    """

    matrix: np.ndarray
    names: list[str]
    columns: list[str]
    skipped: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)


# -- reading files --------------------------------------------------------------------------


def read_table(path: str | Path) -> Table:
    """Read a CSV/TSV (with a header row), Parquet or NPZ file, by its suffix, or a Parquet
    dataset directory (into memory: see :func:`read_dataset`)."""
    file = Path(path)
    if file.is_dir():
        return read_dataset(open_dataset(file))
    if not file.is_file():
        raise TableUsageError(f"data file {str(path)!r} does not exist")
    suffix = file.suffix.lower()
    if suffix in (".csv", ".tsv", ".txt"):
        return _read_csv(file, "\t" if suffix == ".tsv" else ",")
    if suffix in (".parquet", ".pq"):
        return _read_parquet(file)
    if suffix == ".npz":
        return _read_npz(file)
    raise TableUsageError(
        f"cannot tell the format of {str(path)!r}: use a .csv, .tsv, .parquet or .npz file"
    )


def _read_csv(file: Path, delimiter: str) -> Table:
    try:
        with open(file, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle, delimiter=delimiter)
            try:
                header = [name.strip() for name in next(reader)]
            except StopIteration:
                raise TableUsageError(f"{file} is empty; a CSV needs a header row") from None
            if len(set(header)) != len(header) or not all(header):
                raise TableUsageError(
                    f"{file}: the header row must name every column once: {header}"
                )
            values: list[list[str]] = [[] for _ in header]
            lines: list[int] = []
            last_line = reader.line_num
            for row in reader:
                start, last_line = last_line + 1, reader.line_num
                if not row:
                    continue
                if len(row) != len(header):
                    raise TableError(
                        f"{file}, line {start}: {len(row)} fields, the header has {len(header)}"
                    )
                lines.append(start)
                for column, value in zip(values, row, strict=True):
                    column.append(value)
    except UnicodeDecodeError as err:
        raise TableError(f"{file} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except csv.Error as err:
        raise TableError(f"{file}: {err}") from None
    return Table(str(file), "csv", dict(zip(header, values, strict=True)), lines)


def _pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TableError(
            "reading Parquet needs pyarrow: pip install pyarrow (or convert the file to CSV)"
        ) from None
    return pq


def _read_parquet(file: Path) -> Table:
    pq = _pyarrow_parquet()
    try:
        table = pq.read_table(file)
    except Exception as err:  # pyarrow raises its own ArrowInvalid/OSError family
        raise TableError(f"{file} is not a readable Parquet file ({err})") from None
    return Table(str(file), "parquet", _arrow_columns(table))


def _arrow_columns(table: Any, names: Iterable[str] | None = None) -> dict[str, Any]:
    """A pyarrow table's columns as numpy arrays: the one conversion every Parquet reader
    here uses (a file, a dataset in memory, a dataset's chunks on dask workers)."""
    return {
        name: table.column(name).to_numpy(zero_copy_only=False)
        for name in (table.column_names if names is None else names)
    }


def _read_npz(file: Path) -> Table:
    try:
        with np.load(file, allow_pickle=False) as archive:
            columns = {name: archive[name] for name in archive.files}
    except ValueError as err:
        raise TableError(
            f"{file}: cannot read its arrays ({err}); save them without Python objects"
        ) from None
    except (OSError, EOFError) as err:
        raise TableError(f"{file} is not a readable NPZ file ({err})") from None
    if not any(np.ndim(a) >= 1 for a in columns.values()):
        raise TableUsageError(f"{file} holds no arrays")
    return Table(str(file), "npz", columns)


def check_rows(table: Table, **named: Sequence | np.ndarray | None) -> int:
    """The common row count of the selected ids/labels/features; differing counts (only
    possible between NPZ arrays) are an error naming each."""
    counts = {name: len(v) for name, v in named.items() if v is not None}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name} {n}" for name, n in counts.items())
        raise TableError(f"{table.path}: the selected arrays differ in length: {listed}")
    return next(iter(counts.values()), 0)


# -- ids ------------------------------------------------------------------------------------


def parse_id(token: str, id_type: str = "auto") -> int | str:
    """One id from text, exactly as written (see the module docstring for the rule)."""
    if id_type not in ID_TYPES:
        raise ValueError(f"id_type must be one of {ID_TYPES}, got {id_type!r}")
    if not isinstance(token, str):
        raise TypeError(f"parse_id reads text, got {type(token).__name__}")
    if id_type != "str" and _CANONICAL_INT.fullmatch(token):
        return canonical_id(int(token))
    if id_type == "int":
        raise TableError(f"{token!r} is not a decimal integer id (id type int)")
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
    removed, as before: labels are class names, not ids)."""
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


# -- numbers and features -------------------------------------------------------------------


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _bad_cell(table: Table, column: str, row: int, value: Any) -> TableError:
    if isinstance(value, np.generic):  # nan, not np.float64(nan)
        value = value.item()
    shown = "an empty cell" if value is None or value == "" else f"{value!r}"
    return TableError(
        f"{table.at(row, column)}: {shown} is not a finite number; "
        "fix the cell, or leave the column out with --feature-cols"
    )


def numeric_column(table: Table, name: str) -> np.ndarray:
    """A 1-D column as float64; the first empty, non-numeric or non-finite cell is an error
    naming its row and column."""
    values = table.column(name, "--feature-cols")
    if table.kind == "csv":
        try:
            out = np.fromiter(map(float, values), dtype=np.float64, count=len(values))
        except ValueError:
            out = None
        if out is None or not np.all(np.isfinite(out)):
            for row, value in enumerate(values):
                if _finite(value) is None:
                    raise _bad_cell(table, name, row, value) from None
        return out
    array = np.asarray(values)
    if array.ndim != 1:
        raise TableUsageError(
            f"{table.path}: array {name!r} is {array.ndim}-D; name it alone to use it as the "
            "feature matrix"
        )
    if array.dtype.kind not in "biuf":  # strings, or objects (Parquet nulls, mixed values)
        for row, value in enumerate(array):
            if not isinstance(value, int | float | np.number) or isinstance(value, bool):
                raise _bad_cell(table, name, row, value)
    out = array.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:
        raise _bad_cell(table, name, int(bad[0]), out[int(bad[0])])
    return out


def _matrix(table: Table, name: str) -> np.ndarray:
    """A 2-D NPZ array as float64, every entry finite."""
    array = np.asarray(table.column(name, "--feature-cols"))
    if array.dtype.kind not in "biuf":
        raise TableError(f"{table.path}: array {name!r} is not numeric (dtype {array.dtype})")
    out = array.astype(np.float64)
    bad = np.argwhere(~np.isfinite(out))
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
) -> Features:
    """The fit-time feature matrix: ``columns`` as given, else the default selection.

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
        names, skipped = _choose_features(
            table.path, table.names, lambda name: _is_text_column(table, name), columns, exclude
        )
    for name in names:
        table.column(name, "--feature-cols")
    if len(names) == 1 and np.ndim(table.columns[names[0]]) == 2:
        matrix = _matrix(table, names[0])
        return Features(matrix, matrix_names(names[0], matrix.shape[1]), names, skipped)
    matrix = np.column_stack([numeric_column(table, name) for name in names])
    return Features(matrix, names, names, skipped)


def _choose_features(
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
) -> Features:
    """The feature matrix for a model fitted on the columns ``recorded``, selected by name.

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
        matrix = np.column_stack([numeric_column(table, name) for name in recorded])
        used = set(recorded) | set(ignore)
        unused = [name for name in table.names if name not in used]
        return Features(matrix, recorded, recorded, unused=unused)
    array = _source(recorded, _MATRIX_NAME)
    if array is not None and array in table.columns and np.ndim(table.columns[array]) == 2:
        matrix = _matrix(table, array)
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


# -- Parquet datasets (directories) ---------------------------------------------------------


def natural_key(name: str) -> list[str | int]:
    """Sort key of natural order (``part.2`` before ``part.10``): the key
    ``dask.dataframe.read_parquet`` sorts a dataset's files by, repeated here so that reading a
    dataset into memory needs no dask and still gives dask's row order."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class DatasetFile:
    """One file of a dataset: its path and its number of rows (from the footer)."""

    path: str
    rows: int


@dataclass(frozen=True)
class Dataset:
    """A Parquet dataset directory known by its footers only: files in row order, the columns
    (schema order) and the numpy dtype kind each column becomes when read (as in a single
    file: ``"f"``, ``"i"``, ``"b"`` ... are numbers, ``"O"`` strings or other objects)."""

    path: str
    files: tuple[DatasetFile, ...]
    names: list[str]
    kinds: dict[str, str]
    types: dict[str, str]

    @property
    def n_rows(self) -> int:
        return sum(file.rows for file in self.files)

    def parts(self) -> tuple[tuple[int, str], ...]:
        """(first row, path) of each file, as :attr:`Table.parts`."""
        starts, start = [], 0
        for file in self.files:
            starts.append((start, file.path))
            start += file.rows
        return tuple(starts)

    def column(self, name: str, option: str | None = None) -> str:
        """``name`` if the dataset has that column; else a usage error naming ``option``."""
        if name not in self.kinds:
            hint = f" (set {option})" if option else ""
            raise TableUsageError(
                f"{self.path} has no column {name!r}{hint}; it has: " + ", ".join(self.names)
            )
        return name


def is_dataset(path: str | Path) -> bool:
    """Whether ``path`` names a Parquet dataset (a directory) rather than one data file."""
    return Path(path).is_dir()


def _dataset_files(directory: Path) -> list[Path]:
    """The files of a dataset directory in row order; anything else in it is an error."""
    files = []
    for entry in directory.iterdir():
        if entry.name.startswith(DATASET_SKIPPED_PREFIXES):
            continue
        if entry.is_dir():
            raise TableUsageError(
                f"{directory} holds a subdirectory, {entry.name!r}: a Parquet dataset here is "
                "one flat directory of Parquet files (partitioned/nested datasets are not read)"
            )
        files.append(entry)
    if not files:
        raise TableUsageError(
            f"{directory} holds no Parquet files (names starting with . or _ are skipped)"
        )
    return sorted(files, key=lambda file: natural_key(file.name))


def _kind(arrow_type: Any) -> str:
    """The numpy dtype kind a column of ``arrow_type`` becomes, by the very conversion
    :func:`_read_parquet` applies (on an empty array, so no data is read)."""
    import pyarrow as pa

    return pa.array([], type=arrow_type).to_numpy(zero_copy_only=False).dtype.kind


def open_dataset(path: str | Path) -> Dataset:
    """Check a Parquet dataset directory from its files' footers (no row is read): at least
    one file, every file a readable Parquet file, all with the same columns and types."""
    pq = _pyarrow_parquet()
    directory = Path(path)
    if not directory.is_dir():
        raise TableUsageError(f"{str(path)!r} is not a directory")
    files, first, first_path, shown = [], None, None, {}
    for file in _dataset_files(directory):
        try:
            meta = pq.read_metadata(file)
            schema, rows = meta.schema.to_arrow_schema(), meta.num_rows
        except Exception as err:  # pyarrow's ArrowInvalid/OSError family
            raise TableUsageError(
                f"{file} is not a readable Parquet file ({one_line(err)}); a dataset directory "
                "holds only Parquet files (names starting with . or _ are skipped)"
            ) from None
        fields = [(field.name, _plain_type(field.type)) for field in schema]
        if first is None:
            first, first_path = fields, file
            shown = {field.name: str(field.type) for field in schema}
        elif fields != first:
            raise TableUsageError(
                f"{file} does not have the columns of {first_path.name}: "
                f"{_schema_difference(first, fields, first_path.name)}; every file of a "
                "dataset needs the same columns, in the same order, of the same types"
            )
        files.append(DatasetFile(str(file), int(rows)))
    assert first is not None  # _dataset_files refuses an empty directory
    names = [name for name, _ in first]
    if len(set(names)) != len(names):
        raise TableUsageError(f"{first_path}: a column name appears twice: {names}")
    return Dataset(
        str(directory),
        tuple(files),
        names,
        {name: _kind(arrow_type) for name, arrow_type in first},
        shown,
    )


def _plain_type(arrow_type: Any) -> Any:
    """``arrow_type`` with the string and binary layouts folded into one each: writers pick
    ``string`` or ``large_string`` (pandas, pyarrow and dask versions differ) for the same
    values, which read as the same Python strings."""
    import pyarrow as pa

    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.large_string()
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.large_binary()
    return arrow_type


def _schema_difference(
    first: list[tuple[str, Any]], other: list[tuple[str, Any]], first_name: str
) -> str:
    """What differs between two files' (name, type) lists, in a few words."""
    mine, theirs = dict(first), dict(other)
    missing = [name for name in mine if name not in theirs]
    extra = [name for name in theirs if name not in mine]
    if missing or extra:
        parts = [f"it lacks {', '.join(missing)}"] if missing else []
        parts += [f"it adds {', '.join(extra)}"] if extra else []
        return "; ".join(parts)
    changed = [name for name in mine if str(mine[name]) != str(theirs[name])]
    if changed:
        name = changed[0]
        return f"column {name!r} is {theirs[name]} there, {mine[name]} in {first_name}"
    return "the same columns in another order"


def one_line(text: Any) -> str:
    """An error text on one line (pyarrow's messages carry newlines)."""
    return " ".join(str(text).split())


def read_dataset(
    dataset: Dataset,
    columns: Sequence[str] | None = None,
    *,
    track: Callable[[Sequence[DatasetFile]], Iterable[DatasetFile]] | None = None,
) -> Table:
    """The dataset's rows in memory as one :class:`Table` (only ``columns``, if given), each
    column converted as one Parquet file's: what one file holding these rows in this order
    reads as. Errors name the file and its row (:attr:`Table.parts`). ``track`` wraps the
    file list (a progress bar)."""
    import pyarrow as pa

    pq = _pyarrow_parquet()
    wanted = list(dict.fromkeys(dataset.names if columns is None else columns))
    pieces = []
    for file in dataset.files if track is None else track(dataset.files):
        try:
            piece = pq.read_table(file.path, columns=wanted)
            plain = pa.schema([(f.name, _plain_type(f.type)) for f in piece.schema])
            pieces.append(piece.cast(plain))
        except Exception as err:
            raise TableError(
                f"{file.path} is not a readable Parquet file ({one_line(err)})"
            ) from None
    table = pa.concat_tables(pieces)
    return Table(dataset.path, "parquet", _arrow_columns(table, wanted), parts=dataset.parts())


def dataset_features(
    dataset: Dataset, *, columns: Sequence[str] | None = None, exclude: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """(feature columns, skipped text columns) of a dataset, chosen from its schema by the
    rule of :func:`select_features` for one Parquet file. A named column that cannot hold
    numbers (strings, dates, ...) is refused here, before any row is read."""

    def is_text(name: str) -> bool:
        return dataset.kinds[name] not in "biuf"

    names, skipped = _choose_features(dataset.path, dataset.names, is_text, columns, exclude)
    for name in names:
        dataset.column(name, "--feature-cols")
        if dataset.kinds[name] not in "biuf":
            raise TableError(
                f"{dataset.path}: column {name!r} holds {dataset.types[name]} values, not "
                "numbers; leave it out of --feature-cols"
            )
    return names, skipped


def feature_block(frame: Any, path: str, names: Sequence[str]) -> np.ndarray:
    """One file's feature matrix from the pandas frame dask read it into, converted and
    checked exactly as :func:`select_features` does one Parquet file's columns (a bad cell is
    an error naming this file, its row and column). Runs on the dask workers."""
    import pyarrow as pa

    table = pa.table({name: pa.array(frame[name]) for name in names})
    file = Table(path, "parquet", _arrow_columns(table, names))
    return np.column_stack([numeric_column(file, name) for name in names])


def dataset_feature_array(dataset: Dataset, names: Sequence[str]) -> Any:
    """The features ``names`` of every row as a lazy float64 dask array, one chunk per file.

    Each file is opened with ``dask.dataframe.read_parquet`` (one partition per file, row
    counts from the footers, so the chunk sizes are known without reading a row) and converted
    by :func:`feature_block` where dask runs it: on the workers of a dask.distributed cluster.
    """
    import dask
    import dask.array as da
    import dask.dataframe as dd

    names = list(names)
    blocks = []
    for file in dataset.files:
        if file.rows == 0:
            continue
        frame = dd.read_parquet(
            file.path, columns=names, index=False, split_row_groups=False, dtype_backend="pyarrow"
        )
        parts = frame.to_delayed()
        if len(parts) != 1:  # pragma: no cover - split_row_groups=False reads a file whole
            raise TableError(f"{file.path}: dask read it as {len(parts)} partitions, not one")
        block = dask.delayed(feature_block, pure=True)(parts[0], file.path, names)
        blocks.append(da.from_delayed(block, shape=(file.rows, len(names)), dtype=np.float64))
    if not blocks:
        raise TableError(f"{dataset.path} holds no rows")
    return da.concatenate(blocks, axis=0)
