"""What the store holds of the live model, and the writes that keep the two in step.

A :class:`Mirror` is the state the facade (:mod:`.durable`), the group commit
(:mod:`.writes`) and the persister (:mod:`.persister`) share: the store, the live estimator,
the model entry written at fit, the next row sequence number, and for each instance the
schema whose contributions the store holds (``persisted[r]``: compared by identity with the
engine's current schema, so a rebuilt or cleared instance shows as a change to write).

Callers hold the model's lock (:class:`~.durable.DurableModel`); the methods that read the
engine say whether they need its lock too (lock order: model lock, then engine lock).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..io.model_format import dumps
from ..labels import is_labeled
from ..schema.membership import id_bytes
from .decode import Loaded
from .encode import META_KIND, PRIVACY_KIND, SCHEMA_KIND, blob, raw_rows, records, stored_fitted
from .sql import SQLStore


class Mirror:
    """The live model and what its store holds of it (see the module docstring)."""

    def __init__(self, store: SQLStore, install_hook: Callable[[int], None] | None):
        """``install_hook`` is given to every engine adopted (``QSSEngine.set_install_hook``):
        a writable model wakes its persister with it; a read-only one passes None."""
        self.store = store
        self.install_hook = install_hook
        self.estimator: Any = None
        self.info: dict = {}
        self.persisted: list = []
        self.next_seq = 0

    def adopt(self, loaded: Loaded) -> None:
        """Take the model and bookkeeping just read from the store (or freshly fitted)."""
        self.estimator = loaded.estimator
        self.info = loaded.info
        self.persisted = loaded.persisted
        self.next_seq = loaded.next_seq
        self._hook_engine()

    def _hook_engine(self) -> None:
        if self.install_hook is not None:
            self.estimator.engine_.set_install_hook(self.install_hook)

    def is_persisted(self, r: int, schema: Any) -> bool:
        """Whether the store holds instance r's live ``schema`` and its contributions (a
        reopen would not rebuild it)."""
        return schema is not None and self.persisted[r] is schema

    def current_instances(self) -> list[int]:
        """The instances whose stored schema is the live one (under the engine lock)."""
        engine = self.estimator.engine_
        return [
            r
            for r in range(self.estimator.n_instances)
            if engine.schema_of(r) is not None and engine.schema_of(r) is self.persisted[r]
        ]

    def record(self, updates: dict[int, Any]) -> None:
        """Note the schemas a committed transaction wrote (``{instance: schema or None}``)."""
        for r, schema in updates.items():
            self.persisted[r] = schema

    # -- the privacy ledger --------------------------------------------------------------
    def ledger(self) -> bytes | None:
        """mode="dp": the encoded privacy ledger (releases, forgotten-id tags); else None."""
        privacy = self.estimator.engine_.snapshot(ids=[], instances=[]).privacy
        return None if privacy is None else dumps(privacy, PRIVACY_KIND)

    def write_ledger(self, cur) -> None:
        """The ledger goes with every write, so a reopened model neither undercounts its
        releases nor lets a forgotten id back in."""
        ledger = self.ledger()
        if ledger is not None:
            self.store.set_meta(cur, "privacy", ledger)

    # -- instances -----------------------------------------------------------------------
    def sync_instances(self, cur) -> dict[int, Any]:
        """Write every instance whose schema differs from the persisted one (under both locks):
        its new schema and all its contributions, or NULL if it is rebuilding. Returns the
        new persisted schemas, to :meth:`record` once the transaction has committed."""
        return self.write_instances(cur, *self.instances_to_write())

    def instances_to_write(self) -> tuple[dict[int, Any], Any]:
        """The instances whose schema differs from the persisted one (their schema, None if
        rebuilding) and a copy of the valid ones' contributions (no features); under the
        engine lock."""
        engine = self.estimator.engine_
        changed = {
            r: engine.schema_of(r)
            for r in range(len(self.persisted))
            if engine.schema_of(r) is not self.persisted[r]
        }
        valid = [r for r, schema in changed.items() if schema is not None]
        snap = engine.snapshot(instances=valid, features=False) if valid else None
        return changed, snap

    def write_instances(self, cur, changed: dict[int, Any], snap) -> dict[int, Any]:
        """:meth:`sync_instances`' writes, from :meth:`instances_to_write`'s copies."""
        store = self.store
        for r, schema in changed.items():
            store.clear_contributions(cur, r)
            if schema is None:
                store.set_schema(cur, r, None)
                continue
            inst = snap.instances[r]
            store.set_schema(cur, r, dumps(inst.schema, SCHEMA_KIND))
            labeled = np.flatnonzero(is_labeled(snap.rows.targets))
            store.set_contributions(
                cur,
                r,
                [
                    (blob(inst, j), id_bytes(snap.rows.ids[p]))
                    for j, p in enumerate(labeled.tolist())
                ],
            )
            changed[r] = inst.schema
        return changed

    def rewrite(self, cur) -> dict[int, Any]:
        """The estimator refitted itself (a class vanished, or a table model's encoding
        moved): replace rows, schemas and the fitted attributes in the same transaction;
        returns the schemas to :meth:`record`."""
        est = self.estimator
        store = self.store
        snapshot = est.snapshot()
        fitted, raw = stored_fitted(snapshot.fitted)
        info = {**self.info, "fitted": fitted}
        store.delete_all_rows(cur)
        store.set_meta(cur, "model", dumps(info, META_KIND))
        p = est.n_instances
        store.insert_rows(cur, records(snapshot.engine, self.next_seq, range(p), raw))
        updates = {}
        for r, inst in enumerate(snapshot.engine.instances):
            schema = None if inst is None else inst.schema
            store.set_schema(cur, r, None if schema is None else dumps(schema, SCHEMA_KIND))
            updates[r] = schema
        self.info = info
        self.next_seq += len(snapshot.engine.rows.ids)
        self._hook_engine()  # the refit made a new engine
        return updates

    def raw_rows_of(self, ids: list) -> list[bytes] | None:
        """A table model's raw rows ``ids`` as the store keeps them (None for numeric rows)."""
        table = getattr(self.estimator, "table_", None)
        return None if table is None else raw_rows(table.stored(ids)["columns"])
