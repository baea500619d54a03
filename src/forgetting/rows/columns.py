"""Array helpers for the row store's columns: reading, moving and handing over whole rows.

A column is an array with one entry (or one row of values) per stored row. A removal fills its
holes with the tail's surviving rows and zeroes the slots they leave (:class:`TailFill`), the
same way in every column — the store's own and the id index's — so every column stays in
position order and a freed slot keeps nothing (design.md §5.7). Rows move as single opaque
items where numpy makes that faster (:func:`_row_view`), with the very same bytes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


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
    """Whether ``values`` was handed over and may replace ``column`` as it is."""
    return (
        isinstance(values, HandedOver)
        and isinstance(column, np.ndarray)
        and values.shape == column.shape
        and values.dtype == column.dtype
        and values.flags.c_contiguous
        and values.flags.writeable
    )


def _row_view(a):
    """``a`` as a 1-D array of whole rows (one opaque item per row) when it is an in-memory
    C-contiguous array of rows of more than one value, else None.

    Why: numpy's fancy indexing moves a 2-D array's rows value by value (its inner loop runs
    over the columns of each row), while ``take``/``put`` on the row-sized void view copy each
    row as one item — several times faster for the store's narrow columns (32-byte hashes and
    digests, draws, residuals, codes), with the very same bytes."""
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
of a 2-D column costs several times a basic ``a[i] = a[j]``, even for one row."""


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


class TailFill(NamedTuple):
    """How a removal closes its holes: the surviving rows of the tail move into the holes
    before it, in order, and the tail's slots are zeroed. O(batch): no mask of every row (at
    many rows that mask would cost more than the rest of a one-row forget)."""

    holes: np.ndarray
    """Positions of leaving rows below the new size, ascending."""
    fillers: np.ndarray
    """The surviving tail rows that fill them, ascending."""
    few: list | None
    """The same (hole, filler) pairs as Python ints when there are at most ``_FEW_ROWS``."""
    new_size: int
    old_size: int

    @classmethod
    def of(cls, pos: np.ndarray, size: int) -> TailFill:
        """The plan for removing the rows at ``pos`` (sorted, distinct) from ``size`` rows."""
        new_size = size - pos.size
        if pos.size <= _FEW_ROWS:  # a few rows: the pairs in Python ints
            leaving = pos.tolist()
            doomed = set(leaving)
            few = list(
                zip(
                    [p for p in leaving if p < new_size],
                    [p for p in range(new_size, size) if p not in doomed],
                    strict=True,  # as many survivors in the tail as holes before it
                )
            )
            holes = np.array([h for h, _ in few], dtype=np.intp)
            fillers = np.array([f for _, f in few], dtype=np.intp)  # for a DiskRows X
            return cls(holes, fillers, few, new_size, size)
        holes = pos[pos < new_size]
        doomed_tail = np.zeros(pos.size, dtype=bool)
        doomed_tail[pos[pos >= new_size] - new_size] = True
        fillers = np.flatnonzero(~doomed_tail) + new_size
        return cls(holes, fillers, None, new_size, size)

    def apply(self, a) -> None:
        """Close the holes of column ``a`` and zero (or, for objects, clear) its tail."""
        _move_rows(a, self.holes, self.fillers, self.few)
        a[self.new_size : self.old_size] = None if a.dtype == object else 0


def _span(pos: np.ndarray) -> slice | None:
    """``pos`` as a slice when it is a run of consecutive positions (a rebuild storing every
    row's contributions: a block copy is much cheaper than a gather-scatter), else None."""
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
    """Sorted distinct positions (``np.unique``'s answer, by a sort and a neighbour
    comparison: cheaper than ``np.unique`` on the position arrays a forget brings)."""
    pos = np.sort(np.asarray(pos, dtype=np.intp).reshape(-1))
    if pos.size > 1:
        distinct = np.empty(pos.size, dtype=bool)
        distinct[0] = True
        np.not_equal(pos[1:], pos[:-1], out=distinct[1:])
        if not distinct.all():
            pos = pos[distinct]
    return pos
