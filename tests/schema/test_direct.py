"""φ and g applied without scikit-learn's per-call validation give scikit-learn's own bits."""

import numpy as np
import pytest
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier, MLPRegressor

from forgetting.schema import direct


def _data(k: int, n: int = 300, d: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = (X[:, :k] @ np.arange(1, k + 1) > 0).astype(int) if k == 2 else rng.integers(0, k, n)
    return X, y


@pytest.mark.parametrize("solver", ["eigen", "svd"])
def test_lda_transform_same_bits(solver):
    X, y = _data(5)
    kwargs = {"shrinkage": "auto"} if solver == "eigen" else {}
    lda = LinearDiscriminantAnalysis(solver=solver, n_components=3, **kwargs).fit(X, y)
    Z = _data(5, n=64, seed=1)[0]
    assert direct._direct(lda, "transform", direct._lda_direct) is not None
    assert np.array_equal(direct.lda_transform(lda, Z), lda.transform(Z))


@pytest.mark.parametrize(
    "est",
    [
        LogisticRegression(max_iter=500),
        MLPClassifier(hidden_layer_sizes=(8,), max_iter=50, random_state=0),
    ],
)
@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_predict_proba_same_bits(est, k):
    X, y = _data(k)
    est.fit(X, y)
    Z = _data(k, n=64, seed=2)[0]
    assert direct._direct(est, "predict_proba", direct._proba_direct) is not None
    assert np.array_equal(direct.predict_proba(est, Z), est.predict_proba(Z))


@pytest.mark.parametrize(
    "est",
    [Ridge(alpha=1.0), LinearRegression(), MLPRegressor(hidden_layer_sizes=(8,), max_iter=50)],
)
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_predict_same_bits(est):
    X, _ = _data(2)
    est.fit(X, X @ np.arange(X.shape[1]))
    Z = _data(2, n=64, seed=3)[0]
    assert direct._direct(est, "predict", direct._predict_direct) is not None
    assert np.array_equal(direct.predict(est, Z), est.predict(Z))


def test_other_estimators_use_scikit_learn():
    X, y = _data(3)
    svc = KNeighborsClassifier().fit(X, y)
    assert direct._direct(svc, "predict_proba", direct._proba_direct) is None
    assert np.array_equal(direct.predict_proba(svc, X[:5]), svc.predict_proba(X[:5]))


def test_a_formula_that_disagrees_falls_back(monkeypatch):
    """The probe check is what makes skipping scikit-learn safe: a direct formula whose bits
    differ from scikit-learn's (as a future release could make it) is never used."""
    X, y = _data(3)
    est = LogisticRegression(max_iter=500).fit(X, y)
    wrong = lambda e: lambda Z: np.nextafter(e.predict_proba(Z), 1.0)  # noqa: E731
    monkeypatch.setattr(direct, "_proba_direct", wrong)
    assert direct._direct(est, "predict_proba", direct._proba_direct) is None
    assert np.array_equal(direct.predict_proba(est, X[:7]), est.predict_proba(X[:7]))


def test_a_refitted_estimator_is_decided_anew():
    X, y = _data(2)
    est = LogisticRegression(max_iter=500).fit(X, y)
    Z = _data(2, n=16, seed=4)[0]
    assert np.array_equal(direct.predict_proba(est, Z), est.predict_proba(Z))
    X4, y4 = _data(4)
    est.fit(X4, y4)  # binary → 4 classes: the cached binary formula must not be reused
    assert np.array_equal(direct.predict_proba(est, Z), est.predict_proba(Z))


def test_the_library_s_own_fitted_models_take_the_direct_path():
    """A fitted QSS model's φ (LDA) and g are applied directly (else every deletion pays
    scikit-learn's validation again): the probe check accepts them at both block heights."""
    from helpers import classification_data

    from forgetting import QSSClassifier

    X, y = classification_data()
    model = QSSClassifier(random_state=0, lda=True).fit(X, y, list(range(len(y))))
    for inst in model.engine_.instances:
        lda = inst.schema.preprocessor.lda
        g = inst.schema.base_model.estimator
        assert direct._direct(lda, "transform", direct._lda_direct) is not None
        assert direct._direct(g, "predict_proba", direct._proba_direct) is not None


def test_a_model_without_the_narrow_projection_keeps_its_arithmetic(tmp_path, monkeypatch):
    """Models saved before φ's narrow LDA product have no ``projection``: they must keep
    scikit-learn's full product — the arithmetic their stored contributions were computed
    with — through save, load, audit and forget ≡ refit."""
    import dataclasses

    from helpers import classification_data

    from forgetting import QSSClassifier
    from forgetting.schema import preprocess

    real = preprocess.fit_preprocessor

    def without_projection(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), projection=None)

    X, y = classification_data()
    ids = list(range(len(y)))
    params = dict(random_state=0, lda=True, secret_key="old-model")
    with monkeypatch.context() as m:  # "the old code": no projection
        m.setattr(preprocess, "fit_preprocessor", without_projection)
        m.setattr("forgetting.schema.fit_preprocessor", without_projection)
        old = QSSClassifier(**params).fit(X, y, ids)
        keep = ids[:5] + ids[6:]
        refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    assert all(i.schema.preprocessor.projection is None for i in old.engine_.instances)
    old.save(tmp_path / "old.qss")
    loaded = QSSClassifier.load(tmp_path / "old.qss", secret_key="old-model")
    assert loaded.audit_content()
    assert np.array_equal(loaded.predict_proba(X), old.predict_proba(X))
    loaded.forget([5])
    assert loaded.state_digest() == refit.state_digest()
    assert np.array_equal(loaded.predict_proba(X), refit.predict_proba(X))
    new = QSSClassifier(**params).fit(X, y, ids)  # today's fits carry the projection
    assert all(i.schema.preprocessor.projection is not None for i in new.engine_.instances)
    assert new.state_digest() != old.state_digest()
