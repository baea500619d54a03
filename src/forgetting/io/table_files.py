"""Reading one user table file into a :class:`~forgetting.io.table_types.Table`: CSV/TSV
(with a header row), Parquet (with pyarrow) or NPZ (``allow_pickle=False``: no code runs from
the bytes read), by its suffix.

Every Parquet reader of the package converts columns through :func:`arrow_columns`, so a file,
a dataset read into memory and a dataset's chunks on dask workers read the same values.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .table_types import Table, TableError, TableUsageError


def read_file(path: str | Path) -> Table:
    """Read a CSV/TSV (with a header row), Parquet or NPZ file, by its suffix."""
    file = Path(path)
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


def pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TableError(
            "reading Parquet needs pyarrow: pip install pyarrow (or convert the file to CSV)"
        ) from None
    return pq


def _read_parquet(file: Path) -> Table:
    pq = pyarrow_parquet()
    try:
        table = pq.read_table(file)
    except Exception as err:  # pyarrow raises its own ArrowInvalid/OSError family
        raise TableError(f"{file} is not a readable Parquet file ({err})") from None
    return Table(str(file), "parquet", arrow_columns(table))


def arrow_columns(table: Any, names: Iterable[str] | None = None) -> dict[str, Any]:
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
