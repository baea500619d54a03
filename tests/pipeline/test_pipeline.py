"""ForgettingPipeline: ``fit(D).forget(R)`` equals ``fit(D \\ R)`` bit for bit, through every step.

Every comparison is bitwise (``numpy.array_equal`` predictions, equal state digests) against a
pipeline fitted from scratch on the rows that remain, with the same steps and parameters —
after forgets outside and inside the pipeline's D°, a category's last row, inserts with new
categories, a save/load or pickle round trip, and random interleavings of forgets and inserts.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from helpers import FAST
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.compose import ColumnTransformer as SkColumnTransformer
from sklearn.datasets import make_classification
from sklearn.decomposition import PCA
from sklearn.impute import SimpleImputer as SkSimpleImputer
from sklearn.pipeline import make_pipeline as sk_make_pipeline
from sklearn.preprocessing import OneHotEncoder as SkOneHotEncoder
from sklearn.preprocessing import StandardScaler as SkStandardScaler

from forgetting import QSSClassifier, QSSRegressor
from forgetting.io.model_format import ModelFileError
from forgetting.pipeline import ForgettingPipeline, PipelineReceipt, make_pipeline
from forgetting.preprocessing import (
    ColumnTransformer,
    NotExactError,
    OneHotEncoder,
    OnSchemaRows,
    SimpleImputer,
    StandardScaler,
)

pd = pytest.importorskip("pandas")

SMALL = dict(FAST, rho=0.2)


def frame(n=160, seed=0):
    """A mixed table: numbers with missing values, a city (one city on a single row), a flag."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    x2 = rng.normal(size=n) * 100 + 7
    x2[rng.random(n) < 0.08] = np.nan
    city = rng.choice(["Oslo", "Paris", "Rome", "Lima"], size=n).astype(object)
    city[rng.random(n) < 0.05] = None
    city[7] = "Quito"  # its only row
    flag = rng.random(n) < 0.5
    y = (x1 + (city == "Rome") + 0.3 * rng.normal(size=n) > 0.4).astype(int)
    X = pd.DataFrame({"x1": x1, "x2": x2, "city": pd.Categorical(city), "flag": flag})
    return X, y


def mixed_steps():
    return [
        SkColumnTransformer(
            [
                ("num", sk_make_pipeline(SkSimpleImputer(), SkStandardScaler()), ["x1", "x2"]),
                ("cat", SkOneHotEncoder(handle_unknown="ignore"), ["city"]),
            ],
            remainder="passthrough",
        )
    ]


def pipe(estimator=None, steps=None, **kw):
    kw.setdefault("min_schema_rows", 20)
    steps = mixed_steps() if steps is None else steps
    return make_pipeline(*steps, estimator or QSSClassifier(**SMALL), **kw)


def refit_without(make, X, y, ids, gone):
    keep = ~np.isin(ids, list(gone))
    return make().fit(X[keep] if isinstance(X, np.ndarray) else X.loc[keep], y[keep], ids[keep])


def assert_same(a, b, X):
    a.wait_for_rebuilds()
    b.wait_for_rebuilds()
    assert a.state_digest() == b.state_digest()
    assert np.array_equal(a.predict(X), b.predict(X))
    if hasattr(a.steps[-1][1], "predict_proba"):
        assert np.array_equal(a.predict_proba(X), b.predict_proba(X))


# -- the contract ------------------------------------------------------------------------------
def test_scikit_learn_s_scaler_in_make_pipeline_forgets_like_a_refit():
    X, y = make_classification(400, 6, random_state=0)
    ids = np.arange(400)

    def make():
        return make_pipeline(SkStandardScaler(), QSSClassifier(**SMALL), min_schema_rows=30)

    model = make().fit(X, y, ids)
    assert isinstance(model.named_steps["standardscaler"], StandardScaler)
    inside = [i for i, m in zip(model.ids_, model._members, strict=True) if m]
    outside = [i for i, m in zip(model.ids_, model._members, strict=True) if not m]
    receipt = model.forget(outside[:3])
    assert isinstance(receipt, PipelineReceipt) and not receipt.refitted
    assert receipt.state_digest == model.state_digest()
    assert_same(model, refit_without(make, X, y, ids, outside[:3]), X)
    receipt = model.forget(inside[:1])  # the scaler's D°: it refits, and the estimator with it
    assert receipt.refitted and receipt.steps_changed == ("standardscaler",)
    assert receipt.instances_hit == (0, 1, 2)
    assert_same(model, refit_without(make, X, y, ids, outside[:3] + inside[:1]), X)


