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

Everything crosses the model boundary as snapshots (:mod:`forgetting.snapshots`): the store
never touches the estimator's or engine's private state, and what it stores is plain data
(:mod:`forgetting.io.model_format`: arrays + JSON, never pickles).

Lock order is always DurableModel lock → engine lock. The engine calls ``on_install`` under
its own lock when a background rebuild lands; that only wakes the persister thread, which
then takes both locks in the usual order and writes the new schema and contributions.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ..ensemble import RebuildError
from ..estimators import restore_estimator
from ..ids import listing
from ..io.model_format import dumps
from ..labels import is_labeled
from ..schema.membership import canonical_id, id_bytes
from ..snapshots import EngineSnapshot, ModelSnapshot
from .connection import describe
from .create import create_store
from .decode import Loaded, code_layout, read_model, read_rows
from .encode import META_KIND, PRIVACY_KIND, SCHEMA_KIND, blob, records
from .errors import StoreError
from .sql import SQLStore

_RETRY_PERSIST_S = 1.0


GROUP_REQUESTS = 256
"""Most write requests one group commit takes (DurableModel.forget / insert): bounds how
long the first of them waits for the others' in-memory changes (~1 ms each for one row)."""


class _WriteRequest:
    """One caller's forget or insert, queued for the next group commit, and its answer."""

    __slots__ = ("kind", "args", "done", "leads", "_receipt", "_error", "_event")

    def __init__(self, kind: str, args: tuple):
        self.kind = kind  # "forget": (ids, erase_inputs); "insert": (X, y, ids)
        self.args = args
        self.done = False
        self.leads = False
        self._receipt: dict | None = None
        self._error: BaseException | None = None
        self._event = threading.Event()

    def answer(self, receipt: dict) -> None:
        self._receipt, self.done = receipt, True
        self._event.set()

    def fail(self, err: BaseException) -> None:
        self._error, self.done = err, True
        self._event.set()

    def lead(self) -> None:
        """Make this request's caller commit the next group."""
        self.leads = True
        self._event.set()

    def wait(self) -> None:
        self._event.wait()

    def outcome(self) -> dict:
        """The receipt, or the request's error raised in the caller's thread (a copy when
        the error was the group's: one exception object is not raised in two threads)."""
        if self._error is not None:
            err = self._error
            if err.__traceback__ is not None:  # raised already, in the committing thread
                with contextlib.suppress(Exception):  # an error that cannot be copied: as is
                    err = copy.copy(err)
                    err.__cause__ = self._error
            raise err
        return self._receipt  # type: ignore[return-value]


