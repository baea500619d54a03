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

A snapshot read from a file or a store may have been edited (a checksum does not stop whoever
can recompute it), so a restore checks it whole first (``forgetting.engine.validation``) and
refuses one that is not a model the library could have written with a :class:`SnapshotError`;
:func:`memory_budget` is what a restore may count on allocating.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np


class SnapshotError(ValueError):
    """A snapshot that is not a consistent model (counts, shapes, ranges or sizes disagree).
    The message names the field; model files turn it into ``ModelFileError``, stores into
    ``StoreCorrupt``."""


def memory_budget() -> int:
    """Bytes this process may allocate at most: physical memory, or less where a resource
    limit (``ulimit -v`` / ``-d``) says so. A restore whose least need exceeds it is refused in
    one line before allocating, instead of dying of a MemoryError or the OOM killer."""
    budget = 1 << 62
    try:
        budget = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): no physical bound
        pass
    try:
        import resource  # POSIX only
    except ImportError:
        return int(budget)
    for limit in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            budget = min(budget, soft)
    return int(budget)


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
