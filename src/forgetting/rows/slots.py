"""SlotRows: the rows a forest's instances all read, held once, each in a stable slot.

Why: an exact forest of p instances grows every instance's trees from *all* rows — each on
its own bin grid (its own D°) — so each instance once kept its own copy of the ids, the id
bytes, an id → position map, the float32 features, the keyed draws and the targets: p copies
of the rows. Here they are kept once, as dare_rf keeps one ``_DataManager`` for all its
trees; an instance keeps only what is its own (the rows' bin codes on its grid, its trees,
the rows' hashes under its D°).

Why slots and not the row store's compact positions (:class:`~forgetting.rows.RowStore`,
which fills a removed row's hole with the tail row): a tree's leaves list the rows they
hold by index, in every tree of every instance, so a row must keep its index while it is
held. A removed row's slot goes on a free list, overwritten (no residue: its id, features
and target are cleared) and reused by the next insert; the table grows by doubling.

Each row also gets a *serial* (from a counter that only grows): a copy of the table
(:meth:`copy`, what a background rebuild grows an instance from) and the live table say by
:meth:`diff` which rows left and which came since the copy — what the rebuilt instance is
reconciled with before it serves, as the QSS row store's serials are.

The caller (the forest's engine) orders a change: a forget is applied to the instances
while its rows are still here (an instance that refits reads every other row), then
:meth:`remove`; an insert is :meth:`add` first, then applied to the instances.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ..schema.membership import draws as keyed_draws


class SlotRows:
    """Ids, id bytes, float32 features (NaN = missing), targets and keyed draws of the rows
    held, by slot (module docstring). ``targets`` are int64 class indices, or float64
    targets; ``draws[:, r]`` decides D°_r of instance r (column p is the fold draw)."""

    def __init__(self, n_features: int, n_instances: int, key: bytes, target_dtype):
        self.n_features = n_features
        self.n_instances = n_instances
        self._key = key
        self.target_dtype = np.dtype(target_dtype)
        self._alloc(0)
        self._ids: list = []
        self._raw: list = []
        self._slot: dict[Hashable, int] = {}
        self._free: list[int] = []
        self._next_serial = 0
        self.changes = 0
        """Counts the changes (adds, removals): a copy that replayed the changes the live
        table made since it was taken has the same count."""
        self._class_counts = np.zeros(0, np.int64)

    def _alloc(self, capacity: int) -> None:
        self.X = np.zeros((capacity, self.n_features), np.float32)
        self.targets = np.zeros(capacity, self.target_dtype)
        self.draws = np.ones((capacity, self.n_instances + 1), np.float64)
        self.serial = np.full(capacity, -1, np.int64)
        """Each held row's serial (-1: a free slot)."""

    # -- the rows ----------------------------------------------------------------------------
    def reset(self, id_list: list, id_raw: list, X: np.ndarray, y: np.ndarray) -> None:
        """Hold exactly these rows, in slots 0..n-1 (a fit)."""
        n = len(id_list)
        self._alloc(n)
        self.X[:] = X
        self.targets[:] = y
        self.draws[:] = keyed_draws(self._key, id_raw, self.n_instances)
        self.serial[:] = np.arange(self._next_serial, self._next_serial + n)
        self._next_serial += n
        self._ids = list(id_list)
        self._raw = list(id_raw)
        self._slot = {row_id: p for p, row_id in enumerate(id_list)}
        self._free = []
        self.changes += 1
        if self.target_dtype.kind == "i":
            self._class_counts = np.bincount(self.targets, minlength=0).astype(np.int64)

    def add(self, id_list: list, id_raw: list, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Hold new rows (ids not held); returns their slots."""
        slots = self._allocate(len(id_list))
        for p, row_id, raw in zip(slots.tolist(), id_list, id_raw, strict=True):
            self._ids[p], self._raw[p] = row_id, raw
            self._slot[row_id] = p
        self.X[slots] = X
        self.targets[slots] = y
        self.draws[slots] = keyed_draws(self._key, id_raw, self.n_instances)
        self.serial[slots] = np.arange(self._next_serial, self._next_serial + len(slots))
        self._next_serial += len(slots)
        if self.target_dtype.kind == "i":
            self._count(slots, 1)
        self.changes += 1
        return slots

    def remove(self, slots: np.ndarray) -> None:
        """Drop the rows at ``slots``: every field overwritten, the slots free for reuse."""
        if self.target_dtype.kind == "i":
            self._count(slots, -1)
        for p in slots.tolist():
            del self._slot[self._ids[p]]
            self._ids[p] = None
            self._raw[p] = None
            self._free.append(p)
        self.X[slots] = 0.0
        self.targets[slots] = 0
        self.draws[slots] = 1.0
        self.serial[slots] = -1
        self.changes += 1

    def _count(self, slots: np.ndarray, sign: int) -> None:
        counts = np.bincount(self.targets[slots], minlength=self._class_counts.size)
        if counts.size > self._class_counts.size:
            self._class_counts = np.pad(
                self._class_counts, (0, counts.size - self._class_counts.size)
            )
        self._class_counts += sign * counts

    def _allocate(self, m: int) -> np.ndarray:
        """``m`` free slots: reused ones first (last freed first), then new ones at the end,
        the table doubling when it must grow."""
        take = min(m, len(self._free))
        slots = [self._free.pop() for _ in range(take)]
        cap = self.capacity
        extra = m - take
        if extra:
            size = max(2 * cap, cap + extra)
            X, targets, draws, serial = self.X, self.targets, self.draws, self.serial
            self._alloc(size)
            self.X[:cap], self.targets[:cap], self.draws[:cap] = X, targets, draws
            self.serial[:cap] = serial
            self._ids += [None] * (size - cap)
            self._raw += [None] * (size - cap)
            slots += list(range(cap, cap + extra))
            self._free += list(range(size - 1, cap + extra - 1, -1))
        return np.array(slots, dtype=np.int64)

    def copy(self) -> SlotRows:
        """A private copy (same slots, free list and capacity): what a background rebuild
        grows an instance from while the live table takes changes."""
        out = SlotRows.__new__(SlotRows)
        out.__dict__.update(self.__dict__)
        out.X, out.targets, out.draws = self.X.copy(), self.targets.copy(), self.draws.copy()
        out.serial = self.serial.copy()
        out._ids, out._raw = list(self._ids), list(self._raw)
        out._slot, out._free = dict(self._slot), list(self._free)
        out._class_counts = self._class_counts.copy()
        return out

    def diff(self, later: SlotRows) -> tuple[np.ndarray, np.ndarray]:
        """(slots of the rows held here that ``later`` — a later state of the same table —
        no longer holds, slots of the rows ``later`` holds that are not here), by serial:
        a slot freed and reused since is in both."""
        mine = self.live()
        cap = later.capacity
        kept = (mine < cap) & (later.serial[np.minimum(mine, cap - 1)] == self.serial[mine])
        theirs = later.live()
        own = theirs < self.capacity
        same = np.zeros(len(theirs), dtype=bool)
        same[own] = self.serial[theirs[own]] == later.serial[theirs[own]]
        return mine[~kept], theirs[~same]

    # -- reads -------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.X.shape[0]

    @property
    def n_rows(self) -> int:
        return len(self._slot)

    def live(self) -> np.ndarray:
        """The slots of the rows held, in slot order (storage order)."""
        return np.array(sorted(self._slot.values()), dtype=np.int64)

    def slots_of(self, ids: Sequence[Hashable]) -> np.ndarray:
        """The slots of held ids (KeyError naming an unknown one)."""
        return np.array([self._slot[i] for i in ids], dtype=np.int64)

    def unknown_ids(self, ids: Sequence[Hashable]) -> list:
        return [i for i in ids if i not in self._slot]

    def known_ids(self, ids: Sequence[Hashable]) -> list:
        return [i for i in ids if i in self._slot]

    def ids_at(self, slots: np.ndarray) -> list:
        return [self._ids[p] for p in slots.tolist()]

    def raw_at(self, slots: np.ndarray) -> list:
        """The canonical id bytes of the rows at ``slots``."""
        return [self._raw[p] for p in slots.tolist()]

    def ids(self) -> list:
        """Ids of the rows held, in storage order."""
        return self.ids_at(self.live())

    def rows(self) -> tuple[list, list, np.ndarray, np.ndarray]:
        """(ids, id bytes, X, targets) of the rows held, in storage order (copies)."""
        live = self.live()
        return self.ids_at(live), self.raw_at(live), self.X[live], self.targets[live]

    def class_counts(self, n_classes: int) -> np.ndarray:
        """Rows per class (classification)."""
        out = np.zeros(n_classes, np.int64)
        counts = self._class_counts[:n_classes]
        out[: counts.size] = counts
        return out

    def class_counts_without(self, ids: Sequence[Hashable], n_classes: int) -> np.ndarray:
        """Rows per class once the held rows ``ids`` are gone (KeyError for an unknown id)."""
        gone = self.slots_of(ids)
        return self.class_counts(n_classes) - np.bincount(self.targets[gone], minlength=n_classes)

    def nbytes(self) -> int:
        """Bytes of the arrays (capacity), without the id lists and map."""
        return int(self.X.nbytes + self.targets.nbytes + self.draws.nbytes)
