"""Between JSON and numpy: input checks before the model is touched, and plain JSON out.

Why the checks here as well as in the model: each one raises before anything changes, with a
message that names the offending row, so every 4xx leaves the model exactly as it was.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import HTTPException, status

from .errors import unprocessable


def check_batch(n: int, what: str, limit: int) -> None:
    """A 413 when one request carries more than ``limit`` rows or ids."""
    if n > limit:
        raise HTTPException(
            status_code=status.HTTP_413_CONTENT_TOO_LARGE,
            detail=f"{n} {what} in one request; the limit is {limit}: split the request",
        )


def check_matrix(X: list[list[float]], n_features: int) -> np.ndarray:
    """The rows as a float64 matrix, or a 422 naming the first row of the wrong width."""
    for i, row in enumerate(X):
        if len(row) != n_features:
            raise unprocessable(
                f"X[{i}] has {len(row)} values; the model expects {n_features} features per row"
            )
    return np.asarray(X, dtype=np.float64).reshape(len(X), n_features)


def jsonable(values: Any) -> list:
    """numpy array -> plain Python list (numpy scalars are not JSON serializable, and an
    object array's ``tolist`` keeps them as they are)."""
    return finite(np.asarray(values).tolist())


def labels_from_proba(
    proba: np.ndarray, classes: list | None, predict: Callable[[np.ndarray], Any]
) -> np.ndarray:
    """Predicted classes from probabilities, without a second model call where that is exact.

    ``predict`` is the argmax of the model's outputs and ``predict_proba`` a per-row
    non-decreasing map of them (clip at 0, divide by the row total). If a row's largest
    probability is attained by one class only, that class is also the strict argmax of the
    outputs (a larger-or-equal output elsewhere would give a larger-or-equal probability), so
    the label is exactly ``predict``'s. Rows with a tie or a non-finite value (rare) are
    asked to ``predict(rows)`` itself.
    """
    if classes is None or proba.ndim != 2 or proba.shape[1] != len(classes):
        return np.asarray(predict(np.arange(len(proba))))
    top = np.argmax(proba, axis=1)
    best = proba[np.arange(len(proba)), top]
    unique = np.isfinite(best) & ((proba == best[:, None]).sum(axis=1) == 1)
    labels = np.asarray(classes)[top]
    if not np.all(unique):
        rows = np.flatnonzero(~unique)
        labels = labels.astype(object)
        labels[rows] = list(np.asarray(predict(rows)))
    return labels


def finite(value: Any) -> Any:
    """Replace non-finite floats (not representable in JSON) with None, recursively."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
