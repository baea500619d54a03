"""The forest benchmark runs end to end on a small set and writes its tables."""

from __future__ import annotations

from forgetting_lab.bench import forest


def test_forest_benchmark_on_digits(tmp_path, monkeypatch):
    monkeypatch.setattr(forest, "LEAVES", (1, 5))
    monkeypatch.setattr(forest, "FEATURE_FACTORS", (1,))
    monkeypatch.setattr(forest, "TREES", (5, 10))
    assert forest.main(["--datasets", "digits", "--forgets", "20", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "forest.md").read_text()
    assert "Validation grid" in text and "| digits |" in text
    assert (tmp_path / "forest-accuracy.csv").exists()
