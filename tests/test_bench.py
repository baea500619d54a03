"""The benchmark harness runs end to end on tiny data and writes its tables."""

from __future__ import annotations

import csv

from forgetting.bench.core import main


def test_core_benchmark_harness_on_tiny_data(tmp_path, capsys):
    code = main(
        ["--sizes", "1500", "--single", "5", "--batch", "50", "--accuracy", "digits:0.3",
         "--n-levels", "2", "--n-centroids", "16", "--out", str(tmp_path), "--name", "tiny"]
    )  # fmt: skip
    assert code == 0
    md = (tmp_path / "tiny.md").read_text()
    assert "python -m forgetting.bench.core --sizes 1500" in md
    with open(tmp_path / "tiny-deletion.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["exact_vs_refit"] == "True"
    assert float(row["forget_p50_ms"]) > 0
    with open(tmp_path / "tiny-accuracy.csv") as f:
        models = {r["model"]: float(r["test_accuracy"]) for r in csv.DictReader(f)}
    assert set(models) == {"g-only", "QSS-E", "QSS-L", "SISA (5 shards)"}
    assert models["QSS-E"] >= models["g-only"]
    assert "Deletion" in capsys.readouterr().out
