"""Plain-data snapshots of a fitted model: what persistence and the durable store write.

Each layer owns its state and hands it out only through these: the row store produces a
:class:`RowsSnapshot`, the engine an :class:`EngineSnapshot`, the estimator a
:class:`ModelSnapshot`; ``restore`` on each layer is the one way back. A snapshot holds only
what cannot be recomputed — ids, features, labels, pool flags, and per valid instance its
schema and the rows' codes and integer residuals. Everything derived (keyed draws, row hashes,
digests, accumulators, materialized content) is recomputed on restore, so a stored snapshot
cannot smuggle in an inconsistent derived state: restoring recomputes it from the primary
data and the state digest then says whether it is the model that was saved.

The membership key is not part of a snapshot: a derived key is recomputed from
``random_state``; a user's secret key must be supplied again on restore (it is not stored
beside the data it protects). ``key_fingerprint`` lets a restore check it got the right key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RowsSnapshot:
    """The live rows, in row-store order."""

    ids: list
    """External ids (ints or strings, canonical: see ``schema.membership.canonical_id``)."""
    X: np.ndarray | None
    """(n, d) float32 features as stored (after validation); None in a snapshot taken
    without them (``RowStore.snapshot(features=False)``)."""
    targets: np.ndarray
    """Classification: int64 class index, -1 = unlabeled. Regression: float64, NaN = unlabeled."""
    in_pool: np.ndarray
    """(n,) bool: the row's input is in label mode's codebook training pool."""


@dataclass(frozen=True)
class InstanceSnapshot:
    """One valid instance: its frozen schema and the contributions of the labeled rows."""

    schema: Any
    """The :class:`forgetting.schema.Schema` (plain arrays and fitted estimators)."""
    codes: np.ndarray
    """(n_labeled, n_groups) cell codes of the labeled rows, in row order."""
    residuals: np.ndarray
    """(n_labeled, k) int64 fixed-point residuals of the labeled rows, in row order."""


@dataclass(frozen=True)
class EngineSnapshot:
    rows: RowsSnapshot
    instances: list[InstanceSnapshot | None]
    """One entry per instance; None = the instance is rebuilt on restore."""
    privacy: dict[str, Any] | None = None
    """mode="dp": the privacy ledger (``PrivacyLedger.to_dict()``: plain JSON types)."""


@dataclass(frozen=True)
class ModelSnapshot:
    estimator: str
    """Class name: "QSSClassifier" or "QSSRegressor"."""
    params: dict[str, Any]
    """``get_params(deep=False)`` without ``secret_key``."""
    fitted: dict[str, Any]
    """Fitted attributes other than the engine: ``n_features_in_``, ``classes_`` (classifier),
    ``feature_names_in_`` when fitted on a DataFrame."""
    key_fingerprint: str
    """Public fingerprint of the membership key (``schema.membership.key_fingerprint``)."""
    key_derived: bool
    """True if the key was derived from ``random_state`` (not secret)."""
    engine: EngineSnapshot
