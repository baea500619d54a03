"""``forgetting fit --data DIR``: a Parquet dataset directory fitted on a dask cluster writes the
store the in-memory fit of one Parquet file holding the same rows in the same order writes
(state digest, row order, predictions, and a forget after it); bad datasets fail with one line.

Issue 14, item 1 (the CLI side). The cluster is a LocalCluster of 2 worker processes, reached
with ``--scheduler``; one test lets the CLI start its own with ``--workers 2``. The files are
named part.1, part.2, part.10, so natural name order (dask's, and the rule) differs from the
lexicographic one, and the dataset holds the clutter real writers leave (_SUCCESS, .crc).
"""

from __future__ import annotations

import logging
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import classification_data, regression_data

from forgetting.cli import main
from forgetting.io import tables
from forgetting.store.durable import DurableModel

FAST_ARGS = ["--rho", "0.25", "--n-levels", "2", "--n-centroids", "8", "--rebuild", "sync"]
#: (file name, first row, end row): natural order part.1 < part.2 < part.10.
PARTS = [("part.1.parquet", 0, 70), ("part.2.parquet", 70, 150), ("part.10.parquet", 150, 240)]


@pytest.fixture(scope="module")
def scheduler():
    import distributed

    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.CRITICAL,
    ) as cluster:
        yield cluster.scheduler_address


def frame_columns(X, y, start, stop, ids=None):
    """A file's columns: string ids, labels, features (float32 and int64 ones) and a text
    column that the default selection leaves out."""
    columns = {
        "id": [f"u{i}" for i in range(start, stop)] if ids is None else ids[start:stop],
        "label": y[start:stop],
    }
    for j in range(X.shape[1]):
        values = X[start:stop, j]
        columns[f"f{j}"] = values.astype(np.float32) if j % 2 else values
    columns["count"] = np.arange(start, stop, dtype=np.int64) % 7
    columns["note"] = [f"row {i}" for i in range(start, stop)]
    return columns


def write_dataset(directory, X, y, ids=None):
    """The dataset directory and the single file holding its rows in natural order."""
    directory.mkdir()
    for name, start, stop in PARTS:
        pq.write_table(pa.table(frame_columns(X, y, start, stop, ids)), directory / name)
    (directory / "_SUCCESS").write_bytes(b"")
    (directory / ".part.1.parquet.crc").write_bytes(b"not parquet")
    single = directory.parent / f"{directory.name}.parquet"
    pq.write_table(pa.table(frame_columns(X, y, 0, len(y), ids)), single)
    return single


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def digest_line(out):
    return next(line for line in out.splitlines() if line.startswith("state digest:"))


def assert_same_store(path_a, path_b, X):
    """Same digest, same rows in the same order, same recorded columns, same predictions."""
    with (
        DurableModel.open(str(path_a), read_only=True) as a,
        DurableModel.open(str(path_b), read_only=True) as b,
    ):
        assert a.state_digest() == b.state_digest()
        assert a.feature_names == b.feature_names
        assert list(a.estimator.engine_.rows.ids) == list(b.estimator.engine_.rows.ids)
        if a.task == "classification":
            assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
        assert np.array_equal(a.predict(X), b.predict(X))


