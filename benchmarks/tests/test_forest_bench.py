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
    # the batch step: 5 % of the rows outside D° in one forget, equal to a refit
    assert "Batch forget: ids outside D° in one call" in text
    batch = next(tmp_path.glob("forest-batch_forget*.csv")).read_text().splitlines()
    header, row = batch[0].split(","), batch[1].split(",")
    assert row[header.index("= refit")] == "True" and int(row[header.index("batch")]) > 100
    assert 0 < float(row[header.index("forget s")]) < float(row[header.index("refit s")]) * 10


class _StandIn:
    """A stand-in for DaRE-RF's ``dare.Forest`` (not installable in CI): the API the
    benchmark uses, over scikit-learn's extra trees; deletes are recorded, not applied."""

    def __init__(self, n_estimators, max_depth, k, topd, random_state):
        from sklearn.ensemble import ExtraTreesClassifier

        assert topd == 0 and k in (5, 25)
        self.model = ExtraTreesClassifier(n_estimators, max_depth=max_depth, random_state=0)
        self.deleted = []

    def fit(self, X, y):
        assert X.dtype == "float32" and y.dtype == "int32"
        self.model.fit(X, y)

    def predict_proba(self, X):
        return self.model.predict_proba(X)

    def delete(self, i):
        assert isinstance(i, int) and i not in self.deleted
        self.deleted.append(i)


def test_the_forest_benchmark_times_dare_on_binary_sets_when_it_imports(tmp_path, monkeypatch):
    """With a ``dare`` module importable (here a stand-in), the binary set gets a DaRE-RF row:
    chosen on validation over its grid, scored, timed on the same victims as ours."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "dare", types.SimpleNamespace(Forest=_StandIn))
    argv = ["--datasets", "credit", "--forgets", "12", "--out", str(tmp_path)]
    argv += ["--leaves", "5", "--factors", "1", "--trees", "5"]
    assert forest.main(argv) == 0
    text = (tmp_path / "forest.md").read_text()
    assert "DaRE-RF, the exact-deletion peer" in text and "jjbrophy47/dare_rf" in text
    peer = (tmp_path / "forest-dare_rf_the_exact_deletion_peer_on_the_binary_sets.csv").read_text()
    header, row = peer.splitlines()[:2]
    assert header.startswith("dataset,n_estimators,max_depth,k") and row.startswith("credit,5,")


def test_the_regression_forest_benchmark_runs_quick(tmp_path):
    """forgetting_lab.bench.forest_regression --quick: every table written, forget = refit."""
    from helpers import source_missing

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


def test_forest_store_benchmark_on_credit(tmp_path):
    from forgetting_lab.bench import forest_store

    argv = ["--datasets", "credit", "--config", "credit=5:8:5", "--forgets", "10"]
    argv += ["--batch", "40", "--out", str(tmp_path)]
    assert forest_store.main(argv) == 0
    text = (tmp_path / "forest-store.md").read_text()
    assert "| credit |" in text and "Durable store (SQLite)" in text
    store = next(tmp_path.glob("forest-store-durable*.csv")).read_text().splitlines()
    header, row = store[0].split(","), store[1].split(",")
    assert row[header.index("reopened = live")] == "True"
    assert row[header.index("verify ok")] == "True" and row[header.index("forgets")] == "10"
    files = next(tmp_path.glob("forest-store-model_file*.csv")).read_text().splitlines()
    assert files[1].split(",")[files[0].split(",").index("load = saved")] == "True"


def test_forest_instances_benchmark_on_credit(tmp_path):
    from forgetting_lab.bench import forest_instances

    argv = ["--datasets", "credit", "--config", "credit=6:8:5", "--forgets", "40"]
    argv += ["--interval", "0", "--out", str(tmp_path)]
    assert forest_instances.main(argv) == 0
    lines = next(tmp_path.glob("forest-instances*.csv")).read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=True)) for line in lines[1:]]
    assert [r["instances"] for r in rows] == ["1", "3"]
    assert all(r["= refit"] == "True" and r["forgets"] == "40" for r in rows)


def test_boosting_study_on_credit(tmp_path):
    from forgetting_lab.bench import boosting_study

    argv = ["--datasets", "credit", "--deletions", "1", "--out", str(tmp_path)]
    assert boosting_study.main(argv) == 0
    lines = next(tmp_path.glob("boosting-study*.csv")).read_text().splitlines()
    header, row = lines[0].split(","), lines[1].split(",")
    # credit is too small for the D° designs: the all-rows design alone, against HGB
    assert len(lines) == 2 and row[header.index("structure")] == "all"
    assert 0.6 < float(row[header.index("val")]) <= 1.0
