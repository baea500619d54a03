"""Serving computes φ's first step once for all instances (ensemble: the normalized input) in
8-row blocks. These tests pin that this shortcut is the same arithmetic as each instance
computing φ from the raw rows itself, and that a row predicts the same alone or in a batch."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import classification_data, regression_data

from forgetting import QSSClassifier, QSSRegressor
from forgetting._rowwise import HEAD_BLOCK_ROWS, SERVE_BLOCK_ROWS
from forgetting.engine.serving import instance_outputs as _instance_outputs
from forgetting.schema import normalized_rows
from forgetting.schema.preprocess import l2_normalize


def _clustered(n: int, d: int, k: int, seed: int):
    """Well-separated classes: with D° of a few hundred rows φ keeps LDA directions."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(k, d))
    y = rng.integers(0, k, size=n)
    return centers[y] + rng.normal(size=(n, d)), y


@pytest.mark.parametrize(
    "params",
    [
        dict(lda=True, head="shared-ridge"),
        dict(lda=False, head="shared-ridge"),
        dict(lda=True, head="ridge"),
        dict(lda=True, head="none"),
        dict(lda=True, partition="rq", n_levels=2, n_centroids=8),
    ],
)
def test_shared_normalization_is_each_instances_own_arithmetic(params):
    X, y = _clustered(3000, 24, 5, 0)
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=0, **params).fit(X, y)
    engine = model.engine_
    Xq = np.random.default_rng(1).normal(scale=3.0, size=(2 * SERVE_BLOCK_ROWS + 3, 24))
    if params.get("lda"):
        assert any(inst.schema.preprocessor.uses_lda for inst in engine.instances)
    for r, inst in enumerate(engine.instances):
        content = engine._content(inst)
        own = _instance_outputs(inst.schema, content, Xq)  # φ from the raw rows
        assert np.array_equal(engine.predict_outputs(Xq, instance=r), own)
    batch = model.predict_proba(Xq)
    alone = np.vstack([model.predict_proba(Xq[i : i + 1]) for i in range(len(Xq))])
    assert np.array_equal(batch, alone)


def test_regressor_serves_the_same_with_the_shared_step():
    X, y = regression_data()
    model = QSSRegressor(rho=0.25, rebuild="sync", random_state=0).fit(X, y)
    engine = model.engine_
    for r, inst in enumerate(engine.instances):
        own = _instance_outputs(inst.schema, engine._content(inst), X[:37])
        assert np.array_equal(engine.predict_outputs(X[:37], instance=r), own)


def test_normalized_rows_do_not_depend_on_the_block_or_batch():
    X = classification_data(n=5 * SERVE_BLOCK_ROWS + 5, d=13, k=3)[0]
    rows = normalized_rows(X, SERVE_BLOCK_ROWS)
    assert np.array_equal(rows, np.vstack([l2_normalize(X[i : i + 1]) for i in range(len(X))]))
    assert np.array_equal(normalized_rows(X, HEAD_BLOCK_ROWS), rows)


def test_a_forget_after_the_serving_change_still_equals_the_refit():
    """The head's statistics keep their own 64-row blocks (HEAD_BLOCK_ROWS): forgetting rows
    subtracts exactly what was added."""
    X, y = _clustered(2400, 16, 4, 3)
    ids = np.arange(len(y))
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=0).fit(X, y, ids)
    gone = ids[5:400:7]
    model.forget(gone.tolist())
    model.wait_for_rebuilds()
    keep = np.setdiff1d(ids, gone)
    refit = QSSClassifier(rho=0.1, rebuild="sync", random_state=0).fit(X[keep], y[keep], keep)
    assert model.state_digest() == refit.state_digest()
    assert np.array_equal(model.predict_proba(X[:300]), refit.predict_proba(X[:300]))


@pytest.mark.parametrize("head", ["shared-ridge", "ridge", "none"])
def test_statistics_share_the_normalization_with_the_same_bits(head, monkeypatch):
    """A row's contribution and head features with φ's first step computed once equal those
    of each step normalizing the raw rows itself (models saved before keep valid sums)."""
    from forgetting import instance as instance_module
    from forgetting._rowwise import BLOCK_ROWS
    from forgetting.content.heads import head_features
    from forgetting.instance import contributions_with_features

    X, y = _clustered(3000, 24, 5, 4)
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=0, lda=True, head=head)
    model.fit(X, y)
    rows = np.random.default_rng(5).normal(scale=3.0, size=(BLOCK_ROWS + 77, 24))
    targets = np.arange(len(rows)) % 5
    hashes = np.zeros((len(rows), 32), dtype=np.uint8)
    for inst in model.engine_.instances:
        schema = inst.schema
        contrib, features = contributions_with_features(schema, rows, targets, hashes)
        codes, g = schema.transform(rows)  # φ from the raw rows, statistics blocks
        assert np.array_equal(contrib.codes, codes)
        with monkeypatch.context() as patch:  # every step normalizing the raw rows itself
            patch.setattr(instance_module, "normalized_rows", lambda X, block_rows: None)
            own_contrib, _ = contributions_with_features(schema, rows, targets, hashes)
        assert np.array_equal(contrib.residuals, own_contrib.residuals)
        assert np.array_equal(contrib.digests, own_contrib.digests)
        if head == "none":
            assert features is None
            continue
        own = head_features(schema.head_inputs(rows, HEAD_BLOCK_ROWS), np.float64)
        assert np.array_equal(features, own)
    rows_1024 = normalized_rows(rows, BLOCK_ROWS)
    assert np.array_equal(rows_1024, normalized_rows(rows, SERVE_BLOCK_ROWS))
    assert np.array_equal(rows_1024, normalized_rows(rows, HEAD_BLOCK_ROWS))


def test_shared_rf_inputs_computed_once_are_each_instances_own():
    """With "shared-rf" the engine computes the head's inputs (u and ψ(u)) once for the p
    instances: the served mean equals the mean of each instance's own arithmetic."""
    X, y = _clustered(2000, 24, 5, 6)
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=0, head="shared-rf").fit(X, y)
    engine = model.engine_
    assert engine.instances[0].schema.input_head_key is not None
    Xq = np.random.default_rng(7).normal(scale=3.0, size=(3 * SERVE_BLOCK_ROWS + 1, 24))
    own = [_instance_outputs(i.schema, engine._content(i), Xq) for i in engine.instances]
    assert np.array_equal(engine.predict_outputs(Xq), (own[0] + own[1] + own[2]) / 3)
