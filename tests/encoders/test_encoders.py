"""Tests for forgetting.encoders: the protocol, determinism, the embedding cache, install hints.

LightGBM and all-MiniLM-L6-v2 come from installed packages: when one is missing its tests skip
with the install command as the reason, unless FORGETTING_REQUIRE_DATA=1 (CI), where they fail
instead -- a broken install must never turn into silently skipped coverage. The cache logic is
also tested with a stand-in model, so it is covered even where torch is not installed.
"""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import source_missing
from sklearn.datasets import make_classification, make_regression

from forgetting import encoders as fe
from forgetting.encoders import (
    Encoder,
    EncoderUnavailableError,
    IdentityEncoder,
    LightGBMLeafContrib,
    MiniLMEncoder,
)
from forgetting.encoders import tabular as T
from forgetting.encoders import text as TX

# --------------------------------------------------------------------------- protocol


def test_protocol_flags() -> None:
    assert IdentityEncoder.learned is False
    assert MiniLMEncoder.learned is False
    assert LightGBMLeafContrib.learned is True
    for cls in (IdentityEncoder, MiniLMEncoder, LightGBMLeafContrib):
        assert issubclass(cls, Encoder)
    assert set(fe.__all__) >= {"Encoder", "IdentityEncoder", "LightGBMLeafContrib", "MiniLMEncoder"}


def test_identity_is_a_float32_copy() -> None:
    X = np.arange(6, dtype=np.float64).reshape(3, 2)
    enc = IdentityEncoder()
    assert enc.fit(X, None, 0) is enc  # frozen: fit learns nothing
    out = enc.transform(X)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, X.astype(np.float32))
    X32 = np.asfortranarray(np.ones((2, 3), np.float32))
    out32 = enc.transform(X32)
    assert out32.flags.c_contiguous and not np.shares_memory(out32, X32)
    with pytest.raises(ValueError, match="2-D"):
        enc.transform(np.zeros(3))


# --------------------------------------------------------------------------- LightGBM


@pytest.fixture(scope="module")
def lgb_ok() -> None:
    try:
        T._import_lightgbm()
    except EncoderUnavailableError as err:
        source_missing(err)


def _binary(n: int = 400, d: int = 7, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    X, y = make_classification(n_samples=n, n_features=d, n_informative=4, random_state=seed)
    return X.astype(np.float32), y


def test_lightgbm_binary_shape_dtype_and_meaning(lgb_ok: None) -> None:
    X, y = _binary()
    enc = LightGBMLeafContrib(n_estimators=10).fit(X[:200], y[:200], seed=0)
    out = enc.transform(X)
    assert out.shape == (400, 8) == (len(X), enc.output_dim)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    # TreeSHAP contributions + bias add up to the model's raw score.
    raw = enc.booster_.predict(X, raw_score=True)
    np.testing.assert_allclose(out.astype(np.float64).sum(axis=1), raw, atol=1e-4)
    assert np.unique(out[:, -1]).size == 1  # the bias column is the same for every row


def test_lightgbm_deterministic_and_row_wise(lgb_ok: None) -> None:
    X, y = _binary(seed=1)
    a = LightGBMLeafContrib(n_estimators=12).fit(X[:150], y[:150], seed=3)
    b = LightGBMLeafContrib(n_estimators=12).fit(X[:150], y[:150], seed=3)
    assert a.booster_.model_to_string() == b.booster_.model_to_string()
    full = a.transform(X)
    assert np.array_equal(full, b.transform(X))  # bit-identical, not just close
    assert np.array_equal(full[37:41], a.transform(X[37:41]))  # a row's code ignores the others
    assert np.array_equal(full[[5]], a.transform(X[5:6]))


def test_lightgbm_pickles_canonically(lgb_ok: None) -> None:
    """Equal models pickle to equal bytes, before and after a round trip (pickles get hashed)."""
    X, y = _binary(n=200, seed=2)
    a = LightGBMLeafContrib(n_estimators=6).fit(X, y, seed=0)
    b = copy.deepcopy(LightGBMLeafContrib(n_estimators=6)).fit(X, y, seed=0)
    blob = pickle.dumps(a, protocol=5)
    assert pickle.dumps(b, protocol=5) == blob
    loaded = pickle.loads(blob)
    assert pickle.dumps(loaded, protocol=5) == blob
    assert np.array_equal(loaded.transform(X), a.transform(X))
    assert np.array_equal(copy.deepcopy(a).transform(X), a.transform(X))
    unfitted = pickle.loads(pickle.dumps(LightGBMLeafContrib()))
    assert unfitted.booster_ is None


def test_lightgbm_multiclass_width_and_n_classes(lgb_ok: None) -> None:
    X, y = make_classification(
        n_samples=300, n_features=5, n_informative=4, n_redundant=0, n_classes=4, random_state=0
    )
    enc = LightGBMLeafContrib(n_estimators=5).fit(X, y, seed=0)
    assert enc.objective_ == "multiclass" and enc.transform(X).shape == (300, 4 * 6)
    # A D° that misses class 3 keeps the full width when n_classes is given.
    seen = y < 3
    wide = LightGBMLeafContrib(n_estimators=5, n_classes=4).fit(X[seen], y[seen], seed=0)
    assert wide.transform(X[:3]).shape == (3, 4 * 6)
    with pytest.raises(ValueError, match="labels must lie"):
        LightGBMLeafContrib(n_classes=3).fit(X, y, seed=0)


def test_lightgbm_regression(lgb_ok: None) -> None:
    X, y = make_regression(n_samples=200, n_features=4, random_state=0)
    enc = LightGBMLeafContrib(n_estimators=5).fit(X, y, seed=0)
    assert enc.objective_ == "regression"
    out = enc.transform(X)
    assert out.shape == (200, 5) and out.dtype == np.float32


def test_lightgbm_errors(lgb_ok: None) -> None:
    X, y = _binary(n=100)
    enc = LightGBMLeafContrib(n_estimators=3)
    with pytest.raises(RuntimeError, match="not fitted"):
        enc.transform(X)
    with pytest.raises(ValueError, match="needs y"):
        enc.fit(X)
    enc.fit(X, y, seed=0)
    with pytest.raises(ValueError, match="features"):
        enc.transform(X[:, :3])
    assert enc.transform(X[:0]).shape == (0, 8)
    with pytest.raises(ValueError, match="objective"):
        LightGBMLeafContrib(objective="ranking")  # type: ignore[arg-type]


def test_missing_lightgbm_names_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "_LIGHTGBM_MODULE", "forgetting_no_such_module_xyz")
    X, y = _binary(n=50)
    with pytest.raises(EncoderUnavailableError, match=r"forgetting\[tabular\]"):
        LightGBMLeafContrib().fit(X, y)


