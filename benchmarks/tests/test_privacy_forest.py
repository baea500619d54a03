"""The privacy benchmark attacks the exact forest and a random forest (tiny sizes)."""

from __future__ import annotations

import csv

import pytest

from forgetting_lab.bench import privacy
from forgetting_lab.bench.privacy_forest import is_tree_model, make_tree_factory


def test_tree_model_names_and_factories():
    assert is_tree_model("forest") and is_tree_model("retrain-rf")
    assert is_tree_model("forest-leaf20") and not is_tree_model("retrain-hgb")
    forest = make_tree_factory("forest", seed=3)()
    assert forest.random_state == 3 and forest.min_samples_leaf == 1  # the shipped default
    assert make_tree_factory("forest-leaf7")().min_samples_leaf == 7
    with pytest.raises(ValueError):
        make_tree_factory("forest-leafy")


def test_privacy_benchmark_runs_the_forest_and_rf(tmp_path):
    code = privacy.main(
        [
            "--skip-accuracy",
            "--dp-epsilons", "none",
            "--models", "forest,retrain-rf@digits,retrain@adult",
            "--lira-datasets", "digits=60+200",
            "--n-shadow", "4",
            "--forget", "5",
            "--targets", "1",
            "--bootstrap", "20",
            "--name", "pf",
            "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    with open(tmp_path / "pf-lira_membership_inference.csv") as f:
        attacks = list(csv.DictReader(f))
    assert {(r["model"], r["attack"]) for r in attacks} == {
        (m, a) for m in ("forest", "retrain-rf") for a in ("online", "offline")
    }  # no QSS-DP rows with --dp-epsilons none, no LR (only @adult)
    for r in attacks:
        assert 0.0 <= float(r["AUC"]) <= 1.0
        assert 0.0 < float(r["test accuracy"]) <= 1.0
    with open(tmp_path / "pf-unlearning_audit.csv") as f:
        audits = list(csv.DictReader(f))
    forest = [r for r in audits if r["model"] == "forest"]
    assert len(forest) == 3
    assert all(r["identical to refit"] == "True" for r in forest)  # exact forget
    assert all(0.0 <= float(r["AUC"]) <= 1.0 for r in audits)
    assert "ExactForestClassifier at its shipped defaults" in (tmp_path / "pf.md").read_text()
