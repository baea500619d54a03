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

In this process, instances with features used as given are built by one pass over the rows
(:func:`build_instances`, :func:`_one_pass`): what they have in common — the normalized rows,
a shared input head's features and Gram sums — is computed once per chunk for all of them,
and each chunk's integers go straight into the instances (no partial sums to reduce).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from .._parallel import serial_map
from .._rowwise import BLOCK_ROWS, one_blas_thread
from ..content.accumulators import MAX_ROWS
from ..content.fingerprint import MODULUS, Contributions, multiset_sum
from ..content.heads import fold_grams
from ..content.tables import FlatTables
from ..instance import (
    Instance,
    RowData,
    contributions_for,
    contributions_with_features,
    empty_instance,
    statistics_head_features,
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
        if isinstance(acc, FlatTables):
            acc.sums += part.sums
            acc.counts += part.counts
        else:
            acc.merge(part)
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
    process, one chunk at a time: :func:`build_with_schema`) and is reduced exactly. Same
    signature and result, bit for bit (tests/distributed/test_distributed.py compares them).

    ``head_gram`` = (Gram sums, fold counts) of a sibling instance over these very rows: when
    this instance's head takes the input as given ("shared-ridge", no encoder) its Gram sums
    are those integers, so a local build adopts them instead of recomputing Σ v vᵀ over every
    row (a large share of a rebuild); the counts are checked. A fit
    builds all its instances at once instead (:func:`build_instances`).
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
    """The row half of :func:`build_instance`, for a schema already trained: through
    ``work`` when given (partial sums per chunk, :func:`reduce_chunks`), else in this process
    — one pass over the rows (:func:`_one_pass`) for features used as given, chunks through
    a :class:`LocalRowWork` with an encoder. ``head_gram`` is adopted by a head that takes
    the input as given, in this process only (as :func:`build_instance` says)."""
    if work is None and schema.encoder is None:
        adopt = head_gram if schema.input_head_key is not None else None
        rows = pass_chunk_rows([schema], int(np.count_nonzero(data.labeled)))
        return _one_pass(config, [schema], data, rows, serial_map, adopt)[0]
    labeled = np.flatnonzero(data.labeled)
    work = LocalRowWork() if work is None else work
    folds = data.folds
    chunks = work.map_chunks(config, schema, data.X, data.targets, data.row_hash, folds, labeled)
    built, contrib = reduce_chunks(config, schema, len(labeled), chunks)
    return built, labeled, contrib


PASS_CHUNK_BYTES = 32 << 20
"""The head features of one chunk of a pass (:func:`_one_pass`) take at most about this many
bytes (float64, n × D): its transient memory stays in the tens of MB per thread whatever the
head's width (one default 65,536-row chunk of "shared-rf" features at MNIST-HOG's D = 1033
is 540 MB). Smaller chunks than this slowed a MNIST-HOG fit with "shared-rf" down and larger
ones did not speed it up, so it is the smallest of the flat range."""


PASS_MIN_CHUNKS = 8
"""A pass cuts its rows into at least this many chunks (down to BLOCK_ROWS rows each), so the
cores have chunks to share: with one 65,536-row chunk at MNIST's 60k rows, a fit without a
head would run its three instances on one core."""


