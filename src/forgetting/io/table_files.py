"""Reading one user table file into a :class:`~forgetting.io.table_types.Table`: CSV/TSV
(with a header row), Parquet (with pyarrow) or NPZ (``allow_pickle=False``: no code runs from
the bytes read), by its suffix.

**Declared sizes first.** NPZ and Parquet files say how big their arrays are, and the readers
allocate what they say before reading it: numpy allocates a ``.npy`` member's declared shape,
so a 500-byte NPZ declaring shape (10^11, 5) asks for 3.6 TiB, and a deflate bomb (8 MB of
compressed zeros) really holds 7.45 GiB. So before anything is read, every NPZ member's
``.npy`` header (read alone, a few hundred bytes) must declare exactly the bytes the ZIP
directory says the member holds, and the declared sizes of all members (of a Parquet file:
its rows times its columns, at 8 bytes a value at least) must fit in a memory budget,
:data:`~forgetting.io.table_types.DEFAULT_MAX_TABLE_BYTES` unless the caller gives another.
The ZIP reader never inflates a member past its declared size, so the check bounds what is
decompressed too. A refusal is one :class:`TableError` naming the member and both sizes.

Every Parquet reader of the package converts columns through :func:`arrow_columns`, so a file,
a dataset read into memory and a dataset's chunks on dask workers read the same values.
"""

from __future__ import annotations

import csv
import math
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from .table_types import (
    DEFAULT_MAX_TABLE_BYTES,
    Table,
    TableError,
    TableUsageError,
    format_size,
)

#: The longest ``.npy`` header read (numpy's own default limit).
_MAX_NPY_HEADER = 10_000
#: What reading a damaged ZIP raises (besides ValueError): a bad archive, a bad deflate stream,
#: a truncated file; an encrypted member (RuntimeError), an unknown compression method.
_UNREADABLE_ZIP = (
    zipfile.BadZipFile,
    zlib.error,
    OSError,
    EOFError,
    RuntimeError,
    NotImplementedError,
)
#: The ``.npy`` header reader of each format version (3.0 differs from 2.0 only in allowing
#: UTF-8 field names).
_NPY_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
    (3, 0): np.lib.format.read_array_header_2_0,
}


def read_file(path: str | Path, *, max_bytes: int = DEFAULT_MAX_TABLE_BYTES) -> Table:
    """Read a CSV/TSV (with a header row), Parquet or NPZ file, by its suffix. An NPZ or
    Parquet file whose arrays declare more than ``max_bytes`` is refused before it is read."""
    file = Path(path)
    if not file.is_file():
        what = "is not a regular file" if file.exists() else "does not exist"
        raise TableUsageError(f"data file {str(path)!r} {what}")
    suffix = file.suffix.lower()
    if suffix in (".csv", ".tsv", ".txt"):
        return _read_csv(file, "\t" if suffix == ".tsv" else ",")
    if suffix in (".parquet", ".pq"):
        return _read_parquet(file, max_bytes)
    if suffix == ".npz":
        return _read_npz(file, max_bytes)
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
            'reading Parquet needs pyarrow: pip install "forgetting[parquet]" '
            "(or convert the file to CSV)"
        ) from None
    return pq


def check_budget(file: Any, what: str, size: int, max_bytes: int) -> None:
    """Refuse ``what`` (``size`` bytes, from a file's own declarations) beyond ``max_bytes``."""
    if size > max_bytes:
        raise TableError(
            f"{file}: {what} ({format_size(size)}), more than the {format_size(max_bytes)} "
            "the arrays of a data file may take; if the machine has the memory, raise the limit "
            "with --max-data-size (max_bytes= in Python)"
        )


