"""The engine's state boundary: snapshots, the one restore path, pickling, and the public
methods the durable store reaches the live engine through.

Why apart: persistence, the store and pickles see the engine only through these
(docs/architecture.md, "The seams"); :class:`EngineSnapshots` is a mixin of
:class:`~.core.QSSEngine`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..content.fingerprint import Contributions
from ..instance import (
    empty_instance,
)
from ..privacy import PrivacyLedger
from ..schema.membership import (
    canonical_id,
    id_bytes,
    key_fingerprint,
    receipt_hash,
)
from ..snapshots import EngineSnapshot, InstanceSnapshot
from .config import EngineConfig
from .validation import check_snapshot


class EngineSnapshots:
    """Snapshots and restores of :class:`~.core.QSSEngine`."""

    # -- snapshots (the one state boundary for persistence and the store) ----------------
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the engine lock: no change, rebuild installation or prediction set-up runs
        meanwhile. Lock order for callers that hold their own lock: theirs first, then this."""
        with self._lock:
            yield

    def present(self, ids: Sequence) -> np.ndarray:
        """Mask of ``ids`` held now (a lookup in the row store, under no lock: callers hold
        :meth:`locked` when it must not change)."""
        return self.rows.lookup(ids) >= 0

    def set_install_hook(self, hook: Callable[[int], None] | None) -> None:
        """Call ``hook(r)`` after instance r is (re)installed, under the engine lock (the
        durable store wakes its persister with it)."""
        self._on_install = hook

    def schema_of(self, r: int) -> Any:
        """Instance ``r``'s schema, or None while it is rebuilding."""
        inst = self.instances[r]
        return None if inst is None else inst.schema

    def receipt_hash(self, row_id: Any) -> str:
        """The keyed hash receipts carry for ``row_id`` (the key never leaves the engine)."""
        return receipt_hash(self._key, id_bytes(canonical_id(row_id)))

    def key_fingerprint(self) -> str:
        return key_fingerprint(self._key)

    def snapshot(
        self,
        ids: Sequence | None = None,
        instances: Sequence[int] | None = None,
        features: bool = True,
    ) -> EngineSnapshot:
        """The primary state: rows (all, or ``ids`` in that order) and, for each instance in
        ``instances`` (default all) that is valid, its schema and those rows' contributions.

        Instances not asked for, or rebuilding, are None. ``features=False``: the rows'
        features left out (``RowStore.snapshot``). Call under :meth:`locked` (or after
        :meth:`wait_for_rebuilds`) when the snapshot must match a state digest.
        """
        with self._lock:
            rows = self.rows
            pos = np.arange(rows.size) if ids is None else rows.positions_of(list(ids))
            wanted = range(self.config.n_instances) if instances is None else set(instances)
            labeled = pos[rows.labeled(pos)]
            out: list[InstanceSnapshot | None] = []
            for r, inst in enumerate(self.instances):
                if inst is None or r not in wanted:
                    out.append(None)
                    continue
                contrib = rows.contributions(r, labeled)
                out.append(
                    InstanceSnapshot(inst.schema, contrib.codes.copy(), contrib.residuals.copy())
                )
            privacy = None if self.privacy is None else self.privacy.to_dict()
            return EngineSnapshot(rows.snapshot(pos, features), out, privacy)

    @classmethod
    def from_snapshot(cls, config: EngineConfig, key: bytes, snapshot: EngineSnapshot):
        """Rebuild an engine from a snapshot: the one restore path.

        The snapshot is checked whole first (:func:`.validation.check_snapshot`: counts,
        shapes, ranges and sizes against ``config``), so an inconsistent one raises
        :class:`~forgetting.snapshots.SnapshotError` before anything is allocated or run.
        Everything derived (draws, row hashes, contribution digests, accumulators) is
        recomputed from the snapshot's primary data; instances without a snapshot rebuild
        (in the background, or before returning with ``rebuild="sync"``).
        """
        check_snapshot(config, snapshot)
        rows = snapshot.rows
        engine = cls(config, key, rows.X.shape[1], rows.targets.dtype)
        with engine._lock:
            id_raw = [id_bytes(i) for i in rows.ids]
            store = engine.rows
            pos = store.append(
                rows.ids, id_raw, rows.X, rows.targets, engine._draws(id_raw), rows.in_pool
            )
            labeled = pos[store.labeled(pos)]
            for r, inst_snap in enumerate(snapshot.instances):
                if inst_snap is None:
                    continue
                contrib = Contributions.of(
                    store.row_hash[labeled], inst_snap.codes, inst_snap.residuals
                )
                inst = empty_instance(config.schema, inst_snap.schema)
                inst.add_rows(contrib, store.folds(labeled), store.X[labeled])
                inst.refresh()  # a load pays the tables' totals, not the first prediction
                engine._share(r, inst)
                engine.instances[r] = inst
                store.set_instance_rows(r, labeled, contrib)
            if snapshot.privacy is not None:
                engine.privacy = PrivacyLedger.from_dict(snapshot.privacy)
            engine._start_rebuilds(engine.pending_rebuilds())  # every instance not restored
        return engine

    # -- the history a refit continues -----------------------------------------------------
    def continue_history(
        self, previous: Any, forgotten: Sequence[bytes] = (), inserted: Sequence[bytes] = ()
    ) -> None:
        """Before this engine is fitted as the next state of the model ``previous`` served (a
        refit after a forget or insert: a class's last rows, a raw table's encoding or a
        pipeline's step moved), take over ``previous``'s history — in mode="dp" its ledger:
        every release and forgotten-id tag, so no refit drops the count or lets a forgotten
        id back in. ``inserted`` (id bytes) forgotten earlier are refused (ValueError, before
        anything changes) and ``forgotten`` are recorded. A ``fit`` alone starts a new model
        and a new history."""
        ledger = getattr(previous, "privacy", None)
        if self.privacy is None or ledger is None:
            return  # nothing released with noise before, or nothing to release now
        if previous.key_fingerprint() != self.key_fingerprint():
            raise ValueError(
                "the membership key changed since the model was fitted (secret_key or "
                "random_state set since): its privacy ledger is keyed by the old one; fit the "
                "model again to start a new ledger"
            )
        carried = ledger.continued(self.privacy)
        carried.check_insert(self._key, inserted)
        carried.record_forgotten(self._key, forgotten)
        self.privacy = carried

    # -- pickling: locks and threads are rebuilt, pending rebuilds finish first ----------
    def __getstate__(self) -> dict[str, Any]:
        self.wait_for_rebuilds()
        return {"config": self.config, "key": self._key, "snapshot": self.snapshot()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        restored = type(self).from_snapshot(state["config"], state["key"], state["snapshot"])
        self.__dict__.update(restored.__dict__)
