"""DurableForest: the durable store of an exact forest (:class:`~.durable.DurableModel`'s
family for ExactForestClassifier and ExactForestRegressor).

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
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..estimators import ExactForestClassifier, ExactForestRegressor
from ..ids import listing, normalize_ids
from ..io.model_format import ModelFileError, dumps, loads
from ..persistence import library_versions, restored, version_mismatch
from ..persistence.forest_state import forest_snapshot, forest_state
from ..receipts import Receipt, attribution
from ..schema.membership import id_bytes
from .connection import describe
from .create import create_atomically
from .decode import FOREST_CLASSES, _decode_id
from .durable import DurableModel
from .encode import KEY_KIND, META_KIND, PRIVACY_KIND
from .errors import StoreCorrupt, StoreError, StoreKindError
from .reads import as_receipt
from .sql import SQLStore

_CLASSES = {cls.__name__: cls for cls in (ExactForestClassifier, ExactForestRegressor)}


class DurableForest(DurableModel):
    """An exact forest mirrored in a store: its rows only (opened and created through
    :class:`~.durable.DurableModel`; ``DurableForest.open`` refuses another family's store)."""

    estimators = FOREST_CLASSES
    takes_missing_values = True
    """A forest takes NaN features natively (their own bin): the CLI reads empty cells as
    missing values for it."""

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
    def _create(
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
        """Fit the forest and write a new store (:func:`.create.create_atomically`)."""
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
        return cls(store, estimator, next_seq, names)._start_log()

    @classmethod
    def _open(cls, store: SQLStore, secret_key: bytes | str | None) -> DurableForest:
        """Grow the forest again from its store's rows (one fit), every field checked."""
        estimator, next_seq, names = _read(store, secret_key)
        return cls(store, estimator, next_seq, names)._start_log()

    # -- serving -------------------------------------------------------------------------
    @property
    def estimator(self):
        """The live forest estimator (replaced when the model is grown again from the
        store); read it, change it only through this object."""
        self._require_available()
        return self._model

    @property
    def feature_names(self) -> list[str] | None:
        """Column names recorded at fit (None when fitted on a plain array without them)."""
        names = getattr(self.estimator, "feature_names_in_", None)
        if names is None:
            return None if self._names is None else list(self._names)
        return [str(n) for n in names]

    def _family_stats(self) -> dict:
        model = self._model
        return {
            "mode": "forest",
            "n_estimators": model.n_estimators,
            "instances": model.engine_.instance_stats(),
        }

    def _refit_digest(self) -> tuple[str, str, list[str], int]:
        """Grow a forest from the stored rows alone: its state digest must be the live
        one's, and its trees the live trees (their structure digests are compared too: a
        problem line if they differ). Read-only opens compare against one consistent read
        of the store, adopted as a reload (another process may write meanwhile)."""
        with self._lock:
            if self._store.read_only:
                self.reload()
            model = self.estimator
            model.wait_for_rebuilds()
            live = model.state_digest()
            fresh, _, _ = _read(self._store, self._secret())
            refit = fresh.state_digest()
            problems = []
            if refit == live and fresh.structure_digest() != model.structure_digest():
                problems.append(
                    "the live trees differ from the trees the stored rows grow (structure "
                    "digests differ)"
                )
            return live, refit, problems, fresh.n_rows_

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Block until no instance rebuilds in the background (``n_instances`` > 1: a forget
        that hit one instance's D°)."""
        self.estimator.wait_for_rebuilds(timeout)

    # -- changes -------------------------------------------------------------------------
    def forget(
        self,
        ids: Sequence[Hashable],
        *,
        erase_inputs: bool = False,
        operator: str | None = None,
        reason: str | None = None,
    ) -> Receipt:
        """Forget rows by id; returns after the removal and its receipt are committed (and,
        for SQLite, the log's old images of the rows purged). A forest always removes the
        whole row (``erase_inputs`` is accepted for the service's sake and changes nothing).
        ``operator`` (a name) and ``reason`` are recorded in the receipt.

        Ids forgotten earlier (a forget receipt names them) make the call idempotent: when
        none of the ids is left to forget, the stored receipt is returned with
        ``already_forgotten=True``; otherwise the reply counts them in
        ``already_forgotten_ids``. Ids never held raise KeyError, and nothing changes."""
        notes = attribution(operator, reason)
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
            receipt = replace(model.forget(id_list), **notes)
            keys = [id_bytes(i) for i in id_list]

            rewrite = classes is not None and not np.array_equal(classes, model.classes_)

            def write(cur) -> None:
                if rewrite:
                    _rewrite(self._store, cur, model, self._names)
                else:
                    self._store.delete_rows(cur, keys)
                _write_ledger(self._store, cur, model)
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

    def insert(
        self,
        X,
        y,
        ids: Sequence[Hashable],
        *,
        operator: str | None = None,
        reason: str | None = None,
    ) -> Receipt:
        """Add labeled rows; returns after they and their receipt are committed (with
        ``operator`` and ``reason``, as :meth:`forget`)."""
        notes = attribution(operator, reason)
        with self._lock:
            self._require_writable()
            model = self._model
            id_list = normalize_ids(ids)
            receipt = replace(model.insert(X, y, id_list), **notes)
            rows = _records(model, id_list, self._next_seq)

            def write(cur) -> None:
                self._store.insert_rows(cur, rows)
                _write_ledger(self._store, cur, model)
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

    def close(self) -> None:
        """Release the store (and its writer lock); the object serves no more."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._store.close()


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
    ledger = _ledger(estimator)
    if ledger is not None:
        meta["privacy"] = ledger
    if store_key and estimator.secret_key is not None:
        meta["secret_key"] = dumps(estimator.secret_key, KEY_KIND)
    rows = _records(estimator, None, 0)
    with store.transaction("writing the new store") as cur:
        store.create_tables(cur, meta, 0)
        store.insert_rows(cur, rows)
    return len(rows)


def _ledger(estimator) -> bytes | None:
    """mode="dp": the encoded privacy ledger (forgotten-id tags, class lists); else None."""
    ledger = estimator.ledger_state() if hasattr(estimator, "ledger_state") else None
    return None if ledger is None else dumps(ledger, PRIVACY_KIND)


def _write_ledger(store: SQLStore, cur, estimator) -> None:
    """The ledger goes with every write, so a reopened model refuses a forgotten id as this
    one does (and its ``privacy_`` counts the same class lists)."""
    ledger = _ledger(estimator)
    if ledger is not None:
        store.set_meta(cur, "privacy", ledger)


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
    if "privacy" in meta:
        try:
            state["privacy"] = loads(meta["privacy"], PRIVACY_KIND, "privacy ledger")
        except ModelFileError as err:
            raise _corrupt(loc, "table meta", err) from None
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
