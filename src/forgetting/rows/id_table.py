"""The int id table: int64 row id → row position, the row store's index of its int ids.

An open-addressing hash table in numpy arrays, so that a batch of ids is looked up, inserted,
deleted or re-pointed with a few array operations, and a deleted id leaves nothing behind
(design.md §5.7). String ids are indexed beside it by
:class:`~forgetting.rows.index.IdIndex`, which owns this table.
"""

from __future__ import annotations

import secrets

import numpy as np

from ..ids import _INT64_MAX, _INT64_MIN

_EMPTY = -1
_TOMBSTONE = -2
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1
_MIN_SLOTS = 64


def _slots_for(n_keys: int) -> int:
    """Table size for ``n_keys`` live keys: a power of two at least 3× the keys (load ≤ 1/3
    after a rebuild, so probe runs stay short until tombstones and inserts reach 1/2)."""
    return max(_MIN_SLOTS, 1 << max(0, 3 * n_keys - 1).bit_length())


class IntIdTable:
    """int64 row id → row position: an open-addressing hash table kept in two numpy arrays.

    Why: a Python ``dict`` costs one interpreted step and two or three cache misses per id,
    paid for every lookup and again for removing and re-pointing the ids of the rows that
    leave and move. Here a batch is looked up, inserted, deleted or re-pointed with a few numpy
    operations per probe round (linear probing on a keyed splitmix64 hash), and single ids take
    a short scalar loop.

    ``vals`` holds the position (≥ 0), ``_EMPTY`` or ``_TOMBSTONE``. A deleted entry's key is
    overwritten with 0 and its value with ``_TOMBSTONE`` (design.md §5.7: no id survives its
    forget in the table; only that *some* key once hashed to the slot remains, as in a dict).
    Inserts reuse tombstones (the caller guarantees new keys are absent), and the table is
    rebuilt without tombstones when live keys plus tombstones would pass half the slots.

    The caller (the id index) keeps, per row, the slot its id occupies, so deleting or
    re-pointing the rows that a removal touches needs no lookup at all. Slots change only in
    :meth:`insert` when it rebuilds; it then returns ``True`` and the caller re-reads every
    live slot (:meth:`live`).

    The hash is salted per table with random bits, so nobody who chooses ids can aim them at
    one probe run (a layout detail: lookups, positions and every model bit are the same for
    any salt).
    """

    def __init__(self, salt: int | None = None):
        self._salt = secrets.randbits(64) if salt is None else int(salt) & _MASK64
        self.n_live = 0
        self.n_used = 0
        """Live keys plus tombstones: what decides when to rebuild."""
        self._alloc(_MIN_SLOTS)

    def _alloc(self, n_slots: int) -> None:
        # one attribute, swapped whole: a reader in another thread (``has_id`` runs without
        # the engine's lock) never pairs one table's keys with another's mask
        self._state = (
            np.zeros(n_slots, dtype=np.int64),
            np.full(n_slots, _EMPTY, dtype=np.int64),
            n_slots - 1,
            np.uint64(64 - (n_slots.bit_length() - 1)),
        )

    @property
    def keys(self) -> np.ndarray:
        """The key of each slot (0 where empty or deleted)."""
        return self._state[0]

    @property
    def vals(self) -> np.ndarray:
        """The position of each slot's row, or ``_EMPTY`` / ``_TOMBSTONE``."""
        return self._state[1]

    def __len__(self) -> int:
        return self.n_live

    # -- hashing -------------------------------------------------------------------------
    def _home(self, keys: np.ndarray, shift: np.uint64) -> np.ndarray:
        """Home slot of each int64 key: the top bits of splitmix64's finalizer of the salted
        key (a bijection of 64-bit words, so sequential ids spread evenly)."""
        z = keys.view(np.uint64) ^ np.uint64(self._salt)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
        z ^= z >> np.uint64(31)
        return (z >> shift).astype(np.intp)

    def _home_scalar(self, key: int, shift: np.uint64) -> int:
        """:meth:`_home` of one key with Python ints (no numpy scalar overflow warnings)."""
        z = (key & _MASK64) ^ self._salt
        z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
        z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
        z ^= z >> 31
        return z >> int(shift)

    # -- lookups -------------------------------------------------------------------------
    def get(self, key: int) -> int:
        """Position of ``key`` (a Python int), or -1."""
        if not _INT64_MIN <= key <= _INT64_MAX:
            return -1
        keys, vals, mask, shift = self._state
        z = (key & _MASK64) ^ self._salt  # _home_scalar, inlined: a one-row forget's lookup
        z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
        z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
        slot = (z ^ (z >> 31)) >> int(shift)
        while True:
            v = vals.item(slot)
            if v == _EMPTY:
                return -1
            if v >= 0 and keys.item(slot) == key:
                return v
            slot = (slot + 1) & mask

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Positions of int64 ``keys`` (-1 where absent), one vectorized probe per round."""
        q = np.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
        out = np.full(q.size, -1, dtype=np.int64)
        if q.size == 0 or self.n_live == 0:
            return out
        K, V, mask, shift = self._state
        slot = self._home(q, shift)
        idx = np.arange(q.size)
        while idx.size:
            v = V[slot]
            hit = (K[slot] == q) & (v >= 0)
            out[idx[hit]] = v[hit]
            go = ~hit & (v != _EMPTY)
            idx, slot, q = idx[go], (slot[go] + 1) & mask, q[go]
        return out

    # -- changes -------------------------------------------------------------------------
    def insert(self, keys: np.ndarray, positions: np.ndarray, slots_out: np.ndarray) -> bool:
        """Insert int64 ``keys`` (absent and distinct: the caller has checked) at
        ``positions``; write each key's slot to ``slots_out``. Returns True when the table was
        rebuilt first (every live slot moved: re-read them with :meth:`live`)."""
        q = np.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        rebuilt = False
        if 2 * (self.n_used + q.size) > self.vals.size:
            self._rebuild(self.n_live + q.size)
            rebuilt = True
        if q.size <= _SMALL:
            for j in range(q.size):
                slots_out[j] = self._insert_one(int(q[j]), int(positions[j]))
            return rebuilt
        K, V, mask, shift = self._state
        slot = self._home(q, shift)
        idx = np.arange(q.size)
        while idx.size:
            free = V[slot] < 0
            if free.any():
                # the first key (in batch order) aiming at a free slot takes it
                cand, cand_slot = idx[free], slot[free]
                order = np.argsort(cand_slot, kind="stable")
                sorted_slots = cand_slot[order]
                first = np.ones(order.size, dtype=bool)
                first[1:] = sorted_slots[1:] != sorted_slots[:-1]
                taken, win = sorted_slots[first], cand[order[first]]
                self.n_used += int(np.count_nonzero(V[taken] == _EMPTY))
                K[taken] = q[win]
                V[taken] = positions[win]
                slots_out[win] = taken
                placed = np.zeros(q.size, dtype=bool)
                placed[win] = True
                go = ~placed[idx]
                idx, slot = idx[go], slot[go]
            # every key still waiting sits on an occupied slot now: step on
            slot = (slot + 1) & mask
        self.n_live += q.size
        return rebuilt

    def insert_one(self, key: int, position: int) -> tuple[int, bool]:
        """:meth:`insert` of one key (a Python int, absent): (its slot, whether the table
        was rebuilt first)."""
        rebuilt = False
        if 2 * (self.n_used + 1) > self.vals.size:
            self._rebuild(self.n_live + 1)
            rebuilt = True
        return self._insert_one(key, position), rebuilt

    def _insert_one(self, key: int, position: int) -> int:
        keys, vals, mask, shift = self._state
        z = (key & _MASK64) ^ self._salt  # _home_scalar, inlined (a one-row insert)
        z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
        z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
        slot = (z ^ (z >> 31)) >> int(shift)
        while vals.item(slot) >= 0:
            slot = (slot + 1) & mask
        if vals.item(slot) == _EMPTY:
            self.n_used += 1
        keys[slot], vals[slot] = key, position
        self.n_live += 1
        return slot

    def delete(self, slots: np.ndarray) -> None:
        """Delete the entries at ``slots`` (live, distinct): key zeroed, value a tombstone."""
        self.keys[slots] = 0
        self.vals[slots] = _TOMBSTONE
        self.n_live -= int(np.size(slots))

    def repoint(self, slots: np.ndarray, positions: np.ndarray) -> None:
        """The entries at ``slots`` now name rows at ``positions`` (rows that moved)."""
        self.vals[slots] = positions

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """(slots, positions) of every live entry."""
        slots = np.flatnonzero(self.vals >= 0)
        return slots, self.vals[slots]

    def key_at(self, slots: np.ndarray) -> np.ndarray:
        return self.keys[slots]

    def _rebuild(self, n_keys: int) -> None:
        """Re-insert the live entries into a tombstone-free table sized for ``n_keys``."""
        slots, positions = self.live()
        keys = self.keys[slots]
        self._alloc(_slots_for(n_keys))
        self.n_live = self.n_used = 0
        if keys.size:
            self.insert(keys, positions, np.empty(keys.size, dtype=np.intp))


_SMALL = 16
"""Batches up to this size take the scalar paths: a probe round's numpy calls cost more than
a short Python loop there (a one-row forget is a single lookup)."""
