"""The paper benchmark runs end to end on tiny data, writes every table and figure, and its
shortcuts (g-only from QSS-E's schemas, the ρ rule, purity) mean what they claim."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from forgetting import QSSClassifier, QSSRegressor
from forgetting_lab.bench import paper
from forgetting_lab.bench.paper import (
    g_only_outputs,
    level1_purity,
    main,
    parse_mapping,
    resolve_rho,
)

TABLES = {
    "anchors": paper.ANCHOR_COLUMNS,
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
    assert "Command: `python -m forgetting_lab.bench.paper --datasets digits,diabetes --quick" in md
    tables = {}
    for slug, columns in TABLES.items():
        header, rows = _read(tmp_path / f"tiny-{slug}.csv")
        assert header == columns, slug
        tables[slug] = rows
    (acc,) = tables["accuracy"]
    assert acc["dataset"] == "digits" and "±" in acc["QSS-L"]
    assert "ρ raised" in acc["note"]  # 800 rows are too few for ρ = 0.5 %: said, not hidden
    assert {r["model"] for r in tables["regression"]} == set(paper.MODELS) | {"HGB", "SISA-HGB"}
    anchors = {r["dataset"]: r for r in tables["anchors"]}
    assert set(anchors) == {"digits", "diabetes"}
    digits, diabetes = anchors["digits"], anchors["diabetes"]
    assert digits["metric"] == "accuracy" and diabetes["metric"] == "rmse"
    assert digits["best full-data"] in ("HGB", "LR", "exact ridge")
    assert digits["MLP"] == "nan" and digits["HGB raw"] == "nan"  # not an embedding/raw set
    best = max(float(digits[m]) for m in ("HGB", "LR", "exact ridge"))
    assert float(digits["best"]) == pytest.approx(best)
    gap = 100 * (float(digits["QSS-E"]) - best)
    assert float(digits["gap (pp; RMSE %)"]) == pytest.approx(gap, abs=0.006)
    best_rmse = min(float(diabetes[m]) for m in ("HGB", "exact ridge"))
    rmse_gap = 100 * (float(diabetes["QSS-E"]) - best_rmse) / best_rmse
    assert float(diabetes["gap (pp; RMSE %)"]) == pytest.approx(rmse_gap, abs=0.006)
    for row in anchors.values():
        assert all(float(row[f"fit_s {m}"]) > 0 for m in ("QSS-E", "HGB", "SISA", "SISA-HGB"))
    assert "Δ(QSS-E−best) pp" in acc and float(acc["Δ(QSS-E−best) pp"]) == pytest.approx(
        gap, abs=0.006
    )
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
        assert float(row["t_fast_p95_ms"]) >= float(row["t_fast_ms"])
        assert 20 <= int(row["fast_forgets"]) <= 100
        assert float(row["retrain_s"]) > 0 and float(row["speedup_vs_retrain"]) > 0
        assert float(row["t_fast_vs_sisa_shard"]) == pytest.approx(
            float(row["sisa_s"]) * 1e3 / float(row["t_fast_ms"]), rel=1e-3
        )
        # q is the p-instance rebuild rate at the measured D° share, and the expected cost
        # is the mix of the two measured times at that rate
        q, p = float(row["q_rebuild"]), int(row["p"])
        assert q == pytest.approx(1 - (1 - float(row["effective_rho"])) ** p, rel=1e-3)
        expected = (1 - q) * float(row["t_fast_ms"]) + q * 1e3 * float(row["t_rebuild_s"])
        assert float(row["expected_ms"]) == pytest.approx(expected, rel=1e-3)
    assert {r["b"] for r in tables["width_vs_depth"]} == {"16", "64"}
    purity = {r["mode"]: r for r in tables["cell_purity"]}
    assert set(purity) == {"QSS-E", "QSS-L"} and purity["QSS-L"]["partition"] == "rq"
    for row in purity.values():
        assert float(row["majority_class_share"]) <= float(row["level1_purity"]) <= 1.0
    # the paper's ρ always has a sweep point, D° topped up by the library where n·ρ is small
    paper_rho = [r for r in tables["rho_sweep"] if float(r["rho"]) == paper.PAPER_RHO]
    assert {r["dataset"] for r in paper_rho} == {"digits", "diabetes"}
    assert all(int(r["schema_rows"]) >= 50 for r in paper_rho)
    targets = [r["target"] for r in tables["targets"]]
    assert len(targets) == 7
    assert any("of the best full-data model" in t for t in targets)
    assert any("QSS-E within 1 pp of SISA" in t for t in targets)
    assert any("p50 ≤ 1 ms" in t for t in targets)
    assert "the issue" not in md.lower()
    assert not re.search(r"\{[A-Za-z_]\w*\}", md)  # no f-string left unformatted
    for block in re.findall(r"(?m)(?:^\|.*\|\n)+", md):  # no cell text breaks its table
        assert len({line.count("|") for line in block.splitlines()}) == 1, block[:200]
    assert "What this run measured" in md and "`--quick`**: a smoke test" in md
    assert "How to read this" in md and "Accuracy" in capsys.readouterr().out
    assert "Anchors (the headline)" in md and "max_iter = 1000" in md
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
        cli_main(["bench", "paper", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--datasets" in out and "--quick" in out  # the paper benchmark's own options
    assert cli_main(["bench"]) == 0  # no name: the menu, nothing runs
    assert "forgetting bench NAME" in capsys.readouterr().out


@pytest.mark.parametrize("features, width", [("hog", 520), ("pixels", 784)])
def test_image_rows_use_the_chosen_features(features, width):
    """MNIST rows get HOG features by default (all models see the same matrix), raw pixels on
    request; digits stays raw (8×8 is too small for 7-pixel cells)."""
    from helpers import source_missing

    from forgetting.encoders import EncoderUnavailableError
    from forgetting_lab.datasets import DatasetUnavailableError

    try:
        data = paper.load_data("mnist", 300, image_features=features)
    except (DatasetUnavailableError, EncoderUnavailableError) as err:
        source_missing(err)
    assert data.X_train.shape == (300, width) and data.X_test.shape == (10000, width)
    assert data.X_train.dtype == np.float32
    assert ("HOG" in data.features) == (features == "hog")
    assert paper.load_data("digits", 300, image_features=features).X_train.shape[1] == 64


def _data(key: str, k: int, rho: float = paper.PAPER_RHO, learned: bool = False) -> paper.Data:
    empty = np.zeros((0, 1), dtype=np.float32)
    return paper.Data(
        key=key,
        dataset=key,
        task="classification",
        features="f",
        X_train=empty,
        y_train=np.zeros(0),
        X_test=empty,
        y_test=np.zeros(0),
        n_classes=k,
        rho=rho,
        learned_encoder=learned,
    )


def _runs(key: str, **acc: float) -> list[dict]:
    names = {"g_only": "g-only", "qsse": "QSS-E", "sisa": "SISA"}
    return [{"dataset": key, "model": names[m], "accuracy": a} for m, a in acc.items()]


def test_exact_mode_target_bands():
    """1 pp on low-k sets, 3 pp on k ≥ 20 sets, never below g-only; encoder rows not judged."""
    from forgetting_lab.bench.paper.tables import exact_mode_target

    low, high = _data("low", 10), _data("high", 26, rho=0.01)
    ok = _runs("low", g_only=0.8, qsse=0.905, sisa=0.91) + _runs(
        "high", g_only=0.5, qsse=0.83, sisa=0.85
    )
    sweep = [
        {"dataset": "high", "mode": "QSS-E", "rho": paper.PAPER_RHO, "accuracy": 0.8,
         "schema_rows": 130, "gap_pp": -5.0},
    ]  # fmt: skip
    row = exact_mode_target([low, high], ok, sweep)
    assert row["met"] is True
    assert "at ρ = 0.01" in row["evidence"] and "D° of 130 rows" in row["evidence"]
    low_miss = _runs("low", g_only=0.8, qsse=0.895, sisa=0.91)  # −1.5 pp
    assert exact_mode_target([low], low_miss)["met"] is False
    high_miss = _runs("high", g_only=0.5, qsse=0.81, sisa=0.85)  # −4 pp
    assert exact_mode_target([high], high_miss)["met"] is False
    below_g = _runs("low", g_only=0.92, qsse=0.915, sisa=0.91)
    row = exact_mode_target([low], below_g)
    assert row["met"] is False and "below g-only" in row["evidence"]
    enc = _data("enc", 2, learned=True)
    row = exact_mode_target([low, enc], ok + _runs("enc", g_only=0.9, qsse=0.5, sisa=0.9))
    assert row["met"] is True and "not judged: enc" in row["evidence"]


def test_fast_path_target():
    from forgetting_lab.bench.paper.tables import fast_path_target

    def row(name, n, t_fast, sisa_s):
        return {"dataset": name, "mode": "QSS-E", "n_train": n, "t_fast_ms": t_fast,
                "t_fast_p95_ms": 2 * t_fast, "sisa_s": sisa_s,
                "t_fast_vs_sisa_shard": sisa_s * 1e3 / t_fast}  # fmt: skip

    small, big = row("small", 100, 0.5, 0.001), row("big", 60_000, 0.4, 3.0)
    label = {**big, "mode": "QSS-L", "t_fast_ms": 50.0}  # label mode is not judged
    assert fast_path_target([small, big, label])["met"] is True  # ratio judged on the largest
    slow = row("big", 60_000, 1.5, 3.0)
    result = fast_path_target([small, slow])
    assert result["met"] is False and "p50 > 1 ms on big" in result["evidence"]
    cheap_shard = row("big", 60_000, 0.5, 0.2)  # 400×
    assert fast_path_target([cheap_shard])["met"] is False


def test_cell_purity_averages_tables():
    labels = np.array([0, 0, 1, 1])
    codes = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])  # table 0 pure, table 1 mixed
    assert paper.cell_purity(codes, labels) == pytest.approx((1.0 + 0.5) / 2)
    assert paper.cell_purity(codes[:, 0], labels) == 1.0


@pytest.mark.parametrize("mode", ["exact", "label"])
def test_purity_row_reads_cells_through_the_schema(mode):
    """Purity of the fitted model's own cells: flat tables averaged (exact mode's default
    partition), the RQ codebook's level 1 (label mode), each averaged over the instances."""
    from forgetting_lab.bench.paper.stages import purity_row

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 5)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0.5)
    data = _data("toy", 4, rho=0.2)
    data.X_train, data.y_train = X, y
    model = paper.make_qss(data, mode, 0).fit(X, y, np.arange(600))
    row = purity_row(data, mode, model)
    expected = []
    for r in range(model.n_instances):
        codes, _ = model.engine_.schema_of(r).transform(X)
        cells = codes if mode == "exact" else codes[:, :1]
        expected.append(np.mean([level1_purity(cells[:, t], y) for t in range(cells.shape[1])]))
    assert row["level1_purity"] == pytest.approx(float(np.mean(expected)))
    assert (row["partition"] == "rq") == (mode == "label")
    assert row["majority_class_share"] <= row["level1_purity"] <= 1.0


