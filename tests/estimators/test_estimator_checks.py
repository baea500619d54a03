"""scikit-learn's own estimator checks, and the object protocols users expect of an estimator.

Every check runs at default parameters; none is marked as an expected failure.
``check_array_api_input`` runs only when the environment sets ``SCIPY_ARRAY_API=1`` (a
process-wide scipy switch the rest of the suite must not see): it runs in a fresh interpreter
(helpers.sklearn_checks, helpers.array_api_checks_run). QSS declares no array-API support:
``validate_data`` converts such input to numpy, which the stored float32 rows need anyway.
"""

from __future__ import annotations

import pickle

import joblib
import numpy as np
import pytest
from helpers import array_api_checks_run, sklearn_checks
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from forgetting import QSSClassifier, QSSRegressor


@sklearn_checks([QSSClassifier(), QSSRegressor()])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_sklearn_array_api_checks_in_a_fresh_interpreter():
    """The one check left out above (helpers.ARRAY_API_CHECK), where it runs: every one
    scikit-learn yields passes with SCIPY_ARRAY_API=1."""
    expected, passed = array_api_checks_run(
        "from forgetting import QSSClassifier, QSSRegressor", "[QSSClassifier(), QSSRegressor()]"
    )
    assert passed == expected


def _blobs(n=400, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(3, 6)) * 3
    y = rng.integers(0, 3, size=n)
    X = centers[y] + rng.normal(size=(n, 6))
    return X, y


def _same(a, b, X):
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    assert a.state_digest() == b.state_digest()


def test_fitted_model_pickles_and_forgets_after_the_round_trip():
    X, y = _blobs()
    model = QSSClassifier(rho=0.05).fit(X, y)
    twin = pickle.loads(pickle.dumps(model))
    _same(model, twin, X)
    assert twin.forget([5, 6]).n_rows == 2
    model.forget([5, 6])
    model.wait_for_rebuilds()
    twin.wait_for_rebuilds()
    _same(model, twin, X)


def test_pickle_waits_for_a_pending_background_rebuild():
    X, y = _blobs()
    model = QSSClassifier(rho=0.05).fit(X, y)
    members = np.flatnonzero(model.engine_.rows.members(0))
    receipt = model.forget([model.ids_[members[0]]])
    assert receipt.rebuild_started
    twin = pickle.loads(pickle.dumps(model))
    assert twin.engine_.pending_rebuilds() == []
    model.wait_for_rebuilds()
    _same(model, twin, X)


def test_joblib_round_trip(tmp_path):
    X, y = _blobs()
    model = QSSRegressor(rho=0.05).fit(X, y.astype(float) + X[:, 0])
    joblib.dump(model, tmp_path / "m.joblib")
    twin = joblib.load(tmp_path / "m.joblib")
    assert np.array_equal(model.predict(X), twin.predict(X))
    assert model.state_digest() == twin.state_digest()


def test_pipeline_grid_search_and_cross_validation():
    X, y = _blobs(300)
    pipe = make_pipeline(StandardScaler(), QSSClassifier(rho=0.1, n_instances=1))
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.8)
    search = GridSearchCV(QSSClassifier(n_instances=1), {"rho": [0.05, 0.2]}, cv=2, n_jobs=2).fit(
        X, y
    )
    assert search.best_params_["rho"] in (0.05, 0.2)
    assert search.score(X, y) > 0.8


def test_small_data_fits_at_default_parameters_and_reports_effective_rho():
    X, y = _blobs(120)
    model = QSSClassifier().fit(X, y)
    # 120 rows · ρ = 0.5 % is < 1 row: D° keeps its minimum of max(50, 5·3) rows instead.
    assert model.effective_rho_ == pytest.approx(50 / 120)
    receipt = model.forget([0])
    assert receipt.effective_rho == pytest.approx(model.effective_rho_)


@pytest.mark.parametrize("labels", [np.array(["cat", "dog", "emu"]), np.array([10, 20, 30])])
def test_string_and_integer_labels_through_forget_insert_and_save(tmp_path, labels):
    X, y_index = _blobs(300)
    y = labels[y_index]
    ids = [f"r{i}" for i in range(len(y))]
    model = QSSClassifier(rho=0.1, rebuild="sync").fit(X, y, ids)
    # Forget every row of the first class: the exact answer is a fit without that class.
    gone = [ids[i] for i in np.flatnonzero(y == labels[0])]
    model.forget(gone)
    keep = np.flatnonzero(y != labels[0])
    refit = QSSClassifier(rho=0.1, rebuild="sync").fit(X[keep], y[keep], [ids[i] for i in keep])
    assert list(model.classes_) == list(labels[1:])
    _same(model, refit, X)
    model.insert(X[:2], y[keep[:2]], ["new0", "new1"])
    path = tmp_path / "model.qss"
    model.save(path)
    loaded = QSSClassifier.load(path)
    _same(model, loaded, X)
    assert list(loaded.predict(X[:5])) == list(model.predict(X[:5]))


def test_label_mode_forgetting_a_string_class_refits():
    X, y_index = _blobs(300)
    y = np.array(["a", "b", "c"])[y_index]
    model = QSSClassifier(mode="label", rho=0.1, rebuild="sync").fit(X, y)
    gone = np.flatnonzero(y == "a").tolist()
    receipt = model.forget(gone)
    assert receipt.scope == "label"
    assert list(model.classes_) == ["b", "c"]


def test_repr_masks_the_key_without_touching_the_estimator():
    model = QSSClassifier(secret_key=b"very secret")
    assert "very secret" not in repr(model)
    assert model.secret_key == b"very secret"


@pytest.mark.parametrize(
    "params",
    [
        {"rho": True},
        {"n_instances": True},
        {"rho": 0.0},
        {"n_centroids": 3},
        {"mode": "dp-ish"},
        {"alpha": float("inf")},
    ],
)
def test_bad_parameters_are_refused(params):
    X, y = _blobs(100)
    with pytest.raises(ValueError):
        QSSClassifier(**params).fit(X, y)


def test_mlp_base_model_digest_is_reproducible(tmp_path):
    """An MLP g keeps a RandomState whose repr names a memory address: the digest must hash
    its state instead, or two equal fits (and a save/load) would get different digests."""
    from sklearn.neural_network import MLPClassifier

    X, y = _blobs(300)
    params = dict(base_model=MLPClassifier(hidden_layer_sizes=(8,), max_iter=300), rho=0.2)
    a = QSSClassifier(**params).fit(X, y)
    b = QSSClassifier(**params).fit(X, y)
    _same(a, b, X)
    _same(a, pickle.loads(pickle.dumps(a)), X)
    a.save(tmp_path / "mlp.qss")
    _same(a, QSSClassifier.load(tmp_path / "mlp.qss"), X)
