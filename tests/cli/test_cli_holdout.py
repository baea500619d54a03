"""``forgetting fit --holdout FRACTION``: a seeded (and, for classification, stratified) split
of the file's rows; the model is fitted on the rest and the store holds the rest only; the
line printed beside the model's name is the stored model's held-out accuracy (regression:
RMSE and R²). A fraction outside (0, 0.5], or one leaving too few rows to score, is refused
in one line before anything is written.
"""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
from helpers import classification_data, regression_data

from forgetting.cli import main
from forgetting.store import DurableModel


def write_csv(path, X, y, ids):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "label", *(f"f{j}" for j in range(X.shape[1]))])
        for i in range(len(y)):
            writer.writerow([ids[i], repr(y[i].item()), *map(repr, X[i].tolist())])


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def held_out_ids(store, ids):
    """Which of ``ids`` the store never saw, and the others (in the file's order)."""
    with DurableModel.open(store, read_only=True) as model:
        status = {i: model.lookup(i)["status"] for i in ids}
    assert set(status.values()) <= {"present", "never_seen"}
    return [i for i in ids if status[i] == "never_seen"], [
        i for i in ids if status[i] != "never_seen"
    ]


def digest(capsys, store):
    code, out, _ = run(capsys, "inspect", "--store", store, "--json")
    assert code == 0
    return json.loads(out)["state_digest"]


def test_classification_prints_the_held_out_accuracy_of_the_stored_model(tmp_path, capsys):
    X, y = classification_data()  # 240 rows, 3 classes
    ids = [f"user-{i}" for i in range(len(y))]
    data, store = tmp_path / "train.csv", tmp_path / "model.db"
    write_csv(data, X, y, ids)

    code, out, err = run(capsys, "fit", "--data", data, "--store", store, "--holdout", "0.2")
    assert code == 0, err
    line = re.search(
        r"^held-out accuracy (\d\.\d{4}) on 48 rows \(ExactForestClassifier\)$", out, re.M
    )
    assert line, out
    assert "192 rows" in out and "48 rows held out" in err

    # the store holds the rest only; the held-out rows are stratified by class
    held, kept = held_out_ids(store, ids)
    assert len(held) == 48 and len(kept) == 192
    at = [ids.index(i) for i in held]
    for label in np.unique(y):
        assert abs(np.sum(y[at] == label) - 0.2 * np.sum(y == label)) <= 1

    # the printed accuracy is the stored model's on those rows
    with DurableModel.open(store, read_only=True) as model:
        accuracy = np.mean(model.predict(X[at]) == y[at])
    assert line.group(1) == f"{accuracy:.4f}"

    # the store is the one `fit` writes for the file without the held-out rows, in its order
    rest = [ids.index(i) for i in kept]
    write_csv(tmp_path / "rest.csv", X[rest], y[rest], kept)
    code, out, err = run(
        capsys, "fit", "--data", tmp_path / "rest.csv", "--store", tmp_path / "r.db"
    )
    assert code == 0 and "held-out" not in out, err
    assert digest(capsys, store) == digest(capsys, tmp_path / "r.db")

    # seeded: the same split again; another --random-state draws another one
    code, _, err = run(
        capsys, "fit", "--data", data, "--store", store, "--holdout", "0.2", "--overwrite"
    )
    assert code == 0, err
    assert held_out_ids(store, ids)[0] == held
    code, _, err = run(
        capsys, "fit", "--data", data, "--store", tmp_path / "s.db", "--holdout", "0.2",
        "--random-state", "1",
    )  # fmt: skip
    assert code == 0, err
    assert held_out_ids(tmp_path / "s.db", ids)[0] != held


