"""The row store and its parts: every row a model holds, by stable external id.

* :mod:`.store` — :class:`RowStore`: the rows' columns, labels, D° membership, per-instance
  contributions, snapshots; the one owner of positions.
* :mod:`.index` — :class:`IdIndex`: id → position and each row's id, as columns that move with
  the rows (:class:`RowIds`, :class:`RowPositions` are read-only views of it);
  :mod:`.id_table` — the int64 hash table it keeps int ids in.
* :mod:`.disk` — :class:`DiskRows`: the features in a file instead of RAM.
* :mod:`.columns` — moving, reading and handing over whole rows of a column.
* :mod:`.hashing` — :func:`row_hashes`, the per-row identity hash.
"""

from .columns import HandedOver, hand_over, take_rows
from .disk import DiskRows, copy_rows
from .hashing import row_hashes
from .index import IdIndex, RowIds, RowPositions
from .store import RowStore

__all__ = [
    "DiskRows",
    "HandedOver",
    "IdIndex",
    "RowIds",
    "RowPositions",
    "RowStore",
    "copy_rows",
    "hand_over",
    "row_hashes",
    "take_rows",
]
