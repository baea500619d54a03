"""UCI Statlog Shuttle (7 classes) and Landsat Satellite (6 classes) from Debian's
``r-cran-mlbench``, read without R (the decoder of :mod:`.letter`).

Why these sets: the accuracy anchor of the benchmark (a full-data HistGradientBoosting) is
judged on every tabular set, and these two add many-class tables to UCI Letter's 26 classes:
Shuttle (58 000 rows, 9 numeric sensor readings, k = 7, one class holding 78 % of the rows and
two with a handful) and Satellite (6 435 rows, 36 multispectral pixel values of a 3×3
neighbourhood, k = 6 land covers). Both come in the package that already brings Letter, so
they cost no extra install.

Splits: the UCI documentation's own. mlbench stores each set's training file followed by its
test file, in the files' order; the class counts of the first 43 500 (Shuttle) / 4 435
(Satellite) rows equal those published for UCI's ``shuttle.trn`` / ``sat.trn`` (checked by the
tests), so those rows are the train split and the rest the test split.

Features: the numerics standardized with the train split's mean and population std (computed
before any ``n_train`` subsampling). The source file's SHA-256 is checked: a different mlbench
release fails loudly instead of silently changing the data.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._tables import check_sha256
from .base import (
    Dataset,
    DatasetUnavailableError,
    as_features,
    standardization,
    subsample_indices,
)
from .letter import LETTER_INSTALL, _RObject, read_rda

__all__ = [
    "MLBENCH_INSTALL",
    "SATELLITE",
    "SHUTTLE",
    "MlbenchTable",
    "load_satellite",
    "load_shuttle",
    "locate_mlbench",
]

MLBENCH_INSTALL = LETTER_INSTALL
_ENV = "FORGETTING_MLBENCH_DIR"
_DEFAULT_DIR = Path("/usr/lib/R/site-library/mlbench/data")


@dataclass(frozen=True)
class MlbenchTable:
    """One all-numeric classification table of mlbench and its documented split."""

    name: str
    title: str
    file: str
    sha256: str
    label: str
    rows: int
    n_train: int
    n_features: int
    classes: tuple[str, ...]
    description: str


SHUTTLE = MlbenchTable(
    name="shuttle",
    title="UCI Statlog Shuttle",
    file="Shuttle.rda",
    sha256="5b1db218b76a47c83f575f1ff38d7a7d36e569b0e27d8bf4aa92eae6c0bcb826",
    label="Class",
    rows=58000,
    n_train=43500,
    n_features=9,
    classes=("Rad.Flow", "Fpv.Close", "Fpv.Open", "High", "Bypass", "Bpv.Close", "Bpv.Open"),
    description="9 numeric sensor readings of the space shuttle's radiator (V1..V9)",
)
SATELLITE = MlbenchTable(
    name="satellite",
    title="UCI Statlog Landsat Satellite",
    file="Satellite.rda",
    sha256="29f8cf9bb1bc51b769d694c9caf740fd1c36ed6a7c87603edf5985962e330f64",
    label="classes",
    rows=6435,
    n_train=4435,
    n_features=36,
    classes=(
        "red soil",
        "cotton crop",
        "grey soil",
        "damp grey soil",
        "vegetation stubble",
        "very damp grey soil",
    ),
    description="36 multispectral values (4 bands × a 3×3 pixel neighbourhood, 0..255)",
)


def locate_mlbench(table: MlbenchTable) -> Path:
    """Path of the table's ``.rda`` (``$FORGETTING_MLBENCH_DIR`` overrides the Debian
    location, as for UCI Letter)."""
    override = os.environ.get(_ENV)
    path = (Path(override) if override else _DEFAULT_DIR) / table.file
    if not path.is_file():
        raise DatasetUnavailableError(
            f"{table.title} is not available: {path} is missing. Install Debian's mlbench "
            f"package with: {MLBENCH_INSTALL}  (or set {_ENV} to a directory holding "
            f"{table.file})"
        )
    return path


def _arrays(table: MlbenchTable, path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    frame = read_rda(path).get(path.stem)
    if not isinstance(frame, _RObject) or not isinstance(frame.value, list):
        raise ValueError(f"{path}: {path.stem} is not a data frame")
    columns = dict(zip(frame.attr("names"), frame.value, strict=True))
    label = columns.pop(table.label)
    if tuple(label.attr("levels")) != table.classes:
        raise ValueError(f"{path}: unexpected class levels {label.attr('levels')}")
    y = label.value - 1  # R factors count from 1
    X = np.column_stack([np.asarray(c.value, dtype=np.float64) for c in columns.values()])
    if X.shape != (table.rows, table.n_features) or not np.isfinite(X).all():
        raise ValueError(
            f"{path}: expected {table.rows} finite rows × {table.n_features} features, "
            f"got {X.shape}"
        )
    return list(columns), X, y.astype(np.int64)


def _load(table: MlbenchTable, n_train: int | None, subsample_seed: int) -> Dataset:
    path = locate_mlbench(table)
    check_sha256(path, table.sha256, f"mlbench 2.1-3 {path.stem}", MLBENCH_INSTALL)
    names, X, y = _arrays(table, path)
    train = np.arange(table.n_train)
    test = np.arange(table.n_train, table.rows)
    mean, scale = standardization(X[train])
    idx = subsample_indices(train.shape[0], n_train, subsample_seed)
    if idx is not None:
        train = train[idx]
    raw_train = raw_test = None
    if importlib.util.find_spec("pandas") is not None:  # the raw form is optional here
        import pandas as pd

        raw_train = pd.DataFrame(X[train], columns=names)
        raw_test = pd.DataFrame(X[test], columns=names)
    return Dataset(
        name=table.name,
        task="classification",
        X_train=as_features((X[train] - mean) / scale),
        y_train=y[train],
        X_test=as_features((X[test] - mean) / scale),
        y_test=y[test],
        feature_description=(
            f"{table.n_features} features: {table.description}, standardized with the train "
            "split's mean/std"
        ),
        source=f"Debian r-cran-mlbench (mlbench::{path.stem}, UCI): {path}",
        class_names=table.classes,
        raw_train=raw_train,
        raw_test=raw_test,
    )


def load_shuttle(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """UCI Statlog Shuttle: 9 numerics, 7 classes, the documented 43 500 / 14 500 split.

    Raises:
        DatasetUnavailableError: Debian's ``r-cran-mlbench`` is missing or not the pinned file.
    """
    return _load(SHUTTLE, n_train, subsample_seed)


def load_satellite(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """UCI Statlog Landsat Satellite: 36 numerics, 6 classes, the documented 4 435 / 2 000
    split.

    Raises:
        DatasetUnavailableError: Debian's ``r-cran-mlbench`` is missing or not the pinned file.
    """
    return _load(SATELLITE, n_train, subsample_seed)
