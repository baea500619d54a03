"""DurableForest: an exact forest whose every acknowledged change is in a database first.

The forest (:class:`~forgetting.forest.ExactForestClassifier` or
:class:`~forgetting.forest.ExactForestRegressor`) is a pure function of (rows, parameters,
key), so its store needs no trees: the ``rows`` table holds each row's id, float32 features
(NaN = missing) and target (a class index, or the float target), ``meta`` the parameters,
fitted attributes and the key's public fingerprint, ``receipts`` every change. Opening grows
the forest again from the stored rows (one fit: the estimator's ``from_snapshot`` checks
every field first, :mod:`forgetting.persistence.forest_state`) — so after a crash the model
is exactly the last committed state.

A forget or insert changes the in-memory forest first (its own checks refuse a bad request
before anything changes), then commits the rows and the receipt in one transaction, and for
SQLite purges the write-ahead log's old page images of removed rows before it returns
(:meth:`SQLStore.purge_logs`). If the commit fails, the model is grown again from the store
before the error is raised; while that fails too, every call raises :class:`StoreError` until
:meth:`reload` succeeds. Forgetting every row of a class changes the class indices of the
rows that remain, so that transaction rewrites every row and the model entry.

The database, its locks (one writer per store through any path, link or PostgreSQL role),
atomic creation and the receipt tables are :class:`~.sql.SQLStore` and :mod:`.create`,
shared with :class:`~forgetting.store.DurableModel`; ``rows.in_pool`` is 0 for every row (D°
is recomputed from the keyed ids) and a forest store has no instance tables.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ..estimators import ExactForestClassifier, ExactForestRegressor
from ..ids import listing, normalize_ids
from ..io.model_format import ModelFileError, dumps, loads
from ..persistence import library_versions, restored, version_mismatch
from ..persistence.forest_state import forest_snapshot, forest_state
from ..receipts import Receipt
from ..schema.membership import canonical_id, id_bytes
from .connection import describe
from .create import create_atomically
from .decode import FOREST_CLASSES, _decode_id
from .encode import KEY_KIND, META_KIND
from .errors import StoreCorrupt, StoreError, StoreKindError
from .reads import StoreReads, as_receipt
from .receipt_log import STATUSES, id_status
from .sql import SQLStore

_CLASSES = {cls.__name__: cls for cls in (ExactForestClassifier, ExactForestRegressor)}


class DurableForest(StoreReads):
    """An exact forest mirrored in a store (SQLite file path or PostgreSQL DSN)."""

    def __init__(self, store: SQLStore, estimator, next_seq: int, names: list[str] | None):
        self._store = store
        self._model = estimator
        self._next_seq = next_seq
        self._names = names
        self._lock = threading.RLock()
        self._available = True
        self._closed = False

    # -- construction --------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        location: str,
        estimator,
        X,
        y,
        ids: Sequence[Hashable] | None = None,
        *,
        feature_names: list[str] | None = None,
        overwrite: bool = False,
        store_key: bool = False,
    ) -> DurableForest:
        """Fit ``estimator`` (an exact forest) and write a new store at ``location``, all or
        nothing (:func:`.create.create_atomically`: a running writer makes this raise
        :class:`StoreBusy` before any fitting). ``feature_names`` records the columns of an
        array ``X`` (a DataFrame's are the estimator's own). The secret key is stored only
        with ``store_key=True``."""
        if type(estimator) not in _CLASSES.values():
            raise TypeError(
                "a DurableForest holds an ExactForestClassifier or ExactForestRegressor, not "
                f"{type(estimator).__name__} (QSS models go to DurableModel.create)"
            )
        names = None if feature_names is None else [str(n) for n in feature_names]

        def fit() -> None:
            estimator.fit(X, y, ids)
            if names is not None and len(names) != estimator.n_features_in_:
                raise ValueError(
                    f"{len(names)} feature names for {estimator.n_features_in_} features"
                )

        store, next_seq = create_atomically(
            location, overwrite, fit, lambda new: _write_new(new, estimator, names, store_key)
        )
        return cls(store, estimator, next_seq, names)

    @classmethod
    def open(
        cls, location: str, *, read_only: bool = False, secret_key: bytes | str | None = None
    ) -> DurableForest:
        """Grow the forest again from its store (after a restart or a crash).

        ``read_only=True`` creates and changes nothing and refuses changes; a writable open
        holds the store's writer lock for its lifetime (:class:`StoreBusy` if another writer
        holds it). ``secret_key``: the key the forest was fitted with, unless it was stored
        with ``store_key=True`` or derived from ``random_state``.
        """
        store = SQLStore(str(location), read_only=read_only)
        try:
            estimator, next_seq, names = _read(store, secret_key)
        except BaseException:
            store.close()
            raise
        return cls(store, estimator, next_seq, names)

    # -- serving -------------------------------------------------------------------------
    @property
    def estimator(self):
        """The live forest estimator (replaced when the model is grown again from the
        store); read it, change it only through this object."""
        self._require_available()
        return self._model

    @property
    def available(self) -> bool:
        """False while the model must be grown again from the store before it serves."""
        return self._available and not self._closed

    @property
    def read_only(self) -> bool:
        return self._store.read_only

    @property
    def feature_names(self) -> list[str] | None:
        """Column names recorded at fit (None when fitted on a plain array without them)."""
        names = getattr(self.estimator, "feature_names_in_", None)
        if names is None:
            return None if self._names is None else list(self._names)
        return [str(n) for n in names]

    @property
    def key_is_derived(self) -> bool:
        """True when the membership key is derived from ``random_state`` (public)."""
        return self.estimator.secret_key is None

    queued_writes = 0
    """Writes are committed one at a time under the lock: none is ever queued here."""

    takes_missing_values = True
    """A forest takes NaN features natively (their own bin): the CLI reads empty cells as
    missing values for it."""

    def predict(self, X) -> np.ndarray:
        return self.estimator.predict(X)

    def predict_proba(self, X) -> np.ndarray:
        return self.estimator.predict_proba(X)

    def state_digest(self) -> str:
        return self.estimator.state_digest()

    def receipts_for(self, row_id: Hashable) -> list[dict]:
        """Every receipt naming ``row_id``, oldest first (the keyed id hash the receipts
        carry, so the id itself is never stored in them)."""
        id_hash = self.estimator.receipt_hash(row_id)
        with self._lock:
            return self._store.receipts_for(id_hash)

    def lookup(self, row_id: Hashable) -> dict:
        """What the store knows of one id: its ``id_hash``, every receipt naming it (oldest
        first), ``status`` (a key of :data:`~.receipt_log.STATUSES`) and
        ``rebuild_pending``: whether an instance its deletion hit still rebuilds."""
        with self._lock:
            model = self.estimator
            row_id = canonical_id(row_id)
            id_hash = model.receipt_hash(row_id)
            receipts = self._store.receipts_for(id_hash)
            status = id_status(receipts, not model.engine_.unknown_ids([row_id]))
            rebuilding = set(model.engine_.rebuilding)
        pending = status == "forgotten" and any(
            r in rebuilding for r in receipts[-1].get("instances_hit") or ()
        )
        return {
            "id_hash": id_hash,
            "status": status,
            "explanation": STATUSES[status],
            "rebuild_pending": pending,
            "receipts": receipts,
        }

    def stats(self) -> dict:
        """What the service's /stats and the console's health page show."""
        with self._lock:
            model = self.estimator
            forest = model.engine_
            seconds = list(forest.rebuild_seconds)
            size = self._store.size_bytes()
            return {
                "task": self.task,
                "mode": "forest",
                "estimator": type(model).__name__,
                "n_estimators": model.n_estimators,
                "n_rows": model.n_rows_,
                "n_features": self.n_features,
                "feature_names": self.feature_names,
                "classes": self.classes,
                "instances": forest.instance_stats(),
                "pending_rebuilds": forest.rebuilding,
                "queued_writes": 0,
                "rebuilds_run": len(seconds),
                "mean_rebuild_seconds": float(np.mean(seconds)) if seconds else None,
                "effective_rho": model.effective_rho_,
                "state_digest": model.state_digest(),
                "key_is_derived": self.key_is_derived,
                "read_only": self.read_only,
                "backend": self._store.dialect.name,
                "store_format": self._store.format,
                "store_bytes": size,
            }

    def verify(self) -> dict:
        """Grow a forest from the stored rows alone and compare its structure digest with
        the live one's (``ok`` when equal). Read-only opens compare against one consistent
        read of the store, adopted as a reload (another process may write meanwhile). What
        the database holds besides the store's tables is reported first
        (:meth:`SQLStore.schema_problems`), and then nothing is refit."""
        started = time.perf_counter()
        with self._lock:
            foreign = self._store.schema_problems()  # first: a foreign object acts on reads
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
                self.reload()
            live = self.estimator.structure_digest()
            fresh, _, _ = _read(self._store, self._secret())
            refit = fresh.structure_digest()
            return {
                "ok": refit == live,
                "state_digest": live,
                "refit_digest": refit,
                "problems": [],
                "n_rows": fresh.n_rows_,
                "seconds": time.perf_counter() - started,
            }

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Block until no instance rebuilds in the background (``n_instances`` > 1: a forget
        that hit one instance's D°)."""
        self.estimator.wait_for_rebuilds(timeout)

    # -- changes -------------------------------------------------------------------------
    def forget(self, ids: Sequence[Hashable], *, erase_inputs: bool = False) -> Receipt:
        """Forget rows by id; returns after the removal and its receipt are committed (and,
        for SQLite, the log's old images of the rows purged). A forest always removes the
        whole row (``erase_inputs`` is accepted for the service's sake and changes nothing).

        Ids forgotten earlier (a forget receipt names them) make the call idempotent: when
        none of the ids is left to forget, the stored receipt is returned with
        ``already_forgotten=True``; otherwise the reply counts them in
        ``already_forgotten_ids``. Ids never held raise KeyError, and nothing changes."""
        with self._lock:
            self._require_writable()
            model = self._model
            classes = getattr(model, "classes_", None)
            id_list = normalize_ids(ids)
            unknown = model.engine_.unknown_ids(id_list)
            earlier = self._earlier_forgets(unknown)
            if unknown and len(earlier) == len(id_list):
                self._store.purge_logs()  # a retry after a busy purge finishes it here
                return as_receipt({**earlier[-1], "already_forgotten": True})
            id_list = [i for i in id_list if i not in set(unknown)] if earlier else id_list
            receipt = model.forget(id_list)
            keys = [id_bytes(i) for i in id_list]

            rewrite = classes is not None and not np.array_equal(classes, model.classes_)

            def write(cur) -> None:
                if rewrite:
                    _rewrite(self._store, cur, model, self._names)
                else:
                    self._store.delete_rows(cur, keys)
                self._store.add_receipt(cur, receipt.to_dict())

            self._commit(write, "recording the forget")
            if rewrite:
                self._next_seq = model.n_rows_
            self._store.purge_logs()
            if earlier:
                return as_receipt({**receipt.to_dict(), "already_forgotten_ids": len(earlier)})
            return receipt

    def _earlier_forgets(self, unknown: list) -> list[dict]:
        """The latest receipts of those of ``unknown`` whose latest receipt is a forget; an
        id without one raises KeyError (never held), so nothing changes."""
        earlier, never = [], []
        for row_id in unknown:
            found = self._store.receipts_for(self._model.receipt_hash(row_id))
            if found and found[-1].get("operation") == "forget":
                earlier.append(found[-1])
            else:
                never.append(row_id)
        if never:
            raise KeyError(f"unknown ids (never inserted, or already forgotten): {listing(never)}")
        return earlier

    def insert(self, X, y, ids: Sequence[Hashable]) -> Receipt:
        """Add labeled rows; returns after they and their receipt are committed."""
        with self._lock:
            self._require_writable()
            model = self._model
            id_list = normalize_ids(ids)
            receipt = model.insert(X, y, id_list)
            rows = _records(model, id_list, self._next_seq)

            def write(cur) -> None:
                self._store.insert_rows(cur, rows)
                self._store.add_receipt(cur, receipt.to_dict())

            self._commit(write, "recording the insert")
            self._next_seq += len(rows)
            return receipt

    def _commit(self, write, doing: str) -> None:
        try:
            with self._store.transaction(doing) as cur:
                write(cur)
        except BaseException as err:
            self._recover()
            if isinstance(err, StoreError) or not isinstance(err, Exception):
                raise
            raise StoreError(f"{describe(self._store.location)}: {doing} failed ({err})") from err

    def reload(self) -> None:
        """Grow the model again from the store (after a failed commit)."""
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            self._available = False
            estimator, next_seq, _ = _read(self._store, self._secret())
            self._model, self._next_seq, self._available = estimator, next_seq, True

    def _recover(self) -> None:
        try:
            self.reload()
        except Exception:  # noqa: BLE001 - the commit's error is the one raised
            self._available = False

    def _secret(self) -> bytes | str | None:
        return self._model.secret_key

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Release the store (and its writer lock); the object serves no more."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._store.close()

    def __enter__(self) -> DurableForest:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _require_available(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")
        if not self._available:
            raise StoreError(
                f"{describe(self._store.location)}: the model is not in step with its store "
                "after a failed write; call reload() (retry later)"
            )

    def _require_writable(self) -> None:
        self._require_available()
        if self._store.read_only:
            raise StoreError(f"{describe(self._store.location)} was opened read-only")


# -- what the store holds ------------------------------------------------------------------
def _info(estimator, names: list[str] | None) -> dict:
    state = forest_state(estimator)
    return {
        "estimator": state.pop("class"),
        **state,
        "feature_names": names,
        "libraries": library_versions(),
    }


def _records(estimator, id_list: list | None, first_seq: int) -> list[tuple]:
    """(id_key, seq, features, target, in_pool) of the rows ``id_list`` (every row held,
    in storage order, when None), sequence numbers from ``first_seq``."""
    ids, raw, X, y = estimator.engine_.rows()
    if id_list is not None:
        where = {row_id: p for p, row_id in enumerate(ids)}
        pos = [where[i] for i in id_list]
        raw, X, y = [raw[p] for p in pos], X[pos], y[pos]
    X = np.ascontiguousarray(X, dtype="<f4")
    return [(raw[p], first_seq + p, X[p].tobytes(), float(y[p]), 0) for p in range(len(raw))]


def _write_new(store: SQLStore, estimator, names: list[str] | None, store_key: bool) -> int:
    """Every table of a new forest store, in one transaction; returns the next seq."""
    meta = {"model": dumps(_info(estimator, names), META_KIND)}
    if store_key and estimator.secret_key is not None:
        meta["secret_key"] = dumps(estimator.secret_key, KEY_KIND)
    rows = _records(estimator, None, 0)
    with store.transaction("writing the new store") as cur:
        store.create_tables(cur, meta, 0)
        store.insert_rows(cur, rows)
    return len(rows)


def _rewrite(store: SQLStore, cur, estimator, names: list[str] | None) -> None:
    """Every row and the model entry again (the class indices moved: a class vanished)."""
    store.delete_all_rows(cur)
    store.insert_rows(cur, _records(estimator, None, 0))
    store.set_meta(cur, "model", dumps(_info(estimator, names), META_KIND))


def _read(store: SQLStore, secret_key: bytes | str | None) -> tuple[Any, int, list | None]:
    """The forest grown from the store's rows, every field checked; the next seq; the
    feature names recorded at creation."""
    loc = describe(store.location)
    meta, records, _ = store.read_all()
    try:
        info = loads(meta["model"], META_KIND, "model entry") if "model" in meta else None
    except ModelFileError as err:
        raise _corrupt(loc, "table meta", err) from None
    if not isinstance(info, dict):
        raise _corrupt(loc, "table meta", "the model entry is missing")
    name = info.get("estimator")
    if name not in FOREST_CLASSES:
        raise StoreKindError(
            f"{loc} holds a {str(name)[:40]}, not an exact forest: open it with "
            "forgetting.store.DurableModel"
        )
    if store.n_instances != 0:
        raise _corrupt(loc, "table meta", "a forest store has no instances")
    mismatch = version_mismatch(info.get("libraries"))
    if mismatch:
        raise ValueError(f"{loc}: {mismatch}: bitwise exactness needs the same library versions")
    if secret_key is None and "secret_key" in meta:
        try:
            secret_key = loads(meta["secret_key"], KEY_KIND, "secret key entry")
        except ModelFileError as err:
            raise _corrupt(loc, "table meta", err) from None
    fitted = info.get("fitted")
    width = fitted.get("n_features_in_") if isinstance(fitted, dict) else None
    if type(width) is not int or width < 1:
        raise _corrupt(loc, "table meta", "n_features_in_ must be a positive integer")
    ids, X, y, next_seq = _rows(loc, records, width, "classes_" in fitted)
    state = {**info, "class": name, "rows": {"ids": ids, "X": X, "y": y}}
    cls = _CLASSES[name]
    try:
        snapshot = forest_snapshot(cls, state, loc)
        if not snapshot.key_derived and secret_key is None:
            raise ValueError(
                f"{loc}: this model was fitted with a secret key, which is not in the store; "
                "pass it as secret_key"
            )
        estimator = restored(cls, snapshot, secret_key, loc)
    except ModelFileError as err:
        raise _corrupt(loc, "the stored forest", str(err).removeprefix(f"{loc}: ")) from None
    names = info.get("feature_names")
    if names is not None and not (
        isinstance(names, list) and len(names) == width and all(type(n) is str for n in names)
    ):
        raise _corrupt(loc, "table meta", f"feature_names must be {width} strings or null")
    return estimator, next_seq, names


def _rows(loc: str, records: list[tuple], width: int, classifier: bool):
    """Ids, features and targets of the stored rows (by seq), each field checked."""
    n = len(records)
    ids: list = []
    X = np.empty((n, width), np.float32)
    y = np.empty(n, np.int64 if classifier else np.float64)
    next_seq = 0
    for p, (key, seq, features, target, in_pool, *_) in enumerate(records):
        where = f"table rows, row {p}"
        try:
            ids.append(_decode_id(bytes(key)))
            if len(features) != 4 * width:
                raise ValueError(f"{len(features)} feature bytes, expected {4 * width}")
            X[p] = np.frombuffer(bytes(features), "<f4")
            if target is None or not math.isfinite(float(target)):
                raise ValueError("a forest row needs a finite target")
            if classifier and float(target) != int(target):
                raise ValueError(f"class index {target!r} is not an integer")
            y[p] = target
            if in_pool != 0:
                raise ValueError("in_pool must be 0 in a forest store")
            next_seq = max(next_seq, int(seq) + 1)
        except (ValueError, TypeError, UnicodeDecodeError, OverflowError) as err:
            raise _corrupt(loc, where, err) from None
    return ids, X, y, next_seq


def _corrupt(loc: str, where: str, problem: Any) -> StoreCorrupt:
    text = " ".join(str(problem).split())
    return StoreCorrupt(
        f"{loc}: {where}: {text}; the store is damaged or was tampered with — restore it "
        "from a backup or create it again"
    )
