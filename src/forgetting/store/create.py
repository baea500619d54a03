"""Creating a store: fit the estimator and write every table of a new store, all or nothing.

SQLite: the store is written to a temporary file beside the target in one transaction and
renamed into place, so a crash leaves either no store (or the old one) or the complete new
one. PostgreSQL: one transaction. The writer lock of the target is taken first, so a running
server makes creation raise :class:`StoreBusy` before any fitting.

SQLite's locks (:mod:`.locks`), in order: the creators' lock of the path (``<real>.lock``:
one creation at a time, even while no file exists), the writer lock of the file being
replaced (a running writer refuses the creation), then the writer lock of the new file,
taken before it is renamed into place: from the moment the new file has the store's name,
its writer holds it. Just before the rename the target is checked to be the file that was
locked (or still absent), so a creation never replaces a store another creator made
meanwhile.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..io.model_format import dumps
from ..persistence import library_versions
from .connection import is_postgres
from .decode import Loaded
from .encode import KEY_KIND, META_KIND, PRIVACY_KIND, SCHEMA_KIND, records, stored_fitted
from .errors import StoreBusy
from .locks import PathLock, StoreLock, check_location, resolved
from .sql import SQLStore

T = TypeVar("T")


def create_store(
    location: str,
    estimator,
    X,
    y,
    ids,
    *,
    feature_names: list[str] | None,
    overwrite: bool,
    store_key: bool,
) -> tuple[SQLStore, Loaded]:
    """Fit ``estimator`` and write a new store at ``location``; returns the open store (its
    writer lock held) and the fitted model's bookkeeping (:meth:`DurableModel.create`)."""
    check_storable(estimator)
    store, info = create_atomically(
        location,
        overwrite,
        lambda: _fit(estimator, X, y, ids),
        lambda new: _write_new(new, estimator, feature_names, store_key),
    )
    return store, _fresh(estimator, info)


def create_atomically(
    location: str, overwrite: bool, fit: Callable[[], None], write: Callable[[SQLStore], T]
) -> tuple[SQLStore, T]:
    """Run ``fit``, then ``write`` (every table, in one transaction) into a new store at
    ``location``, all or nothing, under the locks the module docstring lists; returns the
    open store (its writer lock held) and what ``write`` returned."""
    location = str(location)
    if is_postgres(location):
        store = SQLStore(location, create=True)
        try:
            fit()
            written = write(store)
        except BaseException:
            store.close()
            raise
        return store, written
    path = Path(location)
    real = resolved(path)
    if check_location(path, real, allow_links=True) is not None and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    creating = PathLock(path)
    old: StoreLock | None = None
    new: StoreLock | None = None
    store: SQLStore | None = None
    try:
        if check_location(path, real, allow_links=True) is not None:
            old = StoreLock(path, replacing=True)  # a running writer refuses the creation
        _remove_partial_creations(real)
        fit()
        tmp = real.with_name(f".{real.name}.creating-{os.getpid()}")
        scratch = SQLStore(str(tmp), create=True, lock=False)
        try:
            written = write(scratch)
            scratch.purge_logs()
        finally:
            scratch.close()
        new = StoreLock(tmp)
        _check_unchanged(path, real, old)
        for suffix in ("-wal", "-shm"):  # a stale log would be replayed onto the new file
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{real}{suffix}")
        os.replace(tmp, real)
        new.renamed(path)
        _fsync_dir(real.parent)
        store = SQLStore(str(path), lock=new)
        store.meta()
    except BaseException:
        if store is not None:
            store.close()  # releases ``new`` too
        if new is not None:
            new.release()
        _remove_partial_creations(real)
        raise
    finally:
        if old is not None:
            old.release()
        creating.release()
    return store, written


def check_storable(estimator) -> None:
    """Refuse, before anything is fitted or locked, an estimator other than the QSS ones: a
    store holds their rows, schemas and contributions."""
    from ..estimators import QSSClassifier, QSSRegressor

    if not isinstance(estimator, QSSClassifier | QSSRegressor):
        raise TypeError(
            f"a DurableModel store holds a QSSClassifier or QSSRegressor, not "
            f"{type(estimator).__name__}; an exact forest goes to DurableForest.create, other "
            "models to a file with their save()"
        )


def _check_unchanged(path: Path, real: Path, old: StoreLock | None) -> None:
    """The target is still the file whose lock ``old`` holds (or still absent): no other
    creator replaced it meanwhile (possible only if the creators' lock file was deleted)."""
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    same = st is None if old is None else st is not None and (st.st_dev, st.st_ino) == old.key
    if not same:
        raise StoreBusy(
            f"{path} was created or replaced by another process during this creation; "
            "nothing was written, retry"
        )


def _fit(estimator, X, y, ids) -> None:
    estimator.fit(X, y, ids)
    estimator.wait_for_rebuilds()


def _fresh(estimator, info: dict) -> Loaded:
    p = estimator.n_instances
    engine = estimator.engine_
    persisted = [engine.schema_of(r) for r in range(p)]
    return Loaded(estimator, info, persisted, estimator.n_rows_, None)


def _write_new(store: SQLStore, estimator, feature_names, store_key: bool) -> dict:
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
    fitted, raw = stored_fitted(snapshot.fitted)
    info = {
        "estimator": snapshot.estimator,
        "params": snapshot.params,
        "fitted": fitted,
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
        store.insert_rows(cur, records(snapshot.engine, 0, range(p), raw))
        for r, inst in enumerate(snapshot.engine.instances):
            store.set_schema(cur, r, None if inst is None else dumps(inst.schema, SCHEMA_KIND))
    return info


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