def test_fast_forgets_stop_at_the_budget_but_not_below_the_minimum():
    from forgetting_lab.bench.paper.stages import fast_forget_ms

    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    model = QSSClassifier(rho=0.2, random_state=0).fit(X, y)
    calls, totals = fast_forget_ms(model, 40, rng, X[:1], budget_s=0.0, at_least=3)
    assert len(calls) == len(totals) == 3
    assert all(t >= c > 0 for c, t in zip(calls, totals, strict=True))
    _, totals = fast_forget_ms(model, 5, rng, X[:1])  # no budget: all asked for
    assert len(totals) == 5


def test_letter_is_a_paper_set():
    """The k ≥ 20 set loads through the benchmark with its own features and ρ rule."""
    from helpers import source_missing

    from forgetting_lab.datasets import DatasetUnavailableError

    assert "letter" in paper.data.DEFAULT_DATASETS.split(",")
    try:
        data = paper.load_data("letter", 400)
    except DatasetUnavailableError as err:
        source_missing(err)
    assert data.n_classes == 26 and data.X_train.shape == (400, 16)
    assert data.X_test.shape == (4000, 16) and data.full_train == 16_000
    assert data.rho * 400 >= 5 * 26 and "ρ raised" in data.notes[0]
    assert resolve_rho(16_000, 26)[0] == 0.01  # 80 rows at 0.5 % < 5·26


