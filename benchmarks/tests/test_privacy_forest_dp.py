"""The forest label-DP benchmark runs end to end on tiny sizes and writes its files."""

from __future__ import annotations

import csv

import pytest

from forgetting_lab.bench import privacy_forest_dp as bench


def test_leaf_factor_grid_is_put_back():
    from forgetting.privacy import randomized_response as rr

    before = rr.LEAF_FACTOR
    with bench.leaf_factor(0.25):
        assert rr.dp_min_leaf(1.0, 2) == round(
            0.25 / (rr.keep_probability(1.0, 2) - rr.flip_probability(1.0, 2)) ** 2
        )
    assert rr.LEAF_FACTOR == before


def test_the_benchmark_writes_accuracy_and_the_validation_grid(tmp_path):
    try:
        bench.load_table("vehicle", None)
    except (OSError, KeyError):
        pytest.skip("Debian's r-cran-mlbench is not installed")
    code = bench.main(["--quick", "--tables", "vehicle=300", "--out", str(tmp_path), "--name", "t"])
    assert code == 0
    text = (tmp_path / "t.md").read_text()
    assert "Command: `python -m forgetting_lab.bench.privacy_forest_dp" in text
    assert "1-min load average" in text
    with open(tmp_path / "t-test_accuracy.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["epsilon"]) for r in rows] == [1.0, 8.0]
    for r in rows:
        assert 0.0 < float(r["DP forest, chosen factor"]) <= 1.0
        assert r["better DP model (validation)"] in ("forest", "QSS")
    with open(tmp_path / "t-validation_grid_of_the_leaf_factor.csv") as f:
        assert len(list(csv.DictReader(f))) == 4  # 2 ε × 2 factors
