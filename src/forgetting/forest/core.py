"""ExactForest: one forest's state — its bin grid, the rows' codes and the trees — and exact
forget/insert.

The state is a pure function of (current rows, configuration, key): D° (a keyed hash of each
row's id, :mod:`forgetting.schema.membership`) fixes the bin grid; every tree is grown from
all rows by a deterministic rule (:mod:`._splitting`, :mod:`._grower`). Forgetting or
inserting a D• row walks its path in each tree, re-evaluates the cached candidate counts
there, and rebuilds the first subtree whose choice changes exactly as a fit would
(:mod:`._updates`, :mod:`._batches`, :mod:`._stale`). A change to D° (or a batch too large to
be worth walking) refits from the rows that remain.

The rows themselves (ids, features, targets, keyed draws) are a :class:`~forgetting.rows.
slots.SlotRows` that the instances of one model share (:mod:`.instances`): an instance
keeps only its own structures — the rows' bin codes on its grid, its trees, the rows'
hashes under its D° — indexed by the rows' slots. A forest fitted alone owns its table.

The compiled kernels, by role: ``_arrays`` (the arrays every tree shares and their named
fields), ``_splitting`` (candidates and the split rule), ``_grower`` (a subtree built from
its rows), ``_stale`` (subtrees left to build when read), ``_updates`` (one row's change),
``_batches`` (many rows' change), ``_predictor`` (bin codes and predictions), ``_copying``
(serialization, compaction, copies between arrays).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import asdict

import numpy as np

from .._parallel import PARALLEL_ROWS, map_instances, worker_count
from .._rebuilds import Superseded
from ..rows.hashing import row_hashes
from ..rows.slots import SlotRows
from ..schema.membership import MembershipRule, key_fingerprint
from . import _batches, _copying, _grower, _predictor, _stale, _updates
from ._arrays import (
    P_CANDIDATES,
    TOP_DEAD_NODES,
    TOP_DEAD_PERM,
    TOP_DEAD_SLOTS,
    TOP_NODES,
    TOP_PERM,
    TOP_SLOTS,
    TOP_STALE,
    Arrays,
    allocate,
    params_of,
)
from ._arrays import resized as _resized
from .binning import grid
from .config import ForestConfig, root_seed
from .config import fit_bytes as fit_bytes  # re-exported: callers import it from here

STATE_FORMAT = b"forgetting-forest-1"
FLUSH_PATH_ROWS = 64
"""A prediction of at most this many rows rebuilds only the stale subtrees on its rows'
paths; a larger one rebuilds them all first."""
WHOLE_REBUILD_SHARE = 8
"""A small prediction rebuilds whole stale subtrees on its paths until it has rebuilt
1/WHOLE_REBUILD_SHARE of the rows (once per tree they hold), then builds the rest of its
paths one node at a time (:func:`._stale.flush_rows`): after one-row forgets it rebuilds what
they flipped, as before; after a batch that left much of the forest stale it waits for its
paths only."""
WHOLE_REBUILD_ROWS = 4096
"""... and a stale node whole only when it holds at most this many rows; a bigger one is
built one node at a time along the paths read (issue 69: whole rebuilds cost flights'
one-row predictions 12.6 ms at the mean)."""
PERM_SLACK = 4  # dead leaf rows kept up to this many times the live ones before compacting
TARGET_LEVELS = 1024
"""Regression: targets are quantized to this many levels on a grid fixed by D° (its range,
widened by half of it on each side; values beyond are clipped), so every node's sum of q
fits int32 up to :data:`MAX_REGRESSION_ROWS` rows."""
MAX_REGRESSION_ROWS = (2**31 - 1) // (TARGET_LEVELS - 1)


FitCancelled = Superseded
"""A fit stopped between trees because its caller no longer needs it (a superseded
rebuild: :mod:`forgetting._rebuilds`)."""


class ExactForest:
    """Extremely randomized trees on a D°-fixed grid, split by Gini gain over all-row class
    counts (or, for regression, by squared-error gain over all-row sums of quantized
    targets), with exact forget and insert. Rows are addressed by normalized ids (and their
    canonical bytes, :func:`forgetting.schema.membership.id_bytes`); labels are class indices
    0..k-1, or float targets with ``n_classes=None``. Validation is the caller's.

    :meth:`fit`, :meth:`forget` and :meth:`insert` work on a table of rows the forest owns;
    under :class:`~.instances.ForestInstances` the table is shared (``rows``), and the
    instances take changes by slot: :meth:`grow`, :meth:`forget_slots`,
    :meth:`insert_slots` (the table is changed by its owner)."""

    def __init__(
        self,
        config: ForestConfig,
        key: bytes,
        n_features: int,
        n_classes: int | None,
        *,
        instance: int = 0,
        n_instances: int = 1,
        first_tree: int = 0,
        rows: SlotRows | None = None,
    ):
        """``instance`` of ``n_instances`` picks the column of the keyed draws that decides
        D° (:func:`~forgetting.schema.membership.draws`), ``first_tree`` numbers the trees'
        seeds: instance r of a :class:`~.instances.ForestInstances` holds trees
        ``first_tree .. first_tree + config.n_trees - 1`` of the whole forest."""
        self.config = config
        self._key = key
        self.d = n_features
        self.regression = n_classes is None
        self.k = 2 if self.regression else n_classes
        self._instance, self._n_instances, self._first_tree = instance, n_instances, first_tree
        self.rows = rows
        """The rows (shared by the instances of one model, or this forest's own)."""
        self._lock = threading.RLock()
        self._prefix = b"".join(
            [
                STATE_FORMAT,
                json.dumps(asdict(config), sort_keys=True).encode(),
                f"{key_fingerprint(key)}:{n_features}:{n_classes}".encode(),
                f":{instance}/{n_instances}:{first_tree}".encode() if n_instances > 1 else b"",
            ]
        )

    # -- rows ------------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return self.rows.n_rows

    def ids(self) -> list:
        return self.rows.ids()

    def pool_ids(self) -> list:
        """Ids of the D° rows, in storage order."""
        live = self.rows.live()
        return self.rows.ids_at(live[self._draws(live) < self._threshold])

    def unknown_ids(self, id_list: list) -> list:
        return self.rows.unknown_ids(id_list)

    def known_ids(self, id_list: list) -> list:
        return self.rows.known_ids(id_list)

    def _draws(self, slots: np.ndarray) -> np.ndarray:
        """The keyed draws that decide this instance's D°, of the rows at ``slots``."""
        return self.rows.draws[slots, self._instance]

    def _targets_of(self, pos: np.ndarray) -> np.ndarray:
        """The stored targets of rows at ``pos``: float targets (regression) or class
        indices."""
        if self.regression:
            return self.rows.targets[pos].copy()
        return self.A.y[pos].astype(np.int64)

    def _quantize(self, y: np.ndarray) -> np.ndarray:
        """Regression targets on the D° grid: levels 0..TARGET_LEVELS - 1 (clipped)."""
        q = np.rint((np.asarray(y, np.float64) - self._y_lo) / self._y_step)
        return np.clip(q, 0, TARGET_LEVELS - 1).astype(np.int32)

    def class_counts(self) -> np.ndarray:
        return self._class_counts.copy()

    def class_counts_without(self, id_list: list) -> np.ndarray:
        counts = self.class_counts()
        gone = self.rows.slots_of(id_list)
        return counts - np.bincount(self.A.y[gone], minlength=self.k)

    def rows_held(self) -> tuple[list, list, np.ndarray, np.ndarray]:
        """(ids, id bytes, X, y) of the rows held, in storage order."""
        return self.rows.rows()

    @property
    def pool_threshold(self) -> float:
        """A row is in D° when its keyed draw is below this."""
        return self._threshold

    @property
    def n_pool(self) -> int:
        """Rows in D°."""
        return self._n_pool

    @property
    def effective_rho(self) -> float:
        """|D°| / rows: the probability that forgetting a random row refits."""
        return self._n_pool / max(self.n_rows, 1)

    # -- fit -------------------------------------------------------------------------------
    def fit(
        self,
        id_list: list,
        id_raw: list,
        X: np.ndarray,
        y: np.ndarray,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        """Build from scratch on these rows (X float32, y class indices or float targets),
        in a table of this forest's own. ``cancelled``: see :meth:`grow`."""
        table = SlotRows(
            self.d, self._n_instances, self._key, np.float64 if self.regression else np.int64
        )
        table.reset(id_list, id_raw, X, y)
        self.rows = table
        self.grow(cancelled)

    def grow(
        self, cancelled: Callable[[], bool] | None = None, exclude: np.ndarray | None = None
    ) -> None:
        """Build from scratch on the rows of the table (but those at ``exclude``: a forget
        that refits, before the table drops them). ``cancelled`` is asked between trees;
        when it answers True the fit raises :class:`FitCancelled` (a background rebuild
        that a later change made useless)."""
        c = self.config
        table = self.rows
        live = table.live()
        if exclude is not None:
            live = live[~np.isin(live, exclude)]
        n = len(live)
        if self.regression and n > MAX_REGRESSION_ROWS:
            raise ValueError(
                f"a regression forest holds at most {MAX_REGRESSION_ROWS} rows, got {n}"
            )
        row_draws = self._draws(live)
        rule = MembershipRule(c.rho, c.min_bin_rows)
        self._threshold = rule.threshold(row_draws)
        pool = row_draws < self._threshold
        if n and live[-1] == n - 1:  # slots 0..n-1 (a fit's): views, not copies
            X, y = table.X[:n], table.targets[:n]
        else:
            X, y = table.X[live], table.targets[live]
        g = grid(X[pool], c.max_bins, y[pool] if self.regression else None, TARGET_LEVELS)
        self.edges, self._edge_table, self._n_edges = g.edges, g.table, g.n_edges
        self._y_lo, self._y_step, self._grid_digest, nb = g.y_lo, g.y_step, g.digest, g.nbins
        self._lo0 = np.zeros(self.d, np.int32)
        self._hi0 = nb.copy()  # the NaN code is a bin too: thresholds up to nbins - 1
        K_ = c.candidates(self.d)
        codes = np.zeros((table.capacity, self.d), np.uint8)  # by slot, as the table
        codes[live] = self._encode(X)  # compiled, without the GIL: a rebuild's thread
        levels = np.zeros(table.capacity, np.int32)
        levels[live] = self._quantize(y) if self.regression else y
        shared = {
            "codes": codes,
            "y": levels,
            "nbins": nb.astype(np.int32),
            "params": params_of(
                self.k, K_, c.min_leaf, c.max_depth, c.cache_min_rows, self.regression
            ),
            "seeds": np.array(
                [root_seed(c.random_state, self._first_tree + t) for t in range(c.n_trees)]
            ),
        }
        roots = live.astype(np.int32)
        parts = min(worker_count() + 1, c.n_trees) if n >= PARALLEL_ROWS else 1
        chunks = [range(c.n_trees * i // parts, c.n_trees * (i + 1) // parts) for i in range(parts)]
        built = map_instances(
            lambda chunk: self._grow_trees(shared, chunk, roots, cancelled), chunks
        )
        if parts == 1:
            self.A = built[0]
        else:  # one set of arrays, each chunk's trees copied in (children after parents)
            used = np.sum([B.top[[TOP_NODES, TOP_SLOTS, TOP_PERM]] for B in built], axis=0)
            A = allocate(0, self.d, self.k, K_, *(used + used // 4 + 64), c.n_trees)
            A = A._replace(**shared)
            for chunk, B in zip(chunks, built, strict=True):
                _copying.copy_trees(B, A, chunk.start, chunk.stop)
            self.A = A
        self._path = np.zeros(int(nb.sum()) + self.d + 2, np.int64)
        if not self.regression:
            self._class_counts = np.bincount(y, minlength=self.k).astype(np.int64)
        self._n_pool = int(pool.sum())
        # each row's hash is kept: a forget subtracts it instead of hashing the row again
        self._hashes = np.zeros((table.capacity, 4), np.uint64)
        held = y if self.regression else y.astype(np.int64)
        self._hashes[live] = row_hashes(table.raw_at(live), held, pool, X).view("<u8")
        self._row_sum = self._hashes[live].sum(axis=0, dtype=np.uint64)

    def _grow_trees(
        self, shared: dict, chunk: range, rows: np.ndarray, cancelled: Callable[[], bool] | None
    ) -> Arrays:
        """Trees ``chunk`` grown on every row (``rows``: their slots) into arrays of their
        own (the rows' codes and labels shared, read only): what a fit builds, so a chunk's
        trees are the same bits whichever thread grows them and wherever their nodes and
        rows land."""
        c = self.config
        n = len(rows)
        guess = c.first_nodes(len(chunk), n)
        K_ = int(shared["params"][P_CANDIDATES])
        A = allocate(0, self.d, self.k, K_, guess, max(16, guess // 8), len(chunk) * n + n,
                     c.n_trees)._replace(**shared)  # fmt: skip
        buf = rows.copy()
        for t in chunk:
            if cancelled is not None and cancelled():
                raise FitCancelled
            while True:
                buf[:] = rows
                root = _grower.build(A, buf, 0, n, (0, A.seeds[t], self._lo0, self._hi0))
                if root >= 0:
                    break
                A = _resized(A, nodes=2 * A.feat.shape[0], slots=2 * A.ncand.shape[0])
            A.roots[t] = root
        return A

    # -- forget / insert -------------------------------------------------------------------
    def forget_refits(self, slots: np.ndarray) -> bool:
        """Whether forgetting the rows at these (held) slots refits: one of them is in D°, or
        the batch is larger than ``refit_fraction`` of the rows."""
        return bool(np.any(self._draws(slots) < self._threshold)) or (
            len(slots) > self.config.refit_fraction * self.n_rows
        )

    def insert_refits(self, slots: np.ndarray) -> bool:
        """Whether the rows just added to the table at ``slots`` make this forest refit: one
        of them joins D°."""
        return bool(np.any(self._draws(slots) < self._insert_threshold()))

    def _insert_threshold(self) -> float:
        """D°'s draw threshold with every row of the table (the new ones included)."""
        if self._threshold == self.config.rho:
            return self._threshold
        # D° holds its minimum of rows: recount with the new rows' draws
        rule = MembershipRule(self.config.rho, self.config.min_bin_rows)
        return rule.threshold(self._draws(self.rows.live()))

    def forget(self, id_list: list) -> bool:
        """Remove rows by id (all known) from this forest and its own table. Returns True
        when the forest was refitted (a D° row was among them, or the batch was large)."""
        with self._lock:
            slots = self.rows.slots_of(id_list)
            refitted = self.forget_slots(slots)
            self.rows.remove(slots)
            return refitted

    def forget_slots(self, slots: np.ndarray, refits: bool | None = None) -> bool:
        """Take the rows at ``slots`` out of the trees (they are still in the table, which
        drops them next); True when that refits the forest on the other rows. ``refits``:
        :meth:`forget_refits` of these slots when the caller has it already."""
        with self._lock:
            if self.forget_refits(slots) if refits is None else refits:
                self.grow(exclude=slots)
                return True
            self._update(slots.astype(np.int32), -1)
            if not self.regression:
                self._class_counts -= np.bincount(self.A.y[slots], minlength=self.k)
            self._row_sum -= self._hashes[slots].sum(axis=0, dtype=np.uint64)
            self._hashes[slots] = 0
            self._maybe_compact()
            return False

    def insert(self, id_list: list, id_raw: list, X: np.ndarray, y: np.ndarray) -> bool:
        """Add rows (ids all new) to this forest's own table and trees. Returns True when
        the forest was refitted (a new row joined D°)."""
        with self._lock:
            return self.insert_slots(self.rows.add(id_list, id_raw, X, y))

    def insert_slots(self, slots: np.ndarray) -> bool:
        """Take the rows the table just added at ``slots`` into the trees; True when one
        joined D° and the forest was refitted on every row."""
        with self._lock:
            if self.insert_refits(slots):
                self.grow()
                return True
            self._fit_capacity()
            table = self.rows
            self.A.codes[slots] = self._encode(table.X[slots])
            if self.regression:
                self.A.y[slots] = self._quantize(table.targets[slots])
            else:
                self.A.y[slots] = table.targets[slots]
            self._update(slots.astype(np.int32), 1)
            if not self.regression:
                self._class_counts += np.bincount(self.A.y[slots], minlength=self.k)
            self._hashes[slots] = self._row_hashes(slots)
            self._row_sum += self._hashes[slots].sum(axis=0, dtype=np.uint64)
            self._maybe_compact()
            return False

    def _fit_capacity(self) -> None:
        """Grow the arrays kept by slot (codes, levels, hashes) to the table's capacity."""
        cap = self.rows.capacity
        if self.A.codes.shape[0] < cap:
            self.A = _resized(self.A, rows=cap)
            hashes = np.zeros((cap, 4), np.uint64)
            hashes[: self._hashes.shape[0]] = self._hashes
            self._hashes = hashes

    # -- stale subtrees ---------------------------------------------------------------------
    @property
    def n_stale(self) -> int:
        """Subtrees a change left to rebuild when read (:data:`._arrays.STALE`)."""
        return int(self.A.top[TOP_STALE])

    def flush(self) -> None:
        """Rebuild every stale subtree (before the whole structure is read: digest,
        serialization, pickling, a large prediction)."""
        if self.A.top[TOP_STALE] == 0:
            return
        buf = self._scratch(self.n_rows + 1)
        for t in range(self.config.n_trees):
            while _stale.flush_tree(self.A, t, (self._lo0, self._hi0), buf) < 0:
                self._grow_for_builds()

    def _read(self, codes: np.ndarray) -> np.ndarray:
        """The predictions of rows with these bin codes, the stale subtrees they read built
        first: all of them for more than FLUSH_PATH_ROWS rows (about as cheap), else those
        on their paths (whole within WHOLE_REBUILD_SHARE's budget and WHOLE_REBUILD_ROWS,
        then node by node), in the same compiled call as the prediction."""
        if self.A.top[TOP_STALE] == 0 or len(codes) > FLUSH_PATH_ROWS:
            self.flush()
            return _predictor.predict(self.A, codes)
        buf = self._scratch(self.n_rows + 1)
        limits = (self.n_rows // WHOLE_REBUILD_SHARE, WHOLE_REBUILD_ROWS)
        start = 0
        while True:
            ranges, scratch = (self._lo0, self._hi0), (buf, self._path)
            stop, out = _stale.flush_rows_predict(self.A, codes, start, ranges, scratch, *limits)
            if stop < 0:
                return out
            start = stop // self.config.n_trees
            self._grow_for_builds()

    def _scratch(self, n: int) -> np.ndarray:
        """A (≥ n,) int32 scratch buffer kept between calls (read by nothing after one)."""
        buf = self.__dict__.get("_buf")
        if buf is None or buf.shape[0] < n:
            buf = self._buf = np.empty(n + n // 4 + 64, np.int32)
        return buf

    def _grow_for_builds(self) -> None:
        """Room after a kernel found an array full: each group short of what a build of every
        row may take grows by that and a quarter (not all of them: growing the node arrays
        when leaf rows ran out copied hundreds of MB in a one-row forget); else all grow."""
        A, n, c = self.A, self.n_rows, self.config
        need = {"nodes": (A.feat, TOP_NODES, 2 * n + 2), "perm": (A.perm, TOP_PERM, 2 * n + 2),
                "slots": (A.ncand, TOP_SLOTS, 2 * n // max(c.cache_min_rows, 1) + 2)}  # fmt: skip
        grow = {g: int(A.top[i]) + w + a.shape[0] // 4 for g, (a, i, w) in need.items()
                if a.shape[0] - A.top[i] < w}  # fmt: skip
        self.A = _resized(A, **(grow or {g: 2 * a.shape[0] + w for g, (a, _, w) in need.items()}))

    def __getstate__(self) -> dict:
        """Pickled with every stale subtree rebuilt, without the lock."""
        with self._lock:
            self.flush()
            return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_buf")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _update(self, pos: np.ndarray, sgn: int) -> None:
        buf = self._scratch(self.n_rows + len(pos) + 1)
        if len(pos) > 1:
            self._update_batch(pos, sgn, buf)
            return
        start = 0
        while True:
            stop = _updates.update_rows(
                self.A,
                pos,
                sgn,
                start // self.config.n_trees,
                start % self.config.n_trees,
                buf,
                self._path,
            )
            if stop < 0:
                return
            start = stop
            self._grow_for_builds()

    def _update_batch(self, pos: np.ndarray, sgn: int, buf: np.ndarray) -> None:
        """All rows at once (each node on their paths re-evaluated once for the batch, not once
        per row): every tree planned — counts, caches and choices, the bulk of the work, on the
        machine's cores for a large batch — then each plan carried out in tree order."""
        trees = self.config.n_trees
        work = np.empty((trees, len(pos)), np.int32)

        def plan(chunk: range) -> list:
            return [_batches.plan_batch_tree(self.A, t, pos, sgn, work[t]) for t in chunk]

        parts = worker_count() + 1 if len(pos) >= PARALLEL_ROWS else 1
        chunks = [range(i, trees, parts) for i in range(min(parts, trees))]
        plans: list = [None] * trees
        for chunk, done in zip(chunks, map_instances(plan, chunks), strict=True):
            for t, p in zip(chunk, done, strict=True):
                plans[t] = p
        needs = np.array([_batches.batch_needs(plan) for plan in plans]).sum(axis=0)
        self._reserve(int(needs[0]), int(needs[1]))
        mark = np.zeros(self.A.codes.shape[0], np.uint8)
        if sgn < 0:
            mark[pos] = 1
        for t, plan in enumerate(plans):
            if _batches.apply_batch_tree(self.A, t, (sgn, work[t], mark), plan, buf) < 0:
                raise AssertionError("a batch plan outgrew the room reserved for it")

    def _reserve(self, nodes: int, perm: int) -> None:
        """Room for this many more nodes and perm entries, each array grown by at least a
        quarter when it grows (grown arrays are copies: growing by what is needed alone
        would copy them at every batch)."""
        A = self.A
        grow = {}
        for name, cap, used, need in (
            ("nodes", A.feat.shape[0], A.top[TOP_NODES], nodes),
            ("perm", A.perm.shape[0], A.top[TOP_PERM], perm),
        ):
            if used + need > cap:
                grow[name] = max(int(used + need), cap + cap // 4)
        if grow:
            self.A = _resized(A, **grow)

    def _maybe_compact(self) -> None:
        A = self.A
        live_nodes = A.top[TOP_NODES] - A.top[TOP_DEAD_NODES]
        live_perm = A.top[TOP_PERM] - A.top[TOP_DEAD_PERM]
        if A.top[TOP_DEAD_NODES] > max(live_nodes, 1024) or A.top[TOP_DEAD_PERM] > max(
            PERM_SLACK * live_perm, 1024
        ):
            self.compact()

    def compact(self) -> None:
        """Copy the live nodes, cache slots and leaf rows into arrays of their own, dropping
        what rebuilds left dead (a change does this once the dead outweigh the live)."""
        with self._lock:
            A = self.A
            nodes, slots, perm = (
                int(1.5 * (A.top[used] - A.top[dead])) + extra
                for used, dead, extra in (
                    (TOP_NODES, TOP_DEAD_NODES, 64),
                    (TOP_SLOTS, TOP_DEAD_SLOTS, 16),
                    (TOP_PERM, TOP_DEAD_PERM, 64),
                )
            )
            B = allocate(A.codes.shape[0], self.d, self.k, A.cfeat.shape[1], nodes, slots, perm,
                         A.roots.shape[0])  # fmt: skip
            B = B._replace(codes=A.codes, y=A.y, seeds=A.seeds, nbins=A.nbins, params=A.params)
            _copying.compact(A, B)
            self.A = B

    def _row_hashes(self, pos: np.ndarray) -> np.ndarray:
        pool = self._draws(pos) < self._threshold
        table = self.rows
        return row_hashes(table.raw_at(pos), self._targets_of(pos), pool, table.X[pos]).view("<u8")

    # -- serving ---------------------------------------------------------------------------
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self._predict(self._encode(X))

    def predict_values(self, X: np.ndarray) -> np.ndarray:
        """Regression: the mean over trees of each leaf's mean target, on the D° grid."""
        return self._y_lo + self._y_step * self._predict(self._encode(X))[:, 0]

    def _predict(self, codes: np.ndarray) -> np.ndarray:
        """The rows' leaves read, the stale subtrees on their paths rebuilt first (under the
        lock: a prediction may build, so two at once must not)."""
        with self._lock:
            return self._read(codes)

    def _encode(self, X: np.ndarray) -> np.ndarray:
        return _predictor.encode(X, self._edge_table, self._n_edges)

    def state_digest(self) -> str:
        """SHA-256 over what the forest is a function of: the configuration, key
        fingerprint, grid and the multiset hash of the rows held (a fit on the same rows has
        the same digest). Cheap: no stale subtree is rebuilt for it. What the trees are, bit
        for bit, is :meth:`structure_digest`."""
        h = hashlib.sha256(self._prefix)
        h.update(b"state")
        h.update(self._grid_digest)
        h.update(self._row_sum.tobytes())
        return h.hexdigest()

    def structure_digest(self) -> str:
        """SHA-256 over the configuration, key fingerprint, grid, every tree's Merkle hash
        (structure and counts, every stale subtree rebuilt first) and the rows' multiset
        hash: equal to a refit's exactly when the trees are the refit's."""
        with self._lock:
            self.flush()
            h = hashlib.sha256(self._prefix)
            h.update(self._grid_digest)
            h.update(self.A.hash[self.A.roots].tobytes())
            h.update(self._row_sum.tobytes())
            return h.hexdigest()

    def structure(self, tree: int) -> np.ndarray:
        """Tree ``tree`` in preorder: (feature, threshold, rows, class counts) per node."""
        with self._lock:
            self.flush()
        A = self.A
        out = np.empty((A.top[TOP_NODES] + 1) * (3 + self.k), np.int64)
        return out[: _copying.serialize(A, tree, out)].copy()

    def nbytes(self) -> int:
        """Bytes held by this forest's own arrays (capacity): the trees, the rows' codes and
        hashes — not the rows' table, which the instances share."""
        arrays = sum(a.nbytes for a in self.A if isinstance(a, np.ndarray))
        return int(arrays + self._hashes.nbytes)
