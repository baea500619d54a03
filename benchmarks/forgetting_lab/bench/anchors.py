"""Accuracy anchors: the models a user would deploy without unlearning, fitted in the same run.

Why: an exact-unlearning model is compared with what its user would otherwise run — a
full-data model of a strong family, retrained from scratch when deletions pile up (SPEC §5,
decision 10) — not only with SISA over shards of the paper's base-model family. Every anchor
here is fitted on the same training split and scored on the same test split as the model it
anchors; nothing is tuned, and nothing sees the test split:

* ``HGB``: scikit-learn's ``HistGradientBoostingClassifier`` / ``Regressor`` with its defaults
  on the benchmark's numeric features, ``random_state`` = the seed (the default early stopping,
  on above 10 000 rows, draws its validation split from the training rows with that seed);
* ``HGB raw``: the same on the set's raw DataFrame with ``categorical_features="from_dtype"``
  (categories and missing values natively), where the loader gives a raw frame with a
  categorical column or a missing value;
* ``LR``: ``LogisticRegression`` with scikit-learn's defaults except ``max_iter`` =
  :data:`LR_MAX_ITER` (the default 100 lbfgs iterations stop short of convergence on the
  wider one-hot tables); classification only — for regression the linear anchor is the
  benchmark's full-data exact ridge;
* ``MLP``: on sets whose features are frozen embeddings (:data:`EMBEDDING_SETS`), an
  ``MLPClassifier`` with fixed settings (:data:`MLP_PARAMS`: one hidden layer of 256, early
  stopping on 10 % of the *training* rows), ``random_state`` = the seed;
* ``SISA-HGB``: SISA with 5 shards of default ``HistGradientBoosting`` (the strong family's
  shards, beside the paper's logistic-regression shards).

"Best full-data model" is the best test score among HGB, HGB raw, LR, MLP and exact ridge (the
full-data models; SISA is not one): that is the anchor a gap is measured to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from forgetting_lab.baselines import SISAClassifier, SISARegressor

ANCHOR_MODELS = ("SISA-HGB", "LR", "MLP", "HGB", "HGB raw")
"""Anchor rows of the accuracy table (absent where they do not apply)."""
FULL_DATA_MODELS = ("exact ridge", "LR", "MLP", "HGB", "HGB raw")
"""The full-data models whose best is the anchor ("exact ridge" is the benchmark's own)."""
EMBEDDING_SETS = ("sentiment", "mnist", "fashion_mnist")
"""Sets whose features are a frozen encoder's (MiniLM, HOG): they get the MLP anchor."""
LR_MAX_ITER = 1000
MLP_PARAMS: dict[str, Any] = {
    "hidden_layer_sizes": (256,),
    "early_stopping": True,
    "validation_fraction": 0.1,
    "max_iter": 200,
}
N_SHARDS = 5


def _hgb(classification: bool, seed: int, **params: Any):
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    cls = HistGradientBoostingClassifier if classification else HistGradientBoostingRegressor
    return cls(random_state=seed, **params)


def has_native_columns(raw: Any) -> bool:
    """Whether a raw frame has something HGB handles natively: a category or a missing value."""
    if raw is None:
        return False
    import pandas as pd

    categorical = any(isinstance(t, pd.CategoricalDtype) for t in raw.dtypes)
    return categorical or bool(raw.isna().to_numpy().any())


def anchor_builders(
    dataset: str, classification: bool, raw: bool
) -> dict[str, tuple[Callable[[int], Any], bool]]:
    """``{label: (seed -> unfitted estimator, fits the raw frame?)}`` of the anchors that apply
    to a set (see the module docstring for each)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    sisa = SISAClassifier if classification else SISARegressor
    out: dict[str, tuple[Callable[[int], Any], bool]] = {
        "SISA-HGB": (
            lambda s: sisa(n_shards=N_SHARDS, estimator=_hgb(classification, s), random_state=s),
            False,
        ),
        "HGB": (lambda s: _hgb(classification, s), False),
    }
    if classification:
        out["LR"] = (lambda s: LogisticRegression(max_iter=LR_MAX_ITER), False)
        if dataset in EMBEDDING_SETS:
            out["MLP"] = (lambda s: MLPClassifier(random_state=s, **MLP_PARAMS), False)
    if raw:
        out["HGB raw"] = (
            lambda s: _hgb(classification, s, categorical_features="from_dtype"),
            True,
        )
    return out


def fit_anchor(model: Any, X: Any, y: np.ndarray) -> float:
    """Seconds to fit ``model`` on ``(X, y)`` (SISA gets row ids ``0..n-1``)."""
    started = time.perf_counter()
    if isinstance(model, SISAClassifier | SISARegressor):
        model.fit(X, y, np.arange(len(y)))
    else:
        model.fit(X, y)
    return time.perf_counter() - started


def best_full_data(scores: dict[str, float], classification: bool) -> tuple[str, float]:
    """(label, score) of the best full-data model among ``scores`` (highest accuracy, lowest
    RMSE); ``("", nan)`` when none was measured."""
    present = {m: v for m, v in scores.items() if m in FULL_DATA_MODELS and np.isfinite(v)}
    if not present:
        return "", float("nan")
    pick = max if classification else min
    label = pick(present, key=present.__getitem__)
    return label, present[label]


def gap(score: float, best: float, classification: bool) -> float:
    """Gap to the best full-data model: percentage points of accuracy (negative = below), or
    the RMSE's excess over the best RMSE in percent (positive = worse)."""
    if classification:
        return 100.0 * (score - best)
    return 100.0 * (score - best) / best
