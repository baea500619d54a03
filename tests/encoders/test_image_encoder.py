"""Tests for the frozen HOG image encoder (forgetting.encoders.image).

scikit-image comes from an installed package: when it is missing these tests skip with the
install command, unless FORGETTING_REQUIRE_DATA=1 (CI), where they fail instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FAST, assert_same_model, schema_ids, source_missing

from forgetting import QSSClassifier
from forgetting.encoders import EncoderUnavailableError, HOGEncoder
from forgetting.encoders import image as IM


@pytest.fixture(scope="module", autouse=True)
def skimage_ok() -> None:
    try:
        IM._import_hog()
    except EncoderUnavailableError as err:
        source_missing(err)


def _strokes(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic 28×28 'images': class 0 horizontal bars, 1 vertical, 2 diagonal, plus noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.uniform(0, 0.2, size=(n, 28, 28))
    for i, label in enumerate(y):
        at = rng.integers(4, 24)
        if label == 0:
            X[i, at - 1 : at + 2, 3:25] += 0.8
        elif label == 1:
            X[i, 3:25, at - 1 : at + 2] += 0.8
        else:
            idx = np.arange(3, 25)
            X[i, idx, np.clip(idx + at - 14, 0, 27)] += 0.8
    return X.reshape(n, 784).astype(np.float32), y


def test_shape_dtype_and_matches_skimage_directly() -> None:
    from skimage.feature import hog

    X, _ = _strokes(5)
    enc = HOGEncoder()
    out = enc.transform(X)
    assert out.shape == (5, 520) == (5, enc.output_dim)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    img = X[3].reshape(28, 28).astype(np.float64)
    ref = hog(img, orientations=9, pixels_per_cell=(7, 7), cells_per_block=(2, 2))
    assert np.array_equal(out[3, :324], ref.astype(np.float32))
    pooled = img.reshape(14, 2, 14, 2).mean(axis=(1, 3)).ravel()
    np.testing.assert_allclose(out[3, 324:], pooled, rtol=1e-6)
    # The 3-D form is the same images.
    assert np.array_equal(enc.transform(X.reshape(5, 28, 28)), out)


def test_each_row_is_a_pure_function_of_its_image() -> None:
    """Encoding in any batch or order gives the same bits per image (exact deletion needs it)."""
    X, _ = _strokes(40, seed=1)
    enc = HOGEncoder()
    full = enc.transform(X)
    perm = np.random.default_rng(0).permutation(40)
    assert np.array_equal(enc.transform(X[perm]), full[perm])
    one_by_one = np.concatenate([enc.transform(X[i : i + 1]) for i in range(40)])
    assert np.array_equal(one_by_one, full)
    assert np.array_equal(enc.transform(X[:0]), full[:0])


def test_frozen_fit_ignores_data() -> None:
    X, y = _strokes(12)
    enc = HOGEncoder()
    assert enc.learned is False
    before = enc.transform(X)
    assert enc.fit(X[::-1], y, seed=7) is enc
    assert np.array_equal(enc.transform(X), before)


def test_settings_change_width() -> None:
    enc = HOGEncoder(orientations=8, pixels_per_cell=4, cells_per_block=1, pool=0)
    assert enc.output_dim == 7 * 7 * 8
    assert enc.transform(np.zeros((2, 784))).shape == (2, 392)
    small = HOGEncoder(image_shape=(8, 8), pixels_per_cell=4, cells_per_block=2, pool=2)
    assert small.transform(np.ones((3, 64))).shape == (3, small.output_dim) == (3, 36 + 16)


@pytest.mark.parametrize(
    "X, match",
    [
        (np.zeros((2, 783)), "expects"),
        (np.zeros(784), "expects"),
        (np.zeros((2, 27, 28)), "expects"),
        (np.full((2, 784), np.nan), "NaN"),
        (np.full((1, 784), np.inf), "NaN or infinite"),
        (np.array([["a"] * 784]), "numeric"),
    ],
)
def test_bad_images_are_refused(X: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HOGEncoder().transform(X)


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(pixels_per_cell=20), "fewer than one"),
        (dict(cells_per_block=5), "fewer than one"),
        (dict(orientations=0), "orientations"),
        (dict(pool=3), "pool"),
        (dict(pool=-1), "pool"),
    ],
)
def test_bad_settings_are_refused(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HOGEncoder(**params)


def test_missing_scikit_image_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(IM, "_SKIMAGE_FEATURE_MODULE", "forgetting_no_such_module_xyz")
    with pytest.raises(EncoderUnavailableError, match=r"forgetting\[image\]"):
        HOGEncoder().transform(np.zeros((1, 784)))


def test_qss_on_hog_features_forgets_exactly() -> None:
    """Frozen features in front of QSS: forget ≡ refit without the rows, bit for bit."""
    X, y = _strokes(240, seed=2)
    F = HOGEncoder().transform(X)
    ids = np.arange(240)
    model = QSSClassifier(**FAST).fit(F, y, ids)
    d0 = schema_ids(model, 0)[0]
    gone = [d0, *[i for i in (5, 77) if i != d0]]
    model.forget(gone)
    model.wait_for_rebuilds()
    keep = ~np.isin(ids, gone)
    refit = QSSClassifier(**FAST).fit(F[keep], y[keep], ids[keep])
    assert_same_model(model, refit, F)
    assert model.score(F, y) > 0.9
