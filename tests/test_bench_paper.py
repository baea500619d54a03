"""The paper benchmark runs end to end on tiny data, writes every table and figure, and its
shortcuts (g-only from QSS-E's schemas, the ρ rule, purity) mean what they claim."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from forgetting import QSSClassifier, QSSRegressor
from forgetting.bench import paper
from forgetting.bench.paper import (
    g_only_outputs,
    level1_purity,
    main,
    parse_mapping,
    resolve_rho,
)

TABLES = {
    "accuracy": paper.ACCURACY_COLUMNS,
    "regression": paper.REGRESSION_COLUMNS,
    "deletion_cost": paper.DELETION_COLUMNS,
    "exactness": paper.EXACT_COLUMNS,
    "rho_sweep": paper.SWEEP_COLUMNS,
    "width_vs_depth": paper.WIDTH_DEPTH_COLUMNS,
    "cell_purity": paper.PURITY_COLUMNS,
    "targets": paper.TARGET_COLUMNS,
    "runtime": paper.RUNTIME_COLUMNS,
    "accuracy_per_seed": paper.RUN_COLUMNS,
}


def _read(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def test_quick_run_writes_every_table_and_figure(tmp_path, capsys):
    argv = ["--datasets", "digits,diabetes", "--quick", "--out", str(tmp_path), "--name", "tiny"]
    assert main(argv) == 0
    md = (tmp_path / "tiny.md").read_text()
    assert "Command: `python -m forgetting.bench.paper --datasets digits,diabetes --quick" in md
    tables = {}
    for slug, columns in TABLES.items():
        header, rows = _read(tmp_path / f"tiny-{slug}.csv")
        assert header == columns, slug
        tables[slug] = rows
    (acc,) = tables["accuracy"]
    assert acc["dataset"] == "digits" and "±" in acc["QSS-L"]
    assert "ρ raised" in acc["note"]  # 800 rows are too few for ρ = 0.5 %: said, not hidden
    assert {r["model"] for r in tables["regression"]} == set(paper.MODELS)
    exact = tables["exactness"]
    assert {(r["dataset"], r["mode"]) for r in exact} == {
        (d, m) for d in ("digits", "diabetes") for m in ("QSS-E", "QSS-L")
    }
    for row in exact:
        assert row["deleted"] == "100" and int(row["d0_rows"]) == 3
        assert row["predictions_equal"] == "True" and row["digest_equal"] == "True"
    for row in tables["deletion_cost"]:
        assert float(row["t_fast_ms"]) > 0 and float(row["t_rebuild_s"]) > 0
        assert float(row["speedup"]) > 0
        assert float(row["t_fast_ms"]) >= float(row["forget_ms"])  # includes the predict
        assert float(row["retrain_s"]) > 0 and float(row["speedup_vs_retrain"]) > 0
    assert {r["b"] for r in tables["width_vs_depth"]} == {"16", "64"}
    assert len(tables["targets"]) == 4
    assert "How to read this" in md and "Accuracy" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    for png in ("tiny-rho_sweep.png", "tiny-width_depth.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in md


def test_g_only_is_bitwise_the_alpha_zero_model():
    """The benchmark reads g-only off the QSS-E fit instead of fitting α = 0 again."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int) + (X[:, 2] > 1)
    params = dict(rho=0.2, n_levels=2, n_centroids=8, random_state=3)
    full = QSSClassifier(**params).fit(X, y)
    alpha0 = QSSClassifier(alpha=0.0, **params).fit(X, y)
    assert np.array_equal(g_only_outputs(full, X), alpha0._outputs(X))
    yr = X @ rng.normal(size=6) + rng.normal(size=400)
    reg = QSSRegressor(**params).fit(X, yr)
    reg0 = QSSRegressor(alpha=0.0, **params).fit(X, yr)
    assert np.array_equal(g_only_outputs(reg, X), reg0._outputs(X))


def test_rho_rule_depends_on_training_size_only():
    assert resolve_rho(60_000, 10) == (0.005, "")
    assert resolve_rho(1257, 10)[0] == 0.05  # digits: 6 rows at 0.5 %
    assert resolve_rho(309, 1)[0] == 0.2  # diabetes
    assert "raised" in resolve_rho(309, 1)[1]


def test_level1_purity_weights_cells_by_size():
    codes = np.array([0, 0, 0, 1, 1, 2])
    labels = np.array([1, 1, 0, 0, 1, 2])
    # cell 0: 2 of 3 agree, cell 1: 1 of 2, cell 2: 1 of 1 -> 4 of 6
    assert level1_purity(codes, labels) == pytest.approx(4 / 6)


def test_parse_mapping():
    assert parse_mapping("mnist=30000, fashion-mnist=10") == {"mnist": 30000, "fashion_mnist": 10}
    assert parse_mapping("") == {}
    assert parse_mapping("sentiment") == {"sentiment": None}  # all rows
    with pytest.raises(ValueError):
        parse_mapping("mnist=")


def test_cli_forwards_bench(capsys):
    from forgetting.cli import main as cli_main

    with pytest.raises(SystemExit) as exit_info:
        cli_main(["bench", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "forgetting bench" in out and "--datasets" in out and "--quick" in out


@pytest.mark.parametrize("features, width", [("hog", 520), ("pixels", 784)])
def test_image_rows_use_the_chosen_features(features, width):
    """MNIST rows get HOG features by default (all models see the same matrix), raw pixels on
    request; digits stays raw (8×8 is too small for 7-pixel cells)."""
    from conftest import source_missing

    from forgetting.datasets import DatasetUnavailableError
    from forgetting.encoders import EncoderUnavailableError

    try:
        data = paper.load_data("mnist", 300, image_features=features)
    except (DatasetUnavailableError, EncoderUnavailableError) as err:
        source_missing(err)
    assert data.X_train.shape == (300, width) and data.X_test.shape == (10000, width)
    assert data.X_train.dtype == np.float32
    assert ("HOG" in data.features) == (features == "hog")
    assert paper.load_data("digits", 300, image_features=features).X_train.shape[1] == 64
