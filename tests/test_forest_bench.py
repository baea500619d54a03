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


def test_the_regression_forest_benchmark_runs_quick(tmp_path):
    """forgetting_lab.bench.forest_regression --quick: every table written, forget = refit."""
    from conftest import source_missing

    from forgetting_lab.bench import forest_regression
    from forgetting_lab.datasets import DatasetUnavailableError

    try:
        code = forest_regression.main(["--quick", "--out", str(tmp_path), "--name", "fr"])
    except (ImportError, DatasetUnavailableError) as err:  # the lab's `diamonds` extra
        source_missing(err)
    assert code == 0
    md = (tmp_path / "fr.md").read_text()
    assert "## test RMSE" in md and "## validation grid" in md
    assert "| True | True |" in md  # same predictions, same digest after the forgets