def test_dataset_fit_on_the_cluster_equals_the_single_file_fit(tmp_path, capsys, scheduler):
    X, y = classification_data()
    single = write_dataset(tmp_path / "rows", X, y)
    code, out_file, _ = run(
        capsys, "fit", "--data", single, "--store", tmp_path / "a.db", *FAST_ARGS
    )
    assert code == 0
    code, out_dir, err = run(
        capsys, "fit", "--data", tmp_path / "rows", "--store", tmp_path / "b.db",
        "--scheduler", scheduler, *FAST_ARGS,
    )  # fmt: skip
    assert code == 0, err
    assert f"on the dask cluster at {scheduler} (2 workers)" in err
    assert "3 Parquet files of" in err and "left out column(s) with no numbers in them: note" in err
    assert digest_line(out_dir) == digest_line(out_file)
    assert "feature columns: f0,f1,f2,f3,f4,f5,count" in out_dir
    features = np.column_stack([X, np.arange(240) % 7])
    assert_same_store(tmp_path / "a.db", tmp_path / "b.db", features)
    with DurableModel.open(str(tmp_path / "b.db"), read_only=True) as model:
        assert list(model.estimator.engine_.rows.ids) == [f"u{i}" for i in range(240)]
    code, out, err = run(capsys, "verify", "--store", tmp_path / "b.db")
    assert code == 0 and out.startswith("OK: identical"), err

    # --feature-cols and --id-type choose the same columns and ids on both paths, and a forget
    # after the distributed fit lands where the in-memory one does.
    picked = ["--feature-cols", "f3,f0,count", "--id-type", "str"]
    for data, store in ((single, "c.db"), (tmp_path / "rows", "d.db")):
        extra = ["--scheduler", scheduler] if data != single else []
        code, _, err = run(
            capsys, "fit", "--data", data, "--store", tmp_path / store, *picked, *extra, *FAST_ARGS
        )
        assert code == 0, err
        code, out, err = run(capsys, "forget", "--store", tmp_path / store, "--ids", "u3,u200")
        assert code == 0, err
    assert_same_store(tmp_path / "c.db", tmp_path / "d.db", features[:, [3, 0, 6]])


def test_the_exact_forest_fits_a_dataset_as_it_fits_the_single_file(tmp_path, capsys, scheduler):
    """``--model auto`` fits the exact forest on a dataset directory too: the workers read
    and check the files (an empty cell is a missing value), the trees grow from the gathered
    rows, and the store is the single file's, bit for bit."""
    from forgetting.store import DurableForest

    X, y = classification_data()
    X = X.copy()
    X[np.random.default_rng(5).random(X.shape) < 0.05] = np.nan
    single = write_dataset(tmp_path / "rows", X, y)
    args = ["--n-estimators", "6"]
    code, out_file, err = run(capsys, "fit", "--data", single, "--store", tmp_path / "a.db", *args)
    assert code == 0, err
    code, out_dir, err = run(
        capsys, "fit", "--data", tmp_path / "rows", "--store", tmp_path / "b.db",
        "--scheduler", scheduler, *args,
    )  # fmt: skip
    assert code == 0, err
    assert "fitting ExactForestClassifier" in err and "3 Parquet files of" in err
    assert digest_line(out_dir) == digest_line(out_file)
    features = np.column_stack([X, np.arange(240) % 7])
    with (
        DurableForest.open(str(tmp_path / "a.db"), read_only=True) as a,
        DurableForest.open(str(tmp_path / "b.db"), read_only=True) as b,
    ):
        assert a.estimator.ids_ == b.estimator.ids_
        assert np.array_equal(a.predict_proba(features), b.predict_proba(features))


def test_workers_starts_a_local_cluster_for_a_dask_written_regression_dataset(tmp_path, capsys):
    """``--workers 2``: the CLI's own LocalCluster. The dataset is what dask's to_parquet
    writes (part.N.parquet, a __null_dask_index__ column, integer ids): the index column is
    not a feature, as it is not in the single file written without it."""
    import dask.dataframe as dd
    import pandas as pd

    X, y = regression_data()
    frame = pd.DataFrame({"id": np.arange(1000, 1240), "label": y})
    for j in range(X.shape[1]):
        frame[f"x{j}"] = X[:, j]
    dd.from_pandas(frame, npartitions=3).to_parquet(tmp_path / "rows")
    assert "__null_dask_index__" in pq.read_schema(tmp_path / "rows" / "part.0.parquet").names
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "rows.parquet")
    common = ["--task", "regression", *FAST_ARGS]
    code, out_file, _ = run(
        capsys, "fit", "--data", tmp_path / "rows.parquet", "--store", tmp_path / "a.db", *common
    )
    assert code == 0
    code, out_dir, err = run(
        capsys, "fit", "--data", tmp_path / "rows", "--store", tmp_path / "b.db",
        "--workers", "2", *common,
    )  # fmt: skip
    assert code == 0, err
    assert "starting a local dask cluster of 2 worker processes" in err
    assert "on a local dask cluster of 2 worker processes" in err
    assert "feature columns: x0,x1,x2,x3,x4" in out_dir
    assert digest_line(out_dir) == digest_line(out_file)
    assert_same_store(tmp_path / "a.db", tmp_path / "b.db", X)


