"""One QSS instance: a frozen schema trained on D°_r plus the integer content of every row.

Building an instance is the expensive path (train the schema, encode every row, accumulate);
it runs at fit time and when a deletion or insertion touches D°_r. Everything it produces is
a pure function of the rows it is given and the configuration, which is what makes a rebuild
after a deletion land on the same bits as a fresh fit without the row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ._parallel import map_instances, serial_map, worker_count
from ._rowwise import BLOCK_ROWS, HEAD_BLOCK_ROWS
from .content.accumulators import (
    CLASSIFICATION_SCALE_BITS,
    REGRESSION_SCALE_BITS,
    Accumulators,
    quantize_residuals,
)
from .content.fingerprint import MODULUS, Contributions, multiset_sum
from .content.heads import LinearHead, LogitRidgeHead, NewtonHead, head_features
from .content.materialize import Content, build_content, content_jobs
from .content.tables import FlatContent, FlatTables, build_flat_content
from .labels import is_labeled
from .privacy import clip_residuals
from .schema import Schema, SchemaConfig, normalized_rows, train_schema
from .schema.membership import MembershipRule


@dataclass
class RowData:
    """The columns of the row store an instance is built from (copies or views)."""

    X: np.ndarray
    targets: np.ndarray
    draws: np.ndarray
    in_pool: np.ndarray
    serial: np.ndarray
    row_hash: np.ndarray

    @property
    def labeled(self) -> np.ndarray:
        return is_labeled(self.targets)

    def members(self, instance: int, rule: MembershipRule) -> np.ndarray:
        """D°_r of these rows: a function of this set of rows alone."""
        return rule.members(self.draws[:, instance], self.labeled)

    @property
    def folds(self) -> np.ndarray:
        return (self.draws[:, -1] >= 0.5).astype(np.intp)


@dataclass
class Instance:
    schema: Schema
    accumulators: Accumulators | FlatTables
    schema_digest: bytes
    content_hash: int
    content: Content | FlatContent | None = field(default=None)
    head: LinearHead | None = None
    """The exact head's sums (schema.head: ridge or Newton), or None."""
    likely_shrinkage: float | None = field(default=None, repr=False, compare=False)
    """The λ the last content built in jobs chose (:meth:`content_jobs`): a hint only — the
    next build computes the means at that λ beside the cross-fit, and uses them only when
    the cross-fit chooses it again."""

    @property
    def input_head(self) -> bool:
        """Whether the head's features are a fixed function of the input alone — the same
        numbers in every instance ("shared-ridge" on features used as given)."""
        return self.head is not None and self.schema.input_head

    @property
    def content_is_costly(self) -> bool:
        """Whether the next read of a changed content is a pass over all of it however small
        the change: the RQ codebook's content is a re-materialization over every level pair
        (content.materialize), where the flat tables' follows a change by difference."""
        return self.content is None and not isinstance(self.accumulators, FlatTables)

    def head_inputs(self, X: np.ndarray | None) -> np.ndarray | None:
        """The head's fixed-point features of raw rows ``X`` (statistics blocks), or None
        without a head. Recomputed from the stored rows when they leave: storing them would
        cost d + 1 integers per row and instance."""
        if self.head is None:
            return None
        if X is None:
            raise ValueError("an instance with a ridge head needs the rows' inputs")
        return statistics_head_features(self.schema, X)

    def add_rows(
        self, contrib: Contributions, folds: np.ndarray, X: np.ndarray | None = None
    ) -> None:
        """Add labeled rows' contributions; ``X`` (their inputs) feeds the ridge head."""
        self.add_encoded(contrib, folds, self.head_inputs(X))

    def add_encoded(self, contrib, folds, features, gram: bool = True) -> None:
        """Add labeled rows whose head ``features`` were computed with their contributions
        (``contributions_with_features``): no second φ pass. ``gram=False``: the head's Gram
        terms are left out (a rebuild adopting a sibling's, LinearHead.adopt_gram)."""
        self.accumulators.add(contrib.codes, contrib.residuals, folds)
        if self.head is not None:
            if gram:
                self.head.add(features, contrib.residuals, folds)
            else:
                self.head.add_cross(features, contrib.residuals, folds)
        self.content_hash = (self.content_hash + multiset_sum(contrib.digests)) % MODULUS
        self.content = None

    def add_computed(self, contrib: Contributions, folds: np.ndarray, head) -> None:
        """Add labeled rows whose contributions — and, with a head, head sums — were computed
        elsewhere (a cluster's workers, forgetting.distributed): the integers ``add_rows``
        would add, without evaluating φ here for the head's features."""
        if (self.head is None) != (head is None):
            raise ValueError("head sums must come exactly when the instance keeps a head")
        self.accumulators.add(contrib.codes, contrib.residuals, folds)
        if self.head is not None:
            self.head.merge(head)
        self.content_hash = (self.content_hash + multiset_sum(contrib.digests)) % MODULUS
        self.content = None

    def refresh(self) -> None:
        """Compute now what a bulk change left for the next read (the flat tables' totals and
        probe sums): builds and loads call it off the serving path, so the first prediction
        after them does not pay a pass over every cell."""
        if isinstance(self.accumulators, FlatTables):
            self.accumulators.refresh()

    def subtract_rows(
        self,
        contrib: Contributions,
        folds: np.ndarray,
        X: np.ndarray | None = None,
        features: np.ndarray | None = None,
    ) -> None:
        """Subtract labeled rows' contributions; the head takes their ``features`` when the
        caller computed them (:attr:`input_head`: the same for every such instance), else
        recomputes them from ``X``."""
        self.accumulators.subtract(contrib.codes, contrib.residuals, folds)
        if self.head is not None:
            if features is None:
                features = self.head_inputs(X)
            self.head.subtract(features, contrib.residuals, folds)
        self.content_hash = (self.content_hash - multiset_sum(contrib.digests)) % MODULUS
        self.content = None

    def digest(self) -> bytes:
        """Schema digest and content fingerprint together."""
        return self.schema_digest + self.content_hash.to_bytes(32, "little")

    def content_for(self, alpha, shrinkage, privatize=None) -> Content:
        """The materialized content, computed once per change of the statistics.

        ``privatize`` (mode="dp") maps the exact accumulators and head to noised copies
        (``privatize(acc, head) -> (acc, head)``) that are materialized instead; the live
        integers stay exact so deletions keep subtracting.
        """
        if self.content is None:
            if isinstance(self.accumulators, FlatTables):
                # No materialization: (α, λ) from exact totals, the cells read when serving —
                # from noised copies in mode="dp" (rebuilt once per released state): the
                # head's exact cross sums never serve there, nor choose head vs tables
                tables, head = self.accumulators, self.head
                if privatize is not None:
                    tables, head = privatize(tables, head)
                self.content = build_flat_content(tables, alpha, shrinkage, head)
                return self.content
            acc = self.accumulators if privatize is None else privatize(self.accumulators)[0]
            self.content = build_content(acc, alpha, shrinkage)
        return self.content

    def content_jobs(self, alpha, shrinkage) -> tuple[list, Callable[[list], Content]]:
        """:meth:`content_for` of an instance whose content :attr:`content_is_costly` (the
        RQ codebook's), in steps that may run on several threads (content.materialize.
        content_jobs): ``(jobs, finish)``; ``finish`` takes the jobs' results, in order, and
        keeps and returns the content. No jobs when the content is current."""
        if self.content is not None or not self.content_is_costly:
            return [], lambda results: self.content_for(alpha, shrinkage)
        jobs, build = content_jobs(self.accumulators, alpha, shrinkage, self.likely_shrinkage)

        def finish(results: list) -> Content:
            self.content = build(results)
            self.likely_shrinkage = self.content.shrinkage
            return self.content

        return jobs, finish


