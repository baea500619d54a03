"""The default QSSClassifier where its head serves on a table, one change at a time: each
single-id forget followed by a one-row ``predict_proba`` (the heads' pending Gram rows added,
the shared Gram factored again, every instance's head solved in the stacked layout — the path
``bench.head_latency --table flights`` times), with a D° hit, an insert and a save/load among
them, on a tiny table and on a rank-deficient one (duplicated and constant columns: the Gram
is singular and only the penalty makes the system definite). After every step the model is
the refit's on the rows it holds, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_model, outside_all_schemas, schema_ids

from forgetting import QSSClassifier

PARAMS = dict(random_state=0, rebuild="sync")
"""The defaults, with D° hits rebuilt before forget returns (the refit is then comparable)."""


def table(n: int, k: int, rank_deficient: bool, seed: int = 0):
    """Labels from noisy linear scores of 20 features: the head beats the tables on some
    instances or all (a cell of the tables sees few rows)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 20))
    y = (X @ rng.normal(size=(20, k)) + 0.5 * rng.normal(size=(n, k))).argmax(axis=1)
    if rank_deficient:  # two columns twice, and a constant one
        X = np.hstack([X, X[:, :2], np.full((n, 1), 0.5)])
    return X.astype(np.float32), y


def refit(X, y, ids, held):
    keep = [i for i, row_id in enumerate(ids) if row_id in held]
    return QSSClassifier(**PARAMS).fit(X[keep], y[keep], [ids[i] for i in keep])


@pytest.mark.parametrize(("n", "k", "rank_deficient"), [(420, 2, False), (720, 3, True)])
def test_each_forget_then_predict_proba_serves_the_refits_bits(n, k, rank_deficient, tmp_path):
    X, y = table(n, k, rank_deficient)
    ids = list(range(n))
    extra = 20  # inserted later
    model = QSSClassifier(**PARAMS).fit(X[:-extra], y[:-extra], ids[:-extra])
    assert "head" in model.corrections_  # else this would test the tables alone
    held = set(ids[:-extra])
    probe = X[:1]

    def step(removed):
        model.forget(removed)
        held.difference_update(removed)
        model.predict_proba(probe)  # the next prediction solves the heads

    for victim in outside_all_schemas(model)[:3]:
        step([victim])
        assert np.array_equal(model.predict_proba(X), refit(X, y, ids, held).predict_proba(X))
    step([schema_ids(model, 0)[0]])  # a D° hit: instance 0 rebuilt
    model.insert(X[-extra:], y[-extra:], ids[-extra:])
    held.update(ids[-extra:])
    model.predict_proba(probe)
    step([outside_all_schemas(model)[0]])
    path = tmp_path / "m.qss"
    model.save(path)
    model = QSSClassifier.load(path)
    for victim in outside_all_schemas(model)[:2]:
        step([victim])
    again = refit(X, y, ids, held)
    assert model.corrections_ == again.corrections_
    assert_same_model(model, again, X)
