"""DurableModel: a QSS estimator whose every acknowledged change is in a database first.

A deletion is acknowledged (``forget`` returns) only after the transaction that removes the
row, clears the schemas it invalidated and records the receipt has committed — and, for
SQLite, after the write-ahead log holding old page images has been checkpointed away. Crash
at any moment and :meth:`DurableModel.open` rebuilds the very state a fit on the stored rows
would give: the model is a pure function of (rows, configuration), the store holds exactly
those, and instances whose schema was not durably persisted are rebuilt on open.

Lock order is always DurableModel lock → engine lock. The engine calls ``on_install`` under
its own lock when a background rebuild lands; that only wakes the persister thread, which
then takes both locks in the usual order and writes the new schema and contributions.
"""

from __future__ import annotations

import json
import pickle
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..ensemble import QSSEngine
from ..estimators import QSSClassifier, QSSRegressor
from ..persistence import library_versions
from ..schema.membership import canonical_id, id_bytes, receipt_hash
from .sql import SQLStore, is_postgres

_ESTIMATORS = {"QSSClassifier": QSSClassifier, "QSSRegressor": QSSRegressor}


def _decode_id(key: bytes) -> int | str:
    kind, value = key[:2], key[2:].decode("utf-8")
    return int(value) if kind == b"i:" else value


