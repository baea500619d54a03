"""The row store's id bookkeeping, held to the list-and-dict store it replaced.

The store used to keep ``ids`` as a Python list and ``position`` as a dict, and moved them with
a Python loop over the rows a removal touched. Now int ids live in a numpy hash table
(``forgetting.ids.IntIdTable``), string ids in a dict, both as columns that move with the rows
(void-view ``take``/``put``). These tests replay random histories — int, string and mixed ids;
one-row and large batches; removals and inserts — on the store and on a small reference with
the old rules (holes filled by the tail's survivors, in order), and require the same ids at the
same positions, the same rows behind them, the same errors for unknown ids, and freed slots
that hold nothing (design.md §5.7).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FAST, assert_same_model, classification_data

from forgetting import QSSClassifier
from forgetting.content.fingerprint import Contributions
from forgetting.rows import DiskRows, RowStore, take_rows
from forgetting.rows.columns import _move_rows, _span
from forgetting.rows.id_table import IntIdTable
from forgetting.schema.membership import MembershipRule, id_bytes

P = 2
D = 5


class _Reference:
    """The old bookkeeping: a list of ids, a dict id → position, the rows keyed by id."""

    def __init__(self):
        self.ids: list = []
        self.payload: dict = {}

    def append(self, ids, payload) -> None:
        self.ids.extend(ids)
        self.payload.update(zip(ids, payload, strict=True))

    def positions_of(self, ids) -> list[int]:
        position = {row_id: p for p, row_id in enumerate(self.ids)}
        return [position[i] for i in ids]

    def remove(self, pos) -> None:
        pos = sorted(set(pos))
        new_size = len(self.ids) - len(pos)
        for p in pos:
            del self.payload[self.ids[p]]
        holes = [p for p in pos if p < new_size]
        doomed = set(pos)
        fillers = [p for p in range(new_size, len(self.ids)) if p not in doomed]
        for hole, filler in zip(holes, fillers, strict=True):
            self.ids[hole] = self.ids[filler]
        del self.ids[new_size:]


def _store(rows_dir=None) -> RowStore:
    return RowStore(D, P, MembershipRule(0.3, 2), np.int64, rows_dir=rows_dir)


def _rows(rng, n: int):
    """Features with NaN and negative-zero payloads (bits must move unchanged), labels,
    draws and per-instance contributions for n rows."""
    X = rng.normal(size=(n, D)).astype(np.float32)
    X[rng.random((n, D)) < 0.05] = np.float32(-0.0)
    nan = np.frombuffer(np.uint32(0x7FC0_1234).tobytes(), dtype=np.float32)[0]
    X[rng.random((n, D)) < 0.05] = nan
    targets = rng.integers(-1, 3, n)  # -1: unlabeled
    draws = rng.random((n, P + 1))
    contrib = [
        Contributions(
            rng.integers(0, 2**16, (n, 3)).astype(np.uint16),
            rng.integers(-(2**40), 2**40, (n, 4)),
            rng.integers(0, 256, (n, 32)).astype(np.uint8),
        )
        for _ in range(P)
    ]
    return X, targets, draws, contrib


def _append(store: RowStore, ref: _Reference, ids: list, rng) -> None:
    n = len(ids)
    X, targets, draws, contrib = _rows(rng, n)
    pos = store.append(ids, [id_bytes(i) for i in ids], X, targets, draws)
    for r in range(P):
        store.set_instance_rows(r, pos, contrib[r])
    payload = [
        (
            X[i].tobytes(),
            int(targets[i]),
            draws[i].tobytes(),
            store.row_hash[pos[i]].tobytes(),
            tuple(c.codes[i].tobytes() + c.residuals[i].tobytes() for c in contrib),
        )
        for i in range(n)
    ]
    ref.append(ids, payload)


def _check(store: RowStore, ref: _Reference) -> None:
    n = store.size
    assert list(store.ids) == ref.ids and len(store.ids) == n
    assert store.ids == ref.ids  # RowIds compares with a list
    assert [store.ids[p] for p in range(n)] == ref.ids
    assert store.ids[-1] == ref.ids[-1] if n else True
    for p, row_id in enumerate(ref.ids):
        X, target, draws, row_hash, contrib = ref.payload[row_id]
        assert store.X[p].tobytes() == X
        assert int(store.targets[p]) == target
        assert store.draws[p].tobytes() == draws
        assert store.row_hash[p].tobytes() == row_hash
        for r in range(P):
            got = store.codes[r][p].tobytes() + store.residuals[r][p].tobytes()
            assert got == contrib[r]
    assert store.positions_of(ref.ids).tolist() == list(range(n))
    assert [store.position[i] for i in ref.ids] == list(range(n))
    assert store.snapshot().ids == ref.ids
    # §5.7: the slots past the last row hold nothing
    for a in store._row_arrays() + [store._id_index._slot, store._id_index._id_str]:
        tail = np.asarray(a[n:])
        if tail.dtype == object:
            assert all(v is None for v in tail.tolist())
        else:
            assert not np.any(tail.view(np.uint8))
    for field in store._instance_fields():
        for a in field:
            if a is not None:
                assert not np.any(a[n:].view(np.uint8))
    table = store._id_index._int_ids
    live = table.vals >= 0
    assert sorted(table.keys[live].tolist()) == sorted(i for i in ref.ids if type(i) is int)
    assert not np.any(table.keys[~live])
    assert sorted(store._id_index._str_ids) == sorted(i for i in ref.ids if type(i) is str)


def _new_ids(kind: str, start: int, n: int, rng) -> list:
    if kind == "int":
        return [int(v) for v in (np.arange(start, start + n) * 7_919 - 10**6)]
    if kind == "str":
        return [f"u{start + i}" for i in range(n)]
    return [start + i if rng.random() < 0.5 else f" {start + i} " for i in range(n)]


@pytest.mark.parametrize(
    "kind,seed,disk",
    [(k, s, False) for k in ("int", "str", "mixed") for s in (0, 1)] + [("mixed", 2, True)],
)
def test_random_histories_match_the_list_and_dict_store(kind, seed, disk, tmp_path):
    """``disk``: the features in a DiskRows file (moved by its own path, not the void view)."""
    rng = np.random.default_rng(seed)
    store, ref = _store(tmp_path if disk else None), _Reference()
    assert isinstance(store.X, DiskRows) == disk
    made = 0
    for size in (500, 1, 3, 17, 40):
        _append(store, ref, _new_ids(kind, made, size, rng), rng)
        made += size
    _check(store, ref)
    for step in range(14):
        if step % 3 == 2:
            size = int(rng.choice([1, 2, 16, 33, 300]))
            _append(store, ref, _new_ids(kind, made, size, rng), rng)
            made += size
        else:
            size = min(store.size, int(rng.choice([1, 2, 4, 5, 16, 17, 31, 32, 150])))
            gone = [ref.ids[i] for i in rng.choice(store.size, size, replace=False)]
            pos = store.positions_of(gone)
            assert pos.tolist() == ref.positions_of(gone)
            # unsorted and repeated positions are one removal of each row
            store.remove(np.concatenate([pos, pos[:2]]))
            ref.remove(pos.tolist())
            assert all(i not in store.position and i not in store.ids for i in gone)
            assert store.unknown_ids(gone) == gone
        _check(store, ref)


@pytest.mark.parametrize("kind", ["int", "str", "mixed"])
@pytest.mark.parametrize("size", [1, 5, 16, 17, 200])
def test_unknown_ids_give_the_same_errors(kind, size):
    rng = np.random.default_rng(size)
    store, ref = _store(), _Reference()
    _append(store, ref, _new_ids(kind, 0, 400, rng), rng)
    known = ref.ids[::2][:size]
    unknown = _new_ids(kind, 10_000, 3, rng)
    batch = known[: size // 2] + [unknown[1]] + known[size // 2 :] + [unknown[0]]
    with pytest.raises(KeyError) as err:
        store.positions_of(batch)
    old = {row_id: p for p, row_id in enumerate(ref.ids)}  # the dict's KeyError
    with pytest.raises(KeyError) as want:
        [old[i] for i in batch]
    assert err.value.args == want.value.args == (unknown[1],)
    assert store.unknown_ids(batch) == [unknown[1], unknown[0]]
    lookup = store.lookup(batch)
    assert lookup.tolist() == [ref.positions_of([i])[0] if i in known else -1 for i in batch]
    # numpy scalars are the ids of their value (the dict matched them the same way)
    if kind == "int":
        assert store.positions_of(np.asarray(known)).tolist() == ref.positions_of(known)
        assert np.int64(known[0]) in store.position and np.int32(known[0]) in store.ids
    if kind == "str":
        assert store.positions_of([np.str_(i) for i in known]).tolist() == ref.positions_of(known)
    # an int id is not its string, nor an out-of-range int, a float or None any id
    others = [2**64, 1.5, None] + [str(i) for i in known if type(i) is int][:1]
    for other in others:
        assert other not in store.position and store.lookup([other]).tolist() == [-1]


@pytest.mark.parametrize("held", ["int", "str"])
def test_a_batch_led_by_the_other_kind_finds_every_id(held):
    """A batch whose first id is of the kind the store does not hold (so the fast pass of
    that kind finds nothing) still finds the ids of the kind it holds."""
    rng = np.random.default_rng(11)
    store, ref = _store(), _Reference()
    _append(store, ref, _new_ids(held, 0, 300, rng), rng)
    stranger = "s-1" if held == "int" else -1
    batch = [stranger, *ref.ids[5:40]]
    want = [-1, *range(5, 40)]
    assert store.lookup(batch).tolist() == want
    assert store.unknown_ids(batch) == [stranger]
    with pytest.raises(KeyError) as err:
        store.positions_of(batch)
    assert err.value.args == (stranger,)
    assert store.positions_of(batch[1:]).tolist() == want[1:]


def test_whitespace_and_case_make_different_string_ids():
    rng = np.random.default_rng(0)
    store, ref = _store(), _Reference()
    ids = ["u5", " u5", "u5 ", "U5", "5", 5, -5, "-5"] + [f"x{i}" for i in range(30)]
    _append(store, ref, ids, rng)
    assert store.positions_of(ids).tolist() == list(range(len(ids)))
    store.remove(store.positions_of(["u5", 5]))
    ref.remove([0, 5])
    _check(store, ref)
    assert store.unknown_ids(ids[:8]) == ["u5", 5]


def test_one_row_inserts_through_table_rebuilds():
    """Rows inserted one or a few at a time into an empty store (the per-id insert path)
    cross several table rebuilds; removals in between leave tombstones to reuse."""
    rng = np.random.default_rng(7)
    store, ref = _store(), _Reference()
    made = 0
    for step in range(150):
        size = 1 if step % 4 else 3
        ids = [made + i if (made + i) % 3 else f"s{made + i}" for i in range(size)]
        _append(store, ref, ids, rng)
        made += size
        if step % 5 == 4:
            gone = [ref.ids[int(rng.integers(store.size))]]
            store.remove(store.positions_of(gone))
            ref.remove(ref.positions_of(gone))
    assert store._id_index._int_ids.vals.size > 64  # it grew
    _check(store, ref)


@pytest.mark.parametrize("n_str", [1, 3, 40])
def test_removing_the_last_string_ids_clears_their_column(n_str):
    """Rows with string ids (the empty string among them) at the front, int rows behind: once
    every string row is gone the int rows fill their slots and no string is left anywhere."""
    rng = np.random.default_rng(n_str)
    store, ref = _store(), _Reference()
    strings = [""] + [f"s{i}" for i in range(n_str - 1)]
    _append(store, ref, strings + list(range(100)), rng)
    store.remove(store.positions_of(strings[::-1]))
    ref.remove(list(range(n_str)))
    _check(store, ref)
    assert store._id_index._n_str == 0 and not any(
        v is not None for v in store._id_index._id_str.tolist()
    )
    _append(store, ref, ["", "x"], rng)  # and they may come back
    _check(store, ref)


@pytest.mark.parametrize("n", [0, 1, 2, 4, 5, 31, 32, 33, 350])
def test_take_and_move_rows_are_fancy_indexing_bit_for_bit(n):
    rng = np.random.default_rng(n)
    arrays = [
        rng.integers(0, 256, (1000, 32)).astype(np.uint8),
        rng.integers(0, 2**16, (1000, 64)).astype(np.uint16),
        rng.integers(-(2**62), 2**62, (1000, 10)),
        rng.integers(0, 2**32, (1000, 7), dtype=np.uint64).astype(np.uint32).view(np.float32),
        rng.random((1000, 3, 2)),
        rng.integers(0, 9, 1000),
        np.array([f"s{i}" for i in range(1000)], dtype=object),
    ]
    pos = rng.choice(1000, n, replace=False) - (500 if n == 1 else 0)  # a negative position too
    holes = np.sort(rng.choice(600, n, replace=False))  # then fillers from the tail
    fillers = np.sort(rng.choice(np.arange(600, 1000), n, replace=False))
    few = list(zip(holes.tolist(), fillers.tolist(), strict=True)) if n <= 4 else None
    for a in arrays:
        got = take_rows(a, pos)
        want = a[pos]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes() if a.dtype != object else list(got) == list(want)
        moved, expected = a.copy(), a.copy()
        _move_rows(moved, holes, fillers, few)
        expected[holes] = expected[fillers]
        if a.dtype == object:
            assert moved.tolist() == expected.tolist()
        else:
            assert moved.tobytes() == expected.tobytes()


@pytest.mark.parametrize("string_ids", [False, True])
def test_large_forget_then_insert_equals_refit(string_ids):
    """Batches past every vectorized threshold (16 ids, 32 rows, 256 rows): forget ≡ refit,
    then the same rows inserted back ≡ the first fit (ids of both kinds)."""
    X, y = classification_data(n=900, seed=3)
    ids = [f"r{i}" for i in range(900)] if string_ids else [i * 13 - 4000 for i in range(900)]
    model = QSSClassifier(**FAST).fit(X, y, ids)
    first = QSSClassifier(**FAST).fit(X, y, ids)
    gone = np.random.default_rng(5).choice(900, 300, replace=False)
    model.forget([ids[i] for i in gone])
    keep = np.setdiff1d(np.arange(900), gone)
    refit = QSSClassifier(**FAST).fit(X[keep], y[keep], [ids[i] for i in keep])
    assert_same_model(model, refit, X)
    assert model.audit_content()
    model.insert(X[gone], y[gone], [ids[i] for i in gone])
    assert_same_model(model, first, X)
    assert sorted(model.engine_.ids(), key=str) == sorted(ids, key=str)


def test_estimator_errors_for_unknown_forgotten_and_duplicate_ids():
    X, y = classification_data(n=240)
    ids = list(range(240))
    model = QSSClassifier(**FAST).fit(X, y, ids)
    model.forget(list(range(20)))
    unknown = [10_000 + i for i in range(12)]
    with pytest.raises(KeyError) as err:
        model.forget([30, *unknown[:3], 3, *unknown[3:]])
    listed = "10000, 10001, 10002, 3, 10003, 10004, 10005, 10006, 10007, 10008"
    msg = f"unknown ids (never inserted, or already forgotten): [{listed}, ... (3 more)]"
    assert err.value.args[0] == msg
    with pytest.raises(KeyError) as err:
        model.forget([5])
    assert err.value.args[0] == "unknown ids (never inserted, or already forgotten): [5]"
    with pytest.raises(ValueError, match=r"ids must be unique; duplicated: \[40\]"):
        model.forget([40, 41, 40])
    with pytest.raises(ValueError, match=r"ids already present: \[50\]"):
        model.insert(X[:1], y[:1], [50])
    assert model.n_rows_ == 220 and 30 in model.engine_.rows.position


@pytest.mark.parametrize(
    "pos",
    [np.arange(40, 140), np.arange(0, 200), np.arange(40, 140)[::-1], np.r_[0:50, 51:101]],
    ids=["run", "all", "reversed", "gap"],
)
def test_contributions_for_a_run_of_positions_are_stored_as_by_scatter(pos):
    """set_instance_rows copies a run of consecutive positions as one block (rows.columns._span);
    anything else — a reversed run, a gap — is scattered. Both store the same values."""
    rng = np.random.default_rng(3)
    contrib = Contributions(
        rng.integers(0, 2**16, (len(pos), 64)).astype(np.uint16),
        rng.integers(-(2**40), 2**40, (len(pos), 10)),
        rng.integers(0, 256, (len(pos), 32)).astype(np.uint8),
    )
    store = _store()
    ids = list(range(200))
    store.append(
        ids,
        [id_bytes(i) for i in ids],
        np.zeros((200, D)),
        np.arange(200) % 3,
        rng.random((200, P + 1)),
    )
    store.set_instance_rows(0, pos, contrib)
    assert (_span(pos) is not None) == (pos.size > 1 and np.all(np.diff(pos) == 1))
    for stored, values in zip(
        (store.codes[0], store.residuals[0], store.digests[0]),
        (contrib.codes, contrib.residuals, contrib.digests),
        strict=True,
    ):
        expected = np.zeros_like(stored)
        expected[pos] = values
        assert np.array_equal(stored, expected)


def _state(store: RowStore) -> dict:
    """Everything a removal may change, as comparable values (arrays as bytes)."""
    fields = store._instance_fields()
    columns = (
        store._row_arrays()
        + [store._id_index._slot, store._id_index._id_str]
        + [a for field in fields for a in field if a is not None]
    )
    return {
        "columns": [
            a.tolist() if a.dtype == object else np.ascontiguousarray(a).tobytes() for a in columns
        ],
        "index": (store._id_index._int_ids.keys.tobytes(), store._id_index._int_ids.vals.tobytes()),
        "live": (store._id_index._int_ids.n_live, store._id_index._int_ids.n_used),
        "strings": (dict(store._id_index._str_ids), store._id_index._n_str),
        "counts": (store.size, store.changes, store._n_labeled, store._n_pool),
        "classes": store.class_counts.tolist(),
        "hash": store.multiset_hash,
        "thresholds": (store.thresholds.tobytes(), store._member_counts.tolist()),
    }


@pytest.mark.parametrize("kind", ["int", "str", "mixed"])
@pytest.mark.parametrize("target_dtype", [np.int64, np.float64])
def test_one_row_removal_leaves_the_batch_routes_state(kind, target_dtype):
    """The one-row route (RowStore._remove_one, a one-row forget's latency path) leaves the
    very state the batch route leaves — columns, id index with its tombstones, counts, class
    counts, multiset hash, thresholds — for a row at the front, in the middle and at the end,
    labeled or not (-1 / NaN), in the codebook pool or not, with int, string and mixed ids.
    The batch route is forced by repeating the position (one row, but not one position);
    the one-row answers of instances_holding and class_counts_without are the batch ones."""
    rng = np.random.default_rng(5)
    stores = []
    for _ in range(2):
        store = RowStore(D, P, MembershipRule(0.3, 2), target_dtype)
        store._id_index._int_ids = IntIdTable(salt=1)  # one layout for both (the salt is random)
        X, targets, draws, contrib = _rows(np.random.default_rng(3), 60)
        ids = _new_ids(kind, 0, 60, np.random.default_rng(4))
        y = targets.astype(target_dtype)
        if target_dtype is np.float64:
            y[targets < 0] = np.nan
        in_pool = np.random.default_rng(6).random(60) < 0.5
        pos = store.append(ids, [id_bytes(i) for i in ids], X, y, draws, in_pool)
        for r in range(P):
            store.set_instance_rows(r, pos, contrib[r])
        stores.append(store)
    one, batch = stores
    assert _state(one) == _state(batch)
    labeled_seen = unlabeled_seen = held_seen = False
    while one.size:
        p = int(rng.choice([0, one.size - 1, int(rng.integers(one.size))]))
        labeled = bool(one.labeled(np.array([p]))[0])
        labeled_seen, unlabeled_seen = labeled_seen or labeled, unlabeled_seen or not labeled
        moved = one.ids[one.size - 1]
        # the one-row answer of instances_holding is the batch route's (in_schema)
        holding = one.instances_holding(np.array([p]))
        assert holding.tolist() == np.flatnonzero(batch.in_schema(np.array([p, p])).any(0)).tolist()
        held_seen = held_seen or holding.size > 0
        if target_dtype is np.int64:  # classification: the one-row class counts too
            want = batch.class_counts_without([p]).tolist()
            assert one.class_counts_without(np.array([p])).tolist() == want
        one.remove(np.array([p]))
        batch.remove(np.array([p, p]))
        assert _state(one) == _state(batch), p
        if p < one.size:
            assert one.positions_of([moved]).tolist() == [p]
    assert labeled_seen and unlabeled_seen and held_seen
    with pytest.raises(IndexError):
        one.remove(np.array([0]))
