"""``fit`` and ``insert`` from dask collections, with the row work on a dask.distributed cluster.

The result is the model a local fit on the same rows builds, bit for bit (state digest,
predictions, and everything a later ``forget`` does): the same per-row functions run on the
workers, at the same offsets inside the same fixed-shape float blocks, and their integer
partial sums are added exactly. See docs/distributed.md for what runs where.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.builds import DEFAULT_CHUNK_ROWS, LocalRowWork, check_chunk_rows, chunk_bounds
from ..ids import normalize_ids
from ..labels import is_labeled
from ..rows import DiskRows, hand_over
from .work import DaskRowWork, ResidentChunks, map_prepare

_DASK_TYPES = {"Array", "DataFrame"}


def is_distributed_input(X: Any) -> bool:
    """True for a dask Array or dask DataFrame (checked without importing dask)."""
    cls = type(X)
    return (
        cls.__module__.split(".")[0] in {"dask", "dask_expr"}
        and cls.__name__ in _DASK_TYPES
        and hasattr(X, "__dask_graph__")
    )


def _require_dask():
    try:
        import dask  # noqa: F401
        import distributed
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            'distributed fits need dask: pip install "forgetting[distributed]"'
        ) from err
    return distributed


def _client(client):
    distributed = _require_dask()
    if client is not None:
        return client
    try:
        return distributed.get_client()
    except ValueError as err:
        raise ValueError(
            "fit_distributed needs a dask.distributed Client (pass client=, or create one: "
            "distributed.Client(...) makes itself the default)"
        ) from err


def _as_dask_array(X: Any, chunk_rows: int):
    """(dask array with row chunks of ``chunk_rows`` and one column chunk, feature names)."""
    import dask.array as da

    names = None
    if type(X).__name__ == "DataFrame":
        columns = list(X.columns)
        if columns and all(isinstance(c, str) for c in columns):
            names = np.asarray(columns, dtype=object)
        X = X.to_dask_array(lengths=True)
    elif not isinstance(X, da.Array):
        X = da.from_array(np.asarray(X), chunks=(chunk_rows, -1))
    if X.ndim != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead")
    if any(np.isnan(c) for c in X.chunks[0]):
        X = X.compute_chunk_sizes()
    return X.rechunk((chunk_rows, X.shape[1])), names


def _materialize(values: Any) -> Any:
    """A dask collection computed to numpy; anything else as given."""
    if values is None:
        return None
    if hasattr(values, "__dask_graph__"):
        values = values.compute()
    if hasattr(values, "to_numpy"):
        values = values.to_numpy()
    return values


@dataclass(frozen=True)
class ChunkDone:
    """One chunk of a distributed fit's row work, finished (what ``progress`` receives).

    A fit has ``n_chunks`` chunks in pass 1 (every row: features checked, draws, hashes), then,
    per instance, one chunk per ``chunk_rows`` labeled rows in pass 2 (contributions, reduced
    into the instance); the schema of each instance is trained on the coordinator just before
    its pass 2. ``done`` counts the chunks finished so far over the whole fit, out of
    ``total`` (both passes, every instance), so ``done == total`` once the last one is in.
    """

    stage: str
    """"pass 1" or "pass 2"."""
    instance: int | None
    """Pass 2: the instance being built (0 .. p-1); None in pass 1."""
    start: int
    stop: int
    """Pass 1: the chunk's rows ``[start, stop)``; pass 2: offsets into the labeled rows."""
    done: int
    total: int


Progress = Callable[[ChunkDone], Any]

_PROGRESS: contextvars.ContextVar[Any] = contextvars.ContextVar("fit_progress", default=None)


@contextlib.contextmanager
def fit_progress(progress: Any) -> Iterator[None]:
    """Report the chunks of every :func:`fit_distributed` in this context to ``progress``
    (as its ``progress`` argument would), also when the fit is reached through
    ``estimator.fit(dask_input)`` — the path the CLI and ``DurableModel.create`` take, which
    have no argument to pass it through."""
    token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def _reporter(progress: Any) -> Callable[[ChunkDone], None] | None:
    """A function of :class:`ChunkDone` for ``progress``: a callable is called with each; a
    tqdm-like bar (has ``update``) gets its total, a description per stage and one step per
    chunk."""
    if progress is None:
        return None
    if not hasattr(progress, "update"):
        if not callable(progress):
            raise TypeError(
                f"progress must be a callable or a tqdm-like bar, got {type(progress).__name__}"
            )
        return progress
    bar, shown = progress, [None]

    def report(event: ChunkDone) -> None:
        if getattr(bar, "total", None) != event.total:
            bar.total = event.total
        stage = event.stage
        if event.instance is not None:
            stage = f"{stage}, instance {event.instance}"
        if stage != shown[0] and hasattr(bar, "set_description"):
            bar.set_description(stage, refresh=False)
            shown[0] = stage
        bar.update(1)

    return report


