"""The gain filter (tests/content/test_gain_filter.py) on the lab's clustered data
(forgetting_lab.bench.core.clustered_data, where the tables win): forgets and inserts it decides
serve the refit, a close call goes to the exact route, and save/load keeps its tracking."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_model, schema_ids

from forgetting import QSSClassifier
from forgetting.content.heads import solve as solve_module
from forgetting.content.tables import flat_content as tables_module
from forgetting_lab.bench.core import clustered_data


@pytest.fixture
def tables_serve(monkeypatch):
    """Make the tables win the head-vs-tables rule (the rule reads the factor when it runs);
    counts the exact solves."""
    monkeypatch.setattr(tables_module, "TABLES_GAIN_FACTOR", 50.0)
    solves = []
    exact = solve_module._solve_columns

    def counted(*args):
        solves.append(1)
        return exact(*args)

    monkeypatch.setattr(solve_module, "_solve_columns", counted)
    return solves


def test_forgets_and_inserts_decided_by_the_filter_serve_the_refit(tables_serve):
    X, y = clustered_data(3000, d=16, k=4, seed=3)
    X, y = X.astype(np.float32), y
    ids = list(range(len(X)))
    params = dict(n_instances=3, rebuild="sync", random_state=0)
    model = QSSClassifier(**params).fit(X[:2800], y[:2800], ids[:2800])
    assert model.engine_.corrections() == ["tables"] * 3
    rng = np.random.default_rng(0)
    gone = set()
    hit = schema_ids(model, 1)[0]  # one D° hit: a rebuild, then the filter re-bases
    order = [int(i) for i in rng.choice(2800, 30, replace=False) if i != hit]
    order.insert(12, hit)
    del tables_serve[:]
    for step, row_id in enumerate(order):
        model.forget([row_id])
        gone.add(row_id)
        if step % 10 == 5:
            new = 2800 + step
            model.insert(X[new : new + 1], y[new : new + 1], [new])
        model.predict_proba(X[:5])
    solves = len(tables_serve)
    assert solves < len(order) // 3, f"{solves} exact solves for {len(order)} changes"
    keep = [i for i in ids[:2800] if i not in gone] + [2800 + s for s in range(5, 31, 10)]
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    assert_same_model(model, refit, X[:300])


def test_a_close_call_goes_to_the_exact_route_and_matches_the_refit(tables_serve, monkeypatch):
    """Deletions decided by the filter (tables), then one whose result puts instance 0's head
    gain a hair (10⁻⁹) above the threshold — inside the filter's tolerance: the filter must
    not decide it, the exact route serves the head, as a refit does."""
    X, y = clustered_data(3000, d=16, k=4, seed=3)
    params = dict(n_instances=3, rebuild="sync", random_state=0)
    model = QSSClassifier(**params).fit(X, y)
    inside = set(schema_ids(model, 0) + schema_ids(model, 1) + schema_ids(model, 2))
    rng = np.random.default_rng(1)
    gone = [int(i) for i in rng.choice(len(X), 12, replace=False) if int(i) not in inside]
    for row_id in gone[:-1]:
        model.forget([row_id])
        model.predict_proba(X[:3])
    keep = np.setdiff1d(np.arange(len(X)), gone)
    final = QSSClassifier(**params).fit(X[keep], y[keep], keep).engine_.instances[0]
    head_gain, _ = final.head.solution()
    _, _, tables_gain = final.accumulators.best("auto", "auto")
    assert head_gain > 0 and tables_gain > 0
    monkeypatch.setattr(tables_module, "TABLES_GAIN_FACTOR", head_gain * (1 - 1e-9) / tables_gain)
    del tables_serve[:]
    model.forget([gone[-1]])
    assert model.engine_.corrections()[0] == "head"
    assert tables_serve, "the close call was not solved"
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    assert refit.engine_.corrections()[0] == "head"
    assert_same_model(model, refit, X[:300])


def test_save_load_and_pickle_with_pending_rows_and_a_tracked_solution(tables_serve, tmp_path):
    """One-row forgets leave Gram terms pending and the filter tracking; a save/load and a
    pickle round trip at that point keep the model, and forgets after them (filter re-based
    on the loaded model) still land on the refit."""
    import pickle

    X, y = clustered_data(2400, d=16, k=4, seed=5)
    ids = list(range(len(X)))
    params = dict(n_instances=3, rebuild="sync", random_state=0)
    model = QSSClassifier(**params).fit(X, y, ids)
    inside = set(schema_ids(model, 0) + schema_ids(model, 1) + schema_ids(model, 2))
    outside = [i for i in ids if i not in inside]
    for row_id in outside[:6]:
        model.forget([row_id])
        model.predict_proba(X[:2])
    assert model.engine_._gram_cache.gains.engaged()
    assert any(inst.head._pending for inst in model.engine_.instances)
    path = tmp_path / "m.qss"
    model.save(path)
    for copy in (QSSClassifier.load(path), pickle.loads(pickle.dumps(model))):
        assert_same_model(model, copy, X[:200])
        for row_id in outside[6:10]:
            copy.forget([row_id])
            copy.predict_proba(X[:2])
        keep = [i for i in ids if i not in outside[:10]]
        refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
        assert_same_model(copy, refit, X[:200])