def test_a_mixed_table_forgets_a_category_s_last_row_and_d_degree_rows_exactly():
    X, y = frame()
    ids = np.arange(len(y))

    def make():
        return pipe()

    model = make().fit(X, y, ids)
    gone = [7]  # Quito's only row: the one-hot width changes
    receipt = model.forget(gone)
    assert receipt.refitted and receipt.steps_changed == ("columntransformer",)
    assert_same(model, refit_without(make, X, y, ids, gone), X.loc[ids != 7])
    members = [i for i, m in zip(model.ids_, model._members, strict=True) if m]
    gone += members[:2]
    model.forget(members[:2])
    assert_same(model, refit_without(make, X, y, ids, gone), X.loc[ids != 7])
    plain = [i for i, m in zip(model.ids_, model._members, strict=True) if not m][:3]
    gone += plain
    assert not model.forget(plain).refitted
    assert_same(model, refit_without(make, X, y, ids, gone), X.loc[ids != 7])


def test_inserts_equal_a_fit_on_all_rows_even_with_a_new_category():
    X, y = frame()
    ids = np.arange(len(y))
    first = ids < 120
    model = pipe().fit(X.loc[first], y[first], ids[first])
    with pytest.raises(ValueError, match=r"unknown categories \['Quito'\]|unknown"):
        pipe(steps=[ColumnTransformer([("c", OneHotEncoder(), ["city"])])]).fit(
            X.loc[first & (ids != 7)], y[first & (ids != 7)], ids[first & (ids != 7)]
        ).predict(X.loc[[7]])
    receipt = model.insert(X.loc[~first], y[~first], ids[~first])
    assert receipt.operation == "insert" and receipt.n_rows == 40
    assert_same(model, pipe().fit(X, y, ids), X)


def test_unknown_categories_at_predict_time_follow_handle_unknown():
    X, y = frame()
    model = pipe().fit(X, y)
    new = X.iloc[:2].copy()
    new["city"] = pd.Categorical(["Berlin", "Oslo"])
    assert model.predict(new).shape == (2,)  # handle_unknown="ignore": all zeros
    strict = pipe(steps=[ColumnTransformer([("c", OneHotEncoder(), ["city"])])]).fit(X, y)
    with pytest.raises(ValueError, match=r"unknown categories \['Berlin'\] in column 'city'"):
        strict.predict(new)


@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_random_interleavings_of_forgets_and_inserts_equal_a_refit(data):
    X, y = frame(n=120, seed=data.draw(st.integers(0, 2)))
    ids = np.arange(len(y))
    held = set(range(90))
    model = pipe().fit(X.loc[sorted(held)], y[sorted(held)], sorted(held))
    for _ in range(data.draw(st.integers(1, 4))):
        out = sorted(set(range(120)) - held)
        if out and data.draw(st.booleans()):
            new = data.draw(st.lists(st.sampled_from(out), min_size=1, max_size=5, unique=True))
            model.insert(X.loc[new], y[new], new)
            held |= set(new)
        else:
            gone = data.draw(
                st.lists(st.sampled_from(sorted(held)), min_size=1, max_size=4, unique=True)
            )
            try:
                model.forget(gone)
            except ValueError as err:  # fewer than 2 classes would remain
                assert "fewer than 2 classes" in str(err) or "class" in str(err)
                continue
            held -= set(gone)
    keep = np.isin(ids, sorted(held))
    assert_same(model, pipe().fit(X.loc[keep], y[keep], ids[keep]), X)


