"""Bad input raises a clear error and leaves the model exactly as it was."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FAST, classification_data, regression_data

from forgetting import QSSClassifier, QSSRegressor


@pytest.fixture
def fitted():
    X, y = classification_data()
    model = QSSClassifier(**FAST).fit(X, y, [f"id{i}" for i in range(len(y))])
    return model, X, y


def _unchanged(model, X, digest, proba):
    assert model.state_digest() == digest
    assert np.array_equal(model.predict_proba(X), proba)
    assert model.audit_content()


BAD_CALLS = [
    (
        "nan in X",
        lambda m, X, y: m.insert(np.full((1, X.shape[1]), np.nan), [0], ["new"]),
        ValueError,
    ),
    (
        "inf in X",
        lambda m, X, y: m.insert(np.full((1, X.shape[1]), np.inf), [0], ["new"]),
        ValueError,
    ),
    (
        "wrong width",
        lambda m, X, y: m.insert(np.zeros((1, X.shape[1] + 1)), [0], ["new"]),
        ValueError,
    ),
    ("1-D X", lambda m, X, y: m.insert(np.zeros(X.shape[1]), [0], ["new"]), ValueError),
    ("unknown id", lambda m, X, y: m.forget(["nope"]), KeyError),
    ("one unknown among known", lambda m, X, y: m.forget(["id1", "nope"]), KeyError),
    ("duplicate ids in forget", lambda m, X, y: m.forget(["id1", "id1"]), ValueError),
    ("empty forget", lambda m, X, y: m.forget([]), ValueError),
    ("string as ids", lambda m, X, y: m.forget("id1"), TypeError),
    ("float id", lambda m, X, y: m.forget([1.5]), TypeError),
    ("unseen label", lambda m, X, y: m.insert(X[:1], [7], ["new"]), ValueError),
    ("existing id on insert", lambda m, X, y: m.insert(X[:1], y[:1], ["id3"]), ValueError),
    ("duplicate ids on insert", lambda m, X, y: m.insert(X[:2], y[:2], ["a", "a"]), ValueError),
    ("length mismatch", lambda m, X, y: m.insert(X[:2], y[:1], ["a", "b"]), ValueError),
    ("ids length mismatch", lambda m, X, y: m.insert(X[:2], y[:2], ["a"]), ValueError),
    ("empty insert", lambda m, X, y: m.insert(X[:0], y[:0], []), ValueError),
    ("predict wrong width", lambda m, X, y: m.predict(X[:, :2]), ValueError),
    ("predict nan", lambda m, X, y: m.predict(np.full((1, X.shape[1]), np.nan)), ValueError),
    ("predict empty", lambda m, X, y: m.predict(X[:0]), ValueError),
]


@pytest.mark.parametrize("name,call,error", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_and_changes_nothing(fitted, name, call, error):
    model, X, y = fitted
    digest, proba = model.state_digest(), model.predict_proba(X)
    with pytest.raises(error):
        call(model, X, y)
    _unchanged(model, X, digest, proba)


def test_forgetting_twice_is_a_key_error(fitted):
    model, X, y = fitted
    model.forget(["id5"])
    digest, proba = model.state_digest(), model.predict_proba(X)
    with pytest.raises(KeyError, match="already forgotten"):
        model.forget(["id5"])
    _unchanged(model, X, digest, proba)


def test_too_few_rows_left_for_a_schema_is_refused():
    """With the minimum D° size switched off (min_schema_rows=0, D° = draws below ρ only),
    forgetting every D° row of an instance leaves it nothing to train on: refused."""
    X, y = classification_data()
    model = QSSClassifier(**FAST, min_schema_rows=0).fit(X, y, [f"id{i}" for i in range(len(y))])
    members = model.engine_.rows.members(0)
    victims = [model.engine_.rows.ids[i] for i in np.flatnonzero(members)]
    digest, proba = model.state_digest(), model.predict_proba(X)
    with pytest.raises(ValueError, match="too few rows"):
        model.forget(victims)
    _unchanged(model, X, digest, proba)


def test_forgetting_a_whole_schema_subset_refills_it_exactly(fitted):
    """By default D° keeps a minimum size: forgetting all of D°_0 moves the next-lowest draws
    in, and the result is still bitwise the refit's."""
    model, X, y = fitted
    members = model.engine_.rows.members(0)
    victims = [model.engine_.rows.ids[i] for i in np.flatnonzero(members)]
    model.forget(victims)
    model.wait_for_rebuilds()
    gone = set(victims)
    keep = [i for i in range(len(y)) if f"id{i}" not in gone]
    refit = QSSClassifier(**FAST).fit(X[keep], y[keep], [f"id{i}" for i in keep])
    assert np.array_equal(model.predict_proba(X), refit.predict_proba(X))
    assert model.state_digest() == refit.state_digest()