def pass_chunk_rows(schemas: Sequence[Schema], n_rows: int, cap: int = DEFAULT_CHUNK_ROWS) -> int:
    """Rows per chunk of a pass over ``schemas`` and ``n_rows`` rows: a multiple of
    BLOCK_ROWS (so every row keeps its bits), the widest head's features at most
    :data:`PASS_CHUNK_BYTES`, at least :data:`PASS_MIN_CHUNKS` chunks, never more than
    ``cap`` nor fewer than BLOCK_ROWS."""
    width = max((s.n_features for s in schemas if s.head_kind is not None), default=0)
    by_bytes = PASS_CHUNK_BYTES // (8 * (width + 1)) // BLOCK_ROWS * BLOCK_ROWS
    by_count = -(-n_rows // (PASS_MIN_CHUNKS * BLOCK_ROWS)) * BLOCK_ROWS
    return max(BLOCK_ROWS, min(cap, by_bytes, by_count))


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
    """:func:`build_instance` for each of ``instances`` (a fit), the work they share done
    once: the same results, bit for bit.

    Instances whose heads take the input as given with the same ``input_head_key``
    ("shared-ridge", "shared-rf" without an encoder) have the same head features
    v = [u, ψ(u), 1] for every row and hence the same Gram sums Σ v vᵀ (design.md §5.13).
    Built one by one, each computed both over every row: at MNIST-HOG with "shared-rf"
    (d = 520, D = 1033) u·R, the fixed-point copy and the Gram are most of an instance's
    row work. Here the instances with features used as given go through the
    rows in one pass (:func:`_one_pass`): per chunk, the normalized rows u (φ's first step,
    every such instance's) once, each shared head's v and fold Grams once, then every
    instance's codes, g, residuals and head cross sums Σ v rᵀ (those differ: r = y − g(x));
    at the end the instances of a shared head adopt its one Gram (``LinearHead.adopt_gram``,
    which checks that their own row counts match). Instances with an encoder, or with
    ``work`` on a cluster, are built as :func:`build_instance` builds them.

    ``each`` runs independent tasks — the schemas' training, the other instances' builds,
    the pass's chunks (forgetting._parallel.map_instances: on the machine's cores);
    ``seconds``, when given, receives each instance's build seconds: its own tasks plus an
    equal share of the pass.
    """
    instances = list(instances)
    started = time.perf_counter()
    schemas = each(
        lambda r: train_instance_schema(config, data, r, random_state, label_mode), instances
    )
    spent = [(time.perf_counter() - started) / max(len(instances), 1)] * len(instances)
    local = work is None or isinstance(work, LocalRowWork)
    together = [i for i, schema in enumerate(schemas) if local and schema.encoder is None]
    apart = [i for i in range(len(schemas)) if i not in together]
    results: list = [None] * len(instances)

    def build_apart(i: int):
        began = time.perf_counter()
        out = build_with_schema(config, schemas[i], data, work)
        spent[i] += time.perf_counter() - began
        return out

    for i, out in zip(apart, each(build_apart, apart), strict=True):
        results[i] = out
    if together:
        members = [schemas[i] for i in together]
        cap = work.chunk_rows if isinstance(work, LocalRowWork) else DEFAULT_CHUNK_ROWS
        began = time.perf_counter()
        rows = pass_chunk_rows(members, int(np.count_nonzero(data.labeled)), cap)
        built = _one_pass(config, members, data, rows, each)
        share = (time.perf_counter() - began) / len(together)
        for i, out in zip(together, built, strict=True):
            results[i] = out
            spent[i] += share
    if seconds is not None:
        seconds.extend(spent)
    return results


def _one_pass(
    config: SchemaConfig,
    schemas: Sequence[Schema],
    data: RowData,
    chunk_rows: int,
    each: Each,
    head_gram: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[tuple[Instance, np.ndarray, Contributions]]:
    """Build the instances of ``schemas`` (features used as given: no encoder) in one pass over
    the labeled rows, chunk by chunk (chunks run side by side through ``each``).

    A chunk computes the normalized rows u once, and the head features v and fold Grams of
    every input head that two or more of the instances share (one ``input_head_key``) once;
    their bits are a row's own, whatever the chunk (row-by-row functions in canonical
    blocks, chunks starting at multiples of BLOCK_ROWS). It then adds each instance's
    contributions, accumulator sums and head sums straight into that instance (under its
    lock: integer sums, exact in any order — the same integers :func:`reduce_chunks` reaches
    from per-chunk partial sums, without a partial copy of every table per chunk). A shared
    head's instances get their cross sums only and adopt the pass's Gram at the end, their
    counts checked against their own; any other head adds its own Gram terms, as any build
    does. ``head_gram`` (one instance, an input head: a rebuild) is a sibling's (Gram,
    counts) over these rows, adopted instead of computing the Gram.
    """
    if any(s.encoder is not None for s in schemas):
        raise ValueError("a pass over the rows takes features used as given (no encoder)")
    if head_gram is not None and (len(schemas) != 1 or schemas[0].input_head_key is None):
        raise ValueError("an adopted Gram is for one instance with an input head")
    labeled = np.flatnonzero(data.labeled)
    n = len(labeled)
    if n == 0:
        raise ValueError("an instance needs at least one labeled row")
    folds_all = data.folds
    built = [empty_instance(config, schema) for schema in schemas]
    keys = [s.input_head_key for s in schemas]
    members: dict[tuple, list[int]] = {}
    for j, key in enumerate(keys):
        if key is not None:
            members.setdefault(key, []).append(j)
    # the heads whose features and Gram the pass computes once, for two or more instances
    shared = [key for key, js in members.items() if len(js) > 1]
    grams: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    for key in shared:
        D = built[members[key][0]].head.gram.shape[-1]  # type: ignore[union-attr]
        grams[key] = (np.zeros((2, D, D), dtype=np.int64), np.zeros(2, dtype=np.int64))
    if head_gram is not None:
        grams[keys[0]] = head_gram  # type: ignore[index]
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
        features: dict[tuple, np.ndarray] = {}
        for key in shared:
            v = statistics_head_features(schemas[members[key][0]], X, u)
            features[key] = v
            parts = fold_grams(v, folds)
            with gram_lock:
                gram, counts = grams[key]
                for f in (0, 1):
                    if parts[f] is not None:
                        gram[f] += parts[f]
                    counts[f] += int(np.count_nonzero(folds == f))
            del parts
        # chunks running side by side start on different instances: fewer waits on a lock
        for j in np.roll(np.arange(len(schemas)), -index).tolist():
            contrib, v = contributions_with_features(
                schemas[j],
                X,
                targets,
                row_hash,
                u,
                features.get(keys[j]),  # type: ignore[arg-type]
            )
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
                built[j].add_encoded(contrib, folds, v, gram=keys[j] not in grams)
                seen[j] += stop - start

    # One BLAS thread per chunk, also when chunks run one at a time (a rebuild): on a busy
    # machine the Gram's dsyrk on several threads contends with the other work and runs
    # several times slower than pinned.
    with one_blas_thread():
        each(chunk, range(len(bounds)))
    out = []
    for j, (instance, schema) in enumerate(zip(built, schemas, strict=True)):
        if seen[j] != n:
            raise RuntimeError(f"the pass added {seen[j]} rows, expected {n}")
        _finish(instance, schema)
        if keys[j] in grams:
            instance.head.adopt_gram(*grams[keys[j]])  # type: ignore[union-attr, index]
        out.append((instance, labeled, Contributions(*columns[j])))  # type: ignore[misc]
    return out


def computed_by(
    work: RowWork, config: SchemaConfig, schema: Schema, rows, pos: np.ndarray
) -> tuple[Contributions, Any]:
    """The contributions of the stored rows at ``pos`` (a row store's) under ``schema``, and
    their head sums, computed chunk by chunk by ``work`` (a cluster: forgetting.distributed)
    — the per-row φ, g, cells and head features an insert would otherwise compute here. Only
    the (D, D) head sums of each chunk come back besides the rows' contributions."""
    n = len(pos)
    chunks = work.map_chunks(
        config,
        schema,
        rows.X[pos],
        rows.targets[pos],
        rows.row_hash[pos],
        rows.folds(pos),
        np.arange(n),
    )
    parts: list[tuple[int, Contributions]] = []
    head = None
    for start, result in chunks:  # in the order the workers finish
        parts.append((start, result.contrib))
        if head is None:
            head = result.head
        elif result.head is not None:
            head.merge(result.head)  # integer sums: exact in any order
    parts.sort(key=lambda part: part[0])
    contrib = Contributions(
        np.concatenate([c.codes for _, c in parts]),
        np.concatenate([c.residuals for _, c in parts]),
        np.concatenate([c.digests for _, c in parts]),
    )
    if len(contrib.codes) != n:
        raise RuntimeError(f"row work returned {len(contrib.codes)} rows, expected {n}")
    return contrib, head


def matches_rows(config: SchemaConfig, instance: Instance, rows, r: int) -> bool:
    """Whether instance ``r`` is exactly what its schema makes of the stored rows (a row
    store's): every labeled row's contribution recomputed and compared with the stored one,
    and the accumulators, head sums and content fingerprint rebuilt from them."""
    labeled = np.flatnonzero(rows.labeled())
    contrib = contributions_for(
        instance.schema, rows.X[labeled], rows.targets[labeled], rows.row_hash[labeled]
    )
    fresh = empty_instance(config, instance.schema)
    fresh.add_rows(contrib, rows.folds()[labeled], rows.X[labeled])
    if not fresh.accumulators.equals(instance.accumulators):
        return False
    if instance.head is not None and not fresh.head.equals(instance.head):
        return False
    if multiset_sum(contrib.digests) != instance.content_hash:
        return False
    return bool(np.array_equal(rows.contributions(r, labeled).digests, contrib.digests))
