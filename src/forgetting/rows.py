"""The row store: what a rebuild and an exact subtraction need, per row, and nothing else.

Rows are addressed by stable external ids; positions are an internal detail (a removed row's
slot is filled by the last row). Every field of a removed row is overwritten, so the object
keeps no residue of it (design.md §5.7). Each row also gets a *serial* that changes whenever its
content changes; background rebuilds use serials to reconcile the rows they trained on with
the rows present when they finish.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from .content.fingerprint import MODULUS, Contributions, digest_rows, multiset_sum
from .labels import is_labeled, unlabeled_value
from .schema.membership import MembershipRule
from .snapshots import RowsSnapshot


class RowStore:
    def __init__(
        self,
        n_features: int,
        n_instances: int,
        membership: MembershipRule,
        target_dtype: np.dtype,
    ):
        self.n_features = n_features
        self.membership = membership
        self.n_instances = n_instances
        self.target_dtype = np.dtype(target_dtype)
        self.size = 0
        self.ids: list[int | str] = []
        self.position: dict[int | str, int] = {}
        self._next_serial = 0
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
        self._refresh_thresholds(range(n_instances))

    def _alloc(self, capacity: int) -> None:
        self.X = np.zeros((capacity, self.n_features), dtype=np.float32)
        self.targets = np.zeros(capacity, dtype=self.target_dtype)
        self.serial = np.zeros(capacity, dtype=np.int64)
        self.draws = np.zeros((capacity, self.n_instances + 1), dtype=np.float64)
        self.in_pool = np.zeros(capacity, dtype=bool)
        self.row_hash = np.zeros((capacity, 32), dtype=np.uint8)

    def _row_arrays(self) -> list[np.ndarray]:
        return [self.X, self.targets, self.serial, self.draws, self.in_pool, self.row_hash]

    @property
    def capacity(self) -> int:
        return self.X.shape[0]

    # -- derived views -------------------------------------------------------------------
    def labeled(self, pos: np.ndarray | None = None) -> np.ndarray:
        """Mask of labeled rows (all rows, or those at ``pos``)."""
        return is_labeled(self.targets[: self.size] if pos is None else self.targets[pos])

    def members(self, instance: int) -> np.ndarray:
        """Rows in D°_r: labeled rows whose keyed draw for instance r is below its threshold."""
        return self.labeled() & (self.draws[: self.size, instance] < self.thresholds[instance])

    def in_schema(self, pos: np.ndarray) -> np.ndarray:
        """(len(pos), p) mask: is the row at ``pos`` in D°_r under the current thresholds."""
        draws = self.draws[pos, : self.n_instances]
        return self.labeled(pos)[:, None] & (draws < self.thresholds)

    def effective_rho(self) -> np.ndarray:
        """|D°_r| / labeled rows per instance: the probability that deleting a random labeled
        row hits D°_r (ρ on large data, more when D° keeps its minimum size)."""
        if self._n_labeled == 0:
            return np.zeros(self.n_instances)
        return self._member_counts / self._n_labeled

    def _refresh_thresholds(self, instances) -> None:
        """Recompute the thresholds (and member counts) of ``instances``: O(n) each, and only
        needed when a change touched their D° — which starts a rebuild anyway."""
        labeled = self.labeled()
        for r in instances:
            draws = self.draws[: self.size, r][labeled]
            self.thresholds[r] = self.membership.threshold(draws)
            self._member_counts[r] = np.count_nonzero(draws < self.thresholds[r])

    def _touched(self, pos: np.ndarray) -> np.ndarray:
        """Instances whose D° holds one of the rows at ``pos`` (current thresholds)."""
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
        in_pool: bool = False,
    ) -> np.ndarray:
        """Add rows (ids already validated as new); returns their positions."""
        n = len(ids)
        self._grow(self.size + n)
        pos = np.arange(self.size, self.size + n)
        self.X[pos] = X
        self.targets[pos] = targets
        self.draws[pos] = draws
        self.in_pool[pos] = in_pool
        self.serial[pos] = np.arange(self._next_serial, self._next_serial + n)
        self._next_serial += n
        for i, row_id in enumerate(ids):
            self.position[row_id] = self.size + i
        self.ids.extend(ids)
        self.size += n
        self._n_labeled += int(np.count_nonzero(self.labeled(pos)))
        self._count(pos, +1)
        self._set_row_hash(pos, id_bytes)
        # Only rows landing below a threshold can move it (see MembershipRule).
        self._refresh_thresholds(self._touched(pos))
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
        t = self.targets[pos]
        return self.class_counts - np.bincount(t[t >= 0], minlength=self.class_counts.size)

    def _set_row_hash(self, pos: np.ndarray, id_bytes: Sequence[bytes]) -> None:
        """Hash (id, target, pool flag, features) per row; add them to the multiset hash."""
        framed = np.array([len(b).to_bytes(4, "little") + b for b in id_bytes], dtype=object)
        self.row_hash[pos] = digest_rows(
            framed, self.targets[pos], self.in_pool[pos], self.X[pos], person=b"qss-row"
        )
        self.multiset_hash = (self.multiset_hash + multiset_sum(self.row_hash[pos])) % MODULUS

    def _unhash(self, pos: np.ndarray) -> None:
        self.multiset_hash = (self.multiset_hash - multiset_sum(self.row_hash[pos])) % MODULUS

    def remove(self, pos: np.ndarray) -> None:
        """Remove rows at ``pos``: holes are filled by surviving tail rows, freed slots zeroed."""
        pos = np.unique(np.asarray(pos, dtype=np.intp))
        touched = self._touched(pos)
        self._n_labeled -= int(np.count_nonzero(self.labeled(pos)))
        self._count(pos, -1)
        self._unhash(pos)
        for p in pos:
            del self.position[self.ids[p]]
        new_size = self.size - pos.size
        doomed = np.zeros(self.size, dtype=bool)
        doomed[pos] = True
        holes = pos[pos < new_size]
        fillers = np.flatnonzero(~doomed[new_size:]) + new_size
        arrays = self._row_arrays() + [
            a for field in self._instance_fields() for a in field if a is not None
        ]
        for a in arrays:
            a[holes] = a[fillers]
            a[new_size : self.size] = 0
        for hole, filler in zip(holes.tolist(), fillers.tolist(), strict=True):
            moved = self.ids[filler]
            self.ids[hole] = moved
            self.position[moved] = hole
        del self.ids[new_size:]
        self.size = new_size
        self._refresh_thresholds(touched)

    def unlabel(self, pos: np.ndarray, id_bytes: Sequence[bytes]) -> None:
        """Remove the rows' labels (label mode): new serials, residuals and codes zeroed."""
        touched = self._touched(pos)
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
            self.codes[instance][pos], self.residuals[instance][pos], self.digests[instance][pos]
        )

    def set_instance_rows(self, instance: int, pos: np.ndarray, contrib: Contributions) -> None:
        """Store an instance's contributions for the rows at ``pos``."""
        values_by_field = (contrib.codes, contrib.residuals, contrib.digests)
        for field, values in zip(self._instance_fields(), values_by_field, strict=True):
            current = field[instance]
            if (
                current is None
                or current.shape[1:] != values.shape[1:]
                or (current.dtype != values.dtype)
            ):
                field[instance] = np.zeros((self.capacity,) + values.shape[1:], dtype=values.dtype)
            field[instance][pos] = values

    def snapshot(self, pos: np.ndarray | None = None) -> RowsSnapshot:
        """Copies of the primary data of the rows at ``pos`` (default: all, in order)."""
        pos = np.arange(self.size) if pos is None else np.asarray(pos, dtype=np.intp)
        return RowsSnapshot(
            ids=[self.ids[p] for p in pos.tolist()],
            X=self.X[pos].copy(),
            targets=self.targets[pos].copy(),
            in_pool=self.in_pool[pos].copy(),
        )

    def positions_of(self, ids: Sequence[Hashable]) -> np.ndarray:
        return np.fromiter((self.position[i] for i in ids), dtype=np.intp, count=len(ids))