# --------------------------------------------------------------------------- MiniLM: cache logic


class _FakeModel:
    """Stands in for the network: deterministic vectors from the text, and a call log."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.empty((len(texts), TX.EMBEDDING_DIM), np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            out[i] = np.random.default_rng(seed).standard_normal(TX.EMBEDDING_DIM)
        return out


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> _FakeModel:
    """A MiniLMEncoder whose model is the fake (versions pinned so torch need not exist)."""
    model = _FakeModel()
    monkeypatch.setattr(TX, "_versions", lambda: {"fake": "1"})
    monkeypatch.setattr(MiniLMEncoder, "_embed", lambda self, texts: model(texts))
    return model


def test_cache_hit_returns_same_bits_without_the_model(fake: _FakeModel, tmp_path: Path) -> None:
    texts = ["good film", "bad film", "good film", "ünïcödé ✓"]
    first = MiniLMEncoder(cache_dir=tmp_path, progress=False).transform(texts)
    assert first.shape == (4, 384) and first.dtype == np.float32 and first.flags.c_contiguous
    assert fake.calls == [["good film", "bad film", "ünïcödé ✓"]]  # duplicates computed once
    np.testing.assert_array_equal(first[0], first[2])
    fake.calls.clear()
    again = MiniLMEncoder(cache_dir=tmp_path, progress=False).transform(np.array(texts, object))
    assert fake.calls == []  # every text was a cache hit: the model was never called
    assert again.tobytes() == first.tobytes()
    # A partly cached call computes only the new text, and keeps the order.
    mixed = MiniLMEncoder(cache_dir=tmp_path, progress=False).transform(["new", "bad film"])
    assert fake.calls == [["new"]]
    assert mixed[1].tobytes() == first[1].tobytes()


def test_cache_is_keyed_by_model_id_and_can_be_off(
    fake: _FakeModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = MiniLMEncoder(cache_dir=tmp_path, progress=False)
    a.transform(["x"])
    b = MiniLMEncoder(cache_dir=tmp_path, progress=False, batch_size=8)  # other batch shape
    assert b.cache_path != a.cache_path
    b.transform(["x"])
    off = MiniLMEncoder(cache=False, progress=False)
    off.transform(["x"])
    off.transform(["x"])
    assert len(fake.calls) == 4
    monkeypatch.setenv("FORGETTING_CACHE", str(tmp_path / "env"))
    assert MiniLMEncoder().cache_path.parent == tmp_path / "env" / "embeddings"


def test_cache_is_written_in_chunks(
    fake: _FakeModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted long run keeps what it computed before the interruption."""
    monkeypatch.setattr(TX, "_SAVE_EVERY", 2)
    texts = [f"sentence {i}" for i in range(5)]

    def flaky(self: MiniLMEncoder, batch: list[str]) -> np.ndarray:
        if "sentence 2" in batch:
            raise KeyboardInterrupt
        return fake(batch)

    with monkeypatch.context() as m:
        m.setattr(MiniLMEncoder, "_embed", flaky)
        with pytest.raises(KeyboardInterrupt):
            MiniLMEncoder(cache_dir=tmp_path, progress=False).transform(texts)
    fake.calls.clear()
    MiniLMEncoder(cache_dir=tmp_path, progress=False).transform(texts)
    assert fake.calls == [["sentence 2", "sentence 3"], ["sentence 4"]]


