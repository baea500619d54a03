"""Parquet datasets: a directory of Parquet files read as the one file holding their rows.

A dataset means what one Parquet file holding its files' rows in natural name order means
(the rules are in :mod:`forgetting.io.tables`). :func:`open_dataset` checks the files from
their footers only; :func:`read_dataset` reads rows into memory with pyarrow (no dask);
:func:`dataset_feature_array` gives the features as a lazy dask array whose chunks
:func:`feature_block` converts on the workers, exactly as one file's columns are converted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .table_columns import choose_features, numeric_column
from .table_files import arrow_columns, check_budget, pyarrow_parquet
from .table_types import DEFAULT_MAX_TABLE_BYTES, Table, TableError, TableUsageError

#: File names a dataset directory may hold besides its Parquet files (markers, checksums,
#: dask's ``_metadata``): skipped, as pyarrow and dask skip them.
DATASET_SKIPPED_PREFIXES = (".", "_")


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
    :func:`~.table_files.arrow_columns` applies to a file (on an empty array, so no data is
    read)."""
    import pyarrow as pa

    return pa.array([], type=arrow_type).to_numpy(zero_copy_only=False).dtype.kind


def open_dataset(path: str | Path) -> Dataset:
    """Check a Parquet dataset directory from its files' footers (no row is read): at least
    one file, every file a readable Parquet file, all with the same columns and types."""
    pq = pyarrow_parquet()
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
    max_bytes: int = DEFAULT_MAX_TABLE_BYTES,
) -> Table:
    """The dataset's rows in memory as one :class:`Table` (only ``columns``, if given), each
    column converted as one Parquet file's: what one file holding these rows in this order
    reads as. Errors name the file and its row (:attr:`Table.parts`). ``track`` wraps the
    file list (a progress bar). Rows times columns, at 8 bytes a value, beyond ``max_bytes``
    are refused from the footers, before any row is read."""
    import pyarrow as pa

    pq = pyarrow_parquet()
    wanted = list(dict.fromkeys(dataset.names if columns is None else columns))
    check_budget(
        dataset.path,
        f"its footers declare {dataset.n_rows} rows of the {len(wanted)} columns read",
        dataset.n_rows * len(wanted) * 8,
        max_bytes,
    )
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
    return Table(dataset.path, "parquet", arrow_columns(table, wanted), parts=dataset.parts())


def dataset_features(
    dataset: Dataset, *, columns: Sequence[str] | None = None, exclude: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """(feature columns, skipped text columns) of a dataset, chosen from its schema by the
    rule of :func:`~.table_columns.select_features` for one Parquet file. A named column that
    cannot hold numbers (strings, dates, ...) is refused here, before any row is read."""

    def is_text(name: str) -> bool:
        return dataset.kinds[name] not in "biuf"

    names, skipped = choose_features(dataset.path, dataset.names, is_text, columns, exclude)
    for name in names:
        dataset.column(name, "--feature-cols")
        if dataset.kinds[name] not in "biuf":
            raise TableError(
                f"{dataset.path}: column {name!r} holds {dataset.types[name]} values, not "
                "numbers; leave it out of --feature-cols"
            )
    return names, skipped


def feature_block(frame: Any, path: str, names: Sequence[str], missing: bool = False) -> np.ndarray:
    """One file's feature matrix from the pandas frame dask read it into, converted and
    checked exactly as :func:`~.table_columns.select_features` does one Parquet file's columns
    (a bad cell is an error naming this file, its row and column; with ``missing`` an empty
    cell is a missing value, NaN). Runs on the dask workers."""
    import pyarrow as pa

    table = pa.table({name: pa.array(frame[name]) for name in names})
    file = Table(path, "parquet", arrow_columns(table, names))
    return np.column_stack([numeric_column(file, name, missing=missing) for name in names])


def dataset_feature_array(dataset: Dataset, names: Sequence[str], missing: bool = False) -> Any:
    """The features ``names`` of every row as a lazy float64 dask array, one chunk per file
    (``missing``: empty cells are missing values, NaN, for the exact forests).

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
        block = dask.delayed(feature_block, pure=True)(parts[0], file.path, names, missing)
        blocks.append(da.from_delayed(block, shape=(file.rows, len(names)), dtype=np.float64))
    if not blocks:
        raise TableError(f"{dataset.path} holds no rows")
    return da.concatenate(blocks, axis=0)
