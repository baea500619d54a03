"""forgetting_lab.bench.scale: its data generator is deterministic per chunk (any worker makes any
chunk, a rerun makes the same rows), and the benchmark runs end to end on a small n and writes
a results row whose figures are consistent (it reaches into the engine — instances, rebuild
times, D° membership — so an API change there would break the 10 M-row run silently)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

pytest.importorskip("distributed")

from forgetting_lab.bench import scale  # noqa: E402


def test_chunks_are_deterministic_and_synthetic_concatenates_them():
    X0, y0 = scale._chunk(0, 100, 4, 3, seed=5)
    X0b, y0b = scale._chunk(0, 100, 4, 3, seed=5)
    X1, _ = scale._chunk(1, 100, 4, 3, seed=5)
    assert X0.dtype == np.float32 and y0.dtype == np.int64
    assert np.array_equal(X0, X0b) and np.array_equal(y0, y0b)
    assert not np.array_equal(X0, X1)
    assert set(np.unique(y0)) <= {0, 1, 2}
    X, y = scale.synthetic(250, 4, 3, chunk_rows=100, seed=5)
    assert X.shape == (250, 4) and X.chunks[0] == (100, 100, 50)
    Xc, yc = X.compute(scheduler="synchronous"), y.compute(scheduler="synchronous")
    assert np.array_equal(Xc[:100], X0) and np.array_equal(Xc[100:200], X1)
    assert np.array_equal(Xc[200:], scale._chunk(2, 50, 4, 3, seed=5)[0])
    assert np.array_equal(yc[:100], y0)


def test_scale_runs_end_to_end_and_writes_a_consistent_row(tmp_path):
    n = 12_288
    code = scale.main(
        [
            "--n", str(n), "--workers", "1", "--forgets", "3", "--chunk-rows", "4096",
            "--worker-memory", "2GiB", "--rows-dir", str(tmp_path / "rows"),
            "--out", str(tmp_path), "--name", "scale_test",
        ]
    )  # fmt: skip
    assert code == 0
    md = (tmp_path / "scale_test.md").read_text()
    assert "Command: `python -m forgetting_lab.bench.scale --n 12288" in md
    [csv_file] = tmp_path.glob("scale_test-*.csv")
    with open(csv_file) as f:
        [row] = list(csv.DictReader(f))
    assert list(row) == scale.COLUMNS
    assert int(row["n"]) == n and int(row["workers"]) == 1 and int(row["forgets"]) == 3
    fit_s = float(row["fit_s"])
    assert fit_s > 0 and float(row["fit_rows_per_s"]) == pytest.approx(n / fit_s)
    assert 0 < int(row["schema_rows"]) < n
    assert float(row["peak_rss_total_gb"]) >= float(row["peak_rss_coordinator_gb"]) > 0
    pair_p50 = float(row["forget_predict_p50_ms"])
    assert 0 < pair_p50 <= float(row["forget_predict_p95_ms"])
    assert float(row["forget_p50_ms"]) > 0 and float(row["first_predict_p50_ms"]) > 0
    assert float(row["rebuild_s"]) > 0 and float(row["faiss_rows_per_s"]) > 0
    assert 0 <= int(row["forgets_during_rebuild"]) <= 3
    if int(row["forget_d0_hits"]) == 0:  # every pair was quiet: the two p50s are one figure
        assert row["hit_forget_predict_max_ms"] == "nan"
        assert float(row["quiet_forget_predict_p50_ms"]) == pair_p50
