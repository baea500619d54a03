"""The row store: what a rebuild and an exact subtraction need, per row, and nothing else.

Rows are addressed by stable external ids (:class:`~forgetting.rows.index.IdIndex`);
positions are an internal detail (a removed row's slot is filled by a surviving row of the
tail). Every field of a removed row is overwritten, so the object keeps no residue of it
(design.md §5.7), its id included. Besides the rows' primary data (features, which may live
on disk: :class:`~forgetting.rows.disk.DiskRows`; labels; keyed draws; pool flags) the store
keeps what a forget must answer in O(batch): per-instance contributions, the D° thresholds
and member counts, class counts and the multiset hash of the rows. Each row also gets a
*serial* that changes whenever its content changes; background rebuilds use serials to
reconcile the rows they trained on with the rows present when they finish.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np

from ..content.fingerprint import MODULUS, Contributions, multiset_sum
from ..labels import UNLABELED, is_labeled, unlabeled_value
from ..schema.membership import MembershipRule
from ..snapshots import RowsSnapshot
from .columns import TailFill, _adoptable, _span, _unique, take_rows
from .disk import DiskRows, copy_rows
from .hashing import row_hashes
from .index import IdIndex, RowIds, RowPositions


class RowStore:
    """The rows of one model: primary data, per-instance contributions and the bookkeeping
    a forget answers from, in columns indexed by position (see the module docstring)."""

    def __init__(
        self,
        n_features: int,
        n_instances: int,
        membership: MembershipRule,
        target_dtype: np.dtype,
        rows_dir: str | os.PathLike | None = None,
    ):
        self.rows_dir = None if rows_dir is None else Path(rows_dir)
        """Where the features live when not in RAM (a :class:`DiskRows` file), or None."""
        self.n_features = n_features
        self.membership = membership
        self.n_instances = n_instances
        self.target_dtype = np.dtype(target_dtype)
        self.size = 0
        self._id_index = IdIndex()
        """Where each id's row is, and each row's id: columns that move with these."""
        self._next_serial = 0
        self.changes = 0
        """Counts the changes of the rows (appends, removals, unlabels): a copy taken in
        pieces (``QSSEngine._snapshot``) is the state of one moment when this did not
        move."""
        self.multiset_hash = 0
        self.class_counts = np.zeros(0, dtype=np.int64)
        self._alloc(0)
        self.codes: list[np.ndarray | None] = [None] * n_instances
        self.residuals: list[np.ndarray | None] = [None] * n_instances
        self.digests: list[np.ndarray | None] = [None] * n_instances
        self.thresholds = np.zeros(n_instances, dtype=np.float64)
        """Per instance, rows of D°_r draw below this (see :class:`MembershipRule`)."""
        self._member_counts = np.zeros(n_instances, dtype=np.int64)
        self._n_labeled = 0
        self._n_pool = 0
        """Rows with the pool flag (label mode's codebook pool), kept so that a forget can
        count the pool after it in O(batch)."""
        self._refresh_thresholds(range(n_instances))

    def _alloc(self, capacity: int) -> None:
        if self.rows_dir is None:
            self.X = np.zeros((capacity, self.n_features), dtype=np.float32)
        elif isinstance(getattr(self, "X", None), DiskRows):
            self.X.resize(capacity)  # grows in place: the old rows stay where they are
        else:
            self.X = DiskRows.create(self.rows_dir, self.n_features, capacity)
        self.targets = np.zeros(capacity, dtype=self.target_dtype)
        self.serial = np.zeros(capacity, dtype=np.int64)
        self.draws = np.zeros((capacity, self.n_instances + 1), dtype=np.float64)
        self.in_pool = np.zeros(capacity, dtype=bool)
        self.row_hash = np.zeros((capacity, 32), dtype=np.uint8)

    def _row_arrays(self) -> list[np.ndarray]:
        """The per-row columns of primary data (the id index keeps the ids' own)."""
        return [self.X, self.targets, self.serial, self.draws, self.in_pool, self.row_hash]

    @property
    def ids(self) -> RowIds:
        """The rows' external ids in position order (a read-only sequence view)."""
        return RowIds(self._id_index)

    @property
    def position(self) -> RowPositions:
        """id → position (a read-only mapping view; batches: :meth:`positions_of`)."""
        return RowPositions(self._id_index)

    @property
    def capacity(self) -> int:
        return self.X.shape[0]

    # -- derived views -------------------------------------------------------------------
    def labeled(self, pos: np.ndarray | slice | None = None) -> np.ndarray:
        """Mask of labeled rows (all rows, or those at ``pos``)."""
        return is_labeled(self.targets[: self.size] if pos is None else self.targets[pos])

    def _labeled_at(self, p: int) -> bool:
        """:meth:`labeled` of the one row at position ``p``, as a Python bool (the one-row
        routes: a scalar test instead of two small arrays)."""
        target = self.targets[p]
        if self.target_dtype.kind == "f":
            return bool(target == target)  # NaN marks an unlabeled row
        return bool(target != UNLABELED)

    def members(self, instance: int) -> np.ndarray:
        """Rows in D°_r: labeled rows whose keyed draw for instance r is below its threshold."""
        return self.labeled() & (self.draws[: self.size, instance] < self.thresholds[instance])

    def in_schema(self, pos: np.ndarray) -> np.ndarray:
        """(len(pos), p) mask: is the row at ``pos`` in D°_r under the current thresholds."""
        draws = take_rows(self.draws, pos)[:, : self.n_instances]
        return self.labeled(pos)[:, None] & (draws < self.thresholds)

    def effective_rho(self) -> np.ndarray:
        """|D°_r| / labeled rows per instance: the probability that deleting a random labeled
        row hits D°_r (ρ on large data, more when D° keeps its minimum size)."""
        if self._n_labeled == 0:
            return np.zeros(self.n_instances)
        return self._member_counts / self._n_labeled

    def mean_effective_rho(self) -> float:
        """The mean of :meth:`effective_rho` over instances, in Python floats: every receipt
        carries it, and ``np.mean``'s overhead on p numbers is a visible share of a one-row
        forget. The same float as ``np.mean`` below eight instances (both add in order from
        zero)."""
        if self._n_labeled == 0:
            return 0.0
        values = (self._member_counts / self._n_labeled).tolist()
        return sum(values) / len(values)

    def _refresh_thresholds(self, instances) -> None:
        """Recompute the thresholds (and member counts) of ``instances``: O(n) each, and only
        needed when a change touched their D° — which starts a rebuild anyway. Nothing to do
        (and no O(n) scan on a forget's fast path) when no instance was touched."""
        instances = list(instances)
        if not instances:
            return
        labeled = self.labeled()
        for r in instances:
            draws = self.draws[: self.size, r][labeled]
            self.thresholds[r] = self.membership.threshold(draws)
            self._member_counts[r] = np.count_nonzero(draws < self.thresholds[r])

    @property
    def pool_size(self) -> int:
        """Rows with the pool flag (label mode: the codebook's training pool)."""
        return self._n_pool

    def schema_sizes_after(
        self,
        pos: np.ndarray,
        instances: Sequence[int],
        *,
        unlabel: bool = False,
        cap: int | None = None,
    ) -> tuple[list[int], int]:
        """(|D°_r| for each r of ``instances``, pool rows) once the rows at ``pos`` are removed
        (or, with ``unlabel``, lose their labels) — what decides whether a schema could still
        be trained, counted without touching the other rows.

        The stored thresholds and member counts describe the current rows, so the count after
        follows from the rows at ``pos`` alone (O(batch) per instance), by the cases of
        :meth:`MembershipRule.threshold` applied to the labeled rows that remain:

        * at least ``min_rows`` of them still draw below ρ: D° is exactly those rows —
          today's member count minus the leaving members below ρ (when today's threshold is
          ρ; if it is above ρ, fewer than ``min_rows`` draw below ρ already, and fewer will);
        * at most ``min_rows`` labeled rows remain: D° is all of them;
        * otherwise D° is the ``min_rows`` lowest draws plus any exact ties with the last:
          at least ``min_rows``. Only when that bound is below ``cap`` is the exact count
          needed, and then it is taken over the instance's draws (O(n), the one case that
          reads every row; the fit's defaults never reach it — ``min_rows`` ≥ 50 there).

        Sizes are reported as ``min(size, cap)`` (``cap=None``: exact): a caller that only
        asks "is D° at least this big" passes the bar as ``cap``. Duplicate positions count
        once.
        """
        pos = _unique(pos)
        leaving = pos[self.labeled(pos)]
        n_labeled = self._n_labeled - leaving.size
        pool = self._n_pool if unlabel else self._n_pool - int(np.count_nonzero(self.in_pool[pos]))
        rho, min_rows = self.membership.rho, self.membership.min_rows
        sizes = []
        for r in instances:
            size = None
            if self.thresholds[r] == rho:  # today at least min_rows draw below ρ (or no minimum)
                below = int(self._member_counts[r]) - int(
                    np.count_nonzero(self.draws[leaving, r] < rho)
                )
                if min_rows <= 0 or below >= min_rows:
                    size = below
            if size is None:
                if n_labeled <= min_rows:
                    size = n_labeled
                elif cap is not None and min_rows >= cap:
                    size = cap
                else:
                    keep = self.labeled()
                    keep[leaving] = False
                    size = int(
                        np.count_nonzero(self.membership.members(self.draws[: self.size, r], keep))
                    )
            sizes.append(size if cap is None else min(size, cap))
        return sizes, pool

    def instances_holding(self, pos: np.ndarray) -> np.ndarray:
        """Instances whose D° holds one of the rows at ``pos`` (current thresholds): the
        instances a removal of those rows invalidates, and whose thresholds it moves."""
        if isinstance(pos, np.ndarray) and pos.size == 1 and pos.dtype.kind in "iu":
            # one row (a one-row forget): its draws against the thresholds, 3 numpy calls
            p = int(pos.reshape(-1)[0])
            if not self._labeled_at(p):
                return np.zeros(0, dtype=np.intp)
            return np.flatnonzero(self.draws[p, : self.n_instances] < self.thresholds)
        return np.flatnonzero(self.in_schema(pos).any(axis=0))

    def folds(self, pos: np.ndarray | None = None) -> np.ndarray:
        """Fold (0 or 1) of every row, or of the rows at ``pos``: a keyed-hash bit."""
        d = self.draws[: self.size, self.n_instances] if pos is None else self.draws[pos, -1]
        return (d >= 0.5).astype(np.intp)

    # -- mutation ------------------------------------------------------------------------
    def _grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        capacity = max(needed, 2 * self.capacity, 64)
        old = self._row_arrays()
        self._alloc(capacity)
        for new, arr in zip(self._row_arrays(), old, strict=True):
            if new is not arr:
                new[: self.size] = arr[: self.size]
        self._id_index.grow(capacity, self.size)
        for r in range(self.n_instances):
            for field in self._instance_fields():
                if field[r] is not None:
                    grown = np.zeros((capacity,) + field[r].shape[1:], dtype=field[r].dtype)
                    grown[: self.size] = field[r][: self.size]
                    field[r] = grown

    def append(
        self,
        ids: Sequence[int | str],
        id_bytes: Sequence[bytes],
        X: np.ndarray,
        targets: np.ndarray,
        draws: np.ndarray,
        in_pool: bool | np.ndarray = False,
        row_hash: np.ndarray | None = None,
    ) -> np.ndarray:
        """Add rows (ids already validated as new); returns their positions.

        ``row_hash`` may bring the rows' hashes precomputed elsewhere (a dask worker computes
        them with :func:`row_hashes` next to the rows; ``id_bytes`` is then unused): the
        multiset hash is the same sum either way.
        """
        n = len(ids)
        self.changes += 1
        fresh = self.size == 0
        self._grow(self.size + n)
        # an empty store whose capacity is exactly these rows may keep handed-over arrays
        fresh = fresh and self.capacity == n
        start = self.size
        at = slice(start, start + n)  # the new rows: views of the columns, not copies
        pos = np.arange(start, start + n)

        def put(name: str, values) -> None:
            column = getattr(self, name)
            if fresh and _adoptable(values, column):
                setattr(self, name, values.view(np.ndarray))
            elif name == "X":
                copy_rows(column, start, values, n)
            else:
                column[at] = values

        put("X", X)
        put("targets", targets)
        put("draws", draws)
        self.in_pool[at] = in_pool
        self.serial[at] = np.arange(self._next_serial, self._next_serial + n)
        self._next_serial += n
        self._id_index.add(ids, start)
        self.size += n
        self._n_labeled += int(np.count_nonzero(self.labeled(at)))
        self._n_pool += int(np.count_nonzero(self.in_pool[at]))
        self._count(at, +1)
        if row_hash is None:
            self._set_row_hash(pos, id_bytes)
        else:
            put("row_hash", row_hash)
            self._sum_row_hash(at)
        # Only rows landing below a threshold can move it (see MembershipRule).
        self._refresh_thresholds(self.instances_holding(at))
        return pos

    def _count(self, pos: np.ndarray, sign: int) -> None:
        """Keep per-class counts of labeled rows (classification), so a forget can tell in
        O(batch) whether a class would disappear."""
        if self.target_dtype.kind == "f":
            return
        t = self.targets[pos]
        counts = np.bincount(t[t >= 0], minlength=self.class_counts.size)
        if counts.size > self.class_counts.size:
            self.class_counts = np.pad(self.class_counts, (0, counts.size - self.class_counts.size))
        self.class_counts[: counts.size] += sign * counts

    def class_counts_without(self, pos: np.ndarray) -> np.ndarray:
        """Per-class labeled-row counts if the rows at ``pos`` lost their labels."""
        one = isinstance(pos, np.ndarray) and pos.size == 1 and pos.dtype.kind in "iu"
        if one and self.target_dtype.kind != "f":
            # one row (asked before every one-row forget): its class, if labeled, one fewer
            counts = self.class_counts.copy()
            target = int(self.targets[int(pos.reshape(-1)[0])])
            if target >= 0:
                counts[target] -= 1
            return counts
        t = self.targets[pos]
        return self.class_counts - np.bincount(t[t >= 0], minlength=self.class_counts.size)

    def _set_row_hash(self, pos: np.ndarray, id_bytes: Sequence[bytes]) -> None:
        """Hash (id, target, pool flag, features) per row; add them to the multiset hash."""
        self._add_row_hash(
            pos, row_hashes(id_bytes, self.targets[pos], self.in_pool[pos], self.X[pos])
        )

    def _add_row_hash(self, pos: np.ndarray, hashes: np.ndarray) -> None:
        self.row_hash[pos] = hashes
        self._sum_row_hash(pos)

    def _sum_row_hash(self, pos: np.ndarray | slice) -> None:
        """Add the stored hashes of the rows at ``pos`` to the multiset hash."""
        self.multiset_hash = (self.multiset_hash + multiset_sum(self.row_hash[pos])) % MODULUS

    def _unhash(self, pos: np.ndarray) -> None:
        hashes = take_rows(self.row_hash, pos)
        self.multiset_hash = (self.multiset_hash - multiset_sum(hashes)) % MODULUS

    def remove(self, pos: np.ndarray, holding: np.ndarray | None = None) -> None:
        """Remove rows at ``pos``: holes are filled by surviving tail rows, freed slots zeroed.

        Every column moves the same way (:class:`TailFill`), the id index's included: the
        leaving rows' ids are dropped and the moved rows' entries re-pointed — O(batch) array
        operations, no per-id Python step for int ids. ``holding``: :meth:`instances_holding`
        of ``pos``, when the caller computed it since the last change (the engine does, to find
        the instances a forget hits), so that it is not computed twice."""
        if np.size(pos) == 1 and isinstance(self.X, np.ndarray):
            self._remove_one(int(np.reshape(pos, -1)[0]), holding)
            return
        pos = _unique(pos)
        touched = self.instances_holding(pos) if holding is None else holding
        self.changes += 1
        self._n_labeled -= int(np.count_nonzero(self.labeled(pos)))
        self._n_pool -= int(np.count_nonzero(self.in_pool[pos]))
        self._count(pos, -1)
        self._unhash(pos)
        fill = TailFill.of(pos, self.size)
        self._id_index.remove(pos, fill)
        for a in self._row_arrays():
            fill.apply(a)
        for field in self._instance_fields():
            for a in field:
                if a is not None:
                    fill.apply(a)
        self.size = fill.new_size
        self._refresh_thresholds(touched)

    def _remove_one(self, p: int, holding: np.ndarray | None) -> None:
        """:meth:`remove` of the one row at ``p`` (features in RAM): the same state after it
        — the last row moves into the hole, its old slot is zeroed, the counts, the multiset
        hash and the id index change by that row — with scalar steps instead of the batch
        route's arrays of positions (a one-row forget's latency path)."""
        if not 0 <= p < self.size:
            raise IndexError(f"row position {p} is outside the store's {self.size} rows")
        touched = self.instances_holding(np.array([p])) if holding is None else holding
        self.changes += 1
        labeled = self._labeled_at(p)
        self._n_labeled -= int(labeled)
        self._n_pool -= int(self.in_pool[p])
        if labeled and self.target_dtype.kind != "f":
            self.class_counts[int(self.targets[p])] -= 1  # _count of one labeled row
        digest = int.from_bytes(self.row_hash[p].tobytes(), "little")
        self.multiset_hash = (self.multiset_hash - digest) % MODULUS
        last = self.size - 1
        self._id_index.remove_one(p, last)
        arrays = [self.X, self.targets, self.serial, self.draws, self.in_pool, self.row_hash]
        for field in (self.codes, self.residuals, self.digests):
            arrays.extend(a for a in field if a is not None)
        for a in arrays:
            if p != last:
                a[p] = a[last]
            a[last] = 0
        self.size = last
        self._refresh_thresholds(touched)

    def unlabel(
        self, pos: np.ndarray, id_bytes: Sequence[bytes], holding: np.ndarray | None = None
    ) -> None:
        """Remove the rows' labels (label mode): new serials, residuals and codes zeroed.
        ``holding`` as in :meth:`remove`."""
        touched = self.instances_holding(pos) if holding is None else holding
        self.changes += 1
        self._n_labeled -= int(np.count_nonzero(self.labeled(pos)))
        self._count(pos, -1)
        self._unhash(pos)
        self.targets[pos] = unlabeled_value(self.target_dtype)
        self.serial[pos] = np.arange(self._next_serial, self._next_serial + len(pos))
        self._next_serial += len(pos)
        for field in self._instance_fields():
            for a in field:
                if a is not None:
                    a[pos] = 0
        self._set_row_hash(pos, id_bytes)
        self._refresh_thresholds(touched)

    def _instance_fields(self) -> tuple[list, list, list]:
        return (self.codes, self.residuals, self.digests)

    def contributions(self, instance: int, pos: np.ndarray) -> Contributions:
        """The stored contributions of the rows at ``pos`` to ``instance``."""
        return Contributions(
            take_rows(self.codes[instance], pos),
            take_rows(self.residuals[instance], pos),
            take_rows(self.digests[instance], pos),
        )

    def features_at(self, pos: np.ndarray) -> np.ndarray:
        """``X[pos]`` (a copy) for an integer position array: whole rows per item in RAM
        (see :func:`take_rows`), read from the file when the features are on disk."""
        return take_rows(self.X, pos)

    def set_instance_rows(
        self, instance: int, pos: np.ndarray, contrib: Contributions, *, adopt: bool = False
    ) -> None:
        """Store an instance's contributions for the rows at ``pos``.

        With ``adopt`` the caller gives the arrays away (a fresh build's result, used by
        nothing else): when ``pos`` is every row in order and the store's capacity is its
        size (right after a fit), each array becomes the store's column without a copy — a
        fit would otherwise hold every row's contributions twice until it returns.
        """
        values_by_field = (contrib.codes, contrib.residuals, contrib.digests)
        span = None
        whole = (
            adopt
            and self.capacity == self.size
            and len(pos) == self.size
            and np.array_equal(pos, np.arange(self.size))
        )
        for field, values in zip(self._instance_fields(), values_by_field, strict=True):
            if (
                whole
                and type(values) is np.ndarray
                and values.flags.c_contiguous
                and values.flags.writeable
                and len(values) == self.size
            ):
                field[instance] = values
                continue
            current = field[instance]
            if (
                current is None
                or current.shape[1:] != values.shape[1:]
                or (current.dtype != values.dtype)
            ):
                field[instance] = np.zeros((self.capacity,) + values.shape[1:], dtype=values.dtype)
            if span is None:
                span = _span(pos)
            if span is not None:  # a run of positions: a block copy, not a gather-scatter
                field[instance][span] = values
            else:
                field[instance][pos] = values

    def spill(self, rows_dir: str | os.PathLike) -> None:
        """Move the features out of RAM into a :class:`DiskRows` file in ``rows_dir``.

        Everything else stays in memory: ids, targets, draws, hashes and the per-instance
        contributions (what a deletion subtracts). Bits are unchanged: the file holds the
        very float32 values.
        """
        if isinstance(self.X, DiskRows):
            return
        disk = DiskRows.create(rows_dir, self.n_features, self.capacity)
        copy_rows(disk, 0, self.X, self.size)
        self.rows_dir, self.X = Path(rows_dir), disk

    def primary_columns(self) -> tuple:
        """The columns a build reads, in :class:`~forgetting.instance.RowData`'s order (X,
        targets, draws, pool flags, serials, row hashes), full capacity: for copies."""
        return (self.X, self.targets, self.draws, self.in_pool, self.serial, self.row_hash)

    def features(self, n_rows: int | None = None, copy: bool = False):
        """X of the first ``n_rows`` rows (default: all): a view, or a private copy (a file of
        its own when the features are on disk)."""
        n = self.size if n_rows is None else n_rows
        if isinstance(self.X, DiskRows):
            return self.X.snapshot(n) if copy else self.X.head(n)
        return self.X[:n].copy() if copy else self.X[:n]

    def snapshot(self, pos: np.ndarray | None = None, features: bool = True) -> RowsSnapshot:
        """Copies of the primary data of the rows at ``pos`` (default: all, in order);
        ``features=False`` leaves the features out (X None): for a caller that writes
        contributions alone, which would otherwise copy every row's inputs (150 MB at 300k
        rows × 128) under the engine lock for nothing."""
        pos = np.arange(self.size) if pos is None else np.asarray(pos, dtype=np.intp)
        return RowsSnapshot(
            ids=self._id_index.id_list(pos),
            X=self.X[pos].copy() if features else None,
            targets=self.targets[pos].copy(),
            in_pool=self.in_pool[pos].copy(),
        )

    # -- ids ----------------------------------------------------------------------------
    def lookup(self, ids: Sequence[Hashable]) -> np.ndarray:
        """Position of each id, -1 where no row holds it (see :meth:`IdIndex.lookup`)."""
        return self._id_index.lookup(ids)

    def positions_of(self, ids: Sequence[Hashable]) -> np.ndarray:
        """Positions of ``ids``; KeyError (the first unknown id) if a row is missing."""
        return self._id_index.positions_of(ids)

    def unknown_ids(self, ids: Sequence[Hashable]) -> list:
        """The ids of ``ids`` no row holds, in order (one vectorized lookup)."""
        return self._id_index.unknown_ids(ids)
