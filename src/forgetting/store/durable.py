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
import os
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..ensemble import RebuildError
from ..estimators import restore_estimator
from ..ids import listing
from ..io.model_format import ModelFileError, dumps, loads
from ..labels import UNLABELED, is_labeled
from ..persistence import check_schema, library_versions
from ..schema.membership import canonical_id, derive_key, id_bytes, key_fingerprint
from ..snapshots import EngineSnapshot, InstanceSnapshot, ModelSnapshot, RowsSnapshot
from .connection import FileLock as _FileLock
from .connection import describe, is_postgres
from .errors import StoreCorrupt, StoreError
from .sql import FORMAT_V2, SQLStore, contrib_table

META_KIND = "forgetting-store-meta"
SCHEMA_KIND = "forgetting-schema"
KEY_KIND = "forgetting-secret-key"
PRIVACY_KIND = "forgetting-privacy-ledger"
_RETRY_PERSIST_S = 1.0


def _decode_id(key: bytes) -> int | str:
    kind, value = key[:2], key[2:].decode("utf-8")
    if kind == b"i:":
        number = int(value)
        if str(number) != value:
            raise ValueError("non-canonical integer id")
        return number
    if kind == b"s:":
        return value
    raise ValueError("unknown id type tag")


def _corrupt(location: str, where: str, problem: Any) -> StoreCorrupt:
    text = " ".join(str(problem).split())
    return StoreCorrupt(
        f"{describe(location)}: {where}: {text}; the store is damaged or was tampered with — "
        "restore it from a backup or refit (`forgetting fit --overwrite`)"
    )


class _Loaded:
    """What :func:`_load` reads from a store: the estimator and the persisted bookkeeping."""

    def __init__(
        self, estimator, info: dict, persisted: list, next_seq: int, rows: RowsSnapshot | None
    ):
        self.estimator = estimator
        self.info = info
        self.persisted = persisted
        self.next_seq = next_seq
        self.rows = rows
        """The stored rows the estimator was restored from (None after a fresh fit)."""


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

    def __init__(self, store: SQLStore, loaded: _Loaded):
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

    def _adopt(self, loaded: _Loaded) -> None:
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
        location = str(location)
        if is_postgres(location):
            store = SQLStore(location, create=True)
            try:
                cls._fit(estimator, X, y, ids)
                info = cls._write_new(store, estimator, feature_names, store_key)
            except BaseException:
                store.close()
                raise
            return cls(store, cls._fresh(estimator, info))
        path = Path(location)
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
        lock = _FileLock(path)
        try:
            _remove_partial_creations(path)
            cls._fit(estimator, X, y, ids)
            tmp = path.with_name(f".{path.name}.creating-{os.getpid()}")
            scratch = SQLStore(str(tmp), create=True, lock=False)
            try:
                info = cls._write_new(scratch, estimator, feature_names, store_key)
                scratch.purge_logs()
            finally:
                scratch.close()
            for suffix in ("-wal", "-shm"):  # a stale log would be replayed onto the new file
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{path}{suffix}")
            os.replace(tmp, path)
            _fsync_dir(path.parent)
            store = SQLStore(str(path), lock=lock)
            store.meta()
        except BaseException:
            lock.release()
            _remove_partial_creations(path)
            raise
        return cls(store, cls._fresh(estimator, info))

    @staticmethod
    def _fit(estimator, X, y, ids) -> None:
        estimator.fit(X, y, ids)
        estimator.wait_for_rebuilds()

    @staticmethod
    def _fresh(estimator, info: dict) -> _Loaded:
        p = estimator.n_instances
        engine = estimator.engine_
        persisted = [engine.schema_of(r) for r in range(p)]
        return _Loaded(estimator, info, persisted, estimator.n_rows_, None)

    @classmethod
    def _write_new(cls, store: SQLStore, estimator, feature_names, store_key: bool) -> dict:
        """Every table of a new store, in one transaction."""
        snapshot = estimator.snapshot()
        if feature_names is None and "feature_names_in_" in snapshot.fitted:
            feature_names = [str(n) for n in snapshot.fitted["feature_names_in_"]]
        if feature_names is not None:
            feature_names = [str(n) for n in feature_names]
            if len(feature_names) != snapshot.fitted["n_features_in_"]:
                raise ValueError(
                    f"{len(feature_names)} feature names for "
                    f"{snapshot.fitted['n_features_in_']} features"
                )
        info = {
            "estimator": snapshot.estimator,
            "params": snapshot.params,
            "fitted": snapshot.fitted,
            "key_fingerprint": snapshot.key_fingerprint,
            "key_derived": snapshot.key_derived,
            "feature_names": feature_names,
            "libraries": library_versions(),
        }
        meta = {"model": dumps(info, META_KIND)}
        if snapshot.engine.privacy is not None:
            meta["privacy"] = dumps(snapshot.engine.privacy, PRIVACY_KIND)
        if store_key and not snapshot.key_derived:
            meta["secret_key"] = dumps(estimator.secret_key, KEY_KIND)
        p = len(snapshot.engine.instances)
        with store.transaction("writing the new store") as cur:
            store.create_tables(cur, meta, p)
            store.insert_rows(cur, _records(snapshot.engine, 0, range(p)))
            for r, inst in enumerate(snapshot.engine.instances):
                store.set_schema(cur, r, None if inst is None else dumps(inst.schema, SCHEMA_KIND))
        return info

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
            loaded = _load(store, secret_key)
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
                    _, n_codes, n_cells = _code_layout(schema)
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
                loaded = _load(self._store, self.estimator.secret_key)
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
                rows = _read_rows(self._store.location, self._info, self._store.load_rows())
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
        records = _records(snap, self._next_seq, current)
        self._next_seq += len(new_ids)  # a failed commit reloads it from the store
        return receipt, records, receipt

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
            loaded = _load(self._store, self.estimator.secret_key)
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
        self._store.insert_rows(cur, _records(snapshot.engine, self._next_seq, range(p)))
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
                    (_blob(inst, j), id_bytes(snap.rows.ids[p]))
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


