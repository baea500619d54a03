"""The row store: what a rebuild and an exact subtraction need, per row, and nothing else.

Rows are addressed by stable external ids; positions are an internal detail (a removed row's
slot is filled by the last row). Every field of a removed row is overwritten, so the object
keeps no residue of it (design.md §5.7) — its id included: ids are columns too (int ids as
keys of an int64 hash table, :class:`forgetting.ids.IntIdTable`, whose deleted entries are
zeroed; string ids in an object column and a dict, which drop their references — Python
does not scrub a freed string's memory), so a batch's ids are looked up, dropped
and re-pointed with array operations rather than a Python step per id. Each row also gets a
*serial* that changes whenever its content changes; background rebuilds use serials to
reconcile the rows they trained on with the rows present when they finish.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Hashable, Iterator, Mapping, Sequence
from itertools import repeat
from numbers import Integral
from pathlib import Path

import numpy as np

from .content.fingerprint import MODULUS, Contributions, digest_rows, multiset_sum
from .ids import _SMALL, IntIdTable
from .labels import UNLABELED, is_labeled, unlabeled_value
from .schema.membership import MembershipRule
from .snapshots import RowsSnapshot


def row_hashes(
    id_bytes: Sequence[bytes], targets: np.ndarray, in_pool: np.ndarray, X: np.ndarray
) -> np.ndarray:
    """The identity hash of each row: BLAKE2b over (framed id, target, pool flag, float32
    features), (n, 32) uint8. A pure per-row function, so any process may compute it for any
    chunk of rows (forgetting.distributed does, on the workers)."""
    framed = np.array([len(b).to_bytes(4, "little") + b for b in id_bytes], dtype=object)
    return digest_rows(
        framed,
        np.asarray(targets),
        np.asarray(in_pool, dtype=bool),
        np.asarray(X, dtype=np.float32),
        person=b"qss-row",
    )


class HandedOver(np.ndarray):
    """An array its owner gives to the row store (see :func:`hand_over`)."""


def hand_over(values: np.ndarray) -> HandedOver:
    """Mark a freshly made array as given away: an empty store's :meth:`RowStore.append`
    then keeps it as the column itself when its shape and dtype are the column's, instead of
    copying it. Why: a distributed fit gathers the rows' float32 features, keyed draws and
    identity hashes into arrays of exactly the store's shape, and a copy would hold every row
    twice for the whole fit (docs/distributed.md). The caller must not use the array after
    the store took it (the store overwrites removed rows in place); a view, no copy."""
    return np.asarray(values).view(HandedOver)


def _adoptable(values, column) -> bool:
    return (
        isinstance(values, HandedOver)
        and isinstance(column, np.ndarray)
        and values.shape == column.shape
        and values.dtype == column.dtype
        and values.flags.c_contiguous
        and values.flags.writeable
    )


class DiskRows:
    """float32 feature rows of fixed width in a file: the row store's X out of RAM.

    Rows are read and written with ``pread``/``pwrite`` (no memory map), so the memory a read
    costs is the rows it returns: a rebuild streaming chunks of ``chunk_rows`` rows holds one
    chunk, whatever the file's size. Supports the slice of the ndarray interface the engine
    uses on X — ``shape``, ``dtype``, ``len``, reads by int / slice / int array / bool mask,
    writes by slice / int array (values or a scalar) — so the store's code is the same for
    both. A freed slot is overwritten with zeros *in the file* (design.md §5.7); the file
    holds nothing but the live rows' features (no ids, labels or codes).
    """

    dtype = np.dtype("<f4")
    ndim = 2

    def __init__(self, path: str | os.PathLike, n_features: int, n_rows: int, *, temp: bool):
        self.path = Path(path)
        self.n_features = int(n_features)
        self._row_bytes = self.n_features * self.dtype.itemsize
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._n_rows = 0
        self._finalizer = weakref.finalize(self, _close_row_file, self._fd, self.path, temp)
        self.resize(n_rows)

    @classmethod
    def create(cls, directory: str | os.PathLike, n_features: int, n_rows: int) -> DiskRows:
        """A new zero-filled file of ``n_rows`` rows in ``directory``, removed with the object."""
        Path(directory).mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="rows-", suffix=".f32", dir=directory)
        os.close(fd)
        return cls(name, n_features, n_rows, temp=True)

    @property
    def shape(self) -> tuple[int, int]:
        return (self._n_rows, self.n_features)

    def __len__(self) -> int:
        return self._n_rows

    def resize(self, n_rows: int) -> None:
        """Grow (zero-filled) or shrink the file to ``n_rows`` rows."""
        os.ftruncate(self._fd, int(n_rows) * self._row_bytes)
        self._n_rows = int(n_rows)

    def close(self) -> None:
        self._finalizer()

    def _index(self, key) -> tuple[np.ndarray | None, int, int]:
        """(positions, or None for the contiguous range [start, stop))."""
        if isinstance(key, slice):
            start, stop, step = key.indices(self._n_rows)
            if step == 1:
                return None, start, max(start, stop)
            return np.arange(start, stop, step, dtype=np.intp), 0, 0
        idx = np.asarray(key)
        if idx.dtype == bool:
            if idx.shape != (self._n_rows,):
                raise IndexError(f"boolean index of shape {idx.shape} for {self._n_rows} rows")
            return np.flatnonzero(idx), 0, 0
        idx = idx.astype(np.intp, copy=False).reshape(-1)
        idx = np.where(idx < 0, idx + self._n_rows, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= self._n_rows):
            raise IndexError(f"row index out of range for {self._n_rows} rows")
        return idx, 0, 0

    def _runs(self, idx: np.ndarray) -> Iterator[tuple[int, int, int]]:
        """(offset into idx, first row, count) of each run of consecutive rows in ``idx``."""
        if idx.size == 0:
            return
        breaks = np.flatnonzero(np.diff(idx) != 1) + 1
        starts = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [idx.size]])
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            yield a, int(idx[a]), b - a

    def _read(self, first: int, count: int, out: np.ndarray) -> None:
        view = memoryview(out.reshape(-1).view(np.uint8))
        done, want, offset = 0, count * self._row_bytes, first * self._row_bytes
        while done < want:
            got = os.preadv(self._fd, [view[done:want]], offset + done)
            if got <= 0:
                raise OSError(f"short read from {self.path}")
            done += got

    def _write(self, first: int, rows: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(rows, dtype=self.dtype).reshape(-1).view(np.uint8))
        done, offset = 0, first * self._row_bytes
        while done < len(data):
            done += os.pwrite(self._fd, data[done:], offset + done)

    def __getitem__(self, key) -> np.ndarray:
        columns = None
        if isinstance(key, tuple):
            key, columns = key
        scalar = isinstance(key, int | np.integer)
        idx, start, stop = self._index([key] if scalar else key)
        if idx is None:
            out = np.empty((stop - start, self.n_features), dtype=self.dtype)
            self._read(start, stop - start, out)
        else:
            out = np.empty((idx.size, self.n_features), dtype=self.dtype)
            for at, first, count in self._runs(idx):
                self._read(first, count, out[at : at + count])
        if scalar:
            out = out[0]
        return out if columns is None else out[..., columns]

    def __setitem__(self, key, values) -> None:
        idx, start, stop = self._index(key)
        n = (stop - start) if idx is None else idx.size
        values = np.broadcast_to(np.asarray(values, dtype=self.dtype), (n, self.n_features))
        if idx is None:
            for a in range(0, n, _IO_ROWS):
                self._write(start + a, values[a : a + _IO_ROWS])
            return
        for at, first, count in self._runs(idx):
            self._write(first, values[at : at + count])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def head(self, n_rows: int) -> DiskRows:
        """A view of the first ``n_rows`` rows (same file, no copy)."""
        view = object.__new__(DiskRows)
        view.path, view.n_features, view._row_bytes = self.path, self.n_features, self._row_bytes
        view._fd, view._n_rows = self._fd, int(n_rows)
        view._finalizer = weakref.finalize(view, lambda _owner: None, self)  # keeps self alive
        return view

    def snapshot(self, n_rows: int, directory: str | os.PathLike | None = None) -> DiskRows:
        """A private copy of the first ``n_rows`` rows (a background rebuild's snapshot), copied
        file to file in bounded pieces; removed when the copy is dropped."""
        copy = DiskRows.create(directory or self.path.parent, self.n_features, n_rows)
        for a in range(0, n_rows, _IO_ROWS):
            copy[a : min(a + _IO_ROWS, n_rows)] = self[a : min(a + _IO_ROWS, n_rows)]
        return copy


_IO_ROWS = 1 << 16
"""Rows per read or write when DiskRows copies ranges: bounds the copy's buffer."""


def _close_row_file(fd: int, path: Path, temp: bool) -> None:
    os.close(fd)
    if temp:
        path.unlink(missing_ok=True)


def copy_rows(dst, dst_start: int, src, n_rows: int) -> None:
    """dst[dst_start : dst_start + n_rows] = src[:n_rows], in pieces when either is on disk."""
    if not isinstance(dst, DiskRows) and not isinstance(src, DiskRows):
        dst[dst_start : dst_start + n_rows] = src[:n_rows]
        return
    for a in range(0, n_rows, _IO_ROWS):
        b = min(a + _IO_ROWS, n_rows)
        dst[dst_start + a : dst_start + b] = src[a:b]


def _row_view(a):
    """``a`` as a 1-D array of whole rows (one opaque item per row) when it is an in-memory
    C-contiguous array of rows of more than one value, else None.

    Why: numpy's fancy indexing moves a 2-D array's rows value by value (its inner loop runs
    over the columns of each row), while ``take``/``put`` on the row-sized void view copy each
    row as one item — 2–4× faster for the store's narrow columns (32-byte hashes and digests,
    4 draws, 10 residuals, 64 codes), with the very same bytes."""
    if not (isinstance(a, np.ndarray) and a.ndim >= 2 and a.shape[0] and a.flags.c_contiguous):
        return None
    row_bytes = a.itemsize * (a.size // a.shape[0])
    if row_bytes <= a.itemsize or a.dtype.hasobject:
        return None
    flat = a.reshape(a.shape[0], -1)  # a view: a is C-contiguous
    return flat.view(np.dtype((np.void, row_bytes))).reshape(a.shape[0])


_ROW_VIEW_MIN = 32
"""Fewer rows than this are indexed plainly: making the view costs more than it saves (a
one-row forget touches a dozen columns)."""

_FEW_ROWS = 4
"""Up to this many rows move one by one with plain integer indexing: numpy's fancy indexing
of a 2-D column costs ~1.8 µs even for one row, a basic ``a[i] = a[j]`` ~0.25 µs."""


def take_rows(a, pos):
    """``a[pos]`` (a copy, the same bits); an integer position array of many rows goes
    through the rows' void view when there is one (see :func:`_row_view`), a single position
    through a one-row slice."""
    if isinstance(pos, np.ndarray) and pos.dtype.kind in "iu":
        if pos.size >= _ROW_VIEW_MIN:
            view = _row_view(a)
            if view is not None:
                return view.take(pos).view(a.dtype).reshape((pos.size,) + a.shape[1:])
        elif pos.size == 1 and pos.ndim == 1 and isinstance(a, np.ndarray):
            p = int(pos[0])
            if -a.shape[0] <= p < a.shape[0]:
                p %= a.shape[0]
                return a[p : p + 1].copy()
    return a[pos]


def _move_rows(a, holes: np.ndarray, fillers: np.ndarray, few: list | None) -> None:
    """``a[holes] = a[fillers]``: whole rows as single items where that is faster; ``few``
    is the (hole, filler) pairs as Python ints when there are at most ``_FEW_ROWS``."""
    if few is not None and isinstance(a, np.ndarray):
        for hole, filler in few:
            a[hole] = a[filler]
        return
    if holes.size == 0:
        return
    view = _row_view(a) if holes.size >= _ROW_VIEW_MIN else None
    if view is not None:
        view.put(holes, view.take(fillers))
    else:
        a[holes] = a[fillers]


def _span(pos: np.ndarray) -> slice | None:
    """``pos`` as a slice when it is a run of consecutive positions (a rebuild storing every
    row's contributions: ~4× faster to copy as a block than to scatter 300k rows), else None."""
    pos = np.asarray(pos)
    if pos.ndim != 1 or pos.dtype.kind not in "iu" or pos.size < _ROW_VIEW_MIN:
        return None
    first = int(pos[0])
    if int(pos[-1]) - first + 1 != pos.size or not np.array_equal(
        pos, np.arange(first, first + pos.size)
    ):
        return None
    return slice(first, first + pos.size)


def _unique(pos) -> np.ndarray:
    """Sorted distinct positions (``np.unique``'s answer; numpy 2.4's unique took 2.3 ms on
    20k positions, a sort and a neighbour comparison 0.6 ms)."""
    pos = np.sort(np.asarray(pos, dtype=np.intp).reshape(-1))
    if pos.size > 1:
        distinct = np.empty(pos.size, dtype=bool)
        distinct[0] = True
        np.not_equal(pos[1:], pos[:-1], out=distinct[1:])
        if not distinct.all():
            pos = pos[distinct]
    return pos


class RowIds(Sequence):
    """The external id of every row, in position order: a read-only view of the store.

    Ids live in the store's columns (int ids as the keys of its :class:`IntIdTable`, one slot
    per row; string ids in an object column), not in a Python list, so a removal moves them
    with the rows' other columns in one pass and overwrites the ids of the rows that leave.
    Indexing, ``len``, iteration, ``in`` (a hash lookup, not a scan) and comparison with a
    list behave as the list this replaces did."""

    __slots__ = ("_store",)

    def __init__(self, store: RowStore):
        self._store = store

    def __len__(self) -> int:
        return self._store.size

    def __getitem__(self, key):
        store = self._store
        if isinstance(key, slice):
            return store._id_list()[key]
        p = int(key)
        if p < 0:
            p += store.size
        if not 0 <= p < store.size:
            raise IndexError("row position out of range")
        return store._id_at(p)

    def __iter__(self) -> Iterator[int | str]:
        return iter(self._store._id_list())

    def __contains__(self, row_id) -> bool:
        return self._store._position_of(row_id) >= 0

    def __eq__(self, other) -> bool:
        if isinstance(other, RowIds | list | tuple):
            return self._store._id_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowIds({self._store._id_list()!r})"


class RowPositions(Mapping):
    """id → position of every row: a read-only mapping view of the store's id index (what a
    ``dict`` attribute answered before). Batch lookups go through
    :meth:`RowStore.positions_of` / :meth:`RowStore.lookup` instead: vectorized."""

    __slots__ = ("_store",)

    def __init__(self, store: RowStore):
        self._store = store

    def __getitem__(self, row_id) -> int:
        if type(row_id) is int:  # the common case, without the general dispatch
            p = self._store._int_ids.get(row_id)
        else:
            p = self._store._position_of(row_id)
        if p < 0:
            raise KeyError(row_id)
        return p

    def __contains__(self, row_id) -> bool:
        if type(row_id) is int:
            return self._store._int_ids.get(row_id) >= 0
        return self._store._position_of(row_id) >= 0

    def __len__(self) -> int:
        return self._store.size

    def __iter__(self) -> Iterator[int | str]:
        return iter(self._store._id_list())


class RowStore:
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
        self._int_ids = IntIdTable()
        """Index of the int ids (a row's slot in it: ``_slot``)."""
        self._str_ids: dict[str, int] = {}
        """Index of the string ids (a row's id itself: ``_id_str``)."""
        self._n_str = 0
        self._next_serial = 0
        self.changes = 0
        """Counts the changes of the rows (appends, removals, unlabels): a copy taken in
        pieces (:meth:`copy_rows`) is the state of one moment when this did not move."""
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
        self._slot = np.zeros(capacity, dtype=np.int64)
        """Per row with an int id, the slot of its id in ``_int_ids`` (-1 for a string id)."""
        self._id_str = np.full(capacity, None, dtype=object)
        """Per row with a string id, the id (None for an int id or a free slot)."""

    def _row_arrays(self) -> list[np.ndarray]:
        return [
            self.X,
            self.targets,
            self.serial,
            self.draws,
            self.in_pool,
            self.row_hash,
            self._slot,
            self._id_str,
        ]

    @property
    def ids(self) -> RowIds:
        """The rows' external ids in position order (a read-only sequence view)."""
        return RowIds(self)

    @property
    def position(self) -> RowPositions:
        """id → position (a read-only mapping view; batches: :meth:`positions_of`)."""
        return RowPositions(self)

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
        carries it, and ``np.mean`` of p numbers was ~8 µs of a one-row forget. The same
        float as ``np.mean`` below eight instances (both add in order from zero)."""
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
        self._index_ids(ids, start)
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

        The ids move with the other columns (they are columns: ``_slot``, ``_id_str``); the
        leaving rows' entries in the id index are deleted first and the moved rows' entries
        re-pointed after — O(batch) array operations, no per-id Python step for int ids.
        ``holding``: :meth:`instances_holding` of ``pos``, when the caller computed it since
        the last change (the engine does, to find the instances a forget hits: computing it
        twice was ~15 µs of a one-row forget)."""
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
        strings = self._n_str > 0
        self._unindex(pos)
        new_size = self.size - pos.size
        # the surviving rows of the tail fill the holes: O(batch), no O(n) mask (at 10 M rows
        # a mask of every row cost more than the rest of a one-row forget)
        few = None
        if pos.size <= _FEW_ROWS:  # a few rows: the same pairs, in Python ints
            leaving = pos.tolist()
            doomed = set(leaving)
            few = list(
                zip(
                    [p for p in leaving if p < new_size],
                    [p for p in range(new_size, self.size) if p not in doomed],
                    strict=True,  # as many survivors in the tail as holes before it
                )
            )
            holes = np.array([h for h, _ in few], dtype=np.intp)
            fillers = np.array([f for _, f in few], dtype=np.intp)  # for a DiskRows X
        else:
            holes = pos[pos < new_size]
            doomed_tail = np.zeros(pos.size, dtype=bool)
            doomed_tail[pos[pos >= new_size] - new_size] = True
            fillers = np.flatnonzero(~doomed_tail) + new_size
        arrays = self._row_arrays() + [
            a for field in self._instance_fields() for a in field if a is not None
        ]
        if not strings:  # the string-id column is all None, before and after
            arrays = [a for a in arrays if a is not self._id_str]
        for a in arrays:
            _move_rows(a, holes, fillers, few)
            a[new_size : self.size] = None if a.dtype == object else 0
        self._reindex(holes)
        self.size = new_size
        self._refresh_thresholds(touched)

    def _remove_one(self, p: int, holding: np.ndarray | None) -> None:
        """:meth:`remove` of the one row at ``p`` (features in RAM): the same state after it
        — the last row moves into the hole, its old slot is zeroed, the counts, the multiset
        hash and the id index change by that row — with scalar steps instead of the batch
        route's arrays of positions (a one-row forget's latency path: 30 → 16 µs, warm, at
        100k rows)."""
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
        strings = self._n_str > 0  # the string-id column moves too (else it is all None)
        row_id = self._id_str[p] if strings else None
        if row_id is None:
            self._int_ids.delete(int(self._slot[p]))
        else:
            del self._str_ids[row_id]
            self._n_str -= 1
        last = self.size - 1
        arrays = [self.X, self.targets, self.serial, self.draws, self.in_pool, self.row_hash]
        arrays.append(self._slot)
        for field in (self.codes, self.residuals, self.digests):
            arrays.extend(a for a in field if a is not None)
        for a in arrays:
            if p != last:
                a[p] = a[last]
            a[last] = 0
        if strings:
            self._id_str[p] = self._id_str[last]
            self._id_str[last] = None
        if p != last:  # re-point the moved row's index entry (_reindex of one hole)
            moved_id = self._id_str[p] if strings else None
            if moved_id is None:
                self._int_ids.repoint(int(self._slot[p]), p)
            else:
                self._str_ids[moved_id] = p
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
            ids=self._id_list(pos),
            X=self.X[pos].copy() if features else None,
            targets=self.targets[pos].copy(),
            in_pool=self.in_pool[pos].copy(),
        )

    # -- ids ------------------------------------------------------------------------------
    def _id_at(self, p: int) -> int | str:
        row_id = self._id_str[p]
        return int(self._int_ids.keys[self._slot[p]]) if row_id is None else row_id

    def _id_list(self, pos: np.ndarray | None = None) -> list[int | str]:
        """The ids of the rows at ``pos`` (default: all, in order) as Python values."""
        slots = self._slot[: self.size] if pos is None else self._slot[pos]
        if self._n_str == 0:
            return self._int_ids.keys[slots].tolist()
        strs = self._id_str[: self.size] if pos is None else self._id_str[pos]
        if self._n_str == self.size:
            return strs.tolist()
        is_str = np.not_equal(strs, None)
        out = self._int_ids.keys[np.where(is_str, 0, slots)].tolist()
        for i in np.flatnonzero(is_str).tolist():
            out[i] = strs[i]
        return out

    def _position_of(self, row_id) -> int:
        """Position of one id, or -1. Ints and strings as the ``dict`` this replaces matched
        them: numpy integers (and, as there, bools) are the int of their value."""
        kind = type(row_id)
        if kind is int:
            return self._int_ids.get(row_id)
        if kind is str or isinstance(row_id, str):
            return self._str_ids.get(row_id, -1)
        if isinstance(row_id, Integral):
            return self._int_ids.get(int(row_id))
        return -1

    def lookup(self, ids: Sequence[Hashable]) -> np.ndarray:
        """Position of each id, -1 where no row holds it (one vectorized pass for int ids).

        A batch led by a string goes through the dict in one C-level ``map``, and its misses
        are looked up again one by one when int ids are held too (one of them may be an int).
        Any other batch that numpy reads as an int64 array (ints only) is one vectorized
        lookup in the hash table; the rest (mixed kinds, floats, ints past int64) one by one.
        A batch mixing kinds is answered right either way."""
        n = len(ids)
        if n <= _SMALL:
            return np.fromiter(map(self._position_of, ids), dtype=np.intp, count=n)
        if isinstance(ids[0], str):
            out = np.fromiter(map(self._str_ids.get, ids, repeat(-1, n)), dtype=np.intp, count=n)
            if self._n_str < self.size:  # int ids held too: a miss may be one of them
                for i in np.flatnonzero(out < 0).tolist():
                    out[i] = self._position_of(ids[i])
            return out
        try:
            keys = np.asarray(ids)
        except (OverflowError, ValueError):
            keys = None
        if keys is not None and keys.ndim == 1 and keys.dtype.kind == "i":  # ints only
            return self._int_ids.lookup(keys).astype(np.intp, copy=False)
        return np.fromiter(map(self._position_of, ids), dtype=np.intp, count=n)

    def positions_of(self, ids: Sequence[Hashable]) -> np.ndarray:
        """Positions of ``ids``; KeyError (the first unknown id) if a row is missing."""
        if len(ids) <= _SMALL:
            out = []
            for row_id in ids:
                p = self._position_of(row_id)
                if p < 0:
                    raise KeyError(row_id)
                out.append(p)
            return np.array(out, dtype=np.intp)
        pos = self.lookup(ids)
        if pos.size and pos.min() < 0:
            raise KeyError(ids[int(np.flatnonzero(pos < 0)[0])])
        return pos

    def unknown_ids(self, ids: Sequence[Hashable]) -> list:
        """The ids of ``ids`` no row holds, in order (one vectorized lookup)."""
        if len(ids) > _SMALL and isinstance(ids[0], str) and self._n_str == self.size:
            # only string ids held: one C-level pass answers the usual case (all known)
            if all(map(self._str_ids.__contains__, ids)):
                return []
        return [ids[i] for i in np.flatnonzero(self.lookup(ids) < 0).tolist()]

    def _index_ids(self, ids: Sequence[int | str], start: int) -> None:
        """Index new rows' ids (validated as new) at positions ``start, start + 1, ...``."""
        n = len(ids)
        keys = None
        if n > _SMALL and not isinstance(ids[0], str):
            try:
                keys = np.asarray(ids)
            except (OverflowError, ValueError):
                keys = None
            if keys is not None and (keys.ndim != 1 or keys.dtype.kind != "i"):
                keys = None
        if keys is not None:  # all int ids: one vectorized insert
            int_pos, int_keys = np.arange(start, start + n), keys
        elif n <= _SMALL:  # a few ids (a one-row insert): no arrays at all
            table, rebuilt = self._int_ids, False
            for i, row_id in enumerate(ids):
                if isinstance(row_id, str):
                    self._index_str(row_id, start + i)
                else:
                    slot, grew = table.insert_one(int(row_id), start + i)
                    self._slot[start + i] = slot
                    rebuilt = rebuilt or grew
            if rebuilt:  # every earlier int row's slot moved
                live_slots, live_pos = table.live()
                self._slot[live_pos] = live_slots
            return
        else:
            int_at, int_list = [], []
            for i, row_id in enumerate(ids):
                if isinstance(row_id, str):
                    self._index_str(row_id, start + i)
                else:
                    int_at.append(start + i)
                    int_list.append(int(row_id))
            int_pos = np.asarray(int_at, dtype=np.intp)
            int_keys = np.asarray(int_list, dtype=np.int64)
        if int_pos.size:
            slots = np.empty(int_pos.size, dtype=np.int64)
            if self._int_ids.insert(int_keys, int_pos, slots):
                live_slots, live_pos = self._int_ids.live()
                self._slot[live_pos] = live_slots
            else:
                self._slot[int_pos] = slots

    def _index_str(self, row_id: str, at: int) -> None:
        """Index a string id at position ``at``: in the dict, the row's id column, no slot."""
        self._str_ids[row_id] = at
        self._id_str[at] = row_id
        self._slot[at] = -1
        self._n_str += 1

    def _unindex(self, pos: np.ndarray) -> None:
        """Delete the index entries of the rows at ``pos`` (before they are overwritten)."""
        slots = self._slot[pos]
        if self._n_str:
            strs = self._id_str[pos]
            is_str = np.not_equal(strs, None)
            if is_str.any():
                for row_id in strs[is_str].tolist():
                    del self._str_ids[row_id]
                self._n_str -= int(np.count_nonzero(is_str))
                slots = slots[~is_str]
        self._int_ids.delete(slots)

    def _reindex(self, holes: np.ndarray) -> None:
        """Re-point the index entries of the rows just moved into ``holes``."""
        if holes.size == 0:
            return
        slots = self._slot[holes]
        if self._n_str:
            strs = self._id_str[holes]
            is_str = np.not_equal(strs, None)
            if is_str.any():
                self._str_ids.update(
                    zip(strs[is_str].tolist(), holes[is_str].tolist(), strict=True)
                )
                slots, holes = slots[~is_str], holes[~is_str]
        self._int_ids.repoint(slots, holes)