def fit_distributed(
    estimator,
    X: Any,
    y: Any,
    ids: Any = None,
    *,
    client=None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    rows_dir: str | os.PathLike | None = None,
    progress: Progress | Any = None,
):
    """Fit ``estimator`` (QSSClassifier or QSSRegressor) on a dask array or DataFrame.

    ``y`` and ``ids`` may be dask collections or in-memory sequences (both are gathered: the
    coordinator keeps one target and one id per row, as the local model does). Pass 1 (feature
    validation, keyed draws, row hashes) and pass 2 (every row's contribution to every
    instance, reduced to integer sums) run on the workers of ``client`` (default: the active
    client) in chunks of ``chunk_rows`` rows, a multiple of the 1,024-row float block; each
    instance's schema is trained here on its D°. The fitted model keeps the client for its
    rebuilds (they run on the workers too, or locally once the client is closed).

    With ``rows_dir`` the features never sit in the coordinator's RAM: chunks go straight to
    a file there (see :func:`keep_rows_on_disk`), and rebuilds stream them back in chunks.

    ``progress`` (default: the one set by :func:`fit_progress`, else none) hears of every
    chunk once, as it finishes: a callable gets a :class:`ChunkDone`, a tqdm-like bar one
    ``update(1)`` (its ``total`` set to the fit's chunks, its description to the stage). It
    only observes: the fitted bits are the same with or without it.

    Returns ``estimator``, fitted through its ``fit_from`` (the estimator validates and
    encodes; this module does the row work): its ``state_digest()`` and predictions equal a
    local ``estimator.fit(X.compute(), y, ids)`` bit for bit. On any error the previous fit
    stays.
    """
    chunk_rows = check_chunk_rows(chunk_rows)
    client = _client(client)
    report = _reporter(_PROGRESS.get() if progress is None else progress)
    source = _DaskSource(X, y, ids, client, chunk_rows, rows_dir, report)
    return estimator.fit_from(source)


class _DaskSource:
    """A dask collection as the estimator's row source (``RowSource`` in
    forgetting.estimators): the shape, labels and ids gathered here, the rows' work on the
    cluster."""

    def __init__(self, X, y, ids, client, chunk_rows: int, rows_dir, report) -> None:
        self._X, self._y, self._ids = X, y, ids
        self._client, self._chunk_rows, self._rows_dir = client, chunk_rows, rows_dir
        self._report = report
        self._Xd = self._names = self._y_values = self._id_values = None

    def shape(self) -> tuple[int, int]:
        self._Xd, self._names = _as_dask_array(self._X, self._chunk_rows)
        n, d = (int(s) for s in self._Xd.shape)
        if n < 1:
            raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
        if d < 1:
            raise ValueError("Found array with 0 feature(s) while a minimum of 1 is required.")
        return n, d

    def labels(self) -> Any:
        self._y_values = _materialize(self._y)
        return self._y_values

    def ids(self) -> Any:
        self._id_values = _materialize(self._ids)
        return self._id_values

    def feature_names(self) -> np.ndarray | None:
        return self._names

    def build(self, engine, id_list: list, targets: np.ndarray) -> None:
        """Pass 1 on the workers (features checked, keyed draws, row hashes), gathered into
        the row store's columns; then the engine's fit with pass 2 (each instance's
        contributions) on the workers through :class:`DaskRowWork`."""
        client, chunk_rows, rows_dir = self._client, self._chunk_rows, self._rows_dir
        n, d = (int(s) for s in self._Xd.shape)
        chunk_ids = None if self._id_values is None else id_list
        config, key = engine.config, engine.membership_key
        p = config.n_instances
        bounds = chunk_bounds(n, chunk_rows)
        n_build = len(chunk_bounds(int(np.count_nonzero(is_labeled(targets))), chunk_rows))
        count = _ChunkCounter(self._report, len(bounds) + p * n_build)
        parts = client.compute(list(self._Xd.to_delayed().ravel()))
        if rows_dir is None:
            X32 = np.empty((n, d), dtype=np.float32)
        else:
            X32 = DiskRows.create(rows_dir, d, n)
        draws = np.empty((n, p + 1), dtype=np.float64)
        row_hash = np.empty((n, 32), dtype=np.uint8)
        prepared: list = [None] * len(bounds)
        try:
            for i, future, chunk in map_prepare(
                client,
                parts,
                targets,
                chunk_ids,
                bounds,
                key,
                p,
                config.label_mode,
            ):
                start, stop = bounds[i]
                X32[start:stop] = chunk["X"]
                draws[start:stop] = chunk["draws"]
                row_hash[start:stop] = chunk["row_hash"]
                prepared[i] = future
                count("pass 1", None, start, stop)
            del parts
            engine.set_row_work(
                DaskRowWork(
                    client,
                    chunk_rows,
                    ResidentChunks(prepared, n),
                    on_chunk=None if self._report is None else count.built,
                )
            )
            # The gathered columns have the row store's shapes: handed over, the store keeps
            # them instead of a second copy of every row (targets only when they are not the
            # caller's own array, which the store would later overwrite).
            if not np.may_share_memory(targets, np.asarray(self._y_values)):
                targets = hand_over(targets)
            engine.fit(
                id_list,
                None,
                X32 if isinstance(X32, DiskRows) else hand_over(X32),
                targets,
                draws=hand_over(draws),
                row_hash=hand_over(row_hash),
                rows_dir=rows_dir,
            )
        finally:
            if isinstance(X32, DiskRows):
                X32.close()
            for future in prepared:
                if future is not None:
                    future.release()
        engine.set_row_work(DaskRowWork(client, chunk_rows))