# -- encoding rows ------------------------------------------------------------------------
def _blob(inst: InstanceSnapshot, j: int) -> bytes:
    """A row's contribution: its codes, then its int64 residuals (little-endian)."""
    return inst.codes[j].tobytes() + inst.residuals[j].astype("<i8", copy=False).tobytes()


def _records(snap: EngineSnapshot, first_seq: int, instances) -> list[tuple]:
    """Row tuples for the store, with contributions for ``instances`` (labeled rows only)."""
    rows = snap.rows
    labeled = is_labeled(rows.targets)
    wanted = [r for r in instances if snap.instances[r] is not None]
    index = np.cumsum(labeled) - 1  # position among the labeled rows
    X = np.ascontiguousarray(rows.X, dtype="<f4")
    out = []
    for p, row_id in enumerate(rows.ids):
        blobs: list[bytes | None] = [None] * len(snap.instances)
        target = None
        if labeled[p]:
            target = float(rows.targets[p])
            for r in wanted:
                blobs[r] = _blob(snap.instances[r], int(index[p]))
        out.append(
            (
                id_bytes(row_id),
                first_seq + p,
                X[p].tobytes(),
                target,
                int(bool(rows.in_pool[p])),
                *blobs,
            )
        )
    return out


# -- loading ------------------------------------------------------------------------------
def _load(store: SQLStore, secret_key: bytes | str | None) -> _Loaded:
    """Read and check every table, then restore the estimator from the snapshot."""
    loc = store.location
    meta, records, bodies = store.read_all()
    if "model" not in meta:
        raise _corrupt(loc, "table meta", "the model entry is missing")
    try:
        info = loads(meta["model"], META_KIND, "model entry")
        _check_info(info)
    except (ModelFileError, ValueError, TypeError, KeyError) as err:
        raise _corrupt(loc, "table meta", err) from None
    if info["libraries"] != library_versions():
        raise ValueError(
            f"{describe(loc)}: written with {info['libraries']}, running {library_versions()}: "
            "bitwise exactness needs the same library versions"
        )
    if secret_key is None and "secret_key" in meta:
        try:
            secret_key = loads(meta["secret_key"], KEY_KIND, "secret key entry")
        except ModelFileError as err:
            raise _corrupt(loc, "table meta", err) from None
    _check_key(loc, info, secret_key)
    privacy = None
    if "privacy" in meta:
        try:
            privacy = loads(meta["privacy"], PRIVACY_KIND, "privacy ledger")
            if not isinstance(privacy, dict):
                raise ValueError("the privacy ledger is not a mapping")
        except (ModelFileError, ValueError) as err:
            raise _corrupt(loc, "table meta", err) from None
    info = {**info, "privacy": privacy}
    rows = _read_rows(loc, info, records)
    n_outputs = len(info["fitted"]["classes_"]) if "classes_" in info["fitted"] else 1
    instances = _read_instances(loc, bodies, records, rows, n_outputs, store.format == FORMAT_V2)
    snapshot = ModelSnapshot(
        estimator=info["estimator"],
        params=info["params"],
        fitted=info["fitted"],
        key_fingerprint=info["key_fingerprint"],
        key_derived=info["key_derived"],
        engine=EngineSnapshot(rows, instances, privacy),
    )
    try:
        estimator = restore_estimator(snapshot, secret_key=secret_key)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as err:
        raise _corrupt(loc, "restoring the model", f"{type(err).__name__}: {err}") from None
    persisted = [None if inst is None else inst.schema for inst in instances]
    engine = estimator.engine_
    persisted = [s if engine.schema_of(r) is s else None for r, s in enumerate(persisted)]
    next_seq = max((int(rec[1]) for rec in records), default=-1) + 1
    return _Loaded(estimator, info, persisted, next_seq, rows)


