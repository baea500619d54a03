"""head="newton" through the estimator: served, exact under insert/save-load, refused where it
cannot run. (The sums and the step, and forget ≡ refit for both heads:
tests/content/test_head.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_model, outside_all_schemas
from sklearn.datasets import make_regression

from forgetting import QSSClassifier, QSSRegressor
from forgetting.content.heads import NewtonHead, NewtonWeights

NEWTON = dict(rho=0.1, n_instances=3, partition="trees", head="newton", rebuild="sync")


def linear_data(n=900, d=30, k=3, seed=0):
    """Labels from a noisy linear score: a head beats the tables here
    (tests/content/test_head.py)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=(d, k)) + 0.5 * rng.normal(size=(n, k))).argmax(axis=1)
    return X, y


def refit(X, y, ids, removed, **params):
    gone = set(removed)
    keep = [i for i, row_id in enumerate(ids) if row_id not in gone]
    return QSSClassifier(**params).fit(X[keep], y[keep], [ids[i] for i in keep])


@pytest.fixture(scope="module")
def data():
    X, y = linear_data()
    return X, y, [f"r{i}" for i in range(len(y))]


def test_the_newton_step_is_kept_and_served(data):
    X, y, ids = data
    model = QSSClassifier(**NEWTON).fit(X, y, ids)
    assert "head" in model.corrections_
    for inst in model.engine_.instances:
        assert isinstance(inst.head, NewtonHead)
        assert inst.schema.head_kind == "newton"
    served = [inst.content_for("auto", "auto").head for inst in model.engine_.instances]
    assert any(isinstance(w, NewtonWeights) for w in served)
    proba = model.predict_proba(X[:50])
    assert np.allclose(proba.sum(axis=1), 1.0)  # softmax(log g + δᵀv): a distribution
    ridge = QSSClassifier(**{**NEWTON, "head": "ridge"}).fit(X, y, ids)
    assert ridge.state_digest() != model.state_digest()  # the schema digest says which head


def test_insert_and_save_load_keep_the_newton_head_exact(data, tmp_path):
    X, y, ids = data
    model = QSSClassifier(**NEWTON).fit(X[:700], y[:700], ids[:700])
    model.insert(X[700:], y[700:], ids[700:])
    assert_same_model(model, QSSClassifier(**NEWTON).fit(X, y, ids), X)
    path = tmp_path / "newton.qss"
    model.save(path)
    loaded = QSSClassifier.load(path)
    assert loaded.engine_.instances[0].schema.head_kind == "newton"
    assert_same_model(model, loaded, X)
    removed = outside_all_schemas(loaded)[:5]
    loaded.forget(removed)
    assert_same_model(loaded, refit(X, y, ids, removed, **NEWTON), X)


def test_audit_notices_tampered_newton_sums(data):
    X, y, ids = data
    model = QSSClassifier(**NEWTON).fit(X, y, ids)
    model.engine_.instances[1].head.weighted[0, 0, 0] += 1
    assert not model.audit_content()


def test_newton_is_refused_where_it_cannot_run():
    X, y = linear_data(n=300)
    with pytest.raises(ValueError, match="classification only"):
        Xr, yr = make_regression(n_samples=300, n_features=5, random_state=0)
        QSSRegressor(head="newton", partition="trees").fit(Xr, yr)
    with pytest.raises(ValueError, match="flat partition"):
        QSSClassifier(partition="rq", head="newton").fit(X, y)
