"""One surface for every model family (forgetting.estimators.base): the exact forest gets what
QSS has — the package-root import, ``partial_fit`` (chunks == one fit, bit for bit),
``random_state=None``, model files through snapshots, pipelines and dask inputs — and forget
≡ refit holds through each. Issue 74, items 1, 4 and 5."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forgetting import (
    ExactForestClassifier,
    ExactForestRegressor,
    ForgettingPipeline,
    QSSClassifier,
    QSSRegressor,
    make_pipeline,
)
from forgetting.estimators import UnlearningEstimator, estimator_classes, restore_estimator

SMALL = {"n_estimators": 6, "n_instances": 2}


def _table(n=600, d=5, seed=0, regression=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    signal = np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 1]) + 0.3 * rng.normal(size=n)
    y = signal if regression else (signal > 0).astype(int) + (signal > 1.2).astype(int)
    return X, y


def _same(a, b, X) -> None:
    if hasattr(a, "predict_proba"):
        assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    assert np.array_equal(a.predict(X), b.predict(X))
    assert a.state_digest() == b.state_digest()


def test_every_family_is_one_base_and_exported_from_the_package_root():
    classes = estimator_classes()
    assert set(classes) == {
        "QSSClassifier",
        "QSSRegressor",
        "ExactForestClassifier",
        "ExactForestRegressor",
    }
    for cls in (ExactForestClassifier, ExactForestRegressor, QSSClassifier, QSSRegressor):
        assert issubclass(cls, UnlearningEstimator)
        assert classes[cls.__name__] is cls
        assert "See Also" in cls.__doc__


@pytest.mark.parametrize("regression", [False, True])
def test_forest_partial_fit_in_chunks_is_one_fit(regression):
    Model = ExactForestRegressor if regression else ExactForestClassifier
    X, y = _table(regression=regression)
    chunked = Model(**SMALL)
    for start in range(0, len(y), 200):  # no ids: the next integers, as one fit numbers them
        chunked.partial_fit(X[start : start + 200], y[start : start + 200])
    chunked.wait_for_rebuilds()
    whole = Model(**SMALL).fit(X, y)
    _same(chunked, whole, X)
    assert chunked.ids_ == list(range(len(y)))


def test_forest_partial_fit_fixes_the_classes_at_the_first_call():
    X, y = _table()
    with pytest.raises(ValueError, match="differ from the model's"):
        ExactForestClassifier(**SMALL).partial_fit(X[:50], y[:50], classes=[0, 1, 2, 3])
    model = ExactForestClassifier(**SMALL).partial_fit(X, y, classes=[0, 1, 2])
    with pytest.raises(ValueError, match="unseen labels"):
        model.partial_fit(X[:2], np.array([7, 7]))


def test_forest_random_state_none_draws_a_seed_once_and_keeps_it(tmp_path):
    X, y = _table()
    model = ExactForestClassifier(random_state=None, **SMALL).fit(X, y)
    seed = model.random_state_
    assert isinstance(seed, int)
    model.forget([3, 40])
    model.wait_for_rebuilds()
    keep = np.setdiff1d(np.arange(len(y)), [3, 40])
    refit = ExactForestClassifier(random_state=seed, **SMALL).fit(X[keep], y[keep], keep)
    _same(model, refit, X)
    model.save(tmp_path / "m.bin")
    loaded = ExactForestClassifier.load(tmp_path / "m.bin")
    assert loaded.random_state is None and loaded.random_state_ == seed
    _same(model, loaded, X)


@pytest.mark.parametrize("regression", [False, True])
def test_forest_snapshots_restore_the_model_and_name_their_class(regression):
    Model = ExactForestRegressor if regression else ExactForestClassifier
    X, y = _table(regression=regression)
    model = Model(secret_key=b"k" * 16, **SMALL).fit(X, y)
    model.forget([1, 2, 3])
    snapshot = model.snapshot()
    assert snapshot.estimator == Model.__name__
    assert snapshot.engine.instances == [None, None]  # a forest keeps rows only
    restored = restore_estimator(snapshot, secret_key=b"k" * 16)
    assert type(restored) is Model
    _same(model, restored, X)
    with pytest.raises(ValueError, match="secret_key does not match"):
        restore_estimator(snapshot, secret_key=b"x" * 16)


def test_forest_refuses_erase_inputs_and_sample_weight():
    X, y = _table()
    model = ExactForestClassifier(**SMALL).fit(X, y)
    with pytest.raises(ValueError, match="erase_inputs"):
        model.forget([1], erase_inputs=True)
    with pytest.raises(ValueError, match="sample_weight"):
        ExactForestClassifier(**SMALL).fit(X, y, sample_weight=np.ones(len(y)))


def _frame(n=700, seed=1):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "age": rng.normal(40, 10, size=n),
            "income": rng.normal(size=n),
            "city": rng.choice(["x", "y", "z"], size=n),
        }
    )
    df.loc[rng.random(n) < 0.05, "age"] = np.nan
    y = (df["income"] + (df["city"] == "x") > 0.5).astype(int).to_numpy()
    return df, y, [f"u{i}" for i in range(n)]


def _steps():
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    return ColumnTransformer(
        [("num", StandardScaler(), ["age", "income"]), ("cat", OneHotEncoder(), ["city"])]
    )


def test_a_pipeline_ending_in_the_forest_forgets_exactly_through_every_step(tmp_path):
    df, y, ids = _frame()
    pipe = make_pipeline(_steps(), ExactForestClassifier(**SMALL)).fit(df, y, ids=ids)
    gone = ["u3", "u5", "u100", "u101"]
    receipt = pipe.forget(gone)
    pipe.wait_for_rebuilds()
    keep = [i for i, row_id in enumerate(ids) if row_id not in gone]
    refit = make_pipeline(_steps(), ExactForestClassifier(**SMALL)).fit(
        df.iloc[keep], y[keep], ids=[ids[i] for i in keep]
    )
    _same(pipe, refit, df)
    assert receipt.state_digest == pipe.state_digest() or receipt.rebuild_started
    pipe.save(tmp_path / "p.bin")
    loaded = ForgettingPipeline.load(tmp_path / "p.bin")
    _same(pipe, loaded, df)
    inserted = loaded.insert(df.iloc[[3, 5]], y[[3, 5]], ["u3", "u5"])
    assert inserted.n_rows == 2


def test_a_dask_array_fits_the_forest_bit_for_bit_as_in_memory():
    da = pytest.importorskip("dask.array")
    X, y = _table()
    lazy = da.from_array(X, chunks=(150, X.shape[1]))
    on_dask = ExactForestClassifier(**SMALL).fit(lazy, y)
    local = ExactForestClassifier(**SMALL).fit(X, y)
    _same(on_dask, local, X)
