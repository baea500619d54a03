"""The vocabulary of user table files: the :class:`Table` a file is read into, the
:class:`Features` selected from it, the default column names, and the two errors.

Kept apart from the readers and parsers (and free of numpy) so that the command line can build
its help, and catch these errors, without importing any of them. The rules these types serve
are written down in :mod:`forgetting.io.tables`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: How text tokens become ids (see :mod:`forgetting.io.tables`).
ID_TYPES = ("auto", "int", "str")

#: Default id / label column names per file kind.
DEFAULT_ID_COLUMN = {"csv": "id", "parquet": "id", "npz": "ids"}
DEFAULT_LABEL_COLUMN = {"csv": "label", "parquet": "label", "npz": "y"}
#: The NPZ array used as the feature matrix when no columns are named.
DEFAULT_NPZ_FEATURES = "X"

#: The most memory the arrays of one data file (NPZ, Parquet, a Parquet dataset read into
#: memory) may declare, checked from the file's own headers before anything is allocated: a
#: 500-byte NPZ can declare terabytes, and a deflate bomb of 8 MB truly holds 7.45 GiB. Raise
#: it per call (``max_bytes=``) or per command (``--max-data-size``) on a machine with the
#: memory for a larger file.
DEFAULT_MAX_TABLE_BYTES = 4 << 30

_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]?)(?:i?b)?", re.IGNORECASE)
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def parse_size(text: str) -> int:
    """Bytes from ``123``, ``512M``, ``4G``, ``1.5T`` (K, M, G, T, P: powers of 1024; an
    optional ``B``/``iB`` after them)."""
    match = _SIZE.fullmatch(str(text).strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not a size: give bytes, or a number with K, M, G or T (powers of "
            "1024), e.g. 8G"
        )
    number, unit = match.groups()
    size = int(float(number) * 1024 ** "bkmgtp".index(unit.lower() or "b"))
    if size < 1:
        raise ValueError(f"{text!r}: a size must be at least one byte")
    return size


def format_size(size: int) -> str:
    """A byte count for a message: ``512 B``, ``2.00 MiB``, ``7.45 GiB``."""
    if size < 1024:
        return f"{size} B"
    power = 1
    while power + 1 < len(_UNITS) and size >= 1024 ** (power + 1):
        power += 1
    return f"{size / 1024**power:.2f} {_UNITS[power]}"


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
