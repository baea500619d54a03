"""The exact ridge head (content.head): integer sums, exact serving, forget ≡ refit."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_model, outside_all_schemas, schema_ids
from sklearn.datasets import make_regression

from forgetting import QSSClassifier, QSSRegressor
from forgetting.content.head import (
    FEATURE_BITS,
    FixedWeights,
    LinearHead,
    exact_products,
    head_features,
)

HEAD = dict(rho=0.1, n_instances=3, partition="trees", head="ridge", rebuild="sync")


def linear_data(n=900, d=30, k=3, seed=0, held_out=0):
    """Labels from a noisy linear score in 30 dimensions: a linear head beats the tables
    (64 random trees of 2 rows per cell) here by ~9 pp."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + held_out, d))
    B = rng.normal(size=(d, k))
    y = (X @ B + 0.5 * rng.normal(size=(n + held_out, k))).argmax(axis=1)
    if held_out:
        return X[:n], y[:n], X[n:], y[n:]
    return X, y


def refit(cls, X, y, ids, removed, **params):
    keep = [i for i, row_id in enumerate(ids) if row_id not in set(removed)]
    return cls(**params).fit(X[keep], y[keep], [ids[i] for i in keep])


# -- the sums ------------------------------------------------------------------------------
def test_exact_products_equal_integer_matmul():
    rng = np.random.default_rng(0)
    v = rng.integers(-(2**14), 2**14 + 1, size=(3000, 17))
    r = rng.integers(-(2**20), 2**20 + 1, size=(3000, 4))
    gram, cross = exact_products(v, r)
    assert np.array_equal(gram, v.T @ v)  # numpy's int64 matmul: exact, no BLAS
    assert np.array_equal(cross, v.T @ r)


def test_add_then_subtract_restores_the_integers_and_order_does_not_matter():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(500, 8))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    v = head_features(Z)
    assert np.abs(v).max() <= 2**FEATURE_BITS
    r = rng.integers(-(2**32), 2**32, size=(500, 3))
    folds = rng.integers(0, 2, size=500)
    a, b = LinearHead.empty(8, 3, 32), LinearHead.empty(8, 3, 32)
    a.add(v, r, folds)
    a.subtract(v[:100], r[:100], folds[:100])
    order = rng.permutation(np.arange(100, 500))
    b.add(v[order], r[order], folds[order])
    assert a.equals(b)
    assert a.counts.tolist() == [int((folds[100:] == 0).sum()), int((folds[100:] == 1).sum())]


def test_fixed_weights_give_the_same_bits_in_any_batch():
    rng = np.random.default_rng(2)
    W = FixedWeights.of(rng.normal(size=(65, 10)) * 50)
    v = rng.integers(-(2**14), 2**14 + 1, size=(300, 65))
    whole = W.apply(v)
    one_by_one = np.vstack([W.apply(v[i : i + 1]) for i in range(len(v))])
    assert np.array_equal(whole, one_by_one)
    assert np.array_equal(whole, W.apply(v[::-1])[::-1])


# -- the estimator -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served():
    X, y, _, _ = linear_data(held_out=400)
    ids = [f"r{i}" for i in range(len(y))]
    model = QSSClassifier(**HEAD).fit(X, y, ids)
    return model, X, y, ids


def test_the_head_serves_where_it_wins_and_is_more_accurate(served):
    model, X, y, ids = served
    assert "head" in model.corrections_
    _, _, X_test, y_test = linear_data(held_out=400)
    tables = QSSClassifier(**{**HEAD, "head": "none"}).fit(X, y, ids)
    assert tables.corrections_ == ["tables"] * 3
    assert model.score(X_test, y_test) > tables.score(X_test, y_test)


@pytest.mark.parametrize("which", ["outside", "one_schema", "all_schemas", "many"])
def test_forget_equals_refit_with_the_head(served, which):
    model0, X, y, ids = served
    model = QSSClassifier(**HEAD).fit(X, y, ids)
    out = outside_all_schemas(model)
    s0, s1, s2 = (schema_ids(model, r) for r in range(3))
    removed = {
        "outside": out[:3],
        "one_schema": [i for i in s0 if i not in s1 and i not in s2][:1],
        "all_schemas": [s0[0], s1[0], s2[0]],
        "many": ids[::4],
    }[which]
    model.forget(removed)
    again = refit(QSSClassifier, X, y, ids, removed, **HEAD)
    assert "head" in again.corrections_
    assert model.corrections_ == again.corrections_
    assert_same_model(model, again, X)
    assert model.audit_content()


def test_insert_equals_fit_with_the_head(served):
    _, X, y, ids = served
    model = QSSClassifier(**HEAD).fit(X[:700], y[:700], ids[:700])
    model.insert(X[700:], y[700:], ids[700:])
    assert_same_model(model, QSSClassifier(**HEAD).fit(X, y, ids), X)


def test_save_load_keeps_the_head_exact(served, tmp_path):
    model, X, y, ids = served
    path = tmp_path / "m.qss"
    model.save(path)
    loaded = QSSClassifier.load(path)
    assert_same_model(model, loaded, X)
    removed = outside_all_schemas(loaded)[:5]
    loaded.forget(removed)
    assert_same_model(loaded, refit(QSSClassifier, X, y, ids, removed, **HEAD), X)


def test_audit_notices_tampered_head_sums(served):
    _, X, y, ids = served
    model = QSSClassifier(**HEAD).fit(X, y, ids)
    assert model.audit_content()
    model.engine_.instances[0].head.gram[0, 0, 0] += 1
    assert not model.audit_content()


def test_label_mode_with_a_flat_partition_keeps_the_head_exact(served):
    _, X, y, ids = served
    params = {**HEAD, "mode": "label"}
    model = QSSClassifier(**params).fit(X, y, ids)
    removed = outside_all_schemas(model)[:4]
    model.forget(removed)
    y2 = y.astype(np.int64).copy()
    y2[[ids.index(i) for i in removed]] = -1
    assert_same_model(model, QSSClassifier(**params).fit(X, y2, ids), X)


def test_regression_head_forget_equals_refit():
    X, y = make_regression(n_samples=600, n_features=20, noise=5.0, random_state=0)
    ids = list(range(len(y)))
    params = dict(HEAD)
    model = QSSRegressor(**params).fit(X, y, ids)
    assert "head" in model.corrections_
    removed = ids[::5]
    model.forget(removed)
    assert_same_model(model, refit(QSSRegressor, X, y, ids, removed, **params), X)


def test_head_is_refused_where_it_cannot_run():
    X, y = linear_data(n=300)
    with pytest.raises(ValueError, match="flat partition"):
        QSSClassifier(partition="rq", head="ridge").fit(X, y)
    with pytest.raises(ValueError, match="dp"):
        QSSClassifier(
            mode="dp", head="ridge", partition="trees", epsilon=1.0, secret_key=b"k" * 32
        ).fit(X, y)


def test_auto_head_is_off_for_the_codebook_and_dp():
    X, y = linear_data(n=300)
    rq = QSSClassifier(partition="rq", rho=0.2, rebuild="sync").fit(X, y)
    assert rq.corrections_ == ["codebook"] * 3
