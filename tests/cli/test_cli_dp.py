"""``forgetting fit --mode dp --epsilon E``: label-DP from the command line. ``--model auto``
picks the DP forest or QSS-DP by the rule measured in benchmarks/results/privacy-forest-dp.md
(forgetting.privacy.randomized_response.dp_model_for) and says which in the line it prints;
the store reopens with the model's privacy ledger, so a later command refuses what the model
refuses. Without --epsilon, or --epsilon/--delta without --mode dp, one line and nothing
written."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from forgetting.cli import main
from forgetting.privacy.randomized_response import DP_FOREST_MIN_ROWS, dp_model_for
from forgetting.store import DurableModel


def write_csv(path, X, y, ids):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "label", *(f"f{j}" for j in range(X.shape[1]))])
        for i in range(len(y)):
            writer.writerow([ids[i], int(y[i]), *map(repr, X[i].tolist())])


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse refuses a value before the command runs
        code = exit_.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def table(n, k, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = np.clip((X[:, 0] * k / 2 + k / 2).astype(int), 0, k - 1)
    return X, y, [f"r{i}" for i in range(n)]


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "key"
    path.write_text("a secret of 16+ bytes\n")
    path.chmod(0o600)
    return path


def test_the_rule_follows_the_measured_signal_and_size():
    assert dp_model_for("classification", 20_000, 2, 8.0)[0] == "forest"
    assert dp_model_for("classification", 20_000, 2, 1.0)[0] == "forest"  # p - q = 0.46
    assert dp_model_for("classification", 20_000, 26, 1.0)[0] == "qss"  # p - q = 0.06
    assert dp_model_for("classification", DP_FOREST_MIN_ROWS - 1, 2, 8.0)[0] == "qss"
    assert dp_model_for("classification", None, 2, 8.0)[0] == "forest"  # a dataset directory
    assert dp_model_for("regression", 20_000, 0, 8.0)[0] == "qss"


def test_auto_fits_the_dp_forest_on_a_large_binary_table(tmp_path, capsys, key):
    X, y, ids = table(DP_FOREST_MIN_ROWS + 200, 2)
    data, store = tmp_path / "t.csv", tmp_path / "s.db"
    write_csv(data, X, y, ids)
    args = ["--data", data, "--id-col", "id", "--label-col", "label", "--store", store]
    code, _, err = run(
        capsys, "fit", *args, "--mode", "dp", "--epsilon", "2", "--secret-key-file", key
    )
    assert code == 0, err
    assert "ExactForestClassifier" in err and "chose the DP forest" in err
    code, _, err = run(capsys, "forget", "--store", store, "--ids", "r3", "--secret-key-file", key)
    assert code == 0, err
    with DurableModel.open(store, secret_key="a secret of 16+ bytes") as model:
        report = model.estimator.privacy_
        assert report.epsilon == 2.0 and report.n_forgotten == 1
        with pytest.raises(ValueError, match="forgotten earlier"):
            model.insert(X[3:4], y[3:4], ["r3"])


def test_auto_fits_qss_dp_where_randomized_response_keeps_little(tmp_path, capsys, key):
    X, y, ids = table(600, 12)
    data, store = tmp_path / "t.csv", tmp_path / "s.db"
    write_csv(data, X, y, ids)
    args = ["--data", data, "--id-col", "id", "--label-col", "label", "--store", store]
    code, _, err = run(
        capsys, "fit", *args, "--mode", "dp", "--epsilon", "1", "--secret-key-file", key
    )
    assert code == 0, err
    assert "QSSClassifier" in err and "chose QSS-DP" in err
    with DurableModel.open(store, secret_key="a secret of 16+ bytes", read_only=True) as model:
        params = model.estimator.get_params()
        assert params["mode"] == "dp" and params["epsilon"] == 1.0 and params["delta"] == 1e-5


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--mode", "dp"], "--mode dp needs --epsilon"),
        (["--epsilon", "1"], "--epsilon applies to --mode dp only"),
        (["--mode", "exact", "--delta", "1e-6"], "--delta applies to --mode dp"),
        (["--mode", "dp", "--epsilon", "0"], "must be a finite number > 0"),
    ],
)
def test_bad_dp_options_are_one_line_and_write_nothing(tmp_path, capsys, key, extra, needle):
    X, y, ids = table(300, 2)
    data, store = tmp_path / "t.csv", tmp_path / "s.db"
    write_csv(data, X, y, ids)
    args = ["--data", data, "--id-col", "id", "--label-col", "label", "--store", store]
    code, _, err = run(capsys, "fit", *args, *extra, "--secret-key-file", key)
    assert code == 2 and needle in err
    assert not store.exists()