def test_a_bad_cell_read_on_a_worker_names_its_file_row_and_column(tmp_path, capsys, scheduler):
    X, y = classification_data()
    X[150 + 4, 2] = np.nan  # part.10.parquet, its 5th row
    write_dataset(tmp_path / "rows", X, y)
    code, _, err = run(
        capsys, "fit", "--data", tmp_path / "rows", "--store", tmp_path / "s.db",
        "--scheduler", scheduler, *FAST_ARGS,
    )  # fmt: skip
    assert code == 1
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert errors == [
        f"forgetting fit: error: {tmp_path / 'rows' / 'part.10.parquet'}, row 5, column 'f2': "
        "nan is not a finite number; fix the cell, or leave the column out with --feature-cols"
    ]
    assert not (tmp_path / "s.db").exists()


def _empty(d):
    d.mkdir()
    (d / "_SUCCESS").write_bytes(b"")


def _not_parquet(d):
    _good(d)
    (d / "notes.txt").write_text("hello")


def _mixed_types(d):
    _good(d)
    pq.write_table(pa.table({"id": [9], "label": [1], "f0": pa.array([1], pa.int32())}), d / "z")


def _mixed_columns(d):
    _good(d)
    pq.write_table(pa.table({"id": [9], "label": [1], "g0": [1.0]}), d / "z.parquet")


def _nested(d):
    _good(d)
    (d / "year=2026").mkdir()


def _good(d):
    d.mkdir()
    for i in range(2):
        pq.write_table(
            pa.table({"id": [2 * i, 2 * i + 1], "label": [0, 1], "f0": [0.5, 1.5]}),
            d / f"part.{i}.parquet",
        )


