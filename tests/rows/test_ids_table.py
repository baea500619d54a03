"""IntIdTable: the row store's int-id index (numpy open addressing) against a plain dict.

Random interleavings of batch and one-by-one inserts, deletions and re-pointings, with keys
at the ends of int64, keys that share home slots, and enough churn to force rebuilds; every
lookup (batch and scalar) must answer what the dict answers, and a deleted key must leave
nothing in the table (design.md §5.7).
"""

from __future__ import annotations

import numpy as np
import pytest

from forgetting.ids import _INT64_MAX, _INT64_MIN
from forgetting.rows.id_table import _EMPTY, _SMALL, _TOMBSTONE, IntIdTable


class _Mirror:
    """The table plus the dict it must agree with, and each key's slot (as the store keeps)."""

    def __init__(self, salt: int | None):
        self.table = IntIdTable(salt)
        self.ref: dict[int, int] = {}
        self.slot: dict[int, int] = {}

    def insert(self, keys: list[int], positions: list[int]) -> None:
        slots = np.empty(len(keys), dtype=np.int64)
        rebuilt = self.table.insert(np.array(keys, dtype=np.int64), positions, slots)
        self.ref.update(zip(keys, positions, strict=True))
        if rebuilt:
            live_slots, live_pos = self.table.live()
            by_pos = dict(zip(live_pos.tolist(), live_slots.tolist(), strict=True))
            self.slot = {k: by_pos[p] for k, p in self.ref.items()}
        else:
            self.slot.update(zip(keys, slots.tolist(), strict=True))

    def delete(self, keys: list[int]) -> None:
        self.table.delete(np.array([self.slot.pop(k) for k in keys], dtype=np.int64))
        for k in keys:
            del self.ref[k]

    def repoint(self, keys: list[int], positions: list[int]) -> None:
        self.table.repoint(np.array([self.slot[k] for k in keys], dtype=np.int64), positions)
        self.ref.update(zip(keys, positions, strict=True))

    def check(self, probes: list[int]) -> None:
        t = self.table
        want = [self.ref.get(k, -1) for k in probes]
        assert t.lookup(np.array(probes, dtype=np.int64)).tolist() == want
        assert [t.get(k) for k in probes] == want
        assert len(t) == len(self.ref)
        live = t.vals >= 0
        assert sorted(t.keys[live].tolist()) == sorted(self.ref)
        # no residue: every slot that is not live holds key 0
        assert not np.any(t.keys[~live])
        assert set(np.unique(t.vals[~live]).tolist()) <= {_EMPTY, _TOMBSTONE}
        # load: live keys plus tombstones never pass half the slots
        assert 2 * t.n_used <= t.vals.size
        assert t.n_used == int(np.count_nonzero(t.vals != _EMPTY))


def _key_pool(rng: np.random.Generator, kind: str, n: int) -> list[int]:
    if kind == "sequential":
        return list(range(n))
    if kind == "extremes":
        edge = [_INT64_MIN, _INT64_MIN + 1, -1, 0, 1, _INT64_MAX - 1, _INT64_MAX]
        rest = rng.integers(_INT64_MIN, _INT64_MAX, n, dtype=np.int64, endpoint=True)
        return list(dict.fromkeys(edge + rest.tolist()))[:n]
    # "strided": multiples of a large power of two — the pattern that defeats a hash taking
    # a key's low bits; here they must still spread
    return [(i << 40) - (1 << 62) for i in range(n)]


@pytest.mark.parametrize("kind", ["sequential", "extremes", "strided"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_table_agrees_with_a_dict_through_random_changes(kind, seed):
    rng = np.random.default_rng(seed)
    pool = _key_pool(rng, kind, 6000)
    absent = pool[5000:]  # never inserted: lookups must miss them
    pool = pool[:5000]
    m = _Mirror(salt=None if seed else 0)
    waiting = list(pool)
    next_pos = 0
    for _ in range(40):
        op = rng.integers(4)
        present = list(m.ref)
        if op <= 1 and waiting:  # insert a batch (big or one-by-one sized)
            size = int(rng.choice([1, 3, _SMALL, _SMALL + 1, 200, 900]))
            keys, waiting = waiting[:size], waiting[size:]
            m.insert(keys, list(range(next_pos, next_pos + len(keys))))
            next_pos += len(keys)
        elif op == 2 and present:  # delete a random subset
            size = min(len(present), int(rng.choice([1, 2, 50, 700])))
            gone = [present[i] for i in rng.choice(len(present), size, replace=False)]
            m.delete(gone)
            waiting += gone[: size // 2]  # some come back later (tombstone reuse)
        elif present:  # re-point a subset (rows that moved)
            size = min(len(present), int(rng.choice([1, 40, 300])))
            keys = [present[i] for i in rng.choice(len(present), size, replace=False)]
            m.repoint(keys, list(range(next_pos, next_pos + size)))  # positions stay distinct
            next_pos += size
        probes = list(m.ref)[:300] + absent[:100] + waiting[:100]
        m.check(probes)
    m.check(pool + absent)


def test_keys_sharing_one_home_slot_are_all_found():
    """A probe run far longer than the average: every key of it is found, and deleting keys
    in its middle does not cut off the ones behind them (tombstones keep the run)."""
    t = IntIdTable(salt=0)
    shift = t._state[3]
    target = t._home_scalar(0, shift)
    run = [k for k in range(20_000) if t._home_scalar(k, shift) == target][:12]
    # the vectorized hash agrees with the scalar one
    assert t._home(np.array(run, dtype=np.int64), shift).tolist() == [target] * len(run)
    assert len(run) == 12
    slots = np.empty(len(run), dtype=np.int64)
    t.insert(np.array(run), np.arange(len(run)), slots)
    assert sorted(slots.tolist()) == [(target + i) & (t.vals.size - 1) for i in range(12)]
    t.delete(slots[[2, 5, 7]])
    want = [-1 if i in (2, 5, 7) else i for i in range(12)]
    assert t.lookup(np.array(run)).tolist() == want
    assert [t.get(k) for k in run] == want


def test_out_of_range_and_repeated_lookups():
    t = IntIdTable()
    slots = np.empty(3, dtype=np.int64)
    t.insert(np.array([5, -5, _INT64_MAX]), [0, 1, 2], slots)
    assert t.get(2**63) == -1 and t.get(-(2**63) - 1) == -1 and t.get(_INT64_MAX) == 2
    q = np.array([5] * 40 + [6] * 40 + [-5], dtype=np.int64)
    assert t.lookup(q).tolist() == [0] * 40 + [-1] * 40 + [1]
    assert IntIdTable().lookup(q).tolist() == [-1] * q.size


def test_growth_from_empty_by_one_key_at_a_time_and_in_one_batch_agree():
    """Same keys, inserted one by one (scalar path, many rebuilds) or as one batch: the same
    answers (slots may differ; positions may not)."""
    keys = np.random.default_rng(3).permutation(3000).astype(np.int64) * 7919
    one, batch = IntIdTable(salt=1), IntIdTable(salt=1)
    slot = np.empty(1, dtype=np.int64)
    for i, k in enumerate(keys.tolist()):
        one.insert(np.array([k]), [i], slot)
    batch.insert(keys, np.arange(keys.size), np.empty(keys.size, dtype=np.int64))
    probe = np.concatenate([keys, keys + 1])
    assert np.array_equal(one.lookup(probe), batch.lookup(probe))
    assert one.lookup(keys).tolist() == list(range(keys.size))