def _check_info(info: Any) -> None:
    if not isinstance(info, dict):
        raise ValueError("the model entry is not a mapping")
    for name, kind in (
        ("estimator", str),
        ("params", dict),
        ("fitted", dict),
        ("key_fingerprint", str),
        ("key_derived", bool),
        ("libraries", dict),
    ):
        if not isinstance(info.get(name), kind):
            raise ValueError(f"the model entry's {name} is missing or of the wrong type")
    fitted = info["fitted"]
    d = fitted.get("n_features_in_")
    if type(d) is not int or d < 1:
        raise ValueError("the model entry's n_features_in_ is not a positive int")
    if "classes_" in fitted and not isinstance(fitted["classes_"], np.ndarray):
        raise ValueError("the model entry's classes_ is not an array")
    names = info.get("feature_names")
    if names is not None and (
        not isinstance(names, list) or len(names) != d or not all(isinstance(n, str) for n in names)
    ):
        raise ValueError("the model entry's feature_names do not match the features")


def _check_key(location: str, info: dict, secret_key: bytes | str | None) -> None:
    """Refuse a missing or wrong key before anything is restored (it would silently move
    every row's D° membership)."""
    where = describe(location)
    if info["key_derived"]:
        if secret_key is not None:
            raise ValueError(
                f"{where}: this model's key is derived from random_state; do not pass a secret key"
            )
        return
    if secret_key is None:
        raise ValueError(
            f"{where}: this model was fitted with a secret key, which is not stored; pass it "
            "(secret_key=..., or --secret-key-file)"
        )
    try:
        key = derive_key(secret_key, 0)
    except TypeError as err:
        raise ValueError(f"{where}: {err}") from None
    if key_fingerprint(key) != info["key_fingerprint"]:
        raise ValueError(
            f"{where}: the secret key does not match the key this model was fitted with"
        )


def _read_rows(loc: str, info: dict, records: list[tuple]) -> RowsSnapshot:
    """The store's rows as a snapshot, each field checked (one error line per defect)."""
    fitted = info["fitted"]
    d = fitted["n_features_in_"]
    k = len(fitted["classes_"]) if "classes_" in fitted else None
    ids, X_parts, targets, in_pool = [], [], [], []
    for rec in records:
        seq = rec[1]
        try:
            ids.append(_decode_id(bytes(rec[0])))
            raw = bytes(rec[2])
            if len(raw) != 4 * d:
                raise ValueError(f"{len(raw)} feature bytes, expected {4 * d}")
            X_parts.append(raw)
            target = rec[3]
            if target is None:
                targets.append(UNLABELED if k is not None else np.nan)
            else:
                value = float(target)
                if k is not None and not (value.is_integer() and 0 <= value < k):
                    raise ValueError(f"label index {value!r} outside 0..{k - 1}")
                if not np.isfinite(value):
                    raise ValueError("non-finite target")
                targets.append(int(value) if k is not None else value)
            if rec[4] not in (0, 1):
                raise ValueError(f"in_pool {rec[4]!r} is not 0 or 1")
            in_pool.append(bool(rec[4]))
        except (ValueError, TypeError, UnicodeDecodeError, IndexError) as err:
            raise _corrupt(loc, f"table rows, row seq {seq}", err) from None
    X = np.frombuffer(b"".join(X_parts), dtype="<f4").reshape(len(records), d).astype(np.float32)
    if not np.all(np.isfinite(X)):
        raise _corrupt(loc, "table rows", "features hold NaN or infinity")
    if len(set(ids)) != len(ids):
        raise _corrupt(loc, "table rows", "duplicate ids")
    target_array = np.array(targets, dtype=np.int64 if k is not None else np.float64)
    return RowsSnapshot(ids=ids, X=X, targets=target_array, in_pool=np.array(in_pool, dtype=bool))


