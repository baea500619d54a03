"""QSSDurable: the durable store of a QSS estimator (:class:`~.durable.DurableModel`'s family
for QSSClassifier and QSSRegressor): every acknowledged change in a database first.

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
from collections.abc import Hashable, Sequence
from typing import Any

from ..engine import RebuildError
from ..estimators import restore_estimator
from ..receipts import Receipt, attribution
from ..snapshots import EngineSnapshot
from .connection import describe
from .create import create_store
from .decode import Loaded, code_layout, model_snapshot, read_model, read_rows
from .durable import DurableModel
from .errors import StoreError
from .mirror import Mirror
from .persister import Persister
from .reads import as_receipt
from .sql import SQLStore
from .writes import GroupCommit, WriteQueue, WriteRequest


class QSSDurable(DurableModel):
    """A fitted QSS estimator mirrored in a store: rows, schemas and contributions (opened
    and created through :class:`~.durable.DurableModel`)."""

    estimators = ("QSSClassifier", "QSSRegressor")
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
    def _create(cls, location, estimator, X, y, ids, **options) -> QSSDurable:
        """Fit and write a new store (:func:`.create.create_store`: all or nothing)."""
        store, loaded = create_store(location, estimator, X, y, ids, **options)
        return cls(store, loaded)._start_log()

    @classmethod
    def _open(cls, store: SQLStore, secret_key: bytes | str | None) -> QSSDurable:
        """The model a store holds (a v2 store opened writable is converted to v3 first)."""
        store.upgrade()
        return cls(store, read_model(store, secret_key))._start_log()

    # -- properties ----------------------------------------------------------------------
    @property
    def estimator(self):
        """The live estimator (replaced when the model is read again from the store)."""
        return self._mirror.estimator

    @property
    def feature_names(self) -> list[str] | None:
        """Column names recorded at fit (None when fitted on a plain array)."""
        names = self._mirror.info.get("feature_names")
        return None if names is None else list(names)

    @property
    def queued_writes(self) -> int:
        """Forgets and inserts waiting for the next group commit (:meth:`forget`)."""
        return len(self._writes)

    # -- reads ---------------------------------------------------------------------------
    def _family_stats(self) -> dict:
        est = self.estimator
        return {
            "mode": est.mode,
            "instances": [self._instance_stats(r) for r in range(est.n_instances)],
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

    def _refit_digest(self) -> tuple[str, str, list[str], int]:
        """Refit every instance from the stored rows alone, and check the contribution
        tables against the rows.

        The refit restores the store's rows with no schema at all, so every instance is
        trained again from the rows (exactly what a fit on them does), whatever the label
        type and whether some rows are unlabeled. The contributions are what a reopen
        restores instances from, and a read ignores those of no row: the problems list, one
        line each, orphan contributions, labeled rows missing theirs under a stored schema
        and stale ones (:meth:`SQLStore.contribution_problems`).
        """
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
        return digest, refit, problems, len(rows.ids)

    # -- writes --------------------------------------------------------------------------
    def forget(
        self,
        ids: Sequence[Hashable],
        *,
        erase_inputs: bool = False,
        operator: str | None = None,
        reason: str | None = None,
    ) -> Receipt:
        """Forget rows durably; returns the :class:`~forgetting.receipts.Receipt` once the
        deletion is committed. ``operator`` (a name, never a token) and ``reason`` are
        recorded in the stored receipt (:func:`~forgetting.receipts.attribution`: a
        ValueError when too long).

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
        notes = attribution(operator, reason)
        request = WriteRequest("forget", (ids, erase_inputs), notes)
        return as_receipt(self._writes.submit(request, self._commit))

    def insert(
        self, X, y, ids, *, operator: str | None = None, reason: str | None = None
    ) -> Receipt:
        """Insert labeled rows durably; returns the receipt once committed. Concurrent
        inserts and forgets are committed together, in the order they came (:meth:`forget`,
        which says what ``operator`` and ``reason`` are)."""
        request = WriteRequest("insert", (X, y, ids), attribution(operator, reason))
        return as_receipt(self._writes.submit(request, self._commit))

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
        with self._serving_errors():
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

    # -- internals -----------------------------------------------------------------------
    def _replace(self, loaded: Loaded) -> None:
        """Serve the model just read from the store, and retire the one it replaces."""
        old = self.estimator
        self._mirror.adopt(loaded)
        self._available = True
        with contextlib.suppress(Exception):
            old.engine_.retire()

    @contextlib.contextmanager
    def _serving_errors(self):
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
