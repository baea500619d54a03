"""LiRA on cases whose answer is known: a memorizer (membership obvious), a model that barely
depends on any one row (AUC ≈ 0.5), and the unlearning audit of a true and a fake forgetter."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression

from forgetting.audit.lira import (
    auc_score,
    balanced_membership,
    bootstrap_auc_interval,
    logit_confidence,
    run_lira,
    tpr_at_fpr,
    unlearning_audit,
)
from forgetting_lab.baselines import RetrainClassifier


class Memorizer(ClassifierMixin, BaseEstimator):
    """Confident on rows it was trained on, uniform elsewhere: membership is plain to see."""

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        self.seen_ = {row.tobytes(): label for row, label in zip(np.asarray(X), y, strict=True)}
        return self

    def predict_proba(self, X):
        k = len(self.classes_)
        out = np.full((len(X), k), 1.0 / k)
        for i, row in enumerate(np.asarray(X)):
            label = self.seen_.get(row.tobytes())
            if label is not None:
                out[i] = 0.02 / (k - 1)
                out[i, np.searchsorted(self.classes_, label)] = 0.98
        return out

    def predict(self, X):
        return self.classes_[self.predict_proba(X).argmax(axis=1)]


class Oblivious(ClassifierMixin, BaseEstimator):
    """Random predictions that depend on no training row: LiRA can only guess."""

    def __init__(self, seed: int = 0):
        self.seed = seed

    def fit(self, X, y):
        self.classes_ = np.arange(3)
        return self

    def predict_proba(self, X):
        logits = np.random.default_rng(self.seed).normal(size=(len(X), 3))
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)


class FakeForgetter(RetrainClassifier):
    """Claims to forget but keeps the rows: the audit must catch it."""

    def forget(self, ids):
        return {}


def _data(n=120, d=5, k=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.integers(0, k, n)


def test_logit_confidence_handles_missing_classes_and_extremes():
    proba = np.array([[0.9, 0.1], [0.0, 1.0], [0.5, 0.5]])
    phi = logit_confidence(proba, np.array([0, 2]), np.array([0, 0, 1]))
    assert phi[0] == pytest.approx(np.log(9.0))
    assert phi[1] == pytest.approx(np.log(1e-12))  # p_y = 0, clipped
    assert phi[2] == pytest.approx(np.log(1e-12))  # class 1 unknown to the model
    with pytest.warns(RuntimeWarning, match="no valid predicted distribution"):
        phi = logit_confidence(np.array([[np.nan, np.nan], [0.0, 0.0]]), [0, 1], np.array([0, 1]))
    assert np.allclose(phi, 0.0)  # uniform over two classes: log(0.5 / 0.5)


def test_balanced_membership_and_metrics():
    keep = balanced_membership(8, 50, np.random.default_rng(0))
    assert np.all(keep.sum(axis=0) == 4)
    assert np.array_equal(keep[0::2], ~keep[1::2])  # complementary pairs
    with pytest.raises(ValueError):
        balanced_membership(5, 10, np.random.default_rng(0))
    labels = np.array([1, 1, 0, 0], bool)
    assert auc_score(np.array([3.0, 2.0, 1.0, 0.0]), labels) == 1.0
    assert auc_score(np.array([1.0, 1.0, 1.0, 1.0]), labels) == 0.5
    lo, hi = bootstrap_auc_interval(np.arange(40.0), np.arange(40) >= 20, n_boot=200)
    assert lo == hi == 1.0
    # 20 rows, each decided 20 times identically: 20 data points, not 400
    rng = np.random.default_rng(0)
    scores = np.repeat(rng.normal(size=20) + np.arange(20) % 2, 20)
    labels = np.repeat(np.arange(20) % 2 == 1, 20)
    narrow = bootstrap_auc_interval(scores, labels, n_boot=300)
    wide = bootstrap_auc_interval(scores, labels, groups=np.repeat(np.arange(20), 20), n_boot=300)
    assert wide[1] - wide[0] > narrow[1] - narrow[0]
    assert tpr_at_fpr(np.array([0.0, 0.001, 0.5, 1.0]), np.array([0.2, 0.4, 0.9, 1.0]), 0.01) == 0.4


def test_lira_detects_a_memorizer():
    X, y = _data()
    result = run_lira(Memorizer, X, y, n_shadow=8, seed=0, n_boot=100)
    assert result.online.auc > 0.99
    assert result.online.tpr_at[0.01] > 0.9
    assert result.offline.auc > 0.99
    assert result.online.labels.sum() == 8 * 120 // 2


def test_lira_is_near_chance_when_no_row_matters():
    X, y = _data(n=200, seed=1)
    seeds = iter(range(1000))
    result = run_lira(lambda: Oblivious(next(seeds)), X, y, n_shadow=8, seed=0, n_boot=200)
    for attack in (result.online, result.offline):
        assert abs(attack.auc - 0.5) < 0.05
        assert attack.auc_low < 0.5 < attack.auc_high


def test_lira_sees_a_small_leak_of_a_regularized_model():
    """Logistic regression leaks a little even with background rows; the interval says so."""
    X, y = _data(n=200, seed=1)
    bg = _data(n=2000, seed=2)
    factory = lambda: LogisticRegression(C=0.01, max_iter=200)  # noqa: E731
    result = run_lira(factory, X, y, n_shadow=8, seed=0, background=bg, n_boot=200)
    assert 0.5 < result.online.auc < 0.7


def test_unlearning_audit_exact_vs_fake_forgetting():
    X, y = _data(n=160, seed=3)
    factory = lambda: RetrainClassifier(estimator=Memorizer())  # noqa: E731
    shadows = run_lira(factory, X, y, n_shadow=8, seed=0, n_boot=50).shadows
    exact = unlearning_audit(factory, X, y, shadows, n_forget=30, n_targets=2, n_boot=200)
    assert exact.before.auc > 0.99  # the attack sees R while it is trained on
    assert exact.retained.auc > 0.99  # and still sees the rows that stay
    assert exact.after.auc_low <= 0.5 <= exact.after.auc_high  # forgotten = never seen
    assert exact.identical_to_refit is True
    fake = unlearning_audit(
        lambda: FakeForgetter(estimator=Memorizer()), X, y, shadows, n_forget=30, n_boot=200
    )
    assert fake.after.auc > 0.99
    assert fake.identical_to_refit is False


def test_cli_runs_lira_and_the_unlearning_audit(tmp_path, capsys):
    import argparse

    from forgetting_lab.audits import lira as lira_command

    parser = argparse.ArgumentParser()
    lira_command.configure(parser)
    args = parser.parse_args(
        "--dataset digits --model retrain --n-shadow 4 --pool 60 --background 200 --forget 10 "
        f"--bootstrap 20 --targets 1 --quiet --json {tmp_path / 'out.json'}".split()
    )
    assert lira_command.run(args) == 0
    text = capsys.readouterr().out
    assert "online" in text and "R after forget vs unseen" in text
    import json

    figures = json.loads((tmp_path / "out.json").read_text())
    assert {row["attack"] for row in figures["attacks"]} == {"online", "offline"}
    assert all(row["identical to refit"] for row in figures["unlearning"])
    bad = parser.parse_args("--dataset digits --model qss-dp --pool 60 --quiet".split())
    assert lira_command.run(bad) == 2  # no epsilon: a clear error, no traceback


def test_label_mode_forget_equals_refit_with_labels_removed():
    """QSS-L forgets labels only: the audit compares it with a fit where R is unlabeled."""
    from forgetting import QSSClassifier

    rng = np.random.default_rng(4)
    centers = rng.normal(size=(3, 6)) * 3
    y = rng.integers(0, 3, 240)
    X = centers[y] + rng.normal(size=(240, 6))
    bg_y = rng.integers(0, 3, 300)
    bg = (centers[bg_y] + rng.normal(size=(300, 6)), bg_y)
    factory = lambda: QSSClassifier(  # noqa: E731
        mode="label", rho=0.2, n_instances=1, n_levels=2, n_centroids=8, rebuild="sync"
    )
    shadows = run_lira(factory, X, y, n_shadow=4, background=bg, n_boot=20).shadows
    audit = unlearning_audit(
        factory, X, y, shadows, n_forget=20, n_targets=1, background=bg, unlabeled=-1, n_boot=20
    )
    assert audit.identical_to_refit is True and audit.refit == "R unlabeled"
