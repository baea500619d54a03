"""The paper's analyses on tiny data: the formulas, the flip and sensitivity measurements, the
memory formula against measured bytes, a retention scenario's bitwise check, and the command."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from forgetting_lab.bench.analyses import main
from forgetting_lab.bench.analyses.common import level_means, level_sums
from forgetting_lab.bench.analyses.instability import flips_2d
from forgetting_lab.bench.analyses.memory import float_copies_formula, measure, statistics_formula
from forgetting_lab.bench.analyses.retention import scenario
from forgetting_lab.bench.analyses.scheduling import (
    all_down_fraction,
    eager_and_optimum,
    expected_max_geometric,
    harmonic,
)
from forgetting_lab.bench.analyses.sensitivity import level_T
from forgetting_lab.bench.paper.data import Data


def test_scheduling_formulas():
    assert expected_max_geometric(1, 0.01) == pytest.approx(100.0)
    # E[max of p geometrics] → H_p/ρ as ρ → 0, and the eager/optimum ratio → p·H_p
    rho = 1e-4
    assert expected_max_geometric(3, rho) * rho == pytest.approx(harmonic(3), rel=1e-3)
    q = 1 - (1 - rho) ** 3
    assert expected_max_geometric(3, rho) * q == pytest.approx(3 * harmonic(3), rel=1e-3)


def test_eager_and_optimum_rounds():
    hits = np.array([[1, 0], [0, 0], [1, 0], [0, 1], [1, 1], [0, 1], [1, 0]], dtype=bool)
    eager, optimum = eager_and_optimum(hits)
    assert eager == 6  # every deletion that hits some instance
    assert optimum == 3  # both instances hit since the last round: rows 3, 4 and 6


def test_all_down_fraction_counts_hits_strictly_before():
    hits = np.zeros((10, 1), dtype=bool)
    hits[2, 0] = True
    # a hit at t=2 keeps the instance down for arrivals t=3..4 with duration 2
    assert all_down_fraction(hits, 2) == pytest.approx(2 / 10)


def test_exact_mode_codebook_flips_nothing_on_d_bullet_deletions():
    rows, picture = flips_2d(seed=0, n_deletions=3, rng=np.random.default_rng(1))
    assert len(rows) == 3
    for row in rows:
        assert 0.0 <= row["flip"] <= 1.0
        if not row["d0_hit"]:
            assert row["exact_flip"] == 0.0
    assert any(r["flip"] > 0 for r in rows)  # k-means on all rows does move


def test_level_sums_start_with_the_raw_sums_and_means_reduce_the_residual():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, size=(200, 3))
    r = rng.normal(size=(200, 2))
    S = level_sums(codes, r, 4)
    T = level_T(codes, r, 4)
    assert np.allclose(S[0], T[0])
    e = r.copy()
    for m, mu in enumerate(level_means(codes, r, 4)):
        new = e - mu[codes[:, m]]
        assert np.sum(new**2) <= np.sum(e**2) + 1e-9
        e = new


def test_one_label_change_moves_each_raw_level_sum_by_sqrt2():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 8, size=(100, 4))
    g = rng.dirichlet(np.ones(3), size=100)
    r = np.eye(3)[rng.integers(0, 3, size=100)] - g
    r2 = r.copy()
    r2[5] = np.eye(3)[(int(np.argmax(r[5] + g[5])) + 1) % 3] - g[5]
    for a, b in zip(level_T(codes, r2, 8), level_T(codes, r, 8), strict=True):
        assert np.linalg.norm(a - b) == pytest.approx(np.sqrt(2))


def test_memory_formula_matches_measured_statistics():
    row = measure(800, k=3, b=8, levels=2, p=2)
    assert row["formula_matches"]
    assert row["statistics_mb"] * 2**20 == statistics_formula(3, 8, 2, 2)
    assert row["float_copies_mb"] * 2**20 == float_copies_formula(3, 8, 2, 2) > 0
    assert row["row_store_bytes_per_row"] > 0


def test_retention_scenario_is_bitwise_the_refit():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 6)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    data = Data("toy", "toy", "classification", "normal", X[:400], y[:400], X[400:], y[400:],
                3, 0.2)  # fmt: skip
    row = scenario(data, "exact", "10%", rng.choice(400, size=40, replace=False))
    assert row["predictions_equal"] and row["digest_equal"]
    assert row["accuracy_after"] == row["accuracy_refit"]


def test_command_writes_tables_with_the_command(tmp_path):
    assert main(["--quick", "--only", "memory", "--out", str(tmp_path), "--name", "t"]) == 0
    md = (tmp_path / "t-memory.md").read_text()
    assert "Command: `python -m forgetting_lab.bench.analyses --quick --only memory" in md
    with open(tmp_path / "t-memory-memory.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["formula_matches"] == "True" for r in rows)
    assert (tmp_path / "t-memory.png").read_bytes()[:4] == b"\x89PNG"
    assert "memory" in (tmp_path / "t.md").read_text()
    with pytest.raises(SystemExit):
        main(["--only", "nonsense", "--out", str(tmp_path)])