def test_a_regressor_pipeline_with_statistics_on_all_rows_warns_and_stays_exact():
    X, _ = frame()
    y = X["x1"].to_numpy() * 3 + np.nan_to_num(X["x2"].to_numpy()) / 50
    ids = np.arange(len(y))
    steps = [
        ColumnTransformer(
            [
                ("num", SimpleImputer(rows="all"), ["x1", "x2"]),
                ("cat", OneHotEncoder(handle_unknown="ignore"), ["city"]),
            ]
        ),
        StandardScaler(rows="all"),
    ]

    def make():
        return make_pipeline(*[clone(s) for s in steps], QSSRegressor(**SMALL))

    with pytest.warns(UserWarning, match="rows='all'"):
        model = make().fit(X, y, ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert model.forget([3, 4]).refitted  # the means moved: every forget refits
        assert_same(model, refit_without(make, X, y, ids, [3, 4]), X)


def test_a_step_fitted_on_schema_rows_only_is_exact_and_pca_alone_is_refused():
    X, y = make_classification(300, 8, random_state=1)
    ids = np.arange(300)
    with pytest.raises(NotExactError, match="'pca'.*PCA.*OnSchemaRows"):
        make_pipeline(PCA(3), QSSClassifier(**SMALL))
    with pytest.raises(NotExactError, match="'reduce'"):
        ForgettingPipeline([("reduce", PCA(3)), ("qss", QSSClassifier(**SMALL))]).fit(X, y)

    def make():
        return make_pipeline(
            OnSchemaRows(PCA(3, random_state=0)), QSSClassifier(**SMALL), min_schema_rows=40
        )

    model = make().fit(X, y, ids)
    members = [i for i, m in zip(model.ids_, model._members, strict=True) if m]
    others = [i for i, m in zip(model.ids_, model._members, strict=True) if not m]
    assert not model.forget(others[:2]).refitted
    assert model.forget(members[:1]).refitted
    assert_same(model, refit_without(make, X, y, ids, others[:2] + members[:1]), X)


# -- files, pickles, the scikit-learn surface -------------------------------------------------
def test_save_load_round_trip_then_forget_equals_a_refit(tmp_path):
    X, y = frame()
    ids = np.array([f"u{i}" for i in range(len(y))], dtype=object)
    model = pipe(QSSClassifier(**SMALL, secret_key=b"a secret of 16+ bytes")).fit(X, y, ids)
    path = tmp_path / "pipeline.qss"
    model.save(path)
    with pytest.raises(ValueError, match="secret key"):
        ForgettingPipeline.load(path)
    loaded = ForgettingPipeline.load(path, secret_key=b"a secret of 16+ bytes")
    assert loaded.state_digest() == model.state_digest()
    gone = ["u7", "u3", "u11"]
    loaded.forget(gone)

    def make():
        return pipe(QSSClassifier(**SMALL, secret_key=b"a secret of 16+ bytes"))

    assert_same(loaded, refit_without(make, X, y, ids, gone), X)
    loaded.save(path)
    raw = path.read_bytes()
    assert b"Quito" not in raw and b'"u7"' not in raw  # no residue of the forgotten rows
    with pytest.raises(ModelFileError, match="forgetting-model-file"):
        QSSClassifier.load(path)


def test_a_tampered_pipeline_file_is_refused(tmp_path):
    X, y = frame()
    model = pipe().fit(X, y)
    path = tmp_path / "p.qss"
    model.save(path)
    from forgetting.io.model_format import dumps, loads
    from forgetting.pipeline.files import FILE_KIND

    state = loads(path.read_bytes(), FILE_KIND)
    scaler = state["snapshot"].steps[0].transformers_[0][1].steps[1][1]
    scaler.mean_ = scaler.mean_ + 1.0  # edit the fitted state, keep the checksum valid
    path.write_bytes(dumps(state, FILE_KIND))
    with pytest.raises(ModelFileError, match="does not match the rows"):
        ForgettingPipeline.load(path)


def test_a_pickled_pipeline_forgets_like_the_original():
    X, y = frame()
    model = pipe().fit(X, y)
    twin = pickle.loads(pickle.dumps(model))
    assert twin.state_digest() == model.state_digest()
    twin.forget([5, 7])
    model.forget([5, 7])
    assert_same(model, twin, X)


def test_bad_requests_change_nothing():
    X, y = frame()
    model = pipe().fit(X, y)
    before = model.state_digest()
    with pytest.raises(KeyError, match="unknown ids"):
        model.forget([5, 10_000])
    with pytest.raises(ValueError, match="unique"):
        model.forget([5, 5])
    with pytest.raises(ValueError, match="already present"):
        model.insert(X.iloc[:1], y[:1], [3])
    with pytest.raises(ValueError, match="unseen labels"):
        model.insert(X.iloc[:1], [9], [10_000])
    with pytest.raises(ValueError, match=r"lacks the fitted columns \['flag'\]"):
        model.predict(X.drop(columns="flag"))
    with pytest.raises(ValueError, match="'city' holds numbers but was fitted on text"):
        model.predict(X.assign(city=1.5))
    assert model.state_digest() == before
    assert model.predict(X[["flag", "city", "x2", "x1"]]).shape == (len(y),)  # by name
    with pytest.raises(ValueError, match="mode='label'"):
        pipe(QSSClassifier(**SMALL, mode="label")).fit(X, y)
    with pytest.raises(ValueError, match="must be a forgetting estimator"):
        make_pipeline(SkStandardScaler(), SkStandardScaler())


def test_a_failed_refit_keeps_the_fitted_pipeline():
    X, y = make_classification(200, 4, random_state=3)
    model = make_pipeline(StandardScaler(rows="all"), QSSClassifier(**SMALL))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y)
        before = model.state_digest()
        with pytest.raises(ValueError, match="at least 2 classes"):
            model.fit(X[:50] * 3, np.zeros(50, dtype=int))
    assert model.state_digest() == before
    assert model.forget([0]).n_rows == 1