def test_accuracy_only_run_with_raw_anchor(tmp_path):
    """``--stages accuracy --modes exact``: QSS-E against the anchors only, the skipped stages'
    tables left out and said so; a mixed table gets the HGB raw anchor on its DataFrame."""
    from helpers import source_missing

    from forgetting_lab.datasets import DatasetUnavailableError

    try:
        paper.load_data("credit", 50)
    except DatasetUnavailableError as err:
        source_missing(err)
    argv = ["--datasets", "credit", "--quick", "--stages", "accuracy", "--modes", "exact",
            "--width-depth", "", "--out", str(tmp_path), "--name", "acc",
            "--why", "a test of the subset options"]  # fmt: skip
    assert main(argv) == 0
    md = (tmp_path / "acc.md").read_text()
    assert "Stages run**: accuracy; QSS modes: exact; not run: exactness, deletion" in md
    assert "(given with `--why`): a test of the subset options" in md
    assert "not in this one: digits, mnist" in md and "timing rounds" not in md
    for slug in ("exactness", "deletion_cost", "rho_sweep", "width_vs_depth"):
        assert not (tmp_path / f"acc-{slug}.csv").exists(), slug
    assert not list(tmp_path.glob("*.png")) and ".png" not in md  # no empty panels
    _, runs = _read(tmp_path / "acc-accuracy_per_seed.csv")
    models = {r["model"] for r in runs}
    assert "QSS-L" not in models and {"QSS-E", "g-only", "HGB", "HGB raw", "LR"} <= models
    (row,) = _read(tmp_path / "acc-anchors.csv")[1]
    assert row["dataset"] == "credit" and float(row["HGB raw"]) > 0.5
    assert float(row["fit_s HGB raw"]) > 0