def _read_instances(
    loc: str,
    bodies: list,
    records: list[tuple],
    rows: RowsSnapshot,
    n_outputs: int,
    v2: bool = False,
) -> list:
    """Each instance's schema and the labeled rows' contributions; an instance whose schema
    or any contribution is missing is rebuilt on restore (None). ``v2``: a v2 store read
    as it is (contributions in columns of ``rows``), for error messages."""
    labeled = is_labeled(rows.targets)
    out: list[InstanceSnapshot | None] = []
    for r, body in enumerate(bodies):
        if body is None:
            out.append(None)
            continue
        try:
            schema = loads(body, SCHEMA_KIND, f"schema of instance {r}")
            check_schema(schema, rows.X.shape[1], n_outputs)
        except Exception as err:  # noqa: BLE001 - any defect of decoded data is the store's
            raise _corrupt(loc, f"table schemas, instance {r}", err) from None
        blobs = [rec[5 + r] for rec, lab in zip(records, labeled, strict=True) if lab]
        if any(b is None for b in blobs):
            out.append(None)
            continue
        try:
            codes, residuals = _decode_contributions(schema, blobs, n_outputs)
        except (ValueError, AttributeError, TypeError) as err:
            where = f"table rows, column c{r}" if v2 else f"table {contrib_table(r)}"
            raise _corrupt(loc, where, err) from None
        out.append(InstanceSnapshot(schema, codes, residuals))
    return out


def _code_layout(schema) -> tuple[np.dtype, int, int]:
    """(code dtype, codes per row, number of cells) of a schema's partition: the paper's RQ
    codebook, or a flat partition of many tables."""
    if getattr(schema, "partition", None) is not None:
        part = schema.partition
        return np.dtype(part.cell_dtype), part.n_tables, part.n_cells
    cb = schema.codebook
    return np.dtype(cb.code_dtype), cb.n_levels, cb.n_centroids


def _decode_contributions(schema, blobs: list, n_outputs: int):
    """Codes and residuals from stored blobs (codes bytes, then int64 residuals), checked."""
    code_dtype, n_codes, n_cells = _code_layout(schema)
    code_bytes = n_codes * code_dtype.itemsize
    width = code_bytes + 8 * n_outputs
    raw = b"".join(bytes(b) for b in blobs)
    if any(len(bytes(b)) != width for b in blobs):
        raise ValueError(f"a contribution is not {width} bytes long")
    table = np.frombuffer(raw, dtype=np.uint8).reshape(len(blobs), width)
    codes = np.ascontiguousarray(table[:, :code_bytes]).view(code_dtype)
    residuals = np.ascontiguousarray(table[:, code_bytes:]).view("<i8").astype(np.int64)
    codes = codes.reshape(len(blobs), n_codes)
    if codes.size and int(codes.max()) >= n_cells:
        raise ValueError(f"a cell code is ≥ {n_cells}, the number of cells")
    return codes, residuals.reshape(len(blobs), n_outputs)


def _remove_partial_creations(path: Path) -> None:
    """Delete scratch files of creations that crashed (they may hold rows later forgotten).
    Called with the writer lock held, so no creation is running."""
    for stale in path.parent.glob(f".{path.name}.creating-*"):
        with contextlib.suppress(OSError):
            stale.unlink()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
