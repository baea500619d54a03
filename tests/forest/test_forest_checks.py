"""scikit-learn's estimator checks for ExactForestClassifier, and its object protocols."""

from __future__ import annotations

import pickle

import numpy as np
from helpers import array_api_checks_run, sklearn_checks

from forgetting import ExactForestClassifier


@sklearn_checks([ExactForestClassifier(n_estimators=5)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_sklearn_array_api_checks_in_a_fresh_interpreter():
    """The one check left out above (helpers.ARRAY_API_CHECK), where it runs: every one
    scikit-learn yields passes with SCIPY_ARRAY_API=1."""
    expected, passed = array_api_checks_run(
        "from forgetting import ExactForestClassifier", "[ExactForestClassifier(n_estimators=5)]"
    )
    assert passed == expected


def test_pickle_round_trip_forgets_the_same():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = (X[:, 0] > 0).astype(int)
    model = ExactForestClassifier(n_estimators=5, min_bin_rows=50).fit(X, y)
    twin = pickle.loads(pickle.dumps(model))
    assert np.array_equal(model.predict_proba(X), twin.predict_proba(X))
    assert model.state_digest() == twin.state_digest()
    assert model.forget([3, 4]).state_digest == twin.forget([3, 4]).state_digest
    model.wait_for_rebuilds()  # a D° hit of the default three instances rebuilds one of them
    twin.wait_for_rebuilds()
    assert model.state_digest() == twin.state_digest()
    assert np.array_equal(model.predict_proba(X), twin.predict_proba(X))