def instance_seed(random_state: int, instance: int) -> int:
    return (int(random_state) * 1_000_003 + 7919 * (instance + 1)) % (2**31 - 1)


SPLIT_FEATURE_ROWS = 8192
"""Rows from which :func:`statistics_head_features` splits "shared-rf" rows between the
pool's threads (a large batch forget's features); below it the split does not pay."""


def statistics_head_features(
    schema: Schema, X: np.ndarray, normalized: np.ndarray | None = None
) -> np.ndarray:
    """The head's fixed-point features (float64 integers: :func:`head_features`) of rows
    entering or leaving the statistics, their inputs in HEAD_BLOCK_ROWS blocks; ``normalized``
    as in :meth:`Schema.head_inputs`.

    "shared-rf" on the integer grid is computed straight into the result
    (:meth:`~forgetting.schema.random_features.RandomFeatures.fixed_point_into`: one exact
    product, one pass), a large change's rows split between the pool's threads at multiples
    of the block height. The same bits as the composed form, which every other head (and
    every model whose random features are off the grid, ``rf_exact`` False) keeps: the
    normalization is row by row — the same bits in any block height
    (tests/schema/test_serving_blocks.py), so a forget's few rows are normalized as they are
    (:func:`normalized_rows`) — and the random features are exact in any order."""
    d = X.shape[1]
    rf = None if schema.encoder is not None else schema.input_random_features(d)
    if rf is None or not rf.exact:
        return head_features(schema.head_inputs(X, HEAD_BLOCK_ROWS, normalized), np.float64)
    n = X.shape[0]
    out = np.empty((n, d + rf.width + 1), dtype=np.float64)
    parts = 1 if n < SPLIT_FEATURE_ROWS else worker_count() + 1
    step = -(-n // parts // HEAD_BLOCK_ROWS) * HEAD_BLOCK_ROWS if n else HEAD_BLOCK_ROWS
    bounds = [(start, min(n, start + step)) for start in range(0, n, step)]

    def part(bound: tuple[int, int]) -> None:
        start, stop = bound
        U = (
            normalized_rows(X[start:stop], HEAD_BLOCK_ROWS)
            if normalized is None
            else normalized[start:stop]
        )
        rf.fixed_point_into(U, out[start:stop])

    (map_instances if len(bounds) > 1 else serial_map)(part, bounds)
    return out


def contributions_for(
    schema: Schema, X: np.ndarray, targets: np.ndarray, row_hashes: np.ndarray
) -> Contributions:
    """Codes, fixed-point residuals r = y − g(x) and digests of labeled rows under ``schema``."""
    return contributions_with_features(schema, X, targets, row_hashes)[0]


def contributions_with_features(
    schema: Schema,
    X: np.ndarray,
    targets: np.ndarray,
    row_hashes: np.ndarray,
    normalized: np.ndarray | None = None,
    features: np.ndarray | None = None,
) -> tuple[Contributions, np.ndarray | None]:
    """Contributions and, with a ridge head, the head's features (φ in HEAD_BLOCK_ROWS).

    φ's first step, the L2 normalization, is computed once for both: it is row by row, so
    the statistics' blocks and the head's give the same normalized rows (the same bits as
    each normalizing on its own; tests/schema/test_serving_blocks.py) — one pass over the rows
    instead of two or three.

    ``normalized`` (:func:`normalized_rows` of ``X`` in BLOCK_ROWS blocks) and ``features``
    (:func:`head_features` of the head's inputs, float64) may come from the caller: instances
    whose heads take the input as given with equal ``input_head_key`` have the same numbers
    for both, and a build of several of them computes them once
    (:func:`forgetting.engine.builds.build_instances`). Row-by-row functions: the same
    bits as computing them here."""
    if normalized is None and schema.encoder is None:
        normalized = normalized_rows(X, BLOCK_ROWS)
    codes, g, _ = schema.encode(X, BLOCK_ROWS, normalized, head=False)
    if features is None and schema.head_kind is not None:
        features = statistics_head_features(schema, X, normalized)
    elif schema.head_kind is None:
        features = None
    base = schema.base_model
    if base.task == "classification":
        target = np.zeros_like(g)
        target[np.arange(len(targets)), targets.astype(np.intp)] = 1.0
        scale_bits = CLASSIFICATION_SCALE_BITS
    else:
        target = ((np.asarray(targets, np.float64) - base.y_mean) / base.y_scale)[:, None]
        scale_bits = REGRESSION_SCALE_BITS
    residuals = target - g
    if schema.residual_clip is not None:
        residuals = clip_residuals(residuals, schema.residual_clip)
    contrib = Contributions.of(row_hashes, codes, quantize_residuals(residuals, scale_bits))
    return contrib, features


def schema_rows(data: RowData, instance: int, rule: MembershipRule, label_mode: bool):
    """D°_r and the codebook pool, each in canonical order (sorted by the keyed draw)."""
    members = np.flatnonzero(data.members(instance, rule))
    members = members[np.argsort(data.draws[members, instance], kind="stable")]
    pool = None
    if label_mode:
        pool = np.flatnonzero(data.in_pool)
        pool = pool[np.argsort(data.draws[pool, instance], kind="stable")]
    return members, pool


def train_instance_schema(
    config: SchemaConfig, data: RowData, instance: int, random_state: int, label_mode: bool
) -> Schema:
    """The frozen schema of instance ``instance``: trained on its D° (and, in label mode, the
    codebook pool) in canonical order, with the instance's seed. The one place a schema is
    trained from rows, for every build path (in memory, chunked, distributed)."""
    members, pool = schema_rows(data, instance, config.membership, label_mode)
    return train_schema(
        config,
        data.X[members],
        data.targets[members],
        None if pool is None else data.X[pool],
        instance_seed(random_state, instance),
        schema_folds=data.folds[members],
    )


def build_instance(
    config: SchemaConfig, data: RowData, instance: int, random_state: int, label_mode: bool
) -> tuple[Instance, np.ndarray, Contributions]:
    """Train instance ``instance`` on ``data``; returns it with the positions and the
    contributions of the labeled rows it accumulated (in one piece: the engine builds through
    the chunked :func:`forgetting.engine.builds.build_instance`, which equals this)."""
    schema = train_instance_schema(config, data, instance, random_state, label_mode)
    labeled = np.flatnonzero(data.labeled)
    contrib, features = contributions_with_features(
        schema, data.X[labeled], data.targets[labeled], data.row_hash[labeled]
    )
    instance = empty_instance(config, schema)
    instance.add_encoded(contrib, data.folds[labeled], features)
    return instance, labeled, contrib


def empty_instance(config: SchemaConfig, schema: Schema) -> Instance:
    """An instance with ``schema`` and no rows accumulated yet."""
    scale_bits = (
        CLASSIFICATION_SCALE_BITS if config.task == "classification" else REGRESSION_SCALE_BITS
    )
    if schema.partition is not None:
        tables = FlatTables.empty(
            schema.partition.n_tables, schema.partition.n_cells, config.n_outputs, scale_bits
        )
        tables.set_probes(schema.probe_codes, schema.probe_folds)
        head = None
        if schema.head_kind is not None:
            kind = LinearHead
            if schema.head_kind == "newton":
                kind = NewtonHead
            elif schema.head_kind == "shared-rf" and config.task == "classification":
                kind = LogitRidgeHead  # its step served from g's logits (content.heads)
            head = kind.empty(schema.n_features, config.n_outputs, scale_bits)
        return Instance(schema, tables, schema.digest(), 0, head=head)
    acc = Accumulators.empty(
        schema.codebook.n_levels, schema.codebook.n_centroids, config.n_outputs, scale_bits
    )
    return Instance(schema, acc, schema.digest(), 0)
