"""MUNKEY's external memory: one (key k_i, exemplar v_i) pair per training row, deletable in O(1).

Rows live in two dense tensors (keys, exemplars) of the size fitted, with ``size`` live rows in
front. Deleting a row moves the last live row into its slot and zeroes the vacated tail slot:
O(key width + exemplar width) work, no search, no dependence on n, and no copy of the deleted
row left anywhere in the buffers (a plain ``tensor[:size]`` slice would keep the bytes in the
underlying storage). The id → slot dict and the slot → id list are updated the same way, so the
deleted id is gone from the object too.

Retrieval is exact cosine search by one matrix product over the live keys (brute force: at the
sizes a 2-core CPU can train on, faster than building an index, and exact, so a deleted key can
never come back through an approximate index that was built before the deletion).
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

__all__ = ["KeyMemory"]


class KeyMemory:
    """Keys (L2-normalized, float32) and exemplars (float32) of the live rows, by id."""

    def __init__(self, keys: torch.Tensor, exemplars: torch.Tensor, ids: list[Hashable]) -> None:
        if keys.ndim != 2 or exemplars.ndim != 2 or len(keys) != len(exemplars) != len(ids):
            raise ValueError("keys, exemplars and ids must have the same number of rows")
        self._keys = keys.detach().to(torch.float32).clone().contiguous()
        self._exemplars = exemplars.detach().to(torch.float32).clone().contiguous()
        self.ids: list[Hashable] = list(ids)
        self.position: dict[Hashable, int] = {row_id: p for p, row_id in enumerate(self.ids)}
        if len(self.position) != len(self.ids):
            raise ValueError("ids must be unique")

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def keys(self) -> torch.Tensor:
        """The live keys ``(size, key_dim)`` (a view: do not write to it)."""
        return self._keys[: self.size]

    @property
    def exemplars(self) -> torch.Tensor:
        """The live exemplars ``(size, exemplar_dim)`` (a view: do not write to it)."""
        return self._exemplars[: self.size]

    def __contains__(self, row_id: Hashable) -> bool:
        return row_id in self.position

    def delete(self, row_id: Hashable) -> None:
        """Remove one row: swap the last live row into its slot, zero the freed slot."""
        p = self.position.pop(row_id)
        last = self.size - 1
        if p != last:
            moved = self.ids[last]
            self._keys[p] = self._keys[last]
            self._exemplars[p] = self._exemplars[last]
            self.ids[p] = moved
            self.position[moved] = p
        self._keys[last].zero_()
        self._exemplars[last].zero_()
        self.ids.pop()

    def search(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cosine similarities and slots of the ``k`` nearest live keys of each query row.

        ``queries`` must be L2-normalized. ``k`` is capped at ``size``; an empty memory gives
        ``(m, 0)`` results.
        """
        k = min(int(k), self.size)
        if k == 0:
            empty = torch.empty(len(queries), 0)
            return empty, empty.long()
        sims = queries @ self.keys.T
        return torch.topk(sims, k, dim=1, largest=True, sorted=True)