def test_forgetting_through_the_estimator_behind_the_pipeline_s_back_is_caught():
    X, y = frame()
    model = pipe().fit(X, y)
    model.named_steps["qssclassifier"].forget([3])
    with pytest.raises(ValueError, match="changed outside the pipeline"):
        model.forget([4])


def test_the_pipeline_clones_and_searches_like_a_scikit_learn_estimator():
    from sklearn.model_selection import GridSearchCV

    X, y = frame()
    model = pipe()
    assert clone(model).get_params()["qssclassifier__rho"] == SMALL["rho"]
    search = GridSearchCV(model, {"qssclassifier__n_instances": [1, 2]}, cv=2)
    search.fit(X, y)
    assert 0.0 <= search.best_score_ <= 1.0
    assert 0.0 <= model.fit(X, y).score(X, y) <= 1.0


def test_the_scikit_learn_pipeline_trap_and_the_way_out():
    """A scikit-learn Pipeline forgets exactly in its estimator only: its scaler keeps the
    forgotten rows' mean (docs/pipelines.md). from_sklearn gives the exact pipeline."""
    X, y = make_classification(300, 5, random_state=2)
    ids = np.arange(300)
    trap = sk_make_pipeline(SkStandardScaler(), QSSClassifier(**SMALL)).fit(
        X, y, qssclassifier__ids=ids
    )
    trap.named_steps["qssclassifier"].forget([0, 1, 2])
    refit = sk_make_pipeline(SkStandardScaler(), QSSClassifier(**SMALL)).fit(
        X[3:], y[3:], qssclassifier__ids=ids[3:]
    )
    assert not np.array_equal(trap[0].mean_, refit[0].mean_)
    assert trap[-1].state_digest() != refit[-1].state_digest()

    def make():
        return ForgettingPipeline.from_sklearn(trap, min_schema_rows=30)

    model = make().fit(X, y, ids)
    assert [name for name, _ in model.steps] == ["standardscaler", "qssclassifier"]
    model.forget([0, 1, 2])
    assert_same(model, refit_without(make, X, y, ids, [0, 1, 2]), X)


def test_an_all_nan_column_is_dropped_and_a_forget_stays_exact():
    X, y = frame()
    X = X.assign(empty=np.nan)
    ids = np.arange(len(y))

    def make():
        return pipe(
            steps=[
                SkColumnTransformer(
                    [
                        ("num", SkSimpleImputer(), ["x1", "x2", "empty"]),
                        ("cat", SkOneHotEncoder(handle_unknown="ignore"), ["city"]),
                    ]
                )
            ]
        )

    model = make().fit(X, y, ids)
    assert model.preprocess(X.iloc[:1]).shape[1] == 2 + 6  # x1, x2; five cities and missing
    model.forget([1, 2])
    assert_same(model, refit_without(make, X, y, ids, [1, 2]), X)
