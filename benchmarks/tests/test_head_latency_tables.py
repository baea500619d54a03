"""forgetting_lab.bench.head_latency --table: each source timed in a process of its own, the
working tree's forget checked against a refit, the results written with their command."""

from __future__ import annotations

import numpy as np
import pytest

from forgetting_lab.bench import head_latency
from forgetting_lab.bench import head_latency_tables as tables


def test_the_tables_mode_times_a_source_and_finds_forget_equal_to_refit(tmp_path, monkeypatch):
    X, y, X_test, _ = head_latency.synthetic(1500, 60, 6, 2, 0)
    table = (X.astype(np.float32), y, X_test.astype(np.float32))
    monkeypatch.setattr(tables, "_tables", lambda rows_limit, n_test: {"synthetic": table})
    monkeypatch.setattr(tables, "WARM_FORGETS", 3)
    argv = ["--table", "flights", "--rounds", "1", "--table-forgets", "4"]
    assert head_latency.main([*argv, "--out", str(tmp_path), "--name", "t"]) == 0
    text = (tmp_path / "t.md").read_text()
    assert "python -m forgetting_lab.bench.head_latency --table flights" in text
    assert "| synthetic | working tree | predict_proba | 60 | True |" in text
    assert "| synthetic | working tree | state digest |" in text
    rounds = (tmp_path / "t-every_round.csv").read_text().splitlines()
    assert len(rounds) == 2 and rounds[1].startswith("synthetic,working tree,1,6,")


def test_a_source_without_the_library_is_refused_with_one_line(tmp_path):
    with pytest.raises(SystemExit, match="is not LABEL=<a folder holding forgetting/>"):
        tables._sources(f"old={tmp_path}")
