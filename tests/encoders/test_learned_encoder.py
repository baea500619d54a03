"""A learned encoder is part of the schema: exactness still holds with it in the pipeline."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FAST, assert_same_model, classification_data, schema_ids

from forgetting import QSSClassifier


class PCAEncoder:
    """A minimal learned encoder (PCA fitted on the rows it is given)."""

    learned = True

    def __init__(self, n_components: int = 4):
        self.n_components = n_components

    def fit(self, X, y=None, seed=0):
        from sklearn.decomposition import PCA

        self.pca_ = PCA(self.n_components, random_state=seed).fit(X)
        return self

    def transform(self, X):
        return np.ascontiguousarray(self.pca_.transform(X), dtype=np.float32)


def _lightgbm():
    pytest.importorskip("lightgbm", reason='pip install "forgetting[tabular]"')
    from forgetting.encoders import LightGBMLeafContrib

    return LightGBMLeafContrib(n_estimators=8, num_leaves=7, min_child_samples=5)


@pytest.mark.parametrize("make", [lambda: PCAEncoder(), _lightgbm], ids=["pca", "lightgbm"])
@pytest.mark.parametrize("mode", ["exact", "label"])
def test_forget_with_a_learned_encoder_equals_refit(make, mode):
    X, y = classification_data(n=300, d=8)
    params = {**FAST, "encoder": make(), "mode": mode}
    model = QSSClassifier(**params).fit(X, y)
    assert model.engine_.instances[0].schema.encoder is not None
    victims = sorted(set(schema_ids(model, 0)[:2] + list(range(0, 300, 13))))
    if mode == "label":
        model.forget(victims, erase_inputs=True)
    else:
        model.forget(victims)
    keep = [i for i in range(300) if i not in set(victims)]
    assert_same_model(model, QSSClassifier(**params).fit(X[keep], y[keep], keep), X)


def test_frozen_encoders_are_refused_as_schema_encoders():
    X, y = classification_data()

    class Frozen:
        learned = False

    with pytest.raises(ValueError, match="learned encoder"):
        QSSClassifier(**{**FAST, "encoder": Frozen()}).fit(X, y)
