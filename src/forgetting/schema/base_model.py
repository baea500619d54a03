"""The base model g, trained on D° only.

g carries most of the accuracy when D° is representative; the quantized content corrects its
residuals with the statistics of every row. For classification g outputs probabilities over
the model's global classes (a class absent from D° gets probability 0 from g); for regression
it predicts the target standardized with D°'s mean and scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neural_network import MLPClassifier, MLPRegressor

from . import direct

MLP_THRESHOLD = 5000
"""At n° ≥ this many schema rows the "auto" base model is a one-hidden-layer MLP (design.md §1)."""


def make_base_model(spec: Any, task: str, n_schema: int, seed: int):
    """An unfitted estimator for ``spec`` ("auto" or any scikit-learn estimator)."""
    if not (isinstance(spec, str) and spec == "auto"):
        est = clone(spec)
        if "random_state" in est.get_params():
            est.set_params(random_state=seed)
        return est
    if task == "classification":
        if n_schema >= MLP_THRESHOLD:
            return MLPClassifier(hidden_layer_sizes=(256,), max_iter=200, random_state=seed)
        return LogisticRegression(C=1.0, max_iter=1000)
    if n_schema >= MLP_THRESHOLD:
        return MLPRegressor(hidden_layer_sizes=(256,), max_iter=200, random_state=seed)
    return Ridge(alpha=1.0)


@dataclass(frozen=True)
class BaseModel:
    """A fitted g with the bookkeeping to map its outputs onto the model's label space.

    ``estimator`` is None when g is a constant: D° holds a single class, or no usable rows.
    ``columns`` maps the estimator's classes to columns of the global class vector.
    """

    task: str
    n_outputs: int
    estimator: Any
    columns: np.ndarray
    constant: np.ndarray
    y_mean: float = 0.0
    y_scale: float = 1.0

    def predict(self, Z: np.ndarray) -> np.ndarray:
        """g(φ(x)) as float64 of shape (n, k): probabilities, or the standardized target."""
        n = Z.shape[0]
        if self.estimator is None:
            return np.broadcast_to(self.constant, (n, self.n_outputs)).copy()
        if self.task == "classification":
            out = np.zeros((n, self.n_outputs), dtype=np.float64)
            out[:, self.columns] = direct.predict_proba(self.estimator, Z)
            return out
        return np.asarray(direct.predict(self.estimator, Z), dtype=np.float64).reshape(n, 1)


def fit_base_model(
    spec: Any, task: str, Z: np.ndarray, y: np.ndarray, n_outputs: int, seed: int
) -> BaseModel:
    """Fit g on the schema rows ``Z`` (already preprocessed) with targets ``y``.

    ``y`` holds class indices 0..k-1 for classification and raw targets for regression.
    """
    if task == "classification":
        present = np.unique(y)
        prior = np.bincount(y, minlength=n_outputs).astype(np.float64) / max(len(y), 1)
        if present.size < 2:
            return BaseModel(task, n_outputs, None, present, prior)
        est = make_base_model(spec, task, len(y), seed)
        est.fit(Z, y)
        if not hasattr(est, "predict_proba"):
            raise TypeError(
                f"base_model {type(est).__name__} has no predict_proba; QSSClassifier needs "
                "probabilities to form residuals"
            )
        return BaseModel(task, n_outputs, est, np.asarray(est.classes_, dtype=np.int64), prior)
    y = np.asarray(y, dtype=np.float64)
    mean = float(np.mean(y))
    scale = float(np.std(y))
    scale = scale if scale > 0.0 else 1.0
    target = (y - mean) / scale
    est = make_base_model(spec, task, len(y), seed)
    est.fit(Z, target)
    return BaseModel(task, 1, est, np.zeros(0, np.int64), np.zeros(1), mean, scale)
