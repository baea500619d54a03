"""DurableModel: a QSS estimator whose every acknowledged change is in a database first.

A deletion is acknowledged (``forget`` returns) only after the transaction that removes the
row, clears the schemas it invalidated and records the receipt has committed — and, for
SQLite, after the write-ahead log holding old page images has been checkpointed away. Crash
at any moment and :meth:`DurableModel.open` rebuilds the very state a fit on the stored rows
would give: the model is a pure function of (rows, configuration), the store holds exactly
those, and instances whose schema was not durably persisted are rebuilt on open.

**Invariant** — after any ``forget``/``insert`` returns *or raises*, the live model equals a
fit on the store's rows. A change is applied in memory, then written in one transaction; if
the transaction fails, the in-memory model is restored from the store (:meth:`reload`) before
the error is raised. While that reload has not succeeded, :attr:`available` is False and every
call raises :class:`StoreError` (the service answers 503 and retries ``reload()``).

Everything crosses the model boundary as snapshots (:mod:`forgetting.snapshots`) and public
engine methods: the store never touches the estimator's or engine's private state, and what it
stores is plain data (:mod:`forgetting.io.model_format`: arrays + JSON, never pickles).

This module is the facade; the work is done beside it: :mod:`.create` (fit and write a new
store), :mod:`.decode` (read and check a store), :mod:`.writes` (the group commit of forgets
and inserts), :mod:`.persister` (the thread writing rebuilt instances), :mod:`.mirror` (what
the store holds of the live model, shared by those), :mod:`.sql` and :mod:`.connection` (the
database).

Lock order is always DurableModel lock → engine lock. The engine calls its install hook
(``QSSEngine.set_install_hook``) under its own lock when a background rebuild lands; that only
wakes the persister thread, which then takes both locks in the usual order and writes the new
schema and contributions.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ..engine import RebuildError
from ..estimators import restore_estimator
from ..receipts import Receipt
from ..schema.membership import canonical_id
from ..snapshots import EngineSnapshot
from .connection import describe
from .create import create_store
from .decode import Loaded, code_layout, model_snapshot, read_model, read_rows
from .errors import StoreError
from .mirror import Mirror
from .persister import Persister
from .reads import StoreReads, as_receipt
from .receipt_log import STATUSES, id_status
from .sql import SQLStore
from .writes import GroupCommit, WriteQueue, WriteRequest


class DurableModel(StoreReads):
    """A fitted QSS estimator mirrored in a store (SQLite file path or PostgreSQL DSN)."""

    groups_writes = True
    """Concurrent :meth:`forget` and :meth:`insert` calls are ordered here and committed
    together: a caller (the HTTP service) need not serialize them
    (forgetting.service.model.groups_writes)."""

    def __init__(self, store: SQLStore, loaded: Loaded):
        self._store = store
        self._lock = threading.RLock()
        self._writes = WriteQueue()
        self._closed = False
        self._available = True
        self._persister: Persister | None = None
        hook = None
        if not store.read_only:
            hook = self._wake_persister
        self._mirror = Mirror(store, hook)
        self._group_commit = GroupCommit(self._mirror, self._recover)
        if not store.read_only:
            self._persister = Persister(self._lock, self._mirror, lambda: self._available)
        self._mirror.adopt(loaded)
        if self._persister is not None:
            self._persister.start()

    def _wake_persister(self, _instance: int | None = None) -> None:
        if self._persister is not None:
            self._persister.wake()

    # -- construction --------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        location: str,
        estimator,
        X,
        y,
        ids=None,
        *,
        feature_names: list[str] | None = None,
        overwrite: bool = False,
        store_key: bool = False,
    ) -> DurableModel:
        """Fit ``estimator`` and write a new store at ``location``, all or nothing.

        SQLite: the store is written to a temporary file beside ``location`` in one
        transaction and renamed into place, so a crash leaves either no store (or the old one)
        or the complete new one. PostgreSQL: one transaction. The writer lock of ``location``
        is taken first, so a running server makes this raise :class:`StoreBusy` before any
        fitting. The secret key is stored only if ``store_key=True``.
        """
        store, loaded = create_store(
            location,
            estimator,
            X,
            y,
            ids,
            feature_names=feature_names,
            overwrite=overwrite,
            store_key=store_key,
        )
        return cls(store, loaded)

    @classmethod
    def open(
        cls, location: str, *, read_only: bool = False, secret_key: bytes | str | None = None
    ) -> DurableModel:
        """Restore the model from its store (after a restart or a crash).

        ``read_only=True`` creates and modifies nothing (not even a lock file) and refuses
        changes; a writable open takes the store's writer lock for its lifetime
        (:class:`StoreBusy` if another writer holds it, through whatever path, link or
        PostgreSQL role; :class:`StoreUnusable` for a directory, a hard-linked file or, for
        a writer, a read-only file system). ``secret_key`` is the key the model
        was fitted with, unless it was stored with ``store_key=True`` or derived.
        """
        store = SQLStore(str(location), read_only=read_only)
        try:
            store.upgrade()  # a v2 store, opened writable: converted to v3 (sql.py)
            loaded = read_model(store, secret_key)
        except BaseException:
            store.close()
            raise
        return cls(store, loaded)

    # -- properties ----------------------------------------------------------------------
    @property
    def estimator(self):
        """The live estimator (replaced when the model is reloaded from the store)."""
        return self._mirror.estimator

    @property
    def feature_names(self) -> list[str] | None:
        """Column names recorded at fit (None when fitted on a plain array)."""
        names = self._mirror.info.get("feature_names")
        return None if names is None else list(names)

    @property
    def key_is_derived(self) -> bool:
        """True when the membership key is derived from ``random_state`` (public)."""
        return bool(self._mirror.info["key_derived"])

    @property
    def available(self) -> bool:
        """False while the in-memory model may differ from the store (until :meth:`reload`)."""
        return self._available

    @property
    def read_only(self) -> bool:
        return self._store.read_only

    @property
    def queued_writes(self) -> int:
        """Forgets and inserts waiting for the next group commit (:meth:`forget`)."""
        return len(self._writes)

    # -- reads ---------------------------------------------------------------------------
    def predict(self, X) -> np.ndarray:
        self._require_available()
        with self._rebuild_errors():
            return self.estimator.predict(X)

    def predict_proba(self, X) -> np.ndarray:
        self._require_available()
        if self.task != "classification":
            raise TypeError("predict_proba is only defined for classifiers")
        with self._rebuild_errors():
            return self.estimator.predict_proba(X)

    def state_digest(self) -> str:
        self._require_available()
        return self.estimator.state_digest()

    def lookup(self, row_id: Hashable) -> dict:
        """What the store knows of one id, hashed here with the membership key: its
        ``id_hash``, every receipt naming it (oldest first), ``status`` (a key of
        :data:`~.receipt_log.STATUSES`: forgotten, present, never_seen, absent) and, when
        forgotten, ``rebuild_pending``: whether an instance its deletion hit is still
        rebuilding. A malformed id raises TypeError/ValueError."""
        self._require_available()
        engine = self.estimator.engine_
        row_id = canonical_id(row_id)
        id_hash = engine.receipt_hash(row_id)
        with self._lock:
            receipts = self._store.receipts_for(id_hash)
            with engine.locked():
                present = bool(engine.present([row_id])[0])
                status = id_status(receipts, present)
                pending = status == "forgotten" and any(
                    isinstance(r, int)
                    and 0 <= r < len(engine.instances)
                    and engine.schema_of(r) is None
                    for r in receipts[-1].get("instances_hit") or ()
                )
        return {
            "id_hash": id_hash,
            "status": status,
            "explanation": STATUSES[status],
            "rebuild_pending": pending,
            "receipts": receipts,
        }

    def stats(self) -> dict:
        self._require_available()
        with self._lock:  # the store's connection, like every read of it
            size = self._store.size_bytes()
        est = self.estimator
        engine = est.engine_
        with engine.locked():
            instances = [self._instance_stats(r) for r in range(est.n_instances)]
            seconds = list(engine.rebuild_seconds)
            return {
                "task": self.task,
                "mode": est.mode,
                "n_rows": est.n_rows_,
                "n_features": self.n_features,
                "feature_names": self.feature_names,
                "classes": self.classes,
                "instances": instances,
                "pending_rebuilds": engine.pending_rebuilds(),
                "queued_writes": self.queued_writes,
                "rebuilds_run": len(seconds),
                "mean_rebuild_seconds": float(np.mean(seconds)) if seconds else None,
                "state_digest": engine.state_digest(),
                "key_is_derived": self.key_is_derived,
                "read_only": self.read_only,
                "backend": self._store.dialect.name,
                "store_format": self._store.format,
                "store_bytes": size,
            }

    def _instance_stats(self, r: int) -> dict[str, Any]:
        """:meth:`stats` of instance r (under the engine lock)."""
        schema = self.estimator.engine_.schema_of(r)
        info: dict[str, Any] = {
            "instance": r,
            "valid": schema is not None,
            # the store holds this schema and its contributions (the persister wrote them):
            # a reopen would not rebuild the instance
            "persisted": self._mirror.is_persisted(r, schema),
        }
        if schema is not None:
            _, n_codes, n_cells = code_layout(schema)
            flat = getattr(schema, "partition", None) is not None
            info.update(
                schema_rows=schema.n_schema_rows,
                partition="flat" if flat else "rq",
                n_levels=n_codes,
                n_centroids=n_cells,
            )
        return info

    def verify(self) -> dict:
        """Refit every instance from the stored rows alone and compare state digests, and
        check the contribution tables against the rows.

        The refit restores the store's rows with no schema at all, so every instance is
        trained again from the rows (exactly what a fit on them does), whatever the label
        type and whether some rows are unlabeled. The contributions are what a reopen
        restores instances from, and a read ignores those of no row: ``problems`` lists, one
        line each, orphan contributions, labeled rows missing theirs under a stored schema
        and stale ones (:meth:`SQLStore.contribution_problems`). ``ok`` needs equal digests
        and no problem. What the database holds besides the store's tables
        (:meth:`SQLStore.schema_problems`) is reported first, and then nothing is refit.
        """
        started = time.perf_counter()
        with self._lock:  # the catalogue first: a foreign object could act on any read
            foreign = self._store.schema_problems()
        if foreign:
            return {
                "ok": False,
                "state_digest": self.state_digest(),
                "refit_digest": None,
                "problems": foreign,
                "n_rows": self.estimator.n_rows_,
                "seconds": time.perf_counter() - started,
            }
        if self._store.read_only:
            # Another process may write meanwhile: compare against one consistent read (the
            # store's model and its rows from the same transaction), adopted as a reload.
            with self._lock:
                self._require_open()
                loaded = read_model(self._store, self.estimator.secret_key)
                self._replace(loaded)
        self.wait_for_rebuilds()
        with self._lock:
            digest = self.state_digest()
            info = self._mirror.info
            if self._store.read_only:
                rows, columns = loaded.rows, loaded.columns
            else:  # we are the only writer, and hold our lock: the rows match memory
                rows, columns = read_rows(self._store.location, info, self._store.load_rows())
            privacy = self.estimator.engine_.snapshot(ids=[], instances=[]).privacy
            instances = [None] * self.estimator.n_instances  # every instance rebuilt: a refit
            snapshot = model_snapshot(info, EngineSnapshot(rows, instances, privacy), columns)
            fresh = restore_estimator(snapshot, secret_key=self.estimator.secret_key)
            fresh.wait_for_rebuilds()
            refit = fresh.state_digest()
            problems = self._store.contribution_problems()
        return {
            "ok": refit == digest and not problems,
            "state_digest": digest,
            "refit_digest": refit,
            "problems": problems,
            "n_rows": len(rows.ids),
            "seconds": time.perf_counter() - started,
        }

    # -- writes --------------------------------------------------------------------------
    def forget(self, ids: Sequence[Hashable], *, erase_inputs: bool = False) -> Receipt:
        """Forget rows durably; returns the :class:`~forgetting.receipts.Receipt` once the
        deletion is committed.

        Ids already forgotten (with a forget receipt in the store; in label mode also rows
        whose label is already gone) make the call idempotent: if no requested id is still
        to forget, the stored receipt is returned with ``already_forgotten=True``. Unknown ids
        raise KeyError and change nothing.

        Concurrent calls — forgets and inserts (:meth:`insert`) alike — share one commit
        (group commit, :mod:`forgetting.store.writes`): each is applied in memory in the order
        it came, with its own receipt exactly as if called alone, and all are written in one
        transaction (:data:`~forgetting.store.writes.GROUP_REQUESTS` at most). A request that
        fails its own checks (an unknown id, say) raises for its caller alone; if the shared
        transaction fails, every request in it raises and memory is restored from the
        store, as for a single request.
        """
        reply = self._writes.submit(WriteRequest("forget", (ids, erase_inputs)), self._commit)
        return as_receipt(reply)

    def insert(self, X, y, ids) -> Receipt:
        """Insert labeled rows durably; returns the receipt once committed. Concurrent
        inserts and forgets are committed together, in the order they came (:meth:`forget`)."""
        return as_receipt(self._writes.submit(WriteRequest("insert", (X, y, ids)), self._commit))

    def _commit(self) -> None:
        """Take the next group of queued writes and commit it, under this model's lock; every
        request taken is answered, by a receipt or an error."""
        with self._lock:
            group = self._writes.take()
            try:
                self._require_writable()
            except Exception as err:
                for request in group:
                    request.fail(err)
                return
            self._group_commit.run(group)

    def reload(self) -> None:
        """Rebuild the in-memory model from the store (after a store error, or to pick up
        the store's state); :attr:`available` is True once it succeeded."""
        with self._lock:
            self._require_open()
            loaded = read_model(self._store, self.estimator.secret_key)
            self._replace(loaded)
            self._wake_persister()

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Wait until rebuilds have landed in memory *and* been written to the store."""
        self._require_available()
        with self._rebuild_errors():
            self.estimator.wait_for_rebuilds(timeout)
        if self._persister is None:
            return
        with self._lock:
            self._persister.persist_now()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._persister is not None:
                self._persister.stop()
        if self._persister is not None:
            self._persister.join(timeout=30)
        with self._lock:
            ledger = self._mirror.ledger() if self._available else None
            if ledger is not None and not self._store.read_only:
                with contextlib.suppress(StoreError):  # releases since the last write
                    with self._store.transaction("recording the privacy ledger") as cur:
                        self._store.set_meta(cur, "privacy", ledger)
            self._store.close()

    def __enter__(self) -> DurableModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------
    def _replace(self, loaded: Loaded) -> None:
        """Serve the model just read from the store, and retire the one it replaces."""
        old = self.estimator
        self._mirror.adopt(loaded)
        self._available = True
        with contextlib.suppress(Exception):
            old.engine_.retire()

    def _require_open(self) -> None:
        if self._closed:
            raise StoreError(f"{describe(self._store.location)}: the store is closed")

    def _require_available(self) -> None:
        self._require_open()
        if not self._available:
            raise StoreError(
                f"{describe(self._store.location)}: the model is being reloaded from the store "
                "after a store error; retry shortly"
            )

    def _require_writable(self) -> None:
        self._require_available()
        if self._store.read_only:
            raise StoreError(
                f"{describe(self._store.location)} was opened read-only; changes are refused"
            )

    @contextlib.contextmanager
    def _rebuild_errors(self):
        """A rebuild from the stored rows that fails (it succeeded when they were written)
        says the store cannot reproduce its model: one StoreError line, not a traceback."""
        try:
            yield
        except RebuildError as err:
            raise StoreError(
                f"{describe(self._store.location)}: {' '.join(str(err).split())}; the stored "
                "rows cannot rebuild the model: run `forgetting verify`, restore a backup or "
                "refit"
            ) from err

    def _recover(self, err: BaseException) -> None:
        """A write failed after memory changed: restore memory from the store (the truth),
        or stay unavailable until :meth:`reload` succeeds."""
        self._available = False
        try:
            self.reload()
        except BaseException:  # noqa: BLE001 - the service keeps calling reload()
            pass
