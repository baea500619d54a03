"""Row work in chunks: the per-row half of building an instance, and its exact reduction.

Once a schema is frozen, a row's contribution (cells, fixed-point residual, digest) is a pure
function of that row, and the content is an integer sum over rows (design.md §5.2). So building
an instance's content is a map over row chunks followed by a reduction that is exact in any
order: integer accumulators add, and the content hash is a sum mod 2^256. This module holds
both halves, free of dask, so the engine uses the very same functions in one process
(:class:`LocalRowWork`, memory bounded by the chunk size) and on a cluster
(:mod:`forgetting.distributed.work`).

Chunks start at multiples of ``BLOCK_ROWS`` (``chunk_rows`` is a multiple of it), so every row
is computed at the same offset inside the same fixed-shape float block as in one big call
(forgetting._rowwise): the same bits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .._rowwise import BLOCK_ROWS
from ..content.accumulators import MAX_ROWS
from ..content.fingerprint import MODULUS, Contributions
from ..content.tables import FlatTables
from ..instance import (
    Instance,
    RowData,
    contributions_with_features,
    empty_instance,
    train_instance_schema,
)
from ..schema import Schema, SchemaConfig

DEFAULT_CHUNK_ROWS = 64 * BLOCK_ROWS
"""65,536 rows: large enough that per-chunk overhead vanishes, small enough that a chunk's
float intermediates (features, g, one-hot targets) stay in the tens of MB at d ≤ 64."""


def check_chunk_rows(chunk_rows: int) -> int:
    """``chunk_rows`` as an int, or ValueError unless it is a positive multiple of BLOCK_ROWS."""
    if isinstance(chunk_rows, bool) or int(chunk_rows) != chunk_rows:
        raise ValueError(f"chunk_rows must be an integer, got {chunk_rows!r}")
    chunk_rows = int(chunk_rows)
    if chunk_rows <= 0 or chunk_rows % BLOCK_ROWS:
        raise ValueError(
            f"chunk_rows must be a positive multiple of {BLOCK_ROWS} (the float block size, so "
            f"each row keeps its bits), got {chunk_rows}"
        )
    return chunk_rows


def chunk_bounds(n: int, chunk_rows: int) -> list[tuple[int, int]]:
    """[start, stop) of each chunk of ``n`` rows; every start is a multiple of ``chunk_rows``."""
    return [(s, min(s + chunk_rows, n)) for s in range(0, n, chunk_rows)]


@dataclass
class ChunkResult:
    """What one chunk of rows adds to one instance: the rows' contributions (stored per row,
    for exact subtraction later), their integer accumulator sums (and ridge-head sums, when the
    schema has a head) and their content hash."""

    contrib: Contributions
    accumulators: object
    head: object
    content_hash: int


def chunk_contributions(
    config: SchemaConfig,
    schema: Schema,
    X: np.ndarray,
    targets: np.ndarray,
    row_hash: np.ndarray,
    folds: np.ndarray,
    gram: bool = True,
) -> ChunkResult:
    """Contributions of one chunk of labeled rows under ``schema``, and their partial sums
    (without the head's Gram terms when ``gram`` is False: see :func:`build_instance`).

    Runs anywhere (a worker process gets ``schema`` by value): it reads nothing but its
    arguments. The partial sums are an empty instance's, so shapes and scales match the
    instance they are reduced into.
    """
    contrib, features = contributions_with_features(
        schema, np.asarray(X, dtype=np.float32), targets, row_hash
    )
    part = empty_instance(config, schema)
    part.add_encoded(contrib, folds, features, gram=gram)
    return ChunkResult(contrib, part.accumulators, part.head, part.content_hash)


class RowWork(Protocol):
    """Where an instance's per-row work runs: in this process or on a cluster."""

    def map_chunks(
        self,
        config: SchemaConfig,
        schema: Schema,
        X,
        targets: np.ndarray,
        row_hash: np.ndarray,
        folds: np.ndarray,
        rows: np.ndarray,
    ) -> Iterator[tuple[int, ChunkResult]]:
        """(offset into ``rows``, result) for every chunk of the rows at positions ``rows``."""
        ...


class LocalRowWork:
    """Chunks in this process, one at a time: the transient memory of a build is that of
    one chunk (its float intermediates), whatever the number of rows."""

    def __init__(self, chunk_rows: int = DEFAULT_CHUNK_ROWS, gram: bool = True):
        self.chunk_rows = check_chunk_rows(chunk_rows)
        self.gram = gram
        """False: the head's Gram terms are left out (adopted from a sibling afterwards)."""

    def map_chunks(self, config, schema, X, targets, row_hash, folds, rows):
        for start, stop in chunk_bounds(len(rows), self.chunk_rows):
            at = rows[start:stop]
            yield (
                start,
                chunk_contributions(
                    config, schema, X[at], targets[at], row_hash[at], folds[at], self.gram
                ),
            )


def reduce_chunks(
    config: SchemaConfig, schema: Schema, n_rows: int, results: Iterable[tuple[int, ChunkResult]]
) -> tuple[Instance, Contributions]:
    """Sum chunk results into a fresh instance, and gather the per-row contributions.

    Integer sums are exact in any order, so results may arrive in any order (a cluster returns
    them as workers finish). Derived totals of the flat tables (cross-fit terms, probe terms)
    are integer functions of the final cells, recomputed once from them: the same integers an
    incremental update reaches (each update adds new − old terms of the cells it touched).
    """
    instance = empty_instance(config, schema)
    acc = instance.accumulators
    codes = residuals = digests = None
    content_hash = 0
    seen = 0
    for start, result in results:
        c = result.contrib
        if codes is None:
            codes = np.zeros((n_rows,) + c.codes.shape[1:], dtype=c.codes.dtype)
            residuals = np.zeros((n_rows,) + c.residuals.shape[1:], dtype=c.residuals.dtype)
            digests = np.zeros((n_rows,) + c.digests.shape[1:], dtype=c.digests.dtype)
        stop = start + len(c.codes)
        codes[start:stop] = c.codes
        residuals[start:stop] = c.residuals
        digests[start:stop] = c.digests
        part = result.accumulators
        acc.sums += part.sums
        acc.counts += part.counts
        if not isinstance(acc, FlatTables):
            acc.pair_counts += part.pair_counts
        if instance.head is not None:
            instance.head.merge(result.head)
        content_hash = (content_hash + result.content_hash) % MODULUS
        seen += len(c.codes)
    if seen != n_rows:
        raise RuntimeError(f"row work returned {seen} rows, expected {n_rows}")
    if codes is None:
        raise ValueError("an instance needs at least one labeled row")
    if acc.n_rows > MAX_ROWS:
        raise OverflowError(f"more than {MAX_ROWS} rows cannot be accumulated exactly")
    if isinstance(acc, FlatTables):
        acc.rebuild_totals()
        if acc.probe_cells is not None:
            acc.set_probes(schema.probe_codes, schema.probe_folds)
    instance.content_hash = content_hash
    instance.content = None
    return instance, Contributions(codes, residuals, digests)


def build_instance(
    config: SchemaConfig,
    data: RowData,
    instance: int,
    random_state: int,
    label_mode: bool,
    work: RowWork | None = None,
    head_gram: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[Instance, np.ndarray, Contributions]:
    """:func:`forgetting.instance.build_instance`, with the row work in chunks.

    The schema is trained here from D°_r (small: about ρ·n rows, gathered from wherever the
    rows live); every labeled row's contribution then runs through ``work`` (default: this
    process, one chunk at a time) and is reduced exactly. Same signature and result, bit for
    bit (tests/test_distributed.py compares them).

    ``head_gram`` = (Gram sums, fold counts) of a sibling instance over these very rows: when
    this instance's head takes the input as given ("shared-ridge", no encoder) its Gram sums
    are those integers, so a local build adopts them instead of recomputing Σ v vᵀ over every
    row (~0.44 s of a 2 s rebuild at n = 300k, d = 128); the counts are checked.
    """
    schema = train_instance_schema(config, data, instance, random_state, label_mode)
    folds = data.folds
    labeled = np.flatnonzero(data.labeled)
    adopt = head_gram is not None and work is None and schema.input_head
    work = (LocalRowWork(gram=False) if adopt else LocalRowWork()) if work is None else work
    chunks = work.map_chunks(config, schema, data.X, data.targets, data.row_hash, folds, labeled)
    built, contrib = reduce_chunks(config, schema, len(labeled), chunks)
    if adopt:
        built.head.adopt_gram(*head_gram)  # type: ignore[misc, union-attr]
    return built, labeled, contrib
