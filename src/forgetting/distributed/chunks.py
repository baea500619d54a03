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

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from .._parallel import serial_map
from .._rowwise import BLOCK_ROWS, HEAD_BLOCK_ROWS, one_blas_thread
from ..content.accumulators import MAX_ROWS
from ..content.fingerprint import MODULUS, Contributions
from ..content.head import fold_grams, head_features
from ..content.tables import FlatTables
from ..instance import (
    Instance,
    RowData,
    contributions_with_features,
    empty_instance,
    train_instance_schema,
)
from ..schema import Schema, SchemaConfig, normalized_rows

T = TypeVar("T")
U = TypeVar("U")
Each = Callable[[Callable[[T], U], Sequence[T]], list[U]]
"""How independent tasks run: ``serial_map`` or ``forgetting._parallel.map_instances``."""

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
    instance.content_hash = content_hash
    _finish(instance, schema)
    return instance, Contributions(codes, residuals, digests)


def _finish(instance: Instance, schema: Schema) -> None:
    """What every build does once all rows are in: the row bound, and the flat tables' derived
    totals and probe sums recomputed from the final cells."""
    acc = instance.accumulators
    if acc.n_rows > MAX_ROWS:
        raise OverflowError(f"more than {MAX_ROWS} rows cannot be accumulated exactly")
    if isinstance(acc, FlatTables):
        acc.rebuild_totals()
        if acc.probe_cells is not None:
            acc.set_probes(schema.probe_codes, schema.probe_folds)
    instance.content = None


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
    return build_with_schema(config, schema, data, work, head_gram)