def test_regression_prints_the_held_out_rmse_and_r2(tmp_path, capsys):
    X, y = regression_data()  # 240 rows
    ids = list(range(len(y)))
    data, store = tmp_path / "train.csv", tmp_path / "model.db"
    write_csv(data, X, y, ids)

    code, out, err = run(
        capsys, "fit", "--data", data, "--store", store, "--task", "regression", "--holdout", "0.25"
    )
    assert code == 0, err
    line = re.search(
        r"^held-out RMSE (\S+) and R² (-?\d\.\d{4}) on 60 rows \(ExactForestRegressor\)$", out, re.M
    )
    assert line, out
    held, _ = held_out_ids(store, ids)
    assert len(held) == 60
    with DurableModel.open(store, read_only=True) as model:
        predicted = model.predict(X[held])
    rmse = np.sqrt(np.mean((predicted - y[held]) ** 2))
    r2 = 1 - np.sum((predicted - y[held]) ** 2) / np.sum((y[held] - y[held].mean()) ** 2)
    assert line.group(1) == f"{rmse:.5g}" and line.group(2) == f"{r2:.4f}"
    assert 0.0 < r2 <= 1.0  # a fitted model, not noise


@pytest.mark.parametrize(
    "fraction, rows, fragment",
    [
        ("0", 240, "in (0, 0.5]"),
        ("0.51", 240, "in (0, 0.5]"),
        ("-0.2", 240, "in (0, 0.5]"),
        ("nan", 240, "in (0, 0.5]"),
        ("a fifth", 240, "in (0, 0.5]"),
        ("0.02", 240, "holds out 5 of 240 rows"),
        ("0.2", 30, "holds out 6 of 30 rows"),
    ],
)
def test_a_bad_fraction_or_too_few_rows_is_refused_in_one_line(
    tmp_path, capsys, fraction, rows, fragment
):
    X, y = classification_data()
    write_csv(tmp_path / "d.csv", X[:rows], y[:rows], list(range(rows)))
    store = tmp_path / "model.db"
    code, out, err = run(
        capsys, "fit", "--data", tmp_path / "d.csv", "--store", store, "--holdout", fraction
    )
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert lines[-1].startswith("forgetting fit: error: --holdout") and fragment in lines[-1]
    assert sum("error" in line for line in lines) == 1
    assert not store.exists()


def test_a_class_of_one_row_cannot_be_stratified_and_a_dataset_directory_is_refused(
    tmp_path, capsys
):
    X, y = classification_data()
    y = y.copy()
    y[7] = 9  # one row of class 9
    write_csv(tmp_path / "d.csv", X, y, list(range(len(y))))
    code, _, err = run(
        capsys,
        "fit",
        "--data",
        tmp_path / "d.csv",
        "--store",
        tmp_path / "a.db",
        "--holdout",
        "0.2",
    )
    assert code == 2 and "class 9 has 1 row" in err.strip().splitlines()[-1]

    (tmp_path / "parts").mkdir()
    code, _, err = run(
        capsys,
        "fit",
        "--data",
        tmp_path / "parts",
        "--store",
        tmp_path / "b.db",
        "--holdout",
        "0.2",
    )
    assert code == 2 and "not a Parquet dataset directory" in err.strip().splitlines()[-1]
    assert not (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()


def test_a_raw_table_is_split_as_a_frame(tmp_path, capsys):
    X, y = classification_data()
    with open(tmp_path / "raw.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "label", "amount", "plan"])
        for i in range(len(y)):
            amount = "" if i % 9 == 0 else repr(float(X[i, 0]))  # a missing value
            writer.writerow([f"u{i}", y[i], amount, ("free", "pro", "team")[int(X[i, 1] > 0)]])
    code, out, err = run(
        capsys, "fit", "--data", tmp_path / "raw.csv", "--store", tmp_path / "m.db",
        "--raw-table", "--holdout", "0.25", "--rho", "0.25", "--rebuild", "sync",
    )  # fmt: skip
    assert code == 0, err
    assert "wrote" in out and ": 180 rows," in out
    assert re.search(r"^held-out accuracy \d\.\d{4} on 60 rows \(QSSClassifier\)$", out, re.M), out
