"""forgetting_lab.bench.split_study: the split-flip count agrees with a refit without the row,
the stages score what they claim, and a quick run writes its tables with the command."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from forgetting_lab.bench import split_flips, split_study


def _structure(nodes: list[dict]) -> list[tuple[int, int]]:
    return [(nd["feat"], nd["thr"]) for nd in nodes]


def _table(n: int = 600, d: int = 6, k: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    C = rng.integers(0, 12, (n, d)).astype(np.int64)
    y = ((C[:, 0] + C[:, 1] + rng.integers(0, 6, n)) // 8 % k).astype(np.int64)
    return C, y, k, np.full(d, 13, np.int64)


@pytest.mark.parametrize("rule", ["random", "best"])
@pytest.mark.parametrize("leaf", [1, 3])
def test_a_flip_is_counted_exactly_when_a_refit_without_the_row_differs(rule, leaf):
    """For each deleted row and tree: no flip on its path ⇔ the tree refitted without the row
    has the same preorder of (feature, threshold) (nodes off the path hold the same rows; a
    node's candidates depend on its path only)."""
    C, y, k, n_codes = _table()
    victims = np.arange(0, 600, 7)
    tracked = np.isin(np.arange(len(y)), victims)
    forest = split_flips.NumpyForest(rule, 3, leaf, seed=5).fit(C, y, k, n_codes, tracked, 3)
    flips = same = 0
    for r in victims:
        keep = np.arange(len(y)) != r
        refit = split_flips.NumpyForest(rule, 3, leaf, seed=5)
        refit.fit(C[keep], y[keep], k, n_codes, np.zeros(len(y) - 1, bool), 3)
        for nodes, again in zip(forest.trees, refit.trees, strict=True):
            flipped = forest.flip(nodes, int(r)) is not None
            assert flipped == (_structure(nodes) != _structure(again)), (rule, leaf, r)
            flips += flipped
            same += not flipped
    assert flips > 0 and same > 0  # both outcomes were exercised


def test_the_rules_draw_what_they_say():
    rng = np.random.default_rng(0)
    lo, hi = np.array([0, 3, 5]), np.array([10, 4, 9])  # feature 1 has one code left: infeasible
    random = split_flips.NumpyForest("random", 4, 1, 0)
    fs, ts = random._candidates(rng, lo, hi)
    assert fs.size == 4 and set(fs) <= {0, 2}
    assert np.all(ts >= lo[fs]) and np.all(ts <= hi[fs] - 2)
    best = split_flips.NumpyForest("best", 2, 1, 0)
    fs, ts = best._candidates(rng, lo, hi)
    assert sorted(set(fs)) == [0, 2] and fs.size == 9 + 3  # every threshold of both features


def test_boosted_leaf_values_learn_a_partition_that_holds_the_classes():
    leaves = np.repeat(np.arange(4), 50)[:, None]
    y = np.array([0, 1, 2, 1])[leaves[:, 0]]
    scores = split_study.partition_boost(leaves, leaves, y, 3)
    assert np.array_equal(scores.argmax(1), y)


def test_grid_codes_are_the_librarys_encoding_of_a_d_pool_grid():
    from forgetting.forest.binning import bin_edges, encode

    X = np.random.default_rng(1).normal(size=(1000, 3))
    X[::9, 1] = np.nan
    C, Cv, n_codes = split_study.grid_codes(X[:800], X[800:], seed=0, max_bins=31)
    assert C.dtype == np.uint8 and int(C.max()) < 33 and np.all(n_codes <= 33)
    assert np.all(C[::9, 1] == n_codes[1] - 1)  # NaN: one past the finite bins
    assert np.all(C.max(0) < n_codes) and np.all(Cv.max(0) < n_codes)
    pool = np.random.default_rng(0).choice(800, split_study.MIN_BIN_ROWS, replace=False)
    edges = bin_edges(X[:800][pool], 31)  # D°: max(0.005·800, 200) seeded rows
    assert np.array_equal(C, encode(X[:800], edges))
    assert np.array_equal(Cv, encode(X[800:], edges))


def test_a_quick_run_writes_every_table_with_its_command(tmp_path):
    argv = ["--quick", "--datasets", "credit", "--flip-table", "credit", "--out", str(tmp_path)]
    assert split_study.main(argv) == 0
    md = (tmp_path / "split-study.md").read_text()
    assert "python -m forgetting_lab.bench.split_study --quick" in md
    assert "1-min load average" in md
    with open(tmp_path / "split-study-summary.csv", newline="") as f:
        summary = {r["variant"]: r for r in csv.DictReader(f)}
    assert summary["forest defaults"]["vs forest defaults (pp)"] == "+0.00"
    assert any(v.startswith("RF (best threshold)") for v in summary)
    assert "HGB raw, native categoricals" in summary  # credit has category columns
    with open(tmp_path / "split-study-split_flips_per_deletion.csv", newline="") as f:
        flips = list(csv.DictReader(f))
    assert {r["rule"] for r in flips} == {"random threshold", "best threshold"}
    (tmp_path / "prose.md").write_text("## Conclusion\n\nbest thresholds\n")
    merged = ["--merge", "split-study", "--name", "merged", "--out", str(tmp_path)]
    assert split_study.main([*merged, "--conclusion", str(tmp_path / "prose.md")]) == 0
    for table in ("per_seed", "summary", "split_flips_per_deletion"):
        a = (tmp_path / f"split-study-{table}.csv").read_text()
        assert (tmp_path / f"merged-{table}.csv").read_text() == a, table
    text = (tmp_path / "merged.md").read_text()
    assert "part `split-study`: Command: `python -m" in text and "## Conclusion" in text