class _ChunkCounter:
    """Numbers a fit's finished chunks and hands them to the reporter (if any)."""

    def __init__(self, report: Callable[[ChunkDone], None] | None, total: int):
        self.report, self.total, self.done = report, total, 0

    def __call__(self, stage: str, instance: int | None, start: int, stop: int) -> None:
        if self.report is None:
            return
        self.done += 1
        self.report(ChunkDone(stage, instance, start, stop, self.done, self.total))

    def built(self, build: int, start: int, stop: int) -> None:
        """A pass-2 chunk (DaskRowWork's ``on_chunk``): the fit builds instance 0, 1, ...
        in order, so the n-th build is instance n."""
        self("pass 2", build, start, stop)


def insert_distributed(
    estimator,
    X: Any,
    y: Any,
    ids: Any,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> list:
    """Insert the rows of a dask array or DataFrame chunk by chunk; returns the receipts.

    Each chunk is computed where dask keeps it and inserted with ``estimator.insert``: in exact
    mode rows inserted in any batches land on the same bits as one insert (and as a fit on all
    rows), so the coordinator never holds more than one chunk of new rows at a time. Inserts
    that land in a D° start a rebuild, which runs on the cluster when the model was fitted
    with :func:`fit_distributed`. A chunk that fails leaves the chunks before it inserted.
    """
    chunk_rows = check_chunk_rows(chunk_rows)
    _require_dask()
    Xd, _ = _as_dask_array(X, chunk_rows)
    n = int(Xd.shape[0])
    y_all = np.asarray(_materialize(y))
    id_list = normalize_ids(_materialize(ids), n)
    if len(y_all) != n:
        raise ValueError(
            f"Found input variables with inconsistent numbers of samples: [{n}, {len(y_all)}]"
        )
    receipts = []
    parts = Xd.to_delayed().ravel()
    for (start, stop), part in zip(chunk_bounds(n, chunk_rows), parts, strict=True):
        receipts.append(
            estimator.insert(part.compute(), y_all[start:stop], ids=id_list[start:stop])
        )
    return receipts


def keep_rows_on_disk(
    estimator, rows_dir: str | os.PathLike, *, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> None:
    """Move a fitted model's features out of RAM into a file in ``rows_dir``.

    Rebuilds then stream the features in chunks of ``chunk_rows`` rows — on the cluster when
    the model has one (:func:`fit_distributed`), here otherwise — so a rebuild's transient
    memory is bounded by the chunk size, not by n. What a deletion subtracts (each row's codes,
    residuals and digest per instance) stays in RAM: a forget never reads the file except for
    the forgotten rows' own features when the model has a ridge head. Saving the model or
    pickling it reads the features back (files and stores hold them).
    """
    chunk_rows = check_chunk_rows(chunk_rows)
    engine = estimator.engine_
    with engine.locked():
        engine.spill_rows(rows_dir)
        if not isinstance(engine.row_work, DaskRowWork):
            engine.set_row_work(LocalRowWork(chunk_rows))
