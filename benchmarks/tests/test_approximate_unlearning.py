"""The approximate-unlearning baselines and the shared unlearning audit.

Tiny ViTs on scikit-learn's 8×8 digits: every method returns a new model and leaves the
original untouched, runs are bit-reproducible, and the audit's numbers mean what they say —
including a measured Avg Gap of exactly 0 for QSS against its refit.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FAST

from forgetting import QSSClassifier
from forgetting.audit.unlearning import (
    UnlearningScores,
    avg_gap,
    mia_auc,
    random_forget_split,
    score_model,
)
from forgetting.munkey import ViTConfig
from forgetting_lab.baselines.approximate import METHODS, TrainConfig, ViTClassifier, unlearn
from forgetting_lab.datasets import load_dataset

VIT = ViTConfig(width=16, depth=1, heads=2, patch=4)
TRAIN = TrainConfig(epochs=2, batch_size=32, seed=1)


@pytest.fixture(scope="module")
def data():
    ds = load_dataset("digits")
    X, y = ds.X_train[:200].reshape(-1, 8, 8), ds.y_train[:200]
    forget, retain = random_forget_split(len(y), 0.1, seed=0)
    return X, y, forget, retain, ds.X_test[:80].reshape(-1, 8, 8), ds.y_test[:80]


@pytest.fixture(scope="module")
def model(data):
    X, y, *_ = data
    return ViTClassifier(VIT, TRAIN).fit(X, y)


def _bytes(m) -> bytes:
    return b"".join(v.numpy().tobytes() for v in m.net_.state_dict().values())


@pytest.mark.parametrize("method", sorted(METHODS))
def test_methods_return_new_models_and_are_deterministic(data, model, method):
    X, y, f, r, Xt, _ = data
    before = _bytes(model)
    params = {} if method in ("retrain", "ssd") else {"epochs": 1}
    a = unlearn(method, model, (X[f], y[f]), (X[r], y[r]), **params)
    b = unlearn(method, model, (X[f], y[f]), (X[r], y[r]), **params)
    assert _bytes(model) == before, "the original model was modified"
    assert a.net_ is not model.net_
    assert _bytes(a) == _bytes(b)
    assert np.array_equal(a.predict_proba(Xt), b.predict_proba(Xt))
    if method != "ssd":  # SSD may legitimately select no parameter on a tiny model
        assert _bytes(a) != before


def test_retrain_equals_a_fresh_fit_on_the_retain_set(data, model):
    X, y, f, r, Xt, _ = data
    oracle = unlearn("retrain", model, (X[f], y[f]), (X[r], y[r]))
    fresh = ViTClassifier(VIT, TRAIN).fit(X[r], y[r])
    assert _bytes(oracle) == _bytes(fresh)


def test_unknown_method_and_unfitted_model_are_refused(data):
    X, y, f, r, *_ = data
    with pytest.raises(ValueError, match="unknown method"):
        unlearn("bogus", ViTClassifier(VIT, TRAIN), (X[f], y[f]), (X[r], y[r]))
    with pytest.raises(ValueError, match="fitted"):
        unlearn("ssd", ViTClassifier(VIT, TRAIN), (X[f], y[f]), (X[r], y[r]))


def test_audit_numbers():
    assert mia_auc(np.array([0.9, 0.8]), np.array([0.1, 0.2])) == 100.0
    assert mia_auc(np.array([0.5, 0.5]), np.array([0.5, 0.5])) == 50.0
    a = UnlearningScores(TA=90.0, RA=95.0, FA=80.0, MIA=55.0)
    b = UnlearningScores(TA=88.0, RA=95.0, FA=84.0, MIA=53.0)
    assert avg_gap(a, a) == 0.0 and avg_gap(a, b) == pytest.approx(2.0)
    forget, retain = random_forget_split(100, 0.1, seed=3)
    assert len(forget) == 10 and len(retain) == 90
    assert not set(forget) & set(retain)
    assert np.array_equal(forget, random_forget_split(100, 0.1, seed=3)[0])
    with pytest.raises(ValueError):
        random_forget_split(10, 1.0, 0)


def test_score_model_counts_accuracy_and_missing_classes():
    classes = np.array([0, 1])
    proba = lambda X: np.tile([0.8, 0.2], (len(X), 1))  # noqa: E731 - always class 0
    y = np.array([0, 0, 1, 2])  # label 2 unknown to the model: probability 0
    s = score_model(proba, classes, (np.zeros(4), y), (np.zeros(4), y), (np.zeros(4), y))
    assert s.TA == s.RA == s.FA == 50.0 and s.MIA == 50.0


@pytest.mark.parametrize("mode", ["exact", "label"])
def test_qss_avg_gap_is_zero_measured(data, mode):
    """QSS's oracle is the refit without the rows; forget must match it on every metric."""
    X, y, f, r, Xt, yt = data
    feats, feats_t = X.reshape(len(X), -1), Xt.reshape(len(Xt), -1)
    ids = list(range(len(y)))
    model = QSSClassifier(**{**FAST, "mode": mode}).fit(feats, y, ids)
    kwargs = {"erase_inputs": True} if mode == "label" else {}
    model.forget([ids[i] for i in f], **kwargs)
    oracle = QSSClassifier(**{**FAST, "mode": mode}).fit(feats[r], y[r], [ids[i] for i in r])
    splits = ((feats[r], y[r]), (feats[f], y[f]), (feats_t, yt))
    s = score_model(model.predict_proba, model.classes_, *splits)
    o = score_model(oracle.predict_proba, oracle.classes_, *splits)
    assert avg_gap(s, o) == 0.0


def test_benchmark_runs_end_to_end(tmp_path):
    """`python -m forgetting_lab.bench.munkey` on a tiny setting: tables written, QSS gap 0.00."""
    import csv

    from forgetting_lab.bench.munkey import main

    argv = ["--datasets", "digits", "--seeds", "0", "--fractions", "0.1", "--n-train", "120",
            "--n-test", "60", "--n-retain-eval", "40", "--epochs", "1", "--width", "16",
            "--depth", "1", "--k", "2", "--qss-rho", "0.3", "--memory-sizes", "100",
            "--out-dir", str(tmp_path), "--no-plot"]  # fmt: skip
    assert main(argv) == 0
    text = (tmp_path / "munkey.md").read_text()
    assert "python -m forgetting_lab.bench.munkey --datasets digits" in text
    with open(tmp_path / "munkey-per_seed.csv") as f:
        rows = {r["method"]: r for r in csv.DictReader(f)}
    assert float(rows["QSS-E"]["avg_gap"]) == 0.0 and float(rows["QSS-L"]["avg_gap"]) == 0.0
    assert float(rows["Retrain (oracle)"]["avg_gap"]) == 0.0
    assert float(rows["MUNKEY (ensemble)"]["forget_seconds"]) < 0.5
    assert (tmp_path / "munkey-aggregation_ablation.csv").exists()
