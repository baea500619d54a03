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

**Memory.** NPZ and Parquet files declare the size of their arrays, and readers allocate what
is declared: a crafted file of a few hundred bytes can declare terabytes, a deflate bomb of
8 MB truly holds gigabytes. So their declarations are checked before anything is allocated:
each NPZ member's ``.npy`` header must declare exactly the bytes its ZIP entry holds, and the
arrays of one file (or of a dataset read into memory) may declare at most ``max_bytes``
(:data:`DEFAULT_MAX_TABLE_BYTES`, 4 GiB, unless the caller or ``--max-data-size`` says more).

**Errors.** :class:`TableError` (a ``ValueError``) means the data cannot be used as asked;
its subclass :class:`TableUsageError` means the request does not fit the file (no such file,
column or format) and is fixed by changing the command.

Nothing here runs code from the bytes it reads: NPZ files are loaded with
``allow_pickle=False``.

Where each part lives: :mod:`.table_types` (the :class:`Table`, :class:`Features`, defaults and
errors; no numpy), :mod:`.table_files` (one file), :mod:`.table_ids` (ids and labels),
:mod:`.table_columns` (numeric columns and feature selection), :mod:`.parquet_dataset`
(dataset directories). This module states the rules and is where callers take them from.
"""

from __future__ import annotations

from pathlib import Path

from .parquet_dataset import (
    DATASET_SKIPPED_PREFIXES,
    Dataset,
    DatasetFile,
    dataset_feature_array,
    dataset_features,
    feature_block,
    is_dataset,
    natural_key,
    open_dataset,
    read_dataset,
)
from .table_columns import (
    Embedder,
    choose_features,
    embedding_names,
    match_features,
    matrix_names,
    numeric_column,
    raw_frame,
    select_features,
    text_column,
)
from .table_files import check_rows, read_file
from .table_ids import id_column, label_column, parse_id, parse_ids, read_id_lines, split_ids
from .table_types import (
    DEFAULT_ID_COLUMN,
    DEFAULT_LABEL_COLUMN,
    DEFAULT_MAX_TABLE_BYTES,
    DEFAULT_NPZ_FEATURES,
    ID_TYPES,
    Features,
    Table,
    TableError,
    TableUsageError,
    format_size,
    parse_size,
)

__all__ = [
    "DATASET_SKIPPED_PREFIXES",
    "DEFAULT_ID_COLUMN",
    "DEFAULT_LABEL_COLUMN",
    "DEFAULT_MAX_TABLE_BYTES",
    "DEFAULT_NPZ_FEATURES",
    "ID_TYPES",
    "Dataset",
    "DatasetFile",
    "Embedder",
    "Features",
    "Table",
    "TableError",
    "TableUsageError",
    "check_rows",
    "choose_features",
    "dataset_feature_array",
    "dataset_features",
    "embedding_names",
    "feature_block",
    "format_size",
    "id_column",
    "is_dataset",
    "label_column",
    "match_features",
    "matrix_names",
    "natural_key",
    "numeric_column",
    "open_dataset",
    "parse_id",
    "parse_ids",
    "parse_size",
    "raw_frame",
    "read_dataset",
    "read_file",
    "read_id_lines",
    "read_table",
    "select_features",
    "split_ids",
    "text_column",
]


def read_table(path: str | Path, *, max_bytes: int = DEFAULT_MAX_TABLE_BYTES) -> Table:
    """Read a CSV/TSV (with a header row), Parquet or NPZ file, by its suffix, or a Parquet
    dataset directory (into memory: see :func:`read_dataset`). Arrays declaring more than
    ``max_bytes`` are refused before they are read (see **Memory** above)."""
    if Path(path).is_dir():
        return read_dataset(open_dataset(path), max_bytes=max_bytes)
    return read_file(path, max_bytes=max_bytes)