def test_forgetting_all_but_one_class_is_refused(fitted):
    model, X, y = fitted
    victims = [f"id{i}" for i in range(len(y)) if y[i] != 0]
    digest, proba = model.state_digest(), model.predict_proba(X)
    with pytest.raises(ValueError, match="fewer than 2 classes"):
        model.forget(victims)
    _unchanged(model, X, digest, proba)


@pytest.mark.parametrize(
    "X,y,ids,error",
    [
        (np.zeros((0, 3)), np.zeros(0), None, ValueError),
        (np.ones((10, 3)), np.arange(9), None, ValueError),
        (np.ones((10, 3)), np.zeros(10), None, ValueError),
        (np.ones((10, 3)), np.arange(10) % 2, list(range(9)) + [0], ValueError),
        (np.full((10, 3), np.nan), np.arange(10) % 2, None, ValueError),
        # numpy's own error for text that is not a number (scikit-learn's convention)
        ([["a", "b"]] * 10, np.arange(10) % 2, None, ValueError),
    ],
)
def test_bad_fit_input(X, y, ids, error):
    with pytest.raises(error):
        QSSClassifier(**FAST).fit(X, y, ids)


def test_refit_failure_keeps_the_previous_model(fitted):
    model, X, y = fitted
    digest = model.state_digest()
    with pytest.raises(ValueError, match="too few rows"):
        model.set_params(rho=0.001, min_schema_rows=0).fit(X, y)
    model.set_params(rho=FAST["rho"])
    assert model.state_digest() == digest


@pytest.mark.parametrize(
    "params",
    [
        dict(mode="bogus"),
        dict(rho=0.0),
        dict(rho=1.5),
        dict(n_instances=0),
        dict(n_centroids=12),
        dict(n_levels=0),
        dict(alpha=-1.0),
        dict(alpha=np.nan),
        dict(rebuild="later"),
        dict(lda="yes"),
    ],
)
def test_bad_parameters(params):
    X, y = classification_data()
    with pytest.raises(ValueError):
        QSSClassifier(**{**FAST, **params}).fit(X, y)


def test_regressor_rejects_nan_targets_in_exact_mode():
    X, y = regression_data()
    y = y.astype(float)
    y[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        QSSRegressor(**FAST).fit(X, y)


def test_regressor_refuses_absurd_residuals():
    X, y = regression_data()
    model = QSSRegressor(**FAST).fit(X, y)
    digest = model.state_digest()
    with pytest.raises(ValueError, match="too large"):
        model.insert(X[:1], [1e12], ["outlier"])
    assert model.state_digest() == digest
    assert model.audit_content()


def test_secret_key_never_appears_in_repr():
    model = QSSClassifier(secret_key=b"hunter2-very-secret")
    assert "hunter2" not in repr(model)
    assert model.secret_key == b"hunter2-very-secret"


def test_direct_input_path_matches_validate_data(fitted):
    """Plain float arrays skip scikit-learn's validate_data when predicting; they must give the
    same array it would, and every other input must still get its checks and messages."""
    model, X, _ = fitted
    for batch in (X[:5].astype(np.float64), X[:5].astype(np.float32), X[:1] * 1e30):
        fast = model._check_X(batch)
        slow = model._validate_X(batch, reset=False)
        assert fast.dtype == slow.dtype == np.float32 and np.array_equal(fast, slow)
        assert fast is not batch
    assert np.array_equal(model.predict_proba(X[:5].tolist()), model.predict_proba(X[:5]))
    for bad in (np.full((1, X.shape[1]), np.nan), X[:1] * 1e300, np.zeros((1, X.shape[1] + 1))):
        with pytest.raises(ValueError):
            model.predict(bad)
    with pytest.raises(ValueError, match="NaN"):
        model.predict(np.full((2, X.shape[1]), np.nan))
