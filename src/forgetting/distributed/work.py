"""Row work on a dask.distributed cluster: the per-row passes of a fit and of a rebuild.

Two kinds of per-row work exist (design.md §1, docs/distributed.md):

* **pass 1, identity** — per row: validate and cast the features to float32, the keyed draws
  (D° membership and statistic fold) and the row's identity hash. Pure functions of one row
  and the key, so each worker does its own chunks.
* **pass 2, contributions** — per row and instance, under a frozen schema: cells, fixed-point
  residual, digest (and the ridge head's features), folded into integer partial sums per
  chunk. The coordinator adds the partial sums (exact, any order) and keeps the per-row
  contributions it needs to subtract a row later.

The schema itself is trained on the coordinator from D° (≈ ρ·n rows), between the passes.
During a fit the chunks stay on the workers between the passes (:class:`ResidentChunks`);
a rebuild ships the rows of its snapshot to the workers chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.builds import (
    DEFAULT_CHUNK_ROWS,
    ChunkResult,
    LocalRowWork,
    check_chunk_rows,
    chunk_bounds,
    chunk_contributions,
)
from ..rows.hashing import canonical_floats
from ..schema.membership import draws as keyed_draws
from ..schema.membership import id_bytes


def prepare_chunk(
    X_block: Any,
    targets: np.ndarray,
    ids: list | tuple[int, int],
    key: bytes,
    n_instances: int,
    in_pool: bool,
) -> dict[str, np.ndarray]:
    """Pass 1 on one chunk of rows (runs on a worker).

    ``ids`` is the chunk's list of canonical ids, or ``(start, stop)`` for the default
    ``range(n)`` ids (so 10 M integers never travel). Features are validated as the local
    fit validates them (float64, finite, then float32, still finite) so a distributed fit
    refuses exactly what a local one refuses.
    """
    X64 = np.asarray(X_block, dtype=np.float64)
    if X64.ndim != 2:
        raise ValueError(f"expected 2-D features, got shape {X64.shape}")
    if not np.all(np.isfinite(X64)):
        raise ValueError("Input X contains NaN or infinity.")
    X32 = canonical_floats(X64.astype(np.float32))  # as the local fit: every zero +0.0
    if not np.all(np.isfinite(X32)):
        raise ValueError("X has values beyond float32 range")
    if isinstance(ids, tuple):
        ids = range(*ids)
    raw = [id_bytes(i) for i in ids]
    if len(raw) != len(X32):
        raise ValueError(f"a chunk has {len(X32)} rows but {len(raw)} ids")
    from ..rows import row_hashes

    pool = np.full(len(X32), in_pool, dtype=bool)
    draws = keyed_draws(key, raw, n_instances)
    return {
        "X": X32,
        "targets": targets,
        "draws": draws,
        "row_hash": row_hashes(raw, targets, pool, X32),
        "folds": (draws[:, -1] >= 0.5).astype(np.intp),
    }


def resident_contributions(config, schema, prepared: dict[str, np.ndarray]) -> ChunkResult:
    """Pass 2 on a chunk prepared by :func:`prepare_chunk` and still held by its worker."""
    return chunk_contributions(
        config,
        schema,
        prepared["X"],
        prepared["targets"],
        prepared["row_hash"],
        prepared["folds"],
    )


@dataclass
class ResidentChunks:
    """The futures of a fit's pass-1 chunks, kept on the workers for pass 2.

    Valid for a build over exactly these rows, in this order (all ``n_rows`` labeled): the
    chunk boundaries are the fit's, multiples of ``chunk_rows``.
    """

    futures: list
    n_rows: int


class DaskRowWork:
    """Run chunks of row work on the cluster behind ``client``.

    At most ``in_flight`` chunks are submitted ahead of the results being consumed, so the
    coordinator never holds more than that many chunks' results in transit. If the client is
    closed (the cluster went away), the work runs in this process instead: the bits are the
    same wherever a chunk runs.
    """

    remote = True
    """Chunks run elsewhere: an insert of many rows hands its per-row work here too
    (QSSEngine.insert, REMOTE_INSERT_ROWS)."""

    def __init__(
        self,
        client,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        resident: ResidentChunks | None = None,
        in_flight: int | None = None,
        on_chunk: Callable[[int, int, int], None] | None = None,
    ):
        self.client = client
        self.chunk_rows = check_chunk_rows(chunk_rows)
        self.resident = resident
        self.in_flight = in_flight
        self.on_chunk = on_chunk
        """Called as ``on_chunk(build, start, stop)`` when a chunk's result is handed to the
        reduction: ``build`` counts the :meth:`map_chunks` calls (0, 1, ...: a fit builds its
        instances in order), ``[start, stop)`` are offsets into the build's rows. A fit's
        progress report (:func:`forgetting.distributed.fit_distributed`)."""
        self._builds = 0

    def map_chunks(self, config, schema, X, targets, row_hash, folds, rows):
        build, self._builds = self._builds, self._builds + 1
        chunks = self._map_chunks(config, schema, X, targets, row_hash, folds, rows)
        if self.on_chunk is None:
            yield from chunks
            return
        for start, result in chunks:
            yield start, result
            self.on_chunk(build, start, start + len(result.contrib.codes))

    def _running(self) -> bool:
        return getattr(self.client, "status", None) == "running"

    def _window(self) -> int:
        if self.in_flight is not None:
            return max(1, int(self.in_flight))
        try:
            workers = len(self.client.scheduler_info(n_workers=-1)["workers"])
        except TypeError:  # older signature
            workers = len(self.client.scheduler_info()["workers"])
        return max(2, 2 * workers)

    def _map_chunks(self, config, schema, X, targets, row_hash, folds, rows):
        if not self._running():
            yield from LocalRowWork(self.chunk_rows).map_chunks(
                config, schema, X, targets, row_hash, folds, rows
            )
            return
        from distributed import as_completed

        client = self.client
        [schema_future] = client.scatter([schema], broadcast=True, hash=False)
        bounds = chunk_bounds(len(rows), self.chunk_rows)
        resident = self.resident
        use_resident = (
            resident is not None
            and resident.n_rows == len(rows)
            and len(resident.futures) == len(bounds)
            and np.array_equal(rows, np.arange(len(rows)))
        )

        def submit(i: int):
            start, stop = bounds[i]
            if use_resident:
                future = client.submit(
                    resident_contributions,
                    config,
                    schema_future,
                    resident.futures[i],
                    pure=False,
                )
            else:
                at = rows[start:stop]
                future = client.submit(
                    chunk_contributions,
                    config,
                    schema_future,
                    np.ascontiguousarray(X[at]),
                    targets[at],
                    row_hash[at],
                    folds[at],
                    pure=False,
                )
            starts[future.key] = start
            return future

        starts: dict = {}
        window = self._window()
        pending = as_completed([submit(i) for i in range(min(window, len(bounds)))])
        next_chunk = min(window, len(bounds))
        for future in pending:
            result = future.result()
            start = starts.pop(future.key)
            future.release()
            if next_chunk < len(bounds):
                pending.add(submit(next_chunk))
                next_chunk += 1
            yield start, result


def map_prepare(
    client, X_parts: list, targets: np.ndarray, ids, bounds, key, n_instances, in_pool
) -> Iterator[tuple[int, Any, dict]]:
    """Submit pass 1 for every chunk; yield (chunk index, future, result) as they finish.

    The futures are yielded too: their results stay on the workers for pass 2.
    """
    from distributed import as_completed

    futures = []
    for (start, stop), part in zip(bounds, X_parts, strict=True):
        chunk_ids = (start, stop) if ids is None else ids[start:stop]
        f = client.submit(
            prepare_chunk,
            part,
            targets[start:stop],
            chunk_ids,
            key,
            n_instances,
            in_pool,
            pure=False,
        )
        futures.append(f)
    index = {f.key: i for i, f in enumerate(futures)}
    for future in as_completed(futures):
        yield index[future.key], future, future.result()
