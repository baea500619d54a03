"""The estimators the paper benchmark compares, built the same way for every stage, and how
they are scored.

Why shared builders: the accuracy, deletion, exactness and sweep stages must see the same
models (same ρ, same encoder, same seed rule), or their numbers could not be put side by side.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from forgetting import QSSClassifier, QSSRegressor
from forgetting_lab.baselines import ExactRidge, ExactRidgeClassifier, SISAClassifier, SISARegressor
from forgetting_lab.bench.anchors import anchor_builders, fit_anchor

from .data import N_SHARDS, Data


def make_qss(data: Data, mode: str, seed: int, rho: float | None = None, **params: Any):
    """A QSS estimator for ``data``: the learned encoder (if any) is passed as ``encoder=`` so
    every instance trains its own copy on D° only and exact deletion keeps holding."""
    encoder = None
    if data.learned_encoder:
        from forgetting.encoders import LightGBMLeafContrib

        encoder = LightGBMLeafContrib(n_classes=data.n_classes if data.classification else None)
    cls = QSSClassifier if data.classification else QSSRegressor
    return cls(
        mode=mode,
        rho=data.rho if rho is None else rho,
        random_state=seed,
        encoder=encoder,
        **params,
    )


def make_sisa(data: Data, seed: int):
    """SISA with 5 shards of g's model family (logistic regression / ridge)."""
    cls = SISAClassifier if data.classification else SISARegressor
    return cls(n_shards=N_SHARDS, random_state=seed)


def make_ridge(data: Data):
    """Exact ridge (rank-one downdates of XᵀX, XᵀY): the paper's ACU baseline."""
    return ExactRidgeClassifier() if data.classification else ExactRidge()


def g_only_outputs(model: QSSClassifier | QSSRegressor, X: np.ndarray) -> np.ndarray:
    """The outputs of the same model with α = 0, i.e. ``QSS…(alpha=0.0)`` on the same D°.

    Why not a second fit: with α = 0 the prediction is g(φ(f(x))) averaged over the p
    instances, and the schemas (D°, f, φ, g) do not depend on α, so they are taken from the
    fitted QSS-E model instead of training them again. The same serving route
    (:meth:`Schema.serve`) and order of sums as :meth:`QSSEngine.predict_outputs`: the bits
    equal those of a ``alpha=0.0`` fit (the tests check ``array_equal``).
    """
    X = model._check_X(X)
    total = None
    instances = model.engine_.instances
    for inst in instances:
        _, out, _ = inst.schema.serve(X, head=False)
        schema = inst.schema
        out = out + 0.0 * out  # α·correction with α = 0 adds a signed zero, exactly as predict
        if schema.base_model.task == "regression":
            out = out * schema.base_model.y_scale + schema.base_model.y_mean
        total = out if total is None else total + out
    return total / len(instances)


def score(
    data: Data,
    outputs: np.ndarray,
    classes: np.ndarray | None = None,
    proba: np.ndarray | None = None,
) -> dict[str, float]:
    """Test metrics: accuracy (and the Brier score when probabilities are given), or Pearson r
    and RMSE. ``outputs`` are predicted labels, or per-class scores mapped through
    ``classes``.

    Why Brier too: QSS chooses α by the out-of-fold *squared error of the probabilities*, so
    when QSS loses accuracy to g-only the Brier score tells whether α did what it optimizes.
    """
    if data.classification:
        pred = outputs if outputs.ndim == 1 else classes[np.argmax(outputs, axis=1)]
        out = {"accuracy": float(np.mean(pred == data.y_test))}
        if proba is not None:
            onehot = np.asarray(classes)[None, :] == data.y_test[:, None]
            out["brier"] = float(np.mean(np.sum((proba - onehot) ** 2, axis=1)))
        return out
    pred = np.asarray(outputs, dtype=np.float64).reshape(-1)
    r = float(np.corrcoef(pred, data.y_test)[0, 1])
    rmse = float(np.sqrt(np.mean((pred - data.y_test) ** 2)))
    return {"pearson_r": r, "rmse": rmse}


def model_scores(data: Data, model: Any) -> dict[str, float]:
    """Test metrics of a fitted estimator (predicted labels or values; Brier where the model
    has ``predict_proba``)."""
    proba = None
    if data.classification and hasattr(model, "predict_proba"):
        proba = model.predict_proba(data.X_test)
    return score(data, model.predict(data.X_test), getattr(model, "classes_", None), proba)


def score_raw(data: Data, model: Any) -> dict[str, float]:
    """Test metrics of a model fitted on ``data.raw_train`` (the raw DataFrame)."""
    proba = model.predict_proba(data.raw_test) if data.classification else None
    return score(data, model.predict(data.raw_test), getattr(model, "classes_", None), proba)


def anchor_scores(
    data: Data, seed: int, cache: dict
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Test metrics and fit seconds of every anchor that applies to ``data`` at ``seed`` (see
    :mod:`forgetting_lab.bench.anchors`), fitted once per (dataset, seed): the LightGBM
    variant of Adult shares them with the one-hot row. The fitted models are dropped."""
    scores: dict[str, dict[str, float]] = {}
    fit_s: dict[str, float] = {}
    builders = anchor_builders(data.dataset, data.classification, data.raw_train is not None)
    for label, (build, raw) in builders.items():
        key = (data.dataset, seed, label)
        if key not in cache:
            model = build(seed)
            if raw:
                seconds = fit_anchor(model, data.raw_train, data.y_train)
                cache[key] = (score_raw(data, model), seconds)
            else:
                seconds = fit_anchor(model, data.X_train, data.y_train)
                cache[key] = (model_scores(data, model), seconds)
            del model
        scores[label], fit_s[label] = cache[key]
    return scores, fit_s


def timed_fit(model: Any, data: Data, ids: np.ndarray | None = None) -> float:
    started = time.perf_counter()
    model.fit(data.X_train, data.y_train, ids if ids is not None else np.arange(data.n_train))
    return time.perf_counter() - started


def build_seconds(model: Any) -> float:
    """Mean per-instance build time of the fit: schema training + encoding + accumulation of
    every row. Since the fit computes what instances sharing an input head have in common
    once (engine.builds.build_instances), each instance's figure is its own work plus an
    equal share of that common pass — about a rebuild's work when the rebuild adopts a
    sibling's Gram sums, less than a rebuild's without one."""
    return float(np.mean(model.engine_.rebuild_seconds[: model.n_instances]))


def codebook_shape(model: Any) -> tuple[int, int, int]:
    """(b, ℓ, |D°|) of instance 0. b and ℓ are chosen from |D°|, so a D° deletion can change
    them: the tables report the shapes at fit time. For a flat partition (random trees or
    hyperplanes, no codebook) b is the cells per table and ℓ the number of tables."""
    schema = model.engine_.instances[0].schema
    cb = getattr(schema, "codebook", None)
    if cb is None:
        part = schema.partition
        return int(part.n_cells), int(part.n_tables), int(schema.n_schema_rows)
    return int(cb.n_centroids), int(cb.n_levels), int(schema.n_schema_rows)
