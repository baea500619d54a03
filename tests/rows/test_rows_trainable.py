"""RowStore.schema_sizes_after: a D° hit's trainability check from the leaving rows alone.

The engine's check before a forget that hits a D° used to build the rows that would remain
(targets, draws, pool flags, serials and hashes of every row: O(n) copies) and ask
``check_trainable``. ``schema_sizes_after`` counts the same D° and pool sizes from the stored
thresholds and member counts plus the rows at ``pos``. These tests hold it to the old
construction: same sizes, and the same verdict (same error text) on random removals and
unlabelings, in exact and label mode, with tiny schemas that become untrainable, minimum
sizes that bind, and exact ties between draws (the one case counted over every row).
"""

from __future__ import annotations

import numpy as np
import pytest

from forgetting import QSSClassifier, QSSRegressor
from forgetting.engine import QSSEngine
from forgetting.instance import RowData, schema_rows
from forgetting.labels import unlabeled_value
from forgetting.schema.selection import schema_problem


def _engine(estimator, n_outputs: int, d: int = 3) -> QSSEngine:
    config = estimator._config(n_outputs)
    dtype = np.float64 if estimator._task == "regression" else np.int64
    return QSSEngine(config, b"k" * 32, d, dtype)


def _fill(engine: QSSEngine, n: int, rng, *, unlabeled: float = 0.0, ties: bool = False):
    """Append n rows (ids 0..n-1); a share of them unlabeled; optionally with tied draws."""
    rows = engine.rows
    ids = list(range(n))
    raw = [b"i:%d" % i for i in ids]
    draws = engine._draws(raw)
    if ties:
        # exact ties among low draws: the "min_rows lowest plus ties" case must count them
        low = np.argsort(draws[:, 0])[: max(4, n // 4)]
        draws[low[1::2], : rows.n_instances] = draws[low[0::2][: low[1::2].size], None, 0]
    if rows.target_dtype.kind == "f":
        targets = rng.normal(size=n)
    else:
        targets = rng.integers(0, 3, size=n).astype(np.int64)
    targets[rng.random(n) < unlabeled] = unlabeled_value(rows.target_dtype)
    X = rng.normal(size=(n, rows.n_features)).astype(np.float32)
    rows.append(ids, raw, X, targets, draws, in_pool=engine.config.label_mode)
    return raw


def _old_after(engine: QSSEngine, pos: np.ndarray, label_only: bool) -> RowData:
    """The rows that remain, built as the engine's check built them before (O(n) copies)."""
    data = engine._row_data(copy=False)
    keep = np.ones(engine.rows.size, dtype=bool)
    keep[pos] = False
    targets = data.targets.copy()
    if label_only:
        targets[pos] = unlabeled_value(targets.dtype)
        keep[:] = True
    return RowData(
        np.empty((int(keep.sum()), 0), dtype=np.float32),
        targets[keep],
        data.draws[keep],
        data.in_pool[keep],
        data.serial[keep],
        data.row_hash[keep],
    )


def _old_verdict(engine: QSSEngine, pos, hit, label_only) -> str | None:
    try:
        engine.check_trainable(_old_after(engine, pos, label_only), hit)
    except ValueError as err:
        return str(err)
    return None


def _new_verdict(engine: QSSEngine, pos, hit, label_only) -> str | None:
    """The engine's check rewritten on schema_sizes_after (the body proposed for
    QSSEngine._check_after_removal), returning the error text instead of raising."""
    schema = engine.config.schema
    label_mode = engine.config.label_mode
    cap = 2 if label_mode else max(2, schema.n_centroids or 2)
    sizes, pool = engine.rows.schema_sizes_after(pos, hit, unlabel=label_only, cap=cap)
    problems = []
    for r, n_schema in zip(hit, sizes, strict=True):
        problem = schema_problem(n_schema, pool if label_mode else n_schema, schema.n_centroids)
        if problem is not None:
            problems.append(f"instance {r}: {problem}")
    if not problems:
        return None
    return (
        "too few rows to train a schema: "
        + "; ".join(problems)
        + f" (rho={schema.rho}); raise rho or provide more rows"
    )


def _engine_verdict(engine: QSSEngine, pos, hit, label_only) -> str | None:
    try:
        engine._check_after_removal(pos, hit, label_only)
    except ValueError as err:
        return str(err)
    return None


def _exact_sizes(engine: QSSEngine, pos, instances, label_only) -> tuple[list[int], int]:
    after = _old_after(engine, pos, label_only)
    rule, label_mode = engine.config.schema.membership, engine.config.label_mode
    sizes = []
    pool = 0
    for r in instances:
        members, pool_rows = schema_rows(after, r, rule, label_mode)
        sizes.append(len(members))
        pool = int(np.count_nonzero(after.in_pool))
    return sizes, pool


CASES = [
    # (estimator, n_outputs, rows, unlabeled share, tied draws)
    (QSSClassifier(rho=0.05), 3, 600, 0.0, False),  # rho case: D° ≈ 30 < min 50 → kth
    (QSSClassifier(rho=0.3), 3, 400, 0.0, False),  # rho case proper
    (QSSClassifier(rho=0.05, min_schema_rows=3, n_centroids=16), 3, 200, 0.0, False),
    (QSSClassifier(rho=0.02, min_schema_rows=2, n_centroids=8), 3, 150, 0.0, True),
    (QSSClassifier(rho=0.01, min_schema_rows=0, n_centroids=4), 3, 300, 0.0, False),
    (QSSClassifier(rho=0.2, min_schema_rows=30), 3, 25, 0.0, False),  # inf: all labeled
    (QSSClassifier(mode="label", rho=0.05, min_schema_rows=4, n_centroids=32), 3, 120, 0.5, True),
    (QSSClassifier(mode="label", rho=0.1, min_schema_rows=1), 3, 60, 0.6, False),
    (QSSRegressor(rho=0.05, min_schema_rows=5, n_centroids=8), 1, 120, 0.0, True),
    (QSSRegressor(mode="label", rho=0.04, min_schema_rows=2, n_centroids=6), 1, 90, 0.4, False),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_sizes_and_verdicts_match_the_old_construction(case):
    estimator, n_outputs, n, unlabeled, ties = CASES[case]
    rng = np.random.default_rng(case)
    engine = _engine(estimator, n_outputs)
    raw = _fill(engine, n, rng, unlabeled=unlabeled, ties=ties)
    rows = engine.rows
    p = engine.config.n_instances
    label_mode = engine.config.label_mode
    verdicts = set()
    for step in range(60):
        size = rows.size
        if size < 2:
            break
        # removals biased towards D° members: that is where the sizes move
        members = np.flatnonzero(rows.in_schema(np.arange(size)).any(axis=1))
        k = int(rng.integers(1, max(2, min(size // 3, 12))))
        pool = members if members.size and rng.random() < 0.7 else np.arange(size)
        pos = rng.choice(pool, size=min(k, pool.size), replace=False)
        if rng.random() < 0.2:
            pos = np.concatenate([pos, pos[:1]])  # a repeated position counts once
        label_only = label_mode and rng.random() < 0.5
        if label_only:
            pos = pos[rows.labeled(pos)]
            if pos.size == 0:
                continue
        hit = engine._hits(pos, pool_changes=label_mode and not label_only)
        every = list(range(p))
        want_sizes, want_pool = _exact_sizes(engine, np.unique(pos), every, label_only)
        got_sizes, got_pool = rows.schema_sizes_after(pos, every, unlabel=label_only)
        assert (got_sizes, got_pool) == (want_sizes, want_pool), step
        for cap in (1, 2, 5, 50):
            capped, _ = rows.schema_sizes_after(pos, every, unlabel=label_only, cap=cap)
            assert capped == [min(s, cap) for s in want_sizes]
        old = _old_verdict(engine, pos, hit, label_only)
        assert _new_verdict(engine, pos, hit, label_only) == old, step
        assert _engine_verdict(engine, pos, hit, label_only) == old, step
        # the verdict on every instance too (not only the hit ones): a wider test of the cases
        assert _new_verdict(engine, pos, every, label_only) == _old_verdict(
            engine, pos, every, label_only
        )
        verdicts.add(old is None)
        # apply the change (the store's own bookkeeping must stay right for the next step);
        # a change that leaves a schema untrainable is applied too — the store does not care
        upos = np.unique(pos)
        if label_only:
            rows.unlabel(upos, [raw[rows.ids[q]] for q in upos.tolist()])
        else:
            rows.remove(upos)
        if rng.random() < 0.2:  # an insert now and then (draws may land in D°)
            new_ids = list(range(len(raw), len(raw) + 3))
            new_raw = [b"i:%d" % i for i in new_ids]
            raw.extend(new_raw)
            t = np.full(3, 1, dtype=rows.target_dtype)
            X = rng.normal(size=(3, rows.n_features)).astype(np.float32)
            rows.append(new_ids, new_raw, X, t, engine._draws(new_raw))
        assert rows.pool_size == int(np.count_nonzero(rows.in_pool[: rows.size]))
    assert verdicts, "no step ran"


def test_a_schema_that_becomes_untrainable_is_refused_with_the_same_text():
    """Down to the last D° rows: the check refuses with check_trainable's message."""
    engine = _engine(QSSClassifier(rho=0.02, min_schema_rows=0, n_centroids=4), 3)
    _fill(engine, 200, np.random.default_rng(7))
    rows = engine.rows
    members = np.flatnonzero(rows.members(0))
    assert members.size >= 4
    for keep in (3, 1, 0):
        pos = members[: members.size - keep]
        hit = engine._hits(pos, pool_changes=False)
        old = _old_verdict(engine, pos, hit, False)
        assert old is not None and "instance 0:" in old
        assert _new_verdict(engine, pos, hit, False) == old


def test_the_scan_runs_only_below_the_minimum(monkeypatch):
    """With the default minimum (≥ 50 rows) above the bar, no forget reads every row's draws:
    the count never falls back to the O(n) scan."""
    engine = _engine(QSSClassifier(rho=0.01), 3)
    _fill(engine, 2000, np.random.default_rng(3))
    rows = engine.rows
    assert rows.thresholds[0] > rows.membership.rho  # min_rows binds: the kth case
    called = []
    real = type(rows.membership).members
    monkeypatch.setattr(
        type(rows.membership), "members", lambda self, *a: called.append(1) or real(self, *a)
    )
    members = np.flatnonzero(rows.members(0))
    called.clear()
    sizes, _ = rows.schema_sizes_after(members[:5], [0], cap=2)
    assert sizes == [2] and not called
    rows.schema_sizes_after(members[:5], [0])  # exact: the scan
    assert called


def test_ties_at_the_minimums_last_draw_are_counted():
    """D° = the min_rows lowest draws plus exact ties with the last: after a removal the
    count comes from the draws (cap above min_rows), and equals the old construction's."""
    engine = _engine(QSSClassifier(rho=0.01, min_schema_rows=3, n_centroids=8, n_instances=1), 2)
    rows = engine.rows
    col = np.array([0.5, 0.6, 0.7, 0.7, 0.7, 0.9, 0.95, 0.97])
    n = col.size
    draws = np.column_stack([col, np.linspace(0.1, 0.9, n)])
    raw = [b"i:%d" % i for i in range(n)]
    X = np.zeros((n, rows.n_features), dtype=np.float32)
    rows.append(list(range(n)), raw, X, np.arange(n) % 2, draws)
    assert rows._member_counts[0] == 5  # 0.5, 0.6 and three ties at 0.7
    for pos in ([0], [2], [0, 1], [0, 2, 3], [5, 6], [0, 1, 2, 3, 4]):
        pos = np.asarray(pos)
        sizes, _ = rows.schema_sizes_after(pos, [0], cap=8)
        assert sizes == _exact_sizes(engine, pos, [0], False)[0], pos
        assert _new_verdict(engine, pos, [0], False) == _old_verdict(engine, pos, [0], False)
    assert rows.schema_sizes_after(np.asarray([0]), [0])[0] == [4]
