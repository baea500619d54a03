"""What "labeled" means, defined once for the row store, instances, snapshots and the store.

Internally a classification target is a class *index* (int64) and a regression target a
float64. A row without a label — label mode's unlabeled rows, or a row whose label was
forgotten — holds :data:`UNLABELED` (-1) as its class index, or NaN as its regression target.
The marker is an index, never a class value, so no user label (the string ``"-1"``, the
integer -1) can be mistaken for it once encoded.
"""

from __future__ import annotations

import numpy as np

UNLABELED = -1
"""Class index of a row without a label; regression uses NaN."""


def is_labeled(targets: np.ndarray) -> np.ndarray:
    """Mask of labeled rows for internal targets (class indices or float targets)."""
    targets = np.asarray(targets)
    if targets.dtype.kind == "f":
        return ~np.isnan(targets)
    return targets != UNLABELED


def unlabeled_value(dtype: np.dtype) -> float | int:
    """The marker to store for a row without a label, for targets of ``dtype``."""
    return np.nan if np.dtype(dtype).kind == "f" else UNLABELED


def user_unlabeled(y: np.ndarray) -> np.ndarray:
    """Label mode's marker in *user* labels passed to ``fit``: -1 (numeric labels only; a
    string label is always a label)."""
    if y.dtype.kind in "iuf":
        return y == -1
    return np.zeros(len(y), dtype=bool)
