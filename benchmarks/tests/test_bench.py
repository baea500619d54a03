"""The benchmark harness runs end to end on tiny data and writes its tables."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from forgetting_lab.bench.core import main


def test_core_benchmark_harness_on_tiny_data(tmp_path, capsys):
    code = main(
        ["--sizes", "1500", "--single", "5", "--batch", "50", "--accuracy", "digits:0.3",
         "--n-levels", "2", "--n-centroids", "16", "--out", str(tmp_path), "--name", "tiny"]
    )  # fmt: skip
    assert code == 0
    md = (tmp_path / "tiny.md").read_text()
    assert "python -m forgetting_lab.bench.core --sizes 1500" in md
    with open(tmp_path / "tiny-deletion.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["exact_vs_refit"] == "True"
    assert float(row["forget_p50_ms"]) > 0
    # the fast-path cost includes the first prediction after the forget
    assert float(row["t_fast_p50_ms"]) >= float(row["forget_p50_ms"])
    rho, p, q = float(row["rho"]), int(row["p"]), float(row["q_rebuild"])
    assert q == pytest.approx(1 - (1 - rho) ** p)
    assert int(row["d0_hits"]) >= 1 and float(row["t_rebuild_s"]) > 0  # hits confirmed by receipts
    t_fast, t_rebuild = float(row["t_fast_p50_ms"]), float(row["t_rebuild_s"]) * 1e3
    assert float(row["expected_ms"]) == pytest.approx((1 - q) * t_fast + q * t_rebuild, rel=1e-3)
    assert float(row["sisa_shard_retrain_s"]) > 0 and float(row["retrain_s"]) > 0
    with open(tmp_path / "tiny-accuracy.csv") as f:
        rows = list(csv.DictReader(f))
    models = {r["model"]: float(r["test_accuracy"]) for r in rows}
    assert set(models) == {
        "g-only", "QSS-E", "QSS-L", "exact forest (defaults)", "SISA (5 shards)",
        "SISA-HGB", "HGB", "LR",
    }  # fmt: skip
    assert models["QSS-E"] >= models["g-only"]
    # the gap is to the best full-data model (HGB or LR here: SISA is not one)
    (best,) = {r["best full-data"] for r in rows}
    assert best in ("HGB", "LR")
    for r in rows:
        expected = round(100 * (float(r["test_accuracy"]) - models[best]), 2)
        assert float(r["gap_to_best_pp"]) == pytest.approx(expected, abs=0.011)
    assert "Deletion" in capsys.readouterr().out


def test_array_bytes_counts_each_array_once():
    from forgetting_lab.bench.costs import array_bytes

    a = np.zeros(100, dtype=np.int64)
    assert array_bytes({"x": a, "y": [a, (a,)]}) == 800
    assert array_bytes([a, np.zeros(3, dtype=np.float32)]) == 812


def test_heads_benchmark_on_digits(tmp_path):
    from forgetting_lab.bench import heads

    code = heads.main(
        ["--datasets", "digits", "--seeds", "1", "--deletions", "3", "--out", str(tmp_path)]
    )
    assert code == 0
    with open(tmp_path / "heads-heads.csv") as f:
        rows = {row["head"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"ridge", "shared-ridge", "newton"}
    for row in rows.values():
        assert 0.5 < float(row["accuracy"]) <= 1.0 and float(row["t_fast_p50_ms"]) > 0
        assert float(row["delta_vs_sisa_pp"]) == pytest.approx(
            100 * (float(row["accuracy"]) - float(row["sisa"]))
        )


def test_breakdown_benchmark_times_every_step_and_restores_them(tmp_path):
    from forgetting import QSSClassifier
    from forgetting.content.tables import FlatTables
    from forgetting.engine import QSSEngine
    from forgetting_lab.bench import breakdown

    before = (QSSEngine.__dict__["forget"], FlatTables.__dict__["subtract"])
    own_forget = "forget" in vars(QSSClassifier)  # inherited: the wrapper must go again
    code = breakdown.main(["--n", "3000", "--deletions", "5", "--out", str(tmp_path)])
    assert code == 0
    with open(tmp_path / "breakdown-where_a_deletion_s_time_goes.csv") as f:
        rows = {row["step"]: row for row in csv.DictReader(f)}
    assert set(rows) == {step for step, *_ in breakdown.STEPS}
    assert float(rows["forget"]["calls_per_deletion"]) == 1.0
    assert float(rows["instance subtract"]["calls_per_deletion"]) == 3.0  # p = 3 instances
    assert (
        0
        < float(rows["engine forget"]["ms_per_deletion"])
        < float(rows["forget"]["ms_per_deletion"])
    )
    assert (QSSEngine.__dict__["forget"], FlatTables.__dict__["subtract"]) == before
    assert ("forget" in vars(QSSClassifier)) == own_forget


def test_store_benchmark_times_durable_deletions_and_hits(tmp_path):
    from forgetting_lab.bench import store

    code = store.main(
        ["--sizes", "3000", "--fast", "5", "--hits", "1", "--out", str(tmp_path), "--name", "s"]
        + ["--threads", "1,3", "--concurrent", "12"]
    )
    assert code == 0
    with open(tmp_path / "s-concurrent_one_id_forgets.csv") as f:
        together = list(csv.DictReader(f))
    assert [int(r["threads"]) for r in together] == [1, 3]
    assert all(int(r["forgets"]) == 12 and float(r["rows_per_s"]) > 0 for r in together)
    with open(tmp_path / "s-durable_deletion.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["format"] == "forgetting-store-v3" and row["backend"] == "sqlite"
    assert 0 < float(row["d0_forget_ms"]) <= float(row["d0_forget_predict_ms"])
    assert float(row["d0_landed_s"]) > 0
    assert 0 < float(row["forget_predict_p50_ms"]) <= float(row["forget_predict_p99_ms"])


def test_head_rule_benchmark_on_digits_diabetes_and_a_held_out_set(tmp_path):
    """The benchmark runs end to end on validation splits of the training split, and the
    rule it reports is the one the engine served (it checks each instance)."""
    import csv

    from forgetting_lab.bench import head_rule

    sets = "digits,diabetes,mkclass-small"
    args = ["--datasets", sets, "--seeds", "1", "--no-timing", "--out", str(tmp_path)]
    code = head_rule.main(args)
    assert code == 0
    with open(tmp_path / "head_rule-per_instance.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["dataset"] for r in rows] == [s for s in sets.split(",") for _ in range(3)]
    for row in rows:
        assert row["better"] in ("head", "tables") and row["rule"] in ("head", "tables")
        # the training splits only: 1257 (digits), 309 (diabetes), all 8000 generated rows
        assert int(row["n_fit"]) + int(row["n_val"]) in (1257, 309, 8000)
    with open(tmp_path / "head_rule-per_set.csv") as f:
        by_set = {r["dataset"]: r for r in csv.DictReader(f)}
    assert 0.5 < float(by_set["digits"]["val_rule"]) <= 1.0


def test_throughput_benchmark_small(tmp_path):
    """The benchmark runs end to end on a small n and finds every fit's digest equal and
    every batched hashing stage equal to the per-row loop."""
    import csv

    from forgetting_lab.bench import throughput

    assert (
        throughput.main(["--sizes", "3000", "--d", "16", "--repeats", "1", "--out", str(tmp_path)])
        == 0
    )
    text = (tmp_path / "throughput.md").read_text()
    assert "Command: `python -m forgetting_lab.bench.throughput --sizes 3000" in text
    with open(tmp_path / "throughput-fit_per_instance_vs_faiss_s_encoder.csv") as f:
        fits = list(csv.DictReader(f))
    assert [r["hash_backend"] for r in fits] == ["numba", "hashlib"]
    assert all(r["same_digest"] == "True" and float(r["fit_vs_faiss"]) > 0 for r in fits)
    with open(tmp_path / "throughput-hashing_stages_alone.csv") as f:
        stages = list(csv.DictReader(f))
    assert len(stages) == 5 and all(r["equal"] == "True" for r in stages)


def test_partitions_benchmark_runs_on_digits(tmp_path) -> None:
    """The selection benchmark end to end on the bundled digits (a few configurations)."""
    from forgetting_lab.bench import partitions

    argv = [
        "--datasets", "digits", "--families", "trees/none", "--heads", "g",
        "--estimators", "trees", "--no-baselines", "--skip-latency", "--out", str(tmp_path),
    ]  # fmt: skip
    assert partitions.main(argv) == 0
    text = (tmp_path / "partitions.md").read_text()
    assert "--datasets digits" in text and "QSSClassifier(partition='trees', head='auto')" in text
    with open(tmp_path / "partitions-accuracy.csv", newline="") as f:
        accuracy = [float(r["accuracy"]) for r in csv.DictReader(f)]
    assert min(accuracy) > 0.8  # trees on digits: ~0.93 on the validation split
