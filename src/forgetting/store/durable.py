"""DurableModel: a fitted model of any family whose every acknowledged change is in a
database first — the one durable facade.

A deletion is acknowledged (``forget`` returns) only after the transaction that records it
has committed (and, for SQLite, the write-ahead log's old images of the rows are purged).
Crash at any moment and :meth:`DurableModel.open` serves exactly the last committed state:
every model is a pure function of (rows, configuration, key), and the store holds those.

**One facade, any model.** ``DurableModel.create(location, estimator, ...)`` writes a store
for any estimator of the library, and ``DurableModel.open(location)`` opens any store —
whatever model ``forgetting fit`` or a program put in it — as the model it holds. What a
family keeps differs, and each family's store is a subclass:

* :class:`~.qss_store.QSSDurable` (QSS): the rows, each instance's schema and the rows'
  contributions, written by a group commit and, for rebuilt instances, by a persister
  thread; a reopen restores instances from them;
* :class:`~.forest.DurableForest` (the exact forest): the rows only; a reopen grows the
  forest again from them.

Everything a caller sees besides is written here once: predictions, the state digest, what
the store knows of an id (:meth:`lookup`), the receipt log's reads, :meth:`verify` (the
database's catalogue first, then a refit from the stored rows alone whose state digest must
equal the live one — the digest every receipt, ``inspect`` and the console show),
:meth:`stats`' common part, the lifecycle and the errors of a closed, unavailable or
read-only store.

**Invariant** — after any ``forget``/``insert`` returns *or raises*, the live model equals a
fit on the store's rows; if a write fails, the model is read again from the store
(:meth:`reload`) before the error is raised, and while that has not succeeded
:attr:`available` is False and every call raises :class:`StoreError`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import numpy as np

from ..io.model_format import ModelFileError, loads
from ..receipts import Receipt
from ..schema.membership import canonical_id
from .connection import describe
from .encode import META_KIND
from .errors import StoreError, StoreKindError
from .reads import StoreReads
from .receipt_log import STATUSES, id_status
from .sql import SQLStore


class DurableModel(StoreReads):
    """A fitted model mirrored in a store (SQLite file path or PostgreSQL DSN): the one
    facade (module docstring). ``DurableModel.create`` and ``DurableModel.open`` give the
    store of the model's family."""

    families: ClassVar[list[type[DurableModel]]] = []
    """Each family's store class (registered when defined, :meth:`__init_subclass__`)."""
    estimators: ClassVar[tuple[str, ...]] = ()
    """Class names of the estimators a family's store holds."""
    groups_writes = False
    """Whether concurrent :meth:`forget` and :meth:`insert` calls are committed together
    here (then a caller such as the HTTP service need not serialize them)."""
    takes_missing_values = False
    """Whether the model takes NaN features (the CLI then reads empty cells as missing)."""

    _store: SQLStore
    _lock: threading.RLock
    _closed: bool
    _available: bool

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.estimators:
            DurableModel.families.append(cls)

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
        """Fit ``estimator`` (of any family) and write a new store at ``location``, all or
        nothing: SQLite writes a scratch file beside ``location`` in one transaction and
        renames it into place, PostgreSQL one transaction. The writer lock of ``location``
        is taken first, so a running server makes this raise :class:`StoreBusy` before any
        fitting. ``feature_names`` records the columns of an array ``X`` (a DataFrame's are
        the estimator's own). The secret key is stored only with ``store_key=True``."""
        family = cls if cls.estimators else cls._family_of(type(estimator).__name__)
        if type(estimator).__name__ not in family.estimators:
            raise TypeError(
                f"a {family.__name__} holds {' or '.join(family.estimators)}, not "
                f"{type(estimator).__name__}: create it with DurableModel.create"
            )
        return family._create(
            location,
            estimator,
            X,
            y,
            ids,
            feature_names=feature_names,
            overwrite=overwrite,
            store_key=store_key,
        )

    @classmethod
    def open(
        cls, location: str, *, read_only: bool = False, secret_key: bytes | str | None = None
    ) -> DurableModel:
        """Open the store at ``location`` as the model it holds (after a restart or a crash).

        ``read_only=True`` creates and modifies nothing (not even a lock file) and refuses
        changes; a writable open takes the store's writer lock for its lifetime
        (:class:`StoreBusy` if another writer holds it, through whatever path, link or
        PostgreSQL role; :class:`StoreUnusable` for a directory, a hard-linked file or, for
        a writer, a read-only file system). ``secret_key`` is the key the model was fitted
        with, unless it was stored with ``store_key=True`` or derived from
        ``random_state``. On a family's class (``DurableForest.open``) a store of another
        family raises :class:`StoreKindError`.
        """
        store = SQLStore(str(location), read_only=read_only)
        try:
            family = cls
            if not cls.estimators:
                family = cls._family_of(_recorded_estimator(store))
            elif (recorded := _recorded_estimator(store)) is not None and (
                recorded not in cls.estimators
            ):
                raise StoreKindError(
                    f"{describe(store.location)} holds a {recorded[:40]}, not "
                    f"{' or '.join(cls.estimators)}: open it with DurableModel.open"
                )
            return family._open(store, secret_key)
        except BaseException:
            store.close()
            raise

    @classmethod
    def _family_of(cls, estimator: str | None) -> type[DurableModel]:
        """The family whose store holds ``estimator`` (a class name); the first family for
        a store whose model entry is unreadable (its reader says what is wrong)."""
        for family in cls.families:
            if estimator in family.estimators:
                return family
        if estimator is None:
            return cls.families[0]
        raise StoreKindError(f"no store holds a {str(estimator)[:40]}")

    @classmethod
    def _create(cls, location, estimator, X, y, ids, **options) -> DurableModel:
        raise NotImplementedError

    def _start_log(self) -> DurableModel:
        """A writer signs the receipts it adds (:meth:`.sql.SQLStore.start_log`: a store
        made before the log was signed gets its key pair here); closed if that fails."""
        try:
            with self._lock:  # the store's connection: a persister thread may be writing
                self._store.start_log(self.estimator.engine_.membership_key)
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def _open(cls, store: SQLStore, secret_key: bytes | str | None) -> DurableModel:
        raise NotImplementedError

    # -- what every family answers alike --------------------------------------------------
    @property
    def estimator(self):
        """The live estimator (replaced when the model is read again from the store); read
        it, change it only through this object."""
        raise NotImplementedError

    @property
    def available(self) -> bool:
        """False while the in-memory model may differ from the store (until :meth:`reload`)."""
        return self._available and not self._closed

    @property
    def read_only(self) -> bool:
        return self._store.read_only

    @property
    def key_is_derived(self) -> bool:
        """True when the membership key is derived from ``random_state`` (public)."""
        return self.estimator.secret_key is None

    def predict(self, X) -> np.ndarray:
        self._require_available()
        with self._serving_errors():
            return self.estimator.predict(X)

    def predict_proba(self, X) -> np.ndarray:
        self._require_available()
        if self.task != "classification":
            raise TypeError("predict_proba is only defined for classifiers")
        with self._serving_errors():
            return self.estimator.predict_proba(X)

    def state_digest(self) -> str:
        """The live model's state digest: the one its receipts, :meth:`stats` and
        :meth:`verify` show."""
        self._require_available()
        return self.estimator.state_digest()

    def receipts_for(self, row_id: Hashable) -> list[dict]:
        """Every receipt naming ``row_id``, oldest first (by the keyed id hash receipts
        carry: the id itself is never stored in them)."""
        self._require_available()
        id_hash = self.estimator.receipt_hash(canonical_id(row_id))
        with self._lock:
            return self._store.receipts_for(id_hash)

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
                rebuilding = set(engine.pending_rebuilds())
        status = id_status(receipts, present)
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
        """What the service's /stats, ``forgetting inspect`` and the console show: the
        model, its rows and instances, its rebuilds, the state digest and the store."""
        self._require_available()
        with self._lock:  # the store's connection, like every read of it
            size = self._store.size_bytes()
        estimator = self.estimator
        engine = estimator.engine_
        with engine.locked():
            seconds = list(engine.rebuild_seconds)
            out = {
                "task": self.task,
                "estimator": type(estimator).__name__,
                "n_rows": estimator.n_rows_,
                "n_features": self.n_features,
                "feature_names": self.feature_names,
                "classes": self.classes,
                **self._family_stats(),
                "pending_rebuilds": engine.pending_rebuilds(),
                "queued_writes": self.queued_writes,
                "rebuilds_run": len(seconds),
                "mean_rebuild_seconds": float(np.mean(seconds)) if seconds else None,
                "effective_rho": estimator.effective_rho_,
                "state_digest": engine.state_digest(),
                "key_is_derived": self.key_is_derived,
                "read_only": self.read_only,
                "backend": self._store.dialect.name,
                "store_format": self._store.format,
                "store_bytes": size,
            }
        return out

    @property
    def queued_writes(self) -> int:
        """Forgets and inserts waiting for the next commit (none unless writes are
        grouped)."""
        return 0

    def verify(self) -> dict:
        """Check the store can reproduce the live model: the database's catalogue first
        (:meth:`SQLStore.schema_problems`: anything besides the store's tables is reported
        and nothing is refit), then a model refitted from the stored rows alone, whose state
        digest must equal the live one (the digest the receipts carry), and what the family
        checks besides (``problems``, one line each). ``ok`` needs equal digests and no
        problem."""
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
        live, refit, problems, n_rows = self._refit_digest()
        return {
            "ok": refit == live and not problems,
            "state_digest": live,
            "refit_digest": refit,
            "problems": problems,
            "n_rows": n_rows,
            "seconds": time.perf_counter() - started,
        }

    # -- a family's part -----------------------------------------------------------------
    @property
    def feature_names(self) -> list[str] | None:
        """Column names recorded at fit (None when fitted on a plain array)."""
        raise NotImplementedError

    def _family_stats(self) -> dict:
        """The family's entries of :meth:`stats` (under the engine's lock)."""
        return {}

    def _refit_digest(self) -> tuple[str, str, list[str], int]:
        """(live digest, the digest of a refit from the stored rows, problems, rows)."""
        raise NotImplementedError

    def forget(
        self,
        ids: Sequence[Hashable],
        *,
        erase_inputs: bool = False,
        operator: str | None = None,
        reason: str | None = None,
    ) -> Receipt:
        """Forget rows by id, durably; the receipt once committed. ``operator`` (who asked:
        a name, never a token) and ``reason`` (why) are recorded in the stored receipt;
        ValueError when the operator is over 100 printable characters or the reason over
        500 (:func:`forgetting.receipts.attribution`)."""
        raise NotImplementedError

    def insert(
        self, X, y, ids, *, operator: str | None = None, reason: str | None = None
    ) -> Receipt:
        """Insert labeled rows, durably; the receipt once committed (``operator`` and
        ``reason`` as :meth:`forget`)."""
        raise NotImplementedError

    def reload(self) -> None:
        raise NotImplementedError

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> DurableModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
    def _serving_errors(self):
        """How a family turns its serving failures into store errors (none by default)."""
        yield


def _recorded_estimator(store: SQLStore) -> str | None:
    """The estimator class a store's model entry names, or None when it names none or
    cannot be read (the family's reader then says what is wrong)."""
    try:
        entry = store.meta().get("model")
        info = None if entry is None else loads(entry, META_KIND, "model entry")
    except (ModelFileError, StoreError, ValueError, TypeError, KeyError):
        return None
    name = info.get("estimator") if isinstance(info, dict) else None
    return name if isinstance(name, str) else None
