"""The D° floor study runs and writes what it measured."""

from __future__ import annotations

from forgetting_lab.bench import forest_small


def test_quick_run_writes_the_floors_and_their_effective_rho(tmp_path):
    assert forest_small.main(["--quick", "--out", str(tmp_path), "--name", "fs"]) == 0
    text = (tmp_path / "fs.md").read_text()
    assert "python -m forgetting_lab.bench.forest_small --quick" in text
    rows = (tmp_path / "fs-d_floor_against_validation_accuracy.csv").read_text().splitlines()
    assert "fs-per_floor" in " ".join(p.name for p in tmp_path.iterdir())
    assert len(rows) == 1 + len(forest_small.FLOORS)
    rhos = [float(r.split(",")[4]) for r in rows[1:]]
    assert rhos == sorted(rhos, reverse=True)  # a lower floor, fewer D° rows, smaller ρ_eff
    assert 0.0 < rhos[-1] < rhos[0] <= 1.0