def build_with_schema(
    config: SchemaConfig,
    schema: Schema,
    data: RowData,
    work: RowWork | None = None,
    head_gram: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[Instance, np.ndarray, Contributions]:
    """The row half of :func:`build_instance`, for a schema already trained."""
    if work is None and schema.input_head_key is not None:
        # the pass of a fit's shared heads, for one instance: chunks sized to the head's
        # width (one 65,536-row chunk of "shared-rf" features at MNIST-HOG's D = 1033 is
        # 540 MB), added straight into the instance; the Gram adopted when given
        return _shared_pass(
            config, [schema], data, shared_chunk_rows(schema), serial_map, head_gram
        )[0]
    labeled = np.flatnonzero(data.labeled)
    work = LocalRowWork() if work is None else work
    folds = data.folds
    chunks = work.map_chunks(config, schema, data.X, data.targets, data.row_hash, folds, labeled)
    built, contrib = reduce_chunks(config, schema, len(labeled), chunks)
    return built, labeled, contrib


SHARED_CHUNK_BYTES = 32 << 20
"""The head features of one chunk of a shared pass (:func:`build_instances`) take at most
about this many bytes (float64, n × D), so the pass's transient memory stays in the tens of
MB per thread whatever the head's width."""


def shared_chunk_rows(schema: Schema, cap: int = DEFAULT_CHUNK_ROWS) -> int:
    """Rows per chunk for a head of ``schema``'s width: a multiple of BLOCK_ROWS (so every row
    keeps its bits), its features at most :data:`SHARED_CHUNK_BYTES`, never more than
    ``cap`` nor fewer than BLOCK_ROWS."""
    rows = SHARED_CHUNK_BYTES // (8 * (schema.n_features + 1))
    return max(BLOCK_ROWS, min(cap, rows // BLOCK_ROWS * BLOCK_ROWS))


def build_instances(
    config: SchemaConfig,
    data: RowData,
    instances: Sequence[int],
    random_state: int,
    label_mode: bool,
    work: RowWork | None = None,
    each: Each = serial_map,
    seconds: list[float] | None = None,
) -> list[tuple[Instance, np.ndarray, Contributions]]:
    """:func:`build_instance` for each of ``instances`` (a fit), the work their heads share
    done once: the same results, bit for bit.

    Instances whose heads take the input as given with the same ``input_head_key``
    ("shared-ridge", "shared-rf" without an encoder) have the same head features
    v = [u, ψ(u), 1] for every row and hence the same Gram sums Σ v vᵀ (design.md §5.13).
    Built one by one, each computed both over every row: at MNIST-HOG with "shared-rf"
    (d = 520, D = 1033) u·R, the fixed-point copy and the Gram are ~6 s of the ~7 s of
    row work per instance. Here a group of such instances goes through the rows once
    (:func:`_shared_pass`): per chunk, u and v are computed once, the chunk's fold Grams
    once, then each instance's codes, g, residuals and cross sums Σ v rᵀ (those differ:
    r = y − g(x)) from them; at the end every instance of the group adopts the one Gram
    (``LinearHead.adopt_gram``, which checks that its own row counts match). Other
    instances (other heads, or ``work`` on a cluster) are built as :func:`build_instance`
    builds them.

    ``each`` runs independent tasks — the schemas' training, the other instances' builds,
    the shared pass's chunks (forgetting._parallel.map_instances: on the machine's cores);
    ``seconds``, when given, receives each instance's build seconds: its own tasks plus an
    equal share of the group's shared work.
    """
    instances = list(instances)
    started = time.perf_counter()
    schemas = each(
        lambda r: train_instance_schema(config, data, r, random_state, label_mode), instances
    )
    spent = [(time.perf_counter() - started) / max(len(instances), 1)] * len(instances)
    local = work is None or isinstance(work, LocalRowWork)
    groups: dict[tuple, list[int]] = {}
    alone: list[int] = []
    for i, schema in enumerate(schemas):
        key = schema.input_head_key if local else None
        (alone if key is None else groups.setdefault(key, [])).append(i)
    results: list = [None] * len(instances)

    def build_alone(i: int):
        began = time.perf_counter()
        out = build_with_schema(config, schemas[i], data, work)
        spent[i] += time.perf_counter() - began
        return out

    for i, out in zip(alone, each(build_alone, alone), strict=True):
        results[i] = out
    for members in groups.values():
        cap = work.chunk_rows if isinstance(work, LocalRowWork) else DEFAULT_CHUNK_ROWS
        chunk_rows = shared_chunk_rows(schemas[members[0]], cap)
        began = time.perf_counter()
        built = _shared_pass(config, [schemas[i] for i in members], data, chunk_rows, each)
        share = (time.perf_counter() - began) / len(members)
        for i, out in zip(members, built, strict=True):
            results[i] = out
            spent[i] += share
    if seconds is not None:
        seconds.extend(spent)
    return results


def _shared_pass(
    config: SchemaConfig,
    schemas: Sequence[Schema],
    data: RowData,
    chunk_rows: int,
    each: Each,
    head_gram: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[tuple[Instance, np.ndarray, Contributions]]:
    """Build the instances of ``schemas`` — heads with one ``input_head_key`` — in one pass
    over the labeled rows, chunk by chunk (chunks run in parallel through ``each``).

    A chunk computes the normalized rows u and the head features v once (their bits are a
    row's own, whatever the chunk: row-by-row functions in canonical blocks, chunks starting
    at multiples of BLOCK_ROWS), adds its fold Grams to the one Gram, and adds each
    instance's contributions, accumulator sums and head cross sums straight into that
    instance (under its lock: integer sums, exact in any order — the same integers
    :func:`reduce_chunks` reaches from per-chunk partial sums, without a partial copy of
    every table per chunk). Only the Gram terms are left out of the instances' heads; each
    adopts the pass's Gram at the end — or ``head_gram``, a sibling's (Gram, counts) over
    these rows, when given (a rebuild: no Gram computed) — its counts checked against its
    own. A pass of one instance without ``head_gram`` (a rebuild with no current sibling)
    adds the Gram terms to its head chunk by chunk, as any build does.
    """
    labeled = np.flatnonzero(data.labeled)
    n = len(labeled)
    if n == 0:
        raise ValueError("an instance needs at least one labeled row")
    folds_all = data.folds
    key = schemas[0].input_head_key
    if key is None or any(s.input_head_key != key for s in schemas):
        raise ValueError("a shared pass needs instances with one input head")
    built = [empty_instance(config, schema) for schema in schemas]
    # one instance without a sibling's Gram adds its own Gram terms, as any build does: there
    # is nothing to share, and nothing to adopt
    alone = head_gram is None and len(schemas) == 1
    if head_gram is None:
        D = built[0].head.gram.shape[-1]  # type: ignore[union-attr]
        gram, counts = np.zeros((2, D, D), dtype=np.int64), np.zeros(2, dtype=np.int64)
    else:
        gram, counts = head_gram
    columns: list[list[np.ndarray] | None] = [None] * len(schemas)
    seen = [0] * len(schemas)
    locks = [threading.Lock() for _ in schemas]
    gram_lock = threading.Lock()
    bounds = chunk_bounds(n, chunk_rows)

    def chunk(index: int) -> None:
        start, stop = bounds[index]
        at = labeled[start:stop]
        X = np.asarray(data.X[at], dtype=np.float32)  # as chunk_contributions reads it
        folds = folds_all[at]
        targets, row_hash = data.targets[at], data.row_hash[at]
        u = normalized_rows(X, BLOCK_ROWS)
        v = head_features(schemas[0].head_inputs(X, HEAD_BLOCK_ROWS, u), np.float64)
        if head_gram is None and not alone:
            grams = fold_grams(v, folds)
            with gram_lock:
                for f in (0, 1):
                    if grams[f] is not None:
                        gram[f] += grams[f]
                    counts[f] += int(np.count_nonzero(folds == f))
            del grams
        # chunks running side by side start on different instances: fewer waits on a lock
        for j in np.roll(np.arange(len(schemas)), -index).tolist():
            contrib, _ = contributions_with_features(schemas[j], X, targets, row_hash, u, v)
            with locks[j]:
                if columns[j] is None:
                    columns[j] = [
                        np.zeros((n,) + a.shape[1:], dtype=a.dtype)
                        for a in (contrib.codes, contrib.residuals, contrib.digests)
                    ]
                for column, a in zip(
                    columns[j], (contrib.codes, contrib.residuals, contrib.digests), strict=True
                ):
                    column[start:stop] = a
                built[j].add_encoded(contrib, folds, v, gram=alone)
                seen[j] += stop - start

    # One BLAS thread per chunk, also when chunks run one at a time (a rebuild): the Gram's
    # dsyrk on two threads of a busy 2-core machine spun itself to 0.8 GFLOP/s — a lone
    # rebuild at 300k × 128 took 7.6–8.7 s unpinned against 1.7–2.0 s pinned (load ~3–4).
    with one_blas_thread():
        each(chunk, range(len(bounds)))
    out = []
    for j, (instance, schema) in enumerate(zip(built, schemas, strict=True)):
        if seen[j] != n:
            raise RuntimeError(f"the shared pass added {seen[j]} rows, expected {n}")
        _finish(instance, schema)
        if not alone:
            instance.head.adopt_gram(gram, counts)  # type: ignore[union-attr]
        out.append((instance, labeled, Contributions(*columns[j])))  # type: ignore[misc]
    return out