class DurableModel:
    """A fitted QSS estimator mirrored in a store (SQLite file path or PostgreSQL DSN)."""

    groups_writes = True
    """Concurrent :meth:`forget` and :meth:`insert` calls are ordered here and committed
    together: a caller (the HTTP service) need not serialize them
    (forgetting.service.model.groups_writes)."""

    def __init__(self, store: SQLStore, loaded: Loaded):
        self._store = store
        self._lock = threading.RLock()
        self._queue_lock = threading.Lock()
        self._queued: list[_WriteRequest] = []  # writes waiting for a group commit
        self._leading = False  # a caller is committing a group (and will hand over the lead)
        self._wake = threading.Event()
        self._closed = False
        self._available = True
        self._persist_error: BaseException | None = None
        self._adopt(loaded)
        self._persister: threading.Thread | None = None
        if not store.read_only:
            self._persister = threading.Thread(
                target=self._persist_loop, daemon=True, name="qss-db"
            )
            self._persister.start()
            self._wake.set()

    def _adopt(self, loaded: Loaded) -> None:
        self.estimator = loaded.estimator
        self._info = loaded.info
        self._persisted = loaded.persisted
        self._next_seq = loaded.next_seq
        if not self._store.read_only:
            self.estimator.engine_.on_install = lambda r: self._wake.set()

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
        (:class:`StoreBusy` if another writer holds it). ``secret_key`` is the key the model
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
    def task(self) -> str:
        return "classification" if hasattr(self.estimator, "classes_") else "regression"

    @property
    def n_features(self) -> int:
        return self.estimator.n_features_in_

    @property
    def classes(self) -> list | None:
        classes = getattr(self.estimator, "classes_", None)
        return None if classes is None else classes.tolist()

    @property
    def feature_names(self) -> list[str] | None:
        """Column names recorded at fit (None when fitted on a plain array)."""
        names = self._info.get("feature_names")
        return None if names is None else list(names)

    @property
    def key_is_derived(self) -> bool:
        """True when the membership key is derived from ``random_state`` (public)."""
        return bool(self._info["key_derived"])

    @property
    def available(self) -> bool:
        """False while the in-memory model may differ from the store (until :meth:`reload`)."""
        return self._available

    @property
    def read_only(self) -> bool:
        return self._store.read_only

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

    def receipt(self, id_hash: str) -> dict | None:
        """The latest receipt naming this keyed id hash, or None."""
        with self._lock:
            found = self._store.receipts_for(id_hash)
        return found[-1] if found else None

    def stats(self) -> dict:
        self._require_available()
        est = self.estimator
        engine = est.engine_
        with engine.locked():
            instances = []
            for r in range(est.n_instances):
                schema = engine.schema_of(r)
                info: dict[str, Any] = {
                    "instance": r,
                    "valid": schema is not None,
                    # the store holds this schema and its contributions (the persister wrote
                    # them): a reopen would not rebuild the instance
                    "persisted": schema is not None and self._persisted[r] is schema,
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
                instances.append(info)
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
            }

    def verify(self) -> dict:
        """Refit every instance from the stored rows alone and compare state digests.

        The refit restores the store's rows with no schema at all, so every instance is
        trained again from the rows (exactly what a fit on them does), whatever the label
        type and whether some rows are unlabeled.
        """
        started = time.perf_counter()
        if self._store.read_only:
            # Another process may write meanwhile: compare against one consistent read (the
            # store's model and its rows from the same transaction), adopted as a reload.
            with self._lock:
                self._require_open()
                loaded = read_model(self._store, self.estimator.secret_key)
                old = self.estimator
                self._adopt(loaded)
                self._available = True
                with contextlib.suppress(Exception):
                    old.engine_.retire()
        self.wait_for_rebuilds()
        with self._lock:
            digest = self.state_digest()
            if self._store.read_only:
                rows = loaded.rows
            else:  # we are the only writer, and hold our lock: the rows match memory
                rows = read_rows(self._store.location, self._info, self._store.load_rows())
            snapshot = ModelSnapshot(
                estimator=self._info["estimator"],
                params=self._info["params"],
                fitted=self._info["fitted"],
                key_fingerprint=self._info["key_fingerprint"],
                key_derived=self._info["key_derived"],
                engine=EngineSnapshot(
                    rows,
                    [None] * self.estimator.n_instances,
                    self.estimator.engine_.snapshot(ids=[], instances=[]).privacy,
                ),
            )
            fresh = restore_estimator(snapshot, secret_key=self.estimator.secret_key)
            fresh.wait_for_rebuilds()
            refit = fresh.state_digest()
        return {
            "ok": refit == digest,
            "state_digest": digest,
            "refit_digest": refit,
            "n_rows": len(rows.ids),
            "seconds": time.perf_counter() - started,
        }

    # -- writes --------------------------------------------------------------------------
    def forget(self, ids: Sequence[Hashable], *, erase_inputs: bool = False) -> dict:
        """Forget rows durably; returns the receipt once the deletion is committed.

        Ids already forgotten (with a forget receipt in the store; in label mode also rows
        whose label is already gone) make the call idempotent: if no requested id is still
        to forget, the stored receipt is returned with ``already_forgotten=True``. Unknown ids
        raise KeyError and change nothing.

        Concurrent calls — forgets and inserts (:meth:`insert`) alike — share one commit
        (group commit). A call queues its request; one caller at a time leads: under this
        model's lock it applies every queued request in memory, in order (each with its own
        receipt, exactly as if called alone), writes them all in one transaction, answers
        each caller and hands the lead to the first request queued meanwhile (handed on, not
        raced for: Python's locks are not fair). A durable commit — an fsync of the log, and
        on SQLite the checkpoint that erases the old page images — costs more than a one-row
        forget in memory, so under concurrent requests the store's cost is paid once per
        group instead of once per request (:data:`GROUP_REQUESTS` at most). A request that
        fails its own checks (an unknown id, say) raises for its caller alone; if the shared
        transaction fails, every request in it raises and memory is restored from the
        store, as for a single request.
        """
        return self._write(_WriteRequest("forget", (ids, erase_inputs)))

    def _write(self, request: _WriteRequest) -> dict:
        """Queue a write and return its receipt once its group is committed: this caller
        commits the group when it leads, else it waits to be answered or handed the lead."""
        with self._queue_lock:
            self._queued.append(request)
            request.leads = not self._leading
            self._leading = True
        if not request.leads:
            request.wait()  # until answered, or handed the lead
        if request.leads:
            try:
                with self._lock:
                    self._write_group()  # its group starts with this request
            finally:
                self._hand_over()
        return request.outcome()

    @property
    def queued_writes(self) -> int:
        """Forgets and inserts waiting for the next group commit (:meth:`forget`)."""
        with self._queue_lock:
            return len(self._queued)

    def _hand_over(self) -> None:
        """The group is answered: the first request still queued leads the next one (its
        caller wakes and commits), or nobody leads until a request comes."""
        with self._queue_lock:
            if self._queued:
                self._queued[0].lead()
            else:
                self._leading = False

    def _write_group(self) -> None:
        """Apply the queued writes in memory, in their order, and commit them together
        (callers hold this model's lock); every request taken is answered, by a receipt or
        an error."""
        with self._queue_lock:
            group = self._queued[:GROUP_REQUESTS]
            del self._queued[:GROUP_REQUESTS]
        try:
            self._require_writable()
        except Exception as err:
            for request in group:
                request.fail(err)
            return
        est = self.estimator
        engine_before = est.engine_
        uncommitted: dict[str, dict] = {}  # receipt hash → this group's receipt naming it
        # (request, receipt to store, its rows' keys or records, reply to the caller)
        applied: list[tuple[_WriteRequest, dict, list, dict]] = []
        answered: list[tuple[_WriteRequest, dict]] = []
        try:
            # the engine lock from the first change to the commit: a prediction serves no
            # change of the group before the store has it (the same lock is held again
            # inside, for the commit, on the engine a refit may have put in its place)
            with engine_before.locked():
                for request in group:
                    before = est.state_digest()
                    try:
                        if request.kind == "insert":
                            outcome = self._insert_in_memory(*request.args)
                        else:
                            outcome = self._forget_in_memory(*request.args, uncommitted)
                    except Exception as err:
                        if est.state_digest() != before:  # it failed after changing memory:
                            self._recover(err)  # the store is the truth (the group is lost)
                            raise
                        request.fail(err)  # its checks failed: nothing of it changed memory
                        continue
                    if isinstance(outcome, dict):
                        answered.append((request, outcome))
                    else:
                        applied.append((request, *outcome))
                if applied:
                    self._commit_writes(engine_before, applied)
            purged = self._purge_after(group)
        except BaseException as err:
            for request in group:
                if not request.done:
                    request.fail(err)
            if not isinstance(err, Exception):
                raise
            return
        for request, _receipt, _rows, reply in applied:
            if purged is None or request.kind == "insert":
                request.answer(reply)
            else:  # committed, but the old page images are still on disk: retry to purge
                request.fail(purged)
        for request, receipt in answered:  # all forgets whose rows were gone already
            if purged is None:
                request.answer(receipt)
            else:
                request.fail(purged)

    def _purge_after(self, group: list[_WriteRequest]) -> Exception | None:
        """After a group with forgets (committed, or found done earlier), purge the old page
        images of removed rows from the log (SQLStore.purge_logs; a retry after a busy
        checkpoint finishes it here too); inserts leave nothing to erase. The error, when
        the purge failed: the group is committed, memory agrees with the store, and the
        forgets' callers are told to retry (idempotent) while the inserts' are answered."""
        if not any(request.kind == "forget" for request in group):
            return None
        try:
            self._store.purge_logs()
        except Exception as err:  # noqa: BLE001 - handed to the forgets' callers
            return err
        return None

    def _forget_in_memory(self, ids, erase_inputs: bool, uncommitted: dict[str, dict]):
        """One request's checks and in-memory forget: (receipt to store, row keys, reply to
        the caller) when rows were removed, or the earlier receipt (a dict) when every id was
        already forgotten — found in the store or among ``uncommitted``, this group's
        receipts (updated here)."""
        est = self.estimator
        if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
            raise TypeError("ids must be a sequence of ints or strings")
        wanted = [canonical_id(i) for i in ids]
        if not wanted:
            raise ValueError("no ids given")
        if len(set(wanted)) != len(wanted):
            raise ValueError("duplicate ids in the request")
        engine = est.engine_
        found = engine.rows.lookup(wanted) >= 0
        present = [i for i, f in zip(wanted, found.tolist(), strict=True) if f]
        candidates = [i for i, f in zip(wanted, found.tolist(), strict=True) if not f]
        if present and est.mode == "label" and not erase_inputs:
            targets = engine.snapshot(ids=present, instances=[]).rows.targets
            done = ~is_labeled(targets)
            candidates += [i for i, d in zip(present, done, strict=True) if d]
            present = [i for i, d in zip(present, done, strict=True) if not d]
        earlier, unknown = [], []
        for row_id in candidates:
            id_hash = engine.receipt_hash(row_id)
            found = [uncommitted[id_hash]] if id_hash in uncommitted else []
            found = found or self._store.receipts_for(id_hash)
            if found and found[-1].get("operation") == "forget":
                earlier.append(found[-1])
            else:
                unknown.append(row_id)
        if unknown:
            raise KeyError(
                f"unknown ids (never inserted, or with no label left): {listing(unknown)}"
            )
        if not present:
            return {**earlier[-1], "already_forgotten": True}
        receipt = est.forget(present, erase_inputs=erase_inputs).to_dict()
        for id_hash in receipt["id_hashes"]:  # present's keyed hashes, made by the forget
            uncommitted[id_hash] = receipt
        reply = {**receipt, "already_forgotten_ids": len(earlier)} if earlier else receipt
        return receipt, [id_bytes(i) for i in present], reply

    def _insert_in_memory(self, X, y, ids) -> tuple[dict, list, dict]:
        """One insert in memory: (receipt, the new rows' records for the store, reply). The
        records carry the contributions of the instances whose stored schema is current;
        the others are written whole by the commit (:meth:`_sync_instances`)."""
        est = self.estimator
        receipt = est.insert(X, y, ids).to_dict()
        new_ids = [canonical_id(i) for i in ids]
        engine = est.engine_
        with engine.locked():
            current = [
                r
                for r in range(est.n_instances)
                if engine.schema_of(r) is not None and engine.schema_of(r) is self._persisted[r]
            ]
            snap = engine.snapshot(ids=new_ids, instances=current)
        rows = records(snap, self._next_seq, current)
        self._next_seq += len(new_ids)  # a failed commit reloads it from the store
        return receipt, rows, receipt

    def _commit_writes(self, engine_before, applied) -> None:
        """One transaction for a group's in-memory changes (``applied``: request, receipt,
        row keys or records, reply), in their order: their rows, the instances they
        invalidated, their receipts and the ledger; on failure memory is restored from the
        store before the error is raised."""
        est = self.estimator
        kinds = {request.kind for request, *_ in applied}
        doing = {"forget": "forgetting rows", "insert": "inserting rows"}.get(
            kinds.pop() if len(kinds) == 1 else "", "writing forgets and inserts"
        )
        try:
            with est.engine_.locked(), self._store.transaction(doing) as cur:
                if est.engine_ is not engine_before:
                    updates = self._rewrite(cur)  # a class vanished: the estimator refitted
                else:
                    for request, receipt, rows, _reply in applied:
                        if request.kind == "insert":
                            self._store.insert_rows(cur, rows)
                        elif receipt["scope"] == "label":
                            self._store.unlabel_rows(cur, rows)
                        else:
                            self._store.delete_rows(cur, rows)
                    updates = self._sync_instances(cur)
                for _request, receipt, _rows, _reply in applied:
                    self._store.add_receipt(cur, receipt)
                self._write_ledger(cur)
        except BaseException as err:
            self._recover(err)
            raise
        for r, schema in updates.items():
            self._persisted[r] = schema

    def insert(self, X, y, ids) -> dict:
        """Insert labeled rows durably; returns the receipt once committed. Concurrent
        inserts and forgets are committed together, in the order they came (:meth:`forget`)."""
        return self._write(_WriteRequest("insert", (X, y, ids)))

    def reload(self) -> None:
        """Rebuild the in-memory model from the store (after a store error, or to pick up
        the store's state); :attr:`available` is True once it succeeded."""
        with self._lock:
            self._require_open()
            loaded = read_model(self._store, self.estimator.secret_key)
            old = self.estimator
            self._adopt(loaded)
            self._available = True
            with contextlib.suppress(Exception):
                old.engine_.retire()
            self._wake.set()

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Wait until rebuilds have landed in memory *and* been written to the store."""
        self._require_available()
        with self._rebuild_errors():
            self.estimator.wait_for_rebuilds(timeout)
        if self._store.read_only:
            return
        with self._lock:
            self._persist_now()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake.set()
        if self._persister is not None:
            self._persister.join(timeout=30)
        with self._lock:
            ledger = self._ledger() if self._available else None
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

    def _ledger(self) -> bytes | None:
        """mode="dp": the encoded privacy ledger (releases, forgotten-id tags); else None."""
        privacy = self.estimator.engine_.snapshot(ids=[], instances=[]).privacy
        return None if privacy is None else dumps(privacy, PRIVACY_KIND)

    def _write_ledger(self, cur) -> None:
        """The ledger goes with every write, so a reopened model neither undercounts its
        releases nor lets a forgotten id back in."""
        ledger = self._ledger()
        if ledger is not None:
            self._store.set_meta(cur, "privacy", ledger)

    def _rewrite(self, cur) -> dict[int, Any]:
        """The estimator refitted itself (a class vanished): replace rows, schemas and the
        fitted attributes in the same transaction."""
        est = self.estimator
        snapshot = est.snapshot()
        info = {**self._info, "fitted": snapshot.fitted}
        self._store.delete_all_rows(cur)
        self._store.set_meta(cur, "model", dumps(info, META_KIND))
        p = est.n_instances
        self._store.insert_rows(cur, records(snapshot.engine, self._next_seq, range(p)))
        updates = {}
        for r, inst in enumerate(snapshot.engine.instances):
            schema = None if inst is None else inst.schema
            self._store.set_schema(cur, r, None if schema is None else dumps(schema, SCHEMA_KIND))
            updates[r] = schema
        self._info = info
        self._next_seq += len(snapshot.engine.rows.ids)
        est.engine_.on_install = lambda r: self._wake.set()
        return updates

    def _sync_instances(self, cur) -> dict[int, Any]:
        """Write every instance whose schema differs from the persisted one (under both locks):
        its new schema and all its contributions, or NULL if it is rebuilding. Returns the
        new persisted schemas, to record once the transaction has committed."""
        return self._write_instances(cur, *self._instances_to_write())

    def _instances_to_write(self) -> tuple[dict[int, Any], Any]:
        """The instances whose schema differs from the persisted one (their schema, None if
        rebuilding) and a copy of the valid ones' contributions (no features); under the
        engine lock."""
        engine = self.estimator.engine_
        changed = {
            r: engine.schema_of(r)
            for r in range(len(self._persisted))
            if engine.schema_of(r) is not self._persisted[r]
        }
        valid = [r for r, schema in changed.items() if schema is not None]
        snap = engine.snapshot(instances=valid, features=False) if valid else None
        return changed, snap

    def _write_instances(self, cur, changed: dict[int, Any], snap) -> dict[int, Any]:
        """:meth:`_sync_instances`' writes, from :meth:`_instances_to_write`'s copies."""
        for r, schema in changed.items():
            self._store.clear_contributions(cur, r)
            if schema is None:
                self._store.set_schema(cur, r, None)
                continue
            inst = snap.instances[r]
            self._store.set_schema(cur, r, dumps(inst.schema, SCHEMA_KIND))
            labeled = np.flatnonzero(is_labeled(snap.rows.targets))
            self._store.set_contributions(
                cur,
                r,
                [
                    (blob(inst, j), id_bytes(snap.rows.ids[p]))
                    for j, p in enumerate(labeled.tolist())
                ],
            )
            changed[r] = inst.schema
        return changed

    def _persist_now(self) -> None:
        """Write rebuilt (or cleared) instances to the store. Callers hold this model's lock,
        so no forget or insert changes the rows meanwhile: the copies are taken under the
        engine lock, the store written after it is released — writing a rebuilt instance's
        contributions (every labeled row) took ~0.8 s at 100k rows, and predictions waited
        for all of it while the engine lock was held."""
        with self.estimator.engine_.locked():
            changed, snap = self._instances_to_write()
        if not changed:
            return
        with self._store.transaction("writing a rebuilt instance") as cur:
            updates = self._write_instances(cur, changed, snap)
            self._write_ledger(cur)
        for r, schema in updates.items():
            self._persisted[r] = schema

    def _persist_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                if not self._available:
                    continue
                try:
                    self._persist_now()
                    self._persist_error = None
                except Exception as err:  # noqa: BLE001 - retried; the store stays consistent
                    # The store still says "rebuilding" for that instance, which a reopen
                    # rebuilds: nothing is lost, so retry shortly instead of failing requests.
                    self._persist_error = err
                    timer = threading.Timer(_RETRY_PERSIST_S, self._wake.set)
                    timer.daemon = True
                    timer.start()