class DurableModel:
    """A fitted QSS estimator mirrored in a store (SQLite file path or PostgreSQL DSN)."""

    def __init__(self, store: SQLStore, estimator, next_seq: int, persisted: list):
        self._store = store
        self.estimator = estimator
        self._next_seq = next_seq
        self._persisted = persisted
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closed = False
        self._persist_error: BaseException | None = None
        estimator.engine_.on_install = lambda r: self._wake.set()
        self._persister = threading.Thread(target=self._persist_loop, daemon=True, name="qss-db")
        self._persister.start()
        self._wake.set()

    # -- construction --------------------------------------------------------------------
    @classmethod
    def create(
        cls, location: str, estimator, X, y, ids=None, *, overwrite: bool = False
    ) -> DurableModel:
        """Fit ``estimator`` and write a new store at ``location``."""
        location = str(location)
        if not is_postgres(location) and Path(location).exists() and not overwrite:
            raise FileExistsError(f"{location} exists; pass overwrite=True to replace it")
        estimator.fit(X, y, ids)
        estimator.wait_for_rebuilds()
        store = SQLStore(location, create=True)
        engine = estimator.engine_
        meta = {
            "class": type(estimator).__name__.encode(),
            "params": pickle.dumps(estimator.get_params(deep=False), protocol=5),
            "fitted": pickle.dumps(
                {k: v for k, v in vars(estimator).items() if k.endswith("_") and k != "engine_"},
                protocol=5,
            ),
            "key": engine._key,
            "n_instances": json.dumps(estimator.n_instances).encode(),
            "n_outputs": json.dumps(engine.config.schema.n_outputs).encode(),
            "libraries": json.dumps(library_versions()).encode(),
        }
        store.create(meta, estimator.n_instances)
        model = cls(store, estimator, 0, [None] * estimator.n_instances)
        with model._lock, engine._lock, store.transaction() as cur:
            model._write_all_rows(cur)
            model._sync_instances(cur)
        store.purge_logs()
        return model

    @classmethod
    def open(cls, location: str) -> DurableModel:
        """Restore the model from its store (after a restart or a crash)."""
        store = SQLStore(str(location))
        meta = store.meta()
        versions = json.loads(meta["libraries"])
        if versions != library_versions():
            raise ValueError(
                f"store written with {versions}, running {library_versions()}: bitwise "
                "exactness needs the same library versions"
            )
        estimator = _ESTIMATORS[meta["class"].decode()](**pickle.loads(meta["params"]))
        for name, value in pickle.loads(meta["fitted"]).items():
            setattr(estimator, name, value)
        n_outputs = json.loads(meta["n_outputs"])
        config = estimator._config(n_outputs)
        records = store.load_rows()
        schemas = store.load_schemas()
        p = store.n_instances
        ids = [_decode_id(bytes(r[0])) for r in records]
        raw = [bytes(r[0]) for r in records]
        d = estimator.n_features_in_
        X = np.frombuffer(b"".join(bytes(r[2]) for r in records), dtype=np.float32)
        X = X.reshape(len(records), d).copy()
        is_clf = estimator._task == "classification"
        targets = np.array(
            [(-1 if is_clf else np.nan) if r[3] is None else r[3] for r in records],
            dtype=np.int64 if is_clf else np.float64,
        )
        in_pool = np.array([bool(r[4]) for r in records], dtype=bool)
        labeled = targets >= 0 if is_clf else ~np.isnan(targets)
        contributions = []
        for r in range(p):
            blobs = [rec[5 + r] for rec, lab in zip(records, labeled, strict=True) if lab]
            if schemas[r] is None or any(b is None for b in blobs):
                schemas[r] = None
                contributions.append(None)
                continue
            contributions.append(_decode_contributions(schemas[r], blobs, n_outputs))
        engine = QSSEngine.restore(
            config, meta["key"], (ids, raw, X, targets, in_pool), schemas, contributions
        )
        estimator.engine_ = engine
        persisted = [None if engine.instances[r] is None else schemas[r] for r in range(p)]
        return cls(store, estimator, store.max_seq() + 1, persisted)

    # -- properties ----------------------------------------------------------------------
    @property
    def task(self) -> str:
        return self.estimator._task

    @property
    def n_features(self) -> int:
        return self.estimator.n_features_in_

    @property
    def classes(self) -> list | None:
        classes = getattr(self.estimator, "classes_", None)
        return None if classes is None else classes.tolist()

    # -- reads ---------------------------------------------------------------------------
    def predict(self, X) -> np.ndarray:
        return self.estimator.predict(X)

    def predict_proba(self, X) -> np.ndarray:
        if self.task != "classification":
            raise TypeError("predict_proba is only defined for classifiers")
        return self.estimator.predict_proba(X)

    def state_digest(self) -> str:
        return self.estimator.state_digest()

    def receipt(self, id_hash: str) -> dict | None:
        """The latest receipt naming this keyed id hash, or None."""
        found = self._store_call(lambda: self._store.receipts_for(id_hash))
        return found[-1] if found else None

    def stats(self) -> dict:
        engine = self.estimator.engine_
        with engine._lock:
            instances = []
            for r, inst in enumerate(engine.instances):
                info: dict[str, Any] = {"instance": r, "valid": inst is not None}
                if inst is not None:
                    cb = inst.schema.codebook
                    info.update(
                        schema_rows=inst.schema.n_schema_rows,
                        n_levels=cb.n_levels,
                        n_centroids=cb.n_centroids,
                    )
                instances.append(info)
            return {
                "task": self.task,
                "mode": self.estimator.mode,
                "n_rows": engine.rows.size,
                "n_features": self.n_features,
                "classes": self.classes,
                "instances": instances,
                "pending_rebuilds": engine.pending_rebuilds(),
                "rebuilds_run": len(engine.rebuild_seconds),
                "mean_rebuild_seconds": float(np.mean(engine.rebuild_seconds))
                if engine.rebuild_seconds
                else None,
                "state_digest": engine.state_digest(),
                "backend": self._store.dialect.name,
            }

    def verify(self) -> dict:
        """Refit from the stored rows alone and compare state digests (an external audit)."""
        started = time.perf_counter()
        self.wait_for_rebuilds()
        with self._lock:
            digest = self.state_digest()
            records = self._store_call(self._store.load_rows)
            est = self.estimator
            X = np.frombuffer(b"".join(bytes(r[2]) for r in records), dtype=np.float32)
            X = X.reshape(len(records), self.n_features)
            ids = [_decode_id(bytes(r[0])) for r in records]
            if self.task == "classification":
                y = np.array([-1 if r[3] is None else est.classes_[int(r[3])] for r in records])
            else:
                y = np.array([np.nan if r[3] is None else r[3] for r in records], dtype=float)
            fresh = type(est)(**est.get_params(deep=False)).fit(X, y, ids)
            refit = fresh.state_digest()
        return {
            "ok": refit == digest,
            "state_digest": digest,
            "refit_digest": refit,
            "n_rows": len(records),
            "seconds": time.perf_counter() - started,
        }

    # -- writes --------------------------------------------------------------------------
    def forget(self, ids: Sequence[Hashable], *, erase_inputs: bool = False) -> dict:
        """Forget rows durably; returns the receipt once the deletion is committed.

        Ids already forgotten (with a receipt in the store) make the call idempotent: if no
        requested id is still present, the stored receipt is returned with
        ``already_forgotten=True``. Unknown ids raise KeyError and change nothing.
        """
        with self._lock:
            self._raise_persist_error()
            est = self.estimator
            if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
                raise TypeError("ids must be a sequence of ints or strings")
            wanted = [canonical_id(i) for i in ids]
            if len(set(wanted)) != len(wanted):
                raise ValueError("duplicate ids in the request")
            present = [i for i in wanted if i in est.engine_.rows.position]
            absent = [i for i in wanted if i not in est.engine_.rows.position]
            earlier, unknown = [], []
            for row_id in absent:
                found = self._store.receipts_for(receipt_hash(est.engine_._key, id_bytes(row_id)))
                if not found or found[-1]["operation"] != "forget":
                    unknown.append(row_id)
                else:
                    earlier.append(found[-1])
            if unknown:
                raise KeyError(
                    f"unknown ids (never inserted): {unknown[:10]}"
                    + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
                )
            if not present:
                if not earlier:
                    raise ValueError("no ids given")
                return {**earlier[-1], "already_forgotten": True}
            engine_before = est.engine_
            receipt = est.forget(present, erase_inputs=erase_inputs).to_dict()
            keys = [id_bytes(i) for i in present]
            with est.engine_._lock, self._store.transaction() as cur:
                if est.engine_ is not engine_before:
                    self._rewrite(cur)
                elif receipt["scope"] == "label":
                    self._store.unlabel_rows(cur, keys)
                else:
                    self._store.delete_rows(cur, keys)
                self._sync_instances(cur)
                self._store.add_receipt(cur, receipt)
            self._store.purge_logs()
            if earlier:
                receipt["already_forgotten_ids"] = len(earlier)
            return receipt

    def insert(self, X, y, ids) -> dict:
        """Insert labeled rows durably; returns the receipt once committed."""
        with self._lock:
            self._raise_persist_error()
            est = self.estimator
            receipt = est.insert(X, y, ids).to_dict()
            engine = est.engine_
            with engine._lock, self._store.transaction() as cur:
                pos = engine.rows.positions_of([canonical_id(i) for i in ids])
                self._store.insert_rows(cur, self._records(pos))
                self._sync_instances(cur)
                self._store.add_receipt(cur, receipt)
            return receipt

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Wait until rebuilds have landed in memory *and* been written to the store."""
        self.estimator.wait_for_rebuilds(timeout)
        with self._lock:
            self._persist_now()
        self._raise_persist_error()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.set()
        self._persister.join(timeout=30)
        self._store.close()

    def __enter__(self) -> DurableModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------
    def _store_call(self, fn):
        with self._lock:
            return fn()

    def _records(self, pos: np.ndarray) -> list[tuple]:
        """Row tuples for the store, with contributions for instances persisted as current."""
        engine = self.estimator.engine_
        rows = engine.rows
        labeled = rows.labeled(pos)
        out = []
        for i, p in enumerate(pos):
            target = None if not labeled[i] else float(rows.targets[p])
            blobs = []
            for r, inst in enumerate(engine.instances):
                current = inst is not None and inst.schema is self._persisted[r]
                blobs.append(
                    rows.codes[r][p].tobytes() + rows.residuals[r][p].tobytes()
                    if current and labeled[i]
                    else None
                )
            out.append(
                (
                    id_bytes(rows.ids[p]),
                    self._next_seq + i,
                    rows.X[p].tobytes(),
                    target,
                    int(rows.in_pool[p]),
                    *blobs,
                )
            )
        self._next_seq += len(pos)
        return out

    def _write_all_rows(self, cur) -> None:
        rows = self.estimator.engine_.rows
        self._store.insert_rows(cur, self._records(np.arange(rows.size)))

    def _rewrite(self, cur) -> None:
        """The estimator refitted itself (a class vanished): replace everything."""
        self._store._execute(cur, "DELETE FROM rows")
        meta_fitted = pickle.dumps(
            {k: v for k, v in vars(self.estimator).items() if k.endswith("_") and k != "engine_"},
            protocol=5,
        )
        n_outputs = json.dumps(self.estimator.engine_.config.schema.n_outputs).encode()
        self._store._executemany(
            cur,
            "UPDATE meta SET value = ? WHERE name = ?",
            [(meta_fitted, "fitted"), (n_outputs, "n_outputs")],
        )
        self._persisted = [None] * len(self._persisted)
        self.estimator.engine_.on_install = lambda r: self._wake.set()
        self._write_all_rows(cur)

    def _sync_instances(self, cur) -> None:
        """Write every instance whose schema differs from the persisted one (under both locks):
        its new schema and all its contributions, or NULL if it is rebuilding."""
        engine = self.estimator.engine_
        rows = engine.rows
        for r, inst in enumerate(engine.instances):
            schema = None if inst is None else inst.schema
            if schema is self._persisted[r]:
                continue
            self._store.set_schema(cur, r, schema)
            self._store.clear_contributions(cur, r)
            if schema is not None:
                labeled = np.flatnonzero(rows.labeled())
                self._store.set_contributions(
                    cur,
                    r,
                    [
                        (
                            rows.codes[r][p].tobytes() + rows.residuals[r][p].tobytes(),
                            id_bytes(rows.ids[p]),
                        )
                        for p in labeled
                    ],
                )
            self._persisted[r] = schema

    def _persist_now(self) -> None:
        engine = self.estimator.engine_
        with engine._lock:
            stale = any(
                (None if inst is None else inst.schema) is not self._persisted[r]
                for r, inst in enumerate(engine.instances)
            )
            if not stale:
                return
            with self._store.transaction() as cur:
                self._sync_instances(cur)

    def _persist_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                try:
                    self._persist_now()
                except BaseException as err:  # surfaced on the next call
                    self._persist_error = err

    def _raise_persist_error(self) -> None:
        if self._persist_error is not None:
            err, self._persist_error = self._persist_error, None
            raise RuntimeError(f"writing a rebuilt instance to the store failed: {err}") from err


def _decode_contributions(schema, blobs: list, n_outputs: int):
    """Codes and residuals from stored blobs (codes bytes, then int64 residuals)."""
    cb = schema.codebook
    code_bytes = cb.n_levels * cb.code_dtype.itemsize
    raw = b"".join(bytes(b) for b in blobs)
    width = code_bytes + 8 * n_outputs
    table = np.frombuffer(raw, dtype=np.uint8).reshape(len(blobs), width)
    codes = np.ascontiguousarray(table[:, :code_bytes]).view(cb.code_dtype)
    residuals = np.ascontiguousarray(table[:, code_bytes:]).view("<i8")
    return codes.reshape(len(blobs), cb.n_levels), residuals.reshape(len(blobs), n_outputs)