def test_best_full_data_and_gap():
    from forgetting_lab.bench.anchors import best_full_data, gap

    scores = {"HGB": 0.9, "LR": 0.92, "SISA": 0.99, "MLP": float("nan")}
    assert best_full_data(scores, True) == ("LR", 0.92)  # SISA is not a full-data model
    assert best_full_data({"HGB": 2.0, "exact ridge": 1.5}, False) == ("exact ridge", 1.5)
    assert best_full_data({"SISA": 0.9}, True)[0] == ""
    assert gap(0.9, 0.92, True) == pytest.approx(-2.0)
    assert gap(1.53, 1.5, False) == pytest.approx(2.0)  # RMSE 2 % above the best


def test_anchor_target_bands():
    from forgetting_lab.bench.paper.tables import anchor_target

    cls, reg = _data("cls", 3), _data("reg", 1)
    reg.task = "regression"

    def runs(key, metric, **models):
        return [
            {"dataset": key, "model": m.replace("_", " "), metric: v} for m, v in models.items()
        ]

    ok = runs("cls", "accuracy", **{"QSS-E": 0.905, "HGB": 0.91, "LR": 0.8}) + runs(
        "reg", "rmse", **{"QSS-E": 1.01, "HGB": 1.0, "exact_ridge": 1.2}
    )
    assert anchor_target([cls, reg], ok)["met"] is True
    miss = runs("cls", "accuracy", **{"QSS-E": 0.89, "HGB": 0.91})
    row = anchor_target([cls], miss)
    assert row["met"] is False and "missed on cls" in row["evidence"]
    assert "−" not in row["evidence"] and "-2.00 pp vs HGB" in row["evidence"]
    slow = runs("reg", "rmse", **{"QSS-E": 1.03, "HGB": 1.0})
    assert anchor_target([reg], slow)["met"] is False


def test_anchor_builders_per_kind_of_set():
    """HGB and SISA-HGB everywhere; LR for classes; the MLP on frozen-embedding sets only, with
    the documented settings; HGB raw only with a raw frame."""
    from forgetting_lab.bench import anchors

    tabular = anchors.anchor_builders("adult", True, raw=True)
    assert set(tabular) == {"SISA-HGB", "HGB", "LR", "HGB raw"}
    assert tabular["HGB raw"][1] is True and tabular["HGB"][1] is False
    assert set(anchors.anchor_builders("diamonds", False, raw=False)) == {"SISA-HGB", "HGB"}
    embedding = anchors.anchor_builders("sentiment", True, raw=False)
    mlp = embedding["MLP"][0](3)
    assert mlp.random_state == 3 and mlp.hidden_layer_sizes == (256,) and mlp.early_stopping
    assert embedding["LR"][0](0).max_iter == anchors.LR_MAX_ITER
    hgb = tabular["HGB raw"][0](5)
    assert hgb.random_state == 5 and hgb.categorical_features == "from_dtype"
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    assert anchors.fit_anchor(embedding["MLP"][0](0), X, y) > 0
    sisa = tabular["SISA-HGB"][0](1)
    assert anchors.fit_anchor(sisa, X, y) > 0 and len(sisa.estimators_) == anchors.N_SHARDS


def test_has_native_columns():
    pd = pytest.importorskip("pandas")
    from forgetting_lab.bench.anchors import has_native_columns

    assert not has_native_columns(None)
    assert not has_native_columns(pd.DataFrame({"a": [1.0, 2.0]}))
    assert has_native_columns(pd.DataFrame({"a": [1.0, np.nan]}))
    assert has_native_columns(pd.DataFrame({"c": pd.Categorical(["x", "y"])}))
