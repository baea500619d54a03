"""The row store's id index: external id → row position, and each row's id, as columns.

Int ids are the keys of an int64 hash table (:class:`IntIdTable`, whose deleted entries are
zeroed), a row's slot in it kept in a per-row column; string ids are a per-row object column
and a dict, which drop their references (Python does not scrub a freed string's memory). The
columns move with the store's other columns when rows leave, so a batch's ids are looked up,
dropped and re-pointed with array operations rather than a Python step per id, and a removed
row leaves no id behind (design.md §5.7).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from itertools import repeat
from numbers import Integral

import numpy as np

from .columns import TailFill
from .id_table import _SMALL, IntIdTable


class IdIndex:
    """id ↔ position of every row of a :class:`~forgetting.rows.store.RowStore`.

    The store tells it every change of positions — rows added at the end (:meth:`add`), rows
    removed with the tail's survivors moved into their holes (:meth:`remove`,
    :meth:`remove_one`), capacity grown (:meth:`grow`) — and asks it where ids are. Its size
    is the number of ids it holds: the store's size whenever the store is not mid-change."""

    def __init__(self):
        self._int_ids = IntIdTable()
        """Index of the int ids (a row's slot in it: ``_slot``)."""
        self._str_ids: dict[str, int] = {}
        """Index of the string ids (a row's id itself: ``_id_str``)."""
        self._n_str = 0
        self._slot = np.zeros(0, dtype=np.int64)
        """Per row with an int id, the slot of its id in ``_int_ids`` (-1 for a string id)."""
        self._id_str = np.full(0, None, dtype=object)
        """Per row with a string id, the id (None for an int id or a free slot)."""

    def __len__(self) -> int:
        return self._int_ids.n_live + self._n_str

    def grow(self, capacity: int, n_rows: int) -> None:
        """Make room for ``capacity`` rows, keeping the first ``n_rows``."""
        slot = np.zeros(capacity, dtype=np.int64)
        slot[:n_rows] = self._slot[:n_rows]
        id_str = np.full(capacity, None, dtype=object)
        id_str[:n_rows] = self._id_str[:n_rows]
        self._slot, self._id_str = slot, id_str

    # -- queries -------------------------------------------------------------------------
    def id_at(self, p: int) -> int | str:
        row_id = self._id_str[p]
        return int(self._int_ids.keys[self._slot[p]]) if row_id is None else row_id

    def id_list(self, pos: np.ndarray | None = None) -> list[int | str]:
        """The ids of the rows at ``pos`` (default: all, in order) as Python values."""
        n = len(self)
        slots = self._slot[:n] if pos is None else self._slot[pos]
        if self._n_str == 0:
            return self._int_ids.keys[slots].tolist()
        strs = self._id_str[:n] if pos is None else self._id_str[pos]
        if self._int_ids.n_live == 0:  # string ids only
            return strs.tolist()
        is_str = np.not_equal(strs, None)
        out = self._int_ids.keys[np.where(is_str, 0, slots)].tolist()
        for i in np.flatnonzero(is_str).tolist():
            out[i] = strs[i]
        return out

    def position_of(self, row_id) -> int:
        """Position of one id, or -1. Ints and strings as a ``dict`` keyed by the ids would
        match them: numpy integers (and, as there, bools) are the int of their value."""
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
            return np.fromiter(map(self.position_of, ids), dtype=np.intp, count=n)
        if isinstance(ids[0], str):
            out = np.fromiter(map(self._str_ids.get, ids, repeat(-1, n)), dtype=np.intp, count=n)
            if self._int_ids.n_live:  # int ids held too: a miss may be one of them
                for i in np.flatnonzero(out < 0).tolist():
                    out[i] = self.position_of(ids[i])
            return out
        try:
            keys = np.asarray(ids)
        except (OverflowError, ValueError):
            keys = None
        if keys is not None and keys.ndim == 1 and keys.dtype.kind == "i":  # ints only
            return self._int_ids.lookup(keys).astype(np.intp, copy=False)
        return np.fromiter(map(self.position_of, ids), dtype=np.intp, count=n)

    def positions_of(self, ids: Sequence[Hashable]) -> np.ndarray:
        """Positions of ``ids``; KeyError (the first unknown id) if a row is missing."""
        if len(ids) <= _SMALL:
            out = []
            for row_id in ids:
                p = self.position_of(row_id)
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
        if len(ids) > _SMALL and isinstance(ids[0], str) and self._int_ids.n_live == 0:
            # only string ids held: one C-level pass answers the usual case (all known)
            if all(map(self._str_ids.__contains__, ids)):
                return []
        return [ids[i] for i in np.flatnonzero(self.lookup(ids) < 0).tolist()]

    # -- changes -------------------------------------------------------------------------
    def add(self, ids: Sequence[int | str], start: int) -> None:
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
            self._add_ints(keys, np.arange(start, start + n))
        elif n <= _SMALL:  # a few ids (a one-row insert): no arrays at all
            self._add_few(ids, start)
        else:
            int_at, int_list = [], []
            for i, row_id in enumerate(ids):
                if isinstance(row_id, str):
                    self._add_str(row_id, start + i)
                else:
                    int_at.append(start + i)
                    int_list.append(int(row_id))
            self._add_ints(np.asarray(int_list, dtype=np.int64), np.asarray(int_at, dtype=np.intp))

    def _add_few(self, ids: Sequence[int | str], start: int) -> None:
        """:meth:`add` of a few ids, one by one with Python ints."""
        table, rebuilt = self._int_ids, False
        for i, row_id in enumerate(ids):
            if isinstance(row_id, str):
                self._add_str(row_id, start + i)
            else:
                slot, grew = table.insert_one(int(row_id), start + i)
                self._slot[start + i] = slot
                rebuilt = rebuilt or grew
        if rebuilt:  # every earlier int row's slot moved
            live_slots, live_pos = table.live()
            self._slot[live_pos] = live_slots

    def _add_ints(self, keys: np.ndarray, pos: np.ndarray) -> None:
        """Insert int ``keys`` at positions ``pos`` in one vectorized pass."""
        if pos.size == 0:
            return
        slots = np.empty(pos.size, dtype=np.int64)
        if self._int_ids.insert(keys, pos, slots):
            live_slots, live_pos = self._int_ids.live()
            self._slot[live_pos] = live_slots
        else:
            self._slot[pos] = slots

    def _add_str(self, row_id: str, at: int) -> None:
        """Index a string id at position ``at``: in the dict, the row's id column, no slot."""
        self._str_ids[row_id] = at
        self._id_str[at] = row_id
        self._slot[at] = -1
        self._n_str += 1

    def remove(self, pos: np.ndarray, fill: TailFill) -> None:
        """Drop the ids of the rows at ``pos`` (sorted, distinct) and move the tail's
        survivors' ids into the holes as ``fill`` says; re-point their entries."""
        strings = self._n_str > 0  # else the string-id column is all None, before and after
        self._unindex(pos)
        fill.apply(self._slot)
        if strings:
            fill.apply(self._id_str)
        self._reindex(fill.holes)

    def remove_one(self, p: int, last: int) -> None:
        """:meth:`remove` of the one row at ``p``, the row at ``last`` (the last one) filling
        its hole, with scalar steps."""
        strings = self._n_str > 0  # the string-id column moves too (else it is all None)
        row_id = self._id_str[p] if strings else None
        if row_id is None:
            self._int_ids.delete(int(self._slot[p]))
        else:
            del self._str_ids[row_id]
            self._n_str -= 1
        slot = self._slot
        if p != last:
            slot[p] = slot[last]
        slot[last] = 0
        if strings:
            self._id_str[p] = self._id_str[last]
            self._id_str[last] = None
        if p != last:  # re-point the moved row's entry (_reindex of one hole)
            moved_id = self._id_str[p] if strings else None
            if moved_id is None:
                self._int_ids.repoint(int(slot[p]), p)
            else:
                self._str_ids[moved_id] = p

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