def test_text_input_validation(fake: _FakeModel, tmp_path: Path) -> None:
    enc = MiniLMEncoder(cache_dir=tmp_path, progress=False)
    with pytest.raises(TypeError, match="single str"):
        enc.transform("one sentence")
    with pytest.raises(TypeError, match="not a str"):
        enc.transform(["ok", 3])
    with pytest.raises(ValueError, match="1-D"):
        enc.transform(np.array([["a"]], dtype=object))
    assert enc.transform([]).shape == (0, 384)
    assert fake.calls == []
    enc._model = object()  # a loaded model is not pickled: it reloads from the package
    clone = pickle.loads(pickle.dumps(enc))
    assert clone._model is None and clone.cache_path == enc.cache_path


def test_missing_model_names_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TX, "_MODEL_PACKAGE", "forgetting_no_such_package_xyz")
    with pytest.raises(EncoderUnavailableError) as info:
        TX.locate_minilm()
    msg = str(info.value)
    assert "pip install torch --index-url" in msg and "forgetting[text]" in msg
    assert msg.index("pip install torch") < msg.index("forgetting[text]")  # torch first


def test_missing_runtime_names_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TX, "_RUNTIME_DISTS", ("forgetting-no-such-dist-xyz",))
    with pytest.raises(EncoderUnavailableError, match="pip install torch --index-url"):
        _ = MiniLMEncoder().model_id


# --------------------------------------------------------------------------- MiniLM: real model

SENTENCES = [
    "I love this movie.",
    "What a wonderful, heartwarming film!",
    "This was a complete waste of time.",
    "Terrible acting and a boring plot.",
    "ok",
    "The stock market fell sharply on Monday.",
    "Great service, friendly staff, will come back.",
    "The food was cold and the waiter was rude.",
    "  leading and trailing spaces  ",
    "Résumé with accents: café, naïve.",
    "lol :) <3",
    "Not bad at all, actually pretty good.",
    "I hate it.",
    "The plot twist at the end completely surprised me and I am still thinking about it.",
    "Absolutely fantastic!",
    "meh",
    "The rain in Spain stays mainly in the plain.",
    "This product broke after two days; do not buy.",
    "I love this movie.",  # a duplicate
    "",
]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEncoder:
    """One loaded model for the module (importing torch and loading takes a few seconds)."""
    enc = MiniLMEncoder(cache=False, progress=False)
    try:
        enc._load()
    except EncoderUnavailableError as err:
        source_missing(err)
    return enc


@pytest.fixture(scope="module")
def embedded(minilm: MiniLMEncoder) -> np.ndarray:
    """All of SENTENCES encoded in one call (computed once: encoding is the slow part)."""
    return minilm.transform(SENTENCES)


def test_minilm_shape_norm_and_meaning(embedded: np.ndarray) -> None:
    emb = embedded
    assert emb.shape == (20, 384) and emb.dtype == np.float32 and emb.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert emb[0].tobytes() == emb[18].tobytes()
    sim = emb @ emb.T
    assert sim[0, 1] > sim[0, 5] and sim[2, 3] > sim[2, 16]  # related > unrelated
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_minilm_row_is_a_pure_function_of_its_text(
    minilm: MiniLMEncoder, embedded: np.ndarray
) -> None:
    """A row's bits do not depend on the other sentences encoded with it (no padding effects).

    Plain sentence-transformers batching fails this (last-bit differences of ~2e-7).
    """
    for i in (0, 3, 13):  # alone: different batch neighbours and batch lengths
        assert minilm.transform([SENTENCES[i]]).tobytes() == embedded[i].tobytes(), i
    subset = [SENTENCES[i] for i in (13, 7, 2)]
    assert np.array_equal(minilm.transform(subset), embedded[[13, 7, 2]])


def test_minilm_cache_hit_skips_model(
    minilm: MiniLMEncoder, embedded: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    enc = MiniLMEncoder(cache_dir=tmp_path, progress=False)
    enc._model = minilm._model  # share the loaded weights
    first = enc.transform(SENTENCES[:3])
    assert first.tobytes() == embedded[:3].tobytes()

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was called on a cache hit")

    monkeypatch.setattr(MiniLMEncoder, "_load", boom)
    again = MiniLMEncoder(cache_dir=tmp_path, progress=False).transform(SENTENCES[:3])
    assert again.tobytes() == first.tobytes()
