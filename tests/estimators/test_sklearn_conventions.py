"""scikit-learn conventions beyond the estimator checks: ``partial_fit`` as the spelling of
insert, ``random_state=None`` (a seed drawn at fit and kept), and the refusal of
``sample_weight``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FAST, assert_same_model, classification_data, regression_data

from forgetting import QSSClassifier, QSSRegressor
from forgetting.pipeline import make_pipeline
from forgetting.store import DurableModel

SEEDLESS = {**FAST, "random_state": None}


# -- partial_fit ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [QSSClassifier, QSSRegressor])
def test_partial_fit_in_chunks_equals_one_fit_bit_for_bit(cls):
    X, y = classification_data() if cls is QSSClassifier else regression_data()
    n = len(y)
    model = cls(**FAST)
    extra = {"classes": np.unique(y)} if cls is QSSClassifier else {}
    assert model.partial_fit(X[:120], y[:120], ids=range(120), **extra) is model
    assert model.partial_fit(X[120:200], y[120:200], ids=range(120, 200)) is model
    model.partial_fit(X[200:], y[200:], ids=range(200, n))
    whole = cls(**FAST).fit(X, y, ids=range(n))
    assert_same_model(model, whole, X)


def test_partial_fit_fixes_the_classes_at_the_first_call():
    X, y = classification_data()
    with pytest.raises(ValueError, match="first partial_fit must hold a row of every class"):
        QSSClassifier(**FAST).partial_fit(X[y != 2], y[y != 2], classes=[0, 1, 2])
    model = QSSClassifier(**FAST).partial_fit(X[:200], y[:200], classes=[0, 1, 2])
    with pytest.raises(ValueError, match="differ from the model's"):
        model.partial_fit(X[200:], y[200:], ids=range(200, 240), classes=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="3 features"):
        model.partial_fit(X[200:, :3], y[200:])
    digest = model.state_digest()
    with pytest.raises(ValueError, match="ids already present"):
        model.partial_fit(X[:2], y[:2], ids=[0, 1])
    assert model.state_digest() == digest


def test_partial_fit_without_ids_numbers_rows_as_one_fit_would():
    X, y = classification_data()
    model = QSSClassifier(**FAST).partial_fit(X[:150], y[:150])
    model.partial_fit(X[150:], y[150:])
    assert sorted(model.ids_) == list(range(len(y)))
    assert_same_model(model, QSSClassifier(**FAST).fit(X, y), X)


# -- random_state=None ---------------------------------------------------------------------


@pytest.mark.parametrize("cls", [QSSClassifier, QSSRegressor])
def test_random_state_none_draws_a_seed_kept_for_forgets_and_reloads(cls, tmp_path):
    X, y = classification_data() if cls is QSSClassifier else regression_data()
    model = cls(**SEEDLESS).fit(X, y)
    other = cls(**SEEDLESS).fit(X, y)
    assert isinstance(model.random_state_, int) and model.random_state is None
    assert model.random_state_ != other.random_state_  # 1 in 2^31 of a false failure
    assert model.state_digest() != other.state_digest()
    seeded = cls(**{**FAST, "random_state": 7}).fit(X, y)
    assert seeded.random_state_ == 7
    model.forget([3, 5, 8])
    keep = [i for i in range(len(y)) if i not in (3, 5, 8)]
    refit = cls(**{**FAST, "random_state": model.random_state_}).fit(X[keep], y[keep], ids=keep)
    assert_same_model(model, refit, X)
    model.save(tmp_path / "m.qss")
    loaded = cls.load(tmp_path / "m.qss")
    assert loaded.random_state is None and loaded.random_state_ == model.random_state_
    for m in (model, loaded):
        m.forget([10])
    assert_same_model(model, loaded, X)


def test_random_state_none_survives_the_store(tmp_path):
    X, y = classification_data()
    path = str(tmp_path / "m.db")
    with DurableModel.create(path, QSSClassifier(**SEEDLESS), X, y, list(range(len(y)))) as m:
        seed = m.estimator.random_state_
        m.forget([4])
        digest = m.state_digest()
    with DurableModel.open(path) as again:
        assert again.estimator.random_state_ == seed and again.state_digest() == digest
        assert again.verify()["ok"]


def test_a_pipeline_needs_an_integer_random_state():
    X, y = classification_data()
    with pytest.raises(ValueError, match="integer random_state"):
        make_pipeline(QSSClassifier(**SEEDLESS)).fit(X, y)


# -- sample_weight -------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [QSSClassifier, QSSRegressor])
def test_sample_weight_is_refused_in_one_line(cls):
    X, y = classification_data() if cls is QSSClassifier else regression_data()
    model = cls(**FAST)
    with pytest.raises(ValueError, match="sample_weight is not supported.*distinct ids"):
        model.fit(X, y, sample_weight=np.ones(len(y)))
    assert not hasattr(model, "engine_")
    model.fit(X, y, sample_weight=None)  # scikit-learn's "no weights" passes
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        model.fit(X, y, weights=np.ones(len(y)))