@pytest.mark.parametrize(
    "make, argv, message",
    [
        (_empty, [], "holds no Parquet files (names starting with . or _ are skipped)"),
        (_not_parquet, [], "notes.txt is not a readable Parquet file"),
        (_mixed_types, [], "z does not have the columns of part.0.parquet: column 'f0' is int32"),
        (_mixed_columns, [], "it lacks f0; it adds g0; every file of a dataset needs the same"),
        (_nested, [], "holds a subdirectory, 'year=2026'"),
        (_good, ["--label-col", "y"], "has no column 'y' (set --label-col); it has: id, label, f0"),
        (_good, ["--id-col", "key"], "has no column 'key' (set --id-col)"),
        (_good, ["--feature-cols", "f0,f9"], "has no column 'f9' (set --feature-cols)"),
        (_good, ["--text-col", "f0"], "--text-col does not apply to a Parquet dataset directory"),
    ],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_bad_datasets_fail_with_one_line_before_any_cluster(tmp_path, capsys, make, argv, message):
    make(tmp_path / "rows")
    code, out, err = run(
        capsys, "fit", "--data", tmp_path / "rows", "--store", tmp_path / "s.db",
        "--workers", "2", *argv, *FAST_ARGS,
    )  # fmt: skip
    assert code == 2 and out == ""
    (line,) = err.splitlines()  # one line, and no cluster was started
    assert line.startswith("forgetting fit: error: ") and message in line, line
    assert not (tmp_path / "s.db").exists()


def test_without_the_distributed_extra_a_directory_names_it(tmp_path, capsys, monkeypatch):
    _good(tmp_path / "rows")
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    code, _, err = run(capsys, "fit", "--data", tmp_path / "rows", "--store", tmp_path / "s.db")
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith("forgetting fit: error: ")
    assert 'pip install "forgetting[distributed]"' in line and "single .parquet file" in line


def test_cluster_options_with_one_file_are_a_usage_error(tmp_path, capsys):
    X, y = classification_data()
    single = write_dataset(tmp_path / "rows", X, y)
    code, _, err = run(
        capsys, "fit", "--data", single, "--store", tmp_path / "s.db", "--workers", "2"
    )
    assert code == 2 and "--scheduler and --workers fit a Parquet dataset directory" in err


def test_insert_and_predict_read_a_dataset_directory_in_memory(tmp_path, capsys):
    """insert and predict read a dataset into memory (pyarrow, no dask) and behave exactly as
    with the single file holding its rows."""
    X, y = classification_data()
    single = write_dataset(tmp_path / "rows", X, y)
    first = tmp_path / "first.parquet"
    pq.write_table(pa.table(frame_columns(X, y, 0, 240, [f"v{i}" for i in range(240)])), first)
    for store in ("a.db", "b.db"):
        code, _, err = run(capsys, "fit", "--data", first, "--store", tmp_path / store, *FAST_ARGS)
        assert code == 0, err
    code, out_file, _ = run(capsys, "insert", "--store", tmp_path / "a.db", "--data", single)
    assert code == 0
    code, out_dir, err = run(
        capsys, "insert", "--store", tmp_path / "b.db", "--data", tmp_path / "rows"
    )
    assert code == 0, err
    assert "insert: 240 row(s)" in out_dir
    assert_same_store(
        tmp_path / "a.db", tmp_path / "b.db", np.column_stack([X, np.arange(240) % 7])
    )
    code, predicted_file, _ = run(capsys, "predict", "--store", tmp_path / "a.db", "--data", single)
    code, predicted_dir, _ = run(
        capsys, "predict", "--store", tmp_path / "a.db", "--data", tmp_path / "rows"
    )
    assert code == 0 and predicted_dir == predicted_file
    assert predicted_dir.splitlines()[1].startswith("u0,")


def test_read_dataset_orders_files_naturally_and_names_a_bad_cells_file(tmp_path):
    X, y = classification_data()
    labels = y.astype(object)
    labels[70 + 1] = None  # part.2.parquet, its 2nd row
    write_dataset(tmp_path / "rows", X, labels)
    # Writers differ in string layout (string / large_string): the same values, one dataset.
    part = pq.read_table(tmp_path / "rows" / "part.10.parquet")
    part = part.set_column(
        0, pa.field("id", pa.large_string()), part.column(0).cast("large_string")
    )
    pq.write_table(part, tmp_path / "rows" / "part.10.parquet")
    dataset = tables.open_dataset(tmp_path / "rows")
    assert dataset.types["id"] == "string" and dataset.kinds["f0"] == "f"
    assert [f.path.rsplit("/", 1)[1] for f in dataset.files] == [name for name, _, _ in PARTS]
    assert [f.rows for f in dataset.files] == [70, 80, 90] and dataset.n_rows == 240
    table = tables.read_table(tmp_path / "rows")
    assert tables.id_column(table) == [f"u{i}" for i in range(240)]
    where = r"part\.2\.parquet, row 2, column 'label': nan is not an integer class"
    with pytest.raises(tables.TableError, match=where):
        tables.label_column(table, task="classification")


def test_a_terminal_sees_a_bar_over_the_clusters_chunks(tmp_path, capsys, scheduler, monkeypatch):
    """On a terminal (forced here: tests' stderr is a pipe, where the bar stays silent), fit
    --data shows one tqdm bar through fit_distributed's progress: pass 1's chunk, then each
    instance's pass 2 (240 rows, one 65,536-row chunk each: 1 + 3 chunks); the store is the
    one fitted without it."""
    from tqdm import tqdm

    import forgetting.cli.commands as commands

    X, y = classification_data()
    single = write_dataset(tmp_path / "rows", X, y)
    code, out_file, _ = run(
        capsys, "fit", "--data", single, "--store", tmp_path / "a.db", *FAST_ARGS
    )
    assert code == 0
    monkeypatch.setattr(
        commands,
        "progress",
        lambda it, **kw: tqdm(it, disable=False, file=sys.stderr, leave=True, **kw),
    )
    code, out_dir, err = run(
        capsys, "fit", "--data", tmp_path / "rows", "--store", tmp_path / "b.db",
        "--scheduler", scheduler, *FAST_ARGS,
    )  # fmt: skip
    assert code == 0, err
    # tqdm redraws at most every 0.1 s, so the earlier stages may not show; the last does
    assert "pass 2, instance 2: 100%" in err and "4/4" in err and "chunk" in err
    assert digest_line(out_dir) == digest_line(out_file)
