"""scikit-learn estimators that forget, one for each model family and task, on one base.

* :class:`QSSClassifier`, :class:`QSSRegressor` (:mod:`.qss`): quantized sufficient
  statistics — embeddings, raw pixels, label mode, ``mode="dp"``;
* :class:`ExactForestClassifier`, :class:`ExactForestRegressor` (:mod:`.forest`): the exact
  forest — tables (numeric and categorical columns, missing values).

Every one is an :class:`~.base.UnlearningEstimator`: the same ids, validation, receipts,
``partial_fit``, snapshots and files; a family adds its parameters and its engine.
"""

from __future__ import annotations

from ..snapshots import ModelSnapshot
from .base import UnlearningEstimator
from .fingerprints import FAMILIES, defaults_fingerprints
from .forest import ExactForestClassifier, ExactForestRegressor
from .qss import QSSClassifier, QSSRegressor, RowSource, defaults_fingerprint

__all__ = [
    "ExactForestClassifier",
    "ExactForestRegressor",
    "QSSClassifier",
    "QSSRegressor",
    "RowSource",
    "UnlearningEstimator",
    "FAMILIES",
    "defaults_fingerprint",
    "defaults_fingerprints",
    "estimator_classes",
    "restore_estimator",
]


def estimator_classes() -> dict[str, type]:
    """Every estimator class a snapshot, file or store may name, by class name."""
    return {
        cls.__name__: cls
        for cls in (QSSClassifier, QSSRegressor, ExactForestClassifier, ExactForestRegressor)
    }


def restore_estimator(snapshot: ModelSnapshot, *, secret_key: bytes | str | None = None):
    """The estimator a snapshot holds (by its recorded class name), rebuilt through that
    class's :meth:`~.base.UnlearningEstimator.from_snapshot`."""
    classes = estimator_classes()
    if snapshot.estimator not in classes:
        raise ValueError(f"unknown estimator {snapshot.estimator!r} in snapshot")
    return classes[snapshot.estimator].from_snapshot(snapshot, secret_key=secret_key)