def _read_parquet(file: Path, max_bytes: int) -> Table:
    pq = pyarrow_parquet()
    try:
        meta = pq.read_metadata(file)
    except Exception as err:  # pyarrow raises its own ArrowInvalid/OSError family
        raise TableError(f"{file} is not a readable Parquet file ({err})") from None
    check_budget(
        file,
        f"its footer declares {meta.num_rows} rows of {meta.num_columns} columns",
        meta.num_rows * meta.num_columns * 8,
        max_bytes,
    )
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


def _read_npz(file: Path, max_bytes: int) -> Table:
    _check_npz(file, max_bytes)
    try:
        with np.load(file, allow_pickle=False) as archive:
            columns = {name: archive[name] for name in archive.files}
    except ValueError as err:
        raise TableError(
            f"{file}: cannot read its arrays ({err}); save them without Python objects"
        ) from None
    except _UNREADABLE_ZIP as err:
        raise TableError(f"{file} is not a readable NPZ file ({err})") from None
    if not any(np.ndim(a) >= 1 for a in columns.values()):
        raise TableUsageError(f"{file} holds no arrays")
    return Table(str(file), "npz", columns)


class _Counted:
    """A readable stream that counts the bytes read through it."""

    def __init__(self, stream: IO[bytes]):
        self.stream, self.count = stream, 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.count += len(data)
        return data


def _check_npz(file: Path, max_bytes: int) -> None:
    """Check an NPZ's declared sizes (module docstring) from its ZIP directory and each
    member's ``.npy`` header, before any array is allocated."""
    try:
        with zipfile.ZipFile(file) as archive:
            total = 0
            for info in archive.infolist():
                if info.is_dir():
                    continue
                what, size = _declared(file, archive, info)
                total += size
                if total > size:
                    what += f", {format_size(total)} with the members before it"
                check_budget(file, what, total, max_bytes)
    except TableError:
        raise
    except (ValueError, *_UNREADABLE_ZIP) as err:  # a bad .npy header is a ValueError
        raise TableError(f"{file} is not a readable NPZ file ({err})") from None


def _declared(file: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[str, int]:
    """(what the member declares, for a message; its bytes in memory): a ``.npy`` member's
    header must account for exactly the bytes the ZIP directory declares for it."""
    with archive.open(info) as stream:
        counted = _Counted(stream)
        if counted.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
            size = info.file_size  # not an array: numpy would read its bytes whole
            return f"member {info.filename!r} declares {format_size(size)}", size
        version = tuple(counted.read(2))
        if version not in _NPY_HEADERS:
            raise TableError(f"{file}: member {info.filename!r} has .npy version {version}")
        shape, _, dtype = _NPY_HEADERS[version](counted, max_header_size=_MAX_NPY_HEADER)
    if dtype.hasobject:  # pickled: its size says nothing, and it is never loaded
        raise TableError(
            f"{file}: cannot read its arrays (member {info.filename!r} holds Python objects, "
            "which are never unpickled); save them without Python objects"
        )
    elements = math.prod(shape)
    size = elements * dtype.itemsize
    what = (
        f"member {info.filename!r} declares a {dtype.str} array of shape {tuple(shape)} "
        f"({format_size(size)})"
    )
    held = info.file_size - counted.count
    if size != held or min(shape, default=0) < 0:
        raise TableError(
            f"{file}: {what} but holds {format_size(max(held, 0))}: the file is damaged or "
            "was crafted; save the arrays again with numpy.savez"
        )
    # An element of a zero-width dtype takes no bytes, but numpy still counts it: one byte
    # each keeps an astronomical shape of them inside the budget's meaning.
    return what, max(size, elements)


def check_rows(table: Table, **named: Sequence | np.ndarray | None) -> int:
    """The common row count of the selected ids/labels/features; differing counts (only
    possible between NPZ arrays) are an error naming each."""
    counts = {name: len(v) for name, v in named.items() if v is not None}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name} {n}" for name, n in counts.items())
        raise TableError(f"{table.path}: the selected arrays differ in length: {listed}")
    return next(iter(counts.values()), 0)
