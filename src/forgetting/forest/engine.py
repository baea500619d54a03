"""ForestEngine: the exact forest behind the engine interface every estimator talks to.

Why: the estimators share one base (:class:`forgetting.estimators.base.UnlearningEstimator`),
which holds a family's state as ``engine_`` and speaks to it through one interface — fit,
forget and insert returning receipts, id lookups, the state digest, the keyed receipt hash,
snapshots, the lock, rebuilds. :class:`~.instances.ForestInstances` keeps the forest's
instances and their background rebuilds; this class adds what that interface asks of it, so
that a forest is fitted, forgotten, saved and restored by the code that serves QSS.

A forest's snapshot is its rows (ids, float32 features with NaN for missing values, class
indices or float targets) and no instance state: each instance is a pure function of the
rows, the configuration and the key, so every instance is grown again on restore — as an
:class:`~forgetting.snapshots.EngineSnapshot` whose instances are all None ("rebuilt on
restore") says.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np

from .. import _clock as clock
from ..receipts import Receipt
from ..schema.membership import (
    canonical_id,
    id_bytes,
    key_fingerprint,
    receipt_hash,
    receipt_hashes,
)
from ..snapshots import EngineSnapshot, RowsSnapshot
from .core import ForestConfig
from .instances import ForestInstances


class ForestEngine(ForestInstances):
    """``n_instances`` exact forests over the same rows (:class:`ForestInstances`) with the
    engine interface: changes return receipts; snapshots hold the rows."""

    def __init__(
        self,
        config: ForestConfig,
        key: bytes,
        n_features: int,
        n_classes: int | None,
        n_instances: int = 1,
    ):
        super().__init__(config, key, n_features, n_classes, n_instances)
        self._key = key

    # -- changes -----------------------------------------------------------------------------
    def forget(self, ids: list, id_raw: list, erase_inputs: bool = False) -> Receipt:  # type: ignore[override]
        """Remove rows by id; KeyError (naming nothing) for an unknown id and ValueError for
        a regression left with fewer than 2 rows, before anything changes."""
        started = clock.start()
        with self._cond:
            if self.unknown_ids(ids):
                raise KeyError("unknown ids")
            if self.regression and self.n_rows - len(ids) < 2:
                raise ValueError("forgetting these rows would leave fewer than 2; refit instead")
            hit, background = super().forget(ids)
            return self.receipt("forget", "instance", id_raw, hit, started, background)

    def insert(self, ids: list, id_raw: list, X: np.ndarray, targets: np.ndarray) -> Receipt:  # type: ignore[override]
        """Add rows (ids all new)."""
        started = clock.start()
        with self._cond:
            hit, background = super().insert(ids, id_raw, X, targets)
            return self.receipt("insert", "instance", id_raw, hit, started, background)

    def receipt(
        self,
        operation: str,
        scope: str,
        id_raw: Sequence[bytes],
        hit: Sequence[int],
        started: float,
        background: bool | None = None,
    ) -> Receipt:
        """The receipt of a change that hit the D° of the instances ``hit``; ``background``:
        whether they rebuild in the background (None: they do when there are any), else they
        were refitted in the call."""
        return Receipt(
            operation=operation,
            scope=scope,
            n_rows=len(id_raw),
            id_hashes=tuple(receipt_hashes(self._key, list(id_raw))),
            instances_hit=tuple(hit),
            rebuild_started=bool(hit) if background is None else bool(background and hit),
            state_digest=self.state_digest(),
            timestamp=datetime.now(UTC).isoformat(timespec="microseconds"),
            seconds=clock.elapsed(started),
            effective_rho=self.effective_rho(),
        )

    def retire(self) -> None:
        """Abandon pending rebuilds (the estimator was refitted)."""
        self.discard_rebuilds()

    def continue_history(self, previous: Any, forgotten: Sequence = (), inserted: Sequence = ()):
        """Nothing to take over: a forest releases no noise and keeps no history (QSS's
        mode="dp" does: ``QSSEngine.continue_history``)."""

    # -- queries -------------------------------------------------------------------------------
    def effective_rho(self) -> float:  # type: ignore[override]
        """The probability that forgetting a random row rebuilds an instance (see
        :attr:`ForestInstances.effective_rho`)."""
        return ForestInstances.effective_rho.fget(self)

    def pending_rebuilds(self) -> list[int]:
        """Instances whose rebuild has not landed yet."""
        return self.rebuilding

    def present(self, ids: Sequence) -> np.ndarray:
        """Mask of ``ids`` held now."""
        with self._cond:
            missing = set(self.unknown_ids(list(ids)))
        return np.array([i not in missing for i in ids], dtype=bool)

    def receipt_hash(self, row_id: Any) -> str:
        """The keyed hash receipts carry for ``row_id`` (the key never leaves the engine)."""
        return receipt_hash(self._key, id_bytes(canonical_id(row_id)))

    def key_fingerprint(self) -> str:
        return key_fingerprint(self._key)

    @property
    def membership_key(self) -> bytes:
        """The membership key (its keyed draws decide D°). Secret: never log or store it."""
        return self._key

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the engine lock: no change, rebuild landing or prediction runs meanwhile."""
        with self._cond:
            yield

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot(
        self, ids: Sequence | None = None, instances: Sequence[int] | None = None, features=True
    ) -> EngineSnapshot:
        """The rows held (all, or ``ids`` in that order; without their features when
        ``features`` is False) and no instance state: every instance is grown again on
        restore (module docstring)."""
        with self._cond:
            held, _, X, y = self.rows()
            if ids is not None:
                at = {row_id: k for k, row_id in enumerate(held)}
                pos = np.array([at[i] for i in ids], dtype=np.int64)
                held, X, y = list(ids), X[pos], y[pos]
            rows = RowsSnapshot(
                ids=held,
                X=X if features else None,
                targets=y,
                in_pool=np.zeros(len(held), dtype=bool),
            )
            return EngineSnapshot(rows=rows, instances=[None] * self.n_instances)

    @classmethod
    def from_snapshot(
        cls,
        config: ForestConfig,
        key: bytes,
        n_classes: int | None,
        n_instances: int,
        snapshot: EngineSnapshot,
    ) -> ForestEngine:
        """The forest a snapshot's rows grow (checked by the caller: see
        :meth:`forgetting.estimators.forest._ExactForestBase._restored_engine`)."""
        rows = snapshot.rows
        engine = cls(config, key, rows.X.shape[1], n_classes, n_instances)
        raw = [id_bytes(i) for i in rows.ids]
        engine.fit(list(rows.ids), raw, np.ascontiguousarray(rows.X), rows.targets)
        return engine
