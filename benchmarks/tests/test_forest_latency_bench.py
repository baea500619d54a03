"""The forest's forget-path benchmark runs end to end on a small sample and writes its
tables: every scenario ends equal to a refit, and no request waited for a rebuild."""

from __future__ import annotations

import csv

from forgetting_lab.bench import forest_latency


def _row(path) -> dict:
    with open(path) as f:
        return next(csv.DictReader(f))


def test_forest_latency_benchmark_on_a_sample(tmp_path):
    argv = ["--dataset", "credit", "--n-train", "3000", "--forgets", "40"]
    argv += ["--test-rows", "200", "--batch-fraction", "0.02", "--out", str(tmp_path)]
    assert forest_latency.main(argv) == 0
    text = (tmp_path / "forest-latency.md").read_text()
    assert "Command: `python -m forgetting_lab.bench.forest_latency --dataset credit" in text
    assert "1-min load average" in text
    latency = _row(tmp_path / "forest-latency-forget_next_predict_proba.csv")
    assert latency["= refit"] == "True" and int(latency["forgets"]) == 40
    assert latency["serve waits"] == "0"
    assert float(latency["p50 ms"]) <= float(latency["p99 ms"])
    batch = _row(tmp_path / "forest-latency-batch.csv")
    assert batch["= refit"] == "True" and int(batch["batch"]) == round(0.02 * (3000 - 40))
    fit = _row(tmp_path / "forest-latency-fit.csv")
    assert int(fit["n"]) == 3000 and float(fit["forest fit s"]) > 0