class RowIds(Sequence):
    """The external id of every row, in position order: a read-only view of the id index.

    Ids live in the index's columns, not in a Python list, so a removal moves them with the
    rows' other columns in one pass and overwrites the ids of the rows that leave. Indexing,
    ``len``, iteration, ``in`` (a hash lookup, not a scan) and comparison with a list behave
    as a list's."""

    __slots__ = ("_index",)

    def __init__(self, index: IdIndex):
        self._index = index

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, key):
        index = self._index
        if isinstance(key, slice):
            return index.id_list()[key]
        n = len(index)
        p = int(key)
        if p < 0:
            p += n
        if not 0 <= p < n:
            raise IndexError("row position out of range")
        return index.id_at(p)

    def __iter__(self) -> Iterator[int | str]:
        return iter(self._index.id_list())

    def __contains__(self, row_id) -> bool:
        return self._index.position_of(row_id) >= 0

    def __eq__(self, other) -> bool:
        if isinstance(other, RowIds | list | tuple):
            return self._index.id_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowIds({self._index.id_list()!r})"


class RowPositions(Mapping):
    """id → position of every row: a read-only mapping view of the id index. Batch lookups
    go through :meth:`IdIndex.positions_of` / :meth:`IdIndex.lookup` instead: vectorized."""

    __slots__ = ("_index",)

    def __init__(self, index: IdIndex):
        self._index = index

    def __getitem__(self, row_id) -> int:
        p = self._index.position_of(row_id)
        if p < 0:
            raise KeyError(row_id)
        return p

    def __contains__(self, row_id) -> bool:
        return self._index.position_of(row_id) >= 0

    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self) -> Iterator[int | str]:
        return iter(self._index.id_list())
