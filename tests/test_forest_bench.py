"""The forest benchmark runs end to end on a small set and writes its tables."""

from __future__ import annotations

from forgetting_lab.bench import forest


def test_forest_benchmark_on_credit(tmp_path):
    argv = ["--datasets", "credit", "--forgets", "20", "--out", str(tmp_path)]
    argv += ["--leaves", "1,5", "--factors", "1", "--trees", "5,10"]
    assert forest.main(argv) == 0
    text = (tmp_path / "forest.md").read_text()
    assert "Validation grid" in text and "| credit |" in text
    assert (tmp_path / "forest-accuracy.csv").exists()
